//! storage-bench: the disk floor and the store's append path, measured in
//! one run on the same directory, so the store's numbers can be read against
//! what the disk itself can do.
//!
//! ```text
//! storage-bench --dir PATH --flush sync|async --record-size BYTES \
//!               --inflight N --seconds S [--appends-per-turn N] [--shards N] \
//!               [--recover | --reopen] [--json]
//! ```
//!
//! Phases, in order:
//! 1. Floor, with `UringDisk` on a preallocated, zero-filled O_DIRECT file:
//!    - `floor_fsync4k_*`: 4 KiB write linked to an fdatasync, one pair at a
//!      time, sequential offsets; latency of each pair;
//!    - `floor_direct_mb_per_s`: 1 MiB O_DIRECT writes,
//!      [`FLOOR_DIRECT_IN_FLIGHT`] in flight, no fdatasync;
//!    - `floor_commit1m_mb_per_s`, `floor_commit1m_p50_us`,
//!      `floor_commit1m_p99_us`: 1 MiB write linked to an fdatasync, one
//!      at a time;
//!    - `floor_sync_inflight_*`: the run's bytes in flight (`--inflight` ×
//!      `--record-size`) as [`COMMITS_IN_FLIGHT_MAX`] writes
//!      (`floor_sync_inflight_pair_bytes` each), each linked to its
//!      fdatasync and resubmitted as soon as both complete (the store's
//!      SYNC_FLUSH shape until the group fdatasync replaced it), on a file
//!      of its own. `floor_sync_inflight_ordered_*` ends each pair's
//!      latency when it and every pair submitted before it are done, as a
//!      SYNC_FLUSH ack waits for the durable prefix;
//!    - `floor_sync_group_*`: the same writes without links, and one
//!      fdatasync at a time covering every write completed before it (a
//!      write's latency ends with the fdatasync that covered it): the
//!      store's SYNC_FLUSH shape, with nothing but the disk in it;
//!    - `floor_direct_inflight_mb_per_s`: the same writes with no
//!      fdatasync at all, so only the run's bytes are in flight (up to
//!      eight 1 MiB writes) where `floor_direct_mb_per_s` keeps four 1 MiB
//!      writes: what the disk writes in ASYNC_FLUSH's shape;
//!    - `floor_direct_fresh_mb_per_s`, `floor_commit1m_fresh_*`,
//!      `floor_fsync4k_fresh_*`, `floor_sync_group_fresh_*`,
//!      `floor_direct_inflight_fresh_mb_per_s`: the same on
//!      freshly fallocated files (no zero fill), once through, so every
//!      write lands on an unwritten extent, as appends into a segment
//!      created under sustained load do: ext4 converts the extent when each
//!      write completes, and each fdatasync also commits its journal. The
//!      floors above are of written extents, which appends reach in
//!      recycled segments (`--eager-retention`).
//! 2. Append (`--seconds` > 0): after `--idle-seconds` of idle polling (the
//!    store's background zero fill then writes the first segment, so
//!    appends land on written extents until it is full), the shard's
//!    `Store` on `UringDisk`, closed loop with `--inflight` appends
//!    outstanding, in turns of at most `--appends-per-turn` appends
//!    followed by a ring turn (non-blocking
//!    while more may be appended, waiting otherwise), as a shard loop runs;
//!    latency from the start of the turn that appended a record to the ring
//!    turn that acked it (one clock reading per turn, as a shard takes one
//!    per turn: a record appended late in its turn is charged from the
//!    turn's start, so latencies are slightly overstated, never
//!    understated). `records_per_commit` counts
//!    CommitLog commits only; `segments_created_ahead` and
//!    `rollovers_waited` count background segment creations and roll-overs
//!    that had to wait for one. `cpu_user_s` and `cpu_sys_s` are the
//!    CPU time of the appending thread(s) during the phase, and `cpu_us_per_mb`
//!    their sum over the MB acknowledged: the append path's CPU cost, which
//!    varies much less from run to run than the disk does
//!    (`cpu_user_us_per_mb` and `cpu_sys_us_per_mb` split it: user time is
//!    the store's own code, system time mostly the ring's submissions).
//!    With `--shards N` (default 1) N such loops run at once, each with its
//!    own store (shard ids 0..N under `--dir`), thread, ring and disk,
//!    shard `i` pinned to the `i`-th CPU as the broker pins its shards, all
//!    starting together; `mb_per_s`, `appends_per_s` and `fsyncs_per_s` are
//!    their sums over the longest shard's phase, the latencies their merged
//!    histogram, `cpu_*` the threads' sum, and `shard_mb_per_s_min`/`_max`
//!    the slowest and fastest shard over that same phase (so the total is
//!    their sum). With 1 the loop runs on the main thread, unpinned, so the
//!    kernel's helpers (io-wq workers, the block layer's kworkers) may run
//!    on the other CPUs.
//!    With `--queues N` the records go to the bench topic's queues 0..N in
//!    turn (default: all to queue 0). `rss_max_mb` is the process's largest
//!    resident set, which counts the page cache pages that the stores'
//!    views of files have touched; `rss_anon_mb` the anonymous part of it
//!    when the phase ends (the stores' own memory: ConsumeQueue and index
//!    images, buffers).
//!    With `--warmup-seconds` the counters start after that many seconds of
//!    appends. `--eager-retention` retires every segment behind the active
//!    one as soon as it is durable, as a store at its disk budget does, so
//!    that after the first segments new ones are renamed spares
//!    (`segments_recycled`) whose extents are written; with
//!    `--recycle-segments 0` every retired segment is unlinked, shrunk first
//!    in steps when `--remove-step-bytes` is set (`segment_removal_steps`).
//! 3. Recover (`--recover`): marks the store as not shut down (abort file)
//!    and times the abnormal recovery of `Store::open`. `recover_log_bytes`
//!    is the CommitLog recovered, `recover_scan_bytes` what the scan read
//!    (from the checkpointed segment on; all of the log when
//!    `recover_derived_rebuilt=1`).
//!    Reopen (`--reopen`): times `Store::open` of the store the append phase
//!    shut down cleanly (no abort file), with the same keys under `reopen_`:
//!    what a broker restart costs, ConsumeQueue loading included. Both also
//!    time the shutdown right after the open (`*_shutdown_ms`).
//!
//! Output: one line of `key=value` pairs, or a JSON object (`--json`).
//! MB are 10^6 bytes; latencies are microseconds.
//!
//! After the floor and append phases come issue 3's targets, computed from
//! this run's floors, and whether the run met them (`meets_*`: 1 or 0):
//! SYNC_FLUSH `target_mb_per_s` (60 % of `floor_commit1m_mb_per_s`) and
//! `target_p99_us` (`floor_fsync4k_p99_us` + 1 ms), ASYNC_FLUSH
//! `target_mb_per_s` (70 % of `floor_direct_mb_per_s`); the same against the
//! fresh floors (`target_fresh_*`, `meets_fresh_*`); and whether the disk
//! alone, in the store's shape on fresh extents, meets the issue's targets
//! (`floor_sync_group_fresh_meets_*`, `floor_direct_fresh_meets_mb_per_s`):
//! where it does not, a growing log cannot either. For ASYNC_FLUSH also
//! whether the disk alone with only the run's bytes in flight meets it
//! (`floor_direct_inflight_meets_mb_per_s`, and on fresh extents
//! `floor_direct_inflight_fresh_meets_mb_per_s`): where it does not, no
//! store with that many appends in flight can (on such extents).
//!
//! # Invariants
//! - Floor and append phases use separate files under `--dir`; the floor
//!   file is removed afterwards.
//! - Every operation submitted is waited for before the phase ends.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use ringmq_protocol::message::UniqIdGenerator;
use ringmq_storage::aligned::AlignedBuf;
use ringmq_storage::checkpoint::ShardFiles;
use ringmq_storage::commit_log::SegmentStats;
use ringmq_storage::disk::uring::{UringDisk, UringDiskConfig};
use ringmq_storage::disk::{Disk, DiskCompletion, DiskOp, FileId, OpId, OpTag, OpenOptions, Wait};
use ringmq_storage::error::StorageError;
use ringmq_storage::limits::{
    COMMIT_LOG_RECYCLE_SEGMENTS_DEFAULT, COMMIT_LOG_REMOVE_STEP_BYTES_DEFAULT,
    COMMITS_IN_FLIGHT_MAX, CONSUME_QUEUE_FLUSH_EARLY_BYTES_DEFAULT,
    CONSUME_QUEUE_FLUSH_INTERVAL_MS_DEFAULT, TAIL_CACHE_SIZE, WRITE_BUFFER_SIZE,
    write_buffers_in_use_max,
};
use ringmq_storage::ring::affinity::pin_to_cpu;
use ringmq_storage::store::{AckStatus, AppendMessage, Store, StoreConfig, StoreFlushMode};

/// Size of the floor's scratch file (writes wrap around inside it).
const FLOOR_FILE_SIZE: u64 = 256 << 20;
/// Size of each fresh floor file (fallocated, not zero-filled): writes go
/// through it once, without wrapping, so every one lands on an unwritten
/// extent; the measurement stops at its end if the time is not up.
const FLOOR_FRESH_FILE_SIZE: u64 = 4 << 30;
/// Size of the floor's large writes.
const FLOOR_LARGE_WRITE_SIZE: usize = 1 << 20;
/// Size of the floor's small writes.
const FLOOR_SMALL_WRITE_SIZE: usize = 4096;
/// Large O_DIRECT writes in flight for `floor_direct_mb_per_s`.
const FLOOR_DIRECT_IN_FLIGHT: usize = 4;
/// Most operations of one floor measurement (bounds a very fast disk).
const FLOOR_OPS_MAX: u64 = 1_000_000;
/// Longest wait for one completion before the run is declared stuck.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(30);
/// Highest latency the histograms track (µs); larger values saturate.
const LATENCY_US_MAX: u64 = 60_000_000;

