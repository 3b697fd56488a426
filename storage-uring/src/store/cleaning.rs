//! Retention in the store's poll loop: the disk space check that refuses
//! appends near a full disk, the plan of expired CommitLog segments, and the
//! bounded step per turn that removes one segment or cleans a few
//! ConsumeQueues and the index below the new CommitLog min offset (see
//! [`crate::retention`] for the rules and the module doc of [`super`] for
//! the order).

use super::Store;
use crate::commit_log::SegmentRemoval;
use crate::disk::{Disk, DiskCompletion, DiskOp, FileId, OpId, OpTag, Wait};
use crate::error::StorageError;
use crate::limits::{RETENTION_CQ_FILES_PER_TURN_MAX, RETENTION_QUEUES_PER_TURN_MAX};
use crate::retention::RetentionConfig;

impl<D: Disk> Store<D> {
    pub(super) fn check_space(&mut self) {
        match self.disk.space(&self.config.root) {
            Ok(space) if space.total_bytes > 0 => {
                let ratio = space.used_ratio();
                self.disk_usage_ratio = ratio;
                let limit = self
                    .config
                    .disk_full_ratio
                    .min(self.config.retention.warning_level_ratio());
                let full = (ratio > limit).then_some(ratio);
                match (self.disk_full.is_some(), full.is_some()) {
                    (false, true) => tracing::warn!(
                        used_ratio = ratio,
                        limit,
                        "disk nearly full: appends are refused until retention frees space"
                    ),
                    (true, false) => tracing::info!(
                        used_ratio = ratio,
                        "disk space is back: appends accepted again"
                    ),
                    _ => {}
                }
                self.disk_full = full;
            }
            Ok(_) => {
                self.disk_usage_ratio = 0.0;
                self.disk_full = None;
            }
            Err(error) => tracing::warn!(%error, "statvfs of the store root failed"),
        }
    }

    /// Asks for the expired CommitLog segments to go at the next retention
    /// run (within `cleanResourceInterval`), whatever the hour: Java's
    /// `executeDeleteFilesManually` (`mqadmin deleteExpiredCommitLog`).
    /// Unexpired segments stay, as at deleteWhen.
    pub fn delete_expired_now(&mut self) {
        self.manual_retention = true;
    }

    /// Runs retention's cleaning of ConsumeQueue and index files below the
    /// CommitLog's min offset now (CLEAN_EXPIRED_CONSUMEQUEUE), from the
    /// first queue, a few queues per turn; retention runs it after every
    /// segment it removes anyway.
    pub fn clean_expired_queues_now(&mut self) {
        self.retention_cursor = Some(0);
    }

    /// The retention rules in force.
    pub fn retention(&self) -> &RetentionConfig {
        &self.config.retention
    }

    /// Replaces the retention rules (fileReservedTime, deleteWhen, ...)
    /// while the store runs; the next retention run plans by them. A plan
    /// already being carried out goes on.
    pub fn set_retention(&mut self, retention: RetentionConfig) {
        self.config.retention = retention;
    }

    /// Decides which CommitLog segments go now ([`RetentionConfig::plan`],
    /// or [`RetentionConfig::plan_manual`] once after
    /// [`Store::delete_expired_now`]).
    pub(super) fn plan_retention(&mut self, now_ms: u64) {
        let segments = self.commit_log.retention_segments();
        let hour = self.config.hour_of_day(now_ms);
        let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let retention = &self.config.retention;
        let plan = if std::mem::take(&mut self.manual_retention) {
            retention.plan_manual(now, hour, self.disk_usage_ratio, &segments)
        } else {
            retention.plan(now, hour, self.disk_usage_ratio, &segments)
        };
        self.retention_stats.runs += 1;
        if !plan.delete.is_empty() {
            tracing::info!(
                reason = ?plan.reason,
                segments = plan.delete.len(),
                first = plan.delete[0],
                "retention deletes commit log segments"
            );
            self.retention_queue = plan.delete.into_iter().collect();
        }
    }

    /// One bounded step of retention per turn: removes one planned segment
    /// (its unlink runs in the background), or cleans a few ConsumeQueues,
    /// then the index, below the new CommitLog min offset.
    pub(super) fn run_retention_step(&mut self, now_ms: u64) -> Result<(), StorageError> {
        if let Some(&base) = self.retention_queue.front() {
            // One removal at a time, spaced (deleteCommitLogFilesInterval):
            // unlinking a segment frees a gigabyte of extents, which on a
            // file system mounted with `discard` is a synchronous discard of
            // all of it; ten at once kept the disk from the CommitLog's
            // writes for seconds (docs/BENCHMARKS.md, ninth session).
            let spacing = self.config.retention.delete_commit_log_files_interval_ms;
            if self.commit_log.removals_in_flight() > 0
                || now_ms.saturating_sub(self.last_segment_removal_ms) < spacing
            {
                return Ok(());
            }
            // A disk over its max used ratio needs the space back: no spares.
            let recycle = self.disk_usage_ratio <= self.config.retention.max_used_ratio();
            match self
                .commit_log
                .remove_segment(&mut self.disk, base, recycle)?
            {
                SegmentRemoval::Removed => {
                    self.last_segment_removal_ms = now_ms;
                    self.retention_queue.pop_front();
                    self.retention_stats.segments_removed += 1;
                    self.retention_cursor = Some(0);
                }
                // Its last fdatasync is still to come: the next turn.
                SegmentRemoval::NotYetDurable => {}
                // Gone or in use: the next run plans again.
                SegmentRemoval::NotRemovable => self.retention_queue.clear(),
            }
            return Ok(());
        }
        let Some(from) = self.retention_cursor else {
            return Ok(());
        };
        let log_min = self.commit_log.min_offset();
        let mut disk = BackgroundRemovals {
            disk: &mut self.disk,
            removed: 0,
        };
        let bound = self.queues.index_bound();
        let mut to = (from + RETENTION_QUEUES_PER_TURN_MAX).min(bound);
        let mut budget = RETENTION_CQ_FILES_PER_TURN_MAX;
        for index in from..to {
            // Deleted topics leave holes.
            if let Some(queue) = self.queues.try_queue_at_mut(index) {
                budget -=
                    queue.delete_below_commit_log_offset_at_most(&mut disk, log_min, budget)?;
                if budget == 0 {
                    // This queue may have more: it is the next turn's first.
                    to = index;
                    break;
                }
            }
        }
        if to < bound {
            self.retention_cursor = Some(to);
        } else {
            self.index
                .delete_below_commit_log_offset(&mut disk, log_min)?;
            self.retention_cursor = None;
        }
        self.retention_stats.files_removed += disk.removed;
        Ok(())
    }

