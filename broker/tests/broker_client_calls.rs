//! Requests the broker answers by asking its consumers (GET_CONSUMER_RUNNING_INFO,
//! INVOKE_BROKER_TO_GET_CONSUMER_STATUS), with consumers played by raw
//! connections: one that answers, one whose connection closes, one that
//! never answers. The Java tests cover consumers that answer; these cover
//! the ends a real client rarely shows.

#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failure is the test's answer"
)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Client, fresh_store, start_broker};
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::header::{
    CustomHeader, GetConsumerRunningInfoRequestHeader, GetConsumerStatusRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};
use ringmq_protocol::json::{
    ConsumeStatsList, ConsumerData, GetConsumerStatusBody, HeartbeatData, JsonStyle, MessageQueue,
    SubscriptionData,
};

const GROUP: &str = "CallsGroup";
const TOPIC: &str = "CallsTopic";

/// HEART_BEAT registering `client` as a consumer of [`GROUP`] on [`TOPIC`].
fn register_consumer(client: &mut Client, client_id: &str) {
    let data = HeartbeatData {
        client_id: client_id.to_owned(),
        consumer_data_set: vec![ConsumerData {
            group_name: GROUP.to_owned(),
            subscription_data_set: vec![SubscriptionData {
                topic: TOPIC.to_owned(),
                sub_string: "*".to_owned(),
                ..SubscriptionData::default()
            }],
            ..ConsumerData::default()
        }],
        ..HeartbeatData::default()
    };
    let mut body = Vec::new();
    data.to_json(&mut body, JsonStyle::Java);
    client.call_ok(
        RemotingCommand::new_request(request_code::HEART_BEAT, ExtFields::new())
            .with_body(Bytes::from(body)),
    );
}

/// The next request the broker sends `client` with `code`, past the
/// NOTIFY_CONSUMER_IDS_CHANGED it sends as the group changes.
fn asked(client: &mut Client, code: i32) -> RemotingCommand {
    loop {
        let request = client.next_request();
        if request.code != request_code::NOTIFY_CONSUMER_IDS_CHANGED {
            assert_eq!(request.code, code, "{request:?}");
            return request;
        }
    }
}

fn status_request(client_addr: Option<&str>) -> RemotingCommand {
    let header = GetConsumerStatusRequestHeader {
        topic: TOPIC.to_owned(),
        group: GROUP.to_owned(),
        client_addr: client_addr.map(str::to_owned),
    };
    RemotingCommand::new_request(
        request_code::INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
        header.to_ext_fields(),
    )
}

#[test]
fn consumer_calls_end_with_the_answers_there_are() {
    let store = fresh_store("client-calls");
    let Some(broker) = start_broker(&store, &["--shards=2".to_owned()]) else {
        return;
    };
    let mut admin = broker.connect();
    admin.create_topic(TOPIC, 2);
    let mut answering = broker.connect();
    register_consumer(&mut answering, "127.0.0.1@answering");
    let mut closing = broker.connect();
    register_consumer(&mut closing, "127.0.0.1@closing");

    // Both are asked at once; one answers, the other's connection closes.
    let opaque = admin.send_request(status_request(None));
    let mut requests = Vec::new();
    for consumer in [&mut answering, &mut closing] {
        let request = asked(consumer, request_code::GET_CONSUMER_STATUS_FROM_CLIENT);
        assert_eq!(request.ext_fields.get("topic"), Some(TOPIC));
        requests.push(request);
    }
    let queue = MessageQueue::new(TOPIC, "broker-a", 1);
    let answer = GetConsumerStatusBody {
        message_queue_table: BTreeMap::from([(queue.clone(), 5)]),
        consumer_table: BTreeMap::new(),
    };
    let mut body = Vec::new();
    answer.to_json(&mut body, JsonStyle::Java);
    answering.respond(
        &requests[0],
        RemotingCommand::new_response(response_code::SUCCESS, 0, None).with_body(Bytes::from(body)),
    );
    drop(closing);
    let status = admin.response_to(opaque);
    assert_eq!(status.code, response_code::SUCCESS, "{:?}", status.remark);
    let table = GetConsumerStatusBody::from_json(status.body_bytes()).unwrap();
    assert_eq!(
        table.consumer_table,
        BTreeMap::from([(
            "127.0.0.1@answering".to_owned(),
            BTreeMap::from([(queue, 5)])
        )]),
        "the closed consumer is left out"
    );

    // A consumer that never answers: its call ends at the timeout (5 s).
    let started = Instant::now();
    let opaque = admin.send_request(status_request(Some("127.0.0.1@answering")));
    asked(
        &mut answering,
        request_code::GET_CONSUMER_STATUS_FROM_CLIENT,
    );
    let status = admin.response_to(opaque);
    assert_eq!(status.code, response_code::SUCCESS, "{:?}", status.remark);
    let table = GetConsumerStatusBody::from_json(status.body_bytes()).unwrap();
    assert!(table.consumer_table.is_empty(), "{table:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(4_500),
        "answered after {:?}, before the consumer's time ran out",
        started.elapsed()
    );

    // Running info relayed from a consumer whose connection then closes.
    let running = GetConsumerRunningInfoRequestHeader {
        consumer_group: GROUP.to_owned(),
        client_id: "127.0.0.1@answering".to_owned(),
        jstack_enable: false,
    };
    let opaque = admin.send_request(RemotingCommand::new_request(
        request_code::GET_CONSUMER_RUNNING_INFO,
        running.to_ext_fields(),
    ));
    asked(&mut answering, request_code::GET_CONSUMER_RUNNING_INFO);
    drop(answering);
    let refused = admin.response_to(opaque);
    assert_eq!(refused.code, response_code::SYSTEM_ERROR);
    assert!(
        refused
            .remark
            .as_deref()
            .unwrap_or("")
            .contains("connection closed"),
        "{:?}",
        refused.remark
    );
    drop(admin);
    assert!(broker.stop().success());
}

/// GET_BROKER_CONSUME_STATS over offsets a client committed at i64::MAX on
/// every queue: the total lag saturates (adding the queues' lags
/// overflowed, a panic of the shard; found by the hostile-headers test).
#[test]
fn broker_consume_stats_over_offsets_committed_at_the_largest_value() {
    let store = fresh_store("client-calls");
    let Some(broker) = start_broker(&store, &["--shards=2".to_owned()]) else {
        return;
    };
    let mut admin = broker.connect();
    admin.create_topic(TOPIC, 2);
    let mut consumer = broker.connect();
    register_consumer(&mut consumer, "127.0.0.1@greedy");
    for queue_id in 0..2 {
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: GROUP.to_owned(),
            topic: TOPIC.to_owned(),
            queue_id,
            commit_offset: i64::MAX,
            broker_name: None,
        };
        admin.call_ok(RemotingCommand::new_request(
            request_code::UPDATE_CONSUMER_OFFSET,
            header.to_ext_fields(),
        ));
    }
    let answer = admin.call_ok(RemotingCommand::new_request(
        request_code::GET_BROKER_CONSUME_STATS,
        ExtFields::new(),
    ));
    let stats = ConsumeStatsList::from_json(answer.body_bytes()).unwrap();
    assert_eq!(stats.total_diff, i64::MIN, "{stats:?}");
    drop(consumer);
    drop(admin);
    assert!(broker.stop().success());
}
