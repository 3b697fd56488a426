//! The `produce` workload: senders in one of four modes, closed loop or open
//! loop at a fixed rate, recording into per-sender statistics that the
//! reporter gathers each second; then the summary and its files.
//!
//! | mode | senders | per sender |
//! | --- | --- | --- |
//! | sync | N threads sharing one producer (one connection per broker) | one request outstanding; retried on another broker on failure |
//! | async | N threads, each with its own producer (N connections per broker) | up to M SEND_MESSAGE_V2 in flight |
//! | batch | as async | up to M SEND_BATCH_MESSAGE of K messages in flight |
//! | oneway | as async | SEND_MESSAGE_V2 marked one-way; latency is the time to hand the request to the socket |
//!
//! Only sync senders retry (on another broker, [`crate::client::SEND_RETRY_MAX`]
//! times, for the codes the Java producer retries); async, batch and oneway
//! requests that fail are counted by their code, not resent, so error
//! counts show what the broker answered.
//!
//! Latency is measured from the message's intended send time in open loop
//! (`--rate`, see [`crate::schedule`]) and from the moment the request was
//! built in closed loop. Failed requests are counted by response code and
//! carry no latency.
//!
//! # Invariants
//!
//! - A sender never has more than `inflight_max` requests in flight.
//! - Every request sent is recorded exactly once (success or error) before
//!   its sender finishes: senders drain their in-flight requests, which time
//!   out after [`crate::client::REQUEST_TIMEOUT`] at the latest.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ringmq_protocol::limits::MESSAGE_SIZE_MAX;

use crate::client::{Brokers, ClientError, QueueAccess, Route};
use crate::hgrm::Distribution;
use crate::hist::{IntervalStats, StatsCollector, StatsHandle};
use crate::hlog::{HlogError, HlogWriter};
use crate::json::Json;
use crate::report::{self, Machine, RunInfo, Summary};
use crate::reporter::Reporter;
use crate::schedule::{Clock, MonotonicClock, Schedule};
use crate::sender::{MessageFactory, Sender};

/// The most senders (threads) a run may start.
pub const SENDER_COUNT_MAX: usize = 4096;
/// The most requests in flight per sender.
pub const INFLIGHT_MAX: usize = 65_536;

/// How messages are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProduceMode {
    /// One request outstanding per sender.
    Sync,
    /// Pipelined SEND_MESSAGE_V2.
    Async,
    /// One-way SEND_MESSAGE_V2.
    Oneway,
    /// Pipelined SEND_BATCH_MESSAGE.
    Batch,
}

impl ProduceMode {
    /// The mode's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            ProduceMode::Sync => "sync",
            ProduceMode::Async => "async",
            ProduceMode::Oneway => "oneway",
            ProduceMode::Batch => "batch",
        }
    }
}

/// The property carrying a message's send time, µs since the Unix epoch
/// (see [`ProduceConfig::stamp_sent_us`]).
pub const SENT_US_PROPERTY: &str = "LOADGEN_SENT_US";

/// What to run.
#[derive(Debug, Clone)]
pub struct ProduceConfig {
    /// Name server `host:port`.
    pub namesrv: String,
    /// Topic.
    pub topic: String,
    /// Send mode.
    pub mode: ProduceMode,
    /// Body bytes per message.
    pub body_size: usize,
    /// Sender threads.
    pub sender_count: usize,
    /// Requests in flight per sender (async, batch).
    pub inflight_max: usize,
    /// Messages per batch (batch).
    pub batch_size: usize,
    /// Total open-loop rate in messages per second; `None` is closed loop.
    pub rate_per_s: Option<u64>,
    /// Queues per broker to use (default: the route's).
    pub queue_count: Option<i32>,
    /// Give every message a key and choose queues by its hash.
    pub keys: bool,
    /// A tag for every message.
    pub tags: Option<String>,
    /// Brokers group.
    pub producer_group: String,
    /// Put each message's send time (µs since the Unix epoch) in its
    /// [`SENT_US_PROPERTY`], for end-to-end latency finer than the born
    /// timestamp's milliseconds (e2e).
    pub stamp_sent_us: bool,
    /// Measured time.
    pub duration: Duration,
    /// Warm-up before it, excluded from results.
    pub warmup: Duration,
}

/// Where results go.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// Run name (default: derived from the configuration).
    pub name: Option<String>,
    /// The command line, for the summary.
    pub command: String,
    /// JSON summary path.
    pub json: Option<PathBuf>,
    /// `.hgrm` path.
    pub hgrm: Option<PathBuf>,
    /// Interval log path.
    pub hlog: Option<PathBuf>,
    /// Print the live progress line.
    pub progress: bool,
}

