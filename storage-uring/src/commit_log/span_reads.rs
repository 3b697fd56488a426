//! Reads of older CommitLog bytes in the background, for consumers' pulls
//! and slaves' replica pulls alike: a span is read through the ring while
//! the shard goes on, and kept in a small cache of recent spans
//! ([`READ_CACHE_BYTES_MAX`], [`READ_CACHE_SPANS_MAX`]) from which
//! [`CommitLog::read`] and [`CommitLog::replica_chunk`] serve it
//! afterwards. A pull that needs a span neither the tail cache nor this
//! cache holds starts its read ([`CommitLog::start_span_read`], or
//! `replica_chunk` itself) and is executed again once the ticket comes back
//! from [`CommitLog::take_span_reads`].
//!
//! ```text
//!  pull ─ span not cached ─▶ start_span_read ─▶ ticket (pull parked)
//!  ring ─ read completes ─▶ on_span_read ─▶ span into the cache, ticket done
//!  turn ─ take_span_reads ─▶ the parked pull again ─▶ read() finds the span
//! ```
//!
//! The read buffers are this module's own, never the disk's: a read of a
//! 4 MiB replica chunk would otherwise take one of the CommitLog's
//! registered write buffers while it is in flight, and a read needs no
//! zeroed buffer. A span stays in the buffer it was read into (no copy);
//! evicted buffers are kept for the next reads (at most
//! [`SPAN_READ_SPARES_MAX`], the largest).
//!
//! # Invariants
//! - A cached span holds the log's bytes at its offset: the log is
//!   append-only and a span is only ever read from acknowledgeable bytes,
//!   so they never change; reads below the min offset answer None before
//!   the cache is looked at.
//! - Every ticket handed out comes back once from `take_span_reads`,
//!   whether its read succeeded or not (a failed read caches nothing).

use std::collections::VecDeque;

use super::appender::{SEQ_SPAN_READ, commit_log_op_id, op_counter};
use super::{CommitLog, split_shard_offset};
use crate::aligned::AlignedBuf;
use crate::disk::{Disk, DiskCompletion, DiskOp};
use crate::error::StorageError;
use crate::limits::{
    PULL_READ_AHEAD_MAX, PULL_READ_OVERLAP_BYTES, PULL_READ_WINDOW_BYTES, READ_CACHE_BYTES_MAX,
    READ_CACHE_SPANS_MAX, SPAN_READ_SPARES_MAX,
};

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
    /// Whether a request waits for it (its ticket then comes back from
    /// `take_span_reads`); a read ahead of the pulls has none until a pull
    /// shares it.
    waited: bool,
}

/// A span a read brought, in the buffer it was read into (no copy).
#[derive(Debug)]
struct Span {
    /// Shard-local offset of its first byte.
    from: u64,
    buf: AlignedBuf,
    /// Where its bytes start in `buf` (the read was block-aligned).
    skip: usize,
    len: usize,
}

impl Span {
    fn bytes(&self) -> &[u8] {
        &self.buf.as_full_slice()[self.skip..self.skip + self.len]
    }

    /// Its bytes from shard-local `local` on, if it holds `local`.
    fn from(&self, local: u64) -> Option<&[u8]> {
        let skip = usize::try_from(local.checked_sub(self.from)?).ok()?;
        self.bytes().get(skip..)
    }
}

/// The background reads of one CommitLog for pulls, and the spans they
/// brought.
#[derive(Debug, Default)]
pub(super) struct SpanReads {
    last_ticket: u64,
    in_flight: Vec<SpanRead>,
    done: Vec<u64>,
    /// Oldest first.
    cache: VecDeque<Span>,
    /// The capacity of the cached spans' buffers.
    cache_bytes: usize,
    /// Buffers for the next reads.
    spares: Vec<AlignedBuf>,
}

impl SpanReads {
    /// The read in flight that brings all of shard-local `[local, end)`.
    fn in_flight_covering(&mut self, local: u64, end: u64) -> Option<&mut SpanRead> {
        self.in_flight
            .iter_mut()
            .find(|read| read.from <= local && end <= read.from + read.len as u64)
    }

    /// The cached bytes `[local, local + size)`, if one span holds them.
    pub(super) fn cached(&self, local: u64, size: usize) -> Option<&[u8]> {
        self.cache
            .iter()
            .rev()
            .find_map(|span| span.from(local)?.get(..size))
    }

    /// The cached bytes from `local` on, at most `max` of them, from the
    /// newest span that holds `local` (possibly fewer than `max`: a span
    /// that ends earlier, or a short read's).
    pub(super) fn cached_from(&self, local: u64, max: usize) -> Option<&[u8]> {
        let rest = self.cache[self.holding(local)?].from(local)?;
        Some(&rest[..rest.len().min(max)])
    }

