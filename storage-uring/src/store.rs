//! [`Store`]: one shard's store — CommitLog, ConsumeQueues, checkpoint and
//! abort file — and the poll loop that drives their disk I/O.
//!
//! # How the broker uses it
//!
//! One `Store` per shard, owned by the shard thread (no locks). It owns the
//! shard's CommitLog, ConsumeQueues and IndexFiles (`query_message`). Time is
//! always a parameter (`now_ms`); the store reads no clock.
//!
//! ```text
//!  open(disk, config, now)        -> recovery; abort file created
//!  send handler:   append(msg, now) / append_batch(..)  -> AppendTicket
//!                    (offsets assigned now; answer the producer later)
//!  shard loop:     poll(now, &mut acks)   every turn
//!                    -> AppendAck { id, status Ok | FlushTimeout | Failed }
//!                    answer each ticket's request when its ack arrives
//!  pull handler:   get_messages(topic, queue, offset, count, bytes, tags)
//!                    -> GetMessagesResult (status as RocketMQ's
//!                       GetMessageStatus, next_begin_offset, min/max, bytes)
//!  view by id:     read_record(commit_log_offset)
//!  SIGTERM:        shutdown(now)   flush, checkpoint, remove abort
//! ```
//!
//! A send's response is due when its ack arrives: after the O_DIRECT write
//! (ASYNC_FLUSH) or the fdatasync (SYNC_FLUSH); a SYNC_FLUSH append still
//! waiting after `sync_flush_timeout_ms` is acked once with
//! [`AckStatus::FlushTimeout`] (RocketMQ FLUSH_DISK_TIMEOUT; the record stays
//! stored). Consumers only see acknowledgeable records.
//!
//! ConsumeQueue entries are dispatched in the same call as the append (so
//! queue offsets are dense and assigned at once); lookups clamp them to the
//! acknowledgeable CommitLog position.
//!
//! Recovery (RocketMQ 6.9, adapted): ConsumeQueues and index are loaded;
//! after a clean stop the CommitLog is scanned from the smallest of the
//! checkpoint's confirmed offset, the least advanced queue's last entry and
//! the newest indexed record; after an abnormal stop (abort file present) the
//! queues and the index are first cut back to the checkpoint's durable points
//! (what was fdatasynced; their write-behind tail may hold torn entries that
//! look valid, which RocketMQ trusts) and the scan starts at the smallest of
//! those points and the confirmed offset (`recover`: with no durable points,
//! or kept files that disagree with the CommitLog, they are rebuilt from the
//! whole CommitLog instead). A scan start is a record boundary; if no valid
//! record is there, the scan starts at its segment's start. BODYCRC is
//! verified from the confirmed offset on, records are re-dispatched
//! (duplicates ignored), the log is truncated at the first invalid record and
//! every queue cut there; records below the queues' durable point do not
//! re-create a queue that is missing (a deleted topic's, see
//! [`Store::delete_topic`]). After an abnormal stop appends continue in a fresh
//! segment behind a durable BLANK fence (see [`crate::commit_log`]), and a
//! new checkpoint is written before `open` returns.
//!
//! Retention runs in `poll` (see [`crate::retention`]): every
//! `clean_resource_interval_ms`, or at once on a disk above the
//! clean-forcibly ratio, a plan picks expired segments; they go one per turn,
//! never the active one, never before all their bytes are durable, their
//! unlinks in the background; then the ConsumeQueues and the index drop what
//! is below the new CommitLog min offset. Appends are refused with the
//! retriable [`StorageError::DiskFull`] while the disk is above the warning
//! level, and accepted again once it is not.
//!
//! # Invariants
//! - Acks are reported in append order, each exactly once.
//! - Everything acknowledged Ok before a crash is found again by `open`, as
//!   the flush mode promises (process kill: both modes; power loss:
//!   SYNC_FLUSH).
//! - After `open`, every ConsumeQueue entry points at a valid record below
//!   the CommitLog's end.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;

use ringmq_protocol::message::layout::is_dispatched_to_consume_queue;
use ringmq_protocol::message::properties::{NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};
use ringmq_protocol::message::property_key::{KEYS, TAGS, UNIQ_KEY};
use ringmq_protocol::message::{RecordSpec, peek_total_size, tags_code};

use crate::checkpoint::{self, Checkpoint, DurablePoints, ShardFiles};
use crate::commit_log::appender::FlushMode;
use crate::commit_log::{
    self, CommitLog, CommitLogConfig, RecoveryReport, SegmentRemoval, shard_offset,
    split_shard_offset,
};
use crate::consume_queue::{ConsumeQueueSet, CqEntry};
use crate::disk::{Disk, DiskCompletion, DiskOp, FileId, OpId, OpTag, Wait};
use crate::error::StorageError;
use crate::index_file::{
    INDEX_DIR_NAME, IndexDurablePoint, IndexGeometry, IndexQueryResult, IndexRecord, IndexService,
};
use crate::limits::{
    CHECKPOINT_FILE_SIZE, CHECKPOINT_INTERVAL_MS_DEFAULT, CLEAN_RESOURCE_INTERVAL_MS_DEFAULT,
    COMMIT_LOG_RECYCLE_SEGMENTS_DEFAULT, COMMIT_LOG_REMOVE_STEP_BYTES_DEFAULT,
    COMMIT_LOG_SEGMENT_SIZE_DEFAULT, COMMIT_LOG_SEGMENT_SIZE_MIN, COMPLETIONS_PER_TURN_MAX,
    CONSUME_QUEUE_FLUSH_EARLY_BYTES_DEFAULT, CONSUME_QUEUE_FLUSH_INTERVAL_MS_DEFAULT,
    DISK_FULL_RATIO_DEFAULT, DISK_SPACE_CHECK_INTERVAL_MS, FLUSH_INTERVAL_MS_DEFAULT,
    GET_MESSAGES_BYTES_MAX, GET_MESSAGES_COUNT_MAX, GET_MESSAGES_SCAN_ENTRIES_MAX,
    MESSAGE_SIZE_MAX_BYTES, RETENTION_CQ_FILES_PER_TURN_MAX, RETENTION_QUEUES_PER_TURN_MAX,
    SHUTDOWN_POLL_ROUNDS_MAX, SYNC_FLUSH_TIMEOUT_MS_DEFAULT, TAIL_CACHE_SIZE,
};
use crate::retention::RetentionConfig;

mod recover;

pub use crate::commit_log::appender::FlushMode as StoreFlushMode;

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
    /// [`CommitLogConfig::remove_step_bytes`].
    pub commit_log_remove_step_bytes: u64,
    /// Offset of the broker's local time from UTC, in minutes: `deleteWhen`
    /// hours are local hours, as in RocketMQ (the store reads no clock or
    /// time zone itself).
    pub time_zone_offset_minutes: i32,
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
            disk_full_ratio: DISK_FULL_RATIO_DEFAULT,
            index_geometry: IndexGeometry::ROCKETMQ,
            retention: RetentionConfig::default(),
            clean_resource_interval_ms: CLEAN_RESOURCE_INTERVAL_MS_DEFAULT,
            commit_log_recycle_segments: COMMIT_LOG_RECYCLE_SEGMENTS_DEFAULT,
            commit_log_remove_step_bytes: COMMIT_LOG_REMOVE_STEP_BYTES_DEFAULT,
            time_zone_offset_minutes: 0,
        }
    }

    /// The local hour of day (0–23) at `now_ms` (ms since the Unix epoch).
    pub fn hour_of_day(&self, now_ms: u64) -> u8 {
        let local_s = (now_ms / 1000) as i64 + i64::from(self.time_zone_offset_minutes) * 60;
        (local_s.rem_euclid(86_400) / 3_600) as u8
    }

    fn check(&self) -> Result<(), StorageError> {
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

    fn index_dir(&self) -> PathBuf {
        self.consume_queue_root.join(INDEX_DIR_NAME)
    }

    fn commit_log_dir(&self) -> PathBuf {
        self.root.join("commitlog").join(self.shard_id.to_string())
    }
}

/// One message to append; the store fills in queue offset, CommitLog
/// offset, store timestamp and store host.
#[derive(Clone, Copy, Debug)]
pub struct AppendMessage<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Queue id (must be owned by this shard; the broker routes).
    pub queue_id: u32,
    /// Body as stored.
    pub body: &'a [u8],
    /// Properties string (TAGS, KEYS, UNIQ_KEY ... already added).
    pub properties: &'a [u8],
    /// User flag.
    pub flag: i32,
    /// SYSFLAG.
    pub sys_flag: i32,
    /// Producer's timestamp.
    pub born_timestamp_ms: i64,
    /// Producer's address.
    pub born_host: SocketAddr,
    /// RECONSUMETIMES.
    pub reconsume_times: i32,
    /// PREPAREDTRANSACTIONOFFSET.
    pub prepared_transaction_offset: i64,
}

/// What an accepted append was assigned (answer the producer on its ack).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendTicket {
    /// The ack that will carry this id.
    pub id: u64,
    /// Outside-visible CommitLog offset of the (first) record.
    pub commit_log_offset: u64,
    /// Queue offset of the (first) record (0 for records not dispatched,
    /// e.g. transaction half messages).
    pub queue_offset: u64,
    /// Records appended (1, or the batch size).
    pub message_count: u32,
    /// Bytes appended.
    pub wrote_bytes: u32,
    /// STORETIMESTAMP written.
    pub store_timestamp_ms: i64,
    /// For a batch: every record's outside-visible offset (empty otherwise).
    pub batch_commit_log_offsets: Vec<u64>,
}

/// The outcome of an append, reported by [`Store::poll`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AckStatus {
    /// Stored as the flush mode promises.
    Ok,
    /// SYNC_FLUSH: not durable within the timeout; stored nonetheless.
    FlushTimeout,
    /// A disk write failed; the record may or may not survive.
    Failed(String),
}

/// An acknowledgement of one [`AppendTicket`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendAck {
    /// The ticket's id.
    pub id: u64,
    /// The outcome.
    pub status: AckStatus,
    /// The ticket's (first) outside-visible CommitLog offset.
    pub commit_log_offset: u64,
    /// The ticket's (first) queue offset.
    pub queue_offset: u64,
}

/// RocketMQ's `GetMessageStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetMessageStatus {
    /// Messages returned.
    Found,
    /// Entries were read but none matched the tag filter.
    NoMatchedMessage,
    /// The CommitLog data of the entries is gone (retention).
    MessageWasRemoving,
    /// Offset below the queue's min offset.
    OffsetTooSmall,
    /// Offset equals the max offset (nothing new yet).
    OffsetOverflowOne,
    /// Offset beyond the max offset.
    OffsetOverflowBadly,
    /// The queue exists but has no messages.
    NoMessageInQueue,
    /// The queue does not exist.
    NoMatchedLogicQueue,
}

/// One record of a [`GetMessagesResult`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundRecord {
    /// Its queue offset.
    pub queue_offset: u64,
    /// Its outside-visible CommitLog offset.
    pub commit_log_offset: u64,
    /// Its bytes in [`GetMessagesResult::body`].
    pub range: std::ops::Range<usize>,
}

/// The answer to [`Store::get_messages`] (a PULL_MESSAGE's data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetMessagesResult {
    /// The status.
    pub status: GetMessageStatus,
    /// Where the consumer continues.
    pub next_begin_offset: u64,
    /// The queue's min offset.
    pub min_offset: u64,
    /// The queue's max offset (visible: acknowledgeable records only).
    pub max_offset: u64,
    /// Stored records, concatenated (a pull body).
    pub body: Vec<u8>,
    /// Each record's place in `body`.
    pub records: Vec<FoundRecord>,
}