const _: () = assert!(FLOOR_FILE_SIZE.is_multiple_of(FLOOR_LARGE_WRITE_SIZE as u64));
const _: () = assert!(FLOOR_FRESH_FILE_SIZE.is_multiple_of(FLOOR_LARGE_WRITE_SIZE as u64));
const _: () = assert!(FLOOR_LARGE_WRITE_SIZE.is_multiple_of(FLOOR_SMALL_WRITE_SIZE));

/// Flush mode of the append phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Flush {
    /// SYNC_FLUSH: acknowledged after an fdatasync covering the record.
    Sync,
    /// ASYNC_FLUSH: acknowledged after the O_DIRECT write.
    Async,
}

#[derive(Debug, Parser)]
#[command(about = "Measures the disk floor and ringmq's CommitLog append path")]
struct Args {
    /// Directory for the floor file and the store (on the disk to measure).
    #[arg(long)]
    dir: PathBuf,
    /// Flush mode of the append phase.
    #[arg(long, value_enum, default_value_t = Flush::Async)]
    flush: Flush,
    /// Stored record size in bytes (the body is sized to reach it).
    #[arg(long, default_value_t = 1024)]
    record_size: usize,
    /// Appends outstanding at once.
    #[arg(long, default_value_t = 1024)]
    inflight: usize,
    /// Length of the append phase (0: skip it).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Time an abnormal recovery of the store under --dir.
    #[arg(long, conflicts_with = "reopen")]
    recover: bool,
    /// Time a normal open (after the append phase's clean shutdown) of the
    /// store under --dir, and its shutdown.
    #[arg(long)]
    reopen: bool,
    /// Print a JSON object instead of key=value pairs.
    #[arg(long)]
    json: bool,
    /// Length of each floor measurement (0: skip the floor).
    #[arg(long, default_value_t = 3)]
    floor_seconds: u64,
    /// CommitLog segment size of the append phase.
    #[arg(long, default_value_t = 1 << 30)]
    segment_size: u64,
    /// Write zeros over new files (segments, the floor file) so writes land
    /// on written extents; `false` leaves them fallocated only.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    zero_fill: bool,
    /// Fdatasyncs of ConsumeQueue and index files per second from which
    /// they run as one syncfs per group (`UringDiskConfig::group_sync_min_per_s`;
    /// 0: always; `off`: a ring fsync each).
    #[arg(long, default_value = "2000", value_parser = parse_group_sync)]
    group_sync_min_per_s: GroupSyncRate,
    /// Appends per loop turn before a ring turn submits them.
    #[arg(long, default_value_t = APPENDS_PER_TURN_DEFAULT)]
    appends_per_turn: usize,
    /// Seconds the opened store polls idle before the first append, so its
    /// background zero fill writes the first segment's extents (as a broker
    /// idle after its start would); 0: append at once, into fallocated
    /// (unwritten) extents under sustained load.
    #[arg(long, default_value_t = 0)]
    idle_seconds: u64,
    /// Seconds of appends before the measured `--seconds` start (counters,
    /// histogram and CPU times cover only what follows).
    #[arg(long, default_value_t = 0)]
    warmup_seconds: u64,
    /// Retention as a store at its disk budget runs it: every segment
    /// behind the active one is retired as soon as it is durable
    /// (fileReservedTime 0, deleteWhen every hour, run every second), into
    /// the spare pool of `--recycle-segments`, so that later segments are
    /// renamed spares whose extents are written.
    #[arg(long)]
    eager_retention: bool,
    /// Give every record the properties a Java producer sends: a UNIQ_KEY
    /// unique per record (32 hex digits, as the client's message id), WAIT
    /// and TAGS, so the store indexes the key and hashes the tag as it does
    /// in a broker. Without it records carry no properties of their own.
    #[arg(long)]
    client_properties: bool,
    /// Queues of the bench topic the records go to, one after another (a
    /// broker's load spread over many queues: each queue's last
    /// ConsumeQueue file is then long in filling).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    queues: u32,
    /// Spare pool of retired segments (the store's
    /// `commit_log_recycle_segments`).
    #[arg(long, default_value_t = COMMIT_LOG_RECYCLE_SEGMENTS_DEFAULT)]
    recycle_segments: usize,
    /// Step by which an unlinked retired segment is shrunk first (the
    /// store's `commit_log_remove_step_bytes`; 0: unlinked at once).
    #[arg(long, default_value_t = COMMIT_LOG_REMOVE_STEP_BYTES_DEFAULT)]
    remove_step_bytes: u64,
    /// ConsumeQueue write-behind period in ms (the store's
    /// `consume_queue_flush_interval_ms`, RocketMQ's
    /// `flushIntervalConsumeQueue`).
    #[arg(long, default_value_t = CONSUME_QUEUE_FLUSH_INTERVAL_MS_DEFAULT)]
    cq_flush_ms: u64,
    /// Unwritten bytes at which a ConsumeQueue is flushed before the period
    /// ends (the store's `consume_queue_flush_early_bytes`).
    #[arg(long, default_value_t = CONSUME_QUEUE_FLUSH_EARLY_BYTES_DEFAULT)]
    cq_flush_early_bytes: usize,
    /// Print a latency timeline of the measured phase to stderr: one line
    /// per window of this many ms (0: none) with its acks, p50, p99 and max.
    #[arg(long, default_value_t = 0)]
    timeline_ms: u64,
    /// Shards appending at once, each its own store (shard id 0..N under
    /// `--dir`) on its own thread, ring and disk, pinned to the N-th CPU as
    /// the broker pins its shards; the report sums their rates and merges
    /// their latencies. With 1 the one shard runs unpinned on the main
    /// thread.
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// Development only: allow a file system without O_DIRECT.
    #[arg(long)]
    allow_buffered: bool,
}

/// One output value.
#[derive(Debug, Clone)]
enum Value {
    Int(u64),
    Float(f64),
    Text(String),
}

/// The report, in output order.
#[derive(Debug, Default)]
struct Report {
    entries: Vec<(&'static str, Value)>,
}

impl Report {
    fn int(&mut self, key: &'static str, value: u64) {
        self.entries.push((key, Value::Int(value)));
    }

    fn float(&mut self, key: &'static str, value: f64) {
        self.entries.push((key, Value::Float(value)));
    }

    fn text(&mut self, key: &'static str, value: impl Into<String>) {
        self.entries.push((key, Value::Text(value.into())));
    }

    /// The value of a numeric `key`, if reported.
    fn number(&self, key: &str) -> Option<f64> {
        self.entries.iter().find_map(|(k, value)| match value {
            Value::Int(v) if *k == key => Some(*v as f64),
            Value::Float(v) if *k == key => Some(*v),
            _ => None,
        })
    }

    fn render(&self, json: bool) -> String {
        let fields = self.entries.iter().map(|(key, value)| {
            let value = match value {
                Value::Int(value) => value.to_string(),
                Value::Float(value) if value.is_finite() => format!("{value:.1}"),
                Value::Float(_) => {
                    if json {
                        "null".to_string()
                    } else {
                        "nan".to_string()
                    }
                }
                Value::Text(text) if json => {
                    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
                }
                Value::Text(text) => text.replace(' ', "_"),
            };
            if json {
                format!("\"{key}\":{value}")
            } else {
                format!("{key}={value}")
            }
        });
        let fields: Vec<String> = fields.collect();
        if json {
            format!("{{{}}}", fields.join(","))
        } else {
            fields.join(" ")
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(args.record_size > 0, "--record-size must be positive");
    ensure!(args.inflight > 0, "--inflight must be positive");
    ensure!(
        (1..=usize::from(u8::MAX) + 1).contains(&args.shards),
        "--shards must be between 1 and 256"
    );
    ensure!(
        args.shards == 1 || !(args.recover || args.reopen),
        "--recover and --reopen time one shard's open: use them with --shards 1"
    );
    ensure!(
        args.appends_per_turn > 0,
        "--appends-per-turn must be positive"
    );
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let mut report = Report::default();
    report.text("flush", format!("{:?}", args.flush).to_lowercase());
    report.int("record_size", args.record_size as u64);
    report.int("inflight", args.inflight as u64);
    report.int("seconds", args.seconds);
    report.int("appends_per_turn", args.appends_per_turn as u64);
    report.int("idle_seconds", args.idle_seconds);
    report.int("warmup_seconds", args.warmup_seconds);
    report.int("eager_retention", u64::from(args.eager_retention));
    report.int("client_properties", u64::from(args.client_properties));
    report.int("queues", u64::from(args.queues));
    report.int("remove_step_bytes", args.remove_step_bytes);
    report.int("recycle_segments", args.recycle_segments as u64);
    report.int("cq_flush_ms", args.cq_flush_ms);
    report.int("cq_flush_early_bytes", args.cq_flush_early_bytes as u64);
    report.int("zero_fill", u64::from(args.zero_fill));
    report.int(
        "group_sync_min_per_s",
        args.group_sync_min_per_s.0.unwrap_or(u64::MAX),
    );
    if args.floor_seconds > 0 {
        measure_floor(&args, &mut report).context("measuring the disk floor")?;
    }
    if args.seconds > 0 {
        append_phase(&args, &mut report).context("append phase")?;
    }
    report_targets(args.flush, &mut report);
    if args.recover {
        open_phase(&args, &mut report, OpenKind::Abnormal).context("recovery phase")?;
    }
    if args.reopen {
        open_phase(&args, &mut report, OpenKind::Clean).context("reopen phase")?;
    }
    println!("{}", report.render(args.json));
    Ok(())
}

fn disk_config(args: &Args, buffer_count: usize, buffer_size: usize) -> UringDiskConfig {
    UringDiskConfig {
        fixed_buffer_count: buffer_count,
        fixed_buffer_size: buffer_size,
        allow_buffered_fallback: args.allow_buffered,
        zero_fill_on_create: args.zero_fill,
        group_sync_min_per_s: args.group_sync_min_per_s.0,
        ..UringDiskConfig::default()
    }
}

/// `--group-sync-min-per-s`: a rate, or `off`.
#[derive(Clone, Copy, Debug)]
struct GroupSyncRate(Option<u64>);

fn parse_group_sync(text: &str) -> Result<GroupSyncRate, String> {
    if text == "off" {
        return Ok(GroupSyncRate(None));
    }
    text.parse()
        .map(|rate| GroupSyncRate(Some(rate)))
        .map_err(|_| format!("expected fdatasyncs per second or `off`, got {text:?}"))
}

fn latency_histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).context("creating a latency histogram")
}

fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6
}

