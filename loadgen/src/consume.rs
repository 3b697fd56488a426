//! The `consume` and `e2e` workloads: pull consumers tailing a topic (or
//! catching up from its oldest retained message), end-to-end latency from
//! each message's born timestamp, and consumer lag.
//!
//! Each consumer thread owns a share of the readable queues (round robin)
//! and keeps one PULL_MESSAGE in flight per queue, with the suspend flag so
//! a broker may hold it (long polling) for [`PULL_SUSPEND`]. Responses come
//! back through a channel; a queue with nothing new is pulled again after
//! [`EMPTY_PULL_PAUSE`] (brokers that hold pulls answer late anyway; one
//! that does not, like `null-broker`, would otherwise be polled in a loop).
//!
//! End-to-end latency is now minus the message's send time in wall-clock
//! time: its `LOADGEN_SENT_US` property (µs), which the e2e producer puts
//! in every message it builds, just before the send; a message without it
//! (another producer's) is measured from its born timestamp, which is in
//! milliseconds, so that value carries up to 1 ms of truncation (reads high
//! by 0–1 ms). Producer and consumer must share a clock (same machine
//! here).
//!
//! ```text
//! consumer thread --pull(q0)--> broker      lag(q) = maxOffset - nextBeginOffset
//!        ^  --pull(q1)-->                   from each pull response
//!        +-- channel <-- completions (reader thread)
//! ```
//!
//! # Invariants
//!
//! - At most one pull per queue is in flight.
//! - A queue's next offset only moves to what the broker returned as
//!   `nextBeginOffset`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{
    CustomHeader, GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader, PullMessageRequestHeader,
    PullMessageResponseHeader, PullSysFlag,
};
use ringmq_protocol::message::{CrcCheck, RecordView, iter_pull_body};

use crate::client::{
    Brokers, ClientError, Connection, MessageQueue, QueueAccess, REQUEST_TIMEOUT, RequestError,
    Route,
};
use crate::hist::{ERROR_CODE_NO_RESPONSE, StatsCollector, StatsHandle};
use crate::json::Json;
use crate::report::{Machine, RunInfo};
use crate::reporter::Reporter;
use crate::workload::{
    Outputs, ProduceConfig, RunResult, Secondary, WorkloadError, open_hlog, run_produce_with,
    write_outputs,
};

/// How long a broker may hold a pull that finds nothing.
pub const PULL_SUSPEND: Duration = Duration::from_millis(1000);
/// Messages asked for per pull (Java's `pullBatchSize` is 32).
pub const PULL_BATCH_SIZE: i32 = 32;
/// The pause before pulling a queue again after an empty answer.
pub const EMPTY_PULL_PAUSE: Duration = Duration::from_millis(1);
/// The pause before pulling a queue again after an error.
pub const ERROR_PULL_PAUSE: Duration = Duration::from_millis(10);
/// The most consumer threads.
pub const CONSUMER_COUNT_MAX: usize = 256;
/// After the producers stop, an e2e run keeps consuming at most this long
/// to drain what was sent.
pub const E2E_DRAIN_MAX: Duration = Duration::from_secs(5);
/// An e2e drain ends once nothing has arrived for this long.
pub const E2E_QUIET: Duration = Duration::from_millis(500);

/// Where consumers start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    /// At each queue's end: only new messages.
    Tail,
    /// At each queue's oldest message: catch up.
    Earliest,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ConsumeConfig {
    /// Name server `host:port`.
    pub namesrv: String,
    /// Topic.
    pub topic: String,
    /// Consumer group.
    pub consumer_group: String,
    /// Where to start.
    pub from: StartFrom,
    /// Consumer threads.
    pub consumer_count: usize,
    /// Queues per broker to read (default: all readable).
    pub queue_count: Option<i32>,
    /// Measured time.
    pub duration: Duration,
    /// Warm-up, excluded from results.
    pub warmup: Duration,
}

