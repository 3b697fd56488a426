//! One produce sender thread: builds requests ([`MessageFactory`]), sends
//! them in its mode, and records every outcome in its statistics.
//!
//! See [`crate::workload`] for the modes; this file is the control flow of
//! one sender.
//!
//! # Invariants
//!
//! - A sender never has more than `inflight_max` requests in flight
//!   ([`Inflight`] counts them; a completion releases its slot exactly once).
//! - Every request sent is recorded once: by the sender (sync, oneway) or by
//!   its completion (async, batch).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{CustomHeader, SendMessageRequestHeaderV2};
use ringmq_protocol::message::{BatchEntry, encode_batch, java_string_hash_code, property_key};

use crate::client::{
    AUTO_CREATE_TOPIC, Brokers, ClientError, Connection, DEFAULT_TOPIC_QUEUE_COUNT, MessageQueue,
    REQUEST_TIMEOUT, RequestError, SEND_RETRY_MAX,
};
use crate::hist::{ERROR_CODE_NO_RESPONSE, StatsHandle};
use crate::schedule::{Clock, MonotonicClock, Schedule, latency_us};
use crate::workload::{ProduceConfig, ProduceMode, SENT_US_PROPERTY, unix_ms};

/// A sender waiting for a free in-flight slot re-checks the stop flag this
/// often.
const SLOT_WAIT: Duration = Duration::from_millis(50);
/// After a request failed because its connection closed, a sync sender
/// pauses this long so a dead broker does not turn it into a busy loop.
const CLOSED_BACKOFF: Duration = Duration::from_millis(10);
/// How long a sender waits for its in-flight requests after the end.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
const _: () = assert!(DRAIN_TIMEOUT.as_millis() > REQUEST_TIMEOUT.as_millis());

/// Builds the requests of one sender.
pub(crate) struct MessageFactory {
    topic: String,
    group: String,
    body: Bytes,
    base_properties: String,
    keys: bool,
    key_prefix: String,
    key_counter: u64,
    batch_size: usize,
    /// The batch body when every message is the same (no keys, no send
    /// times): built once.
    batch_body: Option<Bytes>,
    /// Whether each message carries its send time ([`SENT_US_PROPERTY`]).
    stamp_sent_us: bool,
}

/// One request ready to send, with what it carries.
struct BuiltRequest {
    command: RemotingCommand,
    message_count: u64,
    byte_count: u64,
}

impl MessageFactory {
    pub(crate) fn new(config: &ProduceConfig, sender_index: usize) -> Self {
        let body: Bytes = (0..config.body_size)
            .map(|i| b'a' + (i % 26) as u8)
            .collect();
        let mut base_properties = String::new();
        push_property(&mut base_properties, property_key::WAIT, "true");
        if let Some(tags) = &config.tags {
            push_property(&mut base_properties, property_key::TAGS, tags);
        }
        let mut factory = Self {
            topic: config.topic.clone(),
            group: config.producer_group.clone(),
            body,
            base_properties,
            keys: config.keys,
            key_prefix: format!("{}-{sender_index}-", std::process::id()),
            key_counter: 0,
            batch_size: config.batch_size,
            batch_body: None,
            stamp_sent_us: config.stamp_sent_us,
        };
        if config.mode == ProduceMode::Batch && !config.keys && !config.stamp_sent_us {
            let properties = factory.base_properties.clone();
            factory.batch_body =
                Some(factory.encode_batch_body(&vec![properties; config.batch_size]));
        }
        factory
    }

    /// The next key (when keys are on) and its queue-selection hash, as
    /// Java's `SelectMessageQueueByHash` computes it.
    fn next_key(&mut self) -> Option<(String, u32)> {
        if !self.keys {
            return None;
        }
        self.key_counter += 1;
        let key = format!("{}{}", self.key_prefix, self.key_counter);
        let hash = java_string_hash_code(&key).unsigned_abs();
        Some((key, hash))
    }

    fn properties_with_key(&self, key: Option<&str>) -> String {
        let mut properties = self.base_properties.clone();
        if let Some(key) = key {
            push_property(&mut properties, property_key::KEYS, key);
        }
        if self.stamp_sent_us {
            push_property(
                &mut properties,
                SENT_US_PROPERTY,
                &crate::consume::unix_us().to_string(),
            );
        }
        properties
    }

