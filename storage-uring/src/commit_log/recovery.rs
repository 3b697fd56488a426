//! The recovery scan: walks CommitLog segments from a start offset with
//! large sequential reads (several in flight), validates every record the
//! way RocketMQ's `checkMessageAndReturnSize` does (magic, TOTALSIZE, field
//! lengths, BODYCRC; remoting-protocol.md 6.9) plus our own check that
//! PHYSICALOFFSET equals the record's position and, where BODYCRC is
//! verified, the whole-record CRC property ([`super::record_crc`]; RocketMQ's
//! `forceVerifyPropCRC`), hands each valid record to a
//! visitor, and stops at the first invalid one. A recycled segment holds
//! records of its earlier life past the end; their PHYSICALOFFSET is below
//! their position, so they end the scan ([`ScanStop::Stale`]).
//!
//! ```text
//!  segment N:  [rec][rec][rec][BLANK .........]   -> continue in N+1
//!  segment N+1:[rec][rec][torn/zero ...........]   -> end = start of torn
//! ```
//!
//! # Invariants
//! - `end` is the offset after the last valid record (or the segment end
//!   after a valid BLANK); everything before it was visited, in order.
//! - Reads are block-aligned and whole; every read submitted is reaped
//!   before `scan` returns, also on error.

use std::collections::BTreeMap;

use ringmq_protocol::message::{
    CrcCheck, Decoded, RecordError, RecordView, decode_entry, verify_body_crc,
};

use super::record_crc;
use super::segment::{Segment, SegmentSet};
use super::shard_offset;
use crate::aligned::{AlignedBuf, BLOCK_SIZE, align_down};
use crate::disk::{Disk, DiskCompletion, DiskOp, OpId, OpTag, Wait};
use crate::error::StorageError;
use crate::limits::{
    COMPLETIONS_PER_TURN_MAX, RECORD_SIZE_MAX, RECOVERY_READ_SIZE, RECOVERY_READS_IN_FLIGHT_MAX,
};

/// Why a scan stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanStop {
    /// Zero bytes where the next record would start: the clean end.
    Zeros,
    /// The last segment ended with a BLANK marker.
    EndOfSegments,
    /// A valid record of the file's earlier life (a recycled segment): its
    /// PHYSICALOFFSET is below its position. After a clean shutdown this is
    /// the clean end, as zeros are.
    Stale {
        /// The record's PHYSICALOFFSET.
        physical_offset: u64,
    },
    /// Bytes that are not a valid record (a torn or corrupt tail).
    Invalid {
        /// Why.
        reason: String,
    },
}

/// The result of a scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Shard-local offset after the last valid record.
    pub end: u64,
    /// Why the scan stopped.
    pub stop: ScanStop,
    /// Records visited.
    pub record_count: u64,
    /// Store timestamp of the last record visited (0 if none).
    pub last_store_timestamp_ms: i64,
}

