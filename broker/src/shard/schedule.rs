//! Delivery of delayed messages (`SCHEDULE_TOPIC_XXXX`) on the shard that
//! owns each level's queue, driving [`DelayScheduler`] (the logic is in
//! [`crate::features::delay`]).
//!
//! ```text
//!  send DELAY=n ─ route_put ─▶ SCHEDULE_TOPIC_XXXX queue n-1 (owner (n-1) % N), answered SEND_OK
//!  every turn on the owner, for each owned level whose time has come:
//!    ConsumeQueue entries from read_from ─ read record ─ due time = store time + delay(n)
//!    ─ DelayScheduler::poll ─▶ due ─ restore_from_schedule ─▶ internal SEND_MESSAGE (direct mark)
//!    ─ dispatch (forwarded to the real queue's owner) ─ append ─ ack ─▶ answer to INTERNAL_CONN
//!    ─ DelayScheduler::ack ─▶ durable offset ─ every DELAY_OFFSET_PERSIST_INTERVAL_MS and at
//!    shutdown ─▶ DelayOffsetBoard (all shards' levels) ─▶ config/delayOffset.json
//! ```
//!
//! The store computes a ConsumeQueue entry's `tagsCode` from the tag for
//! every topic, so the due time is computed here from the record's store
//! timestamp (the value Java stores as the schedule entry's `tagsCode`). A
//! level's entries are due in queue order, so only the head of a level is
//! read before it is due, once per due time.
//!
//! Crash behaviour: the persisted offset of a level only passes entries
//! whose re-delivered message the store acknowledged (ASYNC_FLUSH: written
//! to the kernel, which survives a process kill). After a restart or
//! `kill -9`, delivery resumes at the persisted offset: entries delivered
//! after the last persist (at most [`DELAY_OFFSET_PERSIST_INTERVAL_MS`]
//! worth) are delivered again (at-least-once, as Java's
//! `flushDelayOffsetInterval` allows), and none is skipped or early.
//!
//! # Invariants
//! - A shard only delivers levels whose queue it owns
//!   (`(level - 1) % shard_count == id`), and only acks offsets the
//!   scheduler handed out (an answer for an offset rewound by a failure is
//!   ignored; the entry is delivered again).
//! - The published offset table holds, for every level, the value of the
//!   shard that owns it; the file is written while the board is locked, so
//!   a later write never carries older offsets of another shard.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::header::{CustomHeader, SendMessageRequestHeader};
use ringmq_protocol::json::DelayOffsetFile;
use ringmq_protocol::message::{CrcCheck, decode_record};

use super::ShardHandler;
use super::link::{ReplyTo, Request};
use super::pull::{SystemQueueRead, pull_system_queue, system_queue_record};
use crate::features::delay::{
    self, DELIVERIES_PER_POLL_MAX, DelayLevels, DelayScheduler, IDLE_RECHECK_MS,
};
use crate::features::{QueueEntry, Repost};
use crate::persist::{ConfigFile, PersisterHandle};
use crate::server::ConnectionId;
use crate::topic_config::{AUTO_CREATE_TOPIC_KEY_TOPIC, SCHEDULE_TOPIC};

/// The connection an internal send is answered on: never a client's (a
/// server's ids carry its shard in the top byte, and no shard has id 255
/// with this serial and key).
pub(crate) const INTERNAL_CONN: ConnectionId = ConnectionId(u64::MAX);
/// How often a shard publishes changed delay offsets (Java's
/// `flushDelayOffsetInterval` is 10 s; shorter means fewer duplicates
/// after a crash).
pub const DELAY_OFFSET_PERSIST_INTERVAL_MS: i64 = 1_000;
/// How long a level waits after a failed re-delivery before trying again.
pub const DELIVERY_RETRY_BACKOFF_MS: i64 = 1_000;
/// Producer group of internal deliveries (Java's is the broker's inner
/// producer; clients never see it).
pub const SCHEDULE_PRODUCER_GROUP: &str = "SCHEDULE_PRODUCER_GROUP";

/// The delay offsets of every level, merged over the shards that own them.
#[derive(Debug, Clone, Default)]
pub struct DelayOffsetBoard {
    table: Arc<Mutex<DelayOffsetFile>>,
}

impl DelayOffsetBoard {
    /// A board starting from the loaded file (or empty).
    pub fn new(file: DelayOffsetFile) -> Self {
        DelayOffsetBoard {
            table: Arc::new(Mutex::new(file)),
        }
    }

