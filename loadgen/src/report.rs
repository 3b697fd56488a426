//! Run summaries: what a run measured, with the command, commit, machine and
//! configuration that produced it; printed as a table and as RocketMQ's own
//! benchmark line, saved as JSON (`--json-out`), `.hgrm` and interval logs,
//! and read back by `compare` and `plot`.
//!
//! JSON summary (every latency in microseconds, `mb_per_s` in 10^6 bytes/s):
//!
//! ```text
//! { "name", "command", "git_commit", "machine": {"nproc", "kernel"},
//!   "config": {...}, "started_at_unix_ms", "measured_s",
//!   "msgs", "bytes", "requests", "msgs_per_s", "mb_per_s",
//!   "errors", "errors_by_code": {"<code>": count},
//!   "p50_us", "p90_us", "p99_us", "p999_us", "p9999_us", "max_us", "mean_us",
//!   "request_latency": {"p50_us", ..., "max_us", "mean_us", "count"},
//!   "latency_clamped", "files": {"hgrm", "hlog"},
//!   "percentiles": [[value_us, percentile, total_count], ...] }
//! ```
//!
//! `percentiles` is the per-message distribution as in the `.hgrm` file, so
//! `plot` can draw a run from its JSON alone.
//!
//! # Invariants
//!
//! - The top-level percentile keys describe per-message latency; for batches,
//!   `request_latency` holds the per-request one.
//! - A summary read back from its JSON equals the one written (numbers to
//!   `f64` precision).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;

use hdrhistogram::Histogram;

use crate::hgrm::{Distribution, PercentilePoint};
use crate::hist::IntervalStats;
use crate::json::{self, Json};

/// The percentiles every report shows, as fractions, with their key names.
pub const PERCENTILES: [(f64, &str); 5] = [
    (0.50, "p50"),
    (0.90, "p90"),
    (0.99, "p99"),
    (0.999, "p99.9"),
    (0.9999, "p99.99"),
];

const PERCENTILE_KEYS: [&str; 5] = ["p50_us", "p90_us", "p99_us", "p999_us", "p9999_us"];

/// Bytes in the `MB` of `mb_per_s`.
pub const BYTES_PER_MB: f64 = 1_000_000.0;

/// Why a summary file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    /// The text is not JSON.
    #[error(transparent)]
    Json(#[from] json::JsonError),
    /// A required key is absent or of the wrong type.
    #[error("summary lacks the key {0:?} (or it has the wrong type)")]
    MissingKey(&'static str),
}

/// The machine a run ran on.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// CPUs available to the process.
    pub nproc: u64,
    /// Kernel name and release, from `uname`.
    pub kernel: String,
}

impl Machine {
    /// Reads the CPU count and `uname`.
    pub fn detect() -> Self {
        let nproc = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        Self {
            nproc,
            kernel: kernel_name(),
        }
    }
}

fn kernel_name() -> String {
    // SAFETY: `utsname` is plain old data (arrays of c_char), so all-zero is
    // a valid value, and uname(2) writes only inside the struct we pass.
    let mut name: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is a valid, writable utsname for the whole call.
    let rc = unsafe { libc::uname(&mut name) };
    if rc != 0 {
        return "unknown".to_string();
    }
    let field = |raw: &[libc::c_char]| {
        let bytes: Vec<u8> = raw
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    format!(
        "{} {} {}",
        field(&name.sysname),
        field(&name.release),
        field(&name.machine)
    )
}

/// The commit of the working directory's git repository (`git rev-parse
/// HEAD`), or `"unknown"`.
pub fn git_commit() -> String {
    Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|text| text.trim().to_string())
        .filter(|text| !text.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// Where and how a run was made.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// Short name of the run (legend in plots, column in compare).
    pub name: String,
    /// The command line.
    pub command: String,
    /// `git rev-parse HEAD` at start.
    pub git_commit: String,
    /// The machine.
    pub machine: Machine,
    /// Workload settings, in order.
    pub config: Vec<(String, Json)>,
    /// Wall-clock start, milliseconds since the Unix epoch.
    pub started_at_unix_ms: u64,
}

/// Latency percentiles of one histogram, in µs.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencySummary {
    /// Values at [`PERCENTILES`], in order.
    pub percentiles_us: [f64; 5],
    /// Largest value.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Samples.
    pub count: u64,
}

