//! Reads of older CommitLog bytes in the background, for pulls: a span is
//! read through the ring while the shard goes on, and kept in a small
//! cache of recent spans ([`READ_CACHE_BYTES_MAX`],
//! [`READ_CACHE_SPANS_MAX`]) from which
//! [`CommitLog::read`] serves it afterwards. A pull that needs a span
//! neither the tail cache nor this cache holds starts its read
//! ([`CommitLog::start_span_read`]) and is executed again once the ticket
//! comes back from [`CommitLog::take_span_reads`].
//!
//! ```text
//!  pull ─ span not cached ─▶ start_span_read ─▶ ticket (pull parked)
//!  ring ─ read completes ─▶ on_span_read ─▶ span into the cache, ticket done
//!  turn ─ take_span_reads ─▶ the parked pull again ─▶ read() finds the span
//! ```
//!
//! # Invariants
//! - A cached span holds the log's bytes at its offset: the log is
//!   append-only and a span is only ever read from acknowledgeable bytes,
//!   so they never change; reads below the min offset answer None before
//!   the cache is looked at.
//! - Every ticket handed out comes back once from `take_span_reads`,
//!   whether its read succeeded or not (a failed read caches nothing).

use std::collections::VecDeque;

use super::CommitLog;
use super::appender::{SEQ_SPAN_READ, commit_log_op_id, op_counter};
use crate::disk::{Disk, DiskCompletion, DiskOp};
use crate::error::StorageError;
use crate::limits::{READ_CACHE_BYTES_MAX, READ_CACHE_SPANS_MAX};

/// A span read in flight.
#[derive(Debug)]
struct SpanRead {
    ticket: u64,
    /// Shard-local offset of the first byte wanted.
    from: u64,
    /// Bytes before `from` in the block-aligned read.
    skip: usize,
    /// Bytes wanted from `from`.
    len: usize,
}

/// The background reads of one CommitLog for pulls, and the spans they
/// brought.
#[derive(Debug, Default)]
pub(super) struct SpanReads {
    last_ticket: u64,
    in_flight: Vec<SpanRead>,
    done: Vec<u64>,
    /// (shard-local offset, bytes), oldest first.
    cache: VecDeque<(u64, Vec<u8>)>,
    cache_bytes: usize,
}

impl SpanReads {
    /// The cached bytes `[local, local + size)`, if one span holds them.
    pub(super) fn cached(&self, local: u64, size: usize) -> Option<&[u8]> {
        self.cache.iter().rev().find_map(|(start, bytes)| {
            let skip = usize::try_from(local.checked_sub(*start)?).ok()?;
            bytes.get(skip..skip.checked_add(size)?)
        })
    }

    fn insert(&mut self, local: u64, bytes: Vec<u8>) {
        self.cache_bytes += bytes.len();
        self.cache.push_back((local, bytes));
        while self.cache_bytes > READ_CACHE_BYTES_MAX || self.cache.len() > READ_CACHE_SPANS_MAX {
            let Some((_, old)) = self.cache.pop_front() else {
                break;
            };
            self.cache_bytes -= old.len();
        }
    }

    /// Forgets every cached span (the log was moved: see `restart_empty_at`).
    pub(super) fn clear_cache(&mut self) {
        self.cache.clear();
        self.cache_bytes = 0;
    }

    pub(super) fn in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }
}

impl CommitLog {
    /// Whether `size` bytes at outside-visible `offset` can be read now
    /// without the disk: acknowledgeable, and in the tail cache or in a span
    /// a background read brought.
    pub fn is_cached(&self, offset: u64, size: usize) -> bool {
        matches!(self.readable(offset, size), Ok(Some(local))
            if self.appender.cached(local, size).is_some()
                || self.span_reads.cached(local, size).is_some())
    }

