//! RocketMQ 5 timer messages on the shard owning `rmq_sys_wheel_timer`
//! queue 0 (shard 0), driving [`TimerWheel`] (the logic is in
//! [`crate::features::timer`]).
//!
//! ```text
//!  send TIMER_* ─ route_put ─▶ rmq_sys_wheel_timer queue 0 (+ TIMER_OUT_MS, REAL_TOPIC, REAL_QID)
//!  every turn on the owner:
//!    timer queue entries from read_from ─ read record ─ fire time (timer_tags_code) ─▶ enqueue
//!    TimerWheel::poll(now) ─▶ due ─ record (in the background if it left memory)
//!      ─ restore_from_timer ─▶ internal SEND_MESSAGE (direct mark)
//!    ─ answer to INTERNAL_CONN ─▶ ack (stored or dropped) | retry (failed)
//!    durable offset + delivered entries above it ─▶ config/timerProgress.json
//! ```
//!
//! Precision and capacity are the wheel's ([`crate::features::timer`]
//! module doc): 100 ms slots, never early, at most one slot plus the
//! shard's turn late; 1,000,000 entries held. The shard sleeps at most
//! until the wheel's next slot while it holds entries.
//!
//! Durability: the wheel's durable offset (every timer-queue entry below it
//! delivered and stored) and the entries above it that were delivered out
//! of queue order (a +1 s message sent after a +1 h one) are written to
//! `config/timerProgress.json` ([`TimerProgressFile`]) every
//! [`TIMER_PROGRESS_PERSIST_INTERVAL_MS`] and at shutdown; after a restart
//! the wheel is rebuilt by reading the timer queue from the durable offset,
//! leaving out the delivered ones. Entries delivered after the last persist
//! are delivered again (at-least-once), as are delivered entries beyond
//! the first [`TIMER_DELIVERED_PERSIST_MAX`]. Nothing is skipped or
//! delivered early.
//!
//! Not done: the put path's flow control ([`TimerWheel::admits`]) is only
//! checked for sends executed on the wheel's shard (other shards do not
//! know the wheel's size); stale entries are not rolled
//! ([`TimerWheel::stale_entries`]), so a long-dated message holds the
//! replay window open until it fires.
//!
//! # Invariants
//! - Only the owner of timer queue 0 runs a wheel.
//! - An entry is acknowledged to the wheel only once its re-delivery was
//!   answered (stored, or refused for good); a failure puts it back.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use ringmq_protocol::code::response_code;
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::message::{CrcCheck, decode_record};
use ringmq_storage::store::{PullRead, RecordRead};

use super::ShardHandler;
use super::pull::{SystemQueueRead, pull_system_queue, system_queue_record};
use crate::features::QueueEntry;
use crate::features::timer::{self, TIMER_QUEUE_ID, TimerConfig, TimerWheel};
use crate::persist::ConfigFile;
use crate::topic_config::WHEEL_TIMER_TOPIC;

/// How often the wheel's changed progress is written.
pub const TIMER_PROGRESS_PERSIST_INTERVAL_MS: i64 = 1_000;
/// Most delivered-above-the-durable-offset entries the progress file keeps
/// (the lowest ones; the others are delivered again after a restart).
pub const TIMER_DELIVERED_PERSIST_MAX: usize = 50_000;
/// Timer-queue entries read into the wheel per turn at most.
pub const TIMER_ENQUEUE_PER_TURN_MAX: usize = 1024;

/// `config/timerProgress.json`: `{"durableOffset":N,"delivered":[a,b]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimerProgressFile {
    /// Every timer-queue entry below is delivered and stored.
    pub durable_offset: i64,
    /// Entries at or above it that are delivered and stored, ascending.
    pub delivered: Vec<i64>,
}

