//! [`StoreConfig`]: the settings of one shard's store, with their defaults.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::commit_log::CommitLogConfig;
use crate::commit_log::appender::FlushMode;
use crate::error::StorageError;
use crate::index_file::{INDEX_DIR_NAME, IndexGeometry};
use crate::limits::{
    CHECKPOINT_INTERVAL_MS_DEFAULT, CLEAN_RESOURCE_INTERVAL_MS_DEFAULT,
    COMMIT_LOG_RECYCLE_SEGMENTS_DEFAULT, COMMIT_LOG_REMOVE_STEP_BYTES_DEFAULT,
    COMMIT_LOG_SEGMENT_SIZE_DEFAULT, COMMIT_LOG_SEGMENT_SIZE_MIN,
    CONSUME_QUEUE_FLUSH_EARLY_BYTES_DEFAULT, CONSUME_QUEUE_FLUSH_INTERVAL_MS_DEFAULT,
    DISK_FULL_RATIO_DEFAULT, FLUSH_INTERVAL_MS_DEFAULT, INDEX_FLUSH_EARLY_BYTES_DEFAULT,
    SYNC_FLUSH_TIMEOUT_MS_DEFAULT, TAIL_CACHE_SIZE,
};
use crate::retention::RetentionConfig;

/// Settings of one shard's store.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// The store root (`storePathRootDir`).
    pub root: PathBuf,
    /// This shard's id (top byte of outside-visible CommitLog offsets).
    pub shard_id: u8,
    /// Root under which this shard's `consumequeue/` lives. Default
    /// `<root>/shard/<id>`: queues are loaded and truncated per shard, so two
    /// shards must not share it.
    pub consume_queue_root: PathBuf,
    /// CommitLog segment size (`mappedFileSizeCommitLog`).
    pub segment_size_bytes: u64,
    /// `flushDiskType`.
    pub flush_mode: FlushMode,
    /// `flushIntervalCommitLog` (ASYNC_FLUSH fdatasync period).
    pub flush_interval_ms: u64,
    /// `syncFlushTimeout`.
    pub sync_flush_timeout_ms: u64,
    /// Bytes of recent CommitLog kept in memory.
    pub tail_cache_bytes: usize,
    /// STOREHOSTADDRESS written into records (`brokerIP1:listenPort`).
    pub store_host: SocketAddr,
    /// Checkpoint rewrite period.
    pub checkpoint_interval_ms: u64,
    /// ConsumeQueue write-behind period.
    pub consume_queue_flush_interval_ms: u64,
    /// Unwritten bytes at which one queue is flushed before the period ends
    /// ([`CONSUME_QUEUE_FLUSH_EARLY_BYTES_DEFAULT`]).
    pub consume_queue_flush_early_bytes: usize,
    /// Bytes of entries put at which the index file being filled is
    /// flushed before the period ends ([`INDEX_FLUSH_EARLY_BYTES_DEFAULT`]).
    pub index_flush_early_bytes: usize,
    /// Disk usage ratio above which appends are refused (retriable), on top
    /// of `retention.disk_space_warning_level_ratio` (the lower one wins).
    pub disk_full_ratio: f64,
    /// IndexFile geometry (RocketMQ's by default; tests use small ones).
    pub index_geometry: IndexGeometry,
    /// Retention: `fileReservedTime`, `deleteWhen`, `diskMaxUsedSpaceRatio`,
    /// `diskSpaceCleanForciblyRatio`, `diskSpaceWarningLevelRatio`,
    /// `deleteFileBatchMax`, `cleanFileForciblyEnable` (RocketMQ's defaults).
    pub retention: RetentionConfig,
    /// `cleanResourceInterval`: how often retention runs.
    pub clean_resource_interval_ms: u64,
    /// CommitLog segments retention retires that are kept as spares and
    /// renamed into later segments, so that appends land on written extents
    /// (ringmq's own setting; 0 unlinks every retired segment). Spares still
    /// count as used disk space; a retention run on a disk over
    /// `diskMaxUsedSpaceRatio` unlinks instead.
    pub commit_log_recycle_segments: usize,
    /// A retired segment that is unlinked is first shrunk in `ftruncate`
    /// steps of this many bytes (0: unlinked at once); see
    /// [`CommitLogConfig::remove_step_bytes`](crate::commit_log::CommitLogConfig::remove_step_bytes).
    pub commit_log_remove_step_bytes: u64,
    /// Offset of the broker's local time from UTC, in minutes: `deleteWhen`
    /// hours are local hours, as in RocketMQ (the store reads no clock or
    /// time zone itself).
    pub time_zone_offset_minutes: i32,
    /// The store of a replication slave, whose CommitLog holds only its
    /// master's records ([`Store::append_replicated`](crate::store::Store::append_replicated)):
    /// abnormal recovery continues after the last valid record, where the
    /// master's stream goes on, instead of in a fresh segment.
    pub replica: bool,
}

