//! Replication in one shard's CommitLog: the master reads whole records
//! from a slave's position ([`CommitLog::replica_chunk`]), and the slave
//! appends them verbatim at the same local offsets
//! ([`CommitLog::append_replicated`]), so both logs hold the same bytes and
//! a record's PHYSICALOFFSET (and so its msgId) is the same on both.
//!
//! The transfer format is the log itself, with one change: a segment's
//! BLANK marker is sent as its 8 bytes, without the padding after it (the
//! padding is zeros up to the segment end, which the slave knows).
//!
//! ```text
//!  master  [rec][rec][BLANK.....]|[rec][rec]   (segment end at |)
//!  stream  [rec][rec][BLANK]      [rec][rec]
//!  slave   [rec][rec][BLANK.....]|[rec][rec]   (same offsets, same bytes)
//! ```
//!
//! # Invariants
//! - The slave checks a whole chunk before it appends any of it: every
//!   record as recovery checks it (magic, sizes, BODYCRC, the record CRC
//!   property, PHYSICALOFFSET equal to its position), every BLANK ending
//!   its segment exactly, and the chunk ending at a record boundary. A
//!   chunk that fails is refused whole.
//! - The slave's segment size is the master's (a BLANK that does not end
//!   the slave's segment is refused), so the segment ends fall alike.
//! - A slave's crash recovery does not fence ([`super::CommitLogConfig::replica`]):
//!   its log ends after its last valid record, where the master's stream
//!   goes on. Bytes after that end are either the master's own record at
//!   the same offset (sent again unchanged, so a later scan that finds it
//!   finds what the master has) or fail the scan's checks.
//! - A master does not serve a position between the fence of its own last
//!   crash recovery and that segment's end: a slave there holds records
//!   the master lost.
//! - Before serving a slave, a master checks the slave's position
//!   ([`CommitLog::check_replica_position`]): it must hold the slave's last
//!   record byte for byte (CRC-32C) where the slave has it, followed by the
//!   slave's end or by a BLANK up to it, so a master that lost records and
//!   wrote others over the slave's position refuses it. A replica knows its
//!   last record after every append, and after `open` (which reads the
//!   segment holding it again when the recovery scan did not pass it).

use ringmq_protocol::message::{
    CrcCheck, Decoded, RecordError, RecordView, decode_entry, verify_body_crc,
};

use super::appender::Appender;
use super::{BLANK_SIZE, CommitLog, record_crc, shard_offset};
use crate::disk::Disk;
use crate::error::StorageError;
use crate::limits::{RECORD_SIZE_MAX, SHARD_OFFSET_BITS, WRITE_BUFFER_SIZE};

/// Where a slave's log ends, with what proves it is its master's there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaPosition {
    /// Shard-local offset after the slave's last record (or after the
    /// BLANK that follows it: a segment start).
    pub end: u64,
    /// The slave's last record; None for an empty log.
    pub last_record: Option<RecordMark>,
}

/// One record, identified by position, size and the CRC-32C of its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordMark {
    /// Shard-local offset.
    pub offset: u64,
    /// Its TOTALSIZE.
    pub size: u32,
    /// CRC-32C of its bytes.
    pub crc: u32,
}

/// One entry of a checked chunk.
enum Checked<'a> {
    /// A record at its local offset.
    Record(u64, RecordView<'a>),
    /// A BLANK at a local offset: the segment ends after it.
    Blank(u64),
}