/// Waits for exactly `count` completions.
fn wait_completions(
    disk: &mut UringDisk,
    count: usize,
    out: &mut Vec<DiskCompletion>,
) -> anyhow::Result<()> {
    let start = out.len();
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    while out.len() - start < count {
        ensure!(
            Instant::now() < deadline,
            "no completion within {COMPLETION_TIMEOUT:?}"
        );
        let want = count - (out.len() - start);
        disk.poll(out, want, Wait::AtLeastOne(Duration::from_millis(100)))?;
    }
    Ok(())
}

/// Takes the buffer of a completed write, failing on an error.
fn finished_write(completion: DiskCompletion) -> anyhow::Result<AlignedBuf> {
    completion
        .result
        .with_context(|| format!("op {:#x}", completion.op_id.0))?;
    completion.buf.context("a write gives its buffer back")
}

fn measure_floor(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let seconds = Duration::from_secs(args.floor_seconds);
    let config = disk_config(args, FLOOR_DIRECT_IN_FLIGHT, FLOOR_LARGE_WRITE_SIZE);
    let mut disk = UringDisk::new(config).context("setting up io_uring")?;
    let flags = disk.setup_flags();
    report.text(
        "ring_flags",
        format!(
            "single_issuer={},defer_taskrun={},coop_taskrun={}",
            flags.single_issuer, flags.defer_taskrun, flags.coop_taskrun
        ),
    );
    report.int(
        "fixed_buffers",
        u64::from(disk.fixed_buffers_error().is_none()),
    );
    let path = args.dir.join("storage-bench-floor.tmp");
    let created = Instant::now();
    let file = open_zero_filled(&mut disk, &path).context("creating the floor file")?;
    report.int("floor_create_256m_ms", created.elapsed().as_millis() as u64);
    report.int("o_direct", u64::from(disk.is_o_direct(file)?));

    let histogram = floor_write_sync(
        &mut disk,
        file,
        FLOOR_SMALL_WRITE_SIZE,
        seconds,
        Extent::Wrap,
    )?
    .0;
    report_p50_p99(
        report,
        ["floor_fsync4k_p50_us", "floor_fsync4k_p99_us"],
        &histogram,
    );
    report.int("floor_fsync4k_count", histogram.len());
    report.float(
        "floor_direct_mb_per_s",
        floor_direct(
            &mut disk,
            file,
            seconds,
            Extent::Wrap,
            FLOOR_LARGE_WRITE_SIZE,
            FLOOR_DIRECT_IN_FLIGHT,
        )?,
    );
    let (histogram, rate) = floor_write_sync(
        &mut disk,
        file,
        FLOOR_LARGE_WRITE_SIZE,
        seconds,
        Extent::Wrap,
    )?;
    report.float("floor_commit1m_mb_per_s", rate);
    report_p50_p99(
        report,
        ["floor_commit1m_p50_us", "floor_commit1m_p99_us"],
        &histogram,
    );
    disk.close(file)?;
    disk.remove(&path)?;
    measure_sync_inflight_floor(args, report)?;
    // The same into freshly fallocated files (no zero fill), once through:
    // every write lands on an unwritten extent, as appends into a segment
    // created under sustained load do (ext4 converts the extent at each
    // write's completion and commits its journal at each fdatasync).
    let mut fresh = fresh_disk(disk_config(
        args,
        FLOOR_DIRECT_IN_FLIGHT,
        FLOOR_LARGE_WRITE_SIZE,
    ))?;
    let path = args.dir.join("storage-bench-floor-fresh.tmp");
    let once = Extent::Once(FLOOR_FRESH_FILE_SIZE);
    let rate = on_fresh_file(&mut fresh, &path, |disk, file| {
        floor_direct(
            disk,
            file,
            seconds,
            once,
            FLOOR_LARGE_WRITE_SIZE,
            FLOOR_DIRECT_IN_FLIGHT,
        )
    })?;
    report.float("floor_direct_fresh_mb_per_s", rate);
    let (histogram, rate) = on_fresh_file(&mut fresh, &path, |disk, file| {
        floor_write_sync(disk, file, FLOOR_LARGE_WRITE_SIZE, seconds, once)
    })?;
    report.float("floor_commit1m_fresh_mb_per_s", rate);
    report_p50_p99(
        report,
        ["floor_commit1m_fresh_p50_us", "floor_commit1m_fresh_p99_us"],
        &histogram,
    );
    let (histogram, _) = on_fresh_file(&mut fresh, &path, |disk, file| {
        floor_write_sync(disk, file, FLOOR_SMALL_WRITE_SIZE, seconds, once)
    })?;
    report_p50_p99(
        report,
        ["floor_fsync4k_fresh_p50_us", "floor_fsync4k_fresh_p99_us"],
        &histogram,
    );
    Ok(())
}

/// A disk as `config` sets up, that leaves new files fallocated only (no
/// zero fill), for [`on_fresh_file`].
fn fresh_disk(mut config: UringDiskConfig) -> anyhow::Result<UringDisk> {
    config.zero_fill_on_create = false;
    UringDisk::new(config).context("setting up io_uring")
}

/// Runs `measure` on a new [`FLOOR_FRESH_FILE_SIZE`] O_DIRECT file at
/// `path` (fallocated; `disk` from [`fresh_disk`]), then removes the file.
fn on_fresh_file<T>(
    disk: &mut UringDisk,
    path: &std::path::Path,
    measure: impl FnOnce(&mut UringDisk, FileId) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let file = disk
        .open(path, OpenOptions::create_direct(FLOOR_FRESH_FILE_SIZE))
        .context("creating a fresh floor file")?;
    let measured = measure(disk, file)?;
    disk.close(file)?;
    disk.remove(path)?;
    Ok(measured)
}