    /// The index of the newest span holding a byte at `local`.
    fn holding(&self, local: u64) -> Option<usize> {
        self.cache
            .iter()
            .rposition(|span| span.from(local).is_some_and(|rest| !rest.is_empty()))
    }

    /// Drops the newest span holding `local` (its buffer to the spares):
    /// a slave's chunk is read once, and its next read reuses the buffer.
    pub(super) fn forget_span_holding(&mut self, local: u64) {
        if let Some(index) = self.holding(local)
            && let Some(span) = self.cache.remove(index)
        {
            self.cache_bytes -= span.buf.capacity();
            self.recycle(span.buf);
        }
    }

    /// A buffer of at least `len` bytes for a read: a spare of at most
    /// twice that, or a new one.
    fn buffer(&mut self, len: usize) -> AlignedBuf {
        match self
            .spares
            .iter()
            .position(|buf| buf.capacity() >= len && buf.capacity() / 2 <= len)
        {
            Some(index) => self.spares.swap_remove(index),
            None => AlignedBuf::new(len),
        }
    }

    /// Keeps `buf` for a later read; when enough are kept, in place of the
    /// smallest if it is larger (small buffers cost little to allocate, a
    /// replica chunk's 4 MiB are fresh pages to fault in).
    fn recycle(&mut self, buf: AlignedBuf) {
        if self.spares.len() < SPAN_READ_SPARES_MAX {
            self.spares.push(buf);
        } else if let Some(smallest) = self.spares.iter_mut().min_by_key(|spare| spare.capacity())
            && smallest.capacity() < buf.capacity()
        {
            *smallest = buf;
        }
    }

    /// Caches `len` bytes at `skip` in `buf`, read at shard-local `from`;
    /// the oldest spans go (their buffers to the spares) while the cache is
    /// over its bounds.
    fn insert(&mut self, from: u64, buf: AlignedBuf, skip: usize, len: usize) {
        self.cache_bytes += buf.capacity();
        self.cache.push_back(Span {
            from,
            buf,
            skip,
            len,
        });
        while self.cache_bytes > READ_CACHE_BYTES_MAX || self.cache.len() > READ_CACHE_SPANS_MAX {
            let Some(old) = self.cache.pop_front() else {
                break;
            };
            self.cache_bytes -= old.buf.capacity();
            self.recycle(old.buf);
        }
    }

    /// Forgets every cached span (the log was moved: see `restart_empty_at`).
    pub(super) fn clear_cache(&mut self) {
        while let Some(old) = self.cache.pop_front() {
            self.recycle(old.buf);
        }
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
        self.cached(offset, size).is_some()
    }

    /// The `size` bytes at outside-visible `offset` if they can be had
    /// without the disk (as [`CommitLog::is_cached`]).
    pub fn cached(&self, offset: u64, size: usize) -> Option<&[u8]> {
        let local = self.readable(offset, size).ok()??;
        self.cached_local(local, size)
    }

    /// The acknowledgeable `size` bytes at shard-local `local` from the
    /// tail cache or a cached span.
    pub(super) fn cached_local(&self, local: u64, size: usize) -> Option<&[u8]> {
        self.appender
            .cached(local, size)
            .or_else(|| self.span_reads.cached(local, size))
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
        match self.readable(offset, size)? {
            Some(local) => self.start_local_span_read(disk, local, size),
            None => Ok(None),
        }
    }

    /// [`CommitLog::start_span_read`] for a pull whose first record is the
    /// `size` bytes at outside-visible `offset`: reads the
    /// [`PULL_READ_WINDOW_BYTES`] window of the segment that holds it
    /// (aligned within the segment, cut at the acknowledgeable bytes,
    /// stretched to hold the whole record), so that the pulls after it, of
    /// its queue and of the queues whose records lie between, find theirs
    /// in the cache; a pull then takes the records up to the window's end
    /// and the next one reads the next window. A read in flight that
    /// already covers the record is shared: its ticket comes back, and
    /// every request parked on it runs again once it is done.
    ///
    /// # Errors
    /// As [`CommitLog::start_span_read`].
    pub fn start_pull_read(
        &mut self,
        disk: &mut impl Disk,
        offset: u64,
        size: usize,
    ) -> Result<Option<u64>, StorageError> {
        let Some(local) = self.readable(offset, size)? else {
            return Ok(None);
        };
        let end = local + size as u64;
        if let Some(read) = self.span_reads.in_flight_covering(local, end) {
            read.waited = true;
            return Ok(Some(read.ticket));
        }
        let (start, _, stop) = self.pull_window(local);
        self.start_local_read(disk, start, (stop.max(end) - start) as usize, true)
    }

