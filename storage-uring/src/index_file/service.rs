//! [`IndexService`]: the index files of one shard, oldest first; builds the
//! keys of dispatched records, answers QUERY_MESSAGE lookups, writes files
//! behind and drops files below the CommitLog minimum.

use std::path::{Path, PathBuf};

use ringmq_protocol::message::index_key_hash;
use ringmq_protocol::message::layout::{SYS_FLAG_TRANSACTION_ROLLBACK_TYPE, transaction_type};

use super::image::SparseImage;
use super::{
    INDEX_ERRORS_KEPT_MAX, INDEX_QUERY_RESULT_MAX, INDEX_RELEASE_PAGES_PER_FLUSH, IndexFile,
    IndexGeometry, LOCAL_SEQ_BITS, parse_index_file_name,
};
use crate::disk::{Disk, DiskCompletion};
use crate::error::StorageError;
use crate::limits::CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX;

/// What the index needs of one dispatched record.
#[derive(Clone, Copy, Debug)]
pub struct IndexRecord<'a> {
    /// The record's topic.
    pub topic: &'a str,
    /// The record's CommitLog offset.
    pub commit_log_offset: u64,
    /// The record's store timestamp (ms).
    pub store_timestamp_ms: i64,
    /// The `sysFlag` (ROLLBACK records are not indexed).
    pub sys_flag: i32,
    /// The `UNIQ_KEY` property, if any.
    pub uniq_key: Option<&'a str>,
    /// The `KEYS` property (space-separated keys), if any.
    pub keys: Option<&'a str>,
}

/// The answer to a key query (QUERY_MESSAGE).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct IndexQueryResult {
    /// CommitLog offsets of matching entries, newest first. Hash collisions
    /// are possible: the caller re-checks keys against the records.
    pub phy_offsets: Vec<u64>,
    /// `endTimestamp` of the newest file (`indexLastUpdateTimestamp`).
    pub index_last_update_timestamp: i64,
    /// `endPhyOffset` of the newest file (`indexLastUpdatePhyoffset`).
    pub index_last_update_phy_offset: i64,
}

/// The index files of one shard.
#[derive(Debug)]
pub struct IndexService {
    dir: PathBuf,
    geometry: IndexGeometry,
    /// Oldest first; only the last one takes new keys.
    files: Vec<IndexFile>,
    next_serial: u32,
    key: String,
    errors: Vec<StorageError>,
    error_count: u64,
    /// The durability round in progress (see
    /// [`IndexService::advance_durable_point`]).
    round: Option<IndexRound>,
    /// The latest durable point.
    durable: IndexDurablePoint,
    /// Images of files now read through views, freed a few pages per flush
    /// round.
    releasing: Vec<SparseImage>,
}

/// How far the index is known durable: every entry of every record below
/// `offset` is written and fdatasynced, in the files up to the one created
/// at `file_created_ms` (0: none) and below `index_count` in that one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexDurablePoint {
    /// Outside-visible CommitLog offset.
    pub offset: u64,
    /// Creation time (name) of the newest file then, 0 if none.
    pub file_created_ms: i64,
    /// That file's `index_count` then.
    pub index_count: i32,
}

/// A round of [`IndexService::advance_durable_point`]: `point` is durable
/// once every file listed is durable up to its count.
#[derive(Debug)]
struct IndexRound {
    point: IndexDurablePoint,
    targets: Vec<(u32, i32)>,
}