/// Reports `histogram`'s p50 and p99 under `keys`.
fn report_p50_p99(report: &mut Report, keys: [&'static str; 2], histogram: &Histogram<u64>) {
    report.int(keys[0], histogram.value_at_quantile(0.50));
    report.int(keys[1], histogram.value_at_quantile(0.99));
}

/// Creates a [`FLOOR_FILE_SIZE`] O_DIRECT file at `path` and waits for its
/// background zero fill: floors are measured on finished, written extents,
/// as a segment created ahead of need is.
fn open_zero_filled(disk: &mut UringDisk, path: &std::path::Path) -> anyhow::Result<FileId> {
    let file = disk.open(path, OpenOptions::create_direct(FLOOR_FILE_SIZE))?;
    let mut none = Vec::new();
    while disk.is_zero_fill_pending(file)? {
        disk.poll(&mut none, 1, Wait::AtLeastOne(Duration::from_millis(10)))?;
    }
    Ok(file)
}

/// How floor writes move through their file.
#[derive(Clone, Copy, Debug)]
enum Extent {
    /// Around the zero-filled floor file, again and again.
    Wrap,
    /// Once through a fresh file of this size.
    Once(u64),
}

impl Extent {
    fn exhausted(self, file_offset: u64, size: usize) -> bool {
        match self {
            Extent::Wrap => false,
            Extent::Once(len) => file_offset + size as u64 > len,
        }
    }

    fn next(self, file_offset: u64, size: usize) -> u64 {
        match self {
            Extent::Wrap => (file_offset + size as u64) % FLOOR_FILE_SIZE,
            Extent::Once(_) => file_offset + size as u64,
        }
    }
}

/// Submits op `seq`: a write of `buf[..size]` at `file_offset`; `link`
/// makes the next submission wait for it.
fn submit_floor_write(
    disk: &mut UringDisk,
    seq: u64,
    file: FileId,
    file_offset: u64,
    buf: AlignedBuf,
    size: usize,
    link: bool,
) -> anyhow::Result<()> {
    let write = DiskOp::Write {
        file,
        file_offset,
        buf,
        buf_range: 0..size,
    };
    disk.submit(OpId::new(OpTag::Other, seq), write, link)
        .map_err(|(error, _)| error)?;
    Ok(())
}

/// Submits op `seq`: an fdatasync of `file`.
fn submit_floor_fdatasync(disk: &mut UringDisk, seq: u64, file: FileId) -> anyhow::Result<()> {
    disk.submit(
        OpId::new(OpTag::Other, seq),
        DiskOp::Fdatasync { file },
        false,
    )
    .map_err(|(error, _)| error)?;
    Ok(())
}

/// [`COMMITS_IN_FLIGHT_MAX`] buffers of `size` bytes of a non-zero pattern.
fn floor_buffers(disk: &mut UringDisk, size: usize) -> Vec<AlignedBuf> {
    (0..COMMITS_IN_FLIGHT_MAX)
        .map(|_| {
            let mut buf = disk.buffer(size);
            buf.as_full_mut_slice().fill(0xA5);
            buf
        })
        .collect()
}

/// Submits pair `pair`: a write (op `2 * pair`) linked to an fdatasync
/// (op `2 * pair + 1`).
fn submit_floor_pair(
    disk: &mut UringDisk,
    pair: u64,
    file: FileId,
    file_offset: u64,
    buf: AlignedBuf,
    size: usize,
) -> anyhow::Result<()> {
    submit_floor_write(disk, pair * 2, file, file_offset, buf, size, true)?;
    submit_floor_fdatasync(disk, pair * 2 + 1, file)
}

/// `size`-byte writes each linked to an fdatasync, one pair at a time.
/// Returns the pair latencies and the MB/s.
fn floor_write_sync(
    disk: &mut UringDisk,
    file: FileId,
    size: usize,
    seconds: Duration,
    extent: Extent,
) -> anyhow::Result<(Histogram<u64>, f64)> {
    let mut histogram = latency_histogram()?;
    let mut buf = disk.buffer(size);
    buf.as_full_mut_slice().fill(0xA5);
    let mut completions = Vec::new();
    let start = Instant::now();
    let mut file_offset = 0u64;
    let mut bytes = 0u64;
    for seq in 0..FLOOR_OPS_MAX {
        if start.elapsed() >= seconds || extent.exhausted(file_offset, size) {
            break;
        }
        let began = Instant::now();
        submit_floor_pair(disk, seq, file, file_offset, buf, size)?;
        completions.clear();
        wait_completions(disk, 2, &mut completions)?;
        histogram.saturating_record(micros(began.elapsed()));
        let mut returned = None;
        for completion in completions.drain(..) {
            if completion.buf.is_some() {
                returned = Some(finished_write(completion)?);
            } else {
                completion.result.context("fdatasync")?;
            }
        }
        buf = returned.context("the write's buffer came back")?;
        bytes += size as u64;
        file_offset = extent.next(file_offset, size);
    }
    let rate = mb_per_s(bytes, start.elapsed());
    disk.recycle(buf);
    Ok((histogram, rate))
}

/// `floor_sync_inflight_*`: the SYNC_FLUSH run's bytes in flight
/// (`--inflight` × `--record-size`) as [`COMMITS_IN_FLIGHT_MAX`] block-sized
/// writes, each linked to its fdatasync, on a zero-filled file with its own
/// registered buffers; a pair is resubmitted at the next offset as soon as
/// it completes. Then `floor_sync_group_*`, the same writes synced by one
/// fdatasync at a time ([`floor_sync_group`]), the store's own shape: no
/// store of that shape can ack those bytes faster than this disk syncs them.
/// Then `floor_direct_inflight_mb_per_s`, the same writes with no
/// fdatasync: what the disk writes with only the run's bytes in flight, as
/// ASYNC_FLUSH has them (`floor_direct_mb_per_s` keeps 4 MiB in flight).
/// The group and the direct writes again, once through a freshly fallocated
/// file (`floor_sync_group_fresh_*`, `floor_direct_inflight_fresh_mb_per_s`):
/// the same shapes where a growing log's appends land.
fn measure_sync_inflight_floor(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let in_flight_bytes = (args.inflight as u64).saturating_mul(args.record_size as u64);
    let pair_size = align_up_block(in_flight_bytes.div_ceil(COMMITS_IN_FLIGHT_MAX as u64))
        .min(FLOOR_LARGE_WRITE_SIZE as u64) as usize;
    let config = disk_config(args, COMMITS_IN_FLIGHT_MAX, pair_size);
    let mut disk = UringDisk::new(config).context("setting up io_uring")?;
    let path = args.dir.join("storage-bench-floor-sync.tmp");
    let file = open_zero_filled(&mut disk, &path).context("creating the sync floor file")?;
    let seconds = Duration::from_secs(args.floor_seconds);
    let (histogram, ordered, rate) = floor_sync_pipeline(&mut disk, file, pair_size, seconds)?;
    report.int("floor_sync_inflight_pair_bytes", pair_size as u64);
    report.float("floor_sync_inflight_mb_per_s", rate);
    report_p50_p99(
        report,
        ["floor_sync_inflight_p50_us", "floor_sync_inflight_p99_us"],
        &histogram,
    );
    report_p50_p99(
        report,
        [
            "floor_sync_inflight_ordered_p50_us",
            "floor_sync_inflight_ordered_p99_us",
        ],
        &ordered,
    );
    let (histogram, rate) = floor_sync_group(&mut disk, file, pair_size, seconds, Extent::Wrap)?;
    report.float("floor_sync_group_mb_per_s", rate);
    report_p50_p99(
        report,
        ["floor_sync_group_p50_us", "floor_sync_group_p99_us"],
        &histogram,
    );
    let rate = floor_direct(
        &mut disk,
        file,
        seconds,
        Extent::Wrap,
        pair_size,
        COMMITS_IN_FLIGHT_MAX,
    )?;
    report.float("floor_direct_inflight_mb_per_s", rate);
    disk.close(file)?;
    disk.remove(&path)?;
    // The same on a freshly fallocated file, once through: the shape of
    // SYNC_FLUSH appends into a segment created under load, where every
    // fdatasync also commits ext4's journal (the extents its writes
    // converted).
    let mut fresh = fresh_disk(config)?;
    let path = args.dir.join("storage-bench-floor-sync-fresh.tmp");
    let (histogram, rate) = on_fresh_file(&mut fresh, &path, |disk, file| {
        let once = Extent::Once(FLOOR_FRESH_FILE_SIZE);
        floor_sync_group(disk, file, pair_size, seconds, once)
    })?;
    report.float("floor_sync_group_fresh_mb_per_s", rate);
    report_p50_p99(
        report,
        [
            "floor_sync_group_fresh_p50_us",
            "floor_sync_group_fresh_p99_us",
        ],
        &histogram,
    );
    // And ASYNC_FLUSH's shape there: the run's bytes in flight, no
    // fdatasync, each write converting the extents it covers.
    let rate = on_fresh_file(&mut fresh, &path, |disk, file| {
        let once = Extent::Once(FLOOR_FRESH_FILE_SIZE);
        floor_direct(disk, file, seconds, once, pair_size, COMMITS_IN_FLIGHT_MAX)
    })?;
    report.float("floor_direct_inflight_fresh_mb_per_s", rate);
    Ok(())
}

/// [`COMMITS_IN_FLIGHT_MAX`] writes of `size` bytes kept in flight, not
/// linked; one fdatasync at a time, started whenever none runs and some
/// write completed, covering every write completed before it. Returns the
/// write latencies (submission to the end of the fdatasync that covered it)
/// and the MB/s. Writes move through `file` as `extent` says.
fn floor_sync_group(
    disk: &mut UringDisk,
    file: FileId,
    size: usize,
    seconds: Duration,
    extent: Extent,
) -> anyhow::Result<(Histogram<u64>, f64)> {
    let mut histogram = latency_histogram()?;
    let mut free = floor_buffers(disk, size);
    // Writes in flight (by sequence number: when submitted), writes done
    // and waiting for an fdatasync, and the writes the running one covers.
    let mut writing: std::collections::HashMap<u64, Instant> = Default::default();
    let mut written: Vec<(Instant, AlignedBuf)> = Vec::new();
    let mut syncing: Option<Vec<(Instant, AlignedBuf)>> = None;
    let mut completions = Vec::new();
    let start = Instant::now();
    let (mut file_offset, mut bytes, mut seq) = (0u64, 0u64, 0u64);
    loop {
        let running = start.elapsed() < seconds && seq < FLOOR_OPS_MAX;
        while running
            && !extent.exhausted(file_offset, size)
            && let Some(buf) = free.pop()
        {
            submit_floor_write(disk, seq * 2, file, file_offset, buf, size, false)?;
            writing.insert(seq, Instant::now());
            seq += 1;
            file_offset = extent.next(file_offset, size);
        }
        if syncing.is_none() && !written.is_empty() {
            // Odd sequence numbers are fdatasyncs; writes use even ones.
            submit_floor_fdatasync(disk, seq * 2 + 1, file)?;
            syncing = Some(std::mem::take(&mut written));
        }
        if writing.is_empty() && syncing.is_none() {
            break;
        }
        completions.clear();
        wait_completions(disk, 1, &mut completions)?;
        disk.poll(&mut completions, 2 * COMMITS_IN_FLIGHT_MAX, Wait::No)?;
        for completion in completions.drain(..) {
            if completion.op_id.seq() % 2 == 0 {
                let at = writing
                    .remove(&(completion.op_id.seq() / 2))
                    .context("a completion of a write in flight")?;
                written.push((at, finished_write(completion)?));
            } else {
                completion.result.context("fdatasync")?;
                for (at, buf) in syncing.take().context("an fdatasync in flight")? {
                    histogram.saturating_record(micros(at.elapsed()));
                    bytes += size as u64;
                    free.push(buf);
                }
            }
        }
    }
    let rate = mb_per_s(bytes, start.elapsed());
    for buf in free {
        disk.recycle(buf);
    }
    Ok((histogram, rate))
}

/// `bytes` rounded up to whole 4 KiB blocks (at least one).
fn align_up_block(bytes: u64) -> u64 {
    let block = FLOOR_SMALL_WRITE_SIZE as u64;
    bytes.div_ceil(block).max(1) * block
}

/// [`COMMITS_IN_FLIGHT_MAX`] writes of `size` bytes, each linked to its
/// fdatasync, kept in flight for `seconds`. Returns the pair latencies
/// (submission to the later of the two completions), the same ended only
/// once every earlier pair is done too (in order), and the MB/s.
fn floor_sync_pipeline(
    disk: &mut UringDisk,
    file: FileId,
    size: usize,
    seconds: Duration,
) -> anyhow::Result<(Histogram<u64>, Histogram<u64>, f64)> {
    let mut histogram = latency_histogram()?;
    let mut ordered = latency_histogram()?;
    // Pairs done whose predecessors are not all done yet (by sequence
    // number: when submitted), and the oldest pair not yet done in order.
    let mut done_early: std::collections::BTreeMap<u64, Instant> = Default::default();
    let mut in_order_next = 0u64;
    let mut free = floor_buffers(disk, size);
    // Per pair in flight: when it was submitted, how many of its two
    // completions are still due, and its buffer once the write is done (it
    // is reused only when the whole pair is over).
    let mut pairs: std::collections::HashMap<u64, (Instant, u8, Option<AlignedBuf>)> =
        Default::default();
    let mut completions = Vec::new();
    let start = Instant::now();
    let (mut file_offset, mut bytes, mut seq) = (0u64, 0u64, 0u64);
    loop {
        let running = start.elapsed() < seconds && seq < FLOOR_OPS_MAX;
        while running && let Some(buf) = free.pop() {
            submit_floor_pair(disk, seq, file, file_offset, buf, size)?;
            pairs.insert(seq, (Instant::now(), 2, None));
            seq += 1;
            file_offset = (file_offset + size as u64) % FLOOR_FILE_SIZE;
        }
        if pairs.is_empty() {
            break;
        }
        completions.clear();
        wait_completions(disk, 1, &mut completions)?;
        disk.poll(&mut completions, 2 * COMMITS_IN_FLIGHT_MAX, Wait::No)?;
        for completion in completions.drain(..) {
            let pair = completion.op_id.seq() / 2;
            let entry = pairs
                .get_mut(&pair)
                .context("a completion of a pair in flight")?;
            if completion.buf.is_some() {
                entry.2 = Some(finished_write(completion)?);
            } else {
                completion.result.context("fdatasync")?;
            }
            entry.1 -= 1;
            if entry.1 == 0 {
                histogram.saturating_record(micros(entry.0.elapsed()));
                let (submitted_at, _, buf) =
                    pairs.remove(&pair).context("the pair is in flight")?;
                free.push(buf.context("the write's buffer came back")?);
                bytes += size as u64;
                done_early.insert(pair, submitted_at);
                while let Some(submitted_at) = done_early.remove(&in_order_next) {
                    ordered.saturating_record(micros(submitted_at.elapsed()));
                    in_order_next += 1;
                }
            }
        }
    }
    let rate = mb_per_s(bytes, start.elapsed());
    for buf in free {
        disk.recycle(buf);
    }
    Ok((histogram, ordered, rate))
}

/// O_DIRECT writes of `write_size` bytes, `in_flight_max` at a time, no
/// fdatasync.
fn floor_direct(
    disk: &mut UringDisk,
    file: FileId,
    seconds: Duration,
    extent: Extent,
    write_size: usize,
    in_flight_max: usize,
) -> anyhow::Result<f64> {
    let mut free: Vec<AlignedBuf> = (0..in_flight_max)
        .map(|_| disk.buffer(write_size))
        .collect();
    let mut completions = Vec::new();
    let start = Instant::now();
    let mut file_offset = 0u64;
    let mut bytes = 0u64;
    let mut in_flight = 0usize;
    let mut seq = 0u64;
    loop {
        let running = start.elapsed() < seconds
            && seq < FLOOR_OPS_MAX
            && !extent.exhausted(file_offset, write_size);
        while running && let Some(buf) = free.pop() {
            submit_floor_write(disk, seq, file, file_offset, buf, write_size, false)?;
            seq += 1;
            in_flight += 1;
            file_offset = extent.next(file_offset, write_size);
        }
        if in_flight == 0 {
            break;
        }
        completions.clear();
        wait_completions(disk, 1, &mut completions)?;
        disk.poll(&mut completions, in_flight, Wait::No)?;
        for completion in completions.drain(..) {
            free.push(finished_write(completion)?);
            in_flight -= 1;
            bytes += write_size as u64;
        }
    }
    let rate = mb_per_s(bytes, start.elapsed());
    for buf in free {
        disk.recycle(buf);
    }
    Ok(rate)
}

/// The properties a Java producer gives a message (`--client-properties`):
/// UNIQ_KEY, the client's message id (`UniqIdGenerator`, as loadgen and the
/// broker make them: here for 127.0.0.1 with the shard as the process id),
/// then WAIT and TAGS, each pair closed by 0x02 as the client writes them.
struct ClientProperties {
    bytes: Vec<u8>,
    ids: UniqIdGenerator,
    /// Where the id sits in `bytes`.
    id_at: usize,
}

impl ClientProperties {
    fn new(shard: u8) -> Self {
        use ringmq_protocol::message::PropertiesBuilder;
        use ringmq_protocol::message::property_key::{TAGS, UNIQ_KEY, WAIT};
        let ids = UniqIdGenerator::new(IpAddr::from([127, 0, 0, 1]), u32::from(shard), 0);
        let mut bytes = Vec::new();
        // The id's room, first: `next` writes each record's id over it.
        let room = "0".repeat(ids.id_len());
        PropertiesBuilder::new(&mut bytes)
            .push(UNIQ_KEY, &room)
            .and_then(|pairs| pairs.push(WAIT, "true"))
            .and_then(|pairs| pairs.push(TAGS, "TagA"))
            .expect("invariant: fixed, valid pairs");
        let id_at = UNIQ_KEY.len() + 1;
        ClientProperties { bytes, ids, id_at }
    }

    /// The properties of the next record, its id made at `now_ms`.
    fn next(&mut self, now_ms: u64) -> &[u8] {
        self.ids
            .next_into(now_ms, &mut self.bytes[self.id_at..])
            .expect("invariant: the id's room was sized by id_len");
        &self.bytes
    }
}

/// The shard-local part of an outside-visible CommitLog offset.
fn split_local(offset: u64) -> u64 {
    ringmq_storage::commit_log::split_shard_offset(offset).1
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

fn store_root(args: &Args) -> PathBuf {
    args.dir.join("store")
}

/// Stored bytes of a record besides body, topic and properties (IPv4
/// hosts, V1 magic; remoting-protocol.md 4.1).
const RECORD_OVERHEAD_BYTES: usize = 91;
/// Topic of the appended records.
const BENCH_TOPIC: &str = "StorageBenchTopic";
/// Registered write buffers of the append phase's disk: all the CommitLog
/// uses with the default tail cache.
const APPEND_FIXED_BUFFER_COUNT: usize = write_buffers_in_use_max(TAIL_CACHE_SIZE);
/// Default appends per turn of the append loop before a ring turn submits
/// them (a shard likewise bounds the requests it handles per turn).
const APPENDS_PER_TURN_DEFAULT: usize = 128;
/// Longest single wait of the append loop.
const APPEND_POLL_WAIT: Duration = Duration::from_millis(100);

fn store_config(args: &Args, shard: u8) -> StoreConfig {
    let mut config = StoreConfig::new(
        store_root(args),
        shard,
        SocketAddr::from(([127, 0, 0, 1], 10911)),
    );
    config.flush_mode = match args.flush {
        Flush::Sync => StoreFlushMode::Sync,
        Flush::Async => StoreFlushMode::Async,
    };
    config.segment_size_bytes = args.segment_size;
    config.commit_log_recycle_segments = args.recycle_segments;
    config.commit_log_remove_step_bytes = args.remove_step_bytes;
    config.consume_queue_flush_interval_ms = args.cq_flush_ms;
    config.consume_queue_flush_early_bytes = args.cq_flush_early_bytes;
    if args.eager_retention {
        config.retention.file_reserved_time_hours = 0;
        config.retention.delete_when_hours = (0..24).collect();
        config.clean_resource_interval_ms = 0;
    }
    config
}

/// What one shard's append loop measured over its measured phase.
struct ShardRun {
    acked: u64,
    record_bytes: u64,
    flush_timeouts: u64,
    elapsed: Duration,
    /// User and system CPU seconds of the shard's thread.
    cpu: (f64, f64),
    fsyncs: u64,
    /// Group syncs: `syncfs` calls, and the fdatasyncs they stood for.
    syncfs: (u64, u64),
    commits: u64,
    stalls: u64,
    segments: SegmentStats,
    histogram: Histogram<u64>,
    timeline: Option<Timeline>,
    fixed_buffers: bool,
    /// The process's anonymous resident memory when the phase ended.
    rss_anon_mb: f64,
}

/// The append phase: `--shards` stores, each on its own thread, ring and
/// `UringDisk`, appending at once; the report sums their counters and
/// merges their latencies. With `--recover` the stores are dropped without
/// shutdown afterwards (as a killed process would leave them).
fn append_phase(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    // Every shard starts its warm-up and measured phase together.
    let start_line = Barrier::new(args.shards);
    let runs: Vec<ShardRun> = if args.shards == 1 {
        // One shard runs on the main thread, unpinned, as in earlier sets
        // (docs/BENCHMARKS.md): the kernel's helpers then use the other core.
        vec![append_shard(args, 0, &start_line)?]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..args.shards)
                .map(|shard| {
                    let start_line = &start_line;
                    scope.spawn(move || {
                        // As the broker pins shard `shard`.
                        pin_to_cpu(shard)
                            .with_context(|| format!("pinning shard {shard} to a CPU"))?;
                        append_shard(args, shard as u8, start_line)
                            .with_context(|| format!("shard {shard}"))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .map_err(|_| anyhow::anyhow!("a shard thread panicked"))?
                })
                .collect::<anyhow::Result<Vec<_>>>()
        })?
    };
    report_runs(&runs, report)
}

/// `a` and `b` combined counter by counter with `op` (the counters a run
/// added: `after - before`; two shards' together: `a + b`).
fn segments_combined(a: SegmentStats, b: SegmentStats, op: fn(u64, u64) -> u64) -> SegmentStats {
    SegmentStats {
        created_ahead: op(a.created_ahead, b.created_ahead),
        rollovers_ready: op(a.rollovers_ready, b.rollovers_ready),
        rollovers_waited: op(a.rollovers_waited, b.rollovers_waited),
        create_failures: op(a.create_failures, b.create_failures),
        removed: op(a.removed, b.removed),
        spared: op(a.spared, b.spared),
        recycled: op(a.recycled, b.recycled),
        removal_steps: op(a.removal_steps, b.removal_steps),
    }
}

/// The report of the append phase, from every shard's run.
fn report_runs(runs: &[ShardRun], report: &mut Report) -> anyhow::Result<()> {
    let mut histogram = latency_histogram()?;
    let mut segments = SegmentStats::default();
    let (mut acked, mut bytes, mut flush_timeouts) = (0u64, 0u64, 0u64);
    let (mut user_s, mut sys_s) = (0.0, 0.0);
    let (mut fsyncs, mut commits, mut stalls) = (0u64, 0u64, 0u64);
    let (mut syncfs_calls, mut grouped) = (0u64, 0u64);
    let mut timeline: Option<Timeline> = None;
    for run in runs {
        histogram
            .add(&run.histogram)
            .context("merging the shards' latencies")?;
        acked += run.acked;
        bytes += run.acked * run.record_bytes;
        flush_timeouts += run.flush_timeouts;
        user_s += run.cpu.0;
        sys_s += run.cpu.1;
        fsyncs += run.fsyncs;
        syncfs_calls += run.syncfs.0;
        grouped += run.syncfs.1;
        commits += run.commits;
        stalls += run.stalls;
        segments = segments_combined(segments, run.segments, |a, b| a + b);
        if let Some(shard_timeline) = &run.timeline {
            match timeline.as_mut() {
                Some(merged) => merged.add(shard_timeline)?,
                None => timeline = Some(shard_timeline.clone()),
            }
        }
    }
    if let Some(timeline) = &timeline {
        timeline.print();
    }
    // The shards' rates over the longest shard's phase: a shard that ran
    // shorter does not inflate the sum.
    let elapsed = runs.iter().map(|run| run.elapsed).max().unwrap_or_default();
    let seconds = elapsed.as_secs_f64().max(1e-9);
    let record_bytes = runs.first().map_or(0, |run| run.record_bytes);
    report.int("shards", runs.len() as u64);
    report.int(
        "append_fixed_buffers",
        u64::from(runs.iter().all(|run| run.fixed_buffers)),
    );
    report.float("appends_per_s", acked as f64 / seconds);
    report.float("mb_per_s", bytes as f64 / seconds / 1e6);
    if runs.len() > 1 {
        // Over the same phase as the total, which is then their sum: over
        // each shard's own phase, a shard whose last turn ran late (a loaded
        // machine, 230 ms in one CI run) showed a rate the total was below.
        let shard_mb = |run: &ShardRun| (run.acked * run.record_bytes) as f64 / seconds / 1e6;
        let per_shard: Vec<f64> = runs.iter().map(shard_mb).collect();
        report.float(
            "shard_mb_per_s_min",
            per_shard.iter().copied().fold(f64::INFINITY, f64::min),
        );
        report.float(
            "shard_mb_per_s_max",
            per_shard.iter().copied().fold(0.0, f64::max),
        );
    }
    report.float("cpu_user_s", user_s);
    report.float("cpu_sys_s", sys_s);
    let mb = bytes as f64 / 1e6;
    report.float("cpu_us_per_mb", (user_s + sys_s) * 1e6 / mb.max(1e-9));
    report.float("cpu_user_us_per_mb", user_s * 1e6 / mb.max(1e-9));
    report.float("cpu_sys_us_per_mb", sys_s * 1e6 / mb.max(1e-9));
    report.float("fsyncs_per_s", fsyncs as f64 / seconds);
    report.float("syncfs_per_s", syncfs_calls as f64 / seconds);
    report.float("fdatasyncs_grouped_per_s", grouped as f64 / seconds);
    // CommitLog commits only (ConsumeQueue, index and checkpoint writes are
    // not commits).
    report.float("records_per_commit", acked as f64 / commits.max(1) as f64);
    report.int("commits", commits);
    report.int("p50_us", histogram.value_at_quantile(0.50));
    report.int("p99_us", histogram.value_at_quantile(0.99));
    report.int("p999_us", histogram.value_at_quantile(0.999));
    report.int("max_us", histogram.max());
    report.int("record_bytes", record_bytes);
    report.int("flush_timeouts", flush_timeouts);
    report.int("ring_stalls", stalls);
    report.int("segments_created_ahead", segments.created_ahead);
    report.int("rollovers_waited", segments.rollovers_waited);
    report.int("segments_recycled", segments.recycled);
    report.int("segments_spared", segments.spared);
    report.int("segments_removed", segments.removed);
    report.int("segment_removal_steps", segments.removal_steps);
    report.float("rss_max_mb", process_max_rss_mb()?);
    report.float(
        "rss_anon_mb",
        runs.iter().map(|run| run.rss_anon_mb).fold(0.0, f64::max),
    );
    Ok(())
}

/// One shard's append loop: its `Store` on its own `UringDisk`, closed loop
/// with `--inflight` appends outstanding. Waits at `start_line` once its
/// store is open (or failed to open), so the shards' phases line up.
fn append_shard(args: &Args, shard: u8, start_line: &Barrier) -> anyhow::Result<ShardRun> {
    let opened = open_shard_store(args, shard);
    start_line.wait();
    let (mut store, fixed_buffers) = opened?;
    let idle_until = Instant::now() + Duration::from_secs(args.idle_seconds);
    let mut idle_acks = Vec::new();
    while Instant::now() < idle_until {
        store
            .poll_wait(now_ms(), APPEND_POLL_WAIT, &mut idle_acks)
            .context("store poll while idle")?;
    }
    let overhead = RECORD_OVERHEAD_BYTES + BENCH_TOPIC.len();
    let mut body = vec![0x5A_u8; args.record_size.saturating_sub(overhead).max(1)];
    let born_host = SocketAddr::from(([127, 0, 0, 1], 40000));
    let mut client_properties = ClientProperties::new(shard);
    let mut histogram = latency_histogram()?;
    let mut outstanding: VecDeque<(u64, Instant)> = VecDeque::with_capacity(args.inflight);
    let mut acks = Vec::new();
    let mut ack_runs: Vec<(Instant, u64)> = Vec::new();
    let mut record_bytes = 0u64;
    let (mut acked, mut flush_timeouts) = (0u64, 0u64);
    let mut stats_before = store.disk().ring_stats();
    let mut group_before = store.disk().group_sync_stats();
    let mut commits_before = store.commit_log().appender().commit_count();
    let mut segments_before = store.commit_log().segment_stats();
    let mut cpu_before = thread_cpu_time()?;
    let mut start = Instant::now();
    let mut warmup_until = Some(start + Duration::from_secs(args.warmup_seconds));
    let mut timeline =
        (args.timeline_ms > 0).then(|| Timeline::new(Duration::from_millis(args.timeline_ms)));
    let end = start + Duration::from_secs(args.warmup_seconds + args.seconds);
    let mut running = true;
    let mut queue_id = 0u32;
    loop {
        if let Some(until) = warmup_until
            && Instant::now() >= until
        {
            // The measured phase starts: what the warm-up did is not counted.
            warmup_until = None;
            histogram.reset();
            (acked, flush_timeouts) = (0, 0);
            stats_before = store.disk().ring_stats();
            group_before = store.disk().group_sync_stats();
            commits_before = store.commit_log().appender().commit_count();
            segments_before = store.commit_log().segment_stats();
            cpu_before = thread_cpu_time()?;
            start = Instant::now();
        }
        // One loop turn, as a shard's would be: a bounded number of appends
        // (one clock reading for their timestamps), then a ring turn that
        // submits them; it waits only when nothing more may be appended.
        let turn_ms = now_ms();
        // One `Instant` per turn for the latency of all its appends (module
        // doc): reading the clock per append cost ~4% of the loop's CPU.
        let turn_started = Instant::now();
        let mut busy = false;
        let mut appended = 0;
        while running && outstanding.len() < args.inflight && appended < args.appends_per_turn {
            let properties = if args.client_properties {
                client_properties.next(turn_ms)
            } else {
                b""
            };
            let message = AppendMessage {
                topic: BENCH_TOPIC,
                queue_id,
                body: &body,
                properties,
                flag: 0,
                sys_flag: 0,
                born_timestamp_ms: turn_ms as i64,
                born_host,
                reconsume_times: 0,
                prepared_transaction_offset: 0,
            };
            match store.append(&message, turn_ms) {
                Ok(ticket) => {
                    outstanding.push_back((ticket.id, turn_started));
                    appended += 1;
                    queue_id = (queue_id + 1) % args.queues;
                    if record_bytes == 0 {
                        // Calibrate once: the store may add fields (a CRC
                        // property) beyond the fixed overhead assumed above.
                        let extra =
                            u64::from(ticket.wrote_bytes).saturating_sub(args.record_size as u64);
                        body.truncate(body.len().saturating_sub(extra as usize).max(1));
                    }
                    record_bytes = u64::from(ticket.wrote_bytes);
                }
                // Back-pressure: wait for acks, then go on.
                Err(StorageError::Busy { .. }) => {
                    busy = true;
                    break;
                }
                Err(error) => return Err(error).context("append"),
            }
        }
        running = running && Instant::now() < end;
        if outstanding.is_empty() {
            break;
        }
        acks.clear();
        if running && !busy && outstanding.len() < args.inflight {
            store.poll(now_ms(), &mut acks).context("store poll")?;
        } else {
            store
                .poll_wait(now_ms(), APPEND_POLL_WAIT, &mut acks)
                .context("store poll")?;
        }
        let acked_at = Instant::now();
        // Acks of one turn's appends share a latency (one clock reading at
        // each end), so they are recorded as runs: one histogram update per
        // run instead of one per ack.
        ack_runs.clear();
        for ack in acks.drain(..) {
            let (id, appended_at) = outstanding
                .pop_front()
                .context("an ack with no append outstanding")?;
            ensure!(
                id == ack.id,
                "ack {} arrived while {id} was the oldest append",
                ack.id
            );
            match ack.status {
                AckStatus::Ok => acked += 1,
                AckStatus::FlushTimeout => flush_timeouts += 1,
                AckStatus::Failed(reason) => bail!("append {id} failed: {reason}"),
            }
            match ack_runs.last_mut() {
                Some((at, count)) if *at == appended_at => *count += 1,
                _ => ack_runs.push((appended_at, 1)),
            }
        }
        for &(appended_at, count) in &ack_runs {
            let latency_us = micros(acked_at.duration_since(appended_at));
            histogram.saturating_record_n(latency_us, count);
            if let Some(timeline) = timeline.as_mut()
                && warmup_until.is_none()
            {
                timeline.record(acked_at.duration_since(start), latency_us, count)?;
            }
        }
    }
    let elapsed = start.elapsed();
    let cpu = thread_cpu_time()?;
    let stats = store.disk().ring_stats();
    let group = store.disk().group_sync_stats();
    let run = ShardRun {
        acked,
        record_bytes,
        flush_timeouts,
        elapsed,
        cpu: (cpu.0 - cpu_before.0, cpu.1 - cpu_before.1),
        fsyncs: stats.fsyncs_submitted - stats_before.fsyncs_submitted,
        syncfs: (
            group.syncfs_calls - group_before.syncfs_calls,
            group.fdatasyncs_covered - group_before.fdatasyncs_covered,
        ),
        commits: store.commit_log().appender().commit_count() - commits_before,
        stalls: stats.stalls - stats_before.stalls,
        segments: segments_combined(
            store.commit_log().segment_stats(),
            segments_before,
            |after, before| after - before,
        ),
        histogram,
        timeline,
        fixed_buffers,
        rss_anon_mb: process_rss_anon_mb()?,
    };
    if args.recover {
        drop(store);
    } else {
        store
            .shutdown(now_ms(), &mut acks)
            .context("store shutdown")?;
    }
    Ok(run)
}

/// Opens shard `shard`'s store; whether its disk registered its buffers.
fn open_shard_store(args: &Args, shard: u8) -> anyhow::Result<(Store<UringDisk>, bool)> {
    let disk = UringDisk::new(disk_config(
        args,
        APPEND_FIXED_BUFFER_COUNT,
        WRITE_BUFFER_SIZE,
    ))
    .context("setting up io_uring")?;
    let fixed_buffers = disk.fixed_buffers_error().is_none();
    let (store, _) =
        Store::open(disk, store_config(args, shard), now_ms()).context("opening the store")?;
    Ok((store, fixed_buffers))
}

/// Per-window latency histograms of the measured phase (`--timeline-ms`),
/// to tell periodic stalls from a uniform tail.
#[derive(Clone)]
struct Timeline {
    window: Duration,
    windows: Vec<Histogram<u64>>,
}

impl Timeline {
    fn new(window: Duration) -> Self {
        Timeline {
            window,
            windows: Vec::new(),
        }
    }

    /// Records `count` acks `at` after the measured phase's start.
    fn record(&mut self, at: Duration, latency_us: u64, count: u64) -> anyhow::Result<()> {
        let index = (at.as_nanos() / self.window.as_nanos().max(1)) as usize;
        while self.windows.len() <= index {
            self.windows.push(latency_histogram()?);
        }
        self.windows[index].saturating_record_n(latency_us, count);
        Ok(())
    }

    /// Adds `other`'s windows (another shard's) to this one's.
    fn add(&mut self, other: &Timeline) -> anyhow::Result<()> {
        while self.windows.len() < other.windows.len() {
            self.windows.push(latency_histogram()?);
        }
        for (window, theirs) in self.windows.iter_mut().zip(&other.windows) {
            window
                .add(theirs)
                .context("merging the shards' timelines")?;
        }
        Ok(())
    }

    /// One stderr line per window: start (ms), acks, p50, p99, max (µs).
    fn print(&self) {
        for (index, window) in self.windows.iter().enumerate() {
            eprintln!(
                "timeline t_ms={} acks={} p50_us={} p99_us={} max_us={}",
                index as u128 * self.window.as_millis(),
                window.len(),
                window.value_at_quantile(0.50),
                window.value_at_quantile(0.99),
                window.max()
            );
        }
    }
}

/// User and system CPU seconds of the calling thread so far.
fn thread_cpu_time() -> anyhow::Result<(f64, f64)> {
    let usage = rusage(libc::RUSAGE_THREAD)?;
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok((seconds(usage.ru_utime), seconds(usage.ru_stime)))
}

/// The process's resident set at its largest so far, in MB (the kernel's
/// `ru_maxrss`, KiB): the stores' memory, which the floor phase before them
/// barely adds to.
fn process_max_rss_mb() -> anyhow::Result<f64> {
    Ok(rusage(libc::RUSAGE_SELF)?.ru_maxrss as f64 * 1024.0 / 1e6)
}

/// `getrusage(who)`: of the calling thread or of the whole process.
fn rusage(who: libc::c_int) -> anyhow::Result<libc::rusage> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `getrusage` only writes the `rusage` it is given, which lives
    // on this stack frame for the whole call.
    let rc = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
    ensure!(rc == 0, "getrusage: {}", std::io::Error::last_os_error());
    // SAFETY: a successful `getrusage` filled the whole struct.
    Ok(unsafe { usage.assume_init() })
}