    /// The pull window holding shard-local `local` (which must be kept and
    /// below the ack position): where its read starts and stops, and where
    /// the next window starts (shard-local). The read goes
    /// [`PULL_READ_OVERLAP_BYTES`] into the next window, so that a record
    /// that starts in this one and is no longer than that lies whole in it.
    fn pull_window(&self, local: u64) -> (u64, u64, u64) {
        let window = PULL_READ_WINDOW_BYTES as u64;
        let segment_end = self.segment_end(local);
        let base = segment_end - self.config.segment_size_bytes;
        let start = base + (local - base) / window * window;
        let next = (start + window).min(segment_end);
        let stop = (next + PULL_READ_OVERLAP_BYTES as u64)
            .min(segment_end)
            .min(self.appender.ack_position());
        (start.max(self.min_offset), next, stop)
    }

    /// Reads ahead of a consumer catching up: a pull took records up to
    /// outside-visible `offset` from the read cache, so the pulls after it
    /// will want the window holding `offset`, then the next: the first of
    /// the two that is neither in memory nor being read is read now, with
    /// no one waiting (at most [`PULL_READ_AHEAD_MAX`] such reads at once).
    ///
    /// # Errors
    /// Disk errors submitting the read.
    pub fn read_ahead(&mut self, disk: &mut impl Disk, offset: u64) -> Result<(), StorageError> {
        let (shard, mut local) = split_shard_offset(offset);
        let ahead = self
            .span_reads
            .in_flight
            .iter()
            .filter(|read| !read.waited)
            .count();
        if shard != self.config.shard_id || ahead >= PULL_READ_AHEAD_MAX {
            return Ok(());
        }
        for _ in 0..2 {
            if local < self.min_offset || local >= self.appender.ack_position() {
                return Ok(());
            }
            let (start, next, stop) = self.pull_window(local);
            let rest = (stop - local) as usize;
            let in_memory = self.cached_local(local, rest).is_some()
                || self.span_reads.in_flight_covering(local, stop).is_some();
            if !in_memory {
                self.start_local_read(disk, start, (stop - start) as usize, false)?;
                return Ok(());
            }
            local = next;
        }
        Ok(())
    }

    /// Starts reading, in the background, the record at outside-visible
    /// `offset` whose size is not known yet: `span` bytes from it, fewer
    /// where the acknowledgeable bytes or its segment end first (a record
    /// never crosses a segment end). The ticket comes back from
    /// [`CommitLog::take_span_reads`]; None when nothing at `offset` is
    /// acknowledgeable or kept.
    ///
    /// # Errors
    /// As [`CommitLog::start_span_read`].
    pub fn start_record_read(
        &mut self,
        disk: &mut impl Disk,
        offset: u64,
        span: usize,
    ) -> Result<Option<u64>, StorageError> {
        let Some(local) = self.readable(offset, 1)? else {
            return Ok(None);
        };
        let end = self.appender.ack_position().min(self.segment_end(local));
        let len = usize::try_from(end - local).map_or(span, |len| len.min(span));
        self.start_local_span_read(disk, local, len)
    }

    /// [`CommitLog::start_span_read`] of `size` acknowledgeable bytes at
    /// shard-local `local`.
    pub(super) fn start_local_span_read(
        &mut self,
        disk: &mut impl Disk,
        local: u64,
        size: usize,
    ) -> Result<Option<u64>, StorageError> {
        self.start_local_read(disk, local, size, true)
    }

    /// [`CommitLog::start_local_span_read`], its ticket given back by
    /// `take_span_reads` only when `waited` (or a pull shares it later).
    fn start_local_read(
        &mut self,
        disk: &mut impl Disk,
        local: u64,
        size: usize,
        waited: bool,
    ) -> Result<Option<u64>, StorageError> {
        let Some(range) = self.segment_range(local, size)? else {
            return Ok(None);
        };
        self.span_reads.last_ticket += 1;
        let ticket = self.span_reads.last_ticket;
        let op = DiskOp::Read {
            file: range.file,
            file_offset: range.file_offset,
            buf: self.span_reads.buffer(range.len),
            len: range.len,
        };
        if let Err((error, op)) = disk.submit(commit_log_op_id(SEQ_SPAN_READ, ticket), op, false) {
            if let DiskOp::Read { buf, .. } = op {
                self.span_reads.recycle(buf);
            }
            return Err(error.into());
        }
        self.span_reads.in_flight.push(SpanRead {
            ticket,
            from: local,
            skip: range.skip,
            len: size,
            waited,
        });
        Ok(Some(ticket))
    }