    fn encode_batch_body(&self, properties: &[String]) -> Bytes {
        let entries: Vec<BatchEntry<'_>> = properties
            .iter()
            .map(|p| BatchEntry::new(0, &self.body, p.as_bytes()))
            .collect();
        let mut body = Vec::new();
        encode_batch(&entries, &mut body)
            .expect("invariant: validate() bounds the batch and properties sizes");
        body.into()
    }

    fn header(
        &self,
        queue: &MessageQueue,
        properties: String,
        batch: bool,
    ) -> SendMessageRequestHeaderV2 {
        SendMessageRequestHeaderV2 {
            producer_group: self.group.clone(),
            topic: self.topic.clone(),
            default_topic: AUTO_CREATE_TOPIC.into(),
            default_topic_queue_nums: DEFAULT_TOPIC_QUEUE_COUNT,
            queue_id: queue.queue_id,
            sys_flag: 0,
            born_timestamp: unix_ms() as i64,
            flag: 0,
            properties: Some(properties),
            reconsume_times: Some(0),
            unit_mode: Some(false),
            max_reconsume_times: None,
            batch: Some(batch),
            broker_name: Some(queue.broker_name.clone()),
        }
    }

    /// A single-message request; the key hash picks the queue when keys are
    /// on.
    fn single(
        &mut self,
        producer: &Brokers,
        avoid_broker: Option<&str>,
    ) -> (BuiltRequest, MessageQueue) {
        let key = self.next_key();
        let queue = producer
            .select_queue(key.as_ref().map(|(_, hash)| *hash), avoid_broker)
            .clone();
        let properties = self.properties_with_key(key.as_ref().map(|(k, _)| k.as_str()));
        let header = self.header(&queue, properties, false);
        let command =
            RemotingCommand::new_request(request_code::SEND_MESSAGE_V2, header.to_ext_fields())
                .with_body(self.body.clone());
        let built = BuiltRequest {
            command,
            message_count: 1,
            byte_count: self.body.len() as u64,
        };
        (built, queue)
    }

    /// A batch request of `batch_size` messages.
    fn batch(&mut self, producer: &Brokers) -> (BuiltRequest, MessageQueue) {
        let (body, first_hash) = match &self.batch_body {
            Some(body) => (body.clone(), None),
            None => {
                let mut first_hash = None;
                let mut properties = Vec::with_capacity(self.batch_size);
                for _ in 0..self.batch_size {
                    let key = self.next_key();
                    first_hash = first_hash.or(key.as_ref().map(|(_, hash)| *hash));
                    properties
                        .push(self.properties_with_key(key.as_ref().map(|(k, _)| k.as_str())));
                }
                (self.encode_batch_body(&properties), first_hash)
            }
        };
        let queue = producer.select_queue(first_hash, None).clone();
        let header = self.header(&queue, self.base_properties.clone(), true);
        let command =
            RemotingCommand::new_request(request_code::SEND_BATCH_MESSAGE, header.to_ext_fields())
                .with_body(body);
        let built = BuiltRequest {
            command,
            message_count: self.batch_size as u64,
            byte_count: (self.batch_size * self.body.len()) as u64,
        };
        (built, queue)
    }
}

fn push_property(properties: &mut String, key: &str, value: &str) {
    properties.push_str(key);
    properties.push('\u{1}');
    properties.push_str(value);
    properties.push('\u{2}');
}

/// Codes after which the Java producer retries on another broker
/// (`DefaultMQProducer.retryResponseCodes`).
fn is_retryable(code: i32) -> bool {
    matches!(
        code,
        response_code::TOPIC_NOT_EXIST
            | response_code::SERVICE_NOT_AVAILABLE
            | response_code::SYSTEM_ERROR
            | response_code::SYSTEM_BUSY
            | response_code::NO_PERMISSION
            | response_code::NO_BUYER_ID
            | response_code::NOT_IN_CURRENT_UNIT
    )
}

