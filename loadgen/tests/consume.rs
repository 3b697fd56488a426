//! End to end for the consume side: `null-broker` retaining messages, an
//! `e2e` run, then a catch-up `consume` from the earliest offset.

use std::sync::atomic::Ordering;
use std::time::Duration;

use ringmq_loadgen::consume::{ConsumeConfig, StartFrom, run_consume, run_e2e};
use ringmq_loadgen::json::Json;
use ringmq_loadgen::null_broker::{NullBroker, NullBrokerConfig};
use ringmq_loadgen::report::Summary;
use ringmq_loadgen::workload::{Outputs, ProduceConfig, ProduceMode};

fn consume_config(namesrv: &str, from: StartFrom) -> ConsumeConfig {
    ConsumeConfig {
        namesrv: namesrv.into(),
        topic: "E2eTest".into(),
        consumer_group: "loadgen_test_consumer".into(),
        from,
        consumer_count: 2,
        queue_count: None,
        duration: Duration::from_secs(1),
        warmup: Duration::ZERO,
    }
}

#[test]
fn e2e_consumes_what_was_produced_and_catch_up_reads_everything() {
    let broker = NullBroker::start(
        "127.0.0.1:0",
        &NullBrokerConfig {
            queue_count: 4,
            retain: 100_000,
            ..NullBrokerConfig::default()
        },
    )
    .unwrap();
    let namesrv = broker.local_addr().to_string();
    let dir = std::env::temp_dir().join(format!("ringmq-loadgen-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let produce = ProduceConfig {
        namesrv: namesrv.clone(),
        topic: "E2eTest".into(),
        mode: ProduceMode::Async,
        body_size: 64,
        sender_count: 1,
        inflight_max: 4,
        batch_size: 1,
        rate_per_s: Some(1_000),
        queue_count: None,
        keys: false,
        tags: None,
        producer_group: "loadgen_test".into(),
        stamp_sent_us: false,
        duration: Duration::from_millis(1500),
        warmup: Duration::ZERO,
    };
    let json = dir.join("e2e.json");
    let outputs = Outputs {
        json: Some(json.clone()),
        ..Outputs::default()
    };
    let result = run_e2e(
        &produce,
        &consume_config(&namesrv, StartFrom::Tail),
        &outputs,
    )
    .unwrap();
    let produced = result.produce.total.message_count;
    assert!(produced > 1_000, "produced {produced}");
    assert_eq!(
        result.consume.message_count, produced,
        "every produced message is consumed"
    );
    assert_eq!(result.consume.error_count(), 0);
    assert_eq!(result.lag.final_total, 0);
    // Producer and consumer share this machine's clock: latencies are small.
    assert!(result.consume.message_latency.value_at_quantile(0.5) < 1_000_000);

    let summary = Summary::parse(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let e2e = summary
        .extra
        .iter()
        .find(|(key, _)| key == "e2e")
        .map(|(_, v)| v)
        .unwrap();
    assert_eq!(
        e2e.get("msgs_consumed").and_then(Json::as_f64),
        Some(produced as f64)
    );
    assert!(e2e.get("p99_us").and_then(Json::as_f64).is_some());

    let sent = broker.counters().messages.load(Ordering::Relaxed);
    let outputs = Outputs::default();
    let catch_up = run_consume(&consume_config(&namesrv, StartFrom::Earliest), &outputs).unwrap();
    assert_eq!(
        catch_up.total.message_count, sent,
        "catch-up reads every retained message"
    );
    assert_eq!(catch_up.total.byte_count, sent * 64);
    broker.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}