/// What `open` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenReport {
    /// Whether the abort file was present (abnormal recovery).
    pub abnormal: bool,
    /// Whether a valid checkpoint was read.
    pub checkpoint_valid: bool,
    /// The CommitLog recovery.
    pub recovery: RecoveryReport,
    /// Records re-dispatched into ConsumeQueues.
    pub redispatched: u64,
    /// Whether the ConsumeQueues and the index were rebuilt from the whole
    /// CommitLog (an abnormal stop without usable durable points, or kept
    /// files that disagreed with the CommitLog).
    pub derived_rebuilt: bool,
}

#[derive(Debug)]
struct PendingAppend {
    id: u64,
    end_local: u64,
    deadline_ms: u64,
    commit_log_offset: u64,
    queue_offset: u64,
    store_timestamp_ms: i64,
}

const CHECKPOINT_SEQ_WRITE: u64 = 1;
const CHECKPOINT_SEQ_FSYNC: u64 = 2;

/// One shard's store (see the module doc).
#[derive(Debug)]
pub struct Store<D: Disk> {
    disk: D,
    config: StoreConfig,
    files: ShardFiles,
    commit_log: CommitLog,
    queues: ConsumeQueueSet,
    index: IndexService,
    checkpoint_file: FileId,
    checkpoint_in_flight: bool,
    last_checkpoint_ms: u64,
    /// A ConsumeQueue or index operation completed since the last turn (a
    /// durability round may have completed).
    derived_io_completed: bool,
    /// The durable points moved past those of the last checkpoint: write one
    /// now.
    checkpoint_due: bool,
    /// (queues, index) durable points the last checkpoint carried.
    checkpointed_points: (u64, u64),
    last_cq_flush_ms: u64,
    last_space_check_ms: u64,
    disk_full: Option<f64>,
    /// Used over total space at the last check (0.0 before the first).
    disk_usage_ratio: f64,
    /// When retention last ran (ms).
    last_retention_ms: u64,
    /// When the last segment removal of a plan started (ms).
    last_segment_removal_ms: u64,
    /// CommitLog segments a retention run decided to delete, one per turn.
    retention_queue: VecDeque<u64>,
    /// Next ConsumeQueue (by index) to clean below the CommitLog min
    /// offset, while a cleanup after segment removal runs.
    retention_cursor: Option<usize>,
    retention_stats: RetentionStats,
    pending: VecDeque<PendingAppend>,
    /// (end_local, store timestamp) of appends not yet durable.
    durable_marks: VecDeque<(u64, i64)>,
    last_durable_store_timestamp_ms: i64,
    next_ticket_id: u64,
    completions: Vec<DiskCompletion>,
    /// The CommitLog's encoded position at the previous turn.
    encoded_at_last_turn: u64,
    /// When the oldest record not yet submitted was seen unsubmitted by
    /// `poll` (ms), if one is; bounds how long a partial tail block waits.
    unsubmitted_since_ms: Option<u64>,
    /// Reused for the record sizes of each append.
    sizes_scratch: Vec<u32>,
}

impl<D: Disk> Store<D> {
    /// Opens (recovering) the store of `config.shard_id`.
    ///
    /// # Errors
    /// Invalid config, disk errors, [`StorageError::Corrupt`] for files that
    /// cannot be what the store wrote.
    pub fn open(
        mut disk: D,
        config: StoreConfig,
        now_ms: u64,
    ) -> Result<(Store<D>, OpenReport), StorageError> {
        config.check()?;
        disk.create_dir_all(&config.root)?;
        let files = ShardFiles::new(&config.root, config.shard_id);
        let abnormal = checkpoint::abort_exists(&mut disk, &files)?;
        let (checkpoint_file, existed) = checkpoint::open_checkpoint(&mut disk, &files)?;
        let stored = if existed {
            let buf = commit_log::sync_read(
                &mut disk,
                checkpoint_file,
                0,
                CHECKPOINT_FILE_SIZE,
                &mut Vec::new(),
            )?;
            let decoded = Checkpoint::decode(buf.as_slice());
            disk.recycle(buf);
            decoded.filter(|c| c.shard_id == u32::from(config.shard_id))
        } else {
            None
        };
        let confirm_local = stored.map_or(0, |c| split_shard_offset(c.confirm_offset as u64).1);
        let durable_points = stored.and_then(|c| c.durable);
        // Abnormal stop: the derived files are kept up to the checkpoint's
        // durable points when it has them (see `recover`), else rebuilt.
        let kept = match durable_points {
            Some(points) if abnormal => {
                recover::load_to_durable_points(&mut disk, &config, points)?
            }
            _ => None,
        };
        let mut rebuilt = abnormal && kept.is_none();
        let (mut queues, mut index, scan_from, strict_from) = if let Some((queues, index, from)) =
            kept
        {
            let from_local = split_shard_offset(from).1.min(confirm_local);
            let strict = durable_points.map(|p| recover::split_points(p).0);
            (queues, index, from_local, strict)
        } else if abnormal {
            // Rebuilt after the CommitLog is open (`recover::rebuild`); the
            // first scan only validates the CommitLog.
            let queues = ConsumeQueueSet::new(&config.consume_queue_root);
            let index = IndexService::new(&config.index_dir(), config.index_geometry)?;
            (queues, index, confirm_local, None)
        } else {
            let queues = ConsumeQueueSet::load_all(&mut disk, &config.consume_queue_root)?;
            let resume_local = queues
                .iter()
                .map(|q| split_shard_offset(q.resume_offset()).1)
                .min();
            let index = IndexService::load(&mut disk, &config.index_dir(), config.index_geometry)?;
            // Index entries resume after the newest indexed record.
            let indexed_local = split_shard_offset(index.index_last_update_phy_offset() as u64).1;
            let scan_from = match resume_local {
                Some(resume) => resume.min(confirm_local).min(indexed_local),
                None => 0,
            };
            (queues, index, scan_from, None)
        };
        let log_config = CommitLogConfig {
            dir: config.commit_log_dir(),
            shard_id: config.shard_id,
            segment_size_bytes: config.segment_size_bytes,
            flush_mode: config.flush_mode,
            flush_interval_ms: config.flush_interval_ms,
            tail_cache_bytes: config.tail_cache_bytes,
            recycle_segments_max: config.commit_log_recycle_segments,
            remove_step_bytes: config.commit_log_remove_step_bytes,
        };
        // Below the queues' durable point every queue that held a record
        // was synced past it, so a record whose queue is missing there is of
        // a deleted topic (after a clean stop the point is the end).
        let existing_queues_below = durable_points.map(|p| recover::split_points(p).0);
        let mut dispatcher = recover::Dispatcher {
            queues: &mut queues,
            index: &mut index,
            shard_id: config.shard_id,
            now_ms,
            strict_from,
            existing_queues_below,
            error: None,
            inconsistent: None,
            redispatched: 0,
        };
        let dispatch = !rebuilt;
        let (mut commit_log, recovery) = CommitLog::open(
            &mut disk,
            log_config,
            scan_from,
            confirm_local,
            abnormal,
            now_ms,
            &mut |local, view| {
                if dispatch {
                    dispatcher.visit(local, view);
                }
            },
        )?;
        let mut redispatched = dispatcher.redispatched;
        let mut inconsistent = dispatcher.inconsistent.take();
        if let Some(error) = dispatcher.error.take() {
            return Err(error);
        }
        queues.truncate_from_commit_log_offset(
            &mut disk,
            shard_offset(config.shard_id, recovery.scan.end),
        )?;
        if strict_from.is_some() {
            // Records past the end are gone: so are their index entries, and
            // the durable points cannot be past the end (new records will
            // be written there).
            let end = shard_offset(config.shard_id, recovery.scan.end);
            queues.set_durable_point(queues.durable_point().min(end));
            if inconsistent.is_none() && !index.truncate_from_commit_log_offset(&mut disk, end)? {
                inconsistent = Some("an index file could not be cut at the commit log end".into());
            }
            if inconsistent.is_none() {
                inconsistent = recover::check_queue_tails(&mut disk, &mut commit_log, &mut queues)?;
            }
        }
        if let Some(reason) = &inconsistent {
            tracing::warn!(
                reason,
                "the kept consume queues disagree with the commit log; rebuilding them from it"
            );
            queues.close_all(&mut disk)?;
            index.close_and_remove_all(&mut disk)?;
            rebuilt = true;
        }
        if rebuilt {
            let (new_queues, new_index, count) =
                recover::rebuild(&mut disk, &config, &mut commit_log, now_ms)?;
            (queues, index, redispatched) = (new_queues, new_index, count);
        }
        if !abnormal && let Some(points) = durable_points {
            // After a clean stop the files are as durable as the checkpoint
            // written at the stop says.
            let (queues_offset, index_point) = recover::split_points(points);
            queues.set_durable_point(queues_offset);
            index.set_durable_point(index_point);
        }
        // Retention may have removed segments that queues and index still
        // point into; their min offsets move past them.
        let log_min = commit_log.min_offset();
        queues.delete_below_commit_log_offset(&mut disk, log_min)?;
        index.delete_below_commit_log_offset(&mut disk, log_min)?;
        if !abnormal {
            checkpoint::create_abort(&mut disk, &files)?;
        }
        let report = OpenReport {
            abnormal,
            checkpoint_valid: stored.is_some(),
            recovery,
            redispatched,
            derived_rebuilt: rebuilt,
        };
        let store = Store {
            disk,
            config,
            files,
            commit_log,
            queues,
            index,
            checkpoint_file,
            checkpoint_in_flight: false,
            last_checkpoint_ms: now_ms,
            derived_io_completed: false,
            checkpoint_due: false,
            checkpointed_points: (0, 0),
            last_cq_flush_ms: now_ms,
            last_space_check_ms: 0,
            disk_full: None,
            disk_usage_ratio: 0.0,
            last_retention_ms: now_ms,
            last_segment_removal_ms: 0,
            retention_queue: VecDeque::new(),
            retention_cursor: None,
            retention_stats: RetentionStats::default(),
            pending: VecDeque::new(),
            durable_marks: VecDeque::new(),
            last_durable_store_timestamp_ms: 0,
            next_ticket_id: 1,
            completions: Vec::new(),
            encoded_at_last_turn: 0,
            unsubmitted_since_ms: None,
            sizes_scratch: Vec::new(),
        };
        let mut store = store;
        if abnormal {
            store.write_checkpoint_sync()?;
        }
        Ok((store, report))
    }

    /// The configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The disk.
    pub fn disk(&self) -> &D {
        &self.disk
    }

    /// The disk, mutable (tests inject faults through it).
    pub fn disk_mut(&mut self) -> &mut D {
        &mut self.disk
    }

    /// Abandons the store without shutdown (as a killed process would) and
    /// returns the disk.
    pub fn into_disk(self) -> D {
        self.disk
    }

    /// The CommitLog.
    pub fn commit_log(&self) -> &CommitLog {
        &self.commit_log
    }

    /// The ConsumeQueues.
    pub fn consume_queues(&self) -> &ConsumeQueueSet {
        &self.queues
    }