impl IndexService {
    /// An empty index in `dir` (e.g. `<store>/index/<shard>`).
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`] for a geometry with no slot or fewer
    /// than two entries.
    pub fn new(dir: &Path, geometry: IndexGeometry) -> Result<Self, StorageError> {
        geometry.check()?;
        Ok(IndexService {
            dir: dir.to_path_buf(),
            geometry,
            files: Vec::new(),
            next_serial: 0,
            key: String::new(),
            errors: Vec::new(),
            error_count: 0,
            round: None,
            durable: IndexDurablePoint::default(),
            releasing: Vec::new(),
        })
    }

    /// The index's durable point, as
    /// [`crate::consume_queue::ConsumeQueueSet::advance_durable_point`] for
    /// the ConsumeQueues: a round notes every file's `index_count` (files
    /// never lose entries, so each count is a durable target) and
    /// `dispatched_to` (every record below it is indexed in memory); a later
    /// call after every file became durable that far makes it the point.
    pub fn advance_durable_point(&mut self, dispatched_to: u64) -> IndexDurablePoint {
        if let Some(round) = &self.round
            && round.targets.iter().all(|&(serial, target)| {
                self.files
                    .iter()
                    .find(|f| f.serial == serial)
                    .is_none_or(|f| f.durable_count() >= target)
            })
        {
            self.durable = round.point;
            self.round = None;
        }
        if self.round.is_none() {
            let last = self.files.last();
            let point = IndexDurablePoint {
                offset: dispatched_to,
                file_created_ms: last.map_or(0, |f| f.created_ms),
                index_count: last.map_or(0, |f| f.header.index_count),
            };
            let targets: Vec<(u32, i32)> = self
                .files
                .iter()
                .filter(|f| f.durable_count() < f.header.index_count)
                .map(|f| (f.serial, f.header.index_count))
                .collect();
            if targets.is_empty() {
                // Everything is synced already.
                self.durable = point;
            } else {
                self.round = Some(IndexRound { point, targets });
            }
        }
        self.durable
    }

    /// Closes every file (shutdown, once idle).
    ///
    /// # Errors
    /// The disk's error closing a file.
    pub fn close_all<D: Disk + ?Sized>(&mut self, disk: &mut D) -> Result<(), StorageError> {
        for file in &mut self.files {
            assert!(
                file.is_idle(),
                "closing index file {} with a flush in flight",
                file.name
            );
            if let Some(id) = file.file.take() {
                disk.close(id)?;
            }
        }
        Ok(())
    }

    /// Closes and removes every file (recovery, before a rebuild).
    ///
    /// # Errors
    /// The disk's error closing or removing a file.
    pub fn close_and_remove_all<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
    ) -> Result<(), StorageError> {
        let any = !self.files.is_empty();
        for file in std::mem::take(&mut self.files) {
            file.close_and_remove(disk, &self.dir)?;
        }
        if any {
            disk.sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Recovery: drops every entry of a record at or past CommitLog offset
    /// `end` (records the CommitLog lost), removing files that start there
    /// and cutting the last one as [`IndexFile::recover_to`] does; then
    /// lowers the durable point to what is left. False if a cut file cannot
    /// be recovered (the caller rebuilds).
    ///
    /// # Errors
    /// The disk's error closing or removing a file.
    pub fn truncate_from_commit_log_offset<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        end: u64,
    ) -> Result<bool, StorageError> {
        let mut removed_any = false;
        while let Some(last) = self.files.last() {
            if last.header.index_count <= 1 || last.entry_phy_offset(1) < end {
                break;
            }
            let file = self.files.pop().expect("last exists");
            file.close_and_remove(disk, &self.dir)?;
            removed_any = true;
        }
        if removed_any {
            disk.sync_dir(&self.dir)?;
        }
        if let Some(last) = self.files.last_mut() {
            let mut count = last.header.index_count;
            while count > 1 && last.entry_phy_offset(count as usize - 1) >= end {
                count -= 1;
            }
            if count < last.header.index_count && !last.recover_to(count) {
                return Ok(false);
            }
        }
        let durable = self.durable;
        self.durable = match self.files.last() {
            Some(last) if last.created_ms == durable.file_created_ms => IndexDurablePoint {
                offset: durable.offset.min(end),
                file_created_ms: durable.file_created_ms,
                index_count: durable.index_count.min(last.header.index_count),
            },
            // The point's file went: every file left is older, so durable.
            Some(last) if last.created_ms < durable.file_created_ms => IndexDurablePoint {
                offset: durable.offset.min(end),
                file_created_ms: last.created_ms,
                index_count: last.header.index_count,
            },
            Some(_) => durable,
            None => IndexDurablePoint {
                offset: durable.offset.min(end),
                file_created_ms: 0,
                index_count: 0,
            },
        };
        Ok(true)
    }

    /// Starts the durable point at `point` (recovery).
    pub fn set_durable_point(&mut self, point: IndexDurablePoint) {
        self.durable = point;
        self.round = None;
    }

    /// Abnormal recovery: cuts the loaded index back to `point` (files
    /// created after its file are removed, its file keeps the entries below
    /// its count, see [`IndexFile::recover_to`]). False if the files on disk
    /// cannot be what the point describes (its file is missing or holds
    /// fewer entries): the caller then rebuilds the index.
    ///
    /// # Errors
    /// The disk's error closing or removing a file.
    pub fn recover_to<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        point: IndexDurablePoint,
    ) -> Result<bool, StorageError> {
        let keep = if point.file_created_ms == 0 {
            0
        } else {
            match self
                .files
                .iter()
                .position(|f| f.created_ms == point.file_created_ms)
            {
                Some(at) => at + 1,
                None => return Ok(false),
            }
        };
        if let Some(file) = keep.checked_sub(1).map(|at| &mut self.files[at])
            && !file.recover_to(point.index_count)
        {
            return Ok(false);
        }
        let removed: Vec<IndexFile> = self.files.drain(keep..).collect();
        let any_removed = !removed.is_empty();
        for file in removed {
            tracing::warn!(name = %file.name, "removing an index file newer than the checkpoint");
            file.close_and_remove(disk, &self.dir)?;
        }
        if any_removed {
            disk.sync_dir(&self.dir)?;
        }
        self.set_durable_point(point);
        Ok(true)
    }

    /// Loads the files in `dir` (names that are not `yyyyMMddHHmmssSSS` are
    /// ignored with a warning), oldest first.
    ///
    /// # Errors
    /// The disk's errors; [`StorageError::Corrupt`] for a header that does not
    /// fit the geometry.
    ///
    /// # Panics
    /// If operations are in flight on the disk (load runs at startup).
    pub fn load<D: Disk + ?Sized>(
        disk: &mut D,
        dir: &Path,
        geometry: IndexGeometry,
    ) -> Result<Self, StorageError> {
        let mut service = IndexService::new(dir, geometry)?;
        for name in disk.list_dir(dir)? {
            let Some(created_ms) = parse_index_file_name(&name) else {
                tracing::warn!(dir = %dir.display(), %name, "ignoring a file that is not an index file");
                continue;
            };
            let file = IndexFile::load(disk, dir, &name, created_ms, geometry)?;
            service.push(file);
        }
        Ok(service)
    }

    fn push(&mut self, mut file: IndexFile) {
        file.serial = self.next_serial;
        self.next_serial = self.next_serial.wrapping_add(1);
        self.files.push(file);
    }

    /// The files, oldest first.
    pub fn files(&self) -> &[IndexFile] {
        &self.files
    }

    /// `endTimestamp` of the newest file (0 without files).
    pub fn index_last_update_timestamp(&self) -> i64 {
        self.files.last().map_or(0, |f| f.header.end_timestamp)
    }

    /// `endPhyOffset` of the newest file (0 without files).
    pub fn index_last_update_phy_offset(&self) -> i64 {
        self.files.last().map_or(0, |f| f.header.end_phy_offset)
    }

    /// Indexes one dispatched record (Java `IndexService.buildIndex`): keys
    /// `topic#UNIQ_KEY` and `topic#k` for each non-empty space-separated `k`
    /// of `KEYS`. ROLLBACK records, and records below the newest file's
    /// `endPhyOffset` (already indexed), are skipped. A full file is
    /// followed by a new one named after `now_ms`. Returns the keys added.
    pub fn build_index(&mut self, record: &IndexRecord<'_>, now_ms: i64) -> usize {
        if transaction_type(record.sys_flag) == SYS_FLAG_TRANSACTION_ROLLBACK_TYPE {
            return 0;
        }
        if let Some(last) = self.files.last()
            && (record.commit_log_offset as i64) < last.header.end_phy_offset
        {
            return 0;
        }
        let mut added = 0;
        let keys = record
            .keys
            .unwrap_or("")
            .split(' ')
            .filter(|k| !k.is_empty());
        for key in record.uniq_key.into_iter().chain(keys) {
            let mut full_key = std::mem::take(&mut self.key);
            full_key.clear();
            full_key.push_str(record.topic);
            full_key.push('#');
            full_key.push_str(key);
            self.put_key(&full_key, record, now_ms);
            self.key = full_key;
            added += 1;
        }
        added
    }