    /// The current table.
    pub fn snapshot(&self) -> DelayOffsetFile {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the offsets of `levels` and hands the whole table to the
    /// persister, under the board's lock (see the module invariants).
    pub fn publish(&self, levels: &[(i32, i64)], persister: &PersisterHandle) {
        self.publish_with(levels, |content| {
            persister.write(ConfigFile::DelayOffsets, content);
        });
    }

    /// Replaces the whole table with `file` and hands it to the persister,
    /// when it differs (a slave taking its master's progress); whether it
    /// did.
    pub fn replace(&self, file: &DelayOffsetFile, persister: &PersisterHandle) -> bool {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if *table == *file {
            return false;
        }
        *table = file.clone();
        let mut content = Vec::new();
        table.write_pretty(&mut content);
        persister.write(ConfigFile::DelayOffsets, content);
        true
    }

    /// Replaces the offsets of `levels` and calls `write` with the whole
    /// table as `delayOffset.json` content, under the board's lock.
    pub fn publish_with(&self, levels: &[(i32, i64)], write: impl FnOnce(Vec<u8>)) {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        for (level, offset) in levels {
            table.offset_table.insert(*level, *offset);
        }
        let mut content = Vec::new();
        table.write_pretty(&mut content);
        write(content);
    }
}

/// One shard's delay-level delivery state.
#[derive(Debug)]
pub(crate) struct DelayState {
    scheduler: DelayScheduler,
    /// Levels this shard delivers.
    owned: Vec<i32>,
    /// When each level (index = level - 1) is looked at next.
    next_poll_ms: Vec<i64>,
    /// Per level: where its background read of due records stands.
    reads: Vec<SystemQueueRead>,
    /// Internal sends in flight: token (the opaque) → (level, offset).
    in_flight: HashMap<i32, (i32, i64)>,
    next_token: i32,
    board: Option<DelayOffsetBoard>,
    /// Durable offsets last published, per owned level (same order).
    published: Vec<i64>,
    last_publish_ms: i64,
}

impl DelayState {
    /// State for shard `id` of `shard_count` over `levels`, resuming `file`.
    pub(crate) fn new(
        id: u16,
        shard_count: u16,
        levels: DelayLevels,
        file: &DelayOffsetFile,
        board: Option<DelayOffsetBoard>,
    ) -> Self {
        assert!(shard_count > 0, "no shards");
        let owned: Vec<i32> = (1..=levels.max_level())
            .filter(|level| {
                let queue = delay::queue_id_of_level(*level) as u32;
                queue % u32::from(shard_count) == u32::from(id)
            })
            .collect();
        let scheduler = DelayScheduler::from_offset_file(levels, file);
        let published = owned
            .iter()
            .map(|level| scheduler.durable_offset(*level).unwrap_or(0))
            .collect();
        let count = scheduler.levels().max_level() as usize;
        DelayState {
            scheduler,
            owned,
            next_poll_ms: vec![0; count],
            reads: vec![SystemQueueRead::Idle; count],
            in_flight: HashMap::new(),
            next_token: 0,
            board,
            published,
            last_publish_ms: 0,
        }
    }

    /// The ladder (for the put path).
    pub(crate) fn levels(&self) -> &DelayLevels {
        self.scheduler.levels()
    }

    /// Whether a level waits for a background read.
    pub(crate) fn is_reading(&self) -> bool {
        self.reads.iter().any(|read| read.is_waiting())
    }

    /// The store's background read `ticket` is done: the levels waiting for
    /// it are polled again at once.
    pub(crate) fn on_read_done(&mut self, ticket: u64) {
        for (index, read) in self.reads.iter_mut().enumerate() {
            // Levels whose records lie in one window share its read.
            if read.on_read_done(ticket) {
                self.next_poll_ms[index] = 0;
            }
        }
    }

