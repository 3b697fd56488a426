//! One shard's CommitLog: RocketMQ message records, back to back, in
//! preallocated O_DIRECT segment files, appended with group commit.
//!
//! ```text
//!  <root>/commitlog/<shard>/00000000000000000000   [rec][rec]...[BLANK ...]
//!                           00000000001073741824   [rec][rec][rec]..  <- active
//!                           00000000002147483648   (created ahead of need)
//!                           00000000000000000000.spare  (retired, for reuse)
//! ```
//!
//! Offsets inside the shard ("local") grow from 0 and name the segments.
//! The offset the outside world sees (the record's PHYSICALOFFSET field, the
//! ConsumeQueue entries, msgIds) carries the shard id in its top
//! [`SHARD_ID_BITS`] bits: [`shard_offset`] and [`split_shard_offset`].
//!
//! Parts: [`segment`] (files), [`appender`] (group commit, positions),
//! `write_bufs` (the write buffers, which are the tail cache too),
//! [`recovery`] (the scan).
//!
//! # Invariants
//! - A record never crosses a segment end: when `size + 8` does not fit, an
//!   8-byte BLANK marker covers the rest of the segment (4.2) and the record
//!   starts the next one. A batch is never split.
//! - Reads never return bytes past the acknowledgeable position.
//! - Every record is encoded once, into a write buffer, and written and
//!   read back from there; written buffers stay as the tail cache, so every
//!   readable record is in memory until evicted.
//! - After an abnormal recovery, appends continue in a fresh zero-filled
//!   segment (the torn tail is fenced off by a durable BLANK marker), so no
//!   stale bytes from before the crash can ever follow a new record. When
//!   the disk has no room for that segment, the rest of the last one is
//!   zeroed in place (durably) and appends go on after its last record. A
//!   replication slave's log is the exception ([`CommitLogConfig::replica`],
//!   `replica` module).
//! - Retired segments may come back as later segments (spares, renamed by
//!   [`CommitLogConfig::recycle_segments_max`]): their stale records carry a
//!   PHYSICALOFFSET below their new position, which no scan accepts; a
//!   clean shutdown leaves at least 8 zero bytes after the end
//!   ([`CommitLog::zero_block_after_clean_end`]); and the segment barrier
//!   ([`appender`]) keeps a stale BLANK from leading a scan into records
//!   whose predecessors were lost.

pub mod appender;
pub mod crc_combine;
pub mod record_crc;
pub mod recovery;
mod replica;
mod ship;
mod span_reads;
pub use replica::{RecordMark, ReplicaChunk, ReplicaPosition, replica_whole_len};
pub use ship::{ShipPipe, Shipment};
pub mod segment;
pub(crate) mod write_bufs;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ringmq_protocol::limits::PROPERTIES_SIZE_MAX;
use ringmq_protocol::message::{RecordSpec, RecordView, crc32_ieee, encode_blank};

use self::appender::{
    Appender, FlushMode, Progress, SEQ_READ, SEQ_SEGMENT_CREATE, SEQ_SEGMENT_REMOVE,
    SEQ_SEGMENT_RETIRE, SEQ_SEGMENT_SHRINK, SEQ_SEGMENT_SPARE, SEQ_SHIP, SEQ_SPAN_READ,
    commit_log_op_id, op_counter, op_kind,
};
use self::recovery::{ScanOutcome, ScanStop, scan};
use self::segment::SegmentSet;
use crate::aligned::{AlignedBuf, BLOCK_SIZE, align_down, align_up, align_up_offset};
use crate::disk::{Disk, DiskCompletion, DiskOp, FileId, OpId, OpenOptions, Wait, created_file_id};
use crate::error::StorageError;
use crate::limits::{
    COMPLETIONS_PER_TURN_MAX, PENDING_WRITE_BYTES_MAX, RECORD_CRC_COMBINE_BODY_SIZE_MIN,
    RECORD_SIZE_MAX, SEGMENT_CREATE_FAILED_HOLD_MS, SEGMENT_CREATE_LOG_INTERVAL_MS,
    SEGMENT_CREATE_RETRY_MS, SEGMENT_CREATE_WAIT_MAX, SEGMENT_PREALLOCATE_THRESHOLD_PERCENT,
    SHARD_ID_BITS, SHARD_OFFSET_BITS, WRITE_BUFFER_SIZE, WRITE_PREFETCH_AHEAD_BYTES,
};

/// Bytes of the BLANK end-of-segment marker.
pub const BLANK_SIZE: usize = 8;

/// The outside-visible offset of shard-local `local` in shard `shard_id`.
pub fn shard_offset(shard_id: u8, local: u64) -> u64 {
    assert!(
        local < (1 << SHARD_OFFSET_BITS),
        "local offset {local} overflows {SHARD_OFFSET_BITS} bits"
    );
    (u64::from(shard_id) << SHARD_OFFSET_BITS) | local
}

/// The shard id and local offset of an outside-visible offset.
pub fn split_shard_offset(offset: u64) -> (u8, u64) {
    (
        (offset >> SHARD_OFFSET_BITS) as u8,
        offset & ((1 << SHARD_OFFSET_BITS) - 1),
    )
}

const _: () = assert!(SHARD_ID_BITS == 8);

/// Settings of one CommitLog.
#[derive(Clone, Debug)]
pub struct CommitLogConfig {
    /// `<root>/commitlog/<shard>`.
    pub dir: PathBuf,
    /// The shard id carried in outside-visible offsets.
    pub shard_id: u8,
    /// Segment size (block multiple).
    pub segment_size_bytes: u64,
    /// Flush mode.
    pub flush_mode: FlushMode,
    /// ASYNC_FLUSH fdatasync period.
    pub flush_interval_ms: u64,
    /// Tail cache size.
    pub tail_cache_bytes: usize,
    /// Segments retention retires that are kept as spares, to become later
    /// segments by a rename (0: retired segments are unlinked).
    pub recycle_segments_max: usize,
    /// A retired segment that is unlinked is first renamed to
    /// `<base>.removing` and shrunk by this many bytes at a time, each
    /// `ftruncate` after the previous one completed (0: unlinked at once).
    /// On a file system mounted with `discard` freeing a segment's extents
    /// discards them synchronously, and the CommitLog's writes queue behind
    /// the discard at the device: in steps, behind one step's.
    pub remove_step_bytes: u64,
    /// A replication slave's log, which holds only its master's bytes at
    /// the master's offsets (see the `replica` module): recovery continues
    /// after the last valid record instead of fencing the tail, since
    /// whatever follows it is either the master's own bytes at the same
    /// offsets, which the master sends again unchanged, or fails its checks.
    pub replica: bool,
}

/// A retired segment being shrunk before its unlink.
#[derive(Debug)]
struct Shrink {
    base: u64,
    /// `<base>.removing`.
    path: PathBuf,
    /// Open once the rename completed.
    file: Option<FileId>,
    /// Its length as far as completed steps know (a step in flight
    /// truncates it by `remove_step_bytes` more).
    len: u64,
}

/// What recovery found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Where the scan started.
    pub scanned_from: u64,
    /// The scan's result (`end` = after the last valid record).
    pub scan: ScanOutcome,
    /// Where appends continue (the scan end, or the next segment when the
    /// tail was fenced).
    pub append_from: u64,
    /// Whether a BLANK fence was written after the last valid record.
    pub fenced: bool,
    /// Segment files past the scan end's segment that were removed.
    pub segments_removed: usize,
}

