//! The `ringmq-loadgen` binary: parses the command line and runs one
//! subcommand. The work lives in the library; this file only wires options
//! to it and prints.

use std::fs;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use ringmq_loadgen::compare::{CompareFormat, compare};
use ringmq_loadgen::consume::{self, ConsumeConfig, StartFrom};
use ringmq_loadgen::delay::{self, DELAY_LEVELS_DEFAULT, DelayConfig, DelayTarget};
use ringmq_loadgen::disk_floor;
use ringmq_loadgen::hgrm;
use ringmq_loadgen::json::Json;
use ringmq_loadgen::null_broker::{NullBroker, NullBrokerConfig, QUEUE_COUNT_DEFAULT};
use ringmq_loadgen::plot::{self, Series, YScale};
use ringmq_loadgen::report::{self, LatencySummary, Machine, Summary};
use ringmq_loadgen::workload::{
    Outputs, ProduceConfig, ProduceMode, SENT_US_PROPERTY, run_produce as run_produce_workload,
};

/// ringmq-loadgen: drives any RocketMQ broker and records latency histograms.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Send messages and measure send latency and throughput.
    Produce(ProduceArgs),
    /// Pull messages and measure end-to-end latency from the born timestamp.
    Consume(ConsumeArgs),
    /// Produce and consume together: produce latency, end-to-end latency, lag.
    E2e(E2eArgs),
    /// Send delayed or timer messages, consume them, and measure delivery
    /// error (arrival minus due time).
    Delay(DelayArgs),
    /// Measure the disk: 4 KiB write+fdatasync latency and 1 MiB O_DIRECT MB/s.
    DiskFloor(DiskFloorArgs),
    /// Show runs (JSON summaries) side by side with ratios to the first.
    Compare(CompareArgs),
    /// Draw the percentile distributions of runs (JSON or .hgrm) as SVG.
    Plot(PlotArgs),
    /// Answer every send with SEND_OK at once; also acts as the name server.
    NullBroker(NullBrokerArgs),
}

/// How messages are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// N senders, each with one request outstanding.
    Sync,
    /// N connections, each with M requests in flight.
    Async,
    /// Requests that expect no response.
    Oneway,
    /// K messages per SEND_BATCH_MESSAGE, pipelined like async.
    Batch,
}

/// Options shared by every workload that writes results.
#[derive(Args, Clone, Debug)]
struct OutputArgs {
    /// Seconds to measure (after warm-up).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seconds of warm-up, excluded from results.
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Write the JSON summary here.
    #[arg(long, value_name = "FILE")]
    json_out: Option<PathBuf>,
    /// Write the percentile distribution (.hgrm) here.
    #[arg(long, value_name = "FILE")]
    hgrm_out: Option<PathBuf>,
    /// Write the HdrHistogram interval log (one histogram per second) here.
    #[arg(long, value_name = "FILE")]
    hlog_out: Option<PathBuf>,
    /// Name of the run in summaries, compare and plot (default: from the
    /// workload).
    #[arg(long)]
    name: Option<String>,
}

/// Topic of `produce`, `consume` and `e2e` (scripts/bench.sh's too).
const DEFAULT_TOPIC: &str = "RingmqBench";

#[derive(Args, Clone, Debug)]
struct ProduceArgs {
    /// Name server address.
    #[arg(long, default_value = "127.0.0.1:9876")]
    namesrv: String,
    /// Topic to send to. Not `BenchmarkTest`: ringmq keeps that one with
    /// 1,024 queues, as Java does, which spreads a run over 1,024
    /// ConsumeQueues, and Apache RocketMQ reserves it as a system topic.
    #[arg(long, default_value = DEFAULT_TOPIC)]
    topic: String,
    /// How messages are sent.
    #[arg(long, value_enum, default_value_t = Mode::Sync)]
    mode: Mode,
    /// Message body size in bytes.
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Senders (sync) or connections (async, oneway, batch).
    #[arg(long, default_value_t = 1)]
    senders: usize,
    /// Requests in flight per connection (async, oneway, batch).
    #[arg(long, default_value_t = 64)]
    inflight: usize,
    /// Messages per batch request (batch).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Open loop at this total rate (messages per second); closed loop if absent.
    #[arg(long, value_name = "MSGS_PER_S")]
    rate: Option<u64>,
    /// Queues to use (default: all writable queues in the route).
    #[arg(long)]
    queues: Option<u32>,
    /// Give each message a key and choose its queue by the key's hash.
    #[arg(long)]
    keys: bool,
    /// Tag for every message.
    #[arg(long)]
    tags: Option<String>,
    /// Producer group.
    #[arg(long, default_value = "ringmq_loadgen_producer")]
    group: String,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args, Clone, Debug)]
