//! The `delay` workload: sends delayed messages (a `DELAY` level) or timer
//! messages (`TIMER_DELIVER_MS`, RocketMQ 5), consumes them, and records the
//! delivery error of each: arrival time minus due time, in µs.
//!
//! ```text
//! consumer at the tail ─────────────────────────────┐
//! sender, open loop at --rate, K messages            │ pull
//!   DELAY=n        + LOADGEN_DUE_US = send time + delay(n)
//!   TIMER_DELIVER_MS=t + LOADGEN_DUE_US = t × 1000   ▼
//! broker holds each until due ──▶ real topic ──▶ error = now - LOADGEN_DUE_US
//! ```
//!
//! Due times. For a level, the broker's due time is its store timestamp plus
//! the level's delay; the sender cannot see the store time, so the due time
//! is its clock just before the send plus the delay, and the error includes
//! the send's own latency (store time ≥ send time on one machine). For a
//! timer message the due time is exactly the `TIMER_DELIVER_MS` sent. An
//! arrival before the due time is counted as error `EARLY` (never expected:
//! a broker bug or a clock step). Producer, broker and consumer must share
//! a clock (same machine). Messages of the topic without `LOADGEN_DUE_US`
//! (other traffic) are ignored.
//!
//! The run ends when every sent message arrived, or `--drain-seconds` after
//! the last due time; the missing ones are reported. Results are the usual
//! summary, JSON, `.hgrm` and interval log, with a `delay` section (sent,
//! send errors, arrived, early, missing).
//!
//! # Invariants
//!
//! - Each message carries its own due time; the consumer needs no shared
//!   state with the sender to compute the error.
//! - The sender never sends more than `count` messages, at most `rate` per
//!   second (open loop: a slow send delays later sends, it does not bunch
//!   them).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{CustomHeader, SendMessageRequestHeaderV2};
use ringmq_protocol::limits::MESSAGE_SIZE_MAX;
use ringmq_protocol::message::property_key;

use crate::client::{
    AUTO_CREATE_TOPIC, Brokers, ClientError, DEFAULT_TOPIC_QUEUE_COUNT, QueueAccess,
    REQUEST_TIMEOUT, Route,
};
use crate::consume::{ConsumeConfig, Consumers, Measure, StartFrom, unix_us};
use crate::hist::{ERROR_CODE_EARLY, ERROR_CODE_NO_RESPONSE, StatsCollector};
use crate::json::Json;
use crate::report::{self, Machine, RunInfo, Summary};
use crate::reporter::Reporter;
use crate::workload::{Outputs, WorkloadError, open_hlog, write_outputs};

/// The property carrying a message's due time, µs since the Unix epoch.
pub const DUE_US_PROPERTY: &str = "LOADGEN_DUE_US";
/// The broker's default `messageDelayLevel`.
pub const DELAY_LEVELS_DEFAULT: &str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";
/// Most messages one run sends.
pub const DELAY_COUNT_MAX: u64 = 10_000_000;
/// Highest send rate, messages per second (sends are synchronous).
pub const DELAY_RATE_MAX: u64 = 100_000;
/// Longest delay a run may ask for (RocketMQ's timer maximum, 3 days).
pub const DELAY_MS_MAX: u64 = 3 * 24 * 3600 * 1000;
/// How often the run checks whether everything arrived.
const ARRIVAL_CHECK: Duration = Duration::from_millis(100);

/// What delays the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayTarget {
    /// A `DELAY` level (1-based) of the broker's ladder.
    Level(i32),
    /// A timer message due this many ms after its send (`TIMER_DELIVER_MS`).
    TimerMs(u64),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct DelayConfig {
    /// Name server `host:port`.
    pub namesrv: String,
    /// Topic.
    pub topic: String,
    /// Level or timer delay.
    pub target: DelayTarget,
    /// Messages to send.
    pub count: u64,
    /// Send rate, messages per second.
    pub rate_per_s: u64,
    /// Body size in bytes.
    pub body_size: usize,
    /// Producer group.
    pub producer_group: String,
    /// Consumer group.
    pub consumer_group: String,
    /// Queues to use (default: all in the route).
    pub queue_count: Option<i32>,
    /// The broker's `messageDelayLevel`, to know a level's delay.
    pub delay_levels: String,
    /// How long after the last due time to wait for stragglers.
    pub drain: Duration,
}