/// The outcome of [`CommitLog::remove_segment`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentRemoval {
    /// Detached; its file is being removed in the background.
    Removed,
    /// Not all of it is durable yet: ask again later.
    NotYetDurable,
    /// Not the oldest segment, or the active one (or after it).
    NotRemovable,
}

/// Counters of segment creation ahead of need.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentStats {
    /// Segments created in the background.
    pub created_ahead: u64,
    /// Roll-overs into a segment that was ready.
    pub rollovers_ready: u64,
    /// Roll-overs that had to wait for the next segment's creation (appends
    /// outran it).
    pub rollovers_waited: u64,
    /// Background creations that failed (retried).
    pub create_failures: u64,
    /// Segments removed by retention (unlinked or kept as spares).
    pub removed: u64,
    /// Removed segments kept as spares.
    pub spared: u64,
    /// Segments made from a spare instead of a new file.
    pub recycled: u64,
    /// `ftruncate` steps of segments shrunk before their unlink.
    pub removal_steps: u64,
}

/// Where bytes of the log lie in their segment file: the block-aligned
/// read that covers them, and their place in it.
#[derive(Clone, Copy, Debug)]
struct SegmentRange {
    file: FileId,
    /// Aligned start of the read in the file.
    file_offset: u64,
    /// Bytes of the read before the wanted ones.
    skip: usize,
    /// Aligned length of the read.
    len: usize,
}

/// One shard's CommitLog (see the module doc).
#[derive(Debug)]
pub struct CommitLog {
    config: CommitLogConfig,
    segments: SegmentSet,
    appender: Appender,
    last_flush_ms: u64,
    /// Completions reaped while waiting for a synchronous read; handed to the
    /// store's next poll.
    stash: Vec<DiskCompletion>,
    /// Reads [`CommitLog::read`] waited for (bytes in no cache).
    sync_reads: u64,
    /// Min local offset (start of the oldest segment).
    min_offset: u64,
    /// Powers of `x` for the record CRC, kept from record to record.
    sealer: record_crc::Sealer,
    /// Base of the segment being created in the background, if one is.
    creating: Option<u64>,
    /// No background creation starts before this time (after a failure).
    create_retry_at_ms: u64,
    /// A background creation failed since the last turn.
    create_failed: bool,
    /// When a roll-over last failed to create its segment, and its base.
    create_wait_failed: Option<(Instant, u64)>,
    /// When a creation failure was logged last, and those not logged since.
    create_failure_logged: Option<(Instant, u64)>,
    /// Store timestamp of the first record of each segment (by base), where
    /// known: retention's age of the segment before it.
    first_store_timestamps: std::collections::BTreeMap<u64, i64>,
    /// Segment removals in flight (retention), renames into spares
    /// included.
    removing: usize,
    /// Spares ready to become the next segment (the last one goes first).
    spares: Vec<PathBuf>,
    /// Renames into spares in flight.
    sparing: usize,
    /// The segment being created comes from a spare.
    reusing: bool,
    /// Retired segments being shrunk before their unlink.
    shrinking: Vec<Shrink>,
    /// Where recovery wrote its fence (a BLANK), appends having gone on in
    /// the fresh segment after it (see [`CommitLog::open`]).
    fenced_at: Option<u64>,
    /// The last record (local offset, size), where known: always after an
    /// append, and on a replica after `open` (see `replica`).
    last_record: Option<(u64, u32)>,
    /// Reads for pulls (consumers' and slaves') in flight, and the spans
    /// they brought (see `span_reads`).
    span_reads: span_reads::SpanReads,
    /// Ranges being spliced into pipes (see `ship`).
    ships: ship::Ships,
    stats: SegmentStats,
}

