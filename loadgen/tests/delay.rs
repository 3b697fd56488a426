//! The `delay` workload against `null-broker`, which stores messages and
//! serves them at once, ignoring `DELAY` and timer properties: a timer delay
//! of 0 arrives on time, any real delay arrives early, and both are counted.

use std::time::Duration;

use ringmq_loadgen::delay::{DELAY_LEVELS_DEFAULT, DelayConfig, DelayTarget, run_delay};
use ringmq_loadgen::json::Json;
use ringmq_loadgen::null_broker::{NullBroker, NullBrokerConfig};
use ringmq_loadgen::report::Summary;
use ringmq_loadgen::workload::Outputs;

fn config(namesrv: &str, topic: &str, target: DelayTarget) -> DelayConfig {
    DelayConfig {
        namesrv: namesrv.into(),
        topic: topic.into(),
        target,
        count: 40,
        rate_per_s: 400,
        body_size: 32,
        producer_group: "loadgen_delay_test".into(),
        consumer_group: "loadgen_delay_test_consumer".into(),
        queue_count: None,
        delay_levels: DELAY_LEVELS_DEFAULT.into(),
        drain: Duration::from_secs(2),
    }
}

fn broker() -> NullBroker {
    NullBroker::start(
        "127.0.0.1:0",
        &NullBrokerConfig {
            queue_count: 2,
            retain: 10_000,
            ..NullBrokerConfig::default()
        },
    )
    .expect("a null broker listens on a free loopback port")
}

#[test]
fn undelayed_timer_messages_arrive_on_time_and_are_measured() {
    let broker = broker();
    let namesrv = broker.local_addr().to_string();
    let dir = std::env::temp_dir().join(format!("ringmq-loadgen-delay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("delay.json");
    let outputs = Outputs {
        json: Some(json.clone()),
        ..Outputs::default()
    };
    let result = run_delay(
        &config(&namesrv, "DelayNow", DelayTarget::TimerMs(0)),
        &outputs,
    )
    .unwrap();
    assert_eq!(result.sent, 40);
    assert_eq!(result.send_errors, 0);
    assert_eq!(result.arrived, 40);
    assert_eq!(result.early, 0);
    assert_eq!(result.missing(), 0);
    let summary = Summary::parse(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(summary.msgs, 40);
    let section = summary
        .extra
        .iter()
        .find(|(key, _)| key == "delay")
        .map(|(_, value)| value.clone())
        .unwrap();
    assert_eq!(section.get("arrived").and_then(Json::as_f64), Some(40.0));
    assert_eq!(section.get("missing").and_then(Json::as_f64), Some(0.0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_broker_that_ignores_the_delay_is_caught_delivering_early() {
    let broker = broker();
    let namesrv = broker.local_addr().to_string();
    let result = run_delay(
        &config(&namesrv, "DelayEarly", DelayTarget::Level(2)),
        &Outputs::default(),
    )
    .unwrap();
    assert_eq!(result.sent, 40);
    assert_eq!(result.arrived, 40);
    assert_eq!(result.early, 40);
    assert_eq!(result.summary.msgs, 0);
    assert_eq!(result.summary.errors_by_code.get(&-2), Some(&40));
}