impl TimerProgressFile {
    /// The file's content.
    pub fn encode(&self) -> Vec<u8> {
        let list: Vec<String> = self.delivered.iter().map(i64::to_string).collect();
        format!(
            "{{\"durableOffset\":{},\"delivered\":[{}]}}",
            self.durable_offset,
            list.join(",")
        )
        .into_bytes()
    }

    /// Parses the file's content; `None` when it is not this format.
    pub fn decode(content: &[u8]) -> Option<TimerProgressFile> {
        let value = ringmq_protocol::json::parse(content).ok()?;
        let object = value.as_object()?;
        let durable_offset = object.get("durableOffset")?.coerce_i64()?;
        let delivered = match object.get("delivered") {
            Some(list) => list
                .as_array()?
                .iter()
                .map(|v| v.coerce_i64())
                .collect::<Option<Vec<i64>>>()?,
            None => Vec::new(),
        };
        Some(TimerProgressFile {
            durable_offset,
            delivered,
        })
    }
}

/// The wheel of the timer queue's owner.
#[derive(Debug)]
pub(crate) struct TimerState {
    wheel: TimerWheel,
    config: TimerConfig,
    /// Re-deliveries in flight: token → entry.
    in_flight: HashMap<i32, QueueEntry>,
    /// Due entries whose records the store is reading in the background:
    /// (ticket, entry), delivered once the read is done.
    reading: Vec<(u64, QueueEntry)>,
    /// How the wheel reads its next new records: waiting for the store's
    /// background read of them (a backlog no longer in memory, as after a
    /// restart), or after it.
    enqueue_read: SystemQueueRead,
    next_poll_ms: i64,
    /// Delivered entries at or above the durable offset.
    delivered: BTreeSet<i64>,
    /// Delivered before the restart: dropped when read into the wheel.
    skip: BTreeSet<i64>,
    /// The progress last written.
    written: TimerProgressFile,
    last_write_ms: i64,
}

impl TimerState {
    /// A wheel resuming from `progress`.
    pub(crate) fn new(config: TimerConfig, progress: TimerProgressFile, now_ms: i64) -> Self {
        let durable = progress.durable_offset.max(0);
        TimerState {
            wheel: TimerWheel::new(config, durable, now_ms),
            config,
            in_flight: HashMap::new(),
            reading: Vec::new(),
            enqueue_read: SystemQueueRead::Idle,
            next_poll_ms: now_ms,
            delivered: progress
                .delivered
                .iter()
                .copied()
                .filter(|o| *o >= durable)
                .collect(),
            skip: progress
                .delivered
                .iter()
                .copied()
                .filter(|o| *o >= durable)
                .collect(),
            written: progress,
            last_write_ms: now_ms,
        }
    }

    fn ack(&mut self, queue_offset: i64) {
        self.wheel.ack(queue_offset);
        self.delivered.insert(queue_offset);
    }

    /// The progress as it stands.
    fn progress(&mut self) -> TimerProgressFile {
        let durable = self.wheel.durable_offset();
        self.delivered = self.delivered.split_off(&durable);
        TimerProgressFile {
            durable_offset: durable,
            delivered: self
                .delivered
                .iter()
                .copied()
                .take(TIMER_DELIVERED_PERSIST_MAX)
                .collect(),
        }
    }
}

impl ShardHandler {
    /// Starts the wheel when this shard owns the timer queue, resuming at
    /// the persisted progress (at start-up, after the offsets are loaded).
    pub fn install_timer(&mut self, config: TimerConfig, progress: TimerProgressFile, now_ms: i64) {
        if self.router.shard_of(TIMER_QUEUE_ID as u32).0 != self.id {
            self.timer = None;
            return;
        }
        self.timer = Some(TimerState::new(config, progress, now_ms));
    }

    /// Whether a timer message may be stored now ([`TimerWheel::admits`];
    /// always on shards without the wheel, where the bound is not known).
    pub(crate) fn timer_admits(&self) -> Result<(), timer::TimerError> {
        match &self.timer {
            Some(state) => state.wheel.admits(),
            None => Ok(()),
        }
    }