/// Counts requests in flight for one sender and lets it wait for slots.
///
/// The sender sleeps until the count falls to its wake level and is woken
/// only when the count crosses it (or reaches zero), so a closed-loop
/// sender refills half its pipeline per wake-up instead of paying a
/// context switch per response.
struct Inflight {
    count: Mutex<usize>,
    freed: Condvar,
    wake_level: usize,
}

impl Inflight {
    /// Slots for a sender allowed `max` in flight, woken when at most
    /// `wake_level` remain.
    fn new(wake_level: usize) -> Self {
        Self {
            count: Mutex::new(0),
            freed: Condvar::new(),
            wake_level,
        }
    }

    /// Waits up to `timeout` until at most `level` are in flight; returns
    /// how many are in flight then.
    fn wait_at_most(&self, level: usize, timeout: Duration) -> usize {
        let count = self.count.lock().unwrap_or_else(PoisonError::into_inner);
        let (count, _) = self
            .freed
            .wait_timeout_while(count, timeout, |count| *count > level)
            .unwrap_or_else(PoisonError::into_inner);
        *count
    }

    fn acquire(&self, slots: usize) {
        *self.count.lock().unwrap_or_else(PoisonError::into_inner) += slots;
    }

    fn release(&self) {
        let mut count = self.count.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(*count > 0, "released a slot that was not taken");
        *count -= 1;
        let wake = *count == self.wake_level || *count == 0;
        drop(count);
        if wake {
            self.freed.notify_one();
        }
    }
}

/// One sender thread's state.
pub(crate) struct Sender {
    pub(crate) config: ProduceConfig,
    pub(crate) producer: Arc<Brokers>,
    pub(crate) stats: StatsHandle,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) clock: MonotonicClock,
    pub(crate) schedule: Option<Schedule>,
    pub(crate) messages: MessageFactory,
}