struct ConsumeArgs {
    /// Name server address.
    #[arg(long, default_value = "127.0.0.1:9876")]
    namesrv: String,
    /// Topic to consume (the default is `produce`'s).
    #[arg(long, default_value = DEFAULT_TOPIC)]
    topic: String,
    /// Consumer group.
    #[arg(long, default_value = "ringmq_loadgen_consumer")]
    group: String,
    /// Start at each queue's end (tail) or its oldest message (earliest).
    #[arg(long, value_enum, default_value_t = StartArg::Tail)]
    from: StartArg,
    /// Consumer threads (queues are shared among them round robin).
    #[arg(long, default_value_t = 1)]
    consumers: usize,
    /// Queues per broker to read (default: all readable queues).
    #[arg(long)]
    queues: Option<u32>,
    #[command(flatten)]
    output: OutputArgs,
}

/// Where consumers start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StartArg {
    /// New messages only.
    Tail,
    /// Catch up from the oldest retained message.
    Earliest,
}

#[derive(Args, Clone, Debug)]
struct E2eArgs {
    #[command(flatten)]
    produce: ProduceArgs,
    /// Consumer group.
    #[arg(long, default_value = "ringmq_loadgen_consumer")]
    consumer_group: String,
    /// Consumer threads.
    #[arg(long, default_value_t = 1)]
    consumers: usize,
}

#[derive(Args, Clone, Debug)]
#[command(group(clap::ArgGroup::new("delay_kind").required(true).args(["level", "delay_ms"])))]
struct DelayArgs {
    /// Name server address.
    #[arg(long, default_value = "127.0.0.1:9876")]
    namesrv: String,
    /// Topic to send to and consume.
    #[arg(long, default_value = "DelayTest")]
    topic: String,
    /// Delay level (DELAY property, 1-based in the broker's ladder).
    #[arg(long)]
    level: Option<i32>,
    /// Timer delay in ms (TIMER_DELIVER_MS = send time + this; RocketMQ 5).
    #[arg(long)]
    delay_ms: Option<u64>,
    /// Messages to send.
    #[arg(long, default_value_t = 100)]
    count: u64,
    /// Send rate, messages per second.
    #[arg(long, default_value_t = 50)]
    rate: u64,
    /// Message body size in bytes.
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// The broker's messageDelayLevel (to know a level's delay).
    #[arg(long, default_value = DELAY_LEVELS_DEFAULT)]
    delay_levels: String,
    /// Seconds to wait after the last due time for late messages.
    #[arg(long, default_value_t = 10)]
    drain_seconds: u64,
    /// Queues to use (default: all in the route).
    #[arg(long)]
    queues: Option<u32>,
    /// Producer group.
    #[arg(long, default_value = "ringmq_loadgen_delay_producer")]
    group: String,
    /// Consumer group.
    #[arg(long, default_value = "ringmq_loadgen_delay_consumer")]
    consumer_group: String,
    /// Write the JSON summary here.
    #[arg(long, value_name = "FILE")]
    json_out: Option<PathBuf>,
    /// Write the percentile distribution (.hgrm) here.
    #[arg(long, value_name = "FILE")]
    hgrm_out: Option<PathBuf>,
    /// Write the HdrHistogram interval log (one histogram per second) here.
    #[arg(long, value_name = "FILE")]
    hlog_out: Option<PathBuf>,
    /// Name of the run (default: from the workload).
    #[arg(long)]
    name: Option<String>,
}

#[derive(Args, Clone, Debug)]
struct DiskFloorArgs {
    /// Directory to measure (a scratch file is created and removed there).
    #[arg(long)]
    dir: PathBuf,
    /// Seconds for both measurements together.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Write the results as JSON here.
    #[arg(long, value_name = "FILE")]
    json_out: Option<PathBuf>,
}

#[derive(Args, Clone, Debug)]
struct CompareArgs {
    /// JSON summaries; the first is the reference.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print a markdown table.
    #[arg(long)]
    markdown: bool,
}

#[derive(Args, Clone, Debug)]
struct PlotArgs {
    /// JSON summaries or .hgrm files, one curve each.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// SVG file to write.
    #[arg(long)]
    out: PathBuf,
    /// Chart title.
    #[arg(long, default_value = "Latency by percentile")]
    title: String,
    /// Linear latency axis instead of logarithmic.
    #[arg(long)]
    linear_y: bool,
}

#[derive(Args, Clone, Debug)]
struct NullBrokerArgs {
    /// Address to listen on (name server and broker at once).
    #[arg(long, default_value = "127.0.0.1:9876")]
    listen: String,
    /// Queues per topic in the routes it hands out.
    #[arg(long, default_value_t = QUEUE_COUNT_DEFAULT)]
    queues: i32,
    /// Keep the last N messages per queue so pulls return them (0: none).
    #[arg(long, default_value_t = 0)]
    retain: usize,
}