impl ConsumeConfig {
    fn validate(&self) -> Result<(), WorkloadError> {
        if !(1..=CONSUMER_COUNT_MAX).contains(&self.consumer_count) {
            return Err(WorkloadError::Config(format!(
                "consumers must be 1..={CONSUMER_COUNT_MAX}"
            )));
        }
        if self.duration.is_zero() {
            return Err(WorkloadError::Config("seconds must be positive".into()));
        }
        Ok(())
    }

    fn to_json_members(&self, route: &Route) -> Vec<(String, Json)> {
        vec![
            ("namesrv".into(), self.namesrv.as_str().into()),
            ("topic".into(), self.topic.as_str().into()),
            ("group".into(), self.consumer_group.as_str().into()),
            (
                "from".into(),
                match self.from {
                    StartFrom::Tail => "tail",
                    StartFrom::Earliest => "earliest",
                }
                .into(),
            ),
            ("consumers".into(), (self.consumer_count as u64).into()),
            ("queues".into(), (route.queues.len() as u64).into()),
            ("seconds".into(), self.duration.as_secs_f64().into()),
            ("warmup".into(), self.warmup.as_secs_f64().into()),
        ]
    }
}

/// Consumer lag at the end of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lag {
    /// Messages behind, summed over queues, from the last responses.
    pub final_total: i64,
    /// The most any one queue was behind in any response.
    pub queue_max: i64,
}

impl Lag {
    fn merge(self, other: Lag) -> Lag {
        Lag {
            final_total: self.final_total + other.final_total,
            queue_max: self.queue_max.max(other.queue_max),
        }
    }

    fn to_json(self) -> Json {
        Json::Object(vec![
            (
                "final_total_msgs".into(),
                (self.final_total.max(0) as u64).into(),
            ),
            (
                "queue_max_msgs".into(),
                (self.queue_max.max(0) as u64).into(),
            ),
        ])
    }
}

/// What a consumer records for each message.
#[derive(Debug, Clone)]
pub(crate) enum Measure {
    /// End-to-end latency: now minus the send time
    /// ([`crate::workload::SENT_US_PROPERTY`], else the born timestamp).
    FromBorn,
    /// Delivery error of delayed messages: now minus the due time the
    /// producer put in [`crate::delay::DUE_US_PROPERTY`]. Messages without it
    /// are ignored; an arrival before its due time is recorded as error
    /// [`crate::hist::ERROR_CODE_EARLY`]. `arrived` counts both.
    FromDue {
        /// Messages with a due time seen so far.
        arrived: Arc<AtomicU64>,
        /// The most any arrival was early by, in µs.
        early_max_us: Arc<AtomicU64>,
    },
}

/// Consumers that have found their start offsets and are pulling.
pub(crate) struct Consumers {
    threads: Vec<JoinHandle<Lag>>,
    pub(crate) handles: Vec<StatsHandle>,
    stop: Arc<AtomicBool>,
    pub(crate) route: Route,
}

impl Consumers {
    /// Connects, finds the start offsets and starts pulling.
    fn start(config: &ConsumeConfig, origin: Instant) -> Result<Self, WorkloadError> {
        Self::start_measuring(config, origin, &Measure::FromBorn)
    }

    /// As [`Consumers::start`], recording `measure` for each message.
    pub(crate) fn start_measuring(
        config: &ConsumeConfig,
        origin: Instant,
        measure: &Measure,
    ) -> Result<Self, WorkloadError> {
        config.validate()?;
        let route = Route::lookup(
            &config.namesrv,
            &config.topic,
            config.queue_count,
            QueueAccess::Read,
        )?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut handles = Vec::new();
        for index in 0..config.consumer_count {
            let queues: Vec<MessageQueue> = route
                .queues
                .iter()
                .skip(index)
                .step_by(config.consumer_count)
                .cloned()
                .collect();
            if queues.is_empty() {
                continue;
            }
            let brokers = Brokers::connect(route.clone(), origin)?;
            let mut states = Vec::new();
            for queue in queues {
                let connection = brokers.connection(&queue.broker_name).ok_or_else(|| {
                    WorkloadError::Config("a queue's broker has no address".into())
                })?;
                let next_offset = start_offset(connection, &config.topic, &queue, config.from)?;
                states.push(QueueState {
                    queue,
                    next_offset,
                    lag: 0,
                    due: Instant::now(),
                });
            }
            let stats = StatsHandle::new();
            handles.push(stats.clone());
            let consumer = Consumer {
                topic: config.topic.clone(),
                group: config.consumer_group.clone(),
                brokers,
                states,
                stats,
                stop: Arc::clone(&stop),
                measure: measure.clone(),
            };
            let thread = std::thread::Builder::new()
                .name(format!("consumer {index}"))
                .spawn(move || consumer.run())
                .map_err(WorkloadError::Spawn)?;
            threads.push(thread);
        }
        Ok(Self {
            threads,
            handles,
            stop,
            route,
        })
    }