impl LatencySummary {
    /// Summarizes `histogram`; all zero when it is empty.
    pub fn of(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return Self {
                percentiles_us: [0.0; 5],
                max_us: 0.0,
                mean_us: 0.0,
                count: 0,
            };
        }
        let percentiles_us =
            PERCENTILES.map(|(quantile, _)| histogram.value_at_quantile(quantile) as f64);
        Self {
            percentiles_us,
            max_us: histogram.highest_equivalent(histogram.max()) as f64,
            mean_us: histogram.mean(),
            count: histogram.len(),
        }
    }

    fn write_keys(&self, members: &mut Vec<(String, Json)>) {
        for (key, value) in PERCENTILE_KEYS.iter().zip(self.percentiles_us) {
            members.push((key.to_string(), value.into()));
        }
        members.push(("max_us".into(), self.max_us.into()));
        members.push(("mean_us".into(), self.mean_us.into()));
    }

    fn read_keys(object: &Json, count: u64) -> Result<Self, SummaryError> {
        let mut percentiles_us = [0.0; 5];
        for (slot, key) in percentiles_us.iter_mut().zip(PERCENTILE_KEYS) {
            *slot = number(object, key)?;
        }
        Ok(Self {
            percentiles_us,
            max_us: number(object, "max_us")?,
            mean_us: number(object, "mean_us")?,
            count,
        })
    }
}

/// What a run measured, with its context.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Where and how.
    pub info: RunInfo,
    /// Measured time (warm-up excluded), seconds.
    pub measured_s: f64,
    /// Messages acknowledged.
    pub msgs: u64,
    /// Body bytes acknowledged.
    pub bytes: u64,
    /// Requests answered (success or error).
    pub requests: u64,
    /// Failed requests by response code.
    pub errors_by_code: BTreeMap<i32, u64>,
    /// Per-message latency.
    pub message_latency: LatencySummary,
    /// Per-request latency.
    pub request_latency: LatencySummary,
    /// Latencies clamped to the histogram's max.
    pub latency_clamped: u64,
    /// Paths of the files written beside the JSON.
    pub files: Vec<(String, String)>,
    /// Per-message percentile distribution.
    pub distribution: Vec<PercentilePoint>,
    /// Further sections (e2e latency, consumer lag), written after the
    /// standard keys and read back as they are.
    pub extra: Vec<(String, Json)>,
}

/// The members [`Summary::to_json`] writes itself; others are `extra`.
const STANDARD_KEYS: &[&str] = &[
    "name",
    "command",
    "git_commit",
    "machine",
    "config",
    "started_at_unix_ms",
    "measured_s",
    "msgs",
    "bytes",
    "requests",
    "msgs_per_s",
    "mb_per_s",
    "errors",
    "errors_by_code",
    "p50_us",
    "p90_us",
    "p99_us",
    "p999_us",
    "p9999_us",
    "max_us",
    "mean_us",
    "request_latency",
    "latency_clamped",
    "files",
    "percentiles",
];

impl Summary {
    /// Builds the summary of `stats` measured over `measured_us`.
    pub fn new(info: RunInfo, stats: &IntervalStats, measured_us: u64) -> Self {
        Self {
            info,
            measured_s: measured_us as f64 / 1e6,
            msgs: stats.message_count,
            bytes: stats.byte_count,
            requests: stats.request_count,
            errors_by_code: stats.errors_by_code.clone(),
            message_latency: LatencySummary::of(&stats.message_latency),
            request_latency: LatencySummary::of(&stats.request_latency),
            latency_clamped: stats.clamped_count,
            files: Vec::new(),
            distribution: Distribution::of(&stats.message_latency).points,
            extra: Vec::new(),
        }
    }

    /// Messages per second of measured time.
    pub fn msgs_per_s(&self) -> f64 {
        per_second(self.msgs as f64, self.measured_s)
    }

    /// Megabytes (10^6 bytes) of bodies per second of measured time.
    pub fn mb_per_s(&self) -> f64 {
        per_second(self.bytes as f64 / BYTES_PER_MB, self.measured_s)
    }

    /// Failed requests.
    pub fn errors(&self) -> u64 {
        self.errors_by_code.values().sum()
    }

