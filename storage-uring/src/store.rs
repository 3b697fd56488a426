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
//! checkpoint's confirmed offset and durable points (the end of the log at
//! the stop, so the scan reads next to nothing), or, for a checkpoint
//! without durable points, from the smallest of the confirmed offset, the
//! least advanced queue's last entry and the newest indexed record; after
//! an abnormal stop (abort file present) the
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
//! clean-forcibly ratio, a plan picks expired segments (looked for at each
//! disk-space check and after each CommitLog roll-over); they go one per turn,
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

use ringmq_protocol::message::layout::is_dispatched_to_consume_queue;
use ringmq_protocol::message::properties::{NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};
use ringmq_protocol::message::property_key::{KEYS, TAGS, UNIQ_KEY};
use ringmq_protocol::message::{RecordSpec, tags_code};

use crate::checkpoint::{self, Checkpoint, DurablePoints, ShardFiles};
use crate::commit_log::appender::FlushMode;
use crate::commit_log::{self, CommitLog, shard_offset, split_shard_offset};
use crate::consume_queue::{ConsumeQueueSet, CqEntry};
use crate::disk::{Disk, DiskCompletion, DiskOp, FileId, OpId, OpTag, Wait};
use crate::error::StorageError;
use crate::index_file::{IndexDurablePoint, IndexRecord, IndexService};
use crate::limits::{
    CHECKPOINT_FILE_SIZE, COMPLETIONS_PER_TURN_MAX, DISK_SPACE_CHECK_INTERVAL_MS,
    MESSAGE_SIZE_MAX_BYTES, SHUTDOWN_DERIVED_FAILED_ROUNDS_MAX, SHUTDOWN_IDLE_POLL_ROUNDS_MAX,
};

mod cleaning;
mod config;
mod lookup;
mod recover;
mod replica;
mod types;

pub use cleaning::RetentionStats;
pub use config::StoreConfig;
pub use types::{
    AckStatus, AppendAck, AppendMessage, AppendTicket, FoundRecord, GetMessageStatus,
    GetMessagesResult, OpenReport, PullRead, Pulled, RecordRead,
};

pub use crate::commit_log::appender::FlushMode as StoreFlushMode;

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
    /// The active CommitLog segment when retention last ran.
    retention_planned_base: u64,
    /// An operator asked for expired segments to go now
    /// ([`Store::delete_expired_now`]): the next plan ignores deleteWhen.
    manual_retention: bool,
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