    /// Stops pulling and returns the lag.
    pub(crate) fn stop(self) -> Lag {
        self.stop.store(true, Ordering::Release);
        let mut lag = Lag::default();
        for thread in self.threads {
            if let Ok(thread_lag) = thread.join() {
                lag = lag.merge(thread_lag);
            }
        }
        lag
    }
}

/// GET_MAX_OFFSET (tail) or GET_MIN_OFFSET (earliest) of a queue.
fn start_offset(
    connection: &Connection,
    topic: &str,
    queue: &MessageQueue,
    from: StartFrom,
) -> Result<i64, WorkloadError> {
    let broker_name = Some(queue.broker_name.clone());
    let (code, ext) = match from {
        StartFrom::Tail => {
            let header = GetMaxOffsetRequestHeader {
                topic: topic.into(),
                queue_id: queue.queue_id,
                broker_name,
                ..GetMaxOffsetRequestHeader::default()
            };
            (request_code::GET_MAX_OFFSET, header.to_ext_fields())
        }
        StartFrom::Earliest => {
            let header = GetMinOffsetRequestHeader {
                topic: topic.into(),
                queue_id: queue.queue_id,
                broker_name,
            };
            (request_code::GET_MIN_OFFSET, header.to_ext_fields())
        }
    };
    let response = connection.call(RemotingCommand::new_request(code, ext), REQUEST_TIMEOUT)?;
    let offset = response
        .ext_fields
        .get("offset")
        .and_then(|text| text.parse().ok());
    match (response.code, offset) {
        (response_code::SUCCESS, Some(offset)) => Ok(offset),
        (code, _) => Err(WorkloadError::Client(ClientError::Response {
            addr: connection.addr().into(),
            code,
            name: ringmq_protocol::code::response_code_name(code).unwrap_or("UNKNOWN"),
            remark: response.remark.unwrap_or_default(),
        })),
    }
}

struct QueueState {
    queue: MessageQueue,
    next_offset: i64,
    lag: i64,
    /// When to pull next; `None` while a pull is in flight.
    due: Instant,
}

type PullResult = (usize, Result<RemotingCommand, RequestError>);

struct Consumer {
    topic: String,
    group: String,
    brokers: Brokers,
    states: Vec<QueueState>,
    stats: StatsHandle,
    stop: Arc<AtomicBool>,
    measure: Measure,
}