    /// The earliest time an owned level wants to be looked at.
    fn next_due_ms(&self) -> Option<i64> {
        self.owned
            .iter()
            .map(|level| self.next_poll_ms[(*level - 1) as usize])
            .min()
    }
}

/// A read schedule entry: its queue entry (tags code = due time) and record.
struct ReadEntry {
    entry: QueueEntry,
    record: Option<Vec<u8>>,
}

/// An internal SEND_MESSAGE storing `repost` (made from `source`) as is,
/// answered to `reply`.
pub(crate) fn internal_send(
    repost: &Repost,
    source: &ringmq_protocol::message::RecordView<'_>,
    answer_queue_id: i32,
    reply: ReplyTo,
) -> Request {
    let header = SendMessageRequestHeader {
        producer_group: SCHEDULE_PRODUCER_GROUP.to_owned(),
        topic: repost.topic.clone(),
        default_topic: AUTO_CREATE_TOPIC_KEY_TOPIC.to_owned(),
        default_topic_queue_nums: 1,
        queue_id: repost.queue_id,
        sys_flag: repost.sys_flag,
        born_timestamp: source.born_timestamp_ms(),
        flag: source.flag(),
        properties: Some(String::from_utf8_lossy(&repost.properties).into_owned()),
        reconsume_times: Some(repost.reconsume_times),
        unit_mode: None,
        batch: None,
        max_reconsume_times: None,
        broker_name: None,
    };
    let mut ext = ExtFields::new();
    header.to_ext(&mut ext);
    ext.insert(super::send::DIRECT_MARK, &answer_queue_id.to_string());
    let mut cmd = RemotingCommand::new_request(request_code::SEND_MESSAGE, ext);
    cmd.body = Some(Bytes::copy_from_slice(source.body()));
    cmd.opaque = reply.opaque;
    Request {
        cmd,
        reply,
        peer: source.born_host(),
    }
}

impl ShardHandler {
    /// Installs the ladder, the loaded progress and the shared board
    /// (at start-up, before the server runs).
    pub fn install_delay(
        &mut self,
        levels: DelayLevels,
        file: &DelayOffsetFile,
        board: Option<DelayOffsetBoard>,
    ) {
        self.delay = DelayState::new(self.id, self.settings.shard_count, levels, file, board);
    }

    /// Delivers the due entries of every owned level (called every turn).
    pub(crate) fn run_delay(&mut self, now_ms: i64) {
        // A slave delivers nothing: its master's deliveries are replicated.
        if self.store.is_none() || self.stopping || !self.settings.is_master {
            return;
        }
        for index in 0..self.delay.owned.len() {
            let level = self.delay.owned[index];
            if self.delay.next_poll_ms[(level - 1) as usize] <= now_ms {
                self.poll_level(level, now_ms);
            }
        }
        self.publish_delay_offsets(now_ms, false);
    }

    /// How long the shard may sleep before a level is due.
    pub(crate) fn delay_wait_bound(&self, now_ms: i64) -> Option<Duration> {
        if !self.settings.is_master {
            return None;
        }
        let due = self.delay.next_due_ms()?;
        Some(Duration::from_millis(
            due.saturating_sub(now_ms).max(0) as u64
        ))
    }

    fn poll_level(&mut self, level: i32, now_ms: i64) {
        let queue_id = delay::queue_id_of_level(level) as u32;
        let Some(delay_ms) = self.delay.scheduler.levels().delay_ms(level) else {
            return;
        };
        let mut read_from = self.delay.scheduler.read_from(level).unwrap_or(0);
        let store = self.store.as_mut().expect("checked by run_delay");
        let min = store.queue_min_offset(SCHEDULE_TOPIC, queue_id) as i64;
        let max = store.queue_max_offset(SCHEDULE_TOPIC, queue_id) as i64;
        if read_from < min {
            tracing::warn!(
                level,
                read_from,
                min,
                "delay level behind its queue: skipping ahead"
            );
            let _ = self.delay.scheduler.reset_level(level, min);
            read_from = min;
        }
        if read_from >= max {
            self.delay.next_poll_ms[(level - 1) as usize] = now_ms + IDLE_RECHECK_MS;
            return;
        }
        let count = ((max - read_from) as usize).min(DELIVERIES_PER_POLL_MAX + 1);
        let cq_entries = store
            .consume_queues()
            .get(SCHEDULE_TOPIC, queue_id)
            .map(|queue| queue.entries(read_from as u64, count))
            .unwrap_or_default();
        // The records as a pull reads them: from memory, or (older than the
        // tail cache, as after a long delay) read in the background with
        // their neighbours while the level waits; records further on that
        // are not in memory are left to the next poll.
        let index = (level - 1) as usize;
        let read_state = &mut self.delay.reads[index];
        let Ok(pulled) = pull_system_queue(
            store,
            SCHEDULE_TOPIC,
            queue_id,
            read_from,
            count,
            read_state,
        ) else {
            self.delay.next_poll_ms[index] = i64::MAX;
            return;
        };
        let levels = self.delay.scheduler.levels().clone();
        let mut read = Vec::with_capacity(cq_entries.len());
        for (i, cq) in cq_entries.iter().enumerate() {
            let queue_offset = read_from + i as i64;
            // None: not in memory, read next time; Some(None): the log no
            // longer holds it (dropped below).
            let Some(record) = system_queue_record(store, pulled.as_ref(), i, read_from, cq) else {
                break;
            };
            let due_ms = record
                .as_deref()
                .and_then(|bytes| decode_record(bytes, CrcCheck::Skip).ok())
                .map(|view| {
                    delay::schedule_tags_code(
                        &levels,
                        SCHEDULE_TOPIC,
                        view.properties(),
                        view.store_timestamp_ms(),
                    )
                    .unwrap_or_else(|| view.store_timestamp_ms().saturating_add(delay_ms))
                })
                // Unreadable: due now, and dropped below.
                .unwrap_or(0);
            read.push(ReadEntry {
                entry: QueueEntry {
                    queue_offset,
                    commit_log_offset: cq.commit_log_offset as i64,
                    size: cq.size as i32,
                    tags_code: due_ms,
                },
                record,
            });
            if due_ms > now_ms {
                break;
            }
        }
        let entries: Vec<QueueEntry> = read.iter().map(|r| r.entry).collect();
        let poll = match self.delay.scheduler.poll(level, &entries, now_ms) {
            Ok(poll) => poll,
            Err(error) => {
                tracing::error!(%error, level, "delay level poll failed");
                self.delay.next_poll_ms[(level - 1) as usize] = now_ms + DELIVERY_RETRY_BACKOFF_MS;
                return;
            }
        };
        self.delay.next_poll_ms[(level - 1) as usize] = poll.next_poll_ms;
        for due in &poll.due {
            let Some(read) = read
                .iter()
                .find(|r| r.entry.queue_offset == due.queue_offset)
            else {
                continue;
            };
            self.deliver_due(level, due.queue_offset, read.record.as_deref(), now_ms);
        }
    }