/// Scans from shard-local `from` (a record boundary) to the first invalid
/// record, verifying BODYCRC of records at or after `verify_crc_from`, and
/// calls `visit(local_offset, record)` for each valid record.
///
/// # Errors
/// Disk errors of the reads (an unreadable segment is not a torn tail).
pub fn scan(
    disk: &mut impl Disk,
    segments: &SegmentSet,
    shard_id: u8,
    from: u64,
    verify_crc_from: u64,
    visit: &mut dyn FnMut(u64, &RecordView<'_>),
) -> Result<ScanOutcome, StorageError> {
    let mut outcome = ScanOutcome {
        end: from,
        stop: ScanStop::EndOfSegments,
        record_count: 0,
        last_store_timestamp_ms: 0,
    };
    let Some(first) = segments.get(from) else {
        outcome.stop = ScanStop::Zeros;
        return Ok(outcome);
    };
    let first_index = segments
        .segments()
        .iter()
        .position(|s| s.base == first.base)
        .expect("segment exists");
    // Chunk buffers go from one segment's scanner to the next (no fresh
    // allocation per segment) and back to the disk at the end.
    let mut spare = Vec::new();
    let mut result = Ok(());
    for segment in &segments.segments()[first_index..] {
        if segment.base > outcome.end {
            break;
        }
        let mut scanner = SegmentScanner::new(
            segment,
            segments.segment_size(),
            outcome.end,
            std::mem::take(&mut spare),
        );
        let ran = scanner.run(disk, shard_id, verify_crc_from, &mut outcome, visit);
        let drained = scanner.drain(disk, &mut spare);
        match ran.and_then(|end| drained.map(|()| end)) {
            Ok(SegmentEnd::Blank) => {
                outcome.end = segment.base + segments.segment_size();
                outcome.stop = ScanStop::EndOfSegments;
            }
            Ok(SegmentEnd::Stopped) => break,
            Err(error) => {
                result = Err(error);
                break;
            }
        }
    }
    for buf in spare {
        disk.recycle(buf);
    }
    result.map(|()| outcome)
}

enum SegmentEnd {
    Blank,
    Stopped,
}

/// Reads one segment sequentially with several reads in flight.
struct SegmentScanner<'s> {
    segment: &'s Segment,
    segment_size: u64,
    /// Segment-relative offset of the next read to submit.
    next_read: u64,
    /// Segment-relative offset of `window[0]`.
    window_start: u64,
    /// The current chunk, scanned in place (not copied).
    window: AlignedBuf,
    /// A record that runs from one chunk into the next, assembled:
    /// `carry[0]` is at segment-relative `carry_start`, and the carry always
    /// ends at or after `window_start` (its tail is copied from `window`).
    carry: Vec<u8>,
    carry_start: u64,
    /// Chunk buffers given back by the scan, reused for the next reads (a
    /// read overwrites them, so they need no zeroing).
    spare: Vec<AlignedBuf>,
    /// Chunks read ahead, by segment-relative offset.
    arrived: BTreeMap<u64, AlignedBuf>,
    /// Segment-relative offset up to which data has entered the window.
    consumed_to: u64,
    in_flight: usize,
    /// Length asked for by each read in flight, by offset.
    requested: BTreeMap<u64, usize>,
    op_counter: u64,
    completions: Vec<DiskCompletion>,
    /// Powers of `x` for the record CRC check, kept from record to record.
    sealer: record_crc::Sealer,
}

impl<'s> SegmentScanner<'s> {
    fn new(segment: &'s Segment, segment_size: u64, from: u64, spare: Vec<AlignedBuf>) -> Self {
        let start = align_down(from - segment.base);
        SegmentScanner {
            segment,
            segment_size,
            next_read: start,
            window_start: start,
            window: AlignedBuf::new(0),
            carry: Vec::new(),
            carry_start: start,
            spare,
            arrived: BTreeMap::new(),
            consumed_to: start,
            in_flight: 0,
            requested: BTreeMap::new(),
            op_counter: 0,
            completions: Vec::new(),
            sealer: record_crc::Sealer::default(),
        }
    }

    /// Keeps up to [`RECOVERY_READS_IN_FLIGHT_MAX`] chunks read ahead of the
    /// window, counting those that arrived and wait to be scanned: the scan
    /// is slower than the disk here, and without that bound the reads ran
    /// ahead of it through the segment, each into a freshly allocated (and
    /// faulted-in) buffer.
    fn submit_reads(&mut self, disk: &mut impl Disk) -> Result<(), StorageError> {
        while self.in_flight + self.arrived.len() < RECOVERY_READS_IN_FLIGHT_MAX
            && self.next_read < self.segment_size
        {
            let len = (self.segment_size - self.next_read).min(RECOVERY_READ_SIZE as u64) as usize;
            self.submit_read(disk, self.next_read, len)?;
            self.next_read += len as u64;
        }
        Ok(())
    }

    fn submit_read(
        &mut self,
        disk: &mut impl Disk,
        file_offset: u64,
        len: usize,
    ) -> Result<(), StorageError> {
        let buf = match self.spare.pop() {
            Some(buf) if buf.capacity() >= len => buf,
            Some(small) => {
                disk.recycle(small);
                disk.buffer(len)
            }
            None => disk.buffer(len),
        };
        self.op_counter += 1;
        // The read's offset rides in the op id so completions can be put in order.
        assert!(
            file_offset < (1 << 48),
            "segment offset {file_offset} too large for an op id"
        );
        let op_id = OpId::new(OpTag::Recovery, file_offset);
        let op = DiskOp::Read {
            file: self.segment.file,
            file_offset,
            buf,
            len,
        };
        disk.submit(op_id, op, false).map_err(|(error, _)| error)?;
        self.requested.insert(file_offset, len);
        self.in_flight += 1;
        Ok(())
    }