impl Consumer {
    fn run(mut self) -> Lag {
        let (sender, receiver) = mpsc::channel::<PullResult>();
        let mut in_flight = vec![false; self.states.len()];
        let mut lag = Lag::default();
        while !self.stop.load(Ordering::Acquire) {
            let now = Instant::now();
            for (index, flying) in in_flight.iter_mut().enumerate() {
                if !*flying && self.states[index].due <= now {
                    *flying = self.pull(index, &sender);
                }
            }
            let wait = self
                .states
                .iter()
                .zip(&in_flight)
                .filter(|(_, flying)| !**flying)
                .map(|(state, _)| state.due.saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::from_millis(50))
                .min(Duration::from_millis(50));
            match receiver.recv_timeout(wait) {
                Ok((index, result)) => {
                    in_flight[index] = false;
                    self.handle(index, result, &mut lag);
                    while let Ok((index, result)) = receiver.try_recv() {
                        in_flight[index] = false;
                        self.handle(index, result, &mut lag);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        lag.final_total = self.states.iter().map(|state| state.lag).sum();
        lag
    }

    /// Sends a pull for queue `index`; false if it could not be sent.
    fn pull(&self, index: usize, sender: &mpsc::Sender<PullResult>) -> bool {
        let state = &self.states[index];
        let Some(connection) = self.brokers.connection(&state.queue.broker_name) else {
            return false;
        };
        let header = PullMessageRequestHeader {
            consumer_group: self.group.clone(),
            topic: self.topic.clone(),
            queue_id: state.queue.queue_id,
            queue_offset: state.next_offset,
            max_msg_nums: PULL_BATCH_SIZE,
            sys_flag: PullSysFlag::SUSPEND | PullSysFlag::SUBSCRIPTION,
            commit_offset: 0,
            suspend_timeout_millis: PULL_SUSPEND.as_millis() as i64,
            subscription: Some("*".into()),
            sub_version: 0,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
            request_source: None,
            proxy_forward_client_id: None,
            broker_name: Some(state.queue.broker_name.clone()),
        };
        let mut command =
            RemotingCommand::new_request(request_code::PULL_MESSAGE, header.to_ext_fields());
        command.opaque = connection.next_opaque();
        let mut bytes = Vec::new();
        if command
            .encode(ringmq_protocol::code::SerializeType::Json, &mut bytes)
            .is_err()
        {
            return false;
        }
        let sender = sender.clone();
        connection.register(
            command.opaque,
            PULL_SUSPEND + REQUEST_TIMEOUT,
            Box::new(move |result, _| {
                let _ = sender.send((index, result));
            }),
        );
        // A failed write completes the registration with `Closed`.
        let _ = connection.write_frames(&bytes);
        true
    }

    fn handle(
        &mut self,
        index: usize,
        result: Result<RemotingCommand, RequestError>,
        lag: &mut Lag,
    ) {
        let now = Instant::now();
        let state = &mut self.states[index];
        let response = match result {
            Ok(response) => response,
            Err(_) => {
                self.stats.with(|s| s.record_error(ERROR_CODE_NO_RESPONSE));
                state.due = now + ERROR_PULL_PAUSE;
                return;
            }
        };
        let header = PullMessageResponseHeader::from_ext(&response.ext_fields).ok();
        match response.code {
            response_code::SUCCESS => {
                let now_us = unix_us();
                let measure = &self.measure;
                self.stats.with(|s| {
                    for record in iter_pull_body(response.body_bytes(), CrcCheck::Skip) {
                        match record {
                            Ok(record) => record_arrival(s, measure, &record, now_us),
                            Err(_) => s.record_error(ERROR_CODE_NO_RESPONSE),
                        }
                    }
                });
                state.due = now;
            }
            response_code::PULL_NOT_FOUND
            | response_code::PULL_RETRY_IMMEDIATELY
            | response_code::PULL_OFFSET_MOVED => state.due = now + EMPTY_PULL_PAUSE,
            code => {
                self.stats.with(|s| s.record_error(code));
                state.due = now + ERROR_PULL_PAUSE;
                return;
            }
        }
        if let Some(header) = header {
            state.next_offset = header.next_begin_offset;
            state.lag = header.max_offset - header.next_begin_offset;
            lag.queue_max = lag.queue_max.max(state.lag);
        }
    }
}

/// Records one pulled message as `measure` says.
fn record_arrival(
    stats: &mut crate::hist::IntervalStats,
    measure: &Measure,
    record: &RecordView<'_>,
    now_us: u64,
) {
    let body_size = record.body().len() as u64;
    match measure {
        Measure::FromBorn => {
            let sent_us = record
                .property(crate::workload::SENT_US_PROPERTY)
                .and_then(|text| text.parse::<u64>().ok())
                .unwrap_or_else(|| record.born_timestamp_ms().max(0) as u64 * 1000);
            stats.record_success(now_us.saturating_sub(sent_us), 1, body_size);
        }
        Measure::FromDue {
            arrived,
            early_max_us,
        } => {
            let Some(due_us) = record
                .property(crate::delay::DUE_US_PROPERTY)
                .and_then(|text| text.parse::<u64>().ok())
            else {
                return;
            };
            arrived.fetch_add(1, Ordering::Relaxed);
            if now_us < due_us {
                stats.record_error(crate::hist::ERROR_CODE_EARLY);
                early_max_us.fetch_max(due_us - now_us, Ordering::Relaxed);
            } else {
                stats.record_success(now_us - due_us, 1, body_size);
            }
        }
    }
}

pub(crate) fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Runs the consume workload and writes the requested files.
///
/// # Errors
///
/// [`WorkloadError`] when the configuration is invalid, the route, a
/// broker or a start offset cannot be had, or a file cannot be written.
pub fn run_consume(config: &ConsumeConfig, outputs: &Outputs) -> Result<RunResult, WorkloadError> {
    let git_commit = crate::report::git_commit();
    let consumers = Consumers::start(config, Instant::now())?;
    let started_at_unix_ms = unix_us() / 1000;
    let start = Instant::now();
    let hlog = open_hlog(outputs)?;
    let collector = StatsCollector::new(consumers.handles.clone(), micros(config.warmup));
    let mut reporter = Reporter::new(collector, start, outputs.progress, hlog);
    let ran = reporter.run_until(start + config.warmup + config.duration);
    let route = consumers.route.clone();
    let lag = consumers.stop();
    ran?;
    let collector = reporter.finish(Instant::now())?;
    let mut config_members = config.to_json_members(&route);
    config_members.push(("workload".into(), "consume".into()));
    let info = RunInfo {
        name: outputs
            .name
            .clone()
            .unwrap_or_else(|| format!("consume-{}c", config.consumer_count)),
        command: outputs.command.clone(),
        git_commit,
        machine: Machine::detect(),
        config: config_members,
        started_at_unix_ms,
    };
    let total = collector.total().clone();
    let extra = vec![("consumer_lag".to_string(), lag.to_json())];
    let summary = write_outputs(info, &total, collector.measured_us(), outputs, extra)?;
    Ok(RunResult { summary, total })
}

/// What an e2e run measured: the produce run (latency of sends) and the
/// consume side (end-to-end latency from born timestamps), with lag.
#[derive(Debug, Clone)]
pub struct E2eResult {
    /// Produce side; its summary carries the `e2e` section.
    pub produce: RunResult,
    /// Consume side's measured statistics (end-to-end latency).
    pub consume: crate::hist::IntervalStats,
    /// Consumer lag at the end.
    pub lag: Lag,
}

/// Produces and consumes together: consumers start at the tail, then the
/// producers run with the consumers' intervals closed in step (so the same
/// warm-up is excluded); after the producers stop the consumers drain until
/// nothing arrives for [`E2E_QUIET`] or [`E2E_DRAIN_MAX`] has passed. The
/// JSON summary is the produce summary with an `e2e` section (end-to-end
/// percentiles, messages consumed, lag).
///
/// # Errors
///
/// As [`run_consume`] and [`crate::workload::run_produce`].
pub fn run_e2e(
    produce: &ProduceConfig,
    consume: &ConsumeConfig,
    outputs: &Outputs,
) -> Result<E2eResult, WorkloadError> {
    // Every message carries its send time in µs.
    let produce = &ProduceConfig {
        stamp_sent_us: true,
        ..produce.clone()
    };
    let consumers = Consumers::start(consume, Instant::now())?;
    let collector = StatsCollector::new(consumers.handles.clone(), micros(produce.warmup));
    let (produced, secondary) = run_produce_with(produce, outputs, Some(collector))?;
    let Some(Secondary {
        collector: mut consumed,
        start,
    }) = secondary
    else {
        return Err(WorkloadError::Config(
            "the e2e consumers were not driven".into(),
        ));
    };
    let deadline = Instant::now() + E2E_DRAIN_MAX;
    let mut quiet_since = Instant::now();
    while Instant::now() < deadline && quiet_since.elapsed() < E2E_QUIET {
        std::thread::sleep(E2E_QUIET / 10);
        let interval = consumed.close_interval(micros(start.elapsed()));
        if interval.stats.message_count > 0 {
            quiet_since = Instant::now();
        }
    }
    let lag = consumers.stop();
    consumed.close_interval(micros(start.elapsed()));
    let total = consumed.total().clone();
    let summary = attach_e2e(produced.summary, &total, lag, outputs)?;
    Ok(E2eResult {
        produce: RunResult {
            summary,
            total: produced.total,
        },
        consume: total,
        lag,
    })
}

fn attach_e2e(
    mut summary: crate::report::Summary,
    consumed: &crate::hist::IntervalStats,
    lag: Lag,
    outputs: &Outputs,
) -> Result<crate::report::Summary, WorkloadError> {
    let e2e = crate::report::LatencySummary::of(&consumed.message_latency);
    let mut members: Vec<(String, Json)> =
        vec![("msgs_consumed".into(), consumed.message_count.into())];
    for (key, value) in ["p50_us", "p90_us", "p99_us", "p999_us", "p9999_us"]
        .iter()
        .zip(e2e.percentiles_us)
    {
        members.push((key.to_string(), value.into()));
    }
    members.push(("max_us".into(), e2e.max_us.into()));
    members.push((
        "latency_from".into(),
        format!("{} (µs send time)", crate::workload::SENT_US_PROPERTY).into(),
    ));
    members.push(("errors".into(), consumed.error_count().into()));
    members.push(("consumer_lag".into(), lag.to_json()));
    summary.extra.push(("e2e".into(), Json::Object(members)));
    if let Some(path) = &outputs.json {
        std::fs::write(path, summary.to_json().to_pretty()).map_err(|source| {
            WorkloadError::Io {
                path: path.clone(),
                source,
            }
        })?;
    }
    Ok(summary)
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// Lag as a table line.
pub fn lag_line(lag: Lag) -> String {
    format!(
        "consumer lag: final {} msgs, max on one queue {} msgs",
        lag.final_total, lag.queue_max
    )
}

#[cfg(test)]
mod tests {
    use ringmq_protocol::message::{CrcCheck, RecordSpec, decode_record};

    use super::{Measure, record_arrival};
    use crate::hist::IntervalStats;

    /// The end-to-end latency recorded for one record with `properties`,
    /// born at `born_ms`, arriving at `now_us`.
    fn latency_of(properties: &str, born_ms: i64, now_us: u64) -> u64 {
        let spec = RecordSpec {
            topic: "E2e",
            body: b"body",
            properties: properties.as_bytes(),
            born_timestamp_ms: born_ms,
            ..RecordSpec::default()
        };
        let mut bytes = Vec::new();
        spec.encode_append(&mut bytes).unwrap();
        let record = decode_record(&bytes, CrcCheck::Verify).unwrap();
        let mut stats = IntervalStats::new();
        record_arrival(&mut stats, &Measure::FromBorn, &record, now_us);
        assert_eq!(stats.message_count, 1);
        stats.message_latency.max()
    }

    #[test]
    fn e2e_latency_is_measured_from_the_send_time_in_us_when_the_message_has_it() {
        // Sent at ...000_250 µs, born in that millisecond, here 730 µs later.
        let sent_us = 1_700_000_000_000_250;
        let properties = format!("WAIT\u{1}true\u{2}LOADGEN_SENT_US\u{1}{sent_us}\u{2}");
        assert_eq!(
            latency_of(&properties, 1_700_000_000_000, sent_us + 730),
            730
        );
        // Without it, from the born millisecond: 250 µs more.
        assert_eq!(
            latency_of("WAIT\u{1}true\u{2}", 1_700_000_000_000, sent_us + 730),
            980
        );
    }
}