fn main() {
    let cli = Cli::parse();
    if let Err(error) = run(cli) {
        eprintln!("ringmq-loadgen: {error:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Produce(args) => run_produce(&args),
        Command::NullBroker(args) => run_null_broker(&args),
        Command::Consume(args) => run_consume(&args),
        Command::E2e(args) => run_e2e(&args),
        Command::Delay(args) => run_delay(&args),
        Command::DiskFloor(args) => run_disk_floor(&args),
        Command::Compare(args) => run_compare(&args),
        Command::Plot(args) => run_plot(&args),
    }
}

fn outputs(args: &OutputArgs) -> Outputs {
    Outputs {
        name: args.name.clone(),
        command: command_line(),
        json: args.json_out.clone(),
        hgrm: args.hgrm_out.clone(),
        hlog: args.hlog_out.clone(),
        progress: std::io::stdout().is_terminal(),
    }
}

fn produce_config(args: &ProduceArgs) -> ProduceConfig {
    ProduceConfig {
        namesrv: args.namesrv.clone(),
        topic: args.topic.clone(),
        mode: match args.mode {
            Mode::Sync => ProduceMode::Sync,
            Mode::Async => ProduceMode::Async,
            Mode::Oneway => ProduceMode::Oneway,
            Mode::Batch => ProduceMode::Batch,
        },
        body_size: args.size,
        sender_count: args.senders,
        inflight_max: args.inflight,
        batch_size: args.batch,
        rate_per_s: args.rate,
        queue_count: queue_count(args.queues),
        keys: args.keys,
        tags: args.tags.clone(),
        producer_group: args.group.clone(),
        stamp_sent_us: false,
        duration: Duration::from_secs(args.output.seconds),
        warmup: Duration::from_secs(args.output.warmup),
    }
}

fn queue_count(queues: Option<u32>) -> Option<i32> {
    queues.map(|q| i32::try_from(q).unwrap_or(i32::MAX))
}

fn run_produce(args: &ProduceArgs) -> anyhow::Result<()> {
    let result = run_produce_workload(&produce_config(args), &outputs(&args.output))
        .context("running the produce workload")?;
    print!("{}", result.summary.table());
    println!("{}", result.summary.rocketmq_line());
    Ok(())
}

fn run_consume(args: &ConsumeArgs) -> anyhow::Result<()> {
    let config = ConsumeConfig {
        namesrv: args.namesrv.clone(),
        topic: args.topic.clone(),
        consumer_group: args.group.clone(),
        from: match args.from {
            StartArg::Tail => StartFrom::Tail,
            StartArg::Earliest => StartFrom::Earliest,
        },
        consumer_count: args.consumers,
        queue_count: queue_count(args.queues),
        duration: Duration::from_secs(args.output.seconds),
        warmup: Duration::from_secs(args.output.warmup),
    };
    let result = consume::run_consume(&config, &outputs(&args.output))
        .context("running the consume workload")?;
    println!(
        "end-to-end latency (from {SENT_US_PROPERTY} where a message has it, µs; else from its \
         born timestamp, 1 ms resolution):"
    );
    print!("{}", result.summary.table());
    if let Some((_, lag)) = result
        .summary
        .extra
        .iter()
        .find(|(k, _)| k == "consumer_lag")
    {
        let count = |key| lag.get(key).and_then(Json::as_f64).unwrap_or(0.0);
        println!(
            "consumer lag: final {} msgs, max on one queue {} msgs",
            count("final_total_msgs"),
            count("queue_max_msgs")
        );
    }
    Ok(())
}

fn run_e2e(args: &E2eArgs) -> anyhow::Result<()> {
    let produce = produce_config(&args.produce);
    let consume = ConsumeConfig {
        namesrv: produce.namesrv.clone(),
        topic: produce.topic.clone(),
        consumer_group: args.consumer_group.clone(),
        from: StartFrom::Tail,
        consumer_count: args.consumers,
        queue_count: produce.queue_count,
        duration: produce.duration,
        warmup: produce.warmup,
    };
    let result = consume::run_e2e(&produce, &consume, &outputs(&args.produce.output))
        .context("running the e2e workload")?;
    println!("produce:");
    print!("{}", result.produce.summary.table());
    println!("{}", result.produce.summary.rocketmq_line());
    let e2e = LatencySummary::of(&result.consume.message_latency);
    println!(
        "end-to-end µs (from each message's send time): p50 {:.0}  p90 {:.0}  p99 {:.0}  p99.9 {:.0}  \
         p99.99 {:.0}  max {:.0}  ({} msgs consumed, {} errors)",
        e2e.percentiles_us[0],
        e2e.percentiles_us[1],
        e2e.percentiles_us[2],
        e2e.percentiles_us[3],
        e2e.percentiles_us[4],
        e2e.max_us,
        result.consume.message_count,
        result.consume.error_count()
    );
    println!("{}", consume::lag_line(result.lag));
    Ok(())
}

fn run_delay(args: &DelayArgs) -> anyhow::Result<()> {
    let target = match (args.level, args.delay_ms) {
        (Some(level), None) => DelayTarget::Level(level),
        (None, Some(ms)) => DelayTarget::TimerMs(ms),
        _ => bail!("give exactly one of --level and --delay-ms"),
    };
    let config = DelayConfig {
        namesrv: args.namesrv.clone(),
        topic: args.topic.clone(),
        target,
        count: args.count,
        rate_per_s: args.rate,
        body_size: args.size,
        producer_group: args.group.clone(),
        consumer_group: args.consumer_group.clone(),
        queue_count: queue_count(args.queues),
        delay_levels: args.delay_levels.clone(),
        drain: Duration::from_secs(args.drain_seconds),
    };
    let outputs = Outputs {
        name: args.name.clone(),
        command: command_line(),
        json: args.json_out.clone(),
        hgrm: args.hgrm_out.clone(),
        hlog: args.hlog_out.clone(),
        progress: std::io::stdout().is_terminal(),
    };
    let result = delay::run_delay(&config, &outputs).context("running the delay workload")?;
    println!("delivery error (arrival minus due time):");
    print!("{}", result.summary.table());
    println!(
        "sent {}  send errors {}  arrived {}  early {} (by at most {} µs)  missing {}",
        result.sent,
        result.send_errors,
        result.arrived,
        result.early,
        result.early_max_us,
        result.missing()
    );
    Ok(())
}

fn run_null_broker(args: &NullBrokerArgs) -> anyhow::Result<()> {
    let broker = NullBroker::start(
        &args.listen,
        &NullBrokerConfig {
            queue_count: args.queues,
            retain: args.retain,
            ..NullBrokerConfig::default()
        },
    )
    .with_context(|| format!("listening on {}", args.listen))?;
    println!(
        "null-broker listening on {} (name server and broker)",
        broker.local_addr()
    );
    broker.wait();
    Ok(())
}

fn run_disk_floor(args: &DiskFloorArgs) -> anyhow::Result<()> {
    let floor = disk_floor::measure(&args.dir, Duration::from_secs(args.seconds))
        .with_context(|| format!("measuring the disk under {}", args.dir.display()))?;
    println!("disk_floor_dir={}", args.dir.display());
    for (key, value) in floor.key_values() {
        println!("{key}={value:.0}");
    }
    if let Some(path) = &args.json_out {
        let machine = Machine::detect();
        let mut members = vec![
            ("command".to_string(), Json::from(command_line())),
            ("git_commit".to_string(), Json::from(report::git_commit())),
            (
                "machine".to_string(),
                Json::Object(vec![
                    ("nproc".into(), machine.nproc.into()),
                    ("kernel".into(), machine.kernel.into()),
                ]),
            ),
        ];
        members.extend(floor.to_json_members());
        write_file(path, &Json::Object(members).to_pretty())?;
    }
    Ok(())
}

fn run_compare(args: &CompareArgs) -> anyhow::Result<()> {
    let runs = args
        .files
        .iter()
        .map(|path| read_summary(path))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let format = if args.markdown {
        CompareFormat::Markdown
    } else {
        CompareFormat::Text
    };
    print!("{}", compare(&runs, format));
    Ok(())
}

fn run_plot(args: &PlotArgs) -> anyhow::Result<()> {
    let mut series = Vec::new();
    for path in &args.files {
        series.push(read_series(path)?);
    }
    let scale = if args.linear_y {
        YScale::Linear
    } else {
        YScale::Log
    };
    write_file(&args.out, &plot::svg(&series, &args.title, scale))?;
    println!("wrote {}", args.out.display());
    Ok(())
}

fn read_summary(path: &Path) -> anyhow::Result<Summary> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Summary::parse(&text).with_context(|| format!("parsing {}", path.display()))
}

/// A curve from a JSON summary (its distribution and name) or an `.hgrm`
/// file (named after the file).
fn read_series(path: &Path) -> anyhow::Result<Series> {
    if path.extension().is_some_and(|ext| ext == "hgrm") {
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let distribution =
            hgrm::parse(&text).with_context(|| format!("parsing {}", path.display()))?;
        let name = path
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        return Ok(Series {
            name,
            points: distribution.points,
        });
    }
    let summary = read_summary(path)?;
    if summary.distribution.is_empty() {
        bail!("{} has no percentile distribution", path.display());
    }
    Ok(Series {
        name: summary.info.name,
        points: summary.distribution,
    })
}

fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}
