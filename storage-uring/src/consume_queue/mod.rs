//! RocketMQ's ConsumeQueue (protocol reference 6.3): per (topic, queue id),
//! one 20-byte entry per message, pointing into the CommitLog.
//!
//! ```text
//! entry  [commit_log_offset i64 BE][size i32 BE][tags_code i64 BE]   20 bytes
//! file   <root>/consumequeue/<topic>/<queue_id>/<20-digit logical byte offset>
//!        300,000 entries = 6,000,000 bytes; queue offset q is at byte q * 20
//!        of the queue's concatenated files
//! filler (0, 0x7FFFFFFF, 0): pads a file up to the first real entry when a
//!        queue is (re)created at a non-zero offset
//! ```
//!
//! The ConsumeQueue is derived data (rebuilt from the CommitLog by recovery),
//! so it is written through the page cache ([`OpenOptions::buffered`]), never
//! with O_DIRECT, and written *behind*: [`ConsumeQueue::append`] only changes
//! memory; [`ConsumeQueue::flush`] submits a write of a file's dirty range or,
//! once that write has completed, its fdatasync; [`ConsumeQueue::on_completion`]
//! marks ranges written or synced. A file is created in the background
//! (sparse: its length set, nothing allocated, as RocketMQ's mapped files;
//! then fsynced with its directory), through [`Disk::submit_create`], the
//! first time a flush reaches it; its writes,
//! and those of later files, wait for that create, and the queue flushes
//! again as soon as it completes. The append path never waits for a file
//! system call. Flush errors are kept
//! ([`ConsumeQueue::take_errors`]) and the range stays dirty, so the next
//! flush retries it.
//!
//! Crash safety beyond Java's: bytes reach the disk in queue order (a write
//! starts only when everything before it in the queue is written *and*
//! fdatasynced), load zeroes whatever follows the last valid entry, and load
//! also stops where CommitLog offsets go backwards. So after a process kill
//! or a power loss the loaded queue is a prefix of what was appended, except
//! that its last entry may be torn (right offset, wrong size or tags code);
//! recovery re-dispatches from [`ConsumeQueue::resume_offset`], and
//! [`ConsumeQueue::append`] repairs that entry. A seeded model test checks
//! this through the simulated disk's crashes.
//!
//! Memory: a file's entries are built in memory (20 bytes each, in 20 KiB
//! chunks that never move, `image.rs`) and leave it once written and
//! fdatasynced: a full file's all at once, the last file's a whole chunk at
//! a time, for a read-only mapping of the file. A queue then holds the
//! entries not yet durable and at most a chunk besides, whatever it
//! retains.
//!
//! # Invariants
//! - Queue offsets are dense: the entry at queue offset `q` is the `q`-th of
//!   the queue; files are contiguous, each holds `CQ_FILE_ENTRY_COUNT` entries
//!   except the last, and the image of every file but the last is full.
//! - Real entries are appended in ascending CommitLog order; only fillers
//!   (offset 0) precede them, so entries are sorted by `commit_log_offset`.
//! - At most one operation (write or fdatasync) per file is in flight, so two
//!   writes of the same bytes never race.
//! - `written_len <= image.len()` and `synced_len <= written_len` per file;
//!   bytes on disk past `written_len` up to `stale_end` may differ from the
//!   image (a repaired entry), and are rewritten by a write of their own.
//! - A write of a file starts only when its previous write is fdatasynced
//!   and every earlier file is fully written and fdatasynced.
//! - `min_offset() <= max_offset()`.

use std::path::{Path, PathBuf};

use crate::disk::{Disk, DiskCompletion, DiskOp, OpId, OpTag, OpenOptions, created_file_id};
use crate::error::StorageError;

/// Bytes of one entry: commit_log_offset i64, size i32, tags_code i64.
pub const CQ_ENTRY_SIZE: usize = 20;
/// Entries per ConsumeQueue file (Java's `mappedFileSizeConsumeQueue / 20`).
pub const CQ_FILE_ENTRY_COUNT: usize = 300_000;
/// Bytes per ConsumeQueue file.
pub const CQ_FILE_SIZE: usize = CQ_FILE_ENTRY_COUNT * CQ_ENTRY_SIZE;
/// The `size` of a filler entry.
pub const CQ_FILLER_SIZE: u32 = 0x7FFF_FFFF;
/// Name of the ConsumeQueue directory under the store root.
pub const CQ_DIR_NAME: &str = "consumequeue";
/// Flush errors kept per queue until taken (later ones are only counted).
pub const CQ_ERRORS_KEPT_MAX: usize = 16;
/// Most queues one [`ConsumeQueueSet`] holds (the queue index fills the top
/// 24 bits of the 56-bit operation sequence number).
pub const CQ_SET_QUEUE_COUNT_MAX: usize = 1 << 24;
/// Bytes read per operation while loading files at startup.
pub const CQ_LOAD_READ_SIZE: usize = 1024 * 1024;
/// Poll rounds of one second a startup read may wait before giving up.
pub const LOAD_POLL_ROUNDS_MAX: u32 = 600;

const LOCAL_SEQ_BITS: u32 = 32;

mod file;
mod image;
mod set;

use file::{CqFile, InFlight, accept_loaded, parse_file_name};
pub(crate) use file::{read_blocking, read_chunks};
pub use set::ConsumeQueueSet;

const _: () = assert!(CQ_ENTRY_SIZE == 8 + 4 + 8);
// Java's file size, so an operator's tools read our directories.
const _: () = assert!(CQ_FILE_SIZE == 6_000_000);
const _: () = assert!(CQ_SET_QUEUE_COUNT_MAX as u64 <= 1 << (56 - LOCAL_SEQ_BITS));
const _: () = assert!(CQ_LOAD_READ_SIZE.is_multiple_of(crate::aligned::BLOCK_SIZE));

/// One ConsumeQueue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqEntry {
    /// CommitLog offset of the record.
    pub commit_log_offset: u64,
    /// Size of the record in bytes.
    pub size: u32,
    /// Tag hash (section 4.12), or the delivery time for scheduled messages.
    pub tags_code: i64,
}

impl CqEntry {
    /// The filler entry `(0, 0x7FFFFFFF, 0)`.
    pub const FILLER: CqEntry = CqEntry {
        commit_log_offset: 0,
        size: CQ_FILLER_SIZE,
        tags_code: 0,
    };

    /// The 20 big-endian bytes of the entry.
    pub fn encode(&self) -> [u8; CQ_ENTRY_SIZE] {
        let mut out = [0u8; CQ_ENTRY_SIZE];
        out[0..8].copy_from_slice(&self.commit_log_offset.to_be_bytes());
        out[8..12].copy_from_slice(&self.size.to_be_bytes());
        out[12..20].copy_from_slice(&self.tags_code.to_be_bytes());
        out
    }

    /// Decodes 20 bytes (no validation; see [`CqEntry::is_valid`]).
    pub fn decode(bytes: &[u8; CQ_ENTRY_SIZE]) -> CqEntry {
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&bytes[0..8]);
        let mut size = [0u8; 4];
        size.copy_from_slice(&bytes[8..12]);
        let mut tags = [0u8; 8];
        tags.copy_from_slice(&bytes[12..20]);
        CqEntry {
            commit_log_offset: u64::from_be_bytes(offset),
            size: u32::from_be_bytes(size),
            tags_code: i64::from_be_bytes(tags),
        }
    }

    /// Java's CQ recovery rule: `offset >= 0 && size > 0` (as signed values).
    pub fn is_valid(&self) -> bool {
        (self.commit_log_offset as i64) >= 0 && (self.size as i32) > 0
    }

    /// Whether this is a filler entry.
    pub fn is_filler(&self) -> bool {
        *self == CqEntry::FILLER
    }

    /// CommitLog offset just past the record.
    pub fn end_offset(&self) -> u64 {
        self.commit_log_offset.saturating_add(u64::from(self.size))
    }
}

/// What [`ConsumeQueue::append`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The entry was added at the queue offset.
    Appended,
    /// The entry was already there (re-dispatch after recovery) and was
    /// ignored, as RocketMQ's idempotence rule (6.8) says.
    Duplicate,
    /// The queue's last entry had the same CommitLog offset but a different
    /// size or tags code (a torn write before a crash) and was replaced.
    Repaired,
}

/// Which entry a timestamp search returns when store times tie or miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BoundaryType {
    /// The first entry whose store time is ≥ the timestamp (max offset if all
    /// are older).
    #[default]
    Lower,
    /// The last entry whose store time is ≤ the timestamp (min offset if all
    /// are newer).
    Upper,
}

/// How the store stopped before a [`ConsumeQueue::load`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastStop {
    /// The stop flushed every queue until clean: each last file holds zeros
    /// after its last entry, so load keeps it as it is.
    Clean,
    /// A crash, or a set of files whose state is not known: load zeroes each
    /// last file after its last valid entry and fdatasyncs that before the
    /// next write there.
    Abnormal,
}

/// One queue of one topic.
#[derive(Debug)]
pub struct ConsumeQueue {
    topic: String,
    queue_id: u32,
    dir: PathBuf,
    /// Files in ascending order, contiguous.
    files: Vec<CqFile>,
    /// The next queue offset when there are no files.
    next_offset_empty: u64,
    min_offset: u64,
    /// `commit_log_offset + size` of the last real entry (idempotence rule).
    max_physical_offset: u64,
    /// Top bits of every operation sequence number of this queue.
    seq_prefix: u64,
    next_local_seq: u32,
    dir_created: bool,
    errors: Vec<StorageError>,
    error_count: u64,
    /// Entries per file: [`CQ_FILE_ENTRY_COUNT`] except in tests.
    file_entry_count: usize,
    /// A file's background create completed: flush at once rather than at
    /// the next interval.
    created: bool,
}

/// The directory of one queue under the store root.
pub fn queue_dir(root: &Path, topic: &str, queue_id: u32) -> PathBuf {
    root.join(CQ_DIR_NAME)
        .join(topic)
        .join(queue_id.to_string())
}

fn check_topic(topic: &str) -> Result<(), StorageError> {
    if topic.is_empty() || topic == "." || topic == ".." || topic.contains(['/', '\0']) {
        return Err(StorageError::InvalidArgument(format!(
            "topic {topic:?} cannot name a directory"
        )));
    }
    Ok(())
}