    /// What retention has done so far.
    pub fn retention_stats(&self) -> RetentionStats {
        self.retention_stats
    }

    /// Used over total space of the store's file system at the last check.
    pub fn disk_usage_ratio(&self) -> f64 {
        self.disk_usage_ratio
    }
}

/// Counters of retention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionStats {
    /// Retention runs (plans made).
    pub runs: u64,
    /// CommitLog segments removed.
    pub segments_removed: u64,
    /// ConsumeQueue and index files removed.
    pub files_removed: u64,
}

/// A view of a disk whose `remove` runs in the background
/// ([`Disk::submit_remove`], which also fsyncs the directory, so `sync_dir`
/// has nothing left to do): retention removes ConsumeQueue and index files
/// through it without a blocking unlink in the shard's loop.
struct BackgroundRemovals<'a, D: Disk> {
    disk: &'a mut D,
    removed: u64,
}

impl<D: Disk> Disk for BackgroundRemovals<'_, D> {
    fn open(
        &mut self,
        path: &std::path::Path,
        options: crate::disk::OpenOptions,
    ) -> Result<FileId, crate::disk::DiskError> {
        self.disk.open(path, options)
    }
    fn map_read_only(
        &mut self,
        path: &std::path::Path,
    ) -> Result<crate::disk::FileView, crate::disk::DiskError> {
        self.disk.map_read_only(path)
    }
    fn close(&mut self, file: FileId) -> Result<(), crate::disk::DiskError> {
        self.disk.close(file)
    }
    fn file_size(&self, file: FileId) -> Result<u64, crate::disk::DiskError> {
        self.disk.file_size(file)
    }
    fn remove(&mut self, path: &std::path::Path) -> Result<(), crate::disk::DiskError> {
        self.removed += 1;
        self.disk
            .submit_remove(OpId::new(OpTag::Retention, self.removed), path)
    }
    fn set_len(&mut self, file: FileId, len: u64) -> Result<(), crate::disk::DiskError> {
        self.disk.set_len(file, len)
    }
    fn create_dir_all(&mut self, dir: &std::path::Path) -> Result<(), crate::disk::DiskError> {
        self.disk.create_dir_all(dir)
    }
    fn remove_dir(&mut self, dir: &std::path::Path) -> Result<(), crate::disk::DiskError> {
        self.disk.remove_dir(dir)
    }
    fn list_dir(&mut self, dir: &std::path::Path) -> Result<Vec<String>, crate::disk::DiskError> {
        self.disk.list_dir(dir)
    }
    fn sync_dir(&mut self, _dir: &std::path::Path) -> Result<(), crate::disk::DiskError> {
        Ok(())
    }
    fn rename(
        &mut self,
        from: &std::path::Path,
        to: &std::path::Path,
    ) -> Result<(), crate::disk::DiskError> {
        self.disk.rename(from, to)
    }
    fn space(
        &self,
        path: &std::path::Path,
    ) -> Result<crate::disk::SpaceInfo, crate::disk::DiskError> {
        self.disk.space(path)
    }
    fn submit(
        &mut self,
        op_id: OpId,
        op: DiskOp,
        link_next: bool,
    ) -> Result<(), (crate::disk::DiskError, DiskOp)> {
        self.disk.submit(op_id, op, link_next)
    }
    fn submit_create(
        &mut self,
        op_id: OpId,
        path: &std::path::Path,
        options: crate::disk::OpenOptions,
    ) -> Result<(), crate::disk::DiskError> {
        self.disk.submit_create(op_id, path, options)
    }
    fn submit_remove(
        &mut self,
        op_id: OpId,
        path: &std::path::Path,
    ) -> Result<(), crate::disk::DiskError> {
        self.disk.submit_remove(op_id, path)
    }
    fn submit_rename(
        &mut self,
        op_id: OpId,
        from: &std::path::Path,
        to: &std::path::Path,
        open: Option<crate::disk::OpenOptions>,
    ) -> Result<(), crate::disk::DiskError> {
        self.disk.submit_rename(op_id, from, to, open)
    }
    fn poll(
        &mut self,
        out: &mut Vec<DiskCompletion>,
        max: usize,
        wait: Wait,
    ) -> Result<usize, crate::disk::DiskError> {
        self.disk.poll(out, max, wait)
    }
    fn in_flight(&self) -> usize {
        self.disk.in_flight()
    }
    fn buffer(&mut self, capacity: usize) -> crate::aligned::AlignedBuf {
        self.disk.buffer(capacity)
    }
    fn recycle(&mut self, buf: crate::aligned::AlignedBuf) {
        self.disk.recycle(buf);
    }
}