impl CommitLog {
    /// Master side: whole records from local `from` (a record boundary, as
    /// a slave's end always is) up to at most `max_bytes`, within one
    /// segment and the acknowledgeable position; a BLANK ends the chunk
    /// (its 8 bytes only), and the next chunk starts at the next segment.
    /// Empty when nothing is acknowledgeable at `from` yet. A record larger
    /// than `max_bytes` comes whole all the same. From the tail cache or
    /// the span cache of background reads at once; otherwise, with
    /// `background`, the read starts as a span read
    /// ([`ReplicaChunk::Reading`]: call again, without `background`, once
    /// [`CommitLog::take_span_reads`] gives the ticket), so that a slave far
    /// behind never holds its master's shard on a disk read; without it
    /// read synchronously (a pull executed again after its read finds it in
    /// the span cache unless it was evicted or came short, and still gets
    /// an answer). A span that came short gives a shorter chunk.
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`] for `from` below the min offset
    /// (retention removed it), past the acknowledgeable position, or
    /// between the fence of the last crash recovery and its segment end;
    /// [`StorageError::Record`] when `from` is not a record boundary; disk
    /// errors reading or submitting the read.
    pub fn replica_chunk(
        &mut self,
        disk: &mut impl Disk,
        from: u64,
        max_bytes: usize,
        background: bool,
    ) -> Result<ReplicaChunk, StorageError> {
        self.check_replica_from(from)?;
        let bound = self.appender.ack_position().min(self.segment_end(from));
        let limit = (bound - from) as usize;
        let mut want = limit.min(max_bytes.max(BLANK_SIZE));
        // Each round answers, or grows `want` (up to `limit`), or reads.
        loop {
            if want == 0 {
                return Ok(ReplicaChunk::Bytes(Vec::new()));
            }
            let (cached, spanned) = match self.appender.cached(from, want) {
                Some(bytes) => (Some(bytes), false),
                None => (self.span_reads.cached_from(from, want), true),
            };
            let needed = match cached {
                Some(bytes) => match whole_prefix(self.config.shard_id, from, bytes, limit)? {
                    Whole::Bytes(len) => {
                        let chunk = bytes[..len].to_vec();
                        if spanned {
                            // Read for this chunk: no one else wants it.
                            self.span_reads.forget_span_holding(from);
                        }
                        return Ok(ReplicaChunk::Bytes(chunk));
                    }
                    Whole::NotYet => return Ok(ReplicaChunk::Bytes(Vec::new())),
                    Whole::Grow(needed) => needed,
                },
                None => 0,
            };
            if needed > want {
                want = needed;
                continue;
            }
            // Not cached, or a cached span shorter than the first record.
            if background {
                return match self.start_local_span_read(disk, from, want)? {
                    Some(ticket) => Ok(ReplicaChunk::Reading(ticket)),
                    None => Err(not_readable(from)),
                };
            }
            let offset = shard_offset(self.config.shard_id, from);
            let bytes = self
                .read(disk, offset, want)?
                .ok_or_else(|| not_readable(from))?;
            match whole_prefix(self.config.shard_id, from, &bytes, limit)? {
                Whole::Bytes(len) => return Ok(ReplicaChunk::Bytes(bytes[..len].to_vec())),
                Whole::NotYet => return Ok(ReplicaChunk::Bytes(Vec::new())),
                // The first record is longer than `want`: the next round
                // reads it whole.
                Whole::Grow(needed) => want = needed,
            }
        }
    }

    /// Where a slave continues after `chunk`, which
    /// [`CommitLog::replica_chunk`] gave from local `from`: its end, or the
    /// next segment's start when it ends with the segment's BLANK.
    pub fn replica_chunk_end(&self, from: u64, chunk: &[u8]) -> u64 {
        let end = from + chunk.len() as u64;
        let Some(last) = chunk.len().checked_sub(BLANK_SIZE).map(|at| &chunk[at..]) else {
            return end;
        };
        let at = end - BLANK_SIZE as u64;
        match decode_entry(last, CrcCheck::Skip) {
            Ok(Decoded::Blank { total_size })
                if at + u64::from(total_size) == self.segment_end(at) =>
            {
                self.segment_end(at)
            }
            _ => end,
        }
    }

    /// Master side: how many bytes from a slave's position, local `from`,
    /// to ship with splice ([`CommitLog::start_ship`]) rather than copy: up
    /// to `max_bytes` of the acknowledgeable bytes of `from`'s segment, when
    /// the first of them is in no cache (bytes in memory are copied: a
    /// splice would read them from the disk again). None when they are in
    /// memory or there are none yet. The range is cut anywhere; the slave
    /// takes its whole records ([`replica_whole_len`]) and asks again from
    /// there.
    ///
    /// # Errors
    /// As [`CommitLog::replica_chunk`] for a position that may not be
    /// served.
    pub fn replica_ship_len(
        &self,
        from: u64,
        max_bytes: usize,
    ) -> Result<Option<usize>, StorageError> {
        self.check_replica_from(from)?;
        let bound = self.appender.ack_position().min(self.segment_end(from));
        if bound <= from || max_bytes == 0 || self.cached_local(from, 1).is_some() {
            return Ok(None);
        }
        Ok(Some(
            usize::try_from(bound - from).map_or(max_bytes, |len| len.min(max_bytes)),
        ))
    }

    /// Master side: whether a slave may be served from `from` at all: within
    /// this log's acknowledgeable bytes, and not between the fence of its
    /// last crash recovery and that segment's end.
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`], saying why not.
    fn check_replica_from(&self, from: u64) -> Result<(), StorageError> {
        let ack = self.appender.ack_position();
        if from < self.min_offset || from > ack {
            return Err(StorageError::InvalidArgument(format!(
                "replication from {from}: the log holds [{}, {ack})",
                self.min_offset
            )));
        }
        if let Some(fence) = self.fenced_at
            && from > fence
            && from < self.segment_end(fence)
        {
            // Past the fence of this log's last crash recovery: what the
            // slave has there, this log lost (or never made durable).
            return Err(StorageError::InvalidArgument(format!(
                "replication from {from}: past {fence}, where this log's crash recovery ended it; the slave holds records this log lost"
            )));
        }
        Ok(())
    }

    /// Slave side: where this log ends and its last record, which the
    /// master checks ([`CommitLog::check_replica_position`]) before it
    /// serves this slave from there.
    ///
    /// # Errors
    /// [`StorageError::Busy`] while the last record is not written yet
    /// (poll, then ask again); disk errors reading it.
    pub fn replica_position(
        &mut self,
        disk: &mut impl Disk,
    ) -> Result<ReplicaPosition, StorageError> {
        let end = self.appender.encoded();
        let Some((start, size)) = self.last_record else {
            return Ok(ReplicaPosition {
                end,
                last_record: None,
            });
        };
        let offset = shard_offset(self.config.shard_id, start);
        let Some(bytes) = self.read(disk, offset, size as usize)? else {
            return Err(StorageError::Busy {
                pending_bytes: self.appender.pending_bytes(),
            });
        };
        Ok(ReplicaPosition {
            end,
            last_record: Some(RecordMark {
                offset: start,
                size,
                crc: crc32c::crc32c(&bytes),
            }),
        })
    }

    /// Master side: whether this log holds the slave's last record, byte
    /// for byte, where the slave has it, followed by the slave's end (or
    /// by a BLANK up to it): only then do the two logs agree up to there.
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`] saying where the logs part (or
    /// why the position cannot be served); disk errors of the reads.
    pub fn check_replica_position(
        &mut self,
        disk: &mut impl Disk,
        position: &ReplicaPosition,
    ) -> Result<(), StorageError> {
        let end = position.end;
        self.check_replica_from(end)?;
        let Some(last) = position.last_record else {
            // A slave log that holds no record starts at a segment base,
            // where every log has a record boundary.
            if end.is_multiple_of(self.config.segment_size_bytes) {
                return Ok(());
            }
            return Err(StorageError::InvalidArgument(format!(
                "a slave log ending at {end}, not a segment start, names no last record"
            )));
        };
        let diverged = |what: String| {
            StorageError::InvalidArgument(format!(
                "the slave's log ending at {end} is not this log's: {what}"
            ))
        };
        let record_end = last.offset.saturating_add(u64::from(last.size));
        if record_end > end {
            return Err(diverged(format!(
                "its last record at {} of {} bytes ends past it",
                last.offset, last.size
            )));
        }
        if last.offset < self.min_offset {
            return Err(diverged(format!(
                "its last record at {} is below this log's min offset {}",
                last.offset, self.min_offset
            )));
        }
        let offset = shard_offset(self.config.shard_id, last.offset);
        let bytes = self.read(disk, offset, last.size as usize)?;
        if bytes.as_deref().map(crc32c::crc32c) != Some(last.crc) {
            return Err(diverged(format!(
                "this log holds other bytes at its last record ({}, {} bytes)",
                last.offset, last.size
            )));
        }
        if record_end == end {
            return Ok(());
        }
        // A BLANK fits only when the end is the end of the last record's
        // segment.
        if self.segment_end(record_end) == end
            && let Some(blank) = self.read(
                disk,
                shard_offset(self.config.shard_id, record_end),
                BLANK_SIZE,
            )?
            && matches!(
                decode_entry(&blank, CrcCheck::Skip),
                Ok(Decoded::Blank { total_size }) if record_end + u64::from(total_size) == end
            )
        {
            return Ok(());
        }
        Err(diverged(format!(
            "its last record ends at {record_end}, and this log has no BLANK from there to {end}"
        )))
    }

    /// Slave side: moves a log that holds no record to start at segment
    /// `base`, past its end (its master's log no longer holds anything
    /// below `base`): every segment file is removed, an empty one created
    /// at `base`, and appends continue there. Nothing is lost: the log
    /// holds no record (a fresh slave, or one whose retention removed every
    /// record it had). A crash half-way leaves either no segment (the next
    /// open starts an empty log at 0 again) or the one at `base`.
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`] on a log that is not a replica's,
    /// holds a record, or for a `base` that is not a segment base past the
    /// end; [`StorageError::Busy`] while an operation of the log is in
    /// flight (ask again after a poll); disk errors of the removals and the
    /// creation (the log is then failed until a restart opens it again).
    pub fn restart_empty_at(
        &mut self,
        disk: &mut impl Disk,
        base: u64,
    ) -> Result<(), StorageError> {
        let end = self.appender.encoded();
        let size = self.config.segment_size_bytes;
        let refuse = |why: String| {
            Err(StorageError::InvalidArgument(format!(
                "starting the log at {base} instead of {end}: {why}"
            )))
        };
        if !self.config.replica {
            return refuse("not a replica's log".into());
        }
        if self.last_record.is_some() || end != self.min_offset {
            return refuse(format!("it holds records from {}", self.min_offset));
        }
        if !base.is_multiple_of(size) || base <= end || base >= 1 << SHARD_OFFSET_BITS {
            return refuse(format!(
                "not a segment base past the end (segments of {size} bytes)"
            ));
        }
        self.check_writable()?;
        let busy = !self.appender.is_idle()
            || self.creating.is_some()
            || self.removing > 0
            || self.sparing > 0
            || !self.shrinking.is_empty()
            || !self.stash.is_empty()
            || self.span_reads.in_flight()
            || self.ships.in_flight();
        if busy {
            return Err(StorageError::Busy {
                pending_bytes: self.appender.pending_bytes(),
            });
        }
        // The old segments go before the new one comes: the set holds
        // consecutive segments, and an empty directory opens as an empty log.
        let created = self
            .segments
            .remove_from(disk, 0)
            .and_then(|()| self.segments.create(disk, base).map(|segment| segment.file));
        let file = match created {
            Ok(file) => file,
            Err(error) => {
                self.appender
                    .fail(format!("starting the log at {base}: {error}"));
                return Err(error);
            }
        };
        self.appender.release_all_buffers(disk);
        let buffer_size = WRITE_BUFFER_SIZE.min(size as usize);
        self.appender = Appender::new(
            disk,
            self.config.flush_mode,
            file,
            base,
            base,
            &[],
            buffer_size,
            self.config.tail_cache_bytes,
        );
        self.min_offset = base;
        self.span_reads.clear_cache();
        self.first_store_timestamps.clear();
        self.fenced_at = None;
        tracing::info!(
            shard = self.config.shard_id,
            from = end,
            to = base,
            "an empty replica log now starts at its master's first segment"
        );
        Ok(())
    }

    /// Slave side: appends `bytes`, whole records from a master's
    /// [`CommitLog::replica_chunk`], at local `from`, which must be where
    /// this log ends; calls `visit` with each record appended (for the
    /// ConsumeQueues and the index). Acknowledged like any append, by the
    /// flush mode's position. Returns the local offset after the chunk.
    ///
    /// # Errors
    /// Nothing is appended on these: [`StorageError::NotWritable`] after a
    /// disk failure, [`StorageError::Busy`] when too much waits for the
    /// disk, [`StorageError::InvalidArgument`] when `from` is not this log's
    /// end, [`StorageError::Record`] for a chunk that fails its checks (see
    /// the module doc). Disk errors creating the next segment may come
    /// after part of the chunk is appended (whole records up to a segment
    /// end).
    pub fn append_replicated(
        &mut self,
        disk: &mut impl Disk,
        from: u64,
        bytes: &[u8],
        visit: &mut dyn FnMut(u64, &RecordView<'_>),
    ) -> Result<u64, StorageError> {
        self.check_writable()?;
        let end = self.appender.encoded();
        if from != end {
            return Err(StorageError::InvalidArgument(format!(
                "replicated bytes for {from}, but the log ends at {end}"
            )));
        }
        self.check_pending_room(bytes.len())?;
        let checked = self.check_replicated(from, bytes)?;
        let mut appended = 0;
        let result = self.append_checked(disk, from, &checked, &mut appended);
        // Whatever went in is dispatched, also when a segment could not be
        // created half-way.
        for entry in &checked[..appended] {
            if let Checked::Record(at, view) = entry {
                visit(*at, view);
            }
        }
        result
    }

    /// Appends checked entries, counting them in `appended`; returns the
    /// local offset after them.
    fn append_checked(
        &mut self,
        disk: &mut impl Disk,
        from: u64,
        checked: &[Checked<'_>],
        appended: &mut usize,
    ) -> Result<u64, StorageError> {
        let size = self.config.segment_size_bytes;
        let mut marked = from;
        let mut pos = from;
        for entry in checked {
            match entry {
                Checked::Record(at, view) => {
                    let record = view.as_bytes();
                    let n = record.len();
                    if self.appender.active().free_bytes() < n {
                        self.appender.seal_active(disk, None);
                    }
                    if at.is_multiple_of(size) {
                        self.first_store_timestamps
                            .insert(*at, view.store_timestamp_ms());
                    }
                    self.appender.active().tail_mut()[..n].copy_from_slice(record);
                    self.appender.advance(n, None);
                    self.last_record = Some((*at, n as u32));
                    pos = at + n as u64;
                }
                Checked::Blank(at) => {
                    if *at > marked {
                        self.appender.mark_append_end(*at);
                    }
                    let segment_end = self.segment_end(*at);
                    self.seal_segment(disk, *at, segment_end)?;
                    pos = segment_end;
                    marked = segment_end;
                }
            }
            *appended += 1;
        }
        if pos > marked {
            self.appender.mark_append_end(pos);
        }
        Ok(pos)
    }

    /// Checks a replicated chunk at local `from` without touching the log.
    fn check_replicated<'a>(
        &mut self,
        from: u64,
        bytes: &'a [u8],
    ) -> Result<Vec<Checked<'a>>, StorageError> {
        let shard_id = self.config.shard_id;
        // Each record at most what one append of the master may take.
        let record_max = self.batch_max().min(RECORD_SIZE_MAX);
        let refuse = |at: u64, reason: String| StorageError::Record {
            commit_log_offset: shard_offset(shard_id, at),
            reason: format!("replicated chunk refused: {reason}"),
        };
        let mut checked = Vec::new();
        let (mut i, mut pos) = (0usize, from);
        while i < bytes.len() {
            let segment_end = self.segment_end(pos);
            // BODYCRC is checked here rather than by the decoder, so that
            // the body's CRC, computed once, serves the record CRC too.
            match decode_entry(&bytes[i..], CrcCheck::Skip) {
                Ok(Decoded::Record(view)) => {
                    let n = u64::from(view.total_size());
                    let physical_offset = view.commit_log_offset() as u64;
                    if physical_offset != shard_offset(shard_id, pos) {
                        return Err(refuse(
                            pos,
                            format!("its PHYSICALOFFSET is {physical_offset}"),
                        ));
                    }
                    if n as usize > record_max {
                        return Err(refuse(
                            pos,
                            format!("{n} bytes, over the {record_max}-byte limit"),
                        ));
                    }
                    if pos + n + BLANK_SIZE as u64 > segment_end {
                        return Err(refuse(
                            pos,
                            format!("{n} bytes do not fit before the segment end {segment_end}"),
                        ));
                    }
                    let body_crc_raw =
                        verify_body_crc(&view).map_err(|error| refuse(pos, error.to_string()))?;
                    record_crc::verify_with_body_crc(
                        view.as_bytes(),
                        view.body_range(),
                        body_crc_raw,
                        &mut self.sealer,
                    )
                    .map_err(|reason| refuse(pos, reason))?;
                    checked.push(Checked::Record(pos, view));
                    i += n as usize;
                    pos += n;
                }
                Ok(Decoded::Blank { total_size }) => {
                    if pos + u64::from(total_size) != segment_end {
                        return Err(refuse(
                            pos,
                            format!(
                                "a BLANK of {total_size} bytes misses the segment end {segment_end} (another segment size?)"
                            ),
                        ));
                    }
                    checked.push(Checked::Blank(pos));
                    i += BLANK_SIZE;
                    pos = segment_end;
                }
                Err(RecordError::Truncated { .. }) => {
                    return Err(refuse(pos, "it ends inside a record".into()));
                }
                Err(error) => return Err(refuse(pos, error.to_string())),
            }
        }
        Ok(checked)
    }
}