    /// Starts reading `size` bytes at outside-visible `offset` (within one
    /// segment) in the background; the ticket comes back from
    /// [`CommitLog::take_span_reads`] once the bytes are cached (or the
    /// read failed). None when the range is not acknowledgeable or not
    /// kept (a synchronous [`CommitLog::read`] answers it at once).
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`] for another shard's offset or a
    /// range across a segment end; disk errors submitting the read.
    pub fn start_span_read(
        &mut self,
        disk: &mut impl Disk,
        offset: u64,
        size: usize,
    ) -> Result<Option<u64>, StorageError> {
        let Some(local) = self.readable(offset, size)? else {
            return Ok(None);
        };
        let Some(range) = self.segment_range(local, size)? else {
            return Ok(None);
        };
        self.span_reads.last_ticket += 1;
        let ticket = self.span_reads.last_ticket;
        let op = DiskOp::Read {
            file: range.file,
            file_offset: range.file_offset,
            buf: disk.buffer(range.len),
            len: range.len,
        };
        disk.submit(commit_log_op_id(SEQ_SPAN_READ, ticket), op, false)
            .map_err(|(error, _)| error)?;
        self.span_reads.in_flight.push(SpanRead {
            ticket,
            from: local,
            skip: range.skip,
            len: size,
        });
        Ok(Some(ticket))
    }

    /// The tickets of background span reads done since the last call.
    pub fn take_span_reads(&mut self, out: &mut Vec<u64>) {
        out.append(&mut self.span_reads.done);
    }

    /// A span read completed: what it brought goes into the cache (a short
    /// read, the whole blocks that came).
    pub(super) fn on_span_read(&mut self, disk: &mut impl Disk, completion: DiskCompletion) {
        let ticket = op_counter(completion.op_id);
        let Some(index) = self
            .span_reads
            .in_flight
            .iter()
            .position(|read| read.ticket == ticket)
        else {
            if let Some(buf) = completion.buf {
                disk.recycle(buf);
            }
            return;
        };
        let read = self.span_reads.in_flight.swap_remove(index);
        match (completion.result, completion.buf) {
            (Ok(n), Some(buf)) => {
                if n > read.skip {
                    let got = &buf.as_slice()[read.skip..n.min(read.skip + read.len)];
                    self.span_reads.insert(read.from, got.to_vec());
                }
                disk.recycle(buf);
            }
            (Ok(_), None) => {}
            (Err(error), buf) => {
                tracing::warn!(%error, from = read.from, "a background read for a pull failed");
                if let Some(buf) = buf {
                    disk.recycle(buf);
                }
            }
        }
        self.span_reads.done.push(ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_span_cache_finds_covered_ranges_and_keeps_its_bounds() {
        let mut reads = SpanReads::default();
        reads.insert(1_000, vec![1; 100]);
        reads.insert(1_050, vec![2; 100]);
        // The newest span that covers a range answers it.
        assert_eq!(reads.cached(1_060, 10), Some(&[2u8; 10][..]));
        assert_eq!(reads.cached(1_000, 50), Some(&[1u8; 50][..]));
        assert_eq!(reads.cached(1_000, 101), None);
        assert_eq!(reads.cached(999, 1), None);
        assert_eq!(reads.cached(1_140, 11), None);
        // At most READ_CACHE_SPANS_MAX spans: the oldest go first.
        for n in 0..READ_CACHE_SPANS_MAX as u64 {
            reads.insert(10_000 + n * 10, vec![3; 10]);
        }
        assert_eq!(reads.cache.len(), READ_CACHE_SPANS_MAX);
        assert_eq!(reads.cached(1_000, 1), None);
        assert!(reads.cached(10_000, 10).is_some());
        // At most READ_CACHE_BYTES_MAX bytes.
        reads.insert(u64::MAX / 2, vec![4; READ_CACHE_BYTES_MAX]);
        assert_eq!(reads.cache.len(), 1);
        assert_eq!(reads.cache_bytes, READ_CACHE_BYTES_MAX);
        reads.clear_cache();
        assert_eq!((reads.cache.len(), reads.cache_bytes), (0, 0));
    }
}