/// Workload errors.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The configuration cannot run.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Talking to the name server or a broker failed before the run.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The interval log could not be written.
    #[error(transparent)]
    Hlog(#[from] HlogError),
    /// A result file could not be written.
    #[error("writing {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A thread could not be started.
    #[error("starting a sender thread")]
    Spawn(#[source] io::Error),
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The summary (also written as JSON when asked).
    pub summary: Summary,
    /// The measured statistics, histograms included.
    pub total: IntervalStats,
}

impl ProduceConfig {
    fn validate(&self) -> Result<(), WorkloadError> {
        let fail = |message: String| Err(WorkloadError::Config(message));
        if !(1..=SENDER_COUNT_MAX).contains(&self.sender_count) {
            return fail(format!("senders must be 1..={SENDER_COUNT_MAX}"));
        }
        if !(1..=INFLIGHT_MAX).contains(&self.inflight_max) {
            return fail(format!("inflight must be 1..={INFLIGHT_MAX}"));
        }
        if self.batch_size == 0 {
            return fail("batch must be at least 1".into());
        }
        let request_body = match self.mode {
            ProduceMode::Batch => self.batch_size * (self.body_size + 64),
            _ => self.body_size,
        };
        if request_body > MESSAGE_SIZE_MAX as usize {
            return fail(format!(
                "a request body of ~{request_body} bytes exceeds {MESSAGE_SIZE_MAX}"
            ));
        }
        if self.rate_per_s == Some(0) {
            return fail("rate must be positive".into());
        }
        if self.duration.is_zero() {
            return fail("seconds must be positive".into());
        }
        Ok(())
    }

    fn default_name(&self) -> String {
        let mut name = format!(
            "{}-{}B-{}s",
            self.mode.name(),
            self.body_size,
            self.sender_count
        );
        match self.mode {
            ProduceMode::Async | ProduceMode::Oneway => name += &format!("x{}", self.inflight_max),
            ProduceMode::Batch => {
                name += &format!("x{}-k{}", self.inflight_max, self.batch_size);
            }
            ProduceMode::Sync => {}
        }
        if let Some(rate) = self.rate_per_s {
            name += &format!("-r{rate}");
        }
        name
    }

    fn to_json_members(&self, route: &Route) -> Vec<(String, Json)> {
        let optional = |value: Option<u64>| value.map_or(Json::Null, Json::from);
        vec![
            ("namesrv".into(), self.namesrv.as_str().into()),
            ("topic".into(), self.topic.as_str().into()),
            ("mode".into(), self.mode.name().into()),
            ("size".into(), (self.body_size as u64).into()),
            ("senders".into(), (self.sender_count as u64).into()),
            ("inflight".into(), (self.inflight_max as u64).into()),
            ("batch".into(), (self.batch_size as u64).into()),
            ("rate".into(), optional(self.rate_per_s)),
            ("queues".into(), (route.queues.len() as u64).into()),
            ("brokers".into(), (route.broker_addrs.len() as u64).into()),
            ("route_auto_create".into(), route.auto_create.into()),
            ("keys".into(), self.keys.into()),
            (
                "tags".into(),
                self.tags.as_deref().map_or(Json::Null, Json::from),
            ),
            ("seconds".into(), self.duration.as_secs_f64().into()),
            ("warmup".into(), self.warmup.as_secs_f64().into()),
        ]
    }
}

/// Runs the produce workload and writes the requested files.
///
/// # Errors
///
/// [`WorkloadError`] when the configuration is invalid, the route or a
/// broker cannot be reached, or a file cannot be written. Failed sends
/// during the run are results, not errors.
pub fn run_produce(config: &ProduceConfig, outputs: &Outputs) -> Result<RunResult, WorkloadError> {
    run_produce_with(config, outputs, None).map(|(result, _)| result)
}

/// What [`run_produce_with`] hands back besides the result: the secondary
/// collector, and the instant its times are measured from.
pub(crate) struct Secondary {
    pub(crate) collector: StatsCollector,
    pub(crate) start: Instant,
}

/// [`run_produce`], closing `secondary`'s intervals in step with its own.
pub(crate) fn run_produce_with(
    config: &ProduceConfig,
    outputs: &Outputs,
    secondary: Option<StatsCollector>,
) -> Result<(RunResult, Option<Secondary>), WorkloadError> {
    config.validate()?;
    let git_commit = report::git_commit();
    let route = Route::lookup(
        &config.namesrv,
        &config.topic,
        config.queue_count,
        QueueAccess::Write,
    )?;
    let origin = Instant::now();
    let clock = MonotonicClock::new(origin);
    let stop = Arc::new(AtomicBool::new(false));

    let mut handles = Vec::new();
    let mut senders: Vec<JoinHandle<()>> = Vec::new();
    let shared_producer = match config.mode {
        ProduceMode::Sync => Some(Arc::new(Brokers::connect(route.clone(), origin)?)),
        _ => None,
    };
    let mut producers = Vec::new();
    for _ in 0..config.sender_count {
        let producer = match &shared_producer {
            Some(shared) => Arc::clone(shared),
            None => Arc::new(Brokers::connect(route.clone(), origin)?),
        };
        producers.push(producer);
    }

    let hlog = open_hlog(outputs)?;
    let started_at_unix_ms = unix_ms();
    let start = Instant::now();
    let start_ns = clock.now_ns();
    for (index, producer) in producers.into_iter().enumerate() {
        let stats = StatsHandle::new();
        handles.push(stats.clone());
        let sender = Sender {
            config: config.clone(),
            producer,
            stats,
            stop: Arc::clone(&stop),
            clock,
            schedule: config.rate_per_s.map(|rate| {
                Schedule::new(start_ns, rate, config.sender_count as u64, index as u64)
            }),
            messages: MessageFactory::new(config, index),
        };
        let thread = std::thread::Builder::new()
            .name(format!("sender {index}"))
            .spawn(move || sender.run())
            .map_err(WorkloadError::Spawn)?;
        senders.push(thread);
    }

    let collector = StatsCollector::new(handles, micros(config.warmup));
    let mut reporter = Reporter::new(collector, start, outputs.progress, hlog);
    if let Some(secondary) = secondary {
        reporter = reporter.with_secondary(secondary);
    }
    let run_result = reporter.run_until(start + config.warmup + config.duration);
    stop.store(true, Ordering::Release);
    for sender in senders {
        // A sender that panicked has recorded what it could; the run still
        // reports.
        let _ = sender.join();
    }
    run_result?;
    let (collector, secondary) = reporter.finish_both(Instant::now())?;

    let info = RunInfo {
        name: outputs
            .name
            .clone()
            .unwrap_or_else(|| config.default_name()),
        command: outputs.command.clone(),
        git_commit,
        machine: Machine::detect(),
        config: config.to_json_members(&route),
        started_at_unix_ms,
    };
    let total = collector.total().clone();
    let summary = write_outputs(info, &total, collector.measured_us(), outputs, Vec::new())?;
    let secondary = secondary.map(|collector| Secondary { collector, start });
    Ok((RunResult { summary, total }, secondary))
}

/// Creates the interval log `outputs` asks for, if any.
///
/// # Errors
///
/// [`WorkloadError::Io`] or [`WorkloadError::Hlog`].
pub(crate) fn open_hlog(
    outputs: &Outputs,
) -> Result<Option<HlogWriter<BufWriter<File>>>, WorkloadError> {
    match &outputs.hlog {
        Some(path) => {
            let file = File::create(path).map_err(|source| io_error(path, source))?;
            Ok(Some(HlogWriter::new(
                BufWriter::new(file),
                SystemTime::now(),
            )?))
        }
        None => Ok(None),
    }
}

/// Builds the summary of `total` (with `extra` sections) and writes the
/// `.hgrm` and JSON files that `outputs` asks for.
///
/// # Errors
///
/// [`WorkloadError::Io`] when a file cannot be written.
pub fn write_outputs(
    info: RunInfo,
    total: &IntervalStats,
    measured_us: u64,
    outputs: &Outputs,
    extra: Vec<(String, Json)>,
) -> Result<Summary, WorkloadError> {
    let mut summary = Summary::new(info, total, measured_us);
    summary.extra = extra;
    if let Some(path) = &outputs.hgrm {
        let text = Distribution::of(&total.message_latency).write();
        std::fs::write(path, text).map_err(|source| io_error(path, source))?;
        summary
            .files
            .push(("hgrm".into(), path.display().to_string()));
    }
    if let Some(path) = &outputs.hlog {
        summary
            .files
            .push(("hlog".into(), path.display().to_string()));
    }
    if let Some(path) = &outputs.json {
        std::fs::write(path, summary.to_json().to_pretty())
            .map_err(|source| io_error(path, source))?;
    }
    Ok(summary)
}

fn io_error(path: &Path, source: io::Error) -> WorkloadError {
    WorkloadError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn config(mode: ProduceMode) -> ProduceConfig {
        ProduceConfig {
            namesrv: "127.0.0.1:1".into(),
            topic: "t".into(),
            mode,
            body_size: 100,
            sender_count: 1,
            inflight_max: 4,
            batch_size: 8,
            rate_per_s: None,
            queue_count: None,
            keys: false,
            tags: Some("tagA".into()),
            producer_group: "g".into(),
            stamp_sent_us: false,
            duration: Duration::from_secs(1),
            warmup: Duration::ZERO,
        }
    }

    #[test]
    fn validate_rejects_an_oversized_batch_and_zero_rate() {
        let mut big = config(ProduceMode::Batch);
        big.batch_size = 100_000;
        assert!(matches!(big.validate(), Err(WorkloadError::Config(_))));
        let mut zero_rate = config(ProduceMode::Async);
        zero_rate.rate_per_s = Some(0);
        assert!(matches!(
            zero_rate.validate(),
            Err(WorkloadError::Config(_))
        ));
        assert!(config(ProduceMode::Sync).validate().is_ok());
    }

    #[test]
    fn default_name_describes_the_workload() {
        assert_eq!(
            config(ProduceMode::Batch).default_name(),
            "batch-100B-1sx4-k8"
        );
        let mut open = config(ProduceMode::Sync);
        open.rate_per_s = Some(500);
        assert_eq!(open.default_name(), "sync-100B-1s-r500");
    }
}