/// Parses a `messageDelayLevel` ladder into ms per level: items separated by
/// spaces, each a count and a unit `s`, `m`, `h` or `d`.
///
/// # Errors
///
/// [`WorkloadError::Config`] naming the first bad item.
pub fn parse_delay_levels(text: &str) -> Result<Vec<u64>, WorkloadError> {
    text.split_whitespace()
        .enumerate()
        .map(|(index, item)| {
            let bad = || {
                WorkloadError::Config(format!(
                    "delay level {} ({item:?}) is not a number followed by s, m, h or d",
                    index + 1
                ))
            };
            let (count, unit) = item.split_at(item.len().saturating_sub(1));
            let unit_ms: u64 = match unit {
                "s" => 1000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                _ => return Err(bad()),
            };
            count
                .parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(unit_ms))
                .ok_or_else(bad)
        })
        .collect()
}

impl DelayConfig {
    /// The delay in ms each message asks for.
    ///
    /// # Errors
    ///
    /// [`WorkloadError::Config`] for a bad ladder or a level outside it.
    pub fn delay_ms(&self) -> Result<u64, WorkloadError> {
        match self.target {
            DelayTarget::TimerMs(ms) => Ok(ms),
            DelayTarget::Level(level) => {
                let ladder = parse_delay_levels(&self.delay_levels)?;
                usize::try_from(level)
                    .ok()
                    .and_then(|l| l.checked_sub(1))
                    .and_then(|index| ladder.get(index).copied())
                    .ok_or_else(|| {
                        WorkloadError::Config(format!(
                            "level {level} is outside the ladder's 1..={}",
                            ladder.len()
                        ))
                    })
            }
        }
    }

    fn validate(&self) -> Result<u64, WorkloadError> {
        let fail = |message: String| Err(WorkloadError::Config(message));
        if !(1..=DELAY_COUNT_MAX).contains(&self.count) {
            return fail(format!("count must be 1..={DELAY_COUNT_MAX}"));
        }
        if !(1..=DELAY_RATE_MAX).contains(&self.rate_per_s) {
            return fail(format!("rate must be 1..={DELAY_RATE_MAX}"));
        }
        if self.body_size > MESSAGE_SIZE_MAX as usize {
            return fail(format!("size must be at most {MESSAGE_SIZE_MAX}"));
        }
        let delay_ms = self.delay_ms()?;
        if delay_ms > DELAY_MS_MAX {
            return fail(format!(
                "a delay of {delay_ms} ms exceeds {DELAY_MS_MAX} ms"
            ));
        }
        Ok(delay_ms)
    }

    fn default_name(&self) -> String {
        match self.target {
            DelayTarget::Level(level) => format!("delay-level{level}-r{}", self.rate_per_s),
            DelayTarget::TimerMs(ms) => format!("timer-{ms}ms-r{}", self.rate_per_s),
        }
    }

    fn to_json_members(&self, route: &Route, delay_ms: u64) -> Vec<(String, Json)> {
        let (kind, value) = match self.target {
            DelayTarget::Level(level) => ("level", i64::from(level)),
            DelayTarget::TimerMs(ms) => ("timer_ms", i64::try_from(ms).unwrap_or(i64::MAX)),
        };
        vec![
            ("workload".into(), "delay".into()),
            ("namesrv".into(), self.namesrv.as_str().into()),
            ("topic".into(), self.topic.as_str().into()),
            (kind.into(), Json::from(value as f64)),
            ("delay_ms".into(), delay_ms.into()),
            ("count".into(), self.count.into()),
            ("rate".into(), self.rate_per_s.into()),
            ("size".into(), (self.body_size as u64).into()),
            ("queues".into(), (route.queues.len() as u64).into()),
            ("drain_seconds".into(), self.drain.as_secs_f64().into()),
        ]
    }
}

/// The properties of one message sent at `send_us` (µs since the epoch) and
/// its due time in µs: `DELAY` or `TIMER_DELIVER_MS`, `WAIT=true`, and
/// [`DUE_US_PROPERTY`].
pub fn message_properties(target: DelayTarget, delay_ms: u64, send_us: u64) -> (String, u64) {
    let mut properties = String::new();
    push_property(&mut properties, property_key::WAIT, "true");
    let due_us = match target {
        DelayTarget::Level(level) => {
            push_property(&mut properties, property_key::DELAY, &level.to_string());
            send_us.saturating_add(delay_ms.saturating_mul(1000))
        }
        DelayTarget::TimerMs(_) => {
            let deliver_ms = (send_us / 1000).saturating_add(delay_ms);
            push_property(
                &mut properties,
                property_key::TIMER_DELIVER_MS,
                &deliver_ms.to_string(),
            );
            deliver_ms.saturating_mul(1000)
        }
    };
    push_property(&mut properties, DUE_US_PROPERTY, &due_us.to_string());
    (properties, due_us)
}

fn push_property(properties: &mut String, key: &str, value: &str) {
    properties.push_str(key);
    properties.push('\u{1}');
    properties.push_str(value);
    properties.push('\u{2}');
}