/// The process's anonymous resident memory now, in MB (`RssAnon` of
/// /proc/self/status): the stores' own memory, without the page cache
/// pages their read-only views of files have touched, which `rss_max_mb`
/// counts and the kernel can take back.
fn process_rss_anon_mb() -> anyhow::Result<f64> {
    let status = std::fs::read_to_string("/proc/self/status").context("/proc/self/status")?;
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("RssAnon:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no RssAnon in /proc/self/status")?;
    Ok(kib * 1024.0 / 1e6)
}

/// Which open [`open_phase`] times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenKind {
    /// As after a crash (`--recover`; keys `recover_*`).
    Abnormal,
    /// After a clean shutdown (`--reopen`; keys `reopen_*`).
    Clean,
}

/// Times `Store::open` of the store under `--dir`, and the shutdown after
/// it. Abnormal: the abort file is created if a clean shutdown removed it.
/// Clean: the abort file must be gone (the append phase's shutdown
/// succeeded).
fn open_phase(args: &Args, report: &mut Report, kind: OpenKind) -> anyhow::Result<()> {
    let root = store_root(args);
    ensure!(root.exists(), "no store under {} to open", root.display());
    let abort = ShardFiles::new(&root, 0).abort;
    match kind {
        OpenKind::Abnormal if !abort.exists() => {
            let dir = abort.parent().context("the abort path has a parent")?;
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::write(&abort, b"").with_context(|| format!("creating {}", abort.display()))?;
        }
        OpenKind::Abnormal => {}
        OpenKind::Clean => ensure!(
            !abort.exists(),
            "{} exists: the store was not shut down cleanly",
            abort.display()
        ),
    }
    let disk = UringDisk::new(disk_config(
        args,
        APPEND_FIXED_BUFFER_COUNT,
        WRITE_BUFFER_SIZE,
    ))
    .context("setting up io_uring")?;
    let start = Instant::now();
    let (store, open) =
        Store::open(disk, store_config(args, 0), now_ms()).context("opening the store")?;
    let elapsed = start.elapsed();
    // The CommitLog recovered (up to the end of the last valid record), and
    // the part of it the scan read (from the checkpointed segment on, or
    // all of it when the derived files were rebuilt).
    let end = open.recovery.scan.end;
    let log_bytes = end.saturating_sub(split_local(store.commit_log_min_offset()));
    let scan_bytes = if open.derived_rebuilt {
        log_bytes
    } else {
        end.saturating_sub(open.recovery.scanned_from)
    };
    // Report keys are static strings: one set per kind.
    let [
        abnormal,
        rebuilt,
        ms,
        log,
        scan,
        records,
        redispatched,
        scan_rate,
        shutdown_ms,
    ] = match kind {
        OpenKind::Abnormal => [
            "recover_abnormal",
            "recover_derived_rebuilt",
            "recover_ms",
            "recover_log_bytes",
            "recover_scan_bytes",
            "recover_records",
            "recover_redispatched",
            "recover_scan_mb_per_s",
            "recover_shutdown_ms",
        ],
        OpenKind::Clean => [
            "reopen_abnormal",
            "reopen_derived_rebuilt",
            "reopen_ms",
            "reopen_log_bytes",
            "reopen_scan_bytes",
            "reopen_records",
            "reopen_redispatched",
            "reopen_scan_mb_per_s",
            "reopen_shutdown_ms",
        ],
    };
    report.int(abnormal, u64::from(open.abnormal));
    report.int(rebuilt, u64::from(open.derived_rebuilt));
    report.int(ms, elapsed.as_millis() as u64);
    report.int(log, log_bytes);
    report.int(scan, scan_bytes);
    report.int(records, open.recovery.scan.record_count);
    report.int(redispatched, open.redispatched);
    report.float(scan_rate, mb_per_s(scan_bytes, elapsed));
    let mut acks = Vec::new();
    let start = Instant::now();
    store
        .shutdown(now_ms(), &mut acks)
        .context("store shutdown after the open")?;
    report.int(shutdown_ms, start.elapsed().as_millis() as u64);
    Ok(())
}