/// Removes the empty directory `dir` and syncs its parent so the removal
/// is durable; a directory that does not exist is fine.
///
/// # Errors
/// The disk's error removing the directory or syncing its parent.
pub(crate) fn remove_empty_dir<D: Disk + ?Sized>(
    disk: &mut D,
    dir: &Path,
) -> Result<(), StorageError> {
    match disk.remove_dir(dir) {
        Ok(()) => {
            if let Some(parent) = dir.parent() {
                disk.sync_dir(parent)?;
            }
            Ok(())
        }
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

impl ConsumeQueue {
    /// An empty queue whose files will live under `root` (the store root).
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`] if the topic cannot be a directory
    /// name.
    pub fn new(root: &Path, topic: &str, queue_id: u32) -> Result<Self, StorageError> {
        check_topic(topic)?;
        Ok(ConsumeQueue {
            topic: topic.to_string(),
            queue_id,
            dir: queue_dir(root, topic, queue_id),
            files: Vec::new(),
            next_offset_empty: 0,
            min_offset: 0,
            max_physical_offset: 0,
            seq_prefix: 0,
            next_local_seq: 0,
            dir_created: false,
            errors: Vec::new(),
            error_count: 0,
            file_entry_count: CQ_FILE_ENTRY_COUNT,
            created: false,
        })
    }

    /// Tests use small files so rollover and crash runs stay cheap; the
    /// store always uses [`CQ_FILE_ENTRY_COUNT`].
    #[cfg(test)]
    fn with_file_entry_count(mut self, count: usize) -> Self {
        assert!(count > 0, "file entry count 0");
        self.file_entry_count = count;
        self
    }

    fn file_size(&self) -> usize {
        self.file_entry_count * CQ_ENTRY_SIZE
    }

    fn set_seq_prefix(&mut self, prefix: u64) {
        self.seq_prefix = prefix;
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The queue id.
    pub fn queue_id(&self) -> u32 {
        self.queue_id
    }

    /// The smallest queue offset whose entry is still backed by CommitLog data.
    pub fn min_offset(&self) -> u64 {
        self.min_offset
    }

    /// The next queue offset to be written (= entry count, RocketMQ's
    /// `maxOffset`).
    pub fn max_offset(&self) -> u64 {
        match self.files.last() {
            Some(last) => last.base + last.entry_count() as u64,
            None => self.next_offset_empty,
        }
    }

    /// `commit_log_offset + size` of the last entry (0 for an empty queue):
    /// Java's `maxPhysicOffset`, the bound of the idempotence rule. Recovery
    /// should re-dispatch from [`ConsumeQueue::resume_offset`] instead, which
    /// also repairs a torn last entry.
    pub fn max_physical_offset(&self) -> u64 {
        self.max_physical_offset
    }

    /// Where recovery should re-dispatch from for this queue: the CommitLog
    /// offset of its last entry (0 for an empty queue). Re-dispatching the
    /// last record too lets a torn last entry be repaired (see
    /// [`ConsumeQueue::append`]); everything else is a duplicate.
    pub fn resume_offset(&self) -> u64 {
        self.last_real_entry().map_or(0, |e| e.commit_log_offset)
    }

    /// Queue offset below which every entry is written and fdatasynced
    /// (`max_offset` when nothing waits for the disk). Files are flushed in
    /// order, so this is the first file that is not fully synced, at its
    /// synced length.
    pub fn synced_offset(&self) -> u64 {
        for file in &self.files {
            let synced = if file.file.is_some() {
                file.synced_len.min(file.image.len())
            } else {
                0
            };
            if synced < file.image.len() {
                return file.base + (synced / CQ_ENTRY_SIZE) as u64;
            }
        }
        self.max_offset()
    }

    /// Whether the flush should go on at once instead of at the next
    /// interval (nothing in flight, and either a completed write waits for
    /// its fdatasync or files before the last one still wait to be written:
    /// a fast queue fills several files per interval, and one file per
    /// interval would fall behind for good).
    pub fn wants_flush_now(&self) -> bool {
        if self.files.iter().any(|f| f.in_flight.is_some()) {
            return false;
        }
        if self.created {
            return true;
        }
        let pending = |f: &CqFile| {
            f.sync_before_write || f.written_len < f.dirty_end() || f.synced_len < f.written_len
        };
        self.files.iter().any(|f| f.sync_before_write)
            || self.files.iter().filter(|f| pending(f)).count() >= 2
    }

    /// Drops every entry from queue offset `cut` on, as
    /// [`ConsumeQueue::truncate_from_commit_log_offset`] does by CommitLog
    /// offset (recovery: a last entry that does not match its record).
    ///
    /// # Errors
    /// As [`ConsumeQueue::truncate_from_commit_log_offset`].
    pub fn truncate_from_queue_offset<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        cut: u64,
    ) -> Result<(), StorageError> {
        match self.raw_entry(cut) {
            Some(entry) => self.truncate_from_commit_log_offset(disk, entry.commit_log_offset),
            None => Ok(()),
        }
    }

    /// Number of files the queue has in memory (and on disk once flushed).
    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    fn first_offset(&self) -> u64 {
        self.files
            .first()
            .map_or(self.next_offset_empty, |f| f.base)
    }

    fn raw_entry(&self, queue_offset: u64) -> Option<CqEntry> {
        let first = self.files.first()?;
        if queue_offset < first.base || queue_offset >= self.max_offset() {
            return None;
        }
        let relative = queue_offset - first.base;
        let per_file = self.file_entry_count as u64;
        let file = &self.files[(relative / per_file) as usize];
        Some(file.entry((relative % per_file) as usize))
    }

    /// The entry at `queue_offset`, if it is in `[min_offset, max_offset)`.
    pub fn entry(&self, queue_offset: u64) -> Option<CqEntry> {
        if queue_offset < self.min_offset {
            return None;
        }
        self.raw_entry(queue_offset)
    }

    /// Up to `max` consecutive entries from `from` (empty if `from` is
    /// outside `[min_offset, max_offset)`; RocketMQ answers such pulls with
    /// OFFSET_TOO_SMALL / OFFSET_OVERFLOW).
    pub fn entries(&self, from: u64, max: usize) -> Vec<CqEntry> {
        self.iter_entries(from, max).collect()
    }

    /// [`ConsumeQueue::entries`], each decoded only when the iterator gets
    /// to it (a pull takes 32 of the 800 it may walk).
    pub fn iter_entries(&self, from: u64, max: usize) -> impl Iterator<Item = CqEntry> + '_ {
        let end = if from < self.min_offset {
            from
        } else {
            self.max_offset().min(from.saturating_add(max as u64))
        };
        (from..end).filter_map(|q| self.raw_entry(q))
    }

    /// Appends the entry of the record at `queue_offset`.
    ///
    /// Idempotent as RocketMQ's dispatch (6.8): an entry whose
    /// `commit_log_offset + size` is ≤ the queue's max physical offset, or
    /// whose queue offset is already taken, is ignored. One exception beyond
    /// Java: an entry for the queue's last offset with the same CommitLog
    /// offset but another size or tags code replaces it (a torn last entry,
    /// re-dispatched from [`ConsumeQueue::resume_offset`]). A queue with no
    /// files accepts any offset and pads its first file with fillers up to it.
    ///
    /// # Errors
    /// [`StorageError::ConsumeQueueGap`] if `queue_offset` is past
    /// [`ConsumeQueue::max_offset`] of a non-empty queue;
    /// [`StorageError::InvalidArgument`] for an entry that fails
    /// [`CqEntry::is_valid`] or is a filler.
    pub fn append(
        &mut self,
        queue_offset: u64,
        entry: CqEntry,
    ) -> Result<AppendOutcome, StorageError> {
        if !entry.is_valid() || entry.is_filler() {
            return Err(StorageError::InvalidArgument(format!(
                "consume queue {}/{}: invalid entry {entry:?} at queue offset {queue_offset}",
                self.topic, self.queue_id
            )));
        }
        let next = self.max_offset();
        if next > self.min_offset && queue_offset == next - 1 {
            let last = self.raw_entry(queue_offset).expect("the last entry exists");
            if last.commit_log_offset == entry.commit_log_offset && last != entry {
                self.repair_last(entry);
                return Ok(AppendOutcome::Repaired);
            }
        }
        if entry.end_offset() <= self.max_physical_offset {
            return Ok(AppendOutcome::Duplicate);
        }
        if queue_offset < next {
            return Ok(AppendOutcome::Duplicate);
        }
        if self.files.is_empty() {
            self.recreate_at(queue_offset);
        } else if queue_offset > next {
            return Err(StorageError::ConsumeQueueGap {
                topic: self.topic.clone(),
                queue_id: self.queue_id,
                expected: next,
                queue_offset,
            });
        }
        let last = self.files.last().expect("a file exists after recreate_at");
        if last.entry_count() == self.file_entry_count {
            let base = last.base + self.file_entry_count as u64;
            self.files.push(CqFile::new(base));
        }
        let last = self.files.last_mut().expect("a file exists");
        last.push(&entry, self.file_entry_count);
        self.max_physical_offset = entry.end_offset();
        assert!(
            self.max_offset() == queue_offset + 1,
            "append did not land at {queue_offset}"
        );
        Ok(AppendOutcome::Appended)
    }

    /// Replaces the last entry (a torn write left it with a wrong size or
    /// tags code; re-dispatch brings the right one).
    fn repair_last(&mut self, entry: CqEntry) {
        let file = self.files.last_mut().expect("a last entry exists");
        let count = file.entry_count();
        assert!(count > 0, "the last consume queue file is empty");
        tracing::warn!(topic = %self.topic, queue_id = self.queue_id, ?entry, "repairing the last consume queue entry");
        file.truncate_entries(count - 1);
        file.push(&entry, self.file_entry_count);
        self.max_physical_offset = entry.end_offset();
    }

    /// Closes the queue's open files (a queue loaded only to be read).
    ///
    /// # Errors
    /// The disk's error closing a file.
    ///
    /// # Panics
    /// If a file has an operation in flight.
    pub fn close_files<D: Disk + ?Sized>(&mut self, disk: &mut D) -> Result<(), StorageError> {
        for file in &mut self.files {
            assert!(
                file.in_flight.is_none(),
                "closing a CQ file with an operation in flight"
            );
            if let Some(id) = file.file.take() {
                disk.close(id)?;
            }
        }
        Ok(())
    }

    /// Gives a queue without files its next queue offset: abnormal recovery
    /// rebuilds queues from the CommitLog, and a queue whose records
    /// retention removed would otherwise start again at 0. The first file
    /// holds fillers up to `queue_offset`, so the offset survives restarts
    /// once it is flushed. Does nothing to a queue that has files.
    pub fn start_at(&mut self, queue_offset: u64) {
        if self.files.is_empty() && queue_offset > self.max_offset() {
            self.recreate_at(queue_offset);
        }
    }

    /// Starts the queue's first file at the file boundary below `queue_offset`
    /// and fills it with fillers up to `queue_offset`.
    fn recreate_at(&mut self, queue_offset: u64) {
        assert!(self.files.is_empty(), "recreate_at on a queue with files");
        let fillers = (queue_offset % self.file_entry_count as u64) as usize;
        let mut file = CqFile::new(queue_offset - fillers as u64);
        for _ in 0..fillers {
            file.push(&CqEntry::FILLER, self.file_entry_count);
        }
        self.files.push(file);
        self.min_offset = queue_offset;
    }

    /// Index of the first queue offset in `[first_offset, max_offset)` whose
    /// entry satisfies `pred`, where `pred` is false then true along the queue.
    fn partition_point(&self, pred: impl Fn(&CqEntry) -> bool) -> u64 {
        let (mut low, mut high) = (self.first_offset(), self.max_offset());
        while low < high {
            let mid = low + (high - low) / 2;
            let entry = self.raw_entry(mid).expect("mid is within the files");
            if pred(&entry) {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        low
    }

    /// RocketMQ's SEARCH_OFFSET_BY_TIMESTAMP (2.3.16): binary search of the
    /// entries in `[min_offset, max_offset)` by the store time of their
    /// records. `store_ts_of(commit_log_offset)` reads a record's store
    /// timestamp from the CommitLog; `None` (record gone) counts as older than
    /// any timestamp. Store times are assumed non-decreasing along the queue.
    ///
    /// Lower: the first entry with store time ≥ `timestamp_ms`, or
    /// `max_offset` if all are older. Upper: the last entry with store time
    /// ≤ `timestamp_ms`, or `min_offset` if all are newer. An empty queue
    /// answers `min_offset` (= `max_offset`).
    pub fn search_offset_by_timestamp(
        &self,
        timestamp_ms: i64,
        boundary: BoundaryType,
        mut store_ts_of: impl FnMut(u64) -> Option<i64>,
    ) -> u64 {
        let (min, max) = (self.min_offset, self.max_offset());
        let mut is_after = |q: u64, strictly: bool| -> bool {
            let entry = self.raw_entry(q).expect("q is within the files");
            match store_ts_of(entry.commit_log_offset) {
                None => false,
                Some(ts) if strictly => ts > timestamp_ms,
                Some(ts) => ts >= timestamp_ms,
            }
        };
        // First q with store time >= ts (Lower) or > ts (Upper).
        let strictly = boundary == BoundaryType::Upper;
        let (mut low, mut high) = (min, max);
        while low < high {
            let mid = low + (high - low) / 2;
            if is_after(mid, strictly) {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        match boundary {
            BoundaryType::Lower => low,
            BoundaryType::Upper if low == min => min,
            BoundaryType::Upper => low - 1,
        }
    }

    /// Recovery (6.9): drops every entry whose `commit_log_offset` is ≥
    /// `commit_log_offset`. Files that become empty are closed and removed;
    /// the last remaining one is cut on disk at once (ftruncate down and back
    /// up to its size, so the dropped entries read as zeros) and fdatasynced
    /// by the next flush.
    ///
    /// # Errors
    /// The disk's error closing or removing a file.
    ///
    /// # Panics
    /// If an operation of this queue is in flight (call it before flushing
    /// starts, or once [`ConsumeQueue::is_idle`]).
    pub fn truncate_from_commit_log_offset<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        commit_log_offset: u64,
    ) -> Result<(), StorageError> {
        assert!(
            self.is_idle(),
            "truncate of {}/{} with a flush in flight",
            self.topic,
            self.queue_id
        );
        let cut =
            self.partition_point(|e| e.commit_log_offset >= commit_log_offset && !e.is_filler());
        // Fillers pad up to a real entry; a cut inside them drops them too.
        let cut = if commit_log_offset == 0 {
            self.first_offset()
        } else {
            cut
        };
        if cut >= self.max_offset() {
            return Ok(());
        }
        let mut removed_any = false;
        while let Some(last) = self.files.last() {
            if last.base < cut {
                break;
            }
            let file = self.files.pop().expect("last exists");
            removed_any |= self.remove_file(disk, file)?;
        }
        let file_size = self.file_size() as u64;
        if let Some(last) = self.files.last_mut() {
            let keep = (cut - last.base) as usize;
            last.truncate_entries(keep);
            if let Some(id) = last.file {
                // Zero the dropped entries on disk now (shrink, then grow back
                // to Java's file size), so a crash before the next flush
                // cannot bring them back; the next flush fdatasyncs.
                disk.set_len(id, (keep * CQ_ENTRY_SIZE) as u64)?;
                disk.set_len(id, file_size)?;
                last.stale_end = 0;
                last.synced_len = 0;
            }
        }
        if removed_any {
            disk.sync_dir(&self.dir)?;
        }
        if self.files.is_empty() {
            self.next_offset_empty = cut;
        }
        self.min_offset = self.min_offset.min(cut);
        self.max_physical_offset = self.last_real_entry().map_or(0, |e| e.end_offset());
        Ok(())
    }

    fn last_real_entry(&self) -> Option<CqEntry> {
        // Fillers only precede real entries: if the last entry is a filler,
        // the queue holds nothing else.
        let max = self.max_offset();
        if max == self.first_offset() {
            return None;
        }
        self.raw_entry(max - 1).filter(|e| !e.is_filler())
    }

    /// Retention: removes the files whose entries all point below
    /// `commit_log_min_offset` (never the last file, and not a file with an
    /// operation in flight, which waits for the next run), then moves
    /// `min_offset` to the first entry still backed by the CommitLog. Returns
    /// how many files were removed.
    ///
    /// # Errors
    /// The disk's error closing or removing a file.
    pub fn delete_below_commit_log_offset<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        commit_log_min_offset: u64,
    ) -> Result<usize, StorageError> {
        self.delete_below_commit_log_offset_at_most(disk, commit_log_min_offset, usize::MAX)
    }

    /// As [`ConsumeQueue::delete_below_commit_log_offset`], removing at most
    /// `max_files` files (the rest go at the next call). Freeing a file's
    /// image is one free per 20 KiB chunk; a shard that dropped every
    /// expired file of its queues in one turn spent 27 ms in the allocator.
    ///
    /// # Errors
    /// The disk's error closing or removing a file.
    pub fn delete_below_commit_log_offset_at_most<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        commit_log_min_offset: u64,
        max_files: usize,
    ) -> Result<usize, StorageError> {
        let (mut removed, mut removed_on_disk) = (0, false);
        while self.files.len() > 1 && removed < max_files {
            let first = &self.files[0];
            let last_entry = first.entry(first.entry_count() - 1);
            if last_entry.commit_log_offset >= commit_log_min_offset || first.in_flight.is_some() {
                break;
            }
            let file = self.files.remove(0);
            removed_on_disk |= self.remove_file(disk, file)?;
            removed += 1;
        }
        if removed_on_disk {
            disk.sync_dir(&self.dir)?;
        }
        let backed = self
            .partition_point(|e| e.commit_log_offset >= commit_log_min_offset && !e.is_filler());
        self.min_offset = self.min_offset.max(backed).max(self.first_offset());
        Ok(removed)
    }

    /// Deleting the queue's topic: closes and removes every file with no
    /// operation in flight and, once no file is left, whatever else is in
    /// the queue's directory and the directory itself. A file with an
    /// operation in flight stays until it completes: call again then.
    /// Returns whether the queue is gone from disk. The queue is not to be
    /// appended to or flushed again.
    ///
    /// # Errors
    /// The disk's error closing or removing a file or the directory (the
    /// file is then forgotten, and may stay on disk).
    pub fn remove_from_disk<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
    ) -> Result<bool, StorageError> {
        let mut index = 0;
        while index < self.files.len() {
            if self.files[index].in_flight.is_some() {
                index += 1;
                continue;
            }
            let file = self.files.remove(index);
            self.remove_file(disk, file)?;
        }
        if !self.files.is_empty() {
            return Ok(false);
        }
        // Files this queue did not track (ignored at load) go too: a
        // directory left behind would bring the queue back at the next load.
        for name in disk.list_dir(&self.dir)? {
            disk.remove(&self.dir.join(name))?;
        }
        // Never flushed: never created, and nothing to remove.
        remove_empty_dir(disk, &self.dir)?;
        self.dir_created = false;
        Ok(true)
    }

    fn remove_file<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        file: CqFile,
    ) -> Result<bool, StorageError> {
        assert!(
            file.in_flight.is_none(),
            "removing a CQ file with an operation in flight"
        );
        // A file never flushed was never created on disk.
        let Some(id) = file.file else {
            return Ok(false);
        };
        disk.close(id)?;
        disk.remove(&self.dir.join(file.name()))?;
        Ok(true)
    }

    /// Whether no operation of this queue is in flight.
    pub fn is_idle(&self) -> bool {
        self.files.iter().all(|f| f.in_flight.is_none())
    }

    /// Whether everything in memory is written and fdatasynced.
    pub fn is_clean(&self) -> bool {
        self.files.iter().all(|f| {
            f.synced_len == f.image.len() && f.dirty_end() == f.written_len && !f.sync_before_write
        })
    }

    /// Bytes in memory not yet written to the page cache.
    pub fn dirty_bytes(&self) -> usize {
        self.files
            .iter()
            .map(|f| f.dirty_end() - f.written_len)
            .sum()
    }

    /// Entry bytes held in memory rather than read through a view of their
    /// file (see `image.rs`); walks every file.
    pub fn memory_bytes(&self) -> usize {
        self.files
            .iter()
            .map(|f| f.image.len() - f.image.view_len())
            .sum()
    }

    /// Whether at least `min` bytes in memory are not yet written: as
    /// [`ConsumeQueue::dirty_bytes`` >= min`](ConsumeQueue::dirty_bytes), in
    /// time that does not grow with the queue's files. Unwritten bytes lie in
    /// the newest files only (a file is written once every earlier one is,
    /// and full files never change), so the walk from the newest file stops
    /// at the first one fully written.
    pub fn unwritten_reaches(&self, min: usize) -> bool {
        let mut unwritten = 0;
        for file in self.files.iter().rev() {
            let dirty = file.dirty_end() - file.written_len;
            if dirty == 0 {
                break;
            }
            unwritten += dirty;
            if unwritten >= min {
                return true;
            }
        }
        unwritten >= min
    }

    /// Flush errors kept since the last call (at most [`CQ_ERRORS_KEPT_MAX`]).
    pub fn take_errors(&mut self) -> Vec<StorageError> {
        std::mem::take(&mut self.errors)
    }

    /// Flush errors seen in all (including those no longer kept).
    pub fn error_count(&self) -> u64 {
        self.error_count
    }

    fn record_error(&mut self, error: StorageError) {
        // Logged by the store, once a flush interval for all queues.
        self.error_count += 1;
        if self.errors.len() < CQ_ERRORS_KEPT_MAX {
            self.errors.push(error);
        }
    }

    fn op_id(&self, local_seq: u32) -> OpId {
        OpId::new(OpTag::ConsumeQueue, self.seq_prefix | u64::from(local_seq))
    }

    /// Submits, for every file with no operation in flight, a write of its
    /// dirty range or, if its last write is not yet synced, an fdatasync.
    /// Writes and fdatasyncs alternate, and a file is written only once the
    /// files before it are written and synced, so bytes reach the disk in
    /// queue order: data becomes durable within two flushes.
    /// Returns how many operations were submitted; stops early when the
    /// disk's queue is full.
    ///
    /// # Errors
    /// None today: a failure to create a file or submit an operation is, like
    /// a failed write, kept for [`ConsumeQueue::take_errors`] and retried by
    /// the next flush (the ConsumeQueue is derived data; the append path must
    /// not stop for it). The `Result` leaves room for fatal errors.
    pub fn flush<D: Disk + ?Sized>(&mut self, disk: &mut D) -> Result<usize, StorageError> {
        self.created = false;
        self.leave_memory_where_done(disk);
        let mut submitted = 0;
        for index in 0..self.files.len() {
            // Writes are ordered: a file's write starts only once every
            // earlier file is fully written and synced, and within a file a
            // write starts only once the previous one is synced. A crash,
            // even a power loss, then tears at most the queue's last entry
            // (see `ConsumeQueue::resume_offset`).
            if index > 0 {
                let previous = &self.files[index - 1];
                if previous
                    .in_flight
                    .as_ref()
                    .is_some_and(|f| f.write.is_some())
                    || previous.written_len < previous.dirty_end()
                    || previous.sync_before_write
                {
                    break;
                }
            }
            let file = &self.files[index];
            if file.in_flight.is_some() {
                continue;
            }
            let dirty_end = file.dirty_end();
            let wants_write = file.written_len < dirty_end && !file.sync_before_write;
            let wants_sync =
                !wants_write && (file.synced_len < file.written_len || file.sync_before_write);
            if !wants_write && !wants_sync {
                continue;
            }
            let Some(id) = self.files[index].file else {
                // Created in the background, off the append path; the
                // writes of this file and of later ones wait for it.
                match self.start_create(disk, index) {
                    Ok(started) => submitted += usize::from(started),
                    Err(error) => self.record_error(error),
                }
                break;
            };
            let local_seq = self.next_local_seq;
            let op_id = self.op_id(local_seq);
            let file = &mut self.files[index];
            let (op, in_flight) = if wants_write {
                let start = file.written_len;
                // Bytes that may be non-zero on disk (a repaired entry, a
                // garbage tail) are rewritten by a write of their own: torn,
                // it can then only leave a bad *last* entry, never a bad one
                // followed by good ones.
                let end = if file.stale_end > start {
                    file.stale_end
                } else {
                    file.image.len()
                };
                let copy_end = file.image.len().min(end);
                let mut buf = disk.buffer(end - start);
                let data = buf.as_full_mut_slice();
                file.image.copy_to(start, &mut data[..copy_end - start]);
                data[copy_end - start..end - start].fill(0);
                buf.set_len(end - start);
                let op = DiskOp::Write {
                    file: id,
                    file_offset: start as u64,
                    buf,
                    buf_range: 0..end - start,
                };
                (
                    op,
                    InFlight {
                        local_seq,
                        write: Some((copy_end, end)),
                        sync_upto: 0,
                        create: false,
                        generation: file.generation,
                    },
                )
            } else {
                let op = DiskOp::Fdatasync { file: id };
                (
                    op,
                    InFlight {
                        local_seq,
                        write: None,
                        sync_upto: file.written_len,
                        create: false,
                        generation: file.generation,
                    },
                )
            };
            match disk.submit(op_id, op, false) {
                Ok(()) => {
                    file.in_flight = Some(in_flight);
                    self.next_local_seq = self.next_local_seq.wrapping_add(1);
                    submitted += 1;
                }
                Err((error, op)) => {
                    if let DiskOp::Write { buf, .. } = op {
                        disk.recycle(buf);
                    }
                    if !matches!(error, crate::disk::DiskError::QueueFull { .. }) {
                        self.record_error(error.into());
                    }
                    break;
                }
            }
        }
        Ok(submitted)
    }

    /// Written and fdatasynced bytes leave memory for a read-only view of
    /// their file (see `image.rs`): the last file's whole chunks, and all of
    /// a full file once it is written and fdatasynced, from the last file
    /// back to the first one already wholly on a view (files are written in
    /// order, so older ones went before). A file keeps the view it has when
    /// that shows the bytes (a shared mapping shows what was written since
    /// it was made), else gets a new one, compared byte for byte with the
    /// chunks that leave. A failed or differing mapping is logged and the
    /// file stays in memory.
    fn leave_memory_where_done<D: Disk + ?Sized>(&mut self, disk: &mut D) {
        let size = self.file_size();
        let last = self.files.len().saturating_sub(1);
        for at in (0..self.files.len()).rev() {
            let file = &self.files[at];
            if at < last && (file.image.is_wholly_on_view() || file.view_failed) {
                break;
            }
            let settled = file.written_len == file.image.len()
                && file.dirty_end() == file.image.len()
                && !file.sync_before_write
                && file.in_flight.is_none();
            let end = if at == last || settled {
                file.image.leave_end(file.synced_len, size)
            } else {
                file.image.view_len()
            };
            if file.view_failed || file.file.is_none() || end == file.image.view_len() {
                continue;
            }
            if self.files[at].image.leave_to_current_view(end) {
                continue;
            }
            let path = self.dir.join(self.files[at].name());
            let file = &mut self.files[at];
            match disk.map_read_only(&path) {
                Ok(view) => {
                    if !file.image.leave_to_view(view, end) {
                        file.view_failed = true;
                        tracing::warn!(path = %path.display(), "consume queue file on disk differs from what was written; it stays in memory");
                    }
                }
                Err(error) => {
                    file.view_failed = true;
                    tracing::warn!(%error, "consume queue file not mapped; it stays in memory");
                }
            }
        }
    }

    /// Starts creating file `index` in the background (sparse, then fsynced
    /// with its directory); false when the disk had no room (the
    /// next flush tries again).
    fn start_create<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        index: usize,
    ) -> Result<bool, StorageError> {
        if !self.dir_created {
            disk.create_dir_all(&self.dir)?;
            self.dir_created = true;
        }
        let path = self.dir.join(self.files[index].name());
        let size = self.file_size() as u64;
        let local_seq = self.next_local_seq;
        let op_id = self.op_id(local_seq);
        match disk.submit_create(op_id, &path, OpenOptions::buffered_sparse(size)) {
            Ok(()) => {}
            Err(crate::disk::DiskError::QueueFull { .. }) => return Ok(false),
            Err(error) => return Err(error.into()),
        }
        let file = &mut self.files[index];
        file.in_flight = Some(InFlight {
            local_seq,
            write: None,
            sync_upto: 0,
            create: true,
            generation: file.generation,
        });
        self.next_local_seq = self.next_local_seq.wrapping_add(1);
        Ok(true)
    }

    /// Handles the completion of an operation this queue submitted (an
    /// unknown one, e.g. of a file removed since, is dropped). Gives the
    /// buffer back to the disk.
    pub fn on_completion<D: Disk + ?Sized>(&mut self, disk: &mut D, completion: DiskCompletion) {
        let DiskCompletion { op_id, result, buf } = completion;
        if let Some(buf) = buf {
            disk.recycle(buf);
        }
        let local_seq = (op_id.seq() & ((1 << LOCAL_SEQ_BITS) - 1)) as u32;
        let Some(file) = self.files.iter_mut().find(|f| {
            f.in_flight
                .as_ref()
                .is_some_and(|i| i.local_seq == local_seq)
        }) else {
            return;
        };
        let in_flight = file.in_flight.take().expect("found by its in-flight op");
        if in_flight.create {
            match result {
                Ok(value) => {
                    file.file = Some(created_file_id(value));
                    self.created = true;
                }
                Err(error) => self.record_error(error.into()),
            }
            return;
        }
        let current = in_flight.generation == file.generation;
        match (result, in_flight.write) {
            (Ok(n), Some((copy_end, end))) if current => {
                let start = file.written_len;
                if n == end - start {
                    file.written_len = copy_end;
                    file.sync_before_write = true;
                    if end >= file.stale_end {
                        file.stale_end = 0;
                    }
                } else {
                    // A short buffered write: the next flush rewrites the range.
                    tracing::debug!(
                        written = n,
                        wanted = end - start,
                        "short consume queue write"
                    );
                }
            }
            (Ok(_), None) if current => {
                file.synced_len = file.synced_len.max(in_flight.sync_upto);
                file.sync_before_write = false;
            }
            (Ok(_), _) => {}
            (Err(error), _) => self.record_error(error.into()),
        }
    }

    /// Loads the queue's files from disk (recovery rule of 6.9: entries are
    /// read while `offset >= 0 && size > 0`; the first invalid or zero entry
    /// ends the queue and later files are removed). After a
    /// [`LastStop::Abnormal`] stop, or when the bytes after the last valid
    /// entry are not zero, the last file is cut back there.
    ///
    /// # Errors
    /// The disk's errors listing, opening, reading or removing files.
    ///
    /// # Panics
    /// If operations are in flight on the disk (load runs at startup).
    pub fn load<D: Disk + ?Sized>(
        disk: &mut D,
        root: &Path,
        topic: &str,
        queue_id: u32,
        last_stop: LastStop,
    ) -> Result<Self, StorageError> {
        ConsumeQueue::new(root, topic, queue_id)?.load_files(disk, last_stop)
    }

    fn load_files<D: Disk + ?Sized>(
        mut self,
        disk: &mut D,
        last_stop: LastStop,
    ) -> Result<Self, StorageError> {
        let queue = &mut self;
        let mut names: Vec<(u64, String)> = disk
            .list_dir(&queue.dir)?
            .into_iter()
            .filter_map(|name| match parse_file_name(&name, queue.file_size()) {
                Some(offset) => Some((offset, name)),
                None => {
                    tracing::warn!(dir = %queue.dir.display(), %name, "ignoring a file that is not a consume queue file");
                    None
                }
            })
            .collect();
        names.sort();
        // The directory exists if it lists files (list_dir of a missing
        // directory is empty).
        queue.dir_created = !names.is_empty();
        let mut ended = false;
        // End of the previous real entry: loaded entries must not go back.
        let mut prev_end = None;
        let mut removed_any = false;
        for (byte_offset, name) in names {
            let path = queue.dir.join(&name);
            let base = byte_offset / CQ_ENTRY_SIZE as u64;
            let contiguous = queue
                .files
                .last()
                .is_none_or(|l| l.base + queue.file_entry_count as u64 == base);
            if ended || !contiguous {
                tracing::warn!(path = %path.display(), "removing consume queue file past the recovered end");
                disk.remove(&path)?;
                (ended, removed_any) = (true, true);
                continue;
            }
            let id = disk.open(&path, OpenOptions::buffered(None))?;
            let size = disk.file_size(id)?;
            // A mapping of the file is checked in place and kept (see
            // `image.rs`); without one the file is read.
            let view = match disk.map_read_only(&path) {
                Ok(view) => Some(view),
                Err(error) => {
                    tracing::warn!(%error, "consume queue file not mapped; it is read into memory");
                    None
                }
            };
            let read;
            let bytes: &[u8] = match &view {
                // Entries are written from the start of the file; past its
                // first hole there are none (and on a full tmpfs, reading a
                // hole through the mapping raises SIGBUS).
                Some(view) => &view[..view.leading_data_len().min(queue.file_size())],
                None => {
                    read = read_blocking(
                        disk,
                        id,
                        &path,
                        (size as usize).min(queue.file_size()),
                        OpTag::ConsumeQueue,
                    )?;
                    &read
                }
            };
            let valid = bytes
                .chunks_exact(CQ_ENTRY_SIZE)
                .map(|c| CqEntry::decode(c.try_into().expect("exact chunk")))
                .take_while(|e| accept_loaded(e, &mut prev_end))
                .count();
            if valid == 0 && !queue.files.is_empty() {
                // Keep the last file non-empty: the queue ends in the one before.
                disk.close(id)?;
                disk.remove(&path)?;
                (ended, removed_any) = (true, true);
                continue;
            }
            let valid_len = valid * CQ_ENTRY_SIZE;
            let mut file = CqFile::new(base);
            let has_room = valid < queue.file_entry_count;
            let leftovers = bytes
                .get(valid_len..valid_len + CQ_ENTRY_SIZE)
                .is_some_and(|next| next.iter().any(|b| *b != 0));
            file.image = match view {
                Some(view) => image::CqImage::from_view(view, valid_len),
                None => image::CqImage::from_bytes(&bytes[..valid_len]),
            };
            file.file = Some(id);
            file.written_len = valid_len;
            file.synced_len = valid_len;
            if has_room && (leftovers || last_stop == LastStop::Abnormal) {
                // Zero what follows the last valid entry now (ftruncate down
                // and back up), and fdatasync that before anything is
                // written there: rewriting over leftovers that look valid
                // could otherwise tie them back to the queue after a crash.
                // After a crash this is done whatever the next entry holds,
                // since a crash can leave bytes anywhere within its last
                // write: looking for them read all 6 MB of every queue's
                // last file (holes faulted in as zeros), 20 s for a store of
                // 1,000 queues. A clean stop flushed every queue until its
                // file held zeros after the end, so a clean open cuts back
                // only a file whose next entry says otherwise; until the
                // twenty-fourth session it cut back every queue's last file
                // and its first flush (or the stop) fdatasynced each one.
                if leftovers {
                    tracing::warn!(path = %path.display(), valid, ?last_stop, "zeroing a consume queue tail after the last valid entry");
                }
                disk.set_len(id, valid_len as u64)?;
                disk.set_len(id, queue.file_size() as u64)?;
                file.sync_before_write = true;
            }
            queue.files.push(file);
            ended = valid < queue.file_entry_count;
        }
        if removed_any {
            disk.sync_dir(&queue.dir)?;
        }
        if let Some(first) = queue.files.first() {
            let fillers = (0..first.entry_count())
                .take_while(|&i| first.entry(i).is_filler())
                .count();
            queue.min_offset = first.base + fillers as u64;
        }
        queue.max_physical_offset = queue.last_real_entry().map_or(0, |e| e.end_offset());
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::Wait;
    use crate::disk::sim::{SimConfig, SimDisk, SimImage};
    use std::time::Duration;

    const ROOT: &str = "/store";

    fn entry(i: u64) -> CqEntry {
        CqEntry {
            commit_log_offset: 1000 + i * 100,
            size: 100,
            tags_code: i as i64 - 3,
        }
    }

    fn disk(seed: u64) -> SimDisk {
        SimDisk::new(SimConfig::new(seed))
    }

    fn queue() -> ConsumeQueue {
        ConsumeQueue::new(Path::new(ROOT), "TopicTest", 3).unwrap()
    }

    fn filled(count: u64) -> ConsumeQueue {
        let mut q = queue();
        for i in 0..count {
            assert_eq!(q.append(i, entry(i)).unwrap(), AppendOutcome::Appended);
        }
        q
    }

    /// Flushes and completes until the queue is clean.
    fn settle(disk: &mut SimDisk, queue: &mut ConsumeQueue) {
        for _ in 0..1000 {
            queue.flush(disk).unwrap();
            let mut out = Vec::new();
            disk.poll(&mut out, 64, Wait::AtLeastOne(Duration::ZERO))
                .unwrap();
            for c in out {
                queue.on_completion(disk, c);
            }
            if queue.is_clean() && queue.is_idle() {
                return;
            }
        }
        panic!("queue did not settle");
    }

    fn file_path(name: &str) -> PathBuf {
        queue_dir(Path::new(ROOT), "TopicTest", 3).join(name)
    }

    fn file_bytes(disk: &SimDisk, name: &str) -> Vec<u8> {
        disk.snapshot()
            .files
            .get(&file_path(name))
            .cloned()
            .unwrap_or_else(|| panic!("no file {name}"))
    }

    #[test]
    fn entry_is_big_endian_offset_then_size_then_tags_code() {
        let e = CqEntry {
            commit_log_offset: 0x0102_0304_0506_0708,
            size: 0x0A0B_0C0D,
            tags_code: -2,
        };
        let bytes = e.encode();
        assert_eq!(bytes[0..8], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(bytes[8..12], [0x0A, 0x0B, 0x0C, 0x0D]);
        assert_eq!(
            bytes[12..20],
            [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE]
        );
        assert_eq!(CqEntry::decode(&bytes), e);
        assert_eq!(CqEntry::FILLER.encode()[8..12], [0x7F, 0xFF, 0xFF, 0xFF]);
    }

    #[test]
    fn entry_validity_follows_java_recovery_rule() {
        assert!(entry(0).is_valid());
        assert!(
            !CqEntry {
                commit_log_offset: 0,
                size: 0,
                tags_code: 0
            }
            .is_valid()
        );
        assert!(
            !CqEntry {
                commit_log_offset: 1 << 63,
                size: 10,
                tags_code: 0
            }
            .is_valid()
        );
        assert!(
            !CqEntry {
                commit_log_offset: 5,
                size: 0x8000_0000,
                tags_code: 0
            }
            .is_valid()
        );
        assert!(CqEntry::FILLER.is_valid(), "fillers survive recovery");
    }

    #[test]
    fn append_assigns_dense_offsets_and_lookups_return_them() {
        let q = filled(10);
        assert_eq!((q.min_offset(), q.max_offset()), (0, 10));
        assert_eq!(q.entry(4), Some(entry(4)));
        assert_eq!(q.entry(10), None);
        assert_eq!(q.entries(8, 5), vec![entry(8), entry(9)]);
        assert_eq!(q.entries(2, 3), vec![entry(2), entry(3), entry(4)]);
        assert!(q.entries(10, 5).is_empty());
        assert_eq!(q.max_physical_offset(), entry(9).end_offset());
    }

    #[test]
    fn append_ignores_entries_already_present() {
        let mut q = filled(5);
        assert_eq!(q.append(4, entry(4)).unwrap(), AppendOutcome::Duplicate);
        assert_eq!(q.append(2, entry(2)).unwrap(), AppendOutcome::Duplicate);
        // Below max physical offset, even at the next queue offset.
        assert_eq!(q.append(5, entry(1)).unwrap(), AppendOutcome::Duplicate);
        // A taken queue offset with a new commit log offset.
        assert_eq!(q.append(3, entry(7)).unwrap(), AppendOutcome::Duplicate);
        assert_eq!(q.max_offset(), 5);
        assert_eq!(q.append(5, entry(5)).unwrap(), AppendOutcome::Appended);
    }

    #[test]
    fn append_past_the_next_offset_is_a_gap_error() {
        let mut q = filled(5);
        let err = q.append(7, entry(7)).unwrap_err();
        assert!(
            matches!(
                err,
                StorageError::ConsumeQueueGap {
                    expected: 5,
                    queue_offset: 7,
                    queue_id: 3,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(q.max_offset(), 5);
    }

    #[test]
    fn append_rejects_invalid_and_filler_entries() {
        let mut q = queue();
        assert!(matches!(
            q.append(0, CqEntry::FILLER),
            Err(StorageError::InvalidArgument(_))
        ));
        let zero = CqEntry {
            commit_log_offset: 10,
            size: 0,
            tags_code: 0,
        };
        assert!(matches!(
            q.append(0, zero),
            Err(StorageError::InvalidArgument(_))
        ));
    }

    #[test]
    fn append_to_an_empty_queue_at_a_nonzero_offset_pads_with_fillers() {
        let mut d = disk(1);
        let mut q = queue();
        let start = CQ_FILE_ENTRY_COUNT as u64 + 5;
        q.append(start, entry(0)).unwrap();
        assert_eq!((q.min_offset(), q.max_offset()), (start, start + 1));
        assert_eq!(q.entry(start - 1), None, "fillers are below the min offset");
        assert_eq!(q.entry(start), Some(entry(0)));
        settle(&mut d, &mut q);
        let bytes = file_bytes(&d, "00000000000006000000");
        assert_eq!(bytes.len(), CQ_FILE_SIZE);
        for i in 0..5 {
            assert_eq!(
                bytes[i * 20..i * 20 + 20],
                CqEntry::FILLER.encode(),
                "filler {i}"
            );
        }
        assert_eq!(bytes[100..120], entry(0).encode());
        assert!(bytes[120..].iter().all(|b| *b == 0));
    }

    #[test]
    fn append_rolls_over_to_a_new_file_after_300000_entries() {
        let mut d = disk(2);
        let mut q = filled(CQ_FILE_ENTRY_COUNT as u64 + 2);
        assert_eq!(q.file_count(), 2);
        assert_eq!(
            q.entry(CQ_FILE_ENTRY_COUNT as u64 + 1),
            Some(entry(CQ_FILE_ENTRY_COUNT as u64 + 1))
        );
        settle(&mut d, &mut q);
        let first = file_bytes(&d, "00000000000000000000");
        let second = file_bytes(&d, "00000000000006000000");
        assert_eq!(
            first[CQ_FILE_SIZE - 20..],
            entry(CQ_FILE_ENTRY_COUNT as u64 - 1).encode()
        );
        assert_eq!(second[0..20], entry(CQ_FILE_ENTRY_COUNT as u64).encode());
        assert_eq!(
            second[20..40],
            entry(CQ_FILE_ENTRY_COUNT as u64 + 1).encode()
        );
    }

    #[test]
    fn unwritten_reaches_agrees_with_dirty_bytes_across_files() {
        let mut d = disk(19);
        let mut q = filled(CQ_FILE_ENTRY_COUNT as u64 + 2);
        let dirty = q.dirty_bytes();
        assert_eq!(dirty, (CQ_FILE_ENTRY_COUNT + 2) * CQ_ENTRY_SIZE);
        assert!(q.unwritten_reaches(dirty), "both files count");
        assert!(!q.unwritten_reaches(dirty + 1));
        settle(&mut d, &mut q);
        assert!(q.unwritten_reaches(0));
        assert!(!q.unwritten_reaches(1), "all written");
        q.append(
            CQ_FILE_ENTRY_COUNT as u64 + 2,
            entry(CQ_FILE_ENTRY_COUNT as u64 + 2),
        )
        .unwrap();
        assert_eq!(q.dirty_bytes(), CQ_ENTRY_SIZE);
        assert!(q.unwritten_reaches(CQ_ENTRY_SIZE));
        assert!(!q.unwritten_reaches(CQ_ENTRY_SIZE + 1));
    }

    #[test]
    fn flush_writes_behind_and_fdatasyncs() {
        let mut d = disk(3);
        let mut q = filled(3);
        assert_eq!(q.dirty_bytes(), 60);
        assert!(!q.is_clean());
        settle(&mut d, &mut q);
        let durable = d.durable_image();
        let bytes = durable
            .files
            .get(&file_path("00000000000000000000"))
            .unwrap();
        assert_eq!(
            bytes[0..60],
            [entry(0).encode(), entry(1).encode(), entry(2).encode()].concat()
        );
        // Appends after a flush write only the new range.
        q.append(3, entry(3)).unwrap();
        assert_eq!(q.dirty_bytes(), 20);
        settle(&mut d, &mut q);
        assert_eq!(
            file_bytes(&d, "00000000000000000000")[60..80],
            entry(3).encode()
        );
    }

    #[test]
    fn flush_error_is_kept_and_the_range_is_written_again() {
        let mut d = disk(4);
        d.faults_mut().write_eio_nth = Some(1);
        let mut q = filled(3);
        settle(&mut d, &mut q);
        let errors = q.take_errors();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].to_string().contains("write"), "{}", errors[0]);
        assert_eq!(q.error_count(), 1);
        assert_eq!(
            file_bytes(&d, "00000000000000000000")[0..20],
            entry(0).encode()
        );
    }

    #[test]
    fn flush_keeps_a_failure_to_create_a_file_and_retries_it() {
        let mut config = SimConfig::new(18);
        config.capacity_bytes = 1024 * 1024;
        let mut d = SimDisk::new(config);
        let mut q = filled(2);
        // The file is created in the background: its failure arrives as a
        // completion, not from the flush.
        assert_eq!(q.flush(&mut d).unwrap(), 1, "the create was submitted");
        assert!(q.take_errors().is_empty());
        for _ in 0..10 {
            let mut out = Vec::new();
            d.poll(&mut out, 64, Wait::AtLeastOne(Duration::ZERO))
                .unwrap();
            for completion in out {
                q.on_completion(&mut d, completion);
            }
        }
        assert!(q.is_idle());
        let errors = q.take_errors();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().contains("No space"), "{}", errors[0]);
        assert_eq!(q.dirty_bytes(), 40, "still dirty, retried next time");
        assert_eq!(q.flush(&mut d).unwrap(), 1, "the next flush tries again");
    }

    #[test]
    fn truncate_drops_entries_from_the_offset_and_zeroes_the_tail_on_disk() {
        let mut d = disk(5);
        let mut q = filled(10);
        settle(&mut d, &mut q);
        q.truncate_from_commit_log_offset(&mut d, entry(6).commit_log_offset + 1)
            .unwrap();
        assert_eq!(
            q.max_offset(),
            7,
            "entry 6 starts below the offset and stays"
        );
        q.truncate_from_commit_log_offset(&mut d, entry(6).commit_log_offset)
            .unwrap();
        assert_eq!(q.max_offset(), 6);
        assert_eq!(q.max_physical_offset(), entry(5).end_offset());
        let at_once = file_bytes(&d, "00000000000000000000");
        assert_eq!(at_once.len(), CQ_FILE_SIZE);
        assert!(
            at_once[120..200].iter().all(|b| *b == 0),
            "zeroed before any flush"
        );
        assert!(!q.is_clean(), "the cut still needs an fdatasync");
        settle(&mut d, &mut q);
        let bytes = file_bytes(&d, "00000000000000000000");
        assert_eq!(bytes[100..120], entry(5).encode());
        assert!(
            bytes[120..200].iter().all(|b| *b == 0),
            "stale entries zeroed"
        );
        // Re-dispatch after recovery appends at the cut.
        assert_eq!(q.append(6, entry(6)).unwrap(), AppendOutcome::Appended);
    }

    #[test]
    fn truncate_removes_files_that_start_after_the_offset() {
        let mut d = disk(6);
        let count = CQ_FILE_ENTRY_COUNT as u64 + 3;
        let mut q = filled(count);
        settle(&mut d, &mut q);
        q.truncate_from_commit_log_offset(
            &mut d,
            entry(CQ_FILE_ENTRY_COUNT as u64).commit_log_offset,
        )
        .unwrap();
        assert_eq!(q.file_count(), 1);
        assert_eq!(q.max_offset(), CQ_FILE_ENTRY_COUNT as u64);
        assert!(
            !d.snapshot()
                .files
                .contains_key(&file_path("00000000000006000000"))
        );
        q.truncate_from_commit_log_offset(&mut d, 0).unwrap();
        assert_eq!((q.file_count(), q.min_offset(), q.max_offset()), (0, 0, 0));
        assert!(
            !d.snapshot()
                .files
                .contains_key(&file_path("00000000000000000000"))
        );
    }

    #[test]
    fn truncate_to_empty_then_append_at_the_cut_refills_with_fillers() {
        let mut d = disk(7);
        let mut q = queue();
        let start = 2 * CQ_FILE_ENTRY_COUNT as u64 + 10;
        q.append(start, entry(0)).unwrap();
        q.append(start + 1, entry(1)).unwrap();
        settle(&mut d, &mut q);
        q.truncate_from_commit_log_offset(&mut d, entry(0).commit_log_offset)
            .unwrap();
        assert_eq!(
            (q.file_count(), q.min_offset(), q.max_offset()),
            (1, start, start)
        );
        q.append(start, entry(0)).unwrap();
        assert_eq!(q.entry(start), Some(entry(0)));
    }

    #[test]
    fn load_reads_back_what_flush_wrote() {
        let mut d = disk(8);
        let mut q = filled(CQ_FILE_ENTRY_COUNT as u64 + 7);
        settle(&mut d, &mut q);
        drop(q);
        let mut d = SimDisk::from_image(d.durable_image(), SimConfig::new(9));
        let mut loaded =
            ConsumeQueue::load(&mut d, Path::new(ROOT), "TopicTest", 3, LastStop::Abnormal)
                .unwrap();
        assert_eq!(
            (loaded.min_offset(), loaded.max_offset()),
            (0, CQ_FILE_ENTRY_COUNT as u64 + 7)
        );
        assert_eq!(
            loaded.entry(CQ_FILE_ENTRY_COUNT as u64 + 6),
            Some(entry(CQ_FILE_ENTRY_COUNT as u64 + 6))
        );
        assert_eq!(
            loaded.max_physical_offset(),
            entry(CQ_FILE_ENTRY_COUNT as u64 + 6).end_offset()
        );
        // The last file's tail was zeroed on load, whatever it held: that
        // is fdatasynced before anything is written after it.
        assert!(!loaded.is_clean());
        settle(&mut d, &mut loaded);
        assert!(loaded.is_clean());
        assert_eq!(loaded.max_offset(), CQ_FILE_ENTRY_COUNT as u64 + 7);
    }

    #[test]
    fn a_load_after_a_clean_stop_keeps_the_last_file_and_syncs_nothing() {
        let mut d = disk(8);
        let mut q = filled(CQ_FILE_ENTRY_COUNT as u64 + 7);
        settle(&mut d, &mut q);
        drop(q);
        let mut d = SimDisk::from_image(d.durable_image(), SimConfig::new(9));
        let mut loaded =
            ConsumeQueue::load(&mut d, Path::new(ROOT), "TopicTest", 3, LastStop::Clean).unwrap();
        assert_eq!(loaded.max_offset(), CQ_FILE_ENTRY_COUNT as u64 + 7);
        assert!(loaded.is_clean(), "nothing was cut back, nothing to sync");
        loaded.flush(&mut d).unwrap();
        let mut out = Vec::new();
        d.poll(&mut out, 64, Wait::AtLeastOne(Duration::ZERO))
            .unwrap();
        assert!(out.is_empty(), "a flush of a clean load submitted {out:?}");
        // Appends go on after the last entry and survive a reload.
        let next = CQ_FILE_ENTRY_COUNT as u64 + 7;
        loaded.append(next, entry(next)).unwrap();
        settle(&mut d, &mut loaded);
        let mut d = SimDisk::from_image(d.durable_image(), SimConfig::new(10));
        let again =
            ConsumeQueue::load(&mut d, Path::new(ROOT), "TopicTest", 3, LastStop::Clean).unwrap();
        assert_eq!(again.max_offset(), next + 1);
        assert_eq!(again.entry(next), Some(entry(next)));
    }

    /// A disk image with the queue's first file: entries 0..3, then
    /// `after` (what follows them in the file; zeros after that).
    fn three_entries_then(after: &[CqEntry]) -> SimImage {
        let mut image = SimImage::default();
        let dir = queue_dir(Path::new(ROOT), "TopicTest", 3);
        for ancestor in dir.ancestors() {
            image.dirs.insert(ancestor.to_path_buf());
        }
        let mut first = vec![0u8; CQ_FILE_SIZE];
        for (i, e) in (0..3).map(entry).chain(after.iter().copied()).enumerate() {
            first[i * 20..i * 20 + 20].copy_from_slice(&e.encode());
        }
        image.files.insert(file_path("00000000000000000000"), first);
        image
    }

    /// Whether the first file holds only zeros after its first 3 entries.
    fn first_file_zero_after_three(d: &SimDisk) -> bool {
        file_bytes(d, "00000000000000000000")[3 * CQ_ENTRY_SIZE..]
            .iter()
            .all(|b| *b == 0)
    }

    #[test]
    fn a_load_after_a_clean_stop_still_cuts_back_a_tail_that_is_not_zero() {
        // Entry 3 is not valid but not zero either (offset before entry 2's end).
        let image = three_entries_then(&[entry(1), entry(4)]);
        let mut d = SimDisk::from_image(image, SimConfig::new(11));
        let mut q =
            ConsumeQueue::load(&mut d, Path::new(ROOT), "TopicTest", 3, LastStop::Clean).unwrap();
        assert_eq!(q.max_offset(), 3);
        assert!(
            first_file_zero_after_three(&d),
            "the tail is zeroed at load"
        );
        assert!(!q.is_clean(), "the zeroing still needs an fdatasync");
        settle(&mut d, &mut q);
        assert!(q.is_clean());
    }

    #[test]
    fn load_stops_at_the_first_invalid_entry_and_removes_later_files() {
        // Entry 3 is zero; entry 4 is valid-looking garbage past the end.
        let mut image = three_entries_then(&[CqEntry::decode(&[0; CQ_ENTRY_SIZE]), entry(4)]);
        image.files.insert(
            file_path("00000000000006000000"),
            entry(9).encode().to_vec(),
        );
        image.files.insert(file_path("not-a-cq-file"), vec![1]);
        let mut d = SimDisk::from_image(image, SimConfig::new(10));
        let mut q = ConsumeQueue::load(&mut d, Path::new(ROOT), "TopicTest", 3, LastStop::Abnormal)
            .unwrap();
        assert_eq!(q.max_offset(), 3);
        assert_eq!(q.max_physical_offset(), entry(2).end_offset());
        assert!(
            !d.snapshot()
                .files
                .contains_key(&file_path("00000000000006000000"))
        );
        assert!(
            first_file_zero_after_three(&d),
            "the garbage tail is zeroed at load"
        );
        assert!(!q.is_clean(), "the zeroing still needs an fdatasync");
        settle(&mut d, &mut q);
        assert!(first_file_zero_after_three(&d));
    }

    #[test]
    fn load_sets_min_offset_past_leading_fillers() {
        let mut d = disk(11);
        let mut q = queue();
        q.append(12, entry(0)).unwrap();
        settle(&mut d, &mut q);
        let loaded =
            ConsumeQueue::load(&mut d, Path::new(ROOT), "TopicTest", 3, LastStop::Clean).unwrap();
        assert_eq!((loaded.min_offset(), loaded.max_offset()), (12, 13));
    }

    #[test]
    fn delete_below_removes_old_files_but_never_the_last_and_moves_min_offset() {
        let mut d = disk(12);
        let per_file = CQ_FILE_ENTRY_COUNT as u64;
        let mut q = filled(2 * per_file + 5);
        settle(&mut d, &mut q);
        // Everything in file 0 is below; file 1 starts at or above.
        let min = entry(per_file + 10).commit_log_offset;
        assert_eq!(q.delete_below_commit_log_offset(&mut d, min).unwrap(), 1);
        assert_eq!(q.min_offset(), per_file + 10);
        assert_eq!(q.entry(per_file + 9), None);
        assert!(
            !d.snapshot()
                .files
                .contains_key(&file_path("00000000000000000000"))
        );
        // All entries below: file 1 goes, the last file stays, min = max.
        let all = entry(3 * per_file).commit_log_offset;
        assert_eq!(q.delete_below_commit_log_offset(&mut d, all).unwrap(), 1);
        assert_eq!(q.file_count(), 1);
        assert_eq!(q.min_offset(), q.max_offset());
    }

    #[test]
    fn delete_below_at_most_removes_no_more_files_than_asked_and_the_rest_later() {
        let mut d = disk(13);
        let per_file = CQ_FILE_ENTRY_COUNT as u64;
        let mut q = filled(3 * per_file + 5);
        settle(&mut d, &mut q);
        let all = entry(4 * per_file).commit_log_offset;
        assert_eq!(
            q.delete_below_commit_log_offset_at_most(&mut d, all, 1)
                .unwrap(),
            1
        );
        assert_eq!(q.file_count(), 3);
        // The min offset follows the CommitLog, not the files left.
        assert_eq!(q.min_offset(), q.max_offset());
        assert_eq!(
            q.delete_below_commit_log_offset_at_most(&mut d, all, 0)
                .unwrap(),
            0
        );
        assert_eq!(
            q.delete_below_commit_log_offset_at_most(&mut d, all, 5)
                .unwrap(),
            2
        );
        assert_eq!(q.file_count(), 1);
        assert_eq!(q.min_offset(), q.max_offset());
    }

    #[test]
    fn delete_below_waits_for_a_file_with_a_flush_in_flight() {
        let mut d = disk(13);
        let per_file = CQ_FILE_ENTRY_COUNT as u64;
        let mut q = filled(per_file + 1);
        q.flush(&mut d).unwrap();
        let removed = q.delete_below_commit_log_offset(&mut d, u64::MAX).unwrap();
        assert_eq!(removed, 0);
        settle(&mut d, &mut q);
        assert_eq!(
            q.delete_below_commit_log_offset(&mut d, u64::MAX).unwrap(),
            1
        );
    }

    /// Store times: entry i was stored at `times[i]`; commit log offsets map
    /// back to i.
    fn search(times: &[i64], ts: i64, boundary: BoundaryType) -> u64 {
        let mut q = queue();
        for i in 0..times.len() as u64 {
            q.append(i, entry(i)).unwrap();
        }
        q.search_offset_by_timestamp(ts, boundary, |offset| {
            times.get(((offset - 1000) / 100) as usize).copied()
        })
    }

    #[test]
    fn search_lower_returns_first_entry_at_or_after_the_timestamp() {
        let times = [10, 20, 20, 20, 30];
        assert_eq!(search(&times, 20, BoundaryType::Lower), 1);
        assert_eq!(search(&times, 25, BoundaryType::Lower), 4);
        assert_eq!(search(&times, 5, BoundaryType::Lower), 0, "all newer");
        assert_eq!(
            search(&times, 31, BoundaryType::Lower),
            5,
            "all older: max offset"
        );
    }

    #[test]
    fn search_upper_returns_last_entry_at_or_before_the_timestamp() {
        let times = [10, 20, 20, 20, 30];
        assert_eq!(search(&times, 20, BoundaryType::Upper), 3);
        assert_eq!(search(&times, 25, BoundaryType::Upper), 3);
        assert_eq!(
            search(&times, 5, BoundaryType::Upper),
            0,
            "all newer: min offset"
        );
        assert_eq!(
            search(&times, 31, BoundaryType::Upper),
            4,
            "all older: last entry"
        );
    }

    #[test]
    fn search_on_an_empty_queue_returns_zero_and_skips_unreadable_records() {
        assert_eq!(search(&[], 10, BoundaryType::Lower), 0);
        assert_eq!(search(&[], 10, BoundaryType::Upper), 0);
        let mut q = filled(4);
        // Records 0 and 1 are gone from the CommitLog.
        let found = q.search_offset_by_timestamp(15, BoundaryType::Lower, |offset| {
            match (offset - 1000) / 100 {
                0 | 1 => None,
                i => Some(i as i64 * 10),
            }
        });
        assert_eq!(found, 2);
        q.truncate_from_commit_log_offset(&mut disk(0), 0).unwrap();
        assert_eq!(
            q.search_offset_by_timestamp(0, BoundaryType::Upper, |_| Some(0)),
            0
        );
    }

    #[test]
    fn set_routes_completions_to_their_queue_and_loads_all_queues() {
        let mut d = disk(14);
        let mut set = ConsumeQueueSet::new(Path::new(ROOT));
        for i in 0..4 {
            set.append("A", 0, i, entry(i)).unwrap();
            set.append("B", 7, i, entry(i + 10)).unwrap();
        }
        set.append("B", 7, 9, entry(30)).unwrap_err();
        for _ in 0..1000 {
            set.flush_all(&mut d).unwrap();
            let mut out = Vec::new();
            d.poll(&mut out, 64, Wait::AtLeastOne(Duration::ZERO))
                .unwrap();
            for c in out {
                assert_eq!(c.op_id.tag(), Some(OpTag::ConsumeQueue));
                set.on_completion(&mut d, c);
            }
            if set.is_clean() {
                break;
            }
        }
        assert!(set.is_clean() && set.is_idle());
        assert!(set.take_errors().is_empty());
        assert_eq!(set.max_physical_offset(), entry(13).end_offset());
        let mut d = SimDisk::from_image(d.durable_image(), SimConfig::new(15));
        let loaded = ConsumeQueueSet::load_all(&mut d, Path::new(ROOT), LastStop::Clean).unwrap();
        assert_eq!(loaded.iter().count(), 2);
        assert_eq!(loaded.get("A", 0).unwrap().entry(3), Some(entry(3)));
        assert_eq!(loaded.get("B", 7).unwrap().entry(0), Some(entry(10)));
        assert!(loaded.get("B", 0).is_none());
    }

    #[test]
    fn append_repairs_a_torn_last_entry_and_only_the_last() {
        let mut d = disk(16);
        let mut q = filled(3);
        settle(&mut d, &mut q);
        assert_eq!(q.resume_offset(), entry(2).commit_log_offset);
        let torn = CqEntry {
            tags_code: 99,
            ..entry(2)
        };
        assert_eq!(q.append(2, torn).unwrap(), AppendOutcome::Repaired);
        assert_eq!(q.entry(2), Some(torn));
        let older = CqEntry {
            tags_code: 99,
            ..entry(1)
        };
        assert_eq!(q.append(1, older).unwrap(), AppendOutcome::Duplicate);
        assert_eq!(q.append(2, torn).unwrap(), AppendOutcome::Duplicate);
        settle(&mut d, &mut q);
        assert_eq!(
            file_bytes(&d, "00000000000000000000")[40..60],
            torn.encode()
        );
    }

    #[test]
    fn load_stops_where_commit_log_offsets_go_backwards() {
        let mut image = SimImage::default();
        let dir = queue_dir(Path::new(ROOT), "TopicTest", 3);
        for ancestor in dir.ancestors() {
            image.dirs.insert(ancestor.to_path_buf());
        }
        let mut bytes = vec![0u8; 100];
        bytes[0..20].copy_from_slice(&entry(0).encode());
        bytes[20..40].copy_from_slice(&entry(1).encode());
        // A torn page: high offset bytes lost.
        let torn = CqEntry {
            commit_log_offset: entry(2).commit_log_offset & 0xFF,
            ..entry(2)
        };
        bytes[40..60].copy_from_slice(&torn.encode());
        bytes[60..80].copy_from_slice(&CqEntry::FILLER.encode());
        image.files.insert(file_path("00000000000000000000"), bytes);
        let mut d = SimDisk::from_image(image, SimConfig::new(17));
        let q = ConsumeQueue::load(&mut d, Path::new(ROOT), "TopicTest", 3, LastStop::Abnormal)
            .unwrap();
        assert_eq!(q.max_offset(), 2);
    }

    fn wholly_on_view(q: &ConsumeQueue) -> Vec<bool> {
        q.files
            .iter()
            .map(|f| f.image.is_wholly_on_view())
            .collect()
    }

    #[test]
    fn full_files_written_and_synced_are_read_through_views() {
        let mut d = disk(40);
        let mut q = queue().with_file_entry_count(MODEL_FILE_ENTRY_COUNT);
        for i in 0..20 {
            q.append(i, entry(i)).unwrap();
        }
        settle(&mut d, &mut q);
        // The files behind the last leave memory at the next flush.
        q.flush(&mut d).unwrap();
        assert_eq!(wholly_on_view(&q), [true, true, false]);
        // The last file (6 entries) gave up its one whole chunk (5 entries
        // in unit tests).
        assert_eq!(q.files[2].image.view_len(), 5 * CQ_ENTRY_SIZE);
        let all: Vec<CqEntry> = (0..20).map(entry).collect();
        assert_eq!(q.entries(0, 64), all);
        // A store opening maps every file, the last one's entries too.
        let mut d = SimDisk::from_image(d.durable_image(), SimConfig::new(41));
        let mut q = load_small(&mut d);
        assert_eq!(wholly_on_view(&q), [true, true, true]);
        assert_eq!(q.entries(0, 64), all);
        // A cut inside a file on a view brings it back into memory, keeping
        // the entries before the cut.
        q.truncate_from_commit_log_offset(&mut d, entry(10).commit_log_offset)
            .unwrap();
        assert_eq!(q.files.len(), 2);
        assert!(q.files[0].image.is_wholly_on_view());
        assert!(!q.files[1].image.is_wholly_on_view());
        assert_eq!(q.entries(0, 64), all[..10]);
        settle(&mut d, &mut q);
        let mut d = SimDisk::from_image(d.durable_image(), SimConfig::new(42));
        assert_eq!(load_small(&mut d).entries(0, 64), all[..10]);
    }

    /// Entries per file in the model runs: small, so runs cross many files.
    const MODEL_FILE_ENTRY_COUNT: usize = 7;

    fn load_small(d: &mut SimDisk) -> ConsumeQueue {
        queue()
            .with_file_entry_count(MODEL_FILE_ENTRY_COUNT)
            .load_files(d, LastStop::Abnormal)
            .unwrap()
    }

    /// One seeded run of random appends, duplicates, flushes, truncations
    /// and crashes against a `Vec` model.
    fn model_run(seed: u64) {
        use crate::disk::sim::{CrashKind, SimRng};
        let mut rng = SimRng::new(seed);
        let mut d = disk(seed);
        let mut q = queue().with_file_entry_count(MODEL_FILE_ENTRY_COUNT);
        let mut model: Vec<CqEntry> = Vec::new();
        // First offset 0 and sizes below 256: a torn entry can then only
        // differ in its tags code (see `accept_loaded`).
        let mut next_offset = 0u64;
        for step in 0..150 {
            let ctx = format!("seed {seed} step {step}");
            match rng.below(100) {
                0..45 => {
                    let e = CqEntry {
                        commit_log_offset: next_offset,
                        size: 1 + rng.below(255) as u32,
                        tags_code: rng.next_u64() as i64,
                    };
                    next_offset = e.end_offset();
                    assert_eq!(
                        q.append(model.len() as u64, e).unwrap(),
                        AppendOutcome::Appended,
                        "{ctx}"
                    );
                    model.push(e);
                }
                45..55 if !model.is_empty() => {
                    let i = rng.below(model.len() as u64) as usize;
                    assert_eq!(
                        q.append(i as u64, model[i]).unwrap(),
                        AppendOutcome::Duplicate,
                        "{ctx}"
                    );
                }
                55..80 => {
                    q.flush(&mut d).unwrap();
                    let mut out = Vec::new();
                    d.poll(&mut out, 64, Wait::No).unwrap();
                    for c in out {
                        q.on_completion(&mut d, c);
                    }
                }
                80..86 => {
                    while !q.is_idle() {
                        let mut out = Vec::new();
                        d.poll(&mut out, 64, Wait::AtLeastOne(Duration::ZERO))
                            .unwrap();
                        for c in out {
                            q.on_completion(&mut d, c);
                        }
                    }
                    let k = rng.below(model.len() as u64 + 1) as usize;
                    let cut = model.get(k).map_or(next_offset, |e| e.commit_log_offset);
                    q.truncate_from_commit_log_offset(&mut d, cut).unwrap();
                    model.truncate(k);
                    next_offset = cut;
                }
                86..100 => {
                    // Kill with writes in flight, power loss with un-synced
                    // writes, or power loss after a complete flush.
                    let kind = match rng.below(3) {
                        0 => CrashKind::ProcessKill,
                        1 => CrashKind::PowerLoss,
                        _ => {
                            settle(&mut d, &mut q);
                            CrashKind::PowerLoss
                        }
                    };
                    d = d.crash(kind);
                    q = load_small(&mut d);
                    let loaded = q.max_offset() as usize;
                    assert!(
                        loaded <= model.len(),
                        "{ctx}: loaded {loaded} > model {}",
                        model.len()
                    );
                    for (i, expected) in model.iter().enumerate().take(loaded.saturating_sub(1)) {
                        assert_eq!(
                            q.entry(i as u64),
                            Some(*expected),
                            "{ctx}: entry {i} ({kind:?})"
                        );
                    }
                    if loaded > 0 {
                        let last = q.entry(loaded as u64 - 1).expect("loaded");
                        assert_eq!(
                            last.commit_log_offset,
                            model[loaded - 1].commit_log_offset,
                            "{ctx}"
                        );
                        assert_eq!(q.resume_offset(), last.commit_log_offset, "{ctx}");
                    }
                    // Recovery re-dispatches from the resume offset.
                    for (i, e) in model.iter().enumerate().skip(loaded.saturating_sub(1)) {
                        q.append(i as u64, *e).unwrap();
                    }
                    assert_eq!(
                        q.entries(0, model.len() + 1),
                        model,
                        "{ctx}: after re-dispatch"
                    );
                }
                _ => {}
            }
            assert_eq!(q.max_offset(), model.len() as u64, "{ctx}");
        }
        settle(&mut d, &mut q);
        let mut d = d.crash(CrashKind::PowerLoss);
        let q = load_small(&mut d);
        assert_eq!(
            q.entries(0, model.len() + 1),
            model,
            "seed {seed}: after a clean flush"
        );
    }

    const MODEL_SEEDS: u64 = 300;

    #[test]
    fn random_appends_flushes_truncations_and_crashes_match_a_model() {
        // Set CQ_MODEL_SEED to replay one seed.
        if let Some(seed) = std::env::var("CQ_MODEL_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            model_run(seed);
            return;
        }
        for seed in 0..MODEL_SEEDS {
            model_run(seed);
        }
    }

    #[test]
    fn topics_that_cannot_name_a_directory_are_rejected() {
        for topic in ["", ".", "..", "a/b"] {
            assert!(
                ConsumeQueue::new(Path::new(ROOT), topic, 0).is_err(),
                "{topic:?}"
            );
        }
    }
}