/// What a delay run measured.
#[derive(Debug, Clone)]
pub struct DelayResult {
    /// The summary: its latency is the delivery error, and it has a `delay`
    /// section.
    pub summary: Summary,
    /// Messages the broker accepted.
    pub sent: u64,
    /// Sends that failed (any code, or no response).
    pub send_errors: u64,
    /// Messages with a due time that arrived (early ones included).
    pub arrived: u64,
    /// Of those, the ones that arrived before their due time.
    pub early: u64,
    /// The most one of them was early by, in µs.
    pub early_max_us: u64,
}

impl DelayResult {
    /// Accepted messages that never arrived.
    pub fn missing(&self) -> u64 {
        self.sent.saturating_sub(self.arrived)
    }
}

/// Runs the delay workload and writes the requested files.
///
/// # Errors
///
/// [`WorkloadError`] when the configuration is invalid, the route, a broker
/// or a start offset cannot be had, or a file cannot be written.
pub fn run_delay(config: &DelayConfig, outputs: &Outputs) -> Result<DelayResult, WorkloadError> {
    let delay_ms = config.validate()?;
    let git_commit = report::git_commit();
    let origin = Instant::now();
    let arrived = Arc::new(AtomicU64::new(0));
    let early_max_us = Arc::new(AtomicU64::new(0));
    let consume = ConsumeConfig {
        namesrv: config.namesrv.clone(),
        topic: config.topic.clone(),
        consumer_group: config.consumer_group.clone(),
        from: StartFrom::Tail,
        consumer_count: 1,
        queue_count: config.queue_count,
        duration: Duration::from_secs(1),
        warmup: Duration::ZERO,
    };
    let measure = Measure::FromDue {
        arrived: Arc::clone(&arrived),
        early_max_us: Arc::clone(&early_max_us),
    };
    let consumers = Consumers::start_measuring(&consume, origin, &measure)?;
    let route = Route::lookup(
        &config.namesrv,
        &config.topic,
        config.queue_count,
        QueueAccess::Write,
    )?;
    let producer = Brokers::connect(route.clone(), origin)?;
    let hlog = open_hlog(outputs)?;
    let started_at_unix_ms = unix_us() / 1000;
    let start = Instant::now();
    let collector = StatsCollector::new(consumers.handles.clone(), 0);
    let mut reporter = Reporter::new(collector, start, outputs.progress, hlog);
    let body: Vec<u8> = (0..config.body_size)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let mut sent = 0;
    let mut send_errors = 0;
    let mut last_due_us = 0;
    let interval_ns = 1_000_000_000 / config.rate_per_s;
    for index in 0..config.count {
        let intended = start + Duration::from_nanos(index.saturating_mul(interval_ns));
        reporter.run_until(intended)?;
        let send_us = unix_us();
        let (properties, due_us) = message_properties(config.target, delay_ms, send_us);
        match send_one(&producer, config, properties, &body) {
            Ok(()) => {
                sent += 1;
                last_due_us = last_due_us.max(due_us);
            }
            Err(_) => send_errors += 1,
        }
    }
    let wait_us = last_due_us
        .saturating_sub(unix_us())
        .saturating_add(u64::try_from(config.drain.as_micros()).unwrap_or(u64::MAX));
    let deadline = Instant::now() + Duration::from_micros(wait_us);
    while arrived.load(Ordering::Relaxed) < sent && Instant::now() < deadline {
        reporter.run_until((Instant::now() + ARRIVAL_CHECK).min(deadline))?;
    }
    let lag = consumers.stop();
    let collector = reporter.finish(Instant::now())?;
    let total = collector.total().clone();
    let arrived = arrived.load(Ordering::Relaxed);
    let early = total
        .errors_by_code
        .get(&ERROR_CODE_EARLY)
        .copied()
        .unwrap_or(0);
    let early_max_us = early_max_us.load(Ordering::Relaxed);
    let info = RunInfo {
        name: outputs
            .name
            .clone()
            .unwrap_or_else(|| config.default_name()),
        command: outputs.command.clone(),
        git_commit,
        machine: Machine::detect(),
        config: config.to_json_members(&route, delay_ms),
        started_at_unix_ms,
    };
    let section = Json::Object(vec![
        ("sent".into(), sent.into()),
        ("send_errors".into(), send_errors.into()),
        ("arrived".into(), arrived.into()),
        ("early".into(), early.into()),
        ("early_max_us".into(), early_max_us.into()),
        ("missing".into(), sent.saturating_sub(arrived).into()),
        (
            "final_lag_msgs".into(),
            (lag.final_total.max(0) as u64).into(),
        ),
    ]);
    let summary = write_outputs(
        info,
        &total,
        collector.measured_us(),
        outputs,
        vec![("delay".into(), section)],
    )?;
    Ok(DelayResult {
        summary,
        sent,
        send_errors,
        arrived,
        early,
        early_max_us,
    })
}