    /// The summary table printed at the end of a run.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "run        {}", self.info.name);
        let _ = writeln!(out, "measured   {:.1} s", self.measured_s);
        let _ = writeln!(out, "msgs/s     {:.0}", self.msgs_per_s());
        let _ = writeln!(out, "MB/s       {:.2}", self.mb_per_s());
        let _ = writeln!(
            out,
            "msgs       {}  (requests {})",
            self.msgs, self.requests
        );
        let _ = writeln!(out, "errors     {}", self.errors());
        for (code, count) in &self.errors_by_code {
            let _ = writeln!(out, "  {:>6} {:<28} {}", code, code_name(*code), count);
        }
        let _ = write!(out, "latency µs ");
        for (_, name) in PERCENTILES {
            let _ = write!(out, "{name:>9}");
        }
        let _ = writeln!(out, "{:>11}", "max");
        let rows = [
            ("message", &self.message_latency),
            ("request", &self.request_latency),
        ];
        for (label, latency) in rows {
            let _ = write!(out, "  {label:<8} ");
            for value in latency.percentiles_us {
                let _ = write!(out, "{value:>9.0}");
            }
            let _ = writeln!(out, "{:>11.0}", latency.max_us);
        }
        if self.latency_clamped > 0 {
            let _ = writeln!(
                out,
                "warning: {} latencies clamped to 1 h",
                self.latency_clamped
            );
        }
        out
    }

    /// RocketMQ's benchmark `Producer` line for the whole run, for readers
    /// used to its numbers: TPS counts acknowledged messages, RT is per
    /// request in milliseconds.
    pub fn rocketmq_line(&self) -> String {
        let no_response = self
            .errors_by_code
            .get(&crate::hist::ERROR_CODE_NO_RESPONSE);
        let response_failed = self.errors() - no_response.copied().unwrap_or(0);
        format!(
            "Send TPS: {:.0} | Max RT(ms): {:.0} | Average RT(ms): {:7.3} | Send Failed: {} | \
             Response Failed: {}",
            self.msgs_per_s(),
            (self.request_latency.max_us / 1000.0).round(),
            self.request_latency.mean_us / 1000.0,
            no_response.copied().unwrap_or(0),
            response_failed
        )
    }

    /// The JSON summary.
    pub fn to_json(&self) -> Json {
        let info = &self.info;
        let mut members: Vec<(String, Json)> = vec![
            ("name".into(), info.name.as_str().into()),
            ("command".into(), info.command.as_str().into()),
            ("git_commit".into(), info.git_commit.as_str().into()),
            (
                "machine".into(),
                Json::Object(vec![
                    ("nproc".into(), info.machine.nproc.into()),
                    ("kernel".into(), info.machine.kernel.as_str().into()),
                ]),
            ),
            ("config".into(), Json::Object(info.config.clone())),
            ("started_at_unix_ms".into(), info.started_at_unix_ms.into()),
            ("measured_s".into(), self.measured_s.into()),
            ("msgs".into(), self.msgs.into()),
            ("bytes".into(), self.bytes.into()),
            ("requests".into(), self.requests.into()),
            ("msgs_per_s".into(), self.msgs_per_s().into()),
            ("mb_per_s".into(), self.mb_per_s().into()),
            ("errors".into(), self.errors().into()),
            (
                "errors_by_code".into(),
                Json::Object(
                    self.errors_by_code
                        .iter()
                        .map(|(code, count)| (code.to_string(), (*count).into()))
                        .collect(),
                ),
            ),
        ];
        self.message_latency.write_keys(&mut members);
        let mut request = Vec::new();
        self.request_latency.write_keys(&mut request);
        request.push(("count".into(), self.request_latency.count.into()));
        members.push(("request_latency".into(), Json::Object(request)));
        members.push(("latency_clamped".into(), self.latency_clamped.into()));
        let files = self
            .files
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().into()))
            .collect();
        members.push(("files".into(), Json::Object(files)));
        let points = self
            .distribution
            .iter()
            .map(|point| {
                Json::Array(vec![
                    point.value_us.into(),
                    point.percentile.into(),
                    point.total_count.into(),
                ])
            })
            .collect();
        members.push(("percentiles".into(), Json::Array(points)));
        members.extend(self.extra.iter().cloned());
        Json::Object(members)
    }

    /// Reads a summary written by [`Summary::to_json`].
    ///
    /// # Errors
    ///
    /// [`SummaryError`] when the text is not JSON or a key is missing.
    pub fn parse(text: &str) -> Result<Self, SummaryError> {
        let root = json::parse(text)?;
        let machine = root
            .get("machine")
            .ok_or(SummaryError::MissingKey("machine"))?;
        let config = match root.get("config") {
            Some(Json::Object(members)) => members.clone(),
            _ => return Err(SummaryError::MissingKey("config")),
        };
        let info = RunInfo {
            name: string(&root, "name")?,
            command: string(&root, "command")?,
            git_commit: string(&root, "git_commit")?,
            machine: Machine {
                nproc: number(machine, "nproc")? as u64,
                kernel: string(machine, "kernel")?,
            },
            config,
            started_at_unix_ms: number(&root, "started_at_unix_ms")? as u64,
        };
        let mut errors_by_code = BTreeMap::new();
        if let Some(Json::Object(members)) = root.get("errors_by_code") {
            for (code, count) in members {
                let code = code
                    .parse()
                    .map_err(|_| SummaryError::MissingKey("errors_by_code"))?;
                let count = count
                    .as_f64()
                    .ok_or(SummaryError::MissingKey("errors_by_code"))?;
                errors_by_code.insert(code, count as u64);
            }
        }
        let msgs = number(&root, "msgs")? as u64;
        let request = root
            .get("request_latency")
            .ok_or(SummaryError::MissingKey("request_latency"))?;
        let files = match root.get("files") {
            Some(Json::Object(members)) => members
                .iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect(),
            _ => Vec::new(),
        };
        let mut distribution = Vec::new();
        for point in root
            .get("percentiles")
            .and_then(Json::as_array)
            .unwrap_or(&[])
        {
            let fields = point
                .as_array()
                .ok_or(SummaryError::MissingKey("percentiles"))?;
            let field = |index: usize| {
                fields
                    .get(index)
                    .and_then(Json::as_f64)
                    .ok_or(SummaryError::MissingKey("percentiles"))
            };
            distribution.push(PercentilePoint {
                value_us: field(0)?,
                percentile: field(1)?,
                total_count: field(2)? as u64,
            });
        }
        Ok(Self {
            info,
            measured_s: number(&root, "measured_s")?,
            msgs,
            bytes: number(&root, "bytes")? as u64,
            requests: number(&root, "requests")? as u64,
            errors_by_code,
            message_latency: LatencySummary::read_keys(&root, msgs)?,
            request_latency: LatencySummary::read_keys(request, number(request, "count")? as u64)?,
            latency_clamped: number(&root, "latency_clamped").unwrap_or(0.0) as u64,
            files,
            distribution,
            extra: match &root {
                Json::Object(members) => members
                    .iter()
                    .filter(|(key, _)| !STANDARD_KEYS.contains(&key.as_str()))
                    .cloned()
                    .collect(),
                _ => Vec::new(),
            },
        })
    }
}