/// The files `Store::open` recovered, handed to `Store::assemble`.
struct OpenedParts {
    files: ShardFiles,
    commit_log: CommitLog,
    queues: ConsumeQueueSet,
    index: IndexService,
    checkpoint_file: FileId,
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
        let (checkpoint_file, stored) =
            recover::read_checkpoint(&mut disk, &files, config.shard_id)?;
        let confirm_local = stored.map_or(0, |c| split_shard_offset(c.confirm_offset as u64).1);
        let durable_points = stored.and_then(|c| c.durable);
        let mut derived =
            recover::open_derived(&mut disk, &config, abnormal, durable_points, confirm_local)?;
        // Below the queues' durable point every queue that held a record
        // was synced past it, so a record whose queue is missing there is of
        // a deleted topic (after a clean stop the point is the end).
        let existing_queues_below = durable_points.map(|p| recover::split_points(p).0);
        let mut dispatcher = recover::Dispatcher {
            queues: &mut derived.queues,
            index: &mut derived.index,
            shard_id: config.shard_id,
            now_ms,
            strict_from: derived.strict_from,
            existing_queues_below,
            error: None,
            inconsistent: None,
            redispatched: 0,
        };
        let dispatch = derived.rebuild.scan_dispatches();
        let (mut commit_log, recovery) = CommitLog::open(
            &mut disk,
            config.commit_log_config(),
            derived.scan_from,
            confirm_local,
            abnormal,
            now_ms,
            &mut |local, view| {
                if dispatch {
                    dispatcher.visit(local, view);
                }
            },
        )?;
        let scanned = recover::Scanned {
            end: shard_offset(config.shard_id, recovery.scan.end),
            redispatched: dispatcher.redispatched,
            inconsistent: dispatcher.inconsistent.take(),
        };
        if let Some(error) = dispatcher.error.take() {
            return Err(error);
        }
        let (mut queues, mut index, redispatched, rebuilt) = recover::reconcile_derived(
            &mut disk,
            &config,
            &mut commit_log,
            derived,
            scanned,
            now_ms,
        )?;
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
        let parts = OpenedParts {
            files,
            commit_log,
            queues,
            index,
            checkpoint_file,
        };
        let mut store = Store::assemble(disk, config, parts, now_ms);
        if abnormal {
            store.write_checkpoint_sync()?;
        }
        Ok((store, report))
    }

    /// The store over what `open` recovered, with nothing in flight.
    fn assemble(disk: D, config: StoreConfig, parts: OpenedParts, now_ms: u64) -> Store<D> {
        Store {
            disk,
            config,
            files: parts.files,
            commit_log: parts.commit_log,
            queues: parts.queues,
            index: parts.index,
            checkpoint_file: parts.checkpoint_file,
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
            retention_planned_base: 0,
            manual_retention: false,
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
        }
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

    /// CLEAN_UNUSED_TOPIC (RocketMQ's `cleanUnusedTopic`): deletes, as
    /// [`Store::delete_topic`] does, the queues of every topic `keep`
    /// refuses. Returns those topics (sorted), and the first disk error.
    pub fn delete_topics_not_kept(
        &mut self,
        keep: impl Fn(&str) -> bool,
    ) -> (Vec<String>, Option<StorageError>) {
        let unused: std::collections::BTreeSet<String> = self
            .queues
            .iter()
            .map(|queue| queue.topic())
            .filter(|topic| !keep(topic))
            .map(str::to_owned)
            .collect();
        let mut first_error = None;
        for topic in &unused {
            if let Err(error) = self.delete_topic(topic) {
                first_error.get_or_insert(error);
            }
        }
        (unused.into_iter().collect(), first_error)
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
        self.check_disk_space()?;
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

    /// Refuses appends while the disk is nearly full.
    ///
    /// # Errors
    /// [`StorageError::DiskFull`].
    fn check_disk_space(&self) -> Result<(), StorageError> {
        match self.disk_full {
            Some(used_ratio) => Err(StorageError::DiskFull { used_ratio }),
            None => Ok(()),
        }
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
        self.index
            .flush_early(&mut self.disk, self.config.index_flush_early_bytes)?;
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
            // One line a flush interval, however many queues failed (a
            // full disk fails every queue with something to write).
            let errors = self.queues.take_errors();
            if let Some(first) = errors.first() {
                tracing::warn!(errors = errors.len(), %first, "consume queue flushes failed; they are retried");
            }
            // A durability round starts before the flush, so it completes
            // with this flush's fdatasyncs (see `current_checkpoint`).
            self.advance_durable_points();
            self.queues.flush_all(&mut self.disk)?;
            let errors = self.index.take_errors();
            if let Some(first) = errors.first() {
                tracing::warn!(errors = errors.len(), %first, "index file flushes failed; they are retried");
            }
            self.index.flush(&mut self.disk)?;
        } else if self.queues.flush_pass_in_progress() {
            self.queues.continue_flush(&mut self.disk)?;
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
        let space_checked =
            now_ms.saturating_sub(self.last_space_check_ms) >= DISK_SPACE_CHECK_INTERVAL_MS;
        if space_checked {
            self.last_space_check_ms = now_ms;
            self.check_space();
        }
        // Retention plans at a space check and after a roll-over, which is
        // when a segment can become removable without the clock moving on:
        // planning only once a second, a log rolling three segments a second
        // retired them in bursts, the spare pool overflowed (the extra ones
        // unlinked) and then ran dry, and every third segment or so was a
        // new file that appends wrote at half speed (docs/BENCHMARKS.md,
        // eighteenth session).
        let active_base = self.commit_log.appender().active_segment_base();
        if space_checked || active_base != self.retention_planned_base {
            // A disk above the clean-forcibly ratio is cleaned at once, not
            // at the next regular run.
            let urgent = self.disk_usage_ratio > self.config.retention.clean_forcibly_ratio();
            if urgent
                || now_ms.saturating_sub(self.last_retention_ms)
                    >= self.config.clean_resource_interval_ms
            {
                self.last_retention_ms = now_ms;
                self.retention_planned_base = active_base;
                self.plan_retention(now_ms);
            }
        }
        self.run_retention_step(now_ms)?;
        Ok(())
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

    /// Flushes everything, writes the checkpoint, removes the abort file and
    /// closes the files; returns the disk. Acks that become due are appended
    /// to `acks`. ConsumeQueue or index writes that fail in
    /// [`SHUTDOWN_DERIVED_FAILED_ROUNDS_MAX`] rounds (a full disk) are given
    /// up: the abort file stays and the next start recovers them from the
    /// CommitLog.
    ///
    /// # Errors
    /// Disk errors; [`StorageError::FlushTimeout`] if the disk completes
    /// nothing for [`SHUTDOWN_IDLE_POLL_ROUNDS_MAX`] rounds of 100 ms in a
    /// row.
    pub fn shutdown(mut self, now_ms: u64, acks: &mut Vec<AppendAck>) -> Result<D, StorageError> {
        let mut idle_rounds = 0;
        // ConsumeQueue and index writes that failed in this many rounds (a
        // full disk fails them every time, and each failure is a completion,
        // so the idle bound never ends the loop) are left to the next start.
        let mut failed_rounds = 0;
        let mut derived_failure: Option<StorageError> = None;
        loop {
            self.commit_log.start_flush_now(&mut self.disk)?;
            if derived_failure.is_none() {
                self.queues.flush_all(&mut self.disk)?;
                self.index.flush_everything(&mut self.disk)?;
            }
            let log_done = self.commit_log.appender().is_idle()
                || self.commit_log.appender().failure().is_some();
            let derived_done = derived_failure.is_some()
                || (self.queues.is_idle()
                    && self.queues.is_clean()
                    && self.index.is_idle()
                    && self.index.is_clean());
            if log_done && derived_done && !self.checkpoint_in_flight && self.disk.in_flight() == 0
            {
                break;
            }
            if idle_rounds == SHUTDOWN_IDLE_POLL_ROUNDS_MAX / 10 {
                tracing::warn!(
                    log_done,
                    queues_idle = self.queues.is_idle(),
                    queues_clean = self.queues.is_clean(),
                    index_idle = self.index.is_idle(),
                    index_clean = self.index.is_clean(),
                    checkpoint_in_flight = self.checkpoint_in_flight,
                    in_flight = self.disk.in_flight(),
                    "shutdown makes no progress"
                );
            }
            if idle_rounds >= SHUTDOWN_IDLE_POLL_ROUNDS_MAX {
                return Err(StorageError::FlushTimeout {
                    timeout_ms: u64::from(idle_rounds) * 100,
                });
            }
            let mut completions = std::mem::take(&mut self.completions);
            self.commit_log.take_stash(&mut completions);
            self.disk.poll(
                &mut completions,
                COMPLETIONS_PER_TURN_MAX,
                Wait::AtLeastOne(std::time::Duration::from_millis(100)),
            )?;
            idle_rounds = if completions.is_empty() {
                idle_rounds + 1
            } else {
                0
            };
            for completion in completions.drain(..) {
                self.route(completion);
            }
            self.completions = completions;
            self.collect_acks(now_ms, acks);
            let failed = self
                .queues
                .take_errors()
                .into_iter()
                .chain(self.index.take_errors())
                .next();
            if let Some(error) = failed
                && derived_failure.is_none()
            {
                failed_rounds += 1;
                if failed_rounds >= SHUTDOWN_DERIVED_FAILED_ROUNDS_MAX {
                    derived_failure = Some(error);
                }
            }
        }
        self.collect_acks(now_ms, acks);
        if let Some(reason) = self.commit_log.appender().failure() {
            // Keep the abort file: the next start must recover the tail.
            tracing::error!(
                reason,
                "shutdown after a commit log failure; recovery will run at the next start"
            );
        } else if let Some(error) = derived_failure {
            // The checkpoint on disk holds the queues' and the index's
            // durable points; with the abort file kept, the next start
            // rebuilds what lies beyond them from the CommitLog.
            tracing::error!(
                %error,
                "consume queue or index files could not be written at shutdown; \
                 recovery will rebuild them from the commit log at the next start"
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
    /// value that is not UTF-8 reads as absent. A pair is one of the three
    /// exactly when it starts with the key and 0x01 (no key holds a 0x01),
    /// so only the pair separators are searched for, eight bytes at a time:
    /// byte by byte, that scan was 10 % of an appending thread with a Java
    /// producer's properties.
    fn find(properties: &'a [u8]) -> Self {
        let mut found = DispatchProperties::default();
        let mut start = 0;
        let ends = BytePositions::new(properties, PROPERTY_SEPARATOR)
            .chain(std::iter::once(properties.len()));
        for end in ends {
            let pair = &properties[start..end];
            start = end + 1;
            let (key, value) = match pair.first() {
                Some(b'T') => (TAGS, &mut found.tags),
                Some(b'K') => (KEYS, &mut found.keys),
                Some(b'U') => (UNIQ_KEY, &mut found.uniq_key),
                _ => continue,
            };
            if let Some(bytes) = pair
                .strip_prefix(key.as_bytes())
                .and_then(|rest| rest.strip_prefix(&[NAME_VALUE_SEPARATOR]))
                .filter(|bytes| !bytes.is_empty())
            {
                *value = std::str::from_utf8(bytes).ok();
            }
        }
        found
    }
}

/// The positions of one byte value in a byte string, in order, found eight
/// bytes at a time.
struct BytePositions<'a> {
    bytes: &'a [u8],
    needle: u8,
    /// Position of the word `mask` describes.
    word_at: usize,
    /// High bit of each byte of the word that equals `needle`, not yet
    /// returned.
    mask: u64,
}

impl<'a> BytePositions<'a> {
    fn new(bytes: &'a [u8], needle: u8) -> Self {
        let mut positions = BytePositions {
            bytes,
            needle,
            word_at: 0,
            mask: 0,
        };
        positions.mask = positions.matches_at(0);
        positions
    }

    /// The match mask of the (up to) eight bytes at `at`; bytes past the
    /// end never match.
    fn matches_at(&self, at: usize) -> u64 {
        const LOW_SEVEN: u64 = 0x7F7F_7F7F_7F7F_7F7F;
        let Some(rest) = self.bytes.get(at..) else {
            return 0;
        };
        let word = match rest.first_chunk::<8>() {
            Some(word) => *word,
            None => {
                // The tail, padded with bytes that do not match (a copy,
                // then a load of it: only here, as the load waits for the
                // copy's stores).
                let mut word = [!self.needle; 8];
                word[..rest.len()].copy_from_slice(rest);
                word
            }
        };
        // Zero bytes of `x` are the needle; a byte's high bit ends up set
        // exactly when the byte is zero (no carry crosses bytes).
        let x = u64::from_le_bytes(word) ^ u64::from_ne_bytes([self.needle; 8]);
        !(((x & LOW_SEVEN) + LOW_SEVEN) | x | LOW_SEVEN)
    }
}

impl Iterator for BytePositions<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.mask == 0 {
            self.word_at += 8;
            if self.word_at >= self.bytes.len() {
                return None;
            }
            self.mask = self.matches_at(self.word_at);
        }
        let byte = (self.mask.trailing_zeros() / 8) as usize;
        self.mask &= self.mask - 1;
        Some(self.word_at + byte)
    }
}

#[cfg(test)]
mod tests;