    /// DELETE_TOPIC_IN_BROKER (RocketMQ's `deleteTopics`): drops the
    /// topic's ConsumeQueues and removes their files and directories (see
    /// [`ConsumeQueueSet::delete_topic`]); returns how many queues went.
    /// Pulls of the topic then find no queue, and its next message gets
    /// queue offset 0. Its records stay in the CommitLog (and the index)
    /// until retention removes them. [`Store::open`] does not bring the
    /// queues back from records below the checkpoint's durable point of the
    /// queues (after a clean stop: all of them); records past it (an
    /// abnormal stop before the point passed the deletion), or all of them
    /// when the derived files are rebuilt, are re-dispatched, as in RocketMQ.
    ///
    /// # Errors
    /// The first disk error removing files (the queues are gone from memory
    /// all the same).
    pub fn delete_topic(&mut self, topic: &str) -> Result<usize, StorageError> {
        let removed = self.queues.delete_topic(&mut self.disk, topic);
        // The durability round may now be complete without the queues.
        self.derived_io_completed = true;
        removed
    }

    /// Appends one message.
    ///
    /// # Errors
    /// [`StorageError::DiskFull`], [`StorageError::Busy`],
    /// [`StorageError::NotWritable`] (retriable, nothing stored);
    /// [`StorageError::MessageTooLarge`], [`StorageError::InvalidArgument`],
    /// [`StorageError::Record`] (the message is invalid).
    pub fn append(
        &mut self,
        message: &AppendMessage<'_>,
        now_ms: u64,
    ) -> Result<AppendTicket, StorageError> {
        // One record: its spec lives on the stack and no offsets list is
        // kept, so the common path allocates nothing.
        let messages = std::slice::from_ref(message);
        let (queue_index, first_queue_offset) = self.check_batch(messages)?;
        let store_timestamp_ms = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let mut specs = [self.record_spec(message, first_queue_offset, store_timestamp_ms)];
        self.append_specs(&mut specs, queue_index, first_queue_offset, now_ms, None)
    }

    /// Appends several messages of one (topic, queue) atomically, in one
    /// segment, with consecutive queue offsets.
    ///
    /// # Errors
    /// As [`Store::append`]; [`StorageError::InvalidArgument`] for an empty
    /// batch or one mixing queues.
    pub fn append_batch(
        &mut self,
        messages: &[AppendMessage<'_>],
        now_ms: u64,
    ) -> Result<AppendTicket, StorageError> {
        let (queue_index, first_queue_offset) = self.check_batch(messages)?;
        let store_timestamp_ms = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let mut next_queue_offset = first_queue_offset;
        let mut specs: Vec<RecordSpec<'_>> = Vec::with_capacity(messages.len());
        for m in messages {
            let queue_offset = if is_dispatched_to_consume_queue(m.sys_flag) {
                next_queue_offset += 1;
                next_queue_offset - 1
            } else {
                0
            };
            specs.push(self.record_spec(m, queue_offset, store_timestamp_ms));
        }
        let mut offsets = Vec::with_capacity(specs.len());
        self.append_specs(
            &mut specs,
            queue_index,
            first_queue_offset,
            now_ms,
            Some(&mut offsets),
        )
    }

    /// Checks a batch; returns its queue's index and next queue offset.
    fn check_batch(
        &mut self,
        messages: &[AppendMessage<'_>],
    ) -> Result<(usize, u64), StorageError> {
        let Some(first) = messages.first() else {
            return Err(StorageError::InvalidArgument("empty batch".into()));
        };
        if messages
            .iter()
            .any(|m| m.topic != first.topic || m.queue_id != first.queue_id)
        {
            return Err(StorageError::InvalidArgument(
                "a batch must target one queue".into(),
            ));
        }
        if let Some(used_ratio) = self.disk_full {
            return Err(StorageError::DiskFull { used_ratio });
        }
        if let Some(m) = messages
            .iter()
            .find(|m| m.body.len() > MESSAGE_SIZE_MAX_BYTES)
        {
            return Err(StorageError::MessageTooLarge {
                size: m.body.len(),
                max: MESSAGE_SIZE_MAX_BYTES,
            });
        }
        let queue_index = self.queues.index_or_create(first.topic, first.queue_id)?;
        let next_queue_offset = self.queues.queue_at(queue_index).max_offset();
        Ok((queue_index, next_queue_offset))
    }

    fn record_spec<'a>(
        &self,
        m: &AppendMessage<'a>,
        queue_offset: u64,
        store_timestamp_ms: i64,
    ) -> RecordSpec<'a> {
        let queue_offset = if is_dispatched_to_consume_queue(m.sys_flag) {
            queue_offset
        } else {
            0
        };
        RecordSpec {
            topic: m.topic,
            body: m.body,
            properties: m.properties,
            queue_id: m.queue_id as i32,
            flag: m.flag,
            queue_offset: queue_offset as i64,
            commit_log_offset: 0,
            sys_flag: m.sys_flag,
            born_timestamp_ms: m.born_timestamp_ms,
            born_host: m.born_host,
            store_timestamp_ms,
            store_host: self.config.store_host,
            reconsume_times: m.reconsume_times,
            prepared_transaction_offset: m.prepared_transaction_offset,
            body_crc: None,
            version: None,
        }
    }