    fn deliver_due(&mut self, level: i32, queue_offset: i64, record: Option<&[u8]>, now_ms: i64) {
        let view = record.and_then(|bytes| decode_record(bytes, CrcCheck::Skip).ok());
        let Some(view) = view else {
            tracing::warn!(level, queue_offset, "unreadable schedule record dropped");
            let _ = self.delay.scheduler.ack(level, queue_offset);
            return;
        };
        let repost = match delay::restore_from_schedule(&view) {
            Ok(repost) => repost,
            Err(error) => {
                tracing::warn!(%error, level, queue_offset, "schedule record dropped");
                let _ = self.delay.scheduler.ack(level, queue_offset);
                return;
            }
        };
        let token = self.next_internal_token();
        self.delay.in_flight.insert(token, (level, queue_offset));
        self.dispatch_internal_send(token, &repost, &view, now_ms);
    }

    /// Dispatches `repost` of `view` as an internal send whose answer comes
    /// back to this shard's [`INTERNAL_CONN`] under `token`.
    pub(crate) fn dispatch_internal_send(
        &mut self,
        token: i32,
        repost: &Repost,
        view: &ringmq_protocol::message::RecordView<'_>,
        now_ms: i64,
    ) {
        let reply = ReplyTo {
            shard: self.id,
            conn: INTERNAL_CONN,
            opaque: token,
            oneway: false,
        };
        let request = internal_send(repost, view, repost.queue_id, reply);
        self.dispatch(Box::new(request), now_ms);
    }

    /// A fresh opaque for an internal send answered to [`INTERNAL_CONN`]
    /// (delayed and timer deliveries share the space).
    pub(crate) fn next_internal_token(&mut self) -> i32 {
        self.delay.next_token = self.delay.next_token.wrapping_add(1);
        self.delay.next_token
    }

    /// The answer to an internal send (from this shard or another).
    pub(crate) fn on_internal_answer(&mut self, cmd: RemotingCommand, now_ms: i64) {
        let Some(cmd) = self.on_timer_answer(cmd) else {
            return;
        };
        let Some((level, queue_offset)) = self.delay.in_flight.remove(&cmd.opaque) else {
            tracing::debug!(opaque = cmd.opaque, "an internal answer nobody waits for");
            return;
        };
        if queue_offset >= self.delay.scheduler.read_from(level).unwrap_or(0) {
            // Rewound by an earlier failure: it is handed out again.
            return;
        }
        match cmd.code {
            response_code::SUCCESS | response_code::FLUSH_DISK_TIMEOUT => {
                let _ = self.delay.scheduler.ack(level, queue_offset);
            }
            response_code::TOPIC_NOT_EXIST
            | response_code::NO_PERMISSION
            | response_code::MESSAGE_ILLEGAL
            | response_code::SUBSCRIPTION_GROUP_NOT_EXIST => {
                tracing::warn!(
                    level,
                    queue_offset,
                    code = cmd.code,
                    remark = ?cmd.remark,
                    "a due delayed message was refused by its real queue: dropped"
                );
                let _ = self.delay.scheduler.ack(level, queue_offset);
            }
            code => {
                tracing::warn!(level, queue_offset, code, remark = ?cmd.remark,
                    "re-delivering a delayed message failed: retrying");
                let _ = self.delay.scheduler.retry_from(level, queue_offset);
                let next = &mut self.delay.next_poll_ms[(level - 1) as usize];
                *next = (*next).max(now_ms + DELIVERY_RETRY_BACKOFF_MS);
            }
        }
    }