impl StoreConfig {
    /// Defaults (RocketMQ's where they exist) for `shard_id` under `root`.
    pub fn new(root: impl Into<PathBuf>, shard_id: u8, store_host: SocketAddr) -> Self {
        let root = root.into();
        StoreConfig {
            consume_queue_root: root.join("shard").join(shard_id.to_string()),
            root,
            shard_id,
            segment_size_bytes: COMMIT_LOG_SEGMENT_SIZE_DEFAULT,
            flush_mode: FlushMode::Async,
            flush_interval_ms: FLUSH_INTERVAL_MS_DEFAULT,
            sync_flush_timeout_ms: SYNC_FLUSH_TIMEOUT_MS_DEFAULT,
            tail_cache_bytes: TAIL_CACHE_SIZE,
            store_host,
            checkpoint_interval_ms: CHECKPOINT_INTERVAL_MS_DEFAULT,
            consume_queue_flush_interval_ms: CONSUME_QUEUE_FLUSH_INTERVAL_MS_DEFAULT,
            consume_queue_flush_early_bytes: CONSUME_QUEUE_FLUSH_EARLY_BYTES_DEFAULT,
            index_flush_early_bytes: INDEX_FLUSH_EARLY_BYTES_DEFAULT,
            disk_full_ratio: DISK_FULL_RATIO_DEFAULT,
            index_geometry: IndexGeometry::ROCKETMQ,
            retention: RetentionConfig::default(),
            clean_resource_interval_ms: CLEAN_RESOURCE_INTERVAL_MS_DEFAULT,
            commit_log_recycle_segments: COMMIT_LOG_RECYCLE_SEGMENTS_DEFAULT,
            commit_log_remove_step_bytes: COMMIT_LOG_REMOVE_STEP_BYTES_DEFAULT,
            time_zone_offset_minutes: 0,
            replica: false,
        }
    }

    /// The local hour of day (0–23) at `now_ms` (ms since the Unix epoch).
    pub fn hour_of_day(&self, now_ms: u64) -> u8 {
        let local_s = (now_ms / 1000) as i64 + i64::from(self.time_zone_offset_minutes) * 60;
        (local_s.rem_euclid(86_400) / 3_600) as u8
    }

    pub(super) fn check(&self) -> Result<(), StorageError> {
        let size = self.segment_size_bytes;
        if size < COMMIT_LOG_SEGMENT_SIZE_MIN
            || !size.is_multiple_of(crate::aligned::BLOCK_SIZE as u64)
            || size > u32::MAX as u64
        {
            return Err(StorageError::InvalidArgument(format!(
                "segment size {size} must be a multiple of 4096 in {COMMIT_LOG_SEGMENT_SIZE_MIN}..=4 GiB"
            )));
        }
        if !(0.0..=1.0).contains(&self.disk_full_ratio) {
            return Err(StorageError::InvalidArgument(format!(
                "disk full ratio {}",
                self.disk_full_ratio
            )));
        }
        Ok(())
    }

    pub(super) fn index_dir(&self) -> PathBuf {
        self.consume_queue_root.join(INDEX_DIR_NAME)
    }

    pub(super) fn commit_log_dir(&self) -> PathBuf {
        self.root.join("commitlog").join(self.shard_id.to_string())
    }

    /// The CommitLog's part of the configuration.
    pub(super) fn commit_log_config(&self) -> CommitLogConfig {
        CommitLogConfig {
            dir: self.commit_log_dir(),
            shard_id: self.shard_id,
            segment_size_bytes: self.segment_size_bytes,
            flush_mode: self.flush_mode,
            flush_interval_ms: self.flush_interval_ms,
            tail_cache_bytes: self.tail_cache_bytes,
            recycle_segments_max: self.commit_log_recycle_segments,
            remove_step_bytes: self.commit_log_remove_step_bytes,
            replica: self.replica,
        }
    }
}
