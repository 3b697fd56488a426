//! The client against a scripted name server: the `TBW102` fallback for a
//! topic that does not exist, and sync retries on another broker when one
//! answers SYSTEM_BUSY.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use ringmq_loadgen::client::{AUTO_CREATE_TOPIC, DEFAULT_TOPIC_QUEUE_COUNT, QueueAccess, Route};
use ringmq_loadgen::json::Json;
use ringmq_loadgen::null_broker::{NullBroker, NullBrokerConfig};
use ringmq_loadgen::workload::{Outputs, ProduceConfig, ProduceMode, run_produce};
use ringmq_protocol::code::{SerializeType, request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::frame;
use ringmq_protocol::json::{BrokerData, JsonStyle, QueueData, TopicRouteData};
use ringmq_protocol::limits::FRAME_SIZE_MAX;

/// A name server that knows `TBW102` and `Two` (both routed to `brokers`)
/// and answers TOPIC_NOT_EXIST for anything else. Returns its address.
#[allow(
    clippy::unwrap_used,
    reason = "a test helper: a failed unwrap fails the test"
)]
fn scripted_name_server(brokers: Vec<(String, String)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let data = TopicRouteData {
        broker_datas: brokers
            .iter()
            .map(|(name, addr)| BrokerData {
                cluster: "c".into(),
                broker_name: name.clone(),
                broker_addrs: [(0, addr.clone())].into_iter().collect(),
                ..BrokerData::default()
            })
            .collect(),
        queue_datas: brokers
            .iter()
            .map(|(name, _)| QueueData {
                broker_name: name.clone(),
                read_queue_nums: 8,
                write_queue_nums: 8,
                perm: 6,
                topic_sys_flag: 0,
            })
            .collect(),
        ..TopicRouteData::default()
    };
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let data = data.clone();
            std::thread::spawn(move || {
                let mut buffer = BytesMut::new();
                let mut chunk = [0_u8; 4096];
                while let Ok(count) = stream.read(&mut chunk) {
                    if count == 0 {
                        return;
                    }
                    buffer.extend_from_slice(&chunk[..count]);
                    while let Ok(Some(raw)) = frame::decode_frame_mut(&mut buffer, FRAME_SIZE_MAX) {
                        let request = RemotingCommand::from_frame(&raw).unwrap();
                        assert_eq!(request.code, request_code::GET_ROUTEINFO_BY_TOPIC);
                        let topic = request.ext_fields.get("topic").unwrap_or("");
                        let response = if topic == AUTO_CREATE_TOPIC || topic == "Two" {
                            let mut body = Vec::new();
                            data.to_json(&mut body, JsonStyle::Standard);
                            RemotingCommand::new_response(
                                response_code::SUCCESS,
                                request.opaque,
                                None,
                            )
                            .with_body(body.into())
                        } else {
                            RemotingCommand::new_response(
                                response_code::TOPIC_NOT_EXIST,
                                request.opaque,
                                Some("no route".into()),
                            )
                        };
                        let mut out = Vec::new();
                        response.encode(SerializeType::Json, &mut out).unwrap();
                        stream.write_all(&out).unwrap();
                    }
                }
            });
        }
    });
    addr
}

fn config(namesrv: &str, topic: &str, mode: ProduceMode) -> ProduceConfig {
    ProduceConfig {
        namesrv: namesrv.into(),
        topic: topic.into(),
        mode,
        body_size: 32,
        sender_count: 1,
        inflight_max: 8,
        batch_size: 1,
        rate_per_s: None,
        queue_count: None,
        keys: false,
        tags: None,
        producer_group: "loadgen_test".into(),
        stamp_sent_us: false,
        duration: Duration::from_millis(700),
        warmup: Duration::ZERO,
    }
}

#[test]
fn missing_topic_borrows_the_tbw102_route_with_default_queue_count() {
    let broker = NullBroker::start("127.0.0.1:0", &NullBrokerConfig::default()).unwrap();
    let namesrv = scripted_name_server(vec![("a".into(), broker.local_addr().to_string())]);
    let route = Route::lookup(&namesrv, "Missing", None, QueueAccess::Write).unwrap();
    assert!(route.auto_create);
    assert_eq!(route.queues.len(), DEFAULT_TOPIC_QUEUE_COUNT as usize);

    let result = run_produce(
        &config(&namesrv, "Missing", ProduceMode::Sync),
        &Outputs::default(),
    )
    .unwrap();
    assert!(result.total.message_count > 0);
    let auto = result
        .summary
        .info
        .config
        .iter()
        .find(|(k, _)| k == "route_auto_create");
    assert_eq!(auto.map(|(_, v)| v), Some(&Json::Bool(true)));
    broker.stop();
}

#[test]
fn sync_sends_retry_on_the_other_broker_and_async_errors_are_counted_by_code() {
    let busy_config = NullBrokerConfig {
        send_response_code: response_code::SYSTEM_BUSY,
        ..NullBrokerConfig::default()
    };
    let busy = NullBroker::start("127.0.0.1:0", &busy_config).unwrap();
    let healthy = NullBroker::start("127.0.0.1:0", &NullBrokerConfig::default()).unwrap();
    let namesrv = scripted_name_server(vec![
        ("busy".into(), busy.local_addr().to_string()),
        ("healthy".into(), healthy.local_addr().to_string()),
    ]);

    let sync = run_produce(
        &config(&namesrv, "Two", ProduceMode::Sync),
        &Outputs::default(),
    )
    .unwrap();
    let sent = sync.total.message_count;
    assert_eq!(
        sync.total.error_count(),
        0,
        "{:?}",
        sync.total.errors_by_code
    );
    assert!(
        busy.counters().messages.load(Ordering::Relaxed) > 0,
        "round robin reached busy"
    );
    assert_eq!(healthy.counters().messages.load(Ordering::Relaxed), sent);

    let pipelined = run_produce(
        &config(&namesrv, "Two", ProduceMode::Async),
        &Outputs::default(),
    )
    .unwrap();
    let busy_errors = pipelined
        .total
        .errors_by_code
        .get(&response_code::SYSTEM_BUSY)
        .copied();
    assert!(
        busy_errors.unwrap_or(0) > 0,
        "{:?}",
        pipelined.total.errors_by_code
    );
    assert!(pipelined.total.message_count > 0);
    assert_eq!(pipelined.summary.errors(), busy_errors.unwrap_or(0));
    busy.stop();
    healthy.stop();
}