fn per_second(amount: f64, seconds: f64) -> f64 {
    if seconds > 0.0 { amount / seconds } else { 0.0 }
}

fn number(object: &Json, key: &'static str) -> Result<f64, SummaryError> {
    object
        .get(key)
        .and_then(Json::as_f64)
        .ok_or(SummaryError::MissingKey(key))
}

fn string(object: &Json, key: &'static str) -> Result<String, SummaryError> {
    object
        .get(key)
        .and_then(Json::as_str)
        .map(str::to_string)
        .ok_or(SummaryError::MissingKey(key))
}

/// The RocketMQ name of a response code, or a loadgen-specific name.
pub fn code_name(code: i32) -> &'static str {
    match code {
        crate::hist::ERROR_CODE_NO_RESPONSE => "NO_RESPONSE (timeout/closed)",
        crate::hist::ERROR_CODE_EARLY => "EARLY (delivered before its due time)",
        crate::hist::ERROR_CODE_OTHER => "OTHER (too many codes)",
        code => ringmq_protocol::code::response_code_name(code).unwrap_or("UNKNOWN"),
    }
}

/// The live progress line for one interval: its rate, and the p99 and
/// error count of `so_far` (the measured intervals up to this one).
pub fn progress_line(
    elapsed_s: f64,
    interval: &crate::hist::Interval,
    so_far: &IntervalStats,
) -> String {
    let seconds = interval.length_us as f64 / 1e6;
    let p99 = if so_far.message_latency.is_empty() {
        0
    } else {
        so_far.message_latency.value_at_quantile(0.99)
    };
    format!(
        "{:>6.1}s{} {:>10.0} msgs/s {:>8.2} MB/s  p99 {:>8} µs  errors {}",
        elapsed_s,
        if interval.is_warmup { " (warm-up)" } else { "" },
        per_second(interval.stats.message_count as f64, seconds),
        per_second(interval.stats.byte_count as f64 / BYTES_PER_MB, seconds),
        p99,
        so_far.error_count(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_summary() -> Summary {
        let mut stats = IntervalStats::new();
        for latency in 1..=1000 {
            stats.record_success(latency * 10, 4, 400);
        }
        stats.record_error(17);
        stats.record_error(crate::hist::ERROR_CODE_NO_RESPONSE);
        let info = RunInfo {
            name: "ringmq-async".into(),
            command: "ringmq-loadgen produce --mode batch".into(),
            git_commit: "abc".into(),
            machine: Machine {
                nproc: 2,
                kernel: "Linux 6.1 x86_64".into(),
            },
            config: vec![
                ("size".into(), 100_u64.into()),
                ("mode".into(), "batch".into()),
            ],
            started_at_unix_ms: 1_764_576_000_000,
        };
        let mut summary = Summary::new(info, &stats, 2_000_000);
        summary.files.push(("hgrm".into(), "run.hgrm".into()));
        summary
    }

    #[test]
    fn summary_rates_use_measured_time() {
        let summary = sample_summary();
        assert_eq!(summary.msgs, 4000);
        assert_eq!(summary.msgs_per_s(), 2000.0);
        assert_eq!(summary.mb_per_s(), 400_000.0 / 1e6 / 2.0);
        assert_eq!(summary.errors(), 2);
    }

    #[test]
    fn json_has_the_required_keys_and_reads_back_equal() {
        let summary = sample_summary();
        let json = summary.to_json();
        for key in [
            "msgs_per_s",
            "mb_per_s",
            "errors",
            "p50_us",
            "p90_us",
            "p99_us",
            "p999_us",
            "p9999_us",
            "max_us",
            "command",
            "git_commit",
            "machine",
            "config",
        ] {
            assert!(json.get(key).is_some(), "missing {key}");
        }
        let back = Summary::parse(&json.to_pretty()).unwrap();
        assert_eq!(back, summary);
    }

    #[test]
    fn percentiles_come_from_the_histogram() {
        let summary = sample_summary();
        let p50 = summary.message_latency.percentiles_us[0];
        assert!((p50 - 5000.0).abs() <= 5.0, "{p50}");
        assert!((summary.message_latency.max_us - 10_000.0).abs() <= 10.0);
    }

    #[test]
    fn rocketmq_line_has_tps_and_rt_in_milliseconds() {
        let line = sample_summary().rocketmq_line();
        assert!(
            line.starts_with("Send TPS: 2000 | Max RT(ms): 10 | Average RT(ms):   5.00"),
            "{line}"
        );
        assert!(
            line.ends_with("Send Failed: 1 | Response Failed: 1"),
            "{line}"
        );
    }

    #[test]
    fn table_names_error_codes() {
        let table = sample_summary().table();
        assert!(table.contains("NO_RESPONSE"), "{table}");
        assert!(table.contains("msgs/s     2000"), "{table}");
    }

    #[test]
    fn progress_line_shows_rate_p99_and_errors() {
        let mut stats = IntervalStats::new();
        for latency in 1..=100 {
            stats.record_success(latency, 1, 1000);
        }
        stats.record_error(2);
        let interval = crate::hist::Interval {
            index: 3,
            start_us: 3_000_000,
            length_us: 500_000,
            is_warmup: false,
            stats: stats.clone(),
        };
        let line = progress_line(3.5, &interval, &stats);
        assert!(line.contains("   200 msgs/s"), "{line}");
        assert!(line.contains("0.20 MB/s"), "{line}");
        assert!(line.contains("p99       99 µs"), "{line}");
        assert!(line.ends_with("errors 1"), "{line}");
    }

    #[test]
    fn parse_reports_a_missing_key() {
        let error = Summary::parse("{\"name\": \"x\"}").unwrap_err();
        assert!(
            matches!(error, SummaryError::MissingKey("machine")),
            "{error}"
        );
    }
}