/// Sends one message synchronously to a queue of the route.
fn send_one(
    producer: &Brokers,
    config: &DelayConfig,
    properties: String,
    body: &[u8],
) -> Result<(), i32> {
    let queue = producer.select_queue(None, None).clone();
    let Some(connection) = producer.connection(&queue.broker_name) else {
        return Err(ERROR_CODE_NO_RESPONSE);
    };
    let header = SendMessageRequestHeaderV2 {
        producer_group: config.producer_group.clone(),
        topic: config.topic.clone(),
        default_topic: AUTO_CREATE_TOPIC.into(),
        default_topic_queue_nums: DEFAULT_TOPIC_QUEUE_COUNT,
        queue_id: queue.queue_id,
        sys_flag: 0,
        born_timestamp: (unix_us() / 1000) as i64,
        flag: 0,
        properties: Some(properties),
        reconsume_times: Some(0),
        unit_mode: Some(false),
        max_reconsume_times: None,
        batch: Some(false),
        broker_name: Some(queue.broker_name.clone()),
    };
    let command =
        RemotingCommand::new_request(request_code::SEND_MESSAGE_V2, header.to_ext_fields())
            .with_body(body.to_vec().into());
    match connection.call(command, REQUEST_TIMEOUT) {
        Ok(response) if response.code == response_code::SUCCESS => Ok(()),
        Ok(response) => Err(response.code),
        Err(ClientError::Response { code, .. }) => Err(code),
        Err(_) => Err(ERROR_CODE_NO_RESPONSE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(target: DelayTarget) -> DelayConfig {
        DelayConfig {
            namesrv: "127.0.0.1:1".into(),
            topic: "T".into(),
            target,
            count: 10,
            rate_per_s: 10,
            body_size: 16,
            producer_group: "p".into(),
            consumer_group: "c".into(),
            queue_count: None,
            delay_levels: DELAY_LEVELS_DEFAULT.into(),
            drain: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_default_ladder_gives_each_level_its_delay() {
        let ladder = parse_delay_levels(DELAY_LEVELS_DEFAULT).unwrap();
        assert_eq!(ladder.len(), 18);
        assert_eq!(ladder[1], 5_000);
        assert_eq!(ladder[17], 7_200_000);
        assert!(
            matches!(parse_delay_levels("1s 2x"), Err(WorkloadError::Config(m)) if m.contains("level 2"))
        );
        assert_eq!(config(DelayTarget::Level(2)).delay_ms().unwrap(), 5_000);
        assert!(config(DelayTarget::Level(19)).delay_ms().is_err());
        assert_eq!(
            config(DelayTarget::TimerMs(3_000)).delay_ms().unwrap(),
            3_000
        );
    }

    #[test]
    fn validation_bounds_count_rate_and_delay() {
        let mut c = config(DelayTarget::Level(1));
        assert_eq!(c.validate().unwrap(), 1_000);
        c.count = 0;
        assert!(c.validate().is_err());
        let mut c = config(DelayTarget::TimerMs(DELAY_MS_MAX + 1));
        assert!(c.validate().is_err());
        c.target = DelayTarget::TimerMs(1);
        c.rate_per_s = 0;
        assert!(c.validate().is_err());
    }

    #[test]
    fn level_messages_are_due_at_send_time_plus_the_delay() {
        let (properties, due) = message_properties(DelayTarget::Level(2), 5_000, 1_000_123);
        assert_eq!(due, 6_000_123);
        assert_eq!(
            properties,
            "WAIT\u{1}true\u{2}DELAY\u{1}2\u{2}LOADGEN_DUE_US\u{1}6000123\u{2}"
        );
    }

    #[test]
    fn timer_messages_are_due_at_their_delivery_time() {
        let (properties, due) = message_properties(DelayTarget::TimerMs(3_000), 3_000, 1_000_999);
        assert_eq!(due, 4_000_000);
        assert!(properties.contains("TIMER_DELIVER_MS\u{1}4000\u{2}"));
        assert!(properties.contains("LOADGEN_DUE_US\u{1}4000000\u{2}"));
    }

    #[test]
    fn names_describe_the_run() {
        assert_eq!(
            config(DelayTarget::Level(3)).default_name(),
            "delay-level3-r10"
        );
        assert_eq!(
            config(DelayTarget::TimerMs(250)).default_name(),
            "timer-250ms-r10"
        );
    }
}