    fn put_key(&mut self, key: &str, record: &IndexRecord<'_>, now_ms: i64) {
        let hash = index_key_hash(key);
        if let Some(last) = self.files.last_mut()
            && last.put_key(hash, record.commit_log_offset, record.store_timestamp_ms)
        {
            return;
        }
        let prev = self.files.last();
        let prev_end = prev.map(|f| (f.header.end_phy_offset, f.header.end_timestamp));
        // A new name must sort after the previous one even if the clock
        // stepped back or two files start within one millisecond.
        let created_ms = prev.map_or(now_ms, |f| now_ms.max(f.created_ms + 1));
        let mut file = IndexFile::new(self.geometry, created_ms, prev_end);
        let added = file.put_key(hash, record.commit_log_offset, record.store_timestamp_ms);
        assert!(added, "a new index file takes a key");
        self.push(file);
    }

    /// The CommitLog offsets indexed under `topic#key` and stored within
    /// `[begin_ms, end_ms]`, newest first, at most `max_num` (capped at
    /// [`INDEX_QUERY_RESULT_MAX`]) (Java `IndexService.queryOffset`).
    pub fn query(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> IndexQueryResult {
        let max_num = max_num.min(INDEX_QUERY_RESULT_MAX);
        let mut result = IndexQueryResult {
            phy_offsets: Vec::new(),
            index_last_update_timestamp: self.index_last_update_timestamp(),
            index_last_update_phy_offset: self.index_last_update_phy_offset(),
        };
        let hash = index_key_hash(&format!("{topic}#{key}"));
        for file in self.files.iter().rev() {
            if file.is_time_matched(begin_ms, end_ms) {
                file.select_phy_offsets(&mut result.phy_offsets, hash, max_num, begin_ms, end_ms);
            }
            if file.header.begin_timestamp < begin_ms || result.phy_offsets.len() >= max_num {
                break;
            }
        }
        result
    }

    /// Submits the write-behind of every file (see the module doc); returns
    /// the operations submitted.
    ///
    /// # Errors
    /// None today: a failure to create a file or submit a write is kept for
    /// [`IndexService::take_errors`] and retried by the next flush (the index
    /// is derived data). The `Result` leaves room for fatal errors.
    pub fn flush<D: Disk + ?Sized>(&mut self, disk: &mut D) -> Result<usize, StorageError> {
        self.flush_files(disk, false)
    }

    /// As [`IndexService::flush`], with the slot pages of the file being
    /// filled too: what shutdown calls until [`IndexService::is_clean`].
    ///
    /// # Errors
    /// As [`IndexService::flush`].
    pub fn flush_everything<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
    ) -> Result<usize, StorageError> {
        self.flush_files(disk, true)
    }

    /// Flushes the file being filled before the period ends when at least
    /// `min_unwritten_bytes` of entries were put since its last round
    /// started, it has nothing in flight, and the disk has fewer than
    /// [`CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX`] operations in flight (as
    /// the ConsumeQueues' early flush): rounds of a few hundred KB rather
    /// than one of several MB every period. Returns the operations
    /// submitted.
    ///
    /// # Errors
    /// As [`IndexService::flush`].
    pub fn flush_early<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        min_unwritten_bytes: usize,
    ) -> Result<usize, StorageError> {
        let last = self.files.len().saturating_sub(1);
        let Some(file) = self.files.last_mut() else {
            return Ok(0);
        };
        if file.unwritten_entry_bytes() < min_unwritten_bytes
            || !file.is_idle()
            || disk.in_flight() >= CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX
        {
            return Ok(0);
        }
        let slots = writes_slots(last, last, file);
        let submitted = match file.flush(disk, &self.dir, slots) {
            Ok(n) => n,
            Err(error) => {
                record_error(&mut self.errors, &mut self.error_count, error);
                0
            }
        };
        self.release_given_up();
        Ok(submitted)
    }

    fn flush_files<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        everything: bool,
    ) -> Result<usize, StorageError> {
        let mut submitted = 0;
        let last = self.files.len().saturating_sub(1);
        for (at, file) in self.files.iter_mut().enumerate() {
            let slots = everything || writes_slots(at, last, file);
            match file.flush(disk, &self.dir, slots) {
                Ok(n) => submitted += n,
                Err(error) => {
                    record_error(&mut self.errors, &mut self.error_count, error);
                }
            }
            if file.can_leave_memory() {
                match file.leave_memory(disk, &self.dir) {
                    Ok(image) => self.releasing.push(image),
                    Err(error) => {
                        tracing::warn!(file = %file.name, %error, "full index file not mapped; it stays in memory");
                    }
                }
            }
        }
        self.release_given_up();
        Ok(submitted)
    }

    /// Frees up to [`INDEX_RELEASE_PAGES_PER_FLUSH`] pages of the images
    /// given up for views. Each flush does, periodic or early: early
    /// flushes come with the keys, so images given up every few seconds
    /// under a steady stream of keys are freed as fast as they come, while
    /// the periodic flush (once a second since the twenty-second session)
    /// alone freed 8 MiB a second against 40 MB of images a second at two
    /// million keys a second.
    fn release_given_up(&mut self) {
        if let Some(image) = self.releasing.last_mut()
            && !image.release_pages(INDEX_RELEASE_PAGES_PER_FLUSH)
        {
            self.releasing.pop();
        }
    }

    /// Handles a completion tagged [`crate::disk::OpTag::IndexFile`]; gives
    /// its buffer back to the disk. Errors are kept for
    /// [`IndexService::take_errors`]; the pages stay dirty and are retried.
    pub fn on_completion<D: Disk + ?Sized>(&mut self, disk: &mut D, completion: DiskCompletion) {
        let DiskCompletion { op_id, result, buf } = completion;
        if let Some(buf) = buf {
            disk.recycle(buf);
        }
        let serial = (op_id.seq() >> LOCAL_SEQ_BITS) as u32;
        let local_seq = (op_id.seq() & ((1 << LOCAL_SEQ_BITS) - 1)) as u32;
        let last = self.files.len().saturating_sub(1);
        let Some((at, file)) = self
            .files
            .iter_mut()
            .enumerate()
            .find(|(_, f)| f.serial == serial)
        else {
            return;
        };
        let had_file = file.file.is_some();
        if let Some(error) = file.on_completion(local_seq, result) {
            record_error(&mut self.errors, &mut self.error_count, error);
        }
        // Completed writes are synced at once (see the ConsumeQueues), a
        // round with pages left goes on, and a file just created gets its
        // pages.
        let created = !had_file && file.file.is_some();
        if file.is_idle()
            && (file.flush.needs_sync || file.round_open() || created)
            && let Err(error) = file.flush(disk, &self.dir, writes_slots(at, last, file))
        {
            record_error(&mut self.errors, &mut self.error_count, error);
        }
    }

    /// Whether every file is written and fdatasynced.
    pub fn is_clean(&self) -> bool {
        self.files.iter().all(IndexFile::is_clean)
    }

    /// Whether no operation is in flight.
    pub fn is_idle(&self) -> bool {
        self.files.iter().all(IndexFile::is_idle)
    }

    /// Flush errors kept since the last call.
    pub fn take_errors(&mut self) -> Vec<StorageError> {
        std::mem::take(&mut self.errors)
    }

    /// Flush errors seen in all.
    pub fn error_count(&self) -> u64 {
        self.error_count
    }

    /// Retention (Java `IndexService.deleteExpiredFile`): removes the oldest
    /// files whose `endPhyOffset` is below `commit_log_min_offset`, never the
    /// newest file, stopping at the first file that is still needed or has a
    /// flush in flight. Returns the files removed.
    ///
    /// # Errors
    /// The disk's error closing or removing a file.
    pub fn delete_below_commit_log_offset<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        commit_log_min_offset: u64,
    ) -> Result<usize, StorageError> {
        let mut removed = 0;
        while self.files.len() > 1 {
            let first = &self.files[0];
            if first.header.end_phy_offset as u64 >= commit_log_min_offset || !first.is_idle() {
                break;
            }
            self.files.remove(0).close_and_remove(disk, &self.dir)?;
            removed += 1;
        }
        if removed > 0 {
            disk.sync_dir(&self.dir)?;
        }
        Ok(removed)
    }

    /// Abnormal recovery (6.9): removes every file whose `endTimestamp` is
    /// after the checkpoint's `indexMsgTimestamp`; re-dispatch rebuilds them.
    /// Returns the files removed.
    ///
    /// # Errors
    /// The disk's error closing or removing a file.
    ///
    /// # Panics
    /// If a removed file has a flush in flight (recovery runs before flushing).
    pub fn delete_files_after_timestamp<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        index_msg_timestamp: i64,
    ) -> Result<usize, StorageError> {
        let (keep, drop): (Vec<_>, Vec<_>) = std::mem::take(&mut self.files)
            .into_iter()
            .partition(|f| f.header.end_timestamp <= index_msg_timestamp);
        self.files = keep;
        let removed = drop.len();
        for file in drop {
            file.close_and_remove(disk, &self.dir)?;
        }
        if removed > 0 {
            disk.sync_dir(&self.dir)?;
        }
        Ok(removed)
    }
}