    /// The tickets of background span reads done since the last call.
    pub fn take_span_reads(&mut self, out: &mut Vec<u64>) {
        out.append(&mut self.span_reads.done);
    }

    /// A span read completed: what it brought goes into the cache (a short
    /// read, the whole blocks that came).
    pub(super) fn on_span_read(&mut self, completion: DiskCompletion) {
        let ticket = op_counter(completion.op_id);
        let Some(index) = self
            .span_reads
            .in_flight
            .iter()
            .position(|read| read.ticket == ticket)
        else {
            return;
        };
        let read = self.span_reads.in_flight.swap_remove(index);
        match (completion.result, completion.buf) {
            (Ok(n), Some(buf)) => {
                if n > read.skip {
                    let len = n.min(read.skip + read.len) - read.skip;
                    self.span_reads.insert(read.from, buf, read.skip, len);
                } else {
                    self.span_reads.recycle(buf);
                }
            }
            (Ok(_), None) => {}
            (Err(error), buf) => {
                tracing::warn!(%error, from = read.from, "a background read of the commit log failed");
                if let Some(buf) = buf {
                    self.span_reads.recycle(buf);
                }
            }
        }
        if read.waited {
            self.span_reads.done.push(ticket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer holding `len` bytes of `byte` after `skip` others.
    fn span(skip: usize, len: usize, byte: u8) -> AlignedBuf {
        let mut buf = AlignedBuf::new(skip + len);
        buf.as_full_mut_slice()[..skip].fill(byte.wrapping_add(1));
        buf.as_full_mut_slice()[skip..skip + len].fill(byte);
        buf
    }

    #[test]
    fn the_span_cache_finds_covered_ranges_and_keeps_its_bounds() {
        let mut reads = SpanReads::default();
        reads.insert(1_000, span(0, 100, 1), 0, 100);
        reads.insert(1_050, span(7, 100, 2), 7, 100);
        // The newest span that covers a range answers it.
        assert_eq!(reads.cached(1_060, 10), Some(&[2u8; 10][..]));
        assert_eq!(reads.cached(1_000, 50), Some(&[1u8; 50][..]));
        assert_eq!(reads.cached(1_000, 101), None);
        assert_eq!(reads.cached(999, 1), None);
        assert_eq!(reads.cached(1_140, 11), None);
        // A prefix: from the newest span holding the offset, up to its end.
        assert_eq!(reads.cached_from(1_140, 20), Some(&[2u8; 10][..]));
        assert_eq!(reads.cached_from(1_020, 20), Some(&[1u8; 20][..]));
        assert_eq!(reads.cached_from(1_060, 200), Some(&[2u8; 90][..]));
        assert_eq!(reads.cached_from(1_150, 1), None);
        assert_eq!(reads.cached_from(999, 1), None);
        // At most READ_CACHE_SPANS_MAX spans: the oldest go first.
        for n in 0..READ_CACHE_SPANS_MAX as u64 {
            reads.insert(10_000 + n * 10, span(0, 10, 3), 0, 10);
        }
        assert_eq!(reads.cache.len(), READ_CACHE_SPANS_MAX);
        assert_eq!(reads.cached(1_000, 1), None);
        assert_eq!(reads.cached(10_000, 10), Some(&[3u8; 10][..]));
        // Evicted buffers (the first two spans') become spares.
        assert_eq!(reads.spares.len(), 2);
        // At most READ_CACHE_BYTES_MAX bytes of buffers.
        reads.insert(
            u64::MAX / 2,
            span(0, READ_CACHE_BYTES_MAX, 4),
            0,
            READ_CACHE_BYTES_MAX,
        );
        assert_eq!(reads.cache.len(), 1);
        assert_eq!(reads.cache_bytes, READ_CACHE_BYTES_MAX);
        reads.clear_cache();
        assert_eq!((reads.cache.len(), reads.cache_bytes), (0, 0));
        // At most SPAN_READ_SPARES_MAX spares are kept, the largest.
        assert_eq!(reads.spares.len(), SPAN_READ_SPARES_MAX);
        assert!(
            reads
                .spares
                .iter()
                .any(|spare| spare.capacity() == READ_CACHE_BYTES_MAX)
        );
        // A spare of at least the length and at most twice it, or none.
        let spare = reads.buffer(READ_CACHE_BYTES_MAX / 2 + 1);
        assert_eq!(spare.capacity(), READ_CACHE_BYTES_MAX);
        assert_eq!(reads.buffer(100).capacity(), crate::aligned::BLOCK_SIZE);
    }
}