impl CommitLog {
    /// Opens the CommitLog, scanning from local `scan_from`, verifying
    /// BODYCRC from `verify_crc_from`, calling `visit` for every valid
    /// record, truncating at the first invalid one. `scan_from` is a record
    /// boundary at or below the durable end (the checkpoint's confirmed
    /// offset bounds it); if the record there does not validate, the scan
    /// starts again from its segment's start instead.
    /// With `fence` (abnormal recovery) the tail past the last valid record
    /// is fenced off and appends continue in a fresh segment.
    ///
    /// # Errors
    /// Disk errors, [`StorageError::Corrupt`] for inconsistent segment files.
    pub fn open(
        disk: &mut impl Disk,
        config: CommitLogConfig,
        scan_from: u64,
        verify_crc_from: u64,
        fence: bool,
        now_ms: u64,
        visit: &mut dyn FnMut(u64, &RecordView<'_>),
    ) -> Result<(CommitLog, RecoveryReport), StorageError> {
        let size = config.segment_size_bytes;
        assert!(
            size.is_multiple_of(BLOCK_SIZE as u64),
            "segment size {size} is not a block multiple"
        );
        let mut segments = SegmentSet::open(disk, &config.dir, size)?;
        let first_base = segments.segments().first().map_or(0, |s| s.base);
        let segment_start = segments.base_of(scan_from).max(first_base);
        let mut scan_from = scan_from.max(first_base);
        let mut last_record = None;
        let mut scan_at = |disk: &mut _, from| {
            scan(
                disk,
                &segments,
                config.shard_id,
                from,
                verify_crc_from,
                &mut |local, view| {
                    last_record = Some((local, view.total_size()));
                    visit(local, view);
                },
            )
        };
        let mut outcome = scan_at(disk, scan_from)?;
        if scan_from > segment_start
            && outcome.record_count == 0
            && matches!(
                outcome.stop,
                ScanStop::Invalid { .. } | ScanStop::Stale { .. }
            )
        {
            tracing::warn!(
                scan_from,
                ?outcome.stop,
                "no valid record where the scan was to start; scanning from the segment start"
            );
            scan_from = segment_start;
            outcome = scan_at(disk, scan_from)?;
        }
        let end = outcome.end;
        let end_base = segments.base_of(end);
        let torn = matches!(outcome.stop, ScanStop::Invalid { .. });
        let fence_here = end != end_base && (fence || torn) && !config.replica;
        let next_base = end_base + size;
        let before = segments.segments().len();
        // After a fence appends go on in the next segment: a file already
        // there (created ahead of need) is kept to be truncated and filled
        // again in place, which takes no more space than it held; removing
        // it and creating another fails on a full disk.
        segments.remove_from(
            disk,
            if fence_here {
                next_base + size
            } else {
                next_base
            },
        )?;
        let segments_removed = before - segments.segments().len();
        if let ScanStop::Invalid { reason } = &outcome.stop {
            tracing::warn!(
                end,
                reason,
                "commit log truncated at the first invalid record"
            );
        }
        let mut fenced = false;
        let mut append_from = end;
        let mut partial = Vec::new();
        if end == end_base {
            // At a segment start: whatever the file holds is not ours.
            if segments.last().is_some_and(|s| s.base == end_base) {
                segments.recreate_last(disk)?;
            } else {
                segments.create(disk, end_base)?;
            }
        } else if fence_here {
            let fresh = if segments.last().is_some_and(|s| s.base == next_base) {
                segments.recreate_last(disk)
            } else {
                segments.create(disk, next_base).map(drop)
            };
            match fresh {
                Ok(()) => {
                    write_fence(disk, &segments, end)?;
                    fenced = true;
                    append_from = next_base;
                }
                Err(StorageError::Disk(error)) if error.is_no_space() => {
                    // A full disk: the rest of this segment, whose blocks
                    // are allocated, is zeroed in place instead, so no
                    // stale byte follows a new record either.
                    tracing::warn!(
                        %error,
                        end,
                        "no space for a fresh segment after recovery: the rest of the segment is zeroed and appends go on after its last record"
                    );
                    segments.discard_failed_create(disk, next_base)?;
                    partial = zero_tail_in_place(disk, &segments, end)?;
                }
                Err(error) => return Err(error),
            }
        } else {
            partial = partial_block(disk, &segments, end)?;
        }
        if config.replica && last_record.is_none() && append_from > first_base {
            // A slave proves its position to its master with its last record
            // (see `replica`): when the scan did not pass it, read the
            // segment that holds it once more (at most one segment, at open).
            let from = segments.base_of(append_from - 1).max(first_base);
            scan(
                disk,
                &segments,
                config.shard_id,
                from,
                u64::MAX,
                &mut |local, view| {
                    if local + u64::from(view.total_size()) <= append_from {
                        last_record = Some((local, view.total_size()));
                    }
                },
            )?;
        }
        let active = segments
            .get(append_from)
            .expect("the append segment exists");
        let buffer_size = WRITE_BUFFER_SIZE.min(size as usize);
        let appender = Appender::new(
            disk,
            config.flush_mode,
            active.file,
            active.base,
            append_from,
            &partial,
            buffer_size,
            config.tail_cache_bytes,
        );
        let spares = segments.open_spares(disk, config.recycle_segments_max)?;
        segments.remove_interrupted_removals(disk)?;
        let min_offset = segments.segments().first().map_or(0, |s| s.base);
        let mut first_store_timestamps = std::collections::BTreeMap::new();
        for segment in segments.segments() {
            if segment.base >= append_from {
                break;
            }
            if let Some(ts) = read_first_store_timestamp(disk, segment.file)? {
                first_store_timestamps.insert(segment.base, ts);
            }
        }
        let report = RecoveryReport {
            scanned_from: scan_from,
            scan: outcome,
            append_from,
            fenced,
            segments_removed,
        };
        let log = CommitLog {
            config,
            segments,
            appender,
            last_flush_ms: now_ms,
            stash: Vec::new(),
            sync_reads: 0,
            min_offset,
            sealer: record_crc::Sealer::default(),
            creating: None,
            create_retry_at_ms: 0,
            create_failed: false,
            create_wait_failed: None,
            create_failure_logged: None,
            first_store_timestamps,
            removing: 0,
            spares,
            sparing: 0,
            reusing: false,
            shrinking: Vec::new(),
            fenced_at: fenced.then_some(end),
            last_record,
            span_reads: span_reads::SpanReads::default(),
            ships: ship::Ships::default(),
            stats: SegmentStats::default(),
        };
        Ok((log, report))
    }

    /// The configuration.
    pub fn config(&self) -> &CommitLogConfig {
        &self.config
    }

    /// The write path's positions.
    pub fn appender(&self) -> &Appender {
        &self.appender
    }

    /// The segments.
    pub fn segments(&self) -> &SegmentSet {
        &self.segments
    }

    /// Outside-visible offset of the oldest byte kept.
    pub fn min_offset(&self) -> u64 {
        shard_offset(self.config.shard_id, self.min_offset)
    }

    /// Shard-local offset of the oldest byte kept.
    pub fn min_local_offset(&self) -> u64 {
        self.min_offset
    }

    /// Outside-visible offset after the last acknowledgeable record.
    pub fn max_offset(&self) -> u64 {
        shard_offset(self.config.shard_id, self.appender.ack_position())
    }

    /// Outside-visible offset after the last appended record.
    pub fn encoded_offset(&self) -> u64 {
        shard_offset(self.config.shard_id, self.appender.encoded())
    }

    /// Appends `records` atomically in one segment (their
    /// `commit_log_offset` is filled in), each with the whole-record CRC
    /// property of [`record_crc`] added; returns the local offset of the
    /// first and their sizes.
    ///
    /// # Errors
    /// [`StorageError::NotWritable`] after a disk failure,
    /// [`StorageError::MessageTooLarge`], [`StorageError::Busy`] when too much
    /// waits for the disk, disk errors creating the next segment,
    /// [`StorageError::Record`] from the codec.
    pub fn append(
        &mut self,
        disk: &mut impl Disk,
        records: &mut [RecordSpec<'_>],
    ) -> Result<(u64, Vec<u32>), StorageError> {
        let mut sizes = Vec::with_capacity(records.len());
        let first = self.append_into(disk, records, &mut sizes)?;
        Ok((first, sizes))
    }

    /// As [`CommitLog::append`], with the sizes written to `sizes` (cleared
    /// first), so a caller that reuses it appends without allocating.
    ///
    /// # Errors
    /// As [`CommitLog::append`].
    pub fn append_into(
        &mut self,
        disk: &mut impl Disk,
        records: &mut [RecordSpec<'_>],
        sizes: &mut Vec<u32>,
    ) -> Result<u64, StorageError> {
        self.check_writable()?;
        self.encode_records(disk, records, sizes)
    }

    /// Refuses appends once a commit log write failed.
    ///
    /// # Errors
    /// [`StorageError::NotWritable`].
    fn check_writable(&self) -> Result<(), StorageError> {
        match self.appender.failure() {
            Some(_) => Err(StorageError::NotWritable {
                reason: "a commit log write failed",
            }),
            None => Ok(()),
        }
    }

    /// Refuses `bytes` more while too much waits for the disk.
    ///
    /// # Errors
    /// [`StorageError::Busy`].
    fn check_pending_room(&self, bytes: usize) -> Result<(), StorageError> {
        if self.appender.pending_bytes() + bytes > PENDING_WRITE_BYTES_MAX {
            return Err(StorageError::Busy {
                pending_bytes: self.appender.pending_bytes(),
            });
        }
        Ok(())
    }

    /// The most bytes one append (a record or a whole batch) may take: a
    /// write buffer less a block (it must fit a fresh buffer after the
    /// partial block), and half a segment.
    fn batch_max(&self) -> usize {
        (self.appender.buffer_size() - BLOCK_SIZE)
            .min((self.config.segment_size_bytes as usize) / 2)
    }

    /// The end of the segment that holds local `offset`.
    pub(crate) fn segment_end(&self, offset: u64) -> u64 {
        let size = self.config.segment_size_bytes;
        (offset / size + 1) * size
    }

    /// Encodes `records` into the active buffer, each with its CRC trailer
    /// written in place after the caller's properties (so no spec is copied
    /// to swap its properties), and fills in their `commit_log_offset` and
    /// `body_crc`.
    fn encode_records(
        &mut self,
        disk: &mut impl Disk,
        records: &mut [RecordSpec<'_>],
        sizes: &mut Vec<u32>,
    ) -> Result<u64, StorageError> {
        sizes.clear();
        let mut total = 0usize;
        for spec in records.iter() {
            let added = record_crc::added_len(spec.properties);
            if spec.properties.len() + added > PROPERTIES_SIZE_MAX {
                return Err(StorageError::Record {
                    commit_log_offset: self.encoded_offset(),
                    reason: format!(
                        "properties of {} bytes, {} with the CRC property, over {PROPERTIES_SIZE_MAX}",
                        spec.properties.len(),
                        spec.properties.len() + added
                    ),
                });
            }
            let size = spec.encoded_len() + added;
            if size > RECORD_SIZE_MAX {
                return Err(StorageError::MessageTooLarge {
                    size,
                    max: RECORD_SIZE_MAX,
                });
            }
            total += size;
            sizes.push(size as u32);
        }
        let batch_max = self.batch_max();
        if total > batch_max {
            return Err(StorageError::MessageTooLarge {
                size: total,
                max: batch_max,
            });
        }
        if records.is_empty() {
            return Err(StorageError::InvalidArgument("empty batch".into()));
        }
        self.check_pending_room(total)?;
        let size = self.config.segment_size_bytes;
        let mut pos = self.appender.encoded();
        let segment_end = self.appender.active_segment_base() + size;
        if pos + (total + BLANK_SIZE) as u64 > segment_end {
            self.seal_segment(disk, pos, segment_end)?;
            pos = segment_end;
        }
        if self.appender.active().free_bytes() < total {
            self.appender.seal_active(disk, None);
        }
        let first = pos;
        let crc_combine_fast = crc_combine::is_hardware_accelerated();
        if pos.is_multiple_of(size) {
            self.first_store_timestamps
                .insert(pos, records[0].store_timestamp_ms);
        }
        for (spec, &size) in records.iter_mut().zip(sizes.iter()) {
            spec.commit_log_offset = shard_offset(self.config.shard_id, pos) as i64;
            // BODYCRC, computed once here, over the caller's body; it also
            // yields the record CRC by combination with the CRCs of the bytes
            // around the body instead of a second pass over the record (only
            // for a large body when the combination has no carry-less
            // multiplication, where it costs more than the pass).
            let body_crc_raw = crc32_ieee(spec.body);
            spec.body_crc = Some(body_crc_raw);
            // The size checked above, CRC property included.
            let n = size as usize;
            let active = self.appender.active();
            // The bytes ahead were last used a tail cache ago and are out of
            // the core's caches; fetched a few records early, the stores
            // into them do not miss, nor do the loads that wait behind those
            // stores stall (limits.rs).
            active.prefetch_for_write(WRITE_PREFETCH_AHEAD_BYTES, n);
            let tail = active.tail_mut();
            let encoded = spec
                .encode_into(tail)
                .map_err(|error| StorageError::Record {
                    commit_log_offset: shard_offset(self.config.shard_id, pos),
                    reason: error.to_string(),
                })?;
            finish_record(
                &mut tail[..n],
                encoded,
                spec,
                body_crc_raw,
                &mut self.sealer,
                crc_combine_fast,
            );
            self.appender.advance(n, None);
            pos += n as u64;
        }
        let last_size = *sizes.last().expect("a batch is not empty");
        self.last_record = Some((pos - u64::from(last_size), last_size));
        self.appender.mark_append_end(pos);
        Ok(first)
    }

    /// Writes the BLANK marker at `pos` and moves the active buffer to the
    /// next segment (created now if it was not ahead of need).
    fn seal_segment(
        &mut self,
        disk: &mut impl Disk,
        pos: u64,
        segment_end: u64,
    ) -> Result<(), StorageError> {
        let next = match self.segments.get(segment_end) {
            Some(segment) => {
                self.stats.rollovers_ready += 1;
                segment.file
            }
            None => {
                self.stats.rollovers_waited += 1;
                self.wait_for_segment(disk, segment_end)?
            }
        };
        if self.appender.active().free_bytes() < BLANK_SIZE {
            self.appender.seal_active(disk, None);
        }
        let blank_size = u32::try_from(segment_end - pos).expect("a segment remainder fits u32");
        encode_blank(self.appender.active().tail_mut(), blank_size).map_err(|error| {
            StorageError::Record {
                commit_log_offset: pos,
                reason: error.to_string(),
            }
        })?;
        self.appender.advance(BLANK_SIZE, Some(segment_end));
        self.appender.seal_active(disk, Some((next, segment_end)));
        Ok(())
    }

    /// Starts the next group commit, the ASYNC_FLUSH timer's fdatasync, and
    /// the creation of the next segment ahead of need. `partial_tail`: the
    /// caller is about to wait (or appends stopped), so a commit with none in
    /// flight writes the partial last block too (see
    /// [`Appender::start_commit`]).
    ///
    /// # Errors
    /// Disk errors of submission or segment creation.
    pub fn start_io(
        &mut self,
        disk: &mut impl Disk,
        now_ms: u64,
        partial_tail: bool,
    ) -> Result<(), StorageError> {
        self.appender.start_commit(disk, partial_tail)?;
        if self.appender.mode() == FlushMode::Async
            && now_ms.saturating_sub(self.last_flush_ms) >= self.config.flush_interval_ms
            && self.appender.start_flush(disk)?
        {
            self.last_flush_ms = now_ms;
        }
        self.prepare_next_segment(disk, now_ms);
        self.appender.evict_cache();
        Ok(())
    }

    /// Forces an fdatasync of written data now (shutdown, tests).
    ///
    /// # Errors
    /// Disk errors of submission.
    pub fn start_flush_now(&mut self, disk: &mut impl Disk) -> Result<(), StorageError> {
        self.appender.start_commit(disk, true)?;
        self.appender.start_flush(disk)?;
        Ok(())
    }

    /// Starts creating the segment after the active one in the background
    /// once the active one is [`SEGMENT_PREALLOCATE_THRESHOLD_PERCENT`] full.
    fn prepare_next_segment(&mut self, disk: &mut impl Disk, now_ms: u64) {
        if self.create_failed {
            self.create_failed = false;
            self.create_retry_at_ms = now_ms + SEGMENT_CREATE_RETRY_MS;
        }
        let size = self.config.segment_size_bytes;
        let base = self.appender.active_segment_base();
        let used = self.appender.encoded() - base;
        let last_base = self.segments.last().map_or(0, |s| s.base);
        if used * 100 >= size * SEGMENT_PREALLOCATE_THRESHOLD_PERCENT
            && last_base == base
            && self.creating.is_none()
            && now_ms >= self.create_retry_at_ms
            && let Err(error) = self.start_create(disk, base + size)
        {
            tracing::warn!(%error, "could not start creating the next commit log segment");
            self.create_retry_at_ms = now_ms + SEGMENT_CREATE_RETRY_MS;
        }
    }

    /// Submits the background creation of the segment at `base`: the
    /// rename of a spare when there is one (its extents are written, so
    /// appends into it convert none), else a new preallocated file.
    fn start_create(&mut self, disk: &mut impl Disk, base: u64) -> Result<(), StorageError> {
        assert!(self.creating.is_none(), "one segment creation at a time");
        let size = self.config.segment_size_bytes;
        let path = self.segments.dir().join(segment::segment_file_name(base));
        let op_id = commit_log_op_id(SEQ_SEGMENT_CREATE, base / size);
        if let Some(spare) = self.spares.pop() {
            // Stale records in it carry their old PHYSICALOFFSET, so no
            // scan takes them for records of this segment.
            disk.submit_rename(op_id, &spare, &path, Some(OpenOptions::existing_direct()))?;
            self.reusing = true;
        } else {
            disk.submit_create(op_id, &path, OpenOptions::create_direct(size))?;
            self.reusing = false;
        }
        self.creating = Some(base);
        Ok(())
    }

    /// Handles the completion of a background creation; gives its error
    /// back (after the bookkeeping) for a caller that waits for it.
    fn on_created(
        &mut self,
        result: Result<usize, crate::disk::DiskError>,
    ) -> Result<(), crate::disk::DiskError> {
        let base = self
            .creating
            .take()
            .expect("a creation completion while one is in flight");
        match result {
            Ok(id) => {
                let path = self.segments.dir().join(segment::segment_file_name(base));
                self.segments.push_created(base, created_file_id(id), path);
                self.stats.created_ahead += 1;
                if self.reusing {
                    self.stats.recycled += 1;
                }
                Ok(())
            }
            Err(error) => {
                self.stats.create_failures += 1;
                let interval = Duration::from_millis(SEGMENT_CREATE_LOG_INTERVAL_MS);
                match &mut self.create_failure_logged {
                    Some((at, unlogged)) if at.elapsed() < interval => *unlogged += 1,
                    logged => {
                        let unlogged = logged.map_or(0, |(_, unlogged)| unlogged);
                        tracing::warn!(%error, base, failures_not_logged = unlogged, "creating the next commit log segment failed; retrying");
                        *logged = Some((Instant::now(), 0));
                    }
                }
                // Retried by prepare_next_segment after a backoff that
                // starts at the next turn (no clock here).
                self.create_failed = true;
                Err(error)
            }
        }
    }

    /// Waits for the segment at `base` (appends outran its creation):
    /// starts its creation if none runs, then polls the disk until it is
    /// there; completions of other operations reaped meanwhile are stashed.
    fn wait_for_segment(
        &mut self,
        disk: &mut impl Disk,
        base: u64,
    ) -> Result<FileId, StorageError> {
        if let Some((at, failed_base)) = self.create_wait_failed
            && failed_base == base
            && at.elapsed() < Duration::from_millis(SEGMENT_CREATE_FAILED_HOLD_MS)
        {
            return Err(StorageError::NotWritable {
                reason: "the next commit log segment could not be created (retried each second)",
            });
        }
        tracing::warn!(
            base,
            in_flight = self.creating.is_some(),
            "appends outran the creation of the next commit log segment; waiting for it"
        );
        // A synchronous read may have stashed the creation's completion.
        if let Some(at) = self
            .stash
            .iter()
            .position(|completion| is_segment_create(completion.op_id))
        {
            let completion = self.stash.remove(at);
            // A failure is retried below.
            let _ = self.on_created(completion.result);
        }
        let mut attempts = 0;
        loop {
            if let Some(segment) = self.segments.get(base) {
                return Ok(segment.file);
            }
            if self.creating.is_none() {
                attempts += 1;
                self.start_create(disk, base)?;
            }
            let mut reaped = Vec::new();
            disk.poll(
                &mut reaped,
                COMPLETIONS_PER_TURN_MAX,
                Wait::AtLeastOne(std::time::Duration::from_millis(100)),
            )?;
            let mut failure = None;
            for completion in reaped {
                if is_segment_create(completion.op_id) {
                    if let Err(error) = self.on_created(completion.result)
                        && attempts >= SEGMENT_CREATE_WAIT_MAX
                    {
                        failure = Some(error);
                    }
                } else {
                    self.stash.push(completion);
                }
            }
            if let Some(error) = failure {
                tracing::error!(%error, base, "the next commit log segment could not be created");
                self.create_wait_failed = Some((Instant::now(), base));
                return Err(error.into());
            }
        }
    }

    /// Handles a completion tagged [`crate::disk::OpTag::CommitLog`].
    pub fn on_completion(&mut self, disk: &mut impl Disk, completion: DiskCompletion) -> Progress {
        match op_kind(completion.op_id) {
            SEQ_SEGMENT_CREATE => {
                // A failure is logged and retried after a backoff.
                let _ = self.on_created(completion.result);
                Progress::default()
            }
            SEQ_SEGMENT_REMOVE => {
                self.removing -= 1;
                if let Err(error) = completion.result {
                    tracing::warn!(%error, "removing an expired commit log segment failed");
                }
                Progress::default()
            }
            SEQ_SEGMENT_RETIRE | SEQ_SEGMENT_SHRINK => {
                self.on_shrink_completion(disk, completion.op_id, completion.result);
                Progress::default()
            }
            SEQ_SEGMENT_SPARE => {
                self.removing -= 1;
                self.sparing -= 1;
                let size = self.config.segment_size_bytes;
                let base = op_counter(completion.op_id) * size;
                match completion.result {
                    Ok(_) => {
                        let spare = self.segments.dir().join(segment::spare_file_name(base));
                        self.spares.push(spare);
                        self.stats.spared += 1;
                    }
                    Err(error) => tracing::warn!(
                        %error,
                        base,
                        "keeping an expired commit log segment as a spare failed"
                    ),
                }
                Progress::default()
            }
            SEQ_SPAN_READ => {
                self.on_span_read(completion);
                Progress::default()
            }
            SEQ_SHIP => {
                self.on_ship(disk, completion);
                Progress::default()
            }
            _ => self.appender.on_completion(
                disk,
                completion.op_id,
                completion.result,
                completion.buf,
            ),
        }
    }

    /// How many reads [`CommitLog::read`] waited for, its bytes in no cache
    /// (each holds the caller's thread on the disk).
    pub fn sync_reads(&self) -> u64 {
        self.sync_reads
    }

    /// Counters of segment creation and removal.
    pub fn segment_stats(&self) -> SegmentStats {
        self.stats
    }

    /// Whether the next segment is being created in the background.
    pub fn is_creating_segment(&self) -> bool {
        self.creating.is_some()
    }

    /// Segment removals still in flight.
    pub fn removals_in_flight(&self) -> usize {
        self.removing
    }

    /// The segments up to the active one, as retention sees them: each
    /// with the store timestamp after its last record (the first record of
    /// the next segment), or `i64::MAX` when not known yet (never expires).
    /// Segments created ahead of need are left out, so the active segment is
    /// the last one, which retention keeps, as Java keeps its last file.
    ///
    /// While appends are in the fresh segment an abnormal recovery started,
    /// the list ends at the segment it fenced off instead: Java's recovery
    /// goes on writing in that segment, and so keeps it as its last file
    /// however full the disk; here a forced clean (disk above
    /// `diskSpaceCleanForciblyRatio`) at the first turn after a crash took
    /// every message from before it.
    pub fn retention_segments(&self) -> Vec<crate::retention::SegmentInfo> {
        let active = self.appender.active_segment_base();
        let size = self.config.segment_size_bytes;
        let last = match self.fenced_at.map(|at| at / size * size) {
            Some(fenced) if fenced + size == active => fenced,
            _ => active,
        };
        self.segments
            .segments()
            .iter()
            .take_while(|s| s.base <= last)
            .map(|s| crate::retention::SegmentInfo {
                base_offset: s.base,
                last_modified_ms: self
                    .first_store_timestamps
                    .get(&(s.base + size))
                    .copied()
                    .unwrap_or(i64::MAX),
            })
            .collect()
    }

    /// Retention: detaches the oldest segment if it is at `base`, is not the
    /// active one, and all of it is durable, and starts removing its file in
    /// the background; the min offset moves past it at once (reads below it
    /// answer None). With `recycle` and room in the spare pool
    /// ([`CommitLogConfig::recycle_segments_max`]) the file is renamed into
    /// a spare instead of unlinked.
    ///
    /// # Errors
    /// Disk errors closing the file or queueing the removal.
    pub fn remove_segment(
        &mut self,
        disk: &mut impl Disk,
        base: u64,
        recycle: bool,
    ) -> Result<SegmentRemoval, StorageError> {
        let size = self.config.segment_size_bytes;
        let Some(first) = self.segments.segments().first() else {
            return Ok(SegmentRemoval::NotRemovable);
        };
        if first.base != base || base + size > self.appender.active_segment_base() {
            return Ok(SegmentRemoval::NotRemovable);
        }
        if base + size > self.appender.durable() {
            return Ok(SegmentRemoval::NotYetDurable);
        }
        let segment = self.segments.take_oldest().expect("checked above");
        disk.close(segment.file)?;
        self.min_offset = base + size;
        self.first_store_timestamps.remove(&base);
        if recycle && self.spares.len() + self.sparing < self.config.recycle_segments_max {
            let spare = self.segments.dir().join(segment::spare_file_name(base));
            disk.submit_rename(
                commit_log_op_id(SEQ_SEGMENT_SPARE, base / size),
                &segment.path,
                &spare,
                None,
            )?;
            self.sparing += 1;
        } else if self.config.remove_step_bytes > 0 && size > self.config.remove_step_bytes {
            // Renamed first: a crash must not leave a short file under a
            // segment's name (open would refuse it); a `.removing` file is
            // removed by the next open.
            let path = self.segments.dir().join(segment::removing_file_name(base));
            disk.submit_rename(
                commit_log_op_id(SEQ_SEGMENT_RETIRE, base / size),
                &segment.path,
                &path,
                Some(OpenOptions::buffered(None)),
            )?;
            self.shrinking.push(Shrink {
                base,
                path,
                file: None,
                len: size,
            });
        } else {
            disk.submit_remove(
                commit_log_op_id(SEQ_SEGMENT_REMOVE, base / size),
                &segment.path,
            )?;
        }
        self.removing += 1;
        self.stats.removed += 1;
        Ok(SegmentRemoval::Removed)
    }

    /// The rename of a retired segment to `<base>.removing`, or one of its
    /// `ftruncate` steps, completed: submits the next step, or closes and
    /// unlinks the file once it is empty or a step failed (Linux before 6.9
    /// has no ring `ftruncate`: EINVAL, and the file is unlinked whole).
    fn on_shrink_completion(
        &mut self,
        disk: &mut impl Disk,
        op_id: OpId,
        result: Result<usize, crate::disk::DiskError>,
    ) {
        let size = self.config.segment_size_bytes;
        let base = op_counter(op_id) * size;
        let Some(index) = self.shrinking.iter().position(|s| s.base == base) else {
            return;
        };
        let renamed = op_kind(op_id) == SEQ_SEGMENT_RETIRE;
        let step_ok = match result {
            Ok(value) if renamed => {
                self.shrinking[index].file = Some(created_file_id(value));
                true
            }
            Ok(_) => {
                let shrink = &mut self.shrinking[index];
                shrink.len = shrink.len.saturating_sub(self.config.remove_step_bytes);
                self.stats.removal_steps += 1;
                true
            }
            Err(error) if renamed => {
                // The file may be under either name and is not open: the
                // next open finds it (an expired segment, or `.removing`).
                tracing::warn!(%error, base, "renaming an expired commit log segment for removal failed");
                self.shrinking.swap_remove(index);
                self.removing -= 1;
                return;
            }
            Err(error) => {
                if error.raw_os_error() == Some(libc::EINVAL) {
                    tracing::debug!(
                        base,
                        "no ftruncate on this ring; unlinking the segment whole"
                    );
                } else {
                    tracing::warn!(%error, base, "shrinking an expired commit log segment failed; unlinking it whole");
                }
                false
            }
        };
        let step = self.config.remove_step_bytes;
        let shrink = &mut self.shrinking[index];
        let file = shrink.file.expect("renamed and opened before any step");
        if step_ok && shrink.len > 0 {
            let op = DiskOp::Truncate {
                file,
                len: shrink.len.saturating_sub(step),
            };
            match disk.submit(commit_log_op_id(SEQ_SEGMENT_SHRINK, base / size), op, false) {
                Ok(()) => return,
                Err((error, _)) => {
                    tracing::warn!(%error, base, "shrinking an expired commit log segment failed; unlinking it whole");
                }
            }
        }
        let shrink = self.shrinking.swap_remove(index);
        if let Err(error) = disk.close(file) {
            tracing::warn!(%error, base, "closing an expired commit log segment failed");
        }
        if let Err(error) = disk.submit_remove(
            commit_log_op_id(SEQ_SEGMENT_REMOVE, base / size),
            &shrink.path,
        ) {
            // Left for the next open to remove.
            tracing::warn!(%error, base, "removing an expired commit log segment failed");
            self.removing -= 1;
        }
    }

    /// Completions reaped during synchronous reads, for the caller's loop.
    pub fn take_stash(&mut self, out: &mut Vec<DiskCompletion>) {
        out.append(&mut self.stash);
    }

    /// The `size` bytes at outside-visible `offset`, if acknowledgeable:
    /// from the tail cache or a span a background read brought
    /// ([`CommitLog::start_span_read`]), else read from disk
    /// (synchronously; completions of other operations reaped meanwhile are
    /// stashed).
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`] for another shard's offset or a
    /// range across a segment end; disk errors of the read.
    pub fn read(
        &mut self,
        disk: &mut impl Disk,
        offset: u64,
        size: usize,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        let Some(local) = self.readable(offset, size)? else {
            return Ok(None);
        };
        if let Some(bytes) = self.cached_local(local, size) {
            return Ok(Some(bytes.to_vec()));
        }
        let Some(range) = self.segment_range(local, size)? else {
            return Ok(None);
        };
        self.sync_reads += 1;
        let buf = sync_read(
            disk,
            range.file,
            range.file_offset,
            range.len,
            &mut self.stash,
        )?;
        let bytes = buf
            .as_slice()
            .get(range.skip..range.skip + size)
            .map(<[u8]>::to_vec);
        disk.recycle(buf);
        Ok(bytes)
    }

    /// The shard-local offset of `size` bytes at outside-visible `offset`,
    /// if they are acknowledgeable and still kept.
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`] for another shard's offset.
    fn readable(&self, offset: u64, size: usize) -> Result<Option<u64>, StorageError> {
        let (shard, local) = split_shard_offset(offset);
        if shard != self.config.shard_id {
            return Err(StorageError::InvalidArgument(format!(
                "offset {offset} is shard {shard}'s"
            )));
        }
        let kept = local >= self.min_offset
            && local
                .checked_add(size as u64)
                .is_some_and(|end| end <= self.appender.ack_position());
        Ok(kept.then_some(local))
    }

    /// The block-aligned read of its segment that covers `size` bytes at
    /// shard-local `local`; None when no segment holds them.
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`] for a range across a segment end.
    fn segment_range(&self, local: u64, size: usize) -> Result<Option<SegmentRange>, StorageError> {
        let Some(segment) = self.segments.get(local) else {
            return Ok(None);
        };
        let in_segment = local - segment.base;
        if in_segment + size as u64 > self.segments.segment_size() {
            return Err(StorageError::InvalidArgument(format!(
                "range at {} crosses a segment end",
                shard_offset(self.config.shard_id, local)
            )));
        }
        let file_offset = align_down(in_segment);
        let skip = (in_segment - file_offset) as usize;
        Ok(Some(SegmentRange {
            file: segment.file,
            file_offset,
            skip,
            len: align_up(skip + size),
        }))
    }

    /// Removes the oldest segment if it ends at or below outside-visible
    /// `below` (retention); returns the new min offset if one went.
    ///
    /// # Errors
    /// Disk errors.
    pub fn remove_oldest_segment(
        &mut self,
        disk: &mut impl Disk,
    ) -> Result<Option<u64>, StorageError> {
        if self.segments.segments().len() <= 2 {
            return Ok(None);
        }
        let active_base = self.appender.active_segment_base();
        let first = self.segments.segments()[0].base;
        if first + self.segments.segment_size() > active_base {
            return Ok(None);
        }
        self.segments.remove_oldest(disk)?;
        self.min_offset = self.segments.segments().first().map_or(0, |s| s.base);
        Ok(Some(self.min_offset()))
    }

    /// Visits every record again, from the first segment to the end found
    /// by `open` (recovery rebuilding the derived files after `open`; BODYCRC
    /// is not verified again). Call before any other operation is
    /// submitted.
    ///
    /// # Errors
    /// Disk errors of the reads.
    pub fn rescan(
        &mut self,
        disk: &mut impl Disk,
        visit: &mut dyn FnMut(u64, &RecordView<'_>),
    ) -> Result<ScanOutcome, StorageError> {
        scan(
            disk,
            &self.segments,
            self.config.shard_id,
            self.min_offset,
            u64::MAX,
            visit,
        )
    }

    /// Closes all files and gives buffers back. Call when idle.
    ///
    /// # Errors
    /// Disk errors of close.
    pub fn close(&mut self, disk: &mut impl Disk) -> Result<(), StorageError> {
        self.appender.release_buffers(disk);
        self.segments.close_all(disk)?;
        Ok(())
    }

    /// Clean shutdown, when idle: makes the end mid-segment followed by
    /// at least 8 zero bytes, so that the normal restart's scan stops there
    /// as at a clean end. A commit zero-fills its partial last block; when
    /// fewer than 8 bytes of it follow the end (none for an end on a block
    /// boundary) this writes (and syncs) one zero block after it, over
    /// whatever a recycled segment held.
    ///
    /// # Errors
    /// Disk errors of the write or fdatasync.
    pub fn zero_block_after_clean_end(&mut self, disk: &mut impl Disk) -> Result<(), StorageError> {
        let end = self.appender.encoded();
        let base = self.appender.active_segment_base();
        let block = align_up_offset(end);
        if self.appender.failure().is_some()
            || !self.appender.is_idle()
            || end + BLANK_SIZE as u64 <= block
            || block >= base + self.config.segment_size_bytes
        {
            return Ok(());
        }
        let file = self
            .segments
            .get(base)
            .expect("the active segment is open")
            .file;
        let mut buf = disk.buffer(BLOCK_SIZE);
        buf.as_full_mut_slice()[..BLOCK_SIZE].fill(0);
        buf.set_len(BLOCK_SIZE);
        let mut stash = Vec::new();
        write_durably(disk, file, block - base, buf, &mut stash)?;
        self.stash.append(&mut stash);
        Ok(())
    }
}

/// Reads `len` bytes at `file_offset` of `file`, waiting for the result;
/// other completions reaped meanwhile go to `stash`. Continues short reads.
///
/// # Errors
/// The read's disk error; [`StorageError::Corrupt`] when the file ends early.
pub(crate) fn sync_read(
    disk: &mut impl Disk,
    file: FileId,
    file_offset: u64,
    len: usize,
    stash: &mut Vec<DiskCompletion>,
) -> Result<AlignedBuf, StorageError> {
    let mut out = disk.buffer(len);
    let mut done = 0;
    let mut counter = 0;
    while done < len {
        counter += 1;
        let piece = disk.buffer(len - done);
        let op = DiskOp::Read {
            file,
            file_offset: file_offset + done as u64,
            buf: piece,
            len: len - done,
        };
        let op_id = commit_log_op_id(SEQ_READ, counter);
        let (n, piece) = run_sync(disk, op_id, op, stash)?;
        let piece = piece.expect("a read gives its buffer back");
        if n == 0 {
            disk.recycle(piece);
            return Err(StorageError::Corrupt {
                path: PathBuf::new(),
                file_offset: file_offset + done as u64,
                reason: format!("file ends before {len} bytes at {file_offset}"),
            });
        }
        out.as_full_mut_slice()[done..done + n].copy_from_slice(&piece.as_slice()[..n]);
        disk.recycle(piece);
        done += n;
    }
    out.set_len(len);
    Ok(out)
}

/// Submits one operation and waits for it; other completions go to `stash`.
///
/// # Errors
/// The operation's disk error.
pub(crate) fn run_sync(
    disk: &mut impl Disk,
    op_id: OpId,
    op: DiskOp,
    stash: &mut Vec<DiskCompletion>,
) -> Result<(usize, Option<AlignedBuf>), StorageError> {
    disk.submit(op_id, op, false).map_err(|(error, _)| error)?;
    let mut reaped = Vec::new();
    loop {
        reaped.clear();
        disk.poll(
            &mut reaped,
            COMPLETIONS_PER_TURN_MAX,
            Wait::AtLeastOne(std::time::Duration::from_secs(1)),
        )?;
        let mut mine = None;
        for completion in reaped.drain(..) {
            if completion.op_id == op_id && mine.is_none() {
                mine = Some(completion);
            } else {
                stash.push(completion);
            }
        }
        if let Some(completion) = mine {
            let n = completion.result?;
            return Ok((n, completion.buf));
        }
    }
}

/// Finishes a record that `spec.encode_into` wrote as the first `encoded`
/// bytes of `record` (the record's whole size, CRC property included):
/// writes the CRC property's trailer, grows TOTALSIZE and the properties
/// length by it, and seals the record CRC, from the body's CRC
/// (`body_crc_raw`, unmasked) where `crc_combine_fast`
/// ([`crc_combine::is_hardware_accelerated`]) or the body is large, by a
/// full pass otherwise. What `CommitLog::append` does to each record after
/// encoding it; public for the `record_seal` micro-benchmark.
///
/// # Panics
/// If `record` is not `spec`'s encoding followed by room for the trailer.
pub fn finish_record(
    record: &mut [u8],
    encoded: usize,
    spec: &RecordSpec<'_>,
    body_crc_raw: u32,
    sealer: &mut record_crc::Sealer,
    crc_combine_fast: bool,
) {
    let added = record.len() - encoded;
    record_crc::write_trailer(spec.properties, &mut record[encoded..]);
    grow_last_field(record, spec.properties.len(), added);
    if crc_combine_fast || spec.body.len() >= RECORD_CRC_COMBINE_BODY_SIZE_MIN {
        let body = body_range(record, spec, spec.properties.len() + added);
        record_crc::seal_with_body_crc(record, body, body_crc_raw, sealer);
    } else {
        record_crc::seal(record);
    }
}

/// Adds `added` bytes, written after the record's properties, to its
/// TOTALSIZE and PROPERTIESLENGTH (`properties_len` is the latter before).
fn grow_last_field(record: &mut [u8], properties_len: usize, added: usize) {
    let total = record.len();
    record[..4].copy_from_slice(&(total as i32).to_be_bytes());
    let at = total - added - properties_len - 2;
    record[at..at + 2].copy_from_slice(&((properties_len + added) as i16).to_be_bytes());
}

/// Where `spec`'s body lies in `record`, its encoding with properties of
/// `properties_len` bytes: found from the end
/// (`[body][topic length][topic][properties length: 2][properties]`, the
/// topic length 1 byte in V1 records, 2 in V2) and checked against the
/// BODYLENGTH field before it.
///
/// # Panics
/// If the record is not `spec`'s encoding.
fn body_range(
    record: &[u8],
    spec: &RecordSpec<'_>,
    properties_len: usize,
) -> std::ops::Range<usize> {
    use ringmq_protocol::message::layout::{MAGIC_CODE_POSITION, MAGIC_CODE_V2};
    let magic = u32::from_be_bytes(
        record[MAGIC_CODE_POSITION..MAGIC_CODE_POSITION + 4]
            .try_into()
            .expect("4 bytes"),
    );
    let topic_length_size = if magic == MAGIC_CODE_V2 { 2 } else { 1 };
    let tail = topic_length_size + spec.topic.len() + 2 + properties_len;
    let end = record.len() - tail;
    let start = end - spec.body.len();
    let declared = u32::from_be_bytes(record[start - 4..start].try_into().expect("4 bytes"));
    assert_eq!(
        declared as usize,
        spec.body.len(),
        "BODYLENGTH does not match the body's place in the record"
    );
    start..end
}

/// Whether `op_id` is a CommitLog segment creation.
fn is_segment_create(op_id: OpId) -> bool {
    op_id.tag() == Some(crate::disk::OpTag::CommitLog) && op_kind(op_id) == SEQ_SEGMENT_CREATE
}

/// The store timestamp of the record at the start of `file`, if one is
/// there (a zeroed or BLANK start reads as None).
fn read_first_store_timestamp(
    disk: &mut impl Disk,
    file: FileId,
) -> Result<Option<i64>, StorageError> {
    use ringmq_protocol::message::layout::{
        HOST_SIZE_IPV4, HOST_SIZE_IPV6, MAGIC_CODE_POSITION, MAGIC_CODE_V1, MAGIC_CODE_V2,
        STORE_TIMESTAMP_POSITION_IPV4, SYS_FLAG_BORN_HOST_V6, SYS_FLAG_POSITION,
    };
    let mut stash = Vec::new();
    let buf = sync_read(disk, file, 0, BLOCK_SIZE, &mut stash)?;
    assert!(stash.is_empty(), "no other operation runs during recovery");
    let bytes = buf.as_slice();
    let be_u32 = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let magic = be_u32(MAGIC_CODE_POSITION);
    let found = if magic == MAGIC_CODE_V1 || magic == MAGIC_CODE_V2 {
        let sys_flag = be_u32(SYS_FLAG_POSITION) as i32;
        let at = if sys_flag & SYS_FLAG_BORN_HOST_V6 != 0 {
            STORE_TIMESTAMP_POSITION_IPV4 - HOST_SIZE_IPV4 + HOST_SIZE_IPV6
        } else {
            STORE_TIMESTAMP_POSITION_IPV4
        };
        Some(i64::from_be_bytes(
            bytes[at..at + 8].try_into().expect("8 bytes"),
        ))
    } else {
        None
    };
    disk.recycle(buf);
    Ok(found)
}

/// Writes a durable BLANK marker at local `end` (mid-segment), fencing off
/// whatever follows it.
fn write_fence(disk: &mut impl Disk, segments: &SegmentSet, end: u64) -> Result<(), StorageError> {
    let segment = segments.get(end).expect("the fenced segment exists");
    let size = segments.segment_size();
    let in_segment = end - segment.base;
    let block = align_down(in_segment);
    let mut stash = Vec::new();
    let mut buf = sync_read(disk, segment.file, block, BLOCK_SIZE, &mut stash)?;
    let at = (in_segment - block) as usize;
    // The marker's own 8 bytes must not cross the block: a record ends at
    // least 8 bytes before the segment end, and blocks divide the segment,
    // but the marker may straddle two blocks; write two blocks then.
    let span = align_up(at + BLANK_SIZE).max(BLOCK_SIZE);
    let mut whole = disk.buffer(span);
    whole.as_full_mut_slice()[..BLOCK_SIZE].copy_from_slice(&buf.as_full_slice()[..BLOCK_SIZE]);
    disk.recycle(std::mem::replace(&mut buf, AlignedBuf::new(BLOCK_SIZE)));
    whole.as_full_mut_slice()[at..].fill(0);
    let blank_size = u32::try_from(size - in_segment).expect("a segment remainder fits u32");
    encode_blank(&mut whole.as_full_mut_slice()[at..], blank_size).map_err(|error| {
        StorageError::Record {
            commit_log_offset: end,
            reason: error.to_string(),
        }
    })?;
    whole.set_len(span);
    write_durably(disk, segment.file, block, whole, &mut stash)?;
    assert!(stash.is_empty(), "no other operation runs during recovery");
    Ok(())
}

/// Zeroes the segment that holds `end` (not a segment start) from `end` to
/// its end, in place, and fdatasyncs it; returns the bytes of `end`'s block
/// before `end`, which the appender writes again. What an abnormal
/// recovery does instead of a fence when no fresh segment can be created.
fn zero_tail_in_place(
    disk: &mut impl Disk,
    segments: &SegmentSet,
    end: u64,
) -> Result<Vec<u8>, StorageError> {
    let segment = segments.get(end).expect("the scan end's segment exists");
    let size = segments.segment_size();
    let block = align_down(end - segment.base);
    let partial = partial_block(disk, segments, end)?;
    let at = partial.len();
    let mut stash = Vec::new();
    let mut offset = block;
    while offset < size {
        let len = (size - offset).min(ZERO_TAIL_WRITE_BYTES) as usize;
        let mut buf = disk.buffer(len);
        buf.as_full_mut_slice()[..len].fill(0);
        if offset == block {
            buf.as_full_mut_slice()[..at].copy_from_slice(&partial);
        }
        buf.set_len(len);
        let op = DiskOp::Write {
            file: segment.file,
            file_offset: offset,
            buf,
            buf_range: 0..len,
        };
        let (_, buf) = run_sync(disk, commit_log_op_id(SEQ_READ, 0), op, &mut stash)?;
        if let Some(buf) = buf {
            disk.recycle(buf);
        }
        offset += len as u64;
    }
    run_sync(
        disk,
        commit_log_op_id(SEQ_READ, 1),
        DiskOp::Fdatasync { file: segment.file },
        &mut stash,
    )?;
    assert!(stash.is_empty(), "no other operation runs during recovery");
    Ok(partial)
}

/// The bytes of the block that holds `end` (not a segment start) before
/// `end`: what the appender writes again in that block's first commit.
fn partial_block(
    disk: &mut impl Disk,
    segments: &SegmentSet,
    end: u64,
) -> Result<Vec<u8>, StorageError> {
    let segment = segments.get(end).expect("the scan end's segment exists");
    let in_segment = end - segment.base;
    let block = align_down(in_segment);
    let buf = sync_read(disk, segment.file, block, BLOCK_SIZE, &mut Vec::new())?;
    let partial = buf.as_slice()[..(in_segment - block) as usize].to_vec();
    disk.recycle(buf);
    Ok(partial)
}

/// Bytes of each write of [`zero_tail_in_place`].
const ZERO_TAIL_WRITE_BYTES: u64 = 1024 * 1024;

/// Writes all of `buf` (its length, block-aligned) at `file_offset` and
/// fdatasyncs `file`, waiting for both; other completions go to `stash`.
///
/// # Errors
/// Disk errors of the write or the fdatasync.
fn write_durably(
    disk: &mut impl Disk,
    file: FileId,
    file_offset: u64,
    buf: AlignedBuf,
    stash: &mut Vec<DiskCompletion>,
) -> Result<(), StorageError> {
    let len = buf.len();
    let op = DiskOp::Write {
        file,
        file_offset,
        buf,
        buf_range: 0..len,
    };
    let (_, buf) = run_sync(disk, commit_log_op_id(SEQ_READ, 0), op, stash)?;
    if let Some(buf) = buf {
        disk.recycle(buf);
    }
    run_sync(
        disk,
        commit_log_op_id(SEQ_READ, 1),
        DiskOp::Fdatasync { file },
        stash,
    )?;
    Ok(())
}