    /// Reads new timer entries and delivers the due ones (every turn).
    pub(crate) fn run_timer(&mut self, now_ms: i64) {
        // A slave delivers nothing: its master's deliveries are replicated.
        if self.timer.is_none() || self.store.is_none() || self.stopping || !self.settings.is_master
        {
            return;
        }
        self.enqueue_timer_entries();
        let Some(state) = self.timer.as_mut() else {
            return;
        };
        if state.next_poll_ms > now_ms {
            return;
        }
        let poll = state.wheel.poll(now_ms);
        state.next_poll_ms = poll.next_poll_ms;
        for entry in poll.due {
            self.deliver_timer_entry(entry, now_ms, PullRead::Background);
        }
        self.write_timer_progress(now_ms, false);
    }

    /// How long the shard may sleep before the wheel's next slot.
    pub(crate) fn timer_wait_bound(&self, now_ms: i64) -> Option<Duration> {
        let state = self.timer.as_ref()?;
        if state.wheel.is_empty() || !self.settings.is_master {
            return None;
        }
        Some(Duration::from_millis(
            state.next_poll_ms.saturating_sub(now_ms).max(0) as u64,
        ))
    }

    fn enqueue_timer_entries(&mut self) {
        let (Some(state), Some(store)) = (self.timer.as_mut(), self.store.as_mut()) else {
            return;
        };
        if state.enqueue_read.is_waiting() {
            // The store is reading the next new records: nothing to do
            // until that read is done (`on_timer_read_done`).
            return;
        }
        let queue_id = TIMER_QUEUE_ID as u32;
        let mut read_from = state.wheel.read_from();
        let min = store.queue_min_offset(WHEEL_TIMER_TOPIC, queue_id) as i64;
        if read_from < min {
            tracing::warn!(
                read_from,
                min,
                "timer queue behind its files: skipping ahead"
            );
            state.wheel =
                TimerWheel::new(state.config, min, crate::shard::runtime::wall_clock_ms());
            read_from = min;
        }
        let max = store.queue_max_offset(WHEEL_TIMER_TOPIC, queue_id) as i64;
        if read_from >= max {
            return;
        }
        let count = ((max - read_from) as usize).min(TIMER_ENQUEUE_PER_TURN_MAX);
        // The records as a pull reads them: from memory, or read in the
        // background with their neighbours while the wheel waits (a backlog
        // after a restart); records further on that are not in memory are
        // left to the next turn.
        let cq_entries = store
            .consume_queues()
            .get(WHEEL_TIMER_TOPIC, queue_id)
            .map(|queue| queue.entries(read_from as u64, count))
            .unwrap_or_default();
        let Ok(pulled) = pull_system_queue(
            store,
            WHEEL_TIMER_TOPIC,
            queue_id,
            read_from,
            count,
            &mut state.enqueue_read,
        ) else {
            return;
        };
        let mut entries = Vec::with_capacity(cq_entries.len());
        for (i, cq) in cq_entries.iter().enumerate() {
            let queue_offset = read_from + i as i64;
            // None: not in memory, read next time; Some(None): the log no
            // longer holds it (fired below).
            let Some(record) = system_queue_record(store, pulled.as_ref(), i, read_from, cq) else {
                break;
            };
            // Unreadable or without TIMER_OUT_MS: fires now and is dropped.
            let fire_ms = record
                .as_deref()
                .and_then(|bytes| decode_record(bytes, CrcCheck::Skip).ok())
                .and_then(|view| {
                    timer::timer_tags_code(&state.config, WHEEL_TIMER_TOPIC, view.properties())
                })
                .unwrap_or(0);
            entries.push(QueueEntry {
                queue_offset,
                commit_log_offset: cq.commit_log_offset as i64,
                size: cq.size as i32,
                tags_code: fire_ms,
            });
        }
        if let Err(error) = state.wheel.enqueue(&entries) {
            tracing::error!(%error, "timer entries refused by the wheel");
        }
        for entry in &entries {
            // Delivered before the restart: out of the wheel, acknowledged.
            if state.skip.remove(&entry.queue_offset)
                && state.wheel.take(entry.queue_offset).is_some()
            {
                state.wheel.ack(entry.queue_offset);
            }
        }
        if let Some(first) = entries.iter().map(|e| e.tags_code).min() {
            state.next_poll_ms = state.next_poll_ms.min(first);
        }
    }