    /// Appends checked `specs` to the CommitLog, dispatches them to their
    /// ConsumeQueue (at `queue_index`) and the index, and queues their ack;
    /// `offsets` (batches) receives every record's offset.
    fn append_specs(
        &mut self,
        specs: &mut [RecordSpec<'_>],
        queue_index: usize,
        first_queue_offset: u64,
        now_ms: u64,
        mut offsets: Option<&mut Vec<u64>>,
    ) -> Result<AppendTicket, StorageError> {
        let mut sizes = std::mem::take(&mut self.sizes_scratch);
        let first_local = match self
            .commit_log
            .append_into(&mut self.disk, specs, &mut sizes)
        {
            Ok(first_local) => first_local,
            Err(error) => {
                self.sizes_scratch = sizes;
                return Err(error);
            }
        };
        let store_timestamp_ms = specs[0].store_timestamp_ms;
        let first_sys_flag = specs[0].sys_flag;
        let mut local = first_local;
        let mut wrote_bytes = 0u32;
        for (spec, &size) in specs.iter().zip(&sizes) {
            let commit_log_offset = shard_offset(self.config.shard_id, local);
            if let Some(offsets) = offsets.as_deref_mut() {
                offsets.push(commit_log_offset);
            }
            let properties = DispatchProperties::find(spec.properties);
            if is_dispatched_to_consume_queue(spec.sys_flag) {
                let entry = CqEntry {
                    commit_log_offset,
                    size,
                    tags_code: tags_code(properties.tags),
                };
                // The queue exists (created by the check) and the offset is
                // its next one, so only a broken invariant fails here.
                self.queues
                    .queue_at_mut(queue_index)
                    .append(spec.queue_offset as u64, entry)
                    .expect("dispatch of a freshly appended record");
            }
            let record = IndexRecord {
                topic: spec.topic,
                commit_log_offset,
                store_timestamp_ms,
                sys_flag: spec.sys_flag,
                uniq_key: properties.uniq_key,
                keys: properties.keys,
            };
            self.index.build_index(&record, store_timestamp_ms);
            local += u64::from(size);
            wrote_bytes += size;
        }
        self.sizes_scratch = sizes;
        self.queues.flush_early(
            &mut self.disk,
            queue_index,
            self.config.consume_queue_flush_early_bytes,
        )?;
        let id = self.next_ticket_id;
        self.next_ticket_id += 1;
        let deadline_ms = now_ms.saturating_add(self.config.sync_flush_timeout_ms);
        let commit_log_offset = shard_offset(self.config.shard_id, first_local);
        self.pending.push_back(PendingAppend {
            id,
            end_local: local,
            deadline_ms,
            commit_log_offset,
            queue_offset: first_queue_offset,
            store_timestamp_ms,
        });
        self.durable_marks.push_back((local, store_timestamp_ms));
        Ok(AppendTicket {
            id,
            commit_log_offset,
            queue_offset: if is_dispatched_to_consume_queue(first_sys_flag) {
                first_queue_offset
            } else {
                0
            },
            message_count: specs.len() as u32,
            wrote_bytes,
            store_timestamp_ms,
            batch_commit_log_offsets: offsets.map(std::mem::take).unwrap_or_default(),
        })
    }

    /// One turn of the store's loop without waiting: submits commits,
    /// flushes and checkpoints, reaps completions, and appends the acks that
    /// became due to `acks`.
    ///
    /// # Errors
    /// A failure of the disk's submission itself.
    pub fn poll(&mut self, now_ms: u64, acks: &mut Vec<AppendAck>) -> Result<(), StorageError> {
        self.turn(now_ms, Wait::No, acks)
    }

    /// As [`Store::poll`], but blocks up to `timeout` for a completion when
    /// operations are in flight.
    ///
    /// # Errors
    /// As [`Store::poll`].
    pub fn poll_wait(
        &mut self,
        now_ms: u64,
        timeout: std::time::Duration,
        acks: &mut Vec<AppendAck>,
    ) -> Result<(), StorageError> {
        self.turn(now_ms, Wait::AtLeastOne(timeout), acks)
    }

    fn turn(
        &mut self,
        now_ms: u64,
        wait: Wait,
        acks: &mut Vec<AppendAck>,
    ) -> Result<(), StorageError> {
        // The partial last block is written when the caller is about to
        // wait, or when nothing was appended since the previous turn; while
        // appends keep arriving only whole blocks go, so commits overlap
        // (see `Appender::start_commit`).
        //
        // Under a steady trickle of appends (one or two per turn, never a
        // wait) that rule alone would hold a record in the partial block
        // until whole blocks worth a commit pile up. So the tail is also
        // written once the oldest record not yet submitted has waited past a
        // millisecond tick: at most one tail commit per millisecond, which
        // bounds the added latency and keeps commits overlapping under load.
        let encoded = self.commit_log.appender().encoded();
        let submitted = self.commit_log.appender().submitted();
        let lingered = if encoded > submitted {
            now_ms > *self.unsubmitted_since_ms.get_or_insert(now_ms)
        } else {
            self.unsubmitted_since_ms = None;
            false
        };
        let partial_tail =
            matches!(wait, Wait::AtLeastOne(_)) || encoded == self.encoded_at_last_turn || lingered;
        if partial_tail {
            // The tail commit about to start covers everything encoded so
            // far; later records start a new wait.
            self.unsubmitted_since_ms = None;
        }
        self.encoded_at_last_turn = encoded;
        self.start_io(now_ms, partial_tail)?;
        let mut completions = std::mem::take(&mut self.completions);
        self.commit_log.take_stash(&mut completions);
        let wait = if completions.is_empty() && self.disk.in_flight() > 0 {
            wait
        } else {
            Wait::No
        };
        self.disk
            .poll(&mut completions, COMPLETIONS_PER_TURN_MAX, wait)?;
        for completion in completions.drain(..) {
            self.route(completion);
        }
        self.completions = completions;
        // Start the next commit at once: what arrived meanwhile joins it.
        self.commit_log
            .start_io(&mut self.disk, now_ms, partial_tail)?;
        self.collect_acks(now_ms, acks);
        Ok(())
    }

    fn start_io(&mut self, now_ms: u64, partial_tail: bool) -> Result<(), StorageError> {
        self.commit_log
            .start_io(&mut self.disk, now_ms, partial_tail)?;
        if now_ms.saturating_sub(self.last_cq_flush_ms)
            >= self.config.consume_queue_flush_interval_ms
        {
            self.last_cq_flush_ms = now_ms;
            for error in self.queues.take_errors() {
                tracing::warn!(%error, "consume queue flush failed; it is retried");
            }
            // A durability round starts before the flush, so it completes
            // with this flush's fdatasyncs (see `current_checkpoint`).
            self.advance_durable_points();
            self.queues.flush_all(&mut self.disk)?;
            for error in self.index.take_errors() {
                tracing::warn!(%error, "index file flush failed; it is retried");
            }
            self.index.flush(&mut self.disk)?;
        }
        // When a durability round completes, the checkpoint goes out at once
        // rather than at the next interval: the durable points it carries are
        // where the next abnormal recovery starts.
        if std::mem::take(&mut self.derived_io_completed) {
            let (queues_offset, index) = self.advance_durable_points();
            self.checkpoint_due |= (queues_offset, index.offset) != self.checkpointed_points;
        }
        if !self.checkpoint_in_flight
            && (self.checkpoint_due
                || now_ms.saturating_sub(self.last_checkpoint_ms)
                    >= self.config.checkpoint_interval_ms)
        {
            self.last_checkpoint_ms = now_ms;
            self.submit_checkpoint()?;
        }
        if now_ms.saturating_sub(self.last_space_check_ms) >= DISK_SPACE_CHECK_INTERVAL_MS {
            self.last_space_check_ms = now_ms;
            self.check_space();
            // A disk above the clean-forcibly ratio is cleaned at once, not
            // at the next regular run.
            let urgent = self.disk_usage_ratio > self.config.retention.clean_forcibly_ratio();
            if urgent
                || now_ms.saturating_sub(self.last_retention_ms)
                    >= self.config.clean_resource_interval_ms
            {
                self.last_retention_ms = now_ms;
                self.plan_retention(now_ms);
            }
        }
        self.run_retention_step(now_ms)?;
        Ok(())
    }

    fn check_space(&mut self) {
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

    /// Decides which CommitLog segments go now ([`RetentionConfig::plan`]).
    fn plan_retention(&mut self, now_ms: u64) {
        let segments = self.commit_log.retention_segments();
        let hour = self.config.hour_of_day(now_ms);
        let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let plan = self
            .config
            .retention
            .plan(now, hour, self.disk_usage_ratio, &segments);
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
    fn run_retention_step(&mut self, now_ms: u64) -> Result<(), StorageError> {
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

    /// Writes the checkpoint and waits for its fdatasync (shutdown, and the
    /// end of an abnormal recovery: the checkpoint on disk then describes a
    /// CommitLog that recovery may have cut or fenced, and must not outlive
    /// it). Call with nothing else in flight.
    fn write_checkpoint_sync(&mut self) -> Result<(), StorageError> {
        let (file, write) = self.checkpoint_write();
        let mut stash = Vec::new();
        let (_, buf) = commit_log::run_sync(
            &mut self.disk,
            OpId::new(OpTag::Checkpoint, 0),
            write,
            &mut stash,
        )?;
        if let Some(buf) = buf {
            self.disk.recycle(buf);
        }
        commit_log::run_sync(
            &mut self.disk,
            OpId::new(OpTag::Checkpoint, 0),
            DiskOp::Fdatasync { file },
            &mut stash,
        )?;
        assert!(
            stash.is_empty(),
            "a checkpoint written with operations in flight"
        );
        Ok(())
    }

    /// Moves the ConsumeQueues' and the index's durable points (every
    /// record below the encoded end has its entries in memory) and returns
    /// them.
    fn advance_durable_points(&mut self) -> (u64, IndexDurablePoint) {
        let dispatched_to =
            shard_offset(self.config.shard_id, self.commit_log.appender().encoded());
        (
            self.queues.advance_durable_point(dispatched_to),
            self.index.advance_durable_point(dispatched_to),
        )
    }

    /// The checkpoint to write now, with the durable points moved first.
    fn current_checkpoint(&mut self) -> Checkpoint {
        let durable = shard_offset(self.config.shard_id, self.commit_log.appender().durable());
        let (queues_offset, index) = self.advance_durable_points();
        self.checkpointed_points = (queues_offset, index.offset);
        self.checkpoint_due = false;
        Checkpoint {
            physic_msg_timestamp_ms: self.last_durable_store_timestamp_ms,
            logics_msg_timestamp_ms: self.last_durable_store_timestamp_ms,
            index_msg_timestamp_ms: 0,
            master_flushed_offset: 0,
            confirm_offset: durable as i64,
            shard_id: u32::from(self.config.shard_id),
            durable: Some(DurablePoints {
                queues_offset: queues_offset as i64,
                index_offset: index.offset as i64,
                index_file_created_ms: index.file_created_ms,
                index_count: index.index_count,
            }),
        }
    }

    /// The checkpoint file and the write of the current checkpoint to it.
    fn checkpoint_write(&mut self) -> (FileId, DiskOp) {
        let buf = self.current_checkpoint().to_buf(&mut self.disk);
        let file = self.checkpoint_file;
        let write = DiskOp::Write {
            file,
            file_offset: 0,
            buf,
            buf_range: 0..CHECKPOINT_FILE_SIZE,
        };
        (file, write)
    }

    fn submit_checkpoint(&mut self) -> Result<(), StorageError> {
        let (file, write) = self.checkpoint_write();
        self.disk
            .submit(
                OpId::new(OpTag::Checkpoint, CHECKPOINT_SEQ_WRITE),
                write,
                true,
            )
            .map_err(|(error, _)| error)?;
        self.disk
            .submit(
                OpId::new(OpTag::Checkpoint, CHECKPOINT_SEQ_FSYNC),
                DiskOp::Fdatasync { file },
                false,
            )
            .map_err(|(error, _)| error)?;
        self.checkpoint_in_flight = true;
        Ok(())
    }

    fn route(&mut self, completion: DiskCompletion) {
        match completion.op_id.tag() {
            Some(OpTag::CommitLog) => {
                self.commit_log.on_completion(&mut self.disk, completion);
            }
            Some(OpTag::ConsumeQueue) => {
                self.queues.on_completion(&mut self.disk, completion);
                self.derived_io_completed = true;
            }
            Some(OpTag::IndexFile) => {
                self.index.on_completion(&mut self.disk, completion);
                self.derived_io_completed = true;
            }
            Some(OpTag::Retention) => {
                if let Err(error) = &completion.result {
                    tracing::warn!(%error, "removing an expired file failed");
                }
            }
            Some(OpTag::Checkpoint) => {
                if let Err(error) = &completion.result {
                    tracing::warn!(%error, "checkpoint write failed; recovery will scan further back");
                }
                if completion.op_id.seq() == CHECKPOINT_SEQ_FSYNC {
                    self.checkpoint_in_flight = false;
                }
                if let Some(buf) = completion.buf {
                    self.disk.recycle(buf);
                }
            }
            other => {
                tracing::warn!(
                    op_id = completion.op_id.0,
                    ?other,
                    "completion with no owner"
                );
                if let Some(buf) = completion.buf {
                    self.disk.recycle(buf);
                }
            }
        }
    }

    fn collect_acks(&mut self, now_ms: u64, acks: &mut Vec<AppendAck>) {
        let appender = self.commit_log.appender();
        let ack_position = appender.ack_position();
        let durable = appender.durable();
        while let Some(&(end, ts)) = self.durable_marks.front() {
            if end > durable {
                break;
            }
            self.last_durable_store_timestamp_ms = ts;
            self.durable_marks.pop_front();
        }
        let failure = appender.failure().map(str::to_owned);
        while let Some(front) = self.pending.front() {
            let status = if front.end_local <= ack_position {
                AckStatus::Ok
            } else if let Some(reason) = &failure {
                AckStatus::Failed(reason.clone())
            } else {
                break;
            };
            let p = self.pending.pop_front().expect("front exists");
            acks.push(AppendAck {
                id: p.id,
                status,
                commit_log_offset: p.commit_log_offset,
                queue_offset: p.queue_offset,
            });
        }
        if self.config.flush_mode == FlushMode::Sync {
            // Deadlines grow with append order, so the expired ones are a prefix.
            while self
                .pending
                .front()
                .is_some_and(|p| p.deadline_ms <= now_ms)
            {
                let p = self.pending.pop_front().expect("front exists");
                let _ = p.store_timestamp_ms;
                acks.push(AppendAck {
                    id: p.id,
                    status: AckStatus::FlushTimeout,
                    commit_log_offset: p.commit_log_offset,
                    queue_offset: p.queue_offset,
                });
            }
        }
    }

    /// Appends not yet acknowledged.
    pub fn pending_appends(&self) -> usize {
        self.pending.len()
    }

    /// Outside-visible offset of the oldest CommitLog byte kept.
    pub fn commit_log_min_offset(&self) -> u64 {
        self.commit_log.min_offset()
    }

    /// Outside-visible offset after the last acknowledgeable record.
    pub fn commit_log_max_offset(&self) -> u64 {
        self.commit_log.max_offset()
    }

    /// The queue's min offset (0 if it does not exist).
    pub fn queue_min_offset(&self, topic: &str, queue_id: u32) -> u64 {
        self.queues
            .get(topic, queue_id)
            .map_or(0, |q| q.min_offset())
    }

    /// The queue's max offset counting only acknowledgeable records (0 if it
    /// does not exist).
    pub fn queue_max_offset(&self, topic: &str, queue_id: u32) -> u64 {
        let Some(queue) = self.queues.get(topic, queue_id) else {
            return 0;
        };
        let visible_end = self.commit_log.max_offset();
        let mut max = queue.max_offset();
        // Only the newest entries can be beyond the acknowledgeable position.
        while max > queue.min_offset() {
            match queue.entry(max - 1) {
                Some(entry) if entry.end_offset() > visible_end => max -= 1,
                _ => break,
            }
        }
        max
    }

    /// QUERY_MESSAGE: CommitLog offsets of acknowledgeable records indexed
    /// under `topic#key` and stored within `[begin_ms, end_ms]`, newest first
    /// (hash collisions possible: the caller re-checks keys).
    pub fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> IndexQueryResult {
        let mut result = self.index.query(topic, key, max_num, begin_ms, end_ms);
        let visible_end = self.commit_log.max_offset();
        result.phy_offsets.retain(|offset| *offset < visible_end);
        result
    }

    /// The stored record at outside-visible `commit_log_offset`, if it is
    /// acknowledgeable and still kept (VIEW_MESSAGE_BY_ID).
    ///
    /// # Errors
    /// Disk errors; [`StorageError::InvalidArgument`] for another shard's
    /// offset.
    pub fn read_record(&mut self, commit_log_offset: u64) -> Result<Option<Vec<u8>>, StorageError> {
        let Some(head) = self.commit_log.read(&mut self.disk, commit_log_offset, 4)? else {
            return Ok(None);
        };
        let size = match peek_total_size(&head) {
            Ok(size) if size > 0 => size as usize,
            _ => return Ok(None),
        };
        self.commit_log
            .read(&mut self.disk, commit_log_offset, size)
    }

    /// Messages of one queue from `queue_offset` (PULL_MESSAGE), as
    /// RocketMQ's `DefaultMessageStore.getMessage`: at most `max_count`
    /// records and, after the first, at most `max_bytes`; `tag_filter` keeps
    /// entries whose `(i32) tags_code` is in the set (None: all).
    ///
    /// # Errors
    /// Disk errors reading older records.
    pub fn get_messages(
        &mut self,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        max_count: usize,
        max_bytes: usize,
        tag_filter: Option<&[i32]>,
    ) -> Result<GetMessagesResult, StorageError> {
        let mut result = GetMessagesResult {
            status: GetMessageStatus::NoMatchedLogicQueue,
            next_begin_offset: 0,
            min_offset: 0,
            max_offset: 0,
            body: Vec::new(),
            records: Vec::new(),
        };
        if self.queues.get(topic, queue_id).is_none() {
            return Ok(result);
        }
        let min = self.queue_min_offset(topic, queue_id);
        let max = self.queue_max_offset(topic, queue_id);
        result.min_offset = min;
        result.max_offset = max;
        if max == 0 {
            result.status = GetMessageStatus::NoMessageInQueue;
            return Ok(result);
        }
        if queue_offset < min {
            result.status = GetMessageStatus::OffsetTooSmall;
            result.next_begin_offset = min;
            return Ok(result);
        }
        if queue_offset == max {
            result.status = GetMessageStatus::OffsetOverflowOne;
            result.next_begin_offset = queue_offset;
            return Ok(result);
        }
        if queue_offset > max {
            result.status = GetMessageStatus::OffsetOverflowBadly;
            result.next_begin_offset = if min == 0 { min } else { max };
            return Ok(result);
        }
        let max_count = max_count.clamp(1, GET_MESSAGES_COUNT_MAX);
        let max_bytes = max_bytes.min(GET_MESSAGES_BYTES_MAX);
        let scan =
            (max - queue_offset).min(GET_MESSAGES_SCAN_ENTRIES_MAX.max(max_count) as u64) as usize;
        let entries = self
            .queues
            .get(topic, queue_id)
            .map(|q| q.entries(queue_offset, scan))
            .unwrap_or_default();
        let log_min = self.commit_log.min_offset();
        let mut status = GetMessageStatus::NoMatchedMessage;
        let mut next = queue_offset;
        for entry in entries {
            if result.records.len() >= max_count
                || (!result.records.is_empty()
                    && result.body.len() + entry.size as usize > max_bytes)
            {
                break;
            }
            let this_offset = next;
            next += 1;
            if entry.commit_log_offset < log_min {
                status = GetMessageStatus::MessageWasRemoving;
                continue;
            }
            if let Some(codes) = tag_filter
                && !codes.contains(&(entry.tags_code as i32))
            {
                continue;
            }
            let Some(bytes) = self.commit_log.read(
                &mut self.disk,
                entry.commit_log_offset,
                entry.size as usize,
            )?
            else {
                status = GetMessageStatus::MessageWasRemoving;
                continue;
            };
            let start = result.body.len();
            result.body.extend_from_slice(&bytes);
            result.records.push(FoundRecord {
                queue_offset: this_offset,
                commit_log_offset: entry.commit_log_offset,
                range: start..result.body.len(),
            });
        }
        result.status = if result.records.is_empty() {
            status
        } else {
            GetMessageStatus::Found
        };
        result.next_begin_offset = next;
        Ok(result)
    }

    /// Flushes everything, writes the checkpoint, removes the abort file and
    /// closes the files; returns the disk. Acks that become due are appended
    /// to `acks`.
    ///
    /// # Errors
    /// Disk errors; [`StorageError::FlushTimeout`] if the disk does not
    /// finish within [`SHUTDOWN_POLL_ROUNDS_MAX`] rounds.
    pub fn shutdown(mut self, now_ms: u64, acks: &mut Vec<AppendAck>) -> Result<D, StorageError> {
        let mut rounds = 0;
        loop {
            self.commit_log.start_flush_now(&mut self.disk)?;
            self.queues.flush_all(&mut self.disk)?;
            self.index.flush(&mut self.disk)?;
            let log_done = self.commit_log.appender().is_idle()
                || self.commit_log.appender().failure().is_some();
            if log_done
                && self.queues.is_idle()
                && self.queues.is_clean()
                && self.index.is_idle()
                && self.index.is_clean()
                && !self.checkpoint_in_flight
                && self.disk.in_flight() == 0
            {
                break;
            }
            rounds += 1;
            if rounds > SHUTDOWN_POLL_ROUNDS_MAX {
                return Err(StorageError::FlushTimeout {
                    timeout_ms: rounds as u64 * 100,
                });
            }
            let mut completions = std::mem::take(&mut self.completions);
            self.commit_log.take_stash(&mut completions);
            self.disk.poll(
                &mut completions,
                COMPLETIONS_PER_TURN_MAX,
                Wait::AtLeastOne(std::time::Duration::from_millis(100)),
            )?;
            for completion in completions.drain(..) {
                self.route(completion);
            }
            self.completions = completions;
            self.collect_acks(now_ms, acks);
        }
        self.collect_acks(now_ms, acks);
        if let Some(reason) = self.commit_log.appender().failure() {
            // Keep the abort file: the next start must recover the tail.
            tracing::error!(
                reason,
                "shutdown after a commit log failure; recovery will run at the next start"
            );
        } else {
            self.commit_log.zero_block_after_clean_end(&mut self.disk)?;
            self.write_checkpoint_sync()?;
            checkpoint::remove_abort(&mut self.disk, &self.files)?;
        }
        self.disk.close(self.checkpoint_file)?;
        self.commit_log.close(&mut self.disk)?;
        self.queues.close_all(&mut self.disk)?;
        self.index.close_all(&mut self.disk)?;
        Ok(self.disk)
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

/// The properties a record's dispatch needs (ConsumeQueue tags code, index
/// keys), found in one pass over the properties string.
#[derive(Debug, Default, PartialEq, Eq)]
struct DispatchProperties<'a> {
    tags: Option<&'a str>,
    keys: Option<&'a str>,
    uniq_key: Option<&'a str>,
}

impl<'a> DispatchProperties<'a> {
    /// As three `Properties::get` calls: the last duplicate of a key wins,
    /// a pair counts only when its first 0x01 is neither first nor last, a
    /// value that is not UTF-8 reads as absent.
    fn find(properties: &'a [u8]) -> Self {
        let mut found = DispatchProperties::default();
        let (mut tags, mut keys, mut uniq_key) = (false, false, false);
        for segment in properties.rsplit(|byte| *byte == PROPERTY_SEPARATOR) {
            if tags && keys && uniq_key {
                break;
            }
            let Some(at) = segment
                .iter()
                .position(|byte| *byte == NAME_VALUE_SEPARATOR)
            else {
                continue;
            };
            if at == 0 || at + 1 == segment.len() {
                continue;
            }
            let (key, value) = (&segment[..at], &segment[at + 1..]);
            let slot = if key == TAGS.as_bytes() && !tags {
                tags = true;
                &mut found.tags
            } else if key == KEYS.as_bytes() && !keys {
                keys = true;
                &mut found.keys
            } else if key == UNIQ_KEY.as_bytes() && !uniq_key {
                uniq_key = true;
                &mut found.uniq_key
            } else {
                continue;
            };
            *slot = std::str::from_utf8(value).ok();
        }
        found
    }
}

/// For each ConsumeQueue on disk, the queue offset after its entries that
/// point below the CommitLog's first segment (records retention removed), if
/// any: `(topic, queue id, offset)`. Best effort: a queue that cannot be read
/// is left out (it is rebuilt from the CommitLog as before).
fn removed_queue_floors(disk: &mut impl Disk, config: &StoreConfig) -> Vec<(String, u32, u64)> {
    let log_min_local = match disk.list_dir(&config.commit_log_dir()) {
        Ok(names) => names
            .iter()
            .filter_map(|name| commit_log::segment::parse_segment_file_name(name))
            .min(),
        Err(error) => {
            tracing::warn!(%error, "listing the commit log for queue offsets failed");
            None
        }
    };
    let Some(log_min_local) = log_min_local.filter(|min| *min > 0) else {
        return Vec::new();
    };
    let log_min = shard_offset(config.shard_id, log_min_local);
    let queues = match ConsumeQueueSet::load_all(disk, &config.consume_queue_root) {
        Ok(queues) => queues,
        Err(error) => {
            tracing::warn!(%error, "loading consume queues for their offsets failed");
            return Vec::new();
        }
    };
    let mut floors = Vec::new();
    for queue in queues.iter() {
        // Entries are in CommitLog order: binary search for the first one
        // still backed by the CommitLog.
        let (mut low, mut high) = (queue.min_offset(), queue.max_offset());
        while low < high {
            let mid = low + (high - low) / 2;
            match queue.entry(mid) {
                Some(entry) if entry.commit_log_offset < log_min => low = mid + 1,
                _ => high = mid,
            }
        }
        if low > 0 {
            floors.push((queue.topic().to_string(), queue.queue_id(), low));
        }
    }
    let mut queues = queues;
    if let Err(error) = queues.close_all(disk) {
        tracing::warn!(%error, "closing consume queues read for their offsets failed");
    }
    floors
}

/// Removes every file directly in `dir`.
fn remove_files_in(disk: &mut impl Disk, dir: &std::path::Path) -> Result<(), StorageError> {
    let names = disk.list_dir(dir)?;
    for name in &names {
        disk.remove(&dir.join(name))?;
    }
    if !names.is_empty() {
        disk.sync_dir(dir)?;
    }
    Ok(())
}

/// Removes every ConsumeQueue file under `root` (`consumequeue/<topic>/<queue>/<file>`).
fn remove_consume_queue_files(
    disk: &mut impl Disk,
    root: &std::path::Path,
) -> Result<(), StorageError> {
    let cq_root = root.join(crate::consume_queue::CQ_DIR_NAME);
    for topic in disk.list_dir(&cq_root)? {
        let topic_dir = cq_root.join(&topic);
        for queue in disk.list_dir(&topic_dir)? {
            let queue_dir = topic_dir.join(&queue);
            let names = disk.list_dir(&queue_dir)?;
            for name in &names {
                disk.remove(&queue_dir.join(name))?;
            }
            if !names.is_empty() {
                disk.sync_dir(&queue_dir)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume_queue::CQ_ENTRY_SIZE;
    use crate::disk::sim::{CrashKind, SimConfig, SimDisk, SimImage};
    use ringmq_protocol::message::{CrcCheck, Properties, decode_record};

    fn config(mode: FlushMode) -> StoreConfig {
        let mut config = StoreConfig::new("/s", 0, SocketAddr::from(([127, 0, 0, 1], 10911)));
        config.segment_size_bytes = COMMIT_LOG_SEGMENT_SIZE_MIN;
        config.flush_mode = mode;
        config.flush_interval_ms = 10;
        config.sync_flush_timeout_ms = 50;
        config.index_geometry = IndexGeometry {
            hash_slot_count: 1024,
            entry_count_max: 8192,
        };
        config
    }

    fn message(body: &[u8]) -> AppendMessage<'_> {
        AppendMessage {
            topic: "T",
            queue_id: 0,
            body,
            properties: b"TAGS\x01A\x02",
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms: 1,
            born_host: SocketAddr::from(([10, 0, 0, 2], 999)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        }
    }

    fn settle(store: &mut Store<SimDisk>, now_ms: u64, acks: &mut Vec<AppendAck>) {
        for _ in 0..1_000 {
            store
                .poll_wait(now_ms, std::time::Duration::ZERO, acks)
                .unwrap();
            if store.pending_appends() == 0 {
                return;
            }
        }
        panic!("appends still pending");
    }

    #[test]
    fn a_queue_with_enough_unwritten_entries_is_flushed_before_the_interval() {
        let mut config = config(FlushMode::Async);
        config.consume_queue_flush_interval_ms = u64::MAX;
        config.consume_queue_flush_early_bytes = 10 * CQ_ENTRY_SIZE;
        let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(31)), config, 0).unwrap();
        let dirty = |store: &Store<SimDisk>| store.queues.get("T", 0).unwrap().dirty_bytes();
        for _ in 0..9 {
            store.append(&message(b"x"), 1).unwrap();
        }
        turns(&mut store, 1, 20);
        assert_eq!(
            dirty(&store),
            9 * CQ_ENTRY_SIZE,
            "below the threshold: left for the interval"
        );
        store.append(&message(b"x"), 1).unwrap();
        turns(&mut store, 1, 20);
        assert_eq!(dirty(&store), 0, "written at once");
        assert!(store.queues.is_clean(), "and synced after its write");
    }

    #[test]
    fn dispatch_properties_find_what_properties_get_finds() {
        let cases: [&[u8]; 7] = [
            b"",
            b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1\x02",
            b"TAGS\x01first\x02TAGS\x01last\x02",
            b"TAGS\x01\x02KEYS\x01\x01x\x02\x01TAGS",
            b"UNIQ_KEY\x01\xff\xfe\x02TAGS\x01t",
            b"TAGS\x01a\x01b\x02__CRC32#\x010000000000\x02",
            b"KEYS\x01k\x02UNIQ_KEY\x01u\x02TAGS\x01t\x02KEYS\x01\xff\x02",
        ];
        for bytes in cases {
            let properties = Properties::new(bytes);
            let expected = DispatchProperties {
                tags: properties.get(TAGS),
                keys: properties.get(KEYS),
                uniq_key: properties.get(UNIQ_KEY),
            };
            assert_eq!(DispatchProperties::find(bytes), expected, "{bytes:?}");
        }
    }

    #[test]
    fn sync_flush_acks_only_after_fdatasync_and_fills_record_fields() {
        let (mut store, _) =
            Store::open(SimDisk::new(SimConfig::new(1)), config(FlushMode::Sync), 0).unwrap();
        let ticket = store.append(&message(b"hello"), 42).unwrap();
        assert_eq!(
            store.commit_log_max_offset(),
            0,
            "nothing is acknowledgeable before the flush"
        );
        assert_eq!(store.read_record(ticket.commit_log_offset).unwrap(), None);
        let mut acks = Vec::new();
        settle(&mut store, 43, &mut acks);
        assert_eq!(acks[0].status, AckStatus::Ok);
        let appender = store.commit_log().appender();
        assert_eq!(appender.durable(), appender.encoded());
        let bytes = store
            .read_record(ticket.commit_log_offset)
            .unwrap()
            .unwrap();
        let view = decode_record(&bytes, CrcCheck::Verify).unwrap();
        assert_eq!(view.store_timestamp_ms(), 42);
        assert_eq!(view.store_host(), SocketAddr::from(([127, 0, 0, 1], 10911)));
        assert_eq!(view.commit_log_offset() as u64, ticket.commit_log_offset);
        assert!(view.property("__CRC32#").is_some());
    }

    #[test]
    fn a_steady_trickle_of_appends_is_acked_within_a_few_milliseconds() {
        // One small append per non-blocking poll, never a wait: the partial
        // tail block must still be written once its oldest record lingers.
        let (mut store, _) =
            Store::open(SimDisk::new(SimConfig::new(9)), config(FlushMode::Async), 0).unwrap();
        let mut acks = Vec::new();
        let first = store.append(&message(b"first"), 0).unwrap();
        let mut acked_at = None;
        for step in 0..2_000u64 {
            let now_ms = step / 50; // 50 turns per millisecond
            store.append(&message(b"trickle"), now_ms).unwrap();
            store.poll(now_ms, &mut acks).unwrap();
            if acks.iter().any(|ack| ack.id == first.id) {
                acked_at = Some(now_ms);
                break;
            }
        }
        let acked_at = acked_at.expect("the first append was never acknowledged");
        assert!(acked_at <= 3, "acknowledged only at {acked_at} ms");
    }

    #[test]
    fn sync_flush_past_its_timeout_acks_flush_timeout_once() {
        let (mut store, _) =
            Store::open(SimDisk::new(SimConfig::new(2)), config(FlushMode::Sync), 0).unwrap();
        let ticket = store.append(&message(b"slow"), 0).unwrap();
        let mut acks = Vec::new();
        // The disk is never polled before the deadline passes.
        store.collect_acks(100, &mut acks);
        assert_eq!(acks.len(), 1);
        assert_eq!(acks[0].status, AckStatus::FlushTimeout);
        assert_eq!(acks[0].id, ticket.id);
        // Its write, then the group fdatasync, complete later.
        for _ in 0..100 {
            if store
                .read_record(ticket.commit_log_offset)
                .unwrap()
                .is_some()
            {
                break;
            }
            store
                .poll_wait(200, std::time::Duration::ZERO, &mut acks)
                .unwrap();
        }
        assert_eq!(
            acks.len(),
            1,
            "a timed-out append is not acknowledged again"
        );
        assert!(
            store
                .read_record(ticket.commit_log_offset)
                .unwrap()
                .is_some(),
            "the record stays stored"
        );
    }

    #[test]
    fn write_error_fails_pending_appends_and_refuses_new_ones() {
        let (mut store, _) =
            Store::open(SimDisk::new(SimConfig::new(3)), config(FlushMode::Async), 0).unwrap();
        store.disk_mut().faults_mut().write_eio_nth = Some(1);
        store.append(&message(b"doomed"), 0).unwrap();
        let mut acks = Vec::new();
        settle(&mut store, 1, &mut acks);
        assert!(matches!(acks[0].status, AckStatus::Failed(_)), "{acks:?}");
        let refused = store.append(&message(b"later"), 2).unwrap_err();
        assert!(
            matches!(refused, StorageError::NotWritable { .. }),
            "{refused}"
        );
    }

    #[test]
    fn acknowledged_records_are_read_from_the_tail_cache_across_segment_ends() {
        let (mut store, _) =
            Store::open(SimDisk::new(SimConfig::new(4)), config(FlushMode::Async), 0).unwrap();
        let body = vec![7u8; 3_000];
        let mut tickets = Vec::new();
        let mut acks = Vec::new();
        for i in 0..60 {
            tickets.push(store.append(&message(&body), i).unwrap());
            if i % 3 == 0 {
                store.poll(i, &mut acks).unwrap();
            }
        }
        settle(&mut store, 100, &mut acks);
        assert!(store.commit_log().segments().segments().len() >= 3);
        // Any disk read from now on fails: every record must come from the
        // write buffers, which are the tail cache.
        store.disk_mut().faults_mut().read_eio_nth = Some(1);
        for ticket in &tickets {
            let bytes = store
                .read_record(ticket.commit_log_offset)
                .unwrap()
                .unwrap();
            assert_eq!(
                decode_record(&bytes, CrcCheck::Verify).unwrap().body(),
                &body[..]
            );
        }
    }

    #[test]
    fn records_never_cross_a_segment_end_and_reads_come_back_from_disk() {
        let mut config = config(FlushMode::Async);
        config.tail_cache_bytes = 0;
        let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(4)), config, 0).unwrap();
        let body = vec![9u8; 3_000];
        let mut tickets = Vec::new();
        let mut acks = Vec::new();
        for i in 0..60 {
            tickets.push(store.append(&message(&body), i).unwrap());
            store.poll(i, &mut acks).unwrap();
        }
        settle(&mut store, 100, &mut acks);
        let segment = COMMIT_LOG_SEGMENT_SIZE_MIN;
        assert!(store.commit_log().segments().segments().len() >= 3);
        for ticket in &tickets {
            let start = ticket.commit_log_offset;
            let end = start + u64::from(ticket.wrote_bytes);
            assert_eq!(
                start / segment,
                (end - 1) / segment,
                "record at {start} crosses a segment end"
            );
            let bytes = store.read_record(start).unwrap().unwrap();
            assert_eq!(
                decode_record(&bytes, CrcCheck::Verify).unwrap().body(),
                &body[..]
            );
        }
        // The first segment ends with a BLANK marker covering its rest.
        let image = store.disk().snapshot();
        let first = &image.files[&PathBuf::from("/s/commitlog/0/00000000000000000000")];
        let last_end = tickets
            .iter()
            .map(|t| t.commit_log_offset + u64::from(t.wrote_bytes))
            .filter(|e| *e <= segment)
            .max()
            .unwrap() as usize;
        assert_eq!(
            &first[last_end + 4..last_end + 8],
            &0xCBD4_3194u32.to_be_bytes()
        );
        assert_eq!(
            u32::from_be_bytes(first[last_end..last_end + 4].try_into().unwrap()) as u64,
            segment - last_end as u64
        );
    }

    #[test]
    fn a_full_disk_rejects_appends_retriably() {
        let mut sim = SimConfig::new(5);
        // One segment and the checkpoint block leave about 1 % free.
        sim.capacity_bytes = COMMIT_LOG_SEGMENT_SIZE_MIN + 5 * 1024;
        let (mut store, _) = Store::open(SimDisk::new(sim), config(FlushMode::Async), 0).unwrap();
        let mut acks = Vec::new();
        store.poll(DISK_SPACE_CHECK_INTERVAL_MS, &mut acks).unwrap();
        let error = store.append(&message(b"x"), 1).unwrap_err();
        assert!(matches!(error, StorageError::DiskFull { .. }), "{error}");
        assert!(error.is_retriable());
    }

    const HOUR_MS: u64 = 3_600_000;
    /// Day 1000 of the epoch, 01:00 UTC.
    const T0: u64 = 1_000 * 24 * HOUR_MS + HOUR_MS;

    fn retention_config() -> StoreConfig {
        let mut config = config(FlushMode::Async);
        config.retention.file_reserved_time_hours = 1;
        // These tests are about what goes, not how fast: no spacing (the
        // one-at-a-time rule still holds; its own test spaces).
        config.retention.delete_commit_log_files_interval_ms = 0;
        config.clean_resource_interval_ms = 1_000;
        config.index_geometry = IndexGeometry {
            hash_slot_count: 64,
            entry_count_max: 100,
        };
        config
    }

    /// Appends 1 KiB messages at `now_ms` until the CommitLog has
    /// `segments` segments in use, then lets everything become durable.
    fn fill_segments(store: &mut Store<SimDisk>, segments: u64, now_ms: u64) -> Vec<AppendTicket> {
        let body = vec![7u8; 1_000];
        let mut acks = Vec::new();
        let mut tickets = Vec::new();
        let size = store.config().segment_size_bytes;
        let mut at_ms = now_ms;
        while store.commit_log().encoded_offset() < (segments - 1) * size + size / 4 {
            let keys = format!("TAGS\x01A\x02KEYS\x01k{}\x02", tickets.len());
            let mut m = message(&body);
            m.properties = keys.as_bytes();
            tickets.push(store.append(&m, at_ms).unwrap());
            store.poll(at_ms, &mut acks).unwrap();
            at_ms += 1;
        }
        settle(store, at_ms, &mut acks);
        tickets
    }

    /// Polls `turns` times at `now_ms`, and once a second of fake time
    /// later so that space checks and retention runs are due.
    fn turns(store: &mut Store<SimDisk>, now_ms: u64, turns: usize) {
        let mut acks = Vec::new();
        for _ in 0..turns {
            store.poll(now_ms, &mut acks).unwrap();
        }
        settle(store, now_ms, &mut acks);
    }

    #[test]
    fn a_plan_removes_its_segments_one_at_a_time_spaced_by_the_interval() {
        let mut config = retention_config();
        config.retention.delete_commit_log_files_interval_ms = 100;
        let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(22)), config, T0).unwrap();
        fill_segments(&mut store, 5, T0);
        let mut acks = Vec::new();
        let at_delete_when = T0 + 3 * HOUR_MS;
        let mut removed = Vec::new();
        // 04:00, then turns 10 ms apart for a second.
        for step in 0..100 {
            store.poll(at_delete_when + step * 10, &mut acks).unwrap();
            assert!(
                store.commit_log().removals_in_flight() <= 1,
                "two segment removals in flight at step {step}"
            );
            removed.push(store.retention_stats().segments_removed);
        }
        let total = *removed.last().unwrap();
        assert!(total >= 3, "only {total} segments went in a second");
        // At most one removal starts per 100 ms (10 turns).
        for window in removed.windows(10) {
            assert!(
                window[9] - window[0] <= 1,
                "more than one removal within 100 ms: {removed:?}"
            );
        }
        settle(&mut store, at_delete_when + 1_000, &mut acks);
    }

    fn shrinking_config() -> StoreConfig {
        let mut config = retention_config();
        config.commit_log_recycle_segments = 0;
        config.commit_log_remove_step_bytes = config.segment_size_bytes / 4;
        config
    }

    fn removing_files(image: &SimImage) -> Vec<(PathBuf, u64)> {
        image
            .files
            .iter()
            .filter(|(path, _)| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(commit_log::segment::parse_removing_file_name)
                    .is_some()
            })
            .map(|(path, bytes)| (path.clone(), bytes.len() as u64))
            .collect()
    }

    #[test]
    fn an_unlinked_segment_is_renamed_and_shrunk_in_steps_first() {
        let config = shrinking_config();
        let size = config.segment_size_bytes;
        let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(41)), config, T0).unwrap();
        fill_segments(&mut store, 5, T0);
        let dir = PathBuf::from("/s/commitlog/0");
        let mut acks = Vec::new();
        let mut lengths_seen = std::collections::BTreeSet::new();
        for _ in 0..400 {
            store.poll(T0 + 3 * HOUR_MS, &mut acks).unwrap();
            let image = store.disk().snapshot();
            for (path, len) in removing_files(&image) {
                assert!(len <= size && len % (size / 4) == 0, "{path:?}: {len}");
                // Never under both names.
                let base = commit_log::segment::parse_removing_file_name(
                    path.file_name().unwrap().to_str().unwrap(),
                )
                .unwrap();
                assert!(
                    !image
                        .files
                        .contains_key(&dir.join(commit_log::segment::segment_file_name(base)))
                );
                lengths_seen.insert(len);
            }
        }
        settle(&mut store, T0 + 3 * HOUR_MS, &mut acks);
        let removed = store.retention_stats().segments_removed;
        assert!(removed >= 3, "only {removed} segments removed");
        assert_eq!(store.commit_log().removals_in_flight(), 0);
        // Four steps each (3/4, 1/2, 1/4, 0 of the segment), then the unlink.
        assert_eq!(
            store.commit_log().segment_stats().removal_steps,
            4 * removed
        );
        assert!(
            lengths_seen.len() > 1,
            "no intermediate length seen: {lengths_seen:?}"
        );
        let image = store.disk().snapshot();
        assert!(removing_files(&image).is_empty());
        for base in (0..store.commit_log_min_offset()).step_by(size as usize) {
            assert!(
                !image
                    .files
                    .contains_key(&dir.join(commit_log::segment::segment_file_name(base)))
            );
        }
    }

    #[test]
    fn a_crash_while_a_segment_is_shrunk_leaves_a_store_that_opens() {
        let config = shrinking_config();
        let size = config.segment_size_bytes;
        let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(42)), config, T0).unwrap();
        fill_segments(&mut store, 5, T0);
        let mut acks = Vec::new();
        let mut cut = false;
        for _ in 0..400 {
            store.poll(T0 + 3 * HOUR_MS, &mut acks).unwrap();
            let image = store.disk().durable_image();
            if removing_files(&image)
                .iter()
                .any(|(_, len)| *len > 0 && *len < size)
            {
                cut = true;
                break;
            }
        }
        assert!(cut, "never saw a segment half shrunk");
        let log_min = store.commit_log_min_offset();
        for kind in [CrashKind::ProcessKill, CrashKind::PowerLoss] {
            let disk = store.disk_mut().crash(kind);
            let (reopened, report) =
                Store::open(disk, shrinking_config(), T0 + 4 * HOUR_MS).unwrap();
            assert!(report.abnormal);
            assert!(removing_files(&reopened.disk().snapshot()).is_empty());
            // Segments removed before the cut stay removed; the one being
            // shrunk was below the min offset already.
            assert_eq!(reopened.commit_log_min_offset(), log_min);
        }
    }

    #[test]
    fn expired_segments_go_at_delete_when_and_never_the_active_one() {
        let (mut store, _) =
            Store::open(SimDisk::new(SimConfig::new(21)), retention_config(), T0).unwrap();
        let tickets = fill_segments(&mut store, 5, T0);
        let size = store.config().segment_size_bytes;
        let segments_before = store.commit_log().segments().segments().len();
        assert!(segments_before >= 5);
        // Expired (reserved 1 h) at 03:00, but deleteWhen is 04.
        turns(&mut store, T0 + 2 * HOUR_MS, 50);
        assert_eq!(
            store.commit_log_min_offset(),
            0,
            "nothing goes before deleteWhen"
        );
        assert_eq!(store.retention_stats().segments_removed, 0);
        // 04:00: every segment before the active one goes.
        turns(&mut store, T0 + 3 * HOUR_MS, 50);
        let active = store.commit_log().encoded_offset() / size * size;
        assert_eq!(store.commit_log_min_offset(), active);
        assert_eq!(store.retention_stats().segments_removed, active / size);
        let image = store.disk().snapshot();
        let dir = PathBuf::from("/s/commitlog/0");
        for base in (0..active).step_by(size as usize) {
            assert!(
                !image
                    .files
                    .contains_key(&dir.join(commit_log::segment::segment_file_name(base))),
                "segment {base} still on disk"
            );
        }
        assert!(
            image
                .files
                .contains_key(&dir.join(commit_log::segment::segment_file_name(active)))
        );
        // Reads below the min: the ConsumeQueue min moved past the removed
        // records (OFFSET_TOO_SMALL), records above it are still found.
        let queue_min = store.queue_min_offset("T", 0);
        let first_kept = tickets
            .iter()
            .find(|t| t.commit_log_offset >= active)
            .unwrap();
        assert_eq!(queue_min, first_kept.queue_offset);
        let below = store.get_messages("T", 0, 0, 8, 1 << 20, None).unwrap();
        assert_eq!(below.status, GetMessageStatus::OffsetTooSmall);
        assert_eq!(below.next_begin_offset, queue_min);
        let kept = store
            .get_messages("T", 0, queue_min, 1, 1 << 20, None)
            .unwrap();
        assert_eq!(kept.status, GetMessageStatus::Found);
        assert_eq!(
            store.read_record(tickets[0].commit_log_offset).unwrap(),
            None
        );
        // Index files wholly below the new min are gone too.
        assert!(
            store.retention_stats().files_removed > 0,
            "{:?}",
            store.retention_stats()
        );
        assert!(
            store
                .query_message("T", "k0", 10, 0, i64::MAX)
                .phy_offsets
                .is_empty()
        );
        let last_key = format!("k{}", tickets.len() - 1);
        let found = store.query_message("T", &last_key, 10, 0, i64::MAX);
        assert_eq!(
            found.phy_offsets,
            vec![tickets[tickets.len() - 1].commit_log_offset]
        );
    }

    #[test]
    fn a_restart_after_deletion_recovers_with_the_new_min_offsets() {
        let (mut store, _) =
            Store::open(SimDisk::new(SimConfig::new(22)), retention_config(), T0).unwrap();
        fill_segments(&mut store, 4, T0);
        turns(&mut store, T0 + 3 * HOUR_MS, 50);
        let log_min = store.commit_log_min_offset();
        let queue_min = store.queue_min_offset("T", 0);
        let queue_max = store.queue_max_offset("T", 0);
        assert!(log_min > 0 && queue_min > 0);
        let mut acks = Vec::new();
        let disk = store.shutdown(T0 + 3 * HOUR_MS, &mut acks).unwrap();
        let (mut store, report) = Store::open(disk, retention_config(), T0 + 4 * HOUR_MS).unwrap();
        assert!(!report.abnormal);
        assert_eq!(store.commit_log_min_offset(), log_min);
        assert_eq!(store.queue_min_offset("T", 0), queue_min);
        assert_eq!(store.queue_max_offset("T", 0), queue_max);
        // After a crash (abnormal recovery rebuilds the queues from the
        // CommitLog that is left) the same.
        let disk = store.disk_mut().crash(CrashKind::ProcessKill);
        let (mut store, report) = Store::open(disk, retention_config(), T0 + 5 * HOUR_MS).unwrap();
        assert!(report.abnormal);
        assert_eq!(store.commit_log_min_offset(), log_min);
        assert_eq!(store.queue_min_offset("T", 0), queue_min);
        assert_eq!(store.queue_max_offset("T", 0), queue_max);
        let below = store
            .get_messages("T", 0, queue_min - 1, 8, 1 << 20, None)
            .unwrap();
        assert_eq!(below.status, GetMessageStatus::OffsetTooSmall);
        let kept = store
            .get_messages("T", 0, queue_min, 8, 1 << 20, None)
            .unwrap();
        assert_eq!(kept.status, GetMessageStatus::Found);
    }

    #[test]
    fn a_queue_whose_records_were_all_removed_keeps_its_offsets_through_a_crash() {
        let (mut store, _) =
            Store::open(SimDisk::new(SimConfig::new(24)), retention_config(), T0).unwrap();
        let body = vec![5u8; 100];
        let mut early = message(&body);
        early.queue_id = 1;
        for i in 0..5 {
            store.append(&early, T0 + i).unwrap();
        }
        fill_segments(&mut store, 4, T0 + 10);
        turns(&mut store, T0 + 3 * HOUR_MS, 50);
        assert!(store.commit_log_min_offset() > 0);
        assert_eq!(
            store.queue_min_offset("T", 1),
            5,
            "all of queue 1 is removed"
        );
        assert_eq!(store.queue_max_offset("T", 1), 5);
        let disk = store.disk_mut().crash(CrashKind::ProcessKill);
        let (mut store, report) = Store::open(disk, retention_config(), T0 + 4 * HOUR_MS).unwrap();
        assert!(report.abnormal);
        assert_eq!(store.queue_max_offset("T", 1), 5);
        let ticket = store.append(&early, T0 + 4 * HOUR_MS).unwrap();
        assert_eq!(ticket.queue_offset, 5, "queue offsets never go back");
        let mut acks = Vec::new();
        settle(&mut store, T0 + 4 * HOUR_MS, &mut acks);
        // And through a clean restart after that.
        let disk = store.shutdown(T0 + 4 * HOUR_MS, &mut acks).unwrap();
        let (store, _) = Store::open(disk, retention_config(), T0 + 5 * HOUR_MS).unwrap();
        assert_eq!(store.queue_max_offset("T", 1), 6);
    }

    #[test]
    fn a_nearly_full_disk_refuses_appends_cleans_forcibly_and_accepts_again() {
        let mut sim = SimConfig::new(23);
        // Room for about ten segments with everything else.
        sim.capacity_bytes = 10 * COMMIT_LOG_SEGMENT_SIZE_MIN + 64 * 1024;
        let mut config = retention_config();
        config.retention.file_reserved_time_hours = 72;
        let (mut store, _) = Store::open(SimDisk::new(sim), config, T0).unwrap();
        let body = vec![3u8; 1_000];
        let mut acks = Vec::new();
        let mut now_ms = T0;
        let mut refused = None;
        for _ in 0..2_000 {
            now_ms += 100;
            match store.append(&message(&body), now_ms) {
                Ok(_) => {}
                Err(error) => {
                    refused = Some(error);
                    break;
                }
            }
            store.poll(now_ms, &mut acks).unwrap();
        }
        let refused = refused.expect("appends are refused once the disk is nearly full");
        assert!(
            matches!(refused, StorageError::DiskFull { .. }),
            "{refused}"
        );
        assert!(refused.is_retriable());
        assert!(store.disk_usage_ratio() > 0.85);
        // Segments are young (72 h reserved) and it is not 04:00: only the
        // forced cleaning can free space.
        let min_before = store.commit_log_min_offset();
        for _ in 0..20 {
            now_ms += 1_000;
            turns(&mut store, now_ms, 20);
        }
        assert!(
            store.commit_log_min_offset() > min_before,
            "forced cleaning removed segments"
        );
        assert_eq!(
            store.commit_log().segment_stats().spared,
            0,
            "a disk over diskMaxUsedSpaceRatio gets its space back: no spares"
        );
        assert!(
            store.disk_usage_ratio() <= 0.85,
            "{}",
            store.disk_usage_ratio()
        );
        store
            .append(&message(&body), now_ms)
            .expect("appends are accepted again");
        settle(&mut store, now_ms, &mut acks);
    }

    #[test]
    fn get_messages_reports_rocketmq_statuses_at_the_edges() {
        let (mut store, _) =
            Store::open(SimDisk::new(SimConfig::new(6)), config(FlushMode::Async), 0).unwrap();
        let none = store.get_messages("T", 0, 0, 8, 1 << 20, None).unwrap();
        assert_eq!(none.status, GetMessageStatus::NoMatchedLogicQueue);
        for i in 0..3 {
            store.append(&message(b"m"), i).unwrap();
        }
        let mut acks = Vec::new();
        settle(&mut store, 10, &mut acks);
        let found = store.get_messages("T", 0, 1, 8, 1 << 20, None).unwrap();
        assert_eq!(found.status, GetMessageStatus::Found);
        assert_eq!(found.records.len(), 2);
        assert_eq!(found.next_begin_offset, 3);
        assert_eq!(
            store
                .get_messages("T", 0, 3, 8, 1 << 20, None)
                .unwrap()
                .status,
            GetMessageStatus::OffsetOverflowOne
        );
        let badly = store.get_messages("T", 0, 9, 8, 1 << 20, None).unwrap();
        assert_eq!(badly.status, GetMessageStatus::OffsetOverflowBadly);
        assert_eq!(badly.next_begin_offset, 0);
        let other_tag = [ringmq_protocol::message::java_string_hash_code("B")];
        let filtered = store
            .get_messages("T", 0, 0, 8, 1 << 20, Some(&other_tag))
            .unwrap();
        assert_eq!(filtered.status, GetMessageStatus::NoMatchedMessage);
        assert_eq!(filtered.next_begin_offset, 3);
    }

    /// Polls at `from_ms`, `from_ms + 50`, ... up to `to_ms` (ConsumeQueue
    /// flushes and checkpoints run on their intervals).
    fn run_until(store: &mut Store<SimDisk>, from_ms: u64, to_ms: u64) {
        let mut acks = Vec::new();
        let mut now_ms = from_ms;
        while now_ms <= to_ms {
            for _ in 0..5 {
                store
                    .poll_wait(now_ms, std::time::Duration::ZERO, &mut acks)
                    .unwrap();
            }
            now_ms += 50;
        }
    }

    fn queue_paths(store: &Store<SimDisk>, topic: &str) -> Vec<PathBuf> {
        let dir = store
            .config()
            .consume_queue_root
            .join(crate::consume_queue::CQ_DIR_NAME)
            .join(topic);
        let image = store.disk().snapshot();
        image
            .dirs
            .into_iter()
            .chain(image.files.into_keys())
            .filter(|p| p.starts_with(&dir))
            .collect()
    }

    fn bodies(store: &mut Store<SimDisk>, topic: &str, queue_id: u32) -> Vec<Vec<u8>> {
        let found = store
            .get_messages(topic, queue_id, 0, 32, 1 << 20, None)
            .unwrap();
        found
            .records
            .iter()
            .map(|r| {
                decode_record(&found.body[r.range.clone()], CrcCheck::Skip)
                    .unwrap()
                    .body()
                    .to_vec()
            })
            .collect()
    }

    /// T/0 gets "old-0..2", U/1 gets "u-0..1"; everything flushed and
    /// checkpointed by `T0 + 2_000`.
    fn two_topics(seed: u64) -> Store<SimDisk> {
        let (mut store, _) = Store::open(
            SimDisk::new(SimConfig::new(seed)),
            config(FlushMode::Async),
            0,
        )
        .unwrap();
        for i in 0..3 {
            store
                .append(&message(format!("old-{i}").as_bytes()), 1)
                .unwrap();
        }
        for i in 0..2 {
            let body = format!("u-{i}");
            let mut m = message(body.as_bytes());
            m.topic = "U";
            m.queue_id = 1;
            store.append(&m, 1).unwrap();
        }
        run_until(&mut store, 10, 2_000);
        assert!(store.consume_queues().is_clean());
        assert!(!queue_paths(&store, "T").is_empty());
        store
    }

    #[test]
    fn a_deleted_topic_is_gone_and_starts_again_at_queue_offset_zero_across_a_restart() {
        let mut store = two_topics(40);
        assert_eq!(store.delete_topic("T").unwrap(), 1);
        assert_eq!(queue_paths(&store, "T"), Vec::<PathBuf>::new());
        let gone = store.get_messages("T", 0, 0, 8, 1 << 20, None).unwrap();
        assert_eq!(gone.status, GetMessageStatus::NoMatchedLogicQueue);
        assert_eq!(store.queue_max_offset("T", 0), 0);
        assert_eq!(
            bodies(&mut store, "U", 1),
            [b"u-0".to_vec(), b"u-1".to_vec()]
        );
        let ticket = store.append(&message(b"new-0"), 2_100).unwrap();
        assert_eq!(ticket.queue_offset, 0);
        run_until(&mut store, 2_100, 3_000);
        assert_eq!(bodies(&mut store, "T", 0), [b"new-0".to_vec()]);
        let mut acks = Vec::new();
        let disk = store.shutdown(3_000, &mut acks).unwrap();
        let (mut store, report) = Store::open(disk, config(FlushMode::Async), 4_000).unwrap();
        assert!(!report.abnormal);
        assert_eq!(store.queue_max_offset("T", 0), 1);
        assert_eq!(bodies(&mut store, "T", 0), [b"new-0".to_vec()]);
        assert_eq!(
            bodies(&mut store, "U", 1),
            [b"u-0".to_vec(), b"u-1".to_vec()]
        );
        assert_eq!(store.commit_log().max_offset(), report.recovery.scan.end);
    }

    #[test]
    fn a_clean_restart_does_not_bring_back_a_deleted_topic_from_the_commit_log() {
        // Without an older topic no queue is left and the restart scans the
        // whole CommitLog; with one, the scan starts at its last record,
        // before T's. Either way T's records must not re-create its queue.
        for older_topic in [false, true] {
            let (mut store, _) = Store::open(
                SimDisk::new(SimConfig::new(41)),
                config(FlushMode::Async),
                0,
            )
            .unwrap();
            if older_topic {
                let mut m = message(b"u-0");
                m.topic = "U";
                store.append(&m, 1).unwrap();
            }
            for i in 0..3 {
                store
                    .append(&message(format!("old-{i}").as_bytes()), 1)
                    .unwrap();
            }
            run_until(&mut store, 10, 2_000);
            assert_eq!(store.delete_topic("T").unwrap(), 1);
            let mut acks = Vec::new();
            let disk = store.shutdown(2_000, &mut acks).unwrap();
            let (mut store, report) = Store::open(disk, config(FlushMode::Async), 3_000).unwrap();
            assert!(!report.abnormal);
            assert_eq!(report.redispatched, 0, "older topic {older_topic}");
            assert!(store.consume_queues().get("T", 0).is_none());
            assert_eq!(store.consume_queues().len(), usize::from(older_topic));
            assert_eq!(queue_paths(&store, "T"), Vec::<PathBuf>::new());
            if older_topic {
                assert_eq!(bodies(&mut store, "U", 0), [b"u-0".to_vec()]);
            }
        }
    }

    #[test]
    fn a_crash_after_the_durable_point_passed_a_deletion_does_not_bring_the_topic_back() {
        let mut store = two_topics(42);
        assert_eq!(store.delete_topic("T").unwrap(), 1);
        store.append(&message(b"new-0"), 2_100).unwrap();
        run_until(&mut store, 2_100, 4_000);
        for kind in [CrashKind::ProcessKill, CrashKind::PowerLoss] {
            let disk = store.disk_mut().crash(kind);
            let (mut reopened, report) =
                Store::open(disk, config(FlushMode::Async), 5_000).unwrap();
            assert!(report.abnormal, "{kind:?}");
            assert!(!report.derived_rebuilt, "{kind:?}");
            assert_eq!(
                bodies(&mut reopened, "T", 0),
                [b"new-0".to_vec()],
                "{kind:?}"
            );
            assert_eq!(
                bodies(&mut reopened, "U", 1),
                [b"u-0".to_vec(), b"u-1".to_vec()],
                "{kind:?}"
            );
        }
    }

    #[test]
    fn deleting_a_topic_with_consume_queue_writes_in_flight_is_safe() {
        let mut store = two_topics(43);
        for i in 3..6 {
            store
                .append(&message(format!("old-{i}").as_bytes()), 2_010)
                .unwrap();
        }
        // Submit the queue's write-behind, then delete before it completes.
        let mut acks = Vec::new();
        store.poll(2_200, &mut acks).unwrap();
        assert_eq!(store.delete_topic("T").unwrap(), 1);
        assert!(
            !store.consume_queues().is_idle(),
            "the deleted queue's write is still in flight"
        );
        store.append(&message(b"new-0"), 2_210).unwrap();
        run_until(&mut store, 2_210, 4_000);
        assert!(store.consume_queues().is_idle());
        assert_eq!(bodies(&mut store, "T", 0), [b"new-0".to_vec()]);
        let disk = store.shutdown(4_000, &mut acks).unwrap();
        let (mut store, _) = Store::open(disk, config(FlushMode::Async), 5_000).unwrap();
        assert_eq!(bodies(&mut store, "T", 0), [b"new-0".to_vec()]);
        assert_eq!(
            bodies(&mut store, "U", 1),
            [b"u-0".to_vec(), b"u-1".to_vec()]
        );
    }
}