    /// Every level's delivery progress as published (what
    /// `delayOffset.json` holds, or is about to).
    pub(crate) fn delay_offsets(&self) -> DelayOffsetFile {
        match &self.delay.board {
            Some(board) => board.snapshot(),
            None => self.delay.scheduler.offset_file(),
        }
    }

    /// GET_ALL_DELAY_OFFSET: [`Self::delay_offsets`] as `delayOffset.json`.
    pub(crate) fn all_delay_offsets(&mut self, request: &Request) {
        let mut body = Vec::new();
        self.delay_offsets().write_pretty(&mut body);
        let answer = RemotingCommand::new_response(response_code::SUCCESS, 0, None)
            .with_body(Bytes::from(body));
        self.reply(request.reply, answer);
    }

    /// Slave: takes the master's delivery progress of every level (written
    /// to `delayOffset.json`, which the broker resumes from if it is
    /// restarted as a master). A slave delivers nothing, so its own
    /// schedulers never publish over it.
    pub(crate) fn take_master_delay_offsets(&mut self, file: &DelayOffsetFile) {
        let (Some(board), Some(persister)) = (&self.delay.board, &self.persister) else {
            return;
        };
        if board.replace(file, persister) {
            tracing::debug!(
                shard = self.id,
                levels = file.offset_table.len(),
                "took the master's delay offsets"
            );
        }
    }

    /// Publishes this shard's durable offsets when they changed and the
    /// interval passed (or at once with `force`).
    pub(crate) fn publish_delay_offsets(&mut self, now_ms: i64, force: bool) {
        if force {
            // Shutdown: the timer wheel's progress too.
            self.write_timer_progress(now_ms, true);
        }
        if !force && now_ms - self.delay.last_publish_ms < DELAY_OFFSET_PERSIST_INTERVAL_MS {
            return;
        }
        let (Some(board), Some(persister)) = (&self.delay.board, &self.persister) else {
            return;
        };
        let current: Vec<i64> = self
            .delay
            .owned
            .iter()
            .map(|level| self.delay.scheduler.durable_offset(*level).unwrap_or(0))
            .collect();
        self.delay.last_publish_ms = now_ms;
        // Unchanged: nothing to write, at the shutdown either (a failed
        // earlier write is still the persister's to retry).
        if current == self.delay.published {
            return;
        }
        let levels: Vec<(i32, i64)> = self
            .delay
            .owned
            .iter()
            .copied()
            .zip(current.iter().copied())
            .collect();
        board.publish(&levels, persister);
        self.delay.published = current;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_is_owned_by_the_shard_of_its_queue() {
        let file = DelayOffsetFile::default();
        let shard0 = DelayState::new(0, 4, DelayLevels::default(), &file, None);
        let shard3 = DelayState::new(3, 4, DelayLevels::default(), &file, None);
        assert_eq!(shard0.owned, vec![1, 5, 9, 13, 17]);
        assert_eq!(shard3.owned, vec![4, 8, 12, 16]);
        let single = DelayState::new(0, 1, DelayLevels::default(), &file, None);
        assert_eq!(single.owned.len(), 18);
    }

    #[test]
    fn a_resumed_state_starts_at_the_loaded_offsets() {
        let mut file = DelayOffsetFile::default();
        file.offset_table.insert(2, 7);
        let state = DelayState::new(1, 2, DelayLevels::default(), &file, None);
        assert_eq!(state.scheduler.read_from(2).unwrap(), 7);
        assert_eq!(state.published[0], 7);
        assert_eq!(state.next_due_ms(), Some(0));
    }

    #[test]
    fn the_board_merges_levels_of_several_shards() {
        let board = DelayOffsetBoard::new(DelayOffsetFile::default());
        board.publish_with(&[(1, 3), (3, 4)], |_| {});
        let mut written = Vec::new();
        board.publish_with(&[(2, 9), (3, 5)], |content| written = content);
        let file = DelayOffsetFile::from_json(&written).unwrap();
        assert_eq!(
            file.offset_table.into_iter().collect::<Vec<_>>(),
            vec![(1, 3), (2, 9), (3, 5)]
        );
        assert_eq!(board.snapshot().offset_table.len(), 3);
    }
}