impl Sender {
    pub(crate) fn run(mut self) {
        if self.schedule.is_some() {
            crate::schedule::set_fine_timer_slack();
        }
        match self.config.mode {
            ProduceMode::Sync => self.run_sync(),
            ProduceMode::Async | ProduceMode::Batch | ProduceMode::Oneway => self.run_pipelined(),
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The intended send time of the next message: its scheduled time in
    /// open loop (after waiting for it), now in closed loop.
    fn next_intended(&mut self) -> u64 {
        match &mut self.schedule {
            Some(schedule) => schedule.wait_next(&self.clock),
            None => self.clock.now_ns(),
        }
    }

    fn run_sync(&mut self) {
        while !self.stopped() {
            let intended = self.next_intended();
            if self.stopped() {
                break;
            }
            let mut avoid: Option<String> = None;
            let mut outcome = Err(ERROR_CODE_NO_RESPONSE);
            for _ in 0..=SEND_RETRY_MAX {
                let (built, queue) = self.messages.single(&self.producer, avoid.as_deref());
                let Some(connection) = self.producer.connection(&queue.broker_name) else {
                    break;
                };
                match connection.call(built.command, REQUEST_TIMEOUT) {
                    Ok(response) if response.code == response_code::SUCCESS => {
                        outcome = Ok(built.byte_count);
                        break;
                    }
                    Ok(response) => {
                        outcome = Err(response.code);
                        if !is_retryable(response.code) {
                            break;
                        }
                    }
                    Err(ClientError::Request {
                        source: RequestError::Timeout,
                        ..
                    }) => {
                        outcome = Err(ERROR_CODE_NO_RESPONSE);
                    }
                    Err(_) => {
                        outcome = Err(ERROR_CODE_NO_RESPONSE);
                        std::thread::sleep(CLOSED_BACKOFF);
                    }
                }
                avoid = Some(queue.broker_name);
            }
            let done = self.clock.now_ns();
            self.stats.with(|stats| match outcome {
                Ok(bytes) => stats.record_success(latency_us(intended, done), 1, bytes),
                Err(code) => stats.record_error(code),
            });
        }
    }

    /// Async, batch and oneway: fill free in-flight slots, one write per
    /// broker per round.
    fn run_pipelined(&mut self) {
        let max = self.config.inflight_max;
        // Closed loop refills half the pipeline per wake-up; open loop sends
        // as soon as any slot is free, so its queueing is the broker's.
        let wake_level = if self.schedule.is_some() {
            max - 1
        } else {
            max / 2
        };
        let inflight = Arc::new(Inflight::new(wake_level));
        let oneway = self.config.mode == ProduceMode::Oneway;
        let mut frames: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut intended_times = Vec::new();
        let mut oneway_starts = Vec::new();
        while !self.stopped() {
            let free = if oneway {
                max
            } else {
                max.saturating_sub(inflight.wait_at_most(wake_level, SLOT_WAIT))
            };
            if free == 0 {
                continue;
            }
            let mut round = 0;
            while round < free && !self.stopped() {
                // In open loop, send what is due now; wait only for the first.
                if round > 0
                    && self
                        .schedule
                        .as_ref()
                        .is_some_and(|s| s.peek_ns() > self.clock.now_ns())
                {
                    break;
                }
                intended_times.clear();
                let (built, queue) = self.build(&mut intended_times);
                if self.stopped() {
                    break;
                }
                let Some(connection) = self.producer.connection(&queue.broker_name) else {
                    self.stats.with(|s| s.record_error(ERROR_CODE_NO_RESPONSE));
                    break;
                };
                let buffer = frames.entry(queue.broker_name.clone()).or_default();
                if oneway {
                    oneway_starts.extend(intended_times.last().copied());
                    self.encode_oneway(built, buffer);
                } else {
                    self.encode_pipelined(built, &intended_times, connection, &inflight, buffer);
                }
                round += 1;
            }
            for (broker, buffer) in &mut frames {
                if buffer.is_empty() {
                    continue;
                }
                if let Some(connection) = self.producer.connection(broker) {
                    // A failed write fails every registered request with
                    // `Closed`, which records them; nothing more to do here.
                    let _ = connection.write_frames(buffer);
                }
                buffer.clear();
            }
            if oneway {
                self.record_oneway_round(&oneway_starts);
                oneway_starts.clear();
            }
        }
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while inflight.wait_at_most(0, SLOT_WAIT) > 0 && Instant::now() < deadline {}
    }

    /// Builds the next request; `intended_times` receives the intended send
    /// time of each message it carries.
    fn build(&mut self, intended_times: &mut Vec<u64>) -> (BuiltRequest, MessageQueue) {
        if self.config.mode == ProduceMode::Batch {
            match self.schedule.is_some() {
                true => {
                    for _ in 0..self.config.batch_size {
                        let intended = self.next_intended();
                        intended_times.push(intended);
                    }
                }
                false => intended_times.push(self.clock.now_ns()),
            }
            self.messages.batch(&self.producer)
        } else {
            let intended = self.next_intended();
            intended_times.push(intended);
            self.messages.single(&self.producer, None)
        }
    }

    fn encode_pipelined(
        &self,
        built: BuiltRequest,
        intended_times: &[u64],
        connection: &Connection,
        inflight: &Arc<Inflight>,
        buffer: &mut Vec<u8>,
    ) {
        let mut command = built.command;
        command.opaque = connection.next_opaque();
        // The request's own intended time is its last message's: the batch
        // could not go before every message in it was due.
        let request_start = intended_times
            .last()
            .copied()
            .unwrap_or_else(|| self.clock.now_ns());
        let message_starts: Vec<u64> = if intended_times.len() > 1 {
            intended_times.to_vec()
        } else {
            Vec::new()
        };
        let stats = self.stats.clone();
        let slot = Arc::clone(inflight);
        let (message_count, byte_count) = (built.message_count, built.byte_count);
        slot.acquire(1);
        let opaque = command.opaque;
        if command
            .encode(ringmq_protocol::code::SerializeType::Json, buffer)
            .is_err()
        {
            stats.with(|s| s.record_error(ERROR_CODE_NO_RESPONSE));
            slot.release();
            return;
        }
        connection.register(
            opaque,
            REQUEST_TIMEOUT,
            Box::new(move |result, done| {
                stats.with(|s| match result {
                    Ok(response) if response.code == response_code::SUCCESS => {
                        let request_latency = latency_us(request_start, done);
                        if message_starts.is_empty() {
                            s.record_success(request_latency, message_count, byte_count);
                        } else {
                            let each: Vec<u64> = message_starts
                                .iter()
                                .map(|&t| latency_us(t, done))
                                .collect();
                            s.record_success_each(request_latency, &each, byte_count);
                        }
                    }
                    Ok(response) => s.record_error(response.code),
                    Err(_) => s.record_error(ERROR_CODE_NO_RESPONSE),
                });
                slot.release();
            }),
        );
    }

    fn encode_oneway(&self, built: BuiltRequest, buffer: &mut Vec<u8>) {
        let mut command = built.command;
        command.mark_oneway();
        if command
            .encode(ringmq_protocol::code::SerializeType::Json, buffer)
            .is_err()
        {
            self.stats.with(|s| s.record_error(ERROR_CODE_NO_RESPONSE));
        }
    }

    /// Oneway requests count as sent once written; each one's latency runs
    /// from its intended (or build) time to the end of the round's writes.
    fn record_oneway_round(&self, starts: &[u64]) {
        let done = self.clock.now_ns();
        let body_size = self.config.body_size as u64;
        self.stats.with(|s| {
            for &start in starts {
                s.record_success(latency_us(start, done), 1, body_size);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::tests::config;

    #[test]
    fn batch_body_holds_batch_size_messages_with_their_properties() {
        let factory = MessageFactory::new(&config(ProduceMode::Batch), 0);
        let body = factory.batch_body.clone().unwrap();
        let entries: Vec<_> = ringmq_protocol::message::iter_batch(&body)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(entries.len(), 8);
        assert_eq!(entries[0].body.len(), 100);
        assert_eq!(entries[0].properties, b"WAIT\x01true\x02TAGS\x01tagA\x02");
    }

    #[test]
    fn a_stamping_factory_puts_each_messages_send_time_in_us_in_it() {
        let mut stamped = config(ProduceMode::Async);
        stamped.stamp_sent_us = true;
        let factory = MessageFactory::new(&stamped, 0);
        let before = crate::consume::unix_us();
        let properties = factory.properties_with_key(None);
        let after = crate::consume::unix_us();
        let sent: u64 = properties
            .split('\u{2}')
            .find_map(|pair| pair.strip_prefix("LOADGEN_SENT_US\u{1}"))
            .unwrap()
            .parse()
            .unwrap();
        assert!((before..=after).contains(&sent), "{before} {sent} {after}");
        // Batches stamp each message: no body built once for all.
        stamped.mode = ProduceMode::Batch;
        assert!(MessageFactory::new(&stamped, 0).batch_body.is_none());
        let plain = MessageFactory::new(&config(ProduceMode::Async), 0);
        assert!(!plain.properties_with_key(None).contains("LOADGEN_SENT_US"));
    }

    #[test]
    fn keys_are_unique_and_hash_like_java() {
        let mut keyed = config(ProduceMode::Async);
        keyed.keys = true;
        let mut factory = MessageFactory::new(&keyed, 3);
        let (first, hash) = factory.next_key().unwrap();
        let (second, _) = factory.next_key().unwrap();
        assert_ne!(first, second);
        assert_eq!(hash, java_string_hash_code(&first).unsigned_abs());
    }

    #[test]
    fn inflight_wakes_the_sender_at_its_wake_level() {
        let inflight = Arc::new(Inflight::new(2));
        inflight.acquire(4);
        assert_eq!(
            inflight.wait_at_most(2, Duration::from_millis(10)),
            4,
            "times out"
        );
        let releaser = Arc::clone(&inflight);
        let thread = std::thread::spawn(move || {
            releaser.release();
            releaser.release();
        });
        assert_eq!(inflight.wait_at_most(2, Duration::from_secs(5)), 2);
        thread.join().unwrap();
        inflight.release();
        inflight.release();
        assert_eq!(inflight.wait_at_most(0, Duration::from_secs(5)), 0);
    }

    #[test]
    fn retryable_codes_follow_the_java_producer() {
        assert!(is_retryable(response_code::SYSTEM_BUSY));
        assert!(!is_retryable(response_code::FLUSH_DISK_TIMEOUT));
    }
}