    /// Whether due entries, or the wheel's new records, wait for the
    /// store's background reads.
    pub(crate) fn timer_is_reading(&self) -> bool {
        self.timer
            .as_ref()
            .is_some_and(|state| !state.reading.is_empty() || state.enqueue_read.is_waiting())
    }

    /// The store's background read `ticket` is done: delivers the entries
    /// that waited for it (what is still missing is read synchronously).
    pub(crate) fn on_timer_read_done(&mut self, ticket: u64, now_ms: i64) {
        let Some(state) = self.timer.as_mut() else {
            return;
        };
        // The wheel reads its new records again in the next turn (a due
        // entry's read may be the same one: reads are shared).
        state.enqueue_read.on_read_done(ticket);
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut state.reading)
            .into_iter()
            .partition(|(read, _)| *read == ticket);
        state.reading = waiting;
        for (_, entry) in done {
            self.deliver_timer_entry(entry, now_ms, PullRead::AfterRead);
        }
    }

    /// Delivers a due entry, its record read as `read` says: in the
    /// background when it is no longer in memory (a long timer), the entry
    /// then waiting in `reading` until the read is done.
    fn deliver_timer_entry(&mut self, entry: QueueEntry, now_ms: i64, read: PullRead) {
        let record = match self
            .store_mut()
            .record_at(entry.commit_log_offset as u64, read)
        {
            Ok(RecordRead::Ready(record)) => record,
            Ok(RecordRead::Reading(ticket)) => {
                if let Some(state) = self.timer.as_mut() {
                    state.reading.push((ticket, entry));
                }
                return;
            }
            Err(_) => None,
        };
        let view = record
            .as_deref()
            .and_then(|bytes| decode_record(bytes, CrcCheck::Skip).ok());
        let repost = view
            .as_ref()
            .map(|view| timer::restore_from_timer(view, now_ms));
        let (Some(view), Some(Ok(repost))) = (view, repost) else {
            tracing::warn!(queue_offset = entry.queue_offset, "timer record dropped");
            if let Some(state) = self.timer.as_mut() {
                state.ack(entry.queue_offset);
            }
            return;
        };
        let token = self.next_internal_token();
        if let Some(state) = self.timer.as_mut() {
            state.in_flight.insert(token, entry);
        }
        self.dispatch_internal_send(token, &repost, &view, now_ms);
    }

    /// The answer to a timer re-delivery; gives `cmd` back when the token
    /// is not the wheel's.
    pub(crate) fn on_timer_answer(&mut self, cmd: RemotingCommand) -> Option<RemotingCommand> {
        let Some(state) = self.timer.as_mut() else {
            return Some(cmd);
        };
        let Some(entry) = state.in_flight.remove(&cmd.opaque) else {
            return Some(cmd);
        };
        match cmd.code {
            response_code::SUCCESS | response_code::FLUSH_DISK_TIMEOUT => {
                state.ack(entry.queue_offset)
            }
            response_code::TOPIC_NOT_EXIST
            | response_code::NO_PERMISSION
            | response_code::MESSAGE_ILLEGAL
            | response_code::SUBSCRIPTION_GROUP_NOT_EXIST => {
                tracing::warn!(queue_offset = entry.queue_offset, code = cmd.code, remark = ?cmd.remark,
                    "a due timer message was refused by its real queue: dropped");
                state.ack(entry.queue_offset);
            }
            code => {
                tracing::warn!(queue_offset = entry.queue_offset, code, remark = ?cmd.remark,
                    "re-delivering a timer message failed: retrying");
                state.wheel.retry(entry);
            }
        }
        None
    }

    /// The timer wheel's progress as last written, on the shard that owns
    /// the wheel.
    pub(crate) fn timer_progress(&self) -> Option<&TimerProgressFile> {
        self.timer.as_ref().map(|state| &state.written)
    }

    /// Slave: takes the master's timer progress (written to
    /// `timerProgress.json`, which the broker resumes from if it is
    /// restarted as a master). The wheel starts again from it, so that its
    /// own progress, written at the stop, is the master's.
    pub(crate) fn take_master_timer_progress(&mut self, progress: TimerProgressFile, now_ms: i64) {
        let (Some(state), Some(persister)) = (self.timer.as_mut(), &self.persister) else {
            return;
        };
        if state.written == progress {
            return;
        }
        persister.write(ConfigFile::TimerProgress, progress.encode());
        *state = TimerState::new(state.config, progress, now_ms);
        tracing::debug!(
            shard = self.id,
            durable = state.written.durable_offset,
            "took the master's timer progress"
        );
    }

    /// Writes the wheel's progress when it changed and the interval passed
    /// (or at once with `force`).
    pub(crate) fn write_timer_progress(&mut self, now_ms: i64, force: bool) {
        let (Some(state), Some(persister)) = (self.timer.as_mut(), &self.persister) else {
            return;
        };
        if !force && now_ms - state.last_write_ms < TIMER_PROGRESS_PERSIST_INTERVAL_MS {
            return;
        }
        state.last_write_ms = now_ms;
        let progress = state.progress();
        if progress == state.written {
            return;
        }
        persister.write(ConfigFile::TimerProgress, progress.encode());
        state.written = progress;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_timer_state_resumes_at_the_durable_offset() {
        let progress = TimerProgressFile {
            durable_offset: 12,
            delivered: vec![3, 14],
        };
        let state = TimerState::new(TimerConfig::default(), progress, 1_000);
        assert_eq!(state.wheel.read_from(), 12);
        assert_eq!(state.wheel.durable_offset(), 12);
        assert!(state.wheel.is_empty());
        assert_eq!(state.next_poll_ms, 1_000);
        assert_eq!(state.skip.iter().copied().collect::<Vec<_>>(), vec![14]);
    }

    #[test]
    fn the_progress_file_round_trips_and_refuses_other_content() {
        let progress = TimerProgressFile {
            durable_offset: 5,
            delivered: vec![7, 9],
        };
        let content = progress.encode();
        assert_eq!(content, br#"{"durableOffset":5,"delivered":[7,9]}"#);
        assert_eq!(TimerProgressFile::decode(&content), Some(progress));
        assert_eq!(TimerProgressFile::decode(b"{}"), None);
        assert_eq!(TimerProgressFile::decode(b"not json"), None);
    }

    #[test]
    fn progress_keeps_only_deliveries_above_the_durable_offset() {
        let mut state = TimerState::new(TimerConfig::default(), TimerProgressFile::default(), 0);
        let entries: Vec<QueueEntry> = (0..3)
            .map(|i| QueueEntry {
                queue_offset: i,
                commit_log_offset: i * 100,
                size: 100,
                tags_code: 1_000 * (3 - i),
            })
            .collect();
        state.wheel.enqueue(&entries).unwrap();
        let due = state.wheel.poll(1_500).due;
        assert_eq!(due.len(), 1);
        state.ack(due[0].queue_offset);
        assert_eq!(
            state.progress(),
            TimerProgressFile {
                durable_offset: 0,
                delivered: vec![2],
            }
        );
        for entry in state.wheel.poll(3_500).due {
            state.ack(entry.queue_offset);
        }
        assert_eq!(
            state.progress(),
            TimerProgressFile {
                durable_offset: 3,
                delivered: vec![],
            }
        );
    }
}