/// What a master's shard has for a slave now ([`CommitLog::replica_chunk`]).
#[derive(Debug, PartialEq, Eq)]
pub enum ReplicaChunk {
    /// Whole records (empty: nothing acknowledgeable at the position yet).
    Bytes(Vec<u8>),
    /// Being read from the segment: once [`CommitLog::take_span_reads`]
    /// gives this ticket, [`CommitLog::replica_chunk`] finds the bytes.
    Reading(u64),
}

/// The error for acknowledgeable bytes at local `from` that no segment
/// holds (the log moved under a pull).
fn not_readable(from: u64) -> StorageError {
    StorageError::InvalidArgument(format!("replication from {from}: not readable"))
}

/// Slave side: the bytes of whole records at the start of a chunk the
/// master shipped cut anywhere (through a first BLANK's 8 bytes, as
/// [`CommitLog::replica_chunk`] would have sent them); 0 when not even the
/// first record is whole.
///
/// # Errors
/// [`StorageError::Record`] when the chunk does not start with a record.
pub fn replica_whole_len(from: u64, bytes: &[u8]) -> Result<usize, StorageError> {
    match whole_records(bytes) {
        Ok(Prefix::Whole(len)) => Ok(len),
        Ok(Prefix::FirstNeeds(_)) => Ok(0),
        Err(error) => Err(StorageError::Record {
            commit_log_offset: from,
            reason: format!("a shipped chunk from {from} does not start with a record: {error}"),
        }),
    }
}