/// Issue 3's "Done when", read against the floors of the same run:
/// SYNC_FLUSH sustains this share of `floor_commit1m_mb_per_s`...
const SYNC_TARGET_SHARE_OF_COMMIT1M: f64 = 0.60;
/// ...with p99 no more than `floor_fsync4k_p99_us` plus this;
const SYNC_TARGET_P99_MARGIN_US: f64 = 1_000.0;
/// ASYNC_FLUSH sustains this share of `floor_direct_mb_per_s`.
const ASYNC_TARGET_SHARE_OF_DIRECT: f64 = 0.70;

/// One target: `value_key` held against `limit_key`'s figure scaled by
/// `share` plus `margin`, reported as `target_key` and (1 or 0) `meets_key`.
struct Target {
    target_key: &'static str,
    meets_key: &'static str,
    value_key: &'static str,
    limit_key: &'static str,
    share: f64,
    margin: f64,
    /// The value must stay at or below the target (a latency), not reach it.
    at_most: bool,
}

/// The targets of `flush`: against the written floors (the issue's), against
/// the fresh ones (what appends into unwritten extents meet), and the disk
/// alone in the store's shape on fresh extents against the issue's, which
/// says whether the issue's target is within reach of a growing log at all.
fn targets(flush: Flush) -> Vec<Target> {
    let throughput = |target_key, meets_key, value_key, limit_key, share| Target {
        target_key,
        meets_key,
        value_key,
        limit_key,
        share,
        margin: 0.0,
        at_most: false,
    };
    let p99 = |target_key, meets_key, value_key, limit_key| Target {
        target_key,
        meets_key,
        value_key,
        limit_key,
        share: 1.0,
        margin: SYNC_TARGET_P99_MARGIN_US,
        at_most: true,
    };
    match flush {
        Flush::Sync => {
            let share = SYNC_TARGET_SHARE_OF_COMMIT1M;
            vec![
                throughput(
                    "target_mb_per_s",
                    "meets_mb_per_s",
                    "mb_per_s",
                    "floor_commit1m_mb_per_s",
                    share,
                ),
                p99(
                    "target_p99_us",
                    "meets_p99_us",
                    "p99_us",
                    "floor_fsync4k_p99_us",
                ),
                throughput(
                    "target_fresh_mb_per_s",
                    "meets_fresh_mb_per_s",
                    "mb_per_s",
                    "floor_commit1m_fresh_mb_per_s",
                    share,
                ),
                p99(
                    "target_fresh_p99_us",
                    "meets_fresh_p99_us",
                    "p99_us",
                    "floor_fsync4k_fresh_p99_us",
                ),
                throughput(
                    "target_mb_per_s",
                    "floor_sync_group_fresh_meets_mb_per_s",
                    "floor_sync_group_fresh_mb_per_s",
                    "floor_commit1m_mb_per_s",
                    share,
                ),
                p99(
                    "target_p99_us",
                    "floor_sync_group_fresh_meets_p99_us",
                    "floor_sync_group_fresh_p99_us",
                    "floor_fsync4k_p99_us",
                ),
            ]
        }
        Flush::Async => {
            let share = ASYNC_TARGET_SHARE_OF_DIRECT;
            vec![
                throughput(
                    "target_mb_per_s",
                    "meets_mb_per_s",
                    "mb_per_s",
                    "floor_direct_mb_per_s",
                    share,
                ),
                throughput(
                    "target_fresh_mb_per_s",
                    "meets_fresh_mb_per_s",
                    "mb_per_s",
                    "floor_direct_fresh_mb_per_s",
                    share,
                ),
                throughput(
                    "target_mb_per_s",
                    "floor_direct_fresh_meets_mb_per_s",
                    "floor_direct_fresh_mb_per_s",
                    "floor_direct_mb_per_s",
                    share,
                ),
                throughput(
                    "target_mb_per_s",
                    "floor_direct_inflight_meets_mb_per_s",
                    "floor_direct_inflight_mb_per_s",
                    "floor_direct_mb_per_s",
                    share,
                ),
                throughput(
                    "target_mb_per_s",
                    "floor_direct_inflight_fresh_meets_mb_per_s",
                    "floor_direct_inflight_fresh_mb_per_s",
                    "floor_direct_mb_per_s",
                    share,
                ),
            ]
        }
    }
}