    /// Blocks until the next in-order chunk is in the window; false at the
    /// segment end. Completed reads are reaped and replaced on every call,
    /// also when the chunk is already there, so the disk always has reads
    /// queued while chunks are scanned.
    fn fill(&mut self, disk: &mut impl Disk) -> Result<bool, StorageError> {
        let mut wait = Wait::No;
        loop {
            self.submit_reads(disk)?;
            if self.in_flight > 0 {
                self.reap(disk, wait)?;
                self.submit_reads(disk)?;
            }
            if let Some(buf) = self.arrived.remove(&self.consumed_to) {
                self.window_start = self.consumed_to;
                self.consumed_to += buf.len() as u64;
                let old = std::mem::replace(&mut self.window, buf);
                self.spare.push(old);
                return Ok(true);
            }
            if self.consumed_to >= self.segment_size {
                return Ok(false);
            }
            wait = Wait::AtLeastOne(std::time::Duration::from_secs(1));
        }
    }

    /// Reaps read completions (waiting as `wait` says) into `arrived`.
    fn reap(&mut self, disk: &mut impl Disk, wait: Wait) -> Result<(), StorageError> {
        self.completions.clear();
        disk.poll(&mut self.completions, COMPLETIONS_PER_TURN_MAX, wait)?;
        for completion in std::mem::take(&mut self.completions) {
            self.in_flight -= 1;
            assert!(
                completion.op_id.tag() == Some(OpTag::Recovery),
                "foreign completion during recovery"
            );
            let file_offset = completion.op_id.seq();
            let buf = completion.buf.expect("a read gives its buffer back");
            let n = match completion.result {
                Ok(n) => n,
                Err(error) => {
                    disk.recycle(buf);
                    return Err(error.into());
                }
            };
            let wanted = self
                .requested
                .remove(&file_offset)
                .expect("a read was requested there");
            if n == 0 || !n.is_multiple_of(BLOCK_SIZE) {
                disk.recycle(buf);
                return Err(StorageError::Corrupt {
                    path: self.segment.path.clone(),
                    file_offset,
                    reason: format!("read of {wanted} bytes returned {n}"),
                });
            }
            if n < wanted {
                // Short read: fetch the rest (its own entry in `arrived`).
                self.submit_read(disk, file_offset + n as u64, wanted - n)?;
            }
            self.arrived.insert(file_offset, buf);
        }
        Ok(())
    }