/// What the bytes read at a record boundary give a slave.
enum Whole {
    /// This many bytes of whole records (through a first BLANK).
    Bytes(usize),
    /// The first record is longer than the read: read this many bytes.
    Grow(usize),
    /// The first record is not acknowledgeable whole yet.
    NotYet,
}

/// The whole records at the start of `bytes`, read at local `from`, of
/// which `limit` bytes are acknowledgeable.
///
/// # Errors
/// [`StorageError::Record`] when `from` is not a record boundary.
fn whole_prefix(
    shard_id: u8,
    from: u64,
    bytes: &[u8],
    limit: usize,
) -> Result<Whole, StorageError> {
    let prefix = whole_records(bytes).map_err(|error| StorageError::Record {
        commit_log_offset: shard_offset(shard_id, from),
        reason: format!("replication from {from}: not a record boundary: {error}"),
    })?;
    Ok(match prefix {
        Prefix::Whole(len) => Whole::Bytes(len),
        Prefix::FirstNeeds(needed) if needed <= limit && needed > bytes.len() => {
            Whole::Grow(needed)
        }
        Prefix::FirstNeeds(_) => Whole::NotYet,
    })
}

/// What a read at a record boundary holds.
enum Prefix {
    /// This many bytes of whole records, through a first BLANK (its 8
    /// bytes).
    Whole(usize),
    /// Not even the first record whole: it has this many bytes.
    FirstNeeds(usize),
}

/// The whole records at the start of `bytes`.
///
/// # Errors
/// The decoder's, when the bytes are not records (or a record would be
/// over [`RECORD_SIZE_MAX`]).
fn whole_records(bytes: &[u8]) -> Result<Prefix, RecordError> {
    let mut i = 0;
    while i < bytes.len() {
        match decode_entry(&bytes[i..], CrcCheck::Skip) {
            Ok(Decoded::Record(view)) => i += view.total_size() as usize,
            Ok(Decoded::Blank { .. }) => return Ok(Prefix::Whole(i + BLANK_SIZE)),
            Err(RecordError::Truncated { needed, .. }) if i == 0 && needed <= RECORD_SIZE_MAX => {
                return Ok(Prefix::FirstNeeds(needed));
            }
            Err(RecordError::Truncated { .. }) if i > 0 => break,
            Err(error) => return Err(error),
        }
    }
    Ok(Prefix::Whole(i))
}