/// Appends each target of `flush` whose two figures the run measured (a
/// floor and the append phase, or two floors for the disk-alone verdicts),
/// each target key once.
fn report_targets(flush: Flush, report: &mut Report) {
    for target in targets(flush) {
        let (Some(value), Some(limit)) = (
            report.number(target.value_key),
            report.number(target.limit_key),
        ) else {
            continue;
        };
        let bound = limit * target.share + target.margin;
        if report.number(target.target_key).is_none() {
            report.float(target.target_key, bound);
        }
        let meets = if target.at_most {
            value <= bound
        } else {
            value >= bound
        };
        report.int(target.meets_key, u64::from(meets));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sync_run(mb_per_s: f64, p99_us: u64) -> Report {
        let mut report = Report::default();
        report.int("floor_fsync4k_p99_us", 200);
        report.float("floor_commit1m_mb_per_s", 2_000.0);
        report.float("floor_sync_group_fresh_mb_per_s", 1_100.0);
        report.int("floor_sync_group_fresh_p99_us", 1_300);
        report.float("floor_commit1m_fresh_mb_per_s", 1_500.0);
        report.int("floor_fsync4k_fresh_p99_us", 400);
        report.float("mb_per_s", mb_per_s);
        report.int("p99_us", p99_us);
        report
    }

    #[test]
    fn sync_targets_are_read_against_the_floors_of_the_run() {
        let mut report = sync_run(1_250.0, 1_200);
        report_targets(Flush::Sync, &mut report);
        let n = |key| report.number(key).unwrap_or_else(|| panic!("no {key}"));
        assert_eq!(n("target_mb_per_s"), 1_200.0);
        assert_eq!(n("target_p99_us"), 1_200.0);
        assert_eq!(n("meets_mb_per_s"), 1.0);
        assert_eq!(n("meets_p99_us"), 1.0, "the limit itself meets it");
        assert_eq!(n("target_fresh_mb_per_s"), 900.0);
        assert_eq!(n("target_fresh_p99_us"), 1_400.0);
        assert_eq!(n("meets_fresh_mb_per_s"), 1.0);
        assert_eq!(n("meets_fresh_p99_us"), 1.0);
        // The disk alone on fresh extents against the issue's targets.
        assert_eq!(n("floor_sync_group_fresh_meets_mb_per_s"), 0.0);
        assert_eq!(n("floor_sync_group_fresh_meets_p99_us"), 0.0);
        let targets = report
            .entries
            .iter()
            .filter(|(key, _)| *key == "target_mb_per_s")
            .count();
        assert_eq!(targets, 1, "each target is reported once");

        let mut report = sync_run(1_199.0, 1_201);
        report_targets(Flush::Sync, &mut report);
        assert_eq!(report.number("meets_mb_per_s"), Some(0.0));
        assert_eq!(report.number("meets_p99_us"), Some(0.0));
    }

    #[test]
    fn async_targets_and_runs_without_a_floor() {
        let mut report = Report::default();
        report.float("floor_direct_mb_per_s", 3_000.0);
        report.float("floor_direct_fresh_mb_per_s", 2_000.0);
        report.float("floor_direct_inflight_mb_per_s", 2_099.0);
        report.float("floor_direct_inflight_fresh_mb_per_s", 2_100.0);
        report.float("mb_per_s", 2_100.0);
        report_targets(Flush::Async, &mut report);
        assert_eq!(report.number("target_mb_per_s"), Some(2_100.0));
        assert_eq!(report.number("meets_mb_per_s"), Some(1.0));
        assert_eq!(report.number("target_fresh_mb_per_s"), Some(1_400.0));
        assert_eq!(report.number("meets_fresh_mb_per_s"), Some(1.0));
        assert_eq!(
            report.number("floor_direct_fresh_meets_mb_per_s"),
            Some(0.0)
        );
        assert_eq!(
            report.number("floor_direct_inflight_meets_mb_per_s"),
            Some(0.0)
        );
        assert_eq!(
            report.number("floor_direct_inflight_fresh_meets_mb_per_s"),
            Some(1.0)
        );
        // --floor-seconds 0: nothing to read the run against, no target.
        let mut report = Report::default();
        report.float("mb_per_s", 2_100.0);
        report_targets(Flush::Async, &mut report);
        assert!(
            report
                .entries
                .iter()
                .all(|(key, _)| !key.contains("target"))
        );
        assert_eq!(report.number("meets_mb_per_s"), None);
    }

    #[test]
    fn client_properties_parse_and_give_each_record_its_own_uniq_key() {
        use ringmq_protocol::message::properties::Properties;
        let mut properties = ClientProperties::new(0x1F);
        let first = properties.next(1_000).to_vec();
        let second = properties.next(1_000).to_vec();
        let mut ids = UniqIdGenerator::new(IpAddr::from([127, 0, 0, 1]), 0x1F, 0);
        let parsed = Properties::new(&first);
        assert_eq!(parsed.get("UNIQ_KEY"), Some(ids.next(1_000).as_str()));
        assert_eq!(parsed.get("WAIT"), Some("true"));
        assert_eq!(parsed.get("TAGS"), Some("TagA"));
        assert_eq!(
            Properties::new(&second).get("UNIQ_KEY"),
            Some(ids.next(1_000).as_str())
        );
        assert_eq!(first.len(), second.len());
        assert_ne!(first, second);
    }

    #[test]
    fn report_renders_key_value_pairs_and_json_with_the_same_keys() {
        let mut report = Report::default();
        report.int("appends_per_s", 12);
        report.float("mb_per_s", 1.26);
        report.text("flush", "sync");
        assert_eq!(
            report.render(false),
            "appends_per_s=12 mb_per_s=1.3 flush=sync"
        );
        assert_eq!(
            report.render(true),
            "{\"appends_per_s\":12,\"mb_per_s\":1.3,\"flush\":\"sync\"}"
        );
    }
}