    fn run(
        &mut self,
        disk: &mut impl Disk,
        shard_id: u8,
        verify_crc_from: u64,
        outcome: &mut ScanOutcome,
        visit: &mut dyn FnMut(u64, &RecordView<'_>),
    ) -> Result<SegmentEnd, StorageError> {
        let base = self.segment.base;
        loop {
            let position = outcome.end - base;
            let (bytes, cursor) = if position < self.window_start {
                (&self.carry[..], (position - self.carry_start) as usize)
            } else {
                (
                    self.window.as_slice(),
                    (position - self.window_start) as usize,
                )
            };
            let in_carry = position < self.window_start;
            let available = &bytes[cursor.min(bytes.len())..];
            let available_len = available.len();
            let crc = if outcome.end >= verify_crc_from {
                CrcCheck::Verify
            } else {
                CrcCheck::Skip
            };
            // BODYCRC is checked here rather than by the decoder, so that
            // the body's CRC, computed once, serves the record CRC too.
            match decode_entry(available, CrcCheck::Skip) {
                Ok(Decoded::Record(view)) => {
                    let body_crc_raw = match crc {
                        CrcCheck::Verify => match verify_body_crc(&view) {
                            Ok(raw) => Some(raw),
                            Err(mismatch) => {
                                outcome.stop = ScanStop::Invalid {
                                    reason: mismatch.to_string(),
                                };
                                return Ok(SegmentEnd::Stopped);
                            }
                        },
                        CrcCheck::Skip => None,
                    };
                    let expected = shard_offset(shard_id, outcome.end);
                    let physical_offset = view.commit_log_offset() as u64;
                    if physical_offset < expected {
                        outcome.stop = ScanStop::Stale { physical_offset };
                        return Ok(SegmentEnd::Stopped);
                    }
                    if physical_offset != expected {
                        outcome.stop = ScanStop::Invalid {
                            reason: format!(
                                "PHYSICALOFFSET {} at {expected}",
                                view.commit_log_offset()
                            ),
                        };
                        return Ok(SegmentEnd::Stopped);
                    }
                    if let Some(raw) = body_crc_raw
                        && let Err(reason) = record_crc::verify_with_body_crc(
                            view.as_bytes(),
                            view.body_range(),
                            raw,
                            &mut self.sealer,
                        )
                    {
                        outcome.stop = ScanStop::Invalid { reason };
                        return Ok(SegmentEnd::Stopped);
                    }
                    visit(outcome.end, &view);
                    outcome.end += u64::from(view.total_size());
                    outcome.record_count += 1;
                    outcome.last_store_timestamp_ms = view.store_timestamp_ms();
                }
                Ok(Decoded::Blank { total_size }) => {
                    let segment_end = base + self.segment_size;
                    if outcome.end + u64::from(total_size) != segment_end {
                        outcome.stop = ScanStop::Invalid {
                            reason: format!(
                                "BLANK of {total_size} bytes at {} misses the segment end",
                                outcome.end
                            ),
                        };
                        return Ok(SegmentEnd::Stopped);
                    }
                    return Ok(SegmentEnd::Blank);
                }
                Err(RecordError::Truncated { needed, .. }) if needed <= RECORD_SIZE_MAX => {
                    // Only a record that runs into the next chunk is copied
                    // (into the carry); everything else is decoded in place.
                    let missing = needed - available_len;
                    if !in_carry {
                        let window = self.window.as_slice();
                        self.carry.clear();
                        self.carry
                            .extend_from_slice(&window[window.len() - available_len..]);
                        self.carry_start = position;
                    }
                    if !self.extend_carry(disk, missing)? {
                        outcome.stop = ScanStop::Invalid {
                            reason: "record runs past the segment end".into(),
                        };
                        return Ok(SegmentEnd::Stopped);
                    }
                }
                Err(error) => {
                    let zeros = available.len() >= 8 && available[..8].iter().all(|b| *b == 0);
                    outcome.stop = if zeros {
                        ScanStop::Zeros
                    } else {
                        ScanStop::Invalid {
                            reason: error.to_string(),
                        }
                    };
                    return Ok(SegmentEnd::Stopped);
                }
            }
        }
    }

    /// Appends `missing` more bytes to the carry, from the rest of the
    /// current chunk and then the next ones; false when the segment ends
    /// first.
    fn extend_carry(
        &mut self,
        disk: &mut impl Disk,
        mut missing: usize,
    ) -> Result<bool, StorageError> {
        loop {
            let carry_end = self.carry_start + self.carry.len() as u64;
            // Before the first chunk arrives (a scan starting inside a
            // chunk) the window may end before the carry does.
            if carry_end < self.window_start + self.window.len() as u64 {
                let window = self.window.as_slice();
                let from = (carry_end - self.window_start) as usize;
                let take = missing.min(window.len() - from);
                self.carry.extend_from_slice(&window[from..from + take]);
                missing -= take;
                if missing == 0 {
                    return Ok(true);
                }
            }
            // The carry holds the whole current chunk's tail: move on.
            if !self.fill(disk)? {
                return Ok(false);
            }
        }
    }

    /// Reaps reads still in flight (after a stop or an error) and moves
    /// every chunk buffer into `spare`.
    fn drain(
        &mut self,
        disk: &mut impl Disk,
        spare: &mut Vec<AlignedBuf>,
    ) -> Result<(), StorageError> {
        spare.append(&mut self.spare);
        spare.extend(std::mem::take(&mut self.arrived).into_values());
        let window = std::mem::replace(&mut self.window, AlignedBuf::new(0));
        if window.capacity() > 0 {
            spare.push(window);
        }
        while self.in_flight > 0 {
            self.completions.clear();
            disk.poll(
                &mut self.completions,
                COMPLETIONS_PER_TURN_MAX,
                Wait::AtLeastOne(std::time::Duration::from_secs(1)),
            )?;
            for completion in std::mem::take(&mut self.completions) {
                self.in_flight -= 1;
                if let Some(buf) = completion.buf {
                    spare.push(buf);
                }
            }
        }
        Ok(())
    }
}