/// Whether the write-behind of the file at `at` (of files `0..=last`)
/// includes its slot-only pages: yes unless it is the file being filled.
fn writes_slots(at: usize, last: usize, file: &IndexFile) -> bool {
    at != last || file.is_full()
}

fn record_error(errors: &mut Vec<StorageError>, count: &mut u64, error: StorageError) {
    // Logged by the store, once a flush interval.
    *count += 1;
    if errors.len() < INDEX_ERRORS_KEPT_MAX {
        errors.push(error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::sim::{SimConfig, SimDisk};
    use crate::disk::{OpTag, Wait};
    use crate::index_file::image;
    use crate::index_file::{INDEX_ENTRY_SIZE, INDEX_FLUSH_CALL_BYTES_MAX};
    use std::time::Duration;

    const SMALL: IndexGeometry = IndexGeometry {
        hash_slot_count: 16,
        entry_count_max: 8,
    };
    const DIR: &str = "/store/index/0";
    const NOW: i64 = 1_704_110_400_123;

    fn record<'a>(offset: u64, ts: i64, uniq: &'a str, keys: &'a str) -> IndexRecord<'a> {
        IndexRecord {
            topic: "T",
            commit_log_offset: offset,
            store_timestamp_ms: ts,
            sys_flag: 0,
            uniq_key: Some(uniq),
            keys: Some(keys),
        }
    }

    fn service() -> IndexService {
        IndexService::new(Path::new(DIR), SMALL).unwrap()
    }

    /// Hands the index the completions the disk has (all of them its own).
    fn complete(disk: &mut SimDisk, index: &mut IndexService) {
        let mut out = Vec::new();
        disk.poll(&mut out, 64, Wait::AtLeastOne(Duration::ZERO))
            .unwrap();
        for c in out {
            assert_eq!(c.op_id.tag(), Some(OpTag::IndexFile));
            index.on_completion(disk, c);
        }
    }

    /// Flushes everything (as shutdown does) until clean.
    fn settle(disk: &mut SimDisk, index: &mut IndexService) {
        for _ in 0..1000 {
            index.flush_everything(disk).unwrap();
            complete(disk, index);
            if index.is_clean() {
                return;
            }
        }
        panic!("index did not settle");
    }

    fn offsets(index: &IndexService, key: &str) -> Vec<u64> {
        index.query("T", key, 32, 0, i64::MAX).phy_offsets
    }

    #[test]
    fn build_index_adds_uniq_key_and_every_space_separated_key() {
        let mut index = service();
        assert_eq!(index.build_index(&record(100, 1000, "U1", "a  b"), NOW), 3);
        assert_eq!(offsets(&index, "U1"), vec![100]);
        assert_eq!(offsets(&index, "a"), vec![100]);
        assert_eq!(offsets(&index, "b"), vec![100]);
        assert!(offsets(&index, "c").is_empty());
        assert!(
            index
                .query("Other", "a", 32, 0, i64::MAX)
                .phy_offsets
                .is_empty()
        );
        let no_keys = IndexRecord {
            keys: None,
            uniq_key: None,
            ..record(200, 1000, "", "")
        };
        assert_eq!(index.build_index(&no_keys, NOW), 0);
    }

    #[test]
    fn build_index_skips_rollback_records_and_records_already_indexed() {
        let mut index = service();
        let rollback = IndexRecord {
            sys_flag: 0xC,
            ..record(100, 1000, "U1", "")
        };
        assert_eq!(index.build_index(&rollback, NOW), 0);
        assert_eq!(index.build_index(&record(500, 1000, "U2", ""), NOW), 1);
        assert_eq!(
            index.build_index(&record(400, 1000, "U3", ""), NOW),
            0,
            "below end phy offset"
        );
        assert_eq!(
            index.build_index(&record(500, 1000, "U4", ""), NOW),
            1,
            "at end phy offset: Java's <"
        );
    }

    #[test]
    fn keys_with_equal_java_hash_both_match_and_the_caller_rechecks() {
        // "Aa" and "BB" have the same String.hashCode.
        let mut index = service();
        index.build_index(&record(1, 1000, "Aa", ""), NOW);
        index.build_index(&record(2, 1000, "BB", ""), NOW);
        assert_eq!(offsets(&index, "Aa"), vec![2, 1]);
    }

    #[test]
    fn a_full_file_rolls_over_to_one_named_after_now() {
        let mut index = service();
        for i in 0..10u64 {
            index.build_index(
                &record(100 + i, 1000 + i as i64 * 1000, &format!("U{i}"), "k"),
                NOW + i as i64,
            );
        }
        // 7 entries per file; 20 keys in all.
        assert_eq!(index.files().len(), 3);
        assert_eq!(index.files()[0].name(), "20240101120000123");
        assert!(index.files()[1].name() > index.files()[0].name());
        let second = index.files()[1].header();
        assert_eq!(
            second.begin_phy_offset, 103,
            "first entry of the second file"
        );
        assert_eq!(offsets(&index, "k"), (100..110).rev().collect::<Vec<_>>());
        assert_eq!(offsets(&index, "U0"), vec![100]);
        let limited = index.query("T", "k", 4, 0, i64::MAX);
        assert_eq!(limited.phy_offsets, vec![109, 108, 107, 106]);
        assert_eq!(limited.index_last_update_phy_offset, 109);
        assert_eq!(limited.index_last_update_timestamp, 10_000);
    }

    #[test]
    fn query_filters_by_time_range_across_files() {
        let mut index = service();
        for i in 0..10u64 {
            index.build_index(
                &record(100 + i, (i as i64 + 1) * 10_000, &format!("U{i}"), "k"),
                NOW,
            );
        }
        let found = index.query("T", "k", 32, 30_000, 60_000).phy_offsets;
        assert_eq!(found, vec![105, 104, 103, 102]);
        assert!(
            index
                .query("T", "k", 32, 200_000, 300_000)
                .phy_offsets
                .is_empty()
        );
        assert_eq!(
            index.query("T", "k", 1_000, 0, i64::MAX).phy_offsets.len(),
            10,
            "capped at 64, not reached"
        );
    }

    #[test]
    fn flush_then_load_gives_the_same_answers_and_a_sparse_image() {
        let mut disk = SimDisk::new(SimConfig::new(21));
        let mut index = service();
        for i in 0..10u64 {
            index.build_index(
                &record(100 + i, 1000 * i as i64, &format!("U{i}"), "k"),
                NOW + i as i64,
            );
        }
        settle(&mut disk, &mut index);
        assert!(index.take_errors().is_empty());
        let image = disk.durable_image();
        let names: Vec<_> = image.files.keys().collect();
        assert_eq!(names.len(), 3, "{names:?}");
        for bytes in image.files.values() {
            assert_eq!(bytes.len(), SMALL.file_size());
        }
        let mut disk = SimDisk::from_image(image, SimConfig::new(22));
        let loaded = IndexService::load(&mut disk, Path::new(DIR), SMALL).unwrap();
        assert_eq!(loaded.files().len(), 3);
        for (a, b) in loaded.files().iter().zip(index.files()) {
            assert_eq!(a.header(), b.header());
            assert_eq!(a.name(), b.name());
        }
        assert_eq!(offsets(&loaded, "k"), offsets(&index, "k"));
        assert_eq!(offsets(&loaded, "U7"), vec![107]);
    }

    #[test]
    fn a_file_is_created_in_the_background_before_its_pages_are_written() {
        let mut disk = SimDisk::new(SimConfig::new(26));
        let mut index = service();
        index.build_index(&record(100, 1000, "U", ""), NOW);
        // The first flush only starts the create: no write, nothing open.
        assert_eq!(index.flush(&mut disk).unwrap(), 0);
        assert_eq!(disk.metadata_jobs_in_flight(), 1);
        assert_eq!(disk.in_flight(), 1, "only the create");
        assert!(!index.is_idle());
        // A flush while it runs submits nothing either.
        assert_eq!(index.flush(&mut disk).unwrap(), 0);
        let mut out = Vec::new();
        while out.is_empty() {
            disk.poll(&mut out, 64, Wait::AtLeastOne(Duration::ZERO))
                .unwrap();
        }
        assert_eq!(out.len(), 1);
        index.on_completion(&mut disk, out.pop().unwrap());
        // Its completion submits the dirty pages at once.
        assert!(disk.in_flight() > 0, "no write after the create completed");
        settle(&mut disk, &mut index);
        assert!(index.take_errors().is_empty());
        let image = disk.durable_image();
        let bytes: Vec<_> = image.files.values().collect();
        assert_eq!(bytes.len(), 1);
        assert_eq!(bytes[0].len(), SMALL.file_size());
        let mut disk = SimDisk::from_image(image, SimConfig::new(27));
        let loaded = IndexService::load(&mut disk, Path::new(DIR), SMALL).unwrap();
        assert_eq!(offsets(&loaded, "U"), vec![100]);
    }

    #[test]
    fn a_failed_create_is_reported_and_tried_again_by_a_later_flush() {
        let mut config = SimConfig::new(28);
        config.capacity_bytes = SMALL.file_size() as u64 - 1;
        let mut disk = SimDisk::new(config);
        let mut index = service();
        index.build_index(&record(100, 1000, "U", ""), NOW);
        index.flush(&mut disk).unwrap();
        let mut out = Vec::new();
        while out.is_empty() {
            disk.poll(&mut out, 64, Wait::AtLeastOne(Duration::ZERO))
                .unwrap();
        }
        assert!(out[0].result.as_ref().is_err_and(|e| e.is_no_space()));
        index.on_completion(&mut disk, out.pop().unwrap());
        assert_eq!(index.error_count(), 1);
        assert!(index.is_idle());
        assert!(!index.is_clean());
        // Space comes back (the same files on a larger disk): the next
        // flush creates the file again and writes it.
        let mut disk = SimDisk::from_image(disk.snapshot(), SimConfig::new(29));
        settle(&mut disk, &mut index);
        let mut disk = SimDisk::from_image(disk.durable_image(), SimConfig::new(30));
        let loaded = IndexService::load(&mut disk, Path::new(DIR), SMALL).unwrap();
        assert_eq!(offsets(&loaded, "U"), vec![100]);
    }

    #[test]
    fn an_empty_rocketmq_sized_file_costs_one_page() {
        let mut index = IndexService::new(Path::new(DIR), IndexGeometry::ROCKETMQ).unwrap();
        index.build_index(&record(100, 1000, "U", ""), NOW);
        let file = &index.files()[0];
        // Header page, one slot page, one entry page.
        assert!(file.allocated_pages() <= 3, "{}", file.allocated_pages());
    }

    #[test]
    fn flush_errors_are_kept_and_pages_written_again() {
        let mut disk = SimDisk::new(SimConfig::new(23));
        disk.faults_mut().write_eio_nth = Some(1);
        let mut index = service();
        index.build_index(&record(100, 1000, "U", ""), NOW);
        settle(&mut disk, &mut index);
        assert_eq!(index.take_errors().len(), 1);
        assert_eq!(index.error_count(), 1);
        let mut disk = SimDisk::from_image(disk.durable_image(), SimConfig::new(24));
        let loaded = IndexService::load(&mut disk, Path::new(DIR), SMALL).unwrap();
        assert_eq!(offsets(&loaded, "U"), vec![100]);
    }

    #[test]
    fn delete_below_removes_old_files_but_never_the_newest() {
        let mut disk = SimDisk::new(SimConfig::new(25));
        let mut index = service();
        for i in 0..10u64 {
            index.build_index(
                &record(100 + i, 1000, &format!("U{i}"), "k"),
                NOW + i as i64,
            );
        }
        settle(&mut disk, &mut index);
        // File 0 ends at 103, file 1 at 106, file 2 at 109.
        assert_eq!(
            index
                .delete_below_commit_log_offset(&mut disk, 103)
                .unwrap(),
            0
        );
        assert_eq!(
            index
                .delete_below_commit_log_offset(&mut disk, 104)
                .unwrap(),
            1
        );
        assert_eq!(
            index
                .delete_below_commit_log_offset(&mut disk, u64::MAX)
                .unwrap(),
            1
        );
        assert_eq!(index.files().len(), 1);
        assert_eq!(disk.snapshot().files.len(), 1);
        assert_eq!(offsets(&index, "k"), vec![109, 108, 107]);
    }

    #[test]
    fn entries_straddling_pages_survive_flush_and_load() {
        // 3 slots and 1000 entries: 20 KB of entries over five pages, long chains.
        let geometry = IndexGeometry {
            hash_slot_count: 3,
            entry_count_max: 1000,
        };
        let mut disk = SimDisk::new(SimConfig::new(27));
        let mut index = IndexService::new(Path::new(DIR), geometry).unwrap();
        for i in 0..999u64 {
            let keys = format!("k{}", i % 10);
            index.build_index(
                &record(1000 + i, 5000 + i as i64, &format!("U{i}"), &keys),
                NOW,
            );
        }
        assert_eq!(index.files().len(), 2, "1998 keys, 999 per file");
        let expected: Vec<u64> = (0..999u64)
            .rev()
            .filter(|i| i % 10 == 7)
            .map(|i| 1000 + i)
            .collect();
        assert_eq!(offsets(&index, "k7")[..], expected[..32]);
        settle(&mut disk, &mut index);
        let mut disk = SimDisk::from_image(disk.durable_image(), SimConfig::new(28));
        let loaded = IndexService::load(&mut disk, Path::new(DIR), geometry).unwrap();
        assert_eq!(offsets(&loaded, "k7"), offsets(&index, "k7"));
        assert_eq!(offsets(&loaded, "U998"), vec![1998]);
        assert_eq!(offsets(&loaded, "U0"), vec![1000]);
        // The full file is mapped, not loaded.
        assert!(loaded.files()[0].is_on_view());
        for (a, b) in loaded.files().iter().zip(index.files()) {
            assert_eq!(a.header(), b.header());
            if !a.is_on_view() {
                assert_eq!(
                    a.allocated_pages(),
                    b.allocated_pages(),
                    "only non-zero pages are loaded"
                );
            }
        }
    }

    #[test]
    fn load_rejects_a_header_that_does_not_fit_the_geometry() {
        let mut disk = SimDisk::new(SimConfig::new(29));
        let mut index = service();
        for i in 0..3u64 {
            index.build_index(&record(100 + i, 1000, &format!("U{i}"), ""), NOW);
        }
        settle(&mut disk, &mut index);
        let mut image = disk.durable_image();
        let bytes = image.files.values_mut().next().unwrap();
        bytes[36..40].copy_from_slice(&9_i32.to_be_bytes());
        image
            .files
            .insert(Path::new(DIR).join("README"), b"not an index".to_vec());
        let mut disk = SimDisk::from_image(image, SimConfig::new(30));
        let err = IndexService::load(&mut disk, Path::new(DIR), SMALL).unwrap_err();
        assert!(
            matches!(
                err,
                StorageError::Corrupt {
                    file_offset: 32,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn load_of_a_missing_directory_is_an_empty_index() {
        let mut disk = SimDisk::new(SimConfig::new(31));
        let index = IndexService::load(&mut disk, Path::new(DIR), SMALL).unwrap();
        assert!(index.files().is_empty());
        assert_eq!(
            (
                index.index_last_update_timestamp(),
                index.index_last_update_phy_offset()
            ),
            (0, 0)
        );
    }

    /// Seeded runs: random keys (with Java hash collisions) into random small
    /// geometries; a full-range query must return exactly the offsets whose
    /// key hash matches, newest first, before and after flush and load.
    #[test]
    fn random_keys_match_a_model_across_files_and_reloads() {
        use crate::disk::sim::SimRng;
        const KEYS: [&str; 6] = ["Aa", "BB", "a", "b", "order-1", "order-2"];
        for seed in 0..100u64 {
            let mut rng = SimRng::new(seed);
            let geometry = IndexGeometry {
                hash_slot_count: 1 + rng.below(8) as u32,
                entry_count_max: 2 + rng.below(20) as u32,
            };
            let mut index = IndexService::new(Path::new(DIR), geometry).unwrap();
            let mut model: Vec<(i32, u64)> = Vec::new();
            for i in 0..(10 + rng.below(60)) {
                let key = KEYS[rng.below(KEYS.len() as u64) as usize];
                let offset = 100 + i;
                let r = IndexRecord {
                    uniq_key: None,
                    ..record(offset, 1000 * i as i64, "", key)
                };
                index.build_index(&r, NOW + i as i64);
                model.push((index_key_hash(&format!("T#{key}")), offset));
            }
            let check = |index: &IndexService, when: &str| {
                for key in KEYS {
                    let hash = index_key_hash(&format!("T#{key}"));
                    let max = 1 + (seed as usize % 40);
                    let expected: Vec<u64> = model
                        .iter()
                        .rev()
                        .filter(|(h, _)| *h == hash)
                        .map(|(_, o)| *o)
                        .take(max)
                        .collect();
                    let found = index.query("T", key, max, 0, i64::MAX).phy_offsets;
                    assert_eq!(found, expected, "seed {seed} {geometry:?} key {key} {when}");
                }
            };
            check(&index, "in memory");
            let mut disk = SimDisk::new(SimConfig::new(seed));
            settle(&mut disk, &mut index);
            let mut disk = SimDisk::from_image(disk.durable_image(), SimConfig::new(seed + 1));
            let loaded = IndexService::load(&mut disk, Path::new(DIR), geometry).unwrap();
            check(&loaded, "after load");
        }
    }

    /// Runs the write-behind (not everything) until every file's entries
    /// are durable; returns the durable point then.
    fn write_behind(disk: &mut SimDisk, index: &mut IndexService) -> IndexDurablePoint {
        let dispatched_to = index.index_last_update_phy_offset() as u64 + 1;
        for _ in 0..1000 {
            index.flush(disk).unwrap();
            complete(disk, index);
            let point = index.advance_durable_point(dispatched_to);
            if index.is_idle() && point.offset == dispatched_to {
                return point;
            }
        }
        panic!("index entries did not become durable");
    }

    /// 4,096 slots: pages 1 to 3 hold only slots.
    const WIDE: IndexGeometry = IndexGeometry {
        hash_slot_count: 4096,
        entry_count_max: 600,
    };

    fn wide_keys(index: &mut IndexService, range: std::ops::Range<u64>) {
        for i in range {
            let key = format!("K{}", i % 97);
            index.build_index(
                &record(1000 + i, NOW + i as i64, &format!("U{i}"), &key),
                NOW,
            );
        }
    }

    fn wide_answers(index: &IndexService, count: u64) -> Vec<Vec<u64>> {
        (0..count)
            .map(|i| offsets(index, &format!("U{i}")))
            .chain((0..97).map(|k| offsets(index, &format!("K{k}"))))
            .collect()
    }

    #[test]
    fn the_write_behind_holds_the_filling_files_slot_pages_and_recovery_rebuilds_them() {
        let mut disk = SimDisk::new(SimConfig::new(31));
        let mut index = IndexService::new(Path::new(DIR), WIDE).unwrap();
        wide_keys(&mut index, 0..200);
        let point = write_behind(&mut disk, &mut index);
        let file = &index.files()[0];
        assert_eq!(index.files().len(), 1);
        assert_eq!(file.durable_count(), file.header().index_count);
        let slot_pages = file.slot_only_pages();
        assert_eq!(slot_pages, 1..4);
        // Every dirty page is a held slot page, and the held ones are dirty.
        assert_eq!(file.image.dirty_count(), slot_pages.len());
        assert!(!index.is_clean());
        let expected = wide_answers(&index, 200);
        // A crash now: the slot pages on disk are holes; recovery to the
        // durable point rebuilds them from the entries.
        let image = disk.durable_image();
        let name = file.name().to_string();
        let on_disk = &image
            .files
            .iter()
            .find(|(p, _)| p.ends_with(&name))
            .unwrap()
            .1;
        assert!(
            on_disk[image::PAGE_SIZE..4 * image::PAGE_SIZE]
                .iter()
                .all(|b| *b == 0),
            "slot-only pages were written"
        );
        let mut disk = SimDisk::from_image(image, SimConfig::new(32));
        let mut loaded = IndexService::load(&mut disk, Path::new(DIR), WIDE).unwrap();
        assert!(loaded.recover_to(&mut disk, point).unwrap());
        assert_eq!(wide_answers(&loaded, 200), expected);
        // A clean stop writes them: a plain load then answers the same.
        settle(&mut disk, &mut loaded);
        let mut disk = SimDisk::from_image(disk.durable_image(), SimConfig::new(33));
        let reloaded = IndexService::load(&mut disk, Path::new(DIR), WIDE).unwrap();
        assert_eq!(wide_answers(&reloaded, 200), expected);
    }

    #[test]
    fn a_full_file_gets_its_slot_pages_written_behind_then_leaves_memory() {
        let mut disk = SimDisk::new(SimConfig::new(34));
        let mut index = IndexService::new(Path::new(DIR), WIDE).unwrap();
        // 300 records, two keys each: the first file fills and a second
        // one is being filled.
        wide_keys(&mut index, 0..300);
        assert_eq!(index.files().len(), 2);
        let expected = wide_answers(&index, 300);
        let point = write_behind(&mut disk, &mut index);
        assert_eq!(point.file_created_ms, index.files()[1].created_ms);
        assert!(
            index.files()[0].is_clean(),
            "the full file keeps dirty pages"
        );
        assert!(index.files()[1].image.dirty_count() > 0);
        // Written and synced, the full file leaves memory at the next flush
        // for a view of the file; queries read it there.
        index.flush(&mut disk).unwrap();
        assert!(index.files()[0].is_on_view());
        assert_eq!(index.files()[0].allocated_pages(), 0);
        // Its image had fewer pages than one round frees: gone already.
        assert!(index.releasing.is_empty());
        // A larger one goes a bounded number of pages at each flush, early
        // ones too.
        let mut big = SparseImage::new((2 * INDEX_RELEASE_PAGES_PER_FLUSH + 1) * image::PAGE_SIZE);
        for page in 0..2 * INDEX_RELEASE_PAGES_PER_FLUSH + 1 {
            big.write(page * image::PAGE_SIZE, &[1]);
        }
        index.releasing.push(big);
        index.flush_early(&mut disk, 0).unwrap();
        assert_eq!(
            index.releasing[0].allocated_pages(),
            INDEX_RELEASE_PAGES_PER_FLUSH + 1
        );
        index.flush_early(&mut disk, 0).unwrap();
        index.flush_early(&mut disk, 0).unwrap();
        assert!(index.releasing.is_empty());
        assert!(!index.files()[1].is_on_view());
        assert_eq!(wide_answers(&index, 300), expected);
        // Recovery keeps the full file as it is on disk, mapped when the
        // store opens, not read.
        let mut disk = SimDisk::from_image(disk.durable_image(), SimConfig::new(35));
        let mut loaded = IndexService::load(&mut disk, Path::new(DIR), WIDE).unwrap();
        assert!(loaded.files()[0].is_on_view());
        assert!(!loaded.files()[1].is_on_view());
        assert!(loaded.recover_to(&mut disk, point).unwrap());
        assert_eq!(wide_answers(&loaded, 300), expected);
        // Cut back into the full file (a CommitLog truncated below the
        // second file): the file comes back into memory and keeps exactly
        // the entries below the cut.
        let end = 1000 + 250;
        assert!(
            loaded
                .truncate_from_commit_log_offset(&mut disk, end)
                .unwrap()
        );
        assert_eq!(loaded.files().len(), 1);
        assert!(!loaded.files()[0].is_on_view());
        for (i, found) in wide_answers(&loaded, 300).iter().take(300).enumerate() {
            let offset = 1000 + i as u64;
            assert_eq!(found.contains(&offset), offset < end, "U{i}: {found:?}");
        }
    }

    /// Pages of `file`'s writes in flight.
    fn pages_in_flight(file: &IndexFile) -> usize {
        file.flush.writes.values().map(|run| run.len()).sum()
    }

    #[test]
    fn a_round_larger_than_one_call_goes_on_as_its_writes_complete() {
        // 2.4 MB of slots: the full file's round is more than two calls.
        let geometry = IndexGeometry {
            hash_slot_count: 600_000,
            entry_count_max: 2_000,
        };
        let call_pages = INDEX_FLUSH_CALL_BYTES_MAX / image::PAGE_SIZE;
        let mut disk = SimDisk::new(SimConfig::new(36));
        let mut index = IndexService::new(Path::new(DIR), geometry).unwrap();
        // Keys that differ in their first characters spread over the slots
        // (Java's hash of `U0`, `U1`, ... is nearly sequential).
        let key = |i: u64| format!("{}U", i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for i in 0..2_100u64 {
            index.build_index(&record(1000 + i, NOW, &key(i), ""), NOW);
        }
        assert_eq!(index.files().len(), 2);
        let full_pages = index.files()[0].image.dirty_count();
        assert!(full_pages > 2 * call_pages, "{full_pages} dirty pages");
        let target = index.files()[0].header().index_count;
        let dispatched_to = 1000 + 2_100;
        let (mut calls_with_writes, mut turns) = (0, 0);
        loop {
            let before = index.files()[0].flush.writes.len();
            index.flush(&mut disk).unwrap();
            if index.files()[0].flush.writes.len() > before {
                calls_with_writes += 1;
            }
            for file in index.files() {
                assert!(pages_in_flight(file) <= call_pages);
                // Not durable before the last of the round's writes.
                if file.round_open() {
                    assert!(file.durable_count() < file.header().index_count);
                }
            }
            let mut out = Vec::new();
            disk.poll(&mut out, 64, Wait::AtLeastOne(Duration::ZERO))
                .unwrap();
            for c in out {
                index.on_completion(&mut disk, c);
                assert!(pages_in_flight(&index.files()[0]) <= call_pages);
            }
            let point = index.advance_durable_point(dispatched_to);
            if index.is_idle() && point.offset == dispatched_to {
                break;
            }
            turns += 1;
            assert!(turns < 10_000, "the index did not become durable");
        }
        assert_eq!(index.files()[0].durable_count(), target);
        assert!(index.files()[0].is_clean());
        // After the create, every call of the round went out from the
        // completion of the one before, none waited for a flush period.
        assert_eq!(calls_with_writes, 0);
        let answer = |index: &IndexService| -> Vec<Vec<u64>> {
            (0..2_100).map(|i| offsets(index, &key(i))).collect()
        };
        let expected = answer(&index);
        assert!(expected.iter().all(|found| found.len() == 1));
        let point = index.advance_durable_point(dispatched_to);
        let mut disk = SimDisk::from_image(disk.durable_image(), SimConfig::new(37));
        let mut loaded = IndexService::load(&mut disk, Path::new(DIR), geometry).unwrap();
        assert!(loaded.recover_to(&mut disk, point).unwrap());
        assert_eq!(answer(&loaded), expected);
    }

    #[test]
    fn the_file_being_filled_is_flushed_early_once_enough_entries_are_put() {
        let mut disk = SimDisk::new(SimConfig::new(38));
        let mut index = IndexService::new(Path::new(DIR), WIDE).unwrap();
        wide_keys(&mut index, 0..1);
        settle(&mut disk, &mut index);
        let min = 10 * INDEX_ENTRY_SIZE;
        // Two keys a record: four records are 8 entries, five are 10.
        wide_keys(&mut index, 1..5);
        assert_eq!(index.flush_early(&mut disk, min).unwrap(), 0);
        assert_eq!(disk.in_flight(), 0);
        wide_keys(&mut index, 5..6);
        assert!(index.flush_early(&mut disk, min).unwrap() > 0);
        // Nothing more while that round is in flight.
        wide_keys(&mut index, 6..20);
        assert_eq!(index.flush_early(&mut disk, min).unwrap(), 0);
    }

    #[test]
    fn delete_files_after_timestamp_drops_files_ending_later() {
        let mut disk = SimDisk::new(SimConfig::new(26));
        let mut index = service();
        for i in 0..10u64 {
            index.build_index(
                &record(100 + i, 1000 * (i as i64 + 1), &format!("U{i}"), "k"),
                NOW + i as i64,
            );
        }
        settle(&mut disk, &mut index);
        assert_eq!(
            index
                .delete_files_after_timestamp(&mut disk, 4_000)
                .unwrap(),
            2
        );
        assert_eq!(index.files().len(), 1);
        assert_eq!(index.index_last_update_phy_offset(), 103);
        // Re-dispatch rebuilds from there.
        assert_eq!(
            index.build_index(&record(104, 5_000, "U4", "k"), NOW + 20),
            2
        );
    }
}
