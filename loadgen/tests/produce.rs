//! End to end: `null-broker` in-process on a loopback port, a short produce
//! run in each mode, and the files read back.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ringmq_loadgen::hgrm::{self, Distribution};
use ringmq_loadgen::hist::new_latency_histogram;
use ringmq_loadgen::hlog;
use ringmq_loadgen::null_broker::{NullBroker, NullBrokerConfig};
use ringmq_loadgen::report::Summary;
use ringmq_loadgen::workload::{Outputs, ProduceConfig, ProduceMode, RunResult, run_produce};

#[allow(
    clippy::unwrap_used,
    reason = "a test helper: a failed unwrap fails the test"
)]
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ringmq-loadgen-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn config(namesrv: &str, mode: ProduceMode) -> ProduceConfig {
    ProduceConfig {
        namesrv: namesrv.into(),
        topic: "LoadgenTest".into(),
        mode,
        body_size: 100,
        sender_count: 2,
        inflight_max: 8,
        batch_size: 16,
        rate_per_s: None,
        queue_count: None,
        keys: mode == ProduceMode::Async,
        tags: Some("t".into()),
        producer_group: "loadgen_test".into(),
        stamp_sent_us: false,
        duration: Duration::from_millis(1500),
        warmup: Duration::ZERO,
    }
}

fn outputs(dir: &std::path::Path, name: &str) -> Outputs {
    Outputs {
        name: Some(name.into()),
        command: format!("test {name}"),
        json: Some(dir.join(format!("{name}.json"))),
        hgrm: Some(dir.join(format!("{name}.hgrm"))),
        hlog: Some(dir.join(format!("{name}.hlog"))),
        progress: false,
    }
}

/// The .hgrm, the interval log and the JSON decode back to what was recorded.
#[allow(
    clippy::unwrap_used,
    reason = "a test helper: a failed unwrap fails the test"
)]
fn check_files(result: &RunResult, outputs: &Outputs) {
    let recorded = &result.total.message_latency;

    let text = std::fs::read_to_string(outputs.hgrm.as_ref().unwrap()).unwrap();
    let parsed = hgrm::parse(&text).unwrap();
    let expected = Distribution::of(recorded);
    assert_eq!(parsed.total_count, recorded.len());
    assert_eq!(
        parsed.max_us,
        recorded.highest_equivalent(recorded.max()) as f64
    );
    assert_eq!(parsed.points.len(), expected.points.len());
    for (read, written) in parsed.points.iter().zip(&expected.points) {
        assert_eq!(
            (read.value_us, read.total_count),
            (written.value_us, written.total_count)
        );
        // The file prints percentiles with 12 decimals, as HdrHistogram does.
        assert!((read.percentile - written.percentile).abs() < 1e-11);
    }

    let intervals = hlog::read(&std::fs::read(outputs.hlog.as_ref().unwrap()).unwrap()).unwrap();
    assert!(!intervals.is_empty());
    let mut sum = new_latency_histogram();
    for interval in &intervals {
        sum.add(&interval.histogram).unwrap();
    }
    assert_eq!(
        &sum, recorded,
        "interval log must sum to the recorded histogram"
    );

    let json = std::fs::read_to_string(outputs.json.as_ref().unwrap()).unwrap();
    let summary = Summary::parse(&json).unwrap();
    assert_eq!(summary, result.summary);
    assert_eq!(summary.msgs, result.total.message_count);
}

fn wait_for(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    condition()
}

#[test]
fn produce_runs_each_mode_against_the_null_broker_and_writes_files() {
    let broker = NullBroker::start("127.0.0.1:0", &NullBrokerConfig::default()).unwrap();
    let namesrv = broker.local_addr().to_string();
    let dir = scratch_dir("modes");
    let mut sent_total = 0;
    for mode in [
        ProduceMode::Sync,
        ProduceMode::Async,
        ProduceMode::Oneway,
        ProduceMode::Batch,
    ] {
        let outputs = outputs(&dir, mode.name());
        let result = run_produce(&config(&namesrv, mode), &outputs).unwrap();
        let total = &result.total;
        assert!(total.message_count > 0, "{mode:?} sent nothing");
        assert_eq!(
            total.error_count(),
            0,
            "{mode:?}: {:?}",
            total.errors_by_code
        );
        assert_eq!(total.byte_count, total.message_count * 100);
        assert_eq!(total.message_latency.len(), total.message_count);
        if mode == ProduceMode::Batch {
            assert_eq!(total.message_count, total.request_count * 16);
        } else {
            assert_eq!(total.message_count, total.request_count);
        }
        check_files(&result, &outputs);
        sent_total += total.message_count;
        let received = || broker.counters().messages.load(Ordering::Relaxed);
        assert!(
            wait_for(|| received() == sent_total),
            "{mode:?}: broker {} vs {sent_total}",
            received()
        );
    }
    broker.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn open_loop_sends_at_the_requested_rate_and_excludes_warmup() {
    let broker = NullBroker::start("127.0.0.1:0", &NullBrokerConfig::default()).unwrap();
    let namesrv = broker.local_addr().to_string();
    let dir = scratch_dir("rate");
    let mut config = config(&namesrv, ProduceMode::Async);
    config.rate_per_s = Some(2_000);
    config.duration = Duration::from_secs(2);
    config.warmup = Duration::from_secs(1);
    let outputs = outputs(&dir, "rate");
    let result = run_produce(&config, &outputs).unwrap();
    let sent = broker.counters().messages.load(Ordering::Relaxed);
    let measured = result.total.message_count;
    // 2 s measured at 2,000/s; the 1 s warm-up reached the broker but not
    // the results.
    assert!((3_600..=4_400).contains(&measured), "measured {measured}");
    assert!(
        sent >= measured + 1_800,
        "broker got {sent}, measured {measured}"
    );
    let rate = result.summary.msgs_per_s();
    // Measured time includes the drain after the end, so allow for a slow one.
    assert!((1_500.0..=2_200.0).contains(&rate), "rate {rate}");
    check_files(&result, &outputs);
    broker.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}
