//! Delayed messages and the retry ladder through the real `ringmq broker`
//! binary over loopback: a delayed message is not pullable before it is
//! due and is delivered after, also across a SIGTERM restart and a
//! `kill -9`; a message sent back retries through the schedule topic and
//! ends in `%DLQ%<group>` after `maxReconsumeTimes`; a timer message
//! (`TIMER_DELIVER_MS`, `TIMER_DELAY_MS`) comes at its time, also across a
//! restart. Ports are
//! kernel-chosen, every address 127.0.0.1; a machine without io_uring
//! makes the tests print a skip line.
//!
//! Nothing here asserts a duration: "not early" is checked on the broker's
//! own timestamps (a delivered record's store time is at least the send
//! time plus the level's delay), and waits for a delivery only bound how
//! long a broken broker keeps the test running.

#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failure is the test's answer"
)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Broker, Client, fresh_store, pull_request, start_broker};
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{
    ConsumerSendMsgBackRequestHeader, CustomHeader, SendMessageResponseHeader,
};
use ringmq_protocol::message::{CrcCheck, iter_pull_body};

/// How long a wait for a delivery may take before the test gives up (a
/// bound on a broken broker, not an assertion on timing).
const DELIVERY_WAIT: Duration = Duration::from_secs(30);
/// The ladder of these tests: short levels, level 2 long enough that an
/// immediate pull is surely before it.
const LADDER: &str = "1s 3s 1s 1s 1s 1s";
const LEVEL_1_MS: i64 = 1_000;
const LEVEL_2_MS: i64 = 3_000;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Starts the broker on `store` with `shards` shards and the test's delay
/// ladder; None (skip) when io_uring is unavailable here.
fn start(store: &Path, shards: u32) -> Option<Broker> {
    start_broker(
        store,
        &[
            format!("--shards={shards}"),
            "--maxMessageSize=65536".into(),
            format!("--messageDelayLevel={LADDER}"),
        ],
    )
}

/// A pulled record's facts.
#[derive(Debug, Clone)]
struct Pulled {
    queue_offset: i64,
    commit_log_offset: i64,
    store_timestamp_ms: i64,
    reconsume_times: i32,
    retry_topic: Option<String>,
    delay: Option<String>,
    body: Vec<u8>,
}

impl Client {
    /// Sends `body` with `DELAY=level` (0: none) to `queue_id`.
    fn send_delayed(
        &mut self,
        topic: &str,
        queue_id: i32,
        level: i32,
        body: &[u8],
    ) -> SendMessageResponseHeader {
        let extra = if level > 0 {
            format!("DELAY\u{1}{level}\u{2}")
        } else {
            String::new()
        };
        self.send_with(topic, queue_id, &extra, body)
    }

    /// Sends `body` with `extra` properties (`key\u{1}value\u{2}`...).
    fn send_with(
        &mut self,
        topic: &str,
        queue_id: i32,
        extra: &str,
        body: &[u8],
    ) -> SendMessageResponseHeader {
        let properties = format!("TAGS\u{1}TagA\u{2}KEYS\u{1}k1\u{2}{extra}");
        self.send_message("pg", topic, queue_id, now_ms(), properties, body)
    }

    /// Pulls once from `offset` without suspending.
    fn pull(&mut self, topic: &str, queue_id: i32, offset: i64) -> Vec<Pulled> {
        let response = self.call(pull_request("cg", topic, queue_id, offset));
        if response.code != response_code::SUCCESS {
            return Vec::new();
        }
        iter_pull_body(response.body_bytes(), CrcCheck::Verify)
            .map(|record| {
                let view = record.unwrap();
                assert_eq!(view.topic(), topic);
                assert_eq!(view.queue_id(), queue_id);
                Pulled {
                    queue_offset: view.queue_offset(),
                    commit_log_offset: view.commit_log_offset(),
                    store_timestamp_ms: view.store_timestamp_ms(),
                    reconsume_times: view.reconsume_times(),
                    retry_topic: view.property("RETRY_TOPIC").map(str::to_owned),
                    delay: view.property("DELAY").map(str::to_owned),
                    body: view.body().to_vec(),
                }
            })
            .collect()
    }

    /// Pulls from `offset` until at least `count` records are there (or
    /// [`DELIVERY_WAIT`] passed); returns what is there.
    fn await_records(
        &mut self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        count: usize,
    ) -> Vec<Pulled> {
        let start = Instant::now();
        loop {
            let records = self.pull(topic, queue_id, offset);
            if records.len() >= count || start.elapsed() > DELIVERY_WAIT {
                return records;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn send_back(&mut self, offset: i64, delay_level: i32, max_reconsume_times: i32) -> i32 {
        let header = ConsumerSendMsgBackRequestHeader {
            offset,
            group: "cg".to_owned(),
            delay_level,
            max_reconsume_times: Some(max_reconsume_times),
            ..ConsumerSendMsgBackRequestHeader::default()
        };
        self.call(RemotingCommand::new_request(
            request_code::CONSUMER_SEND_MSG_BACK,
            header.to_ext_fields(),
        ))
        .code
    }
}

#[test]
fn a_delayed_message_is_not_pullable_before_it_is_due_and_is_delivered_after() {
    let store = fresh_store("schedule");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("Delayed", 2);
    let sent_at = now_ms();
    let answer = client.send_delayed("Delayed", 1, 2, b"later");
    // The answer names the real queue, as Java's does.
    assert_eq!(answer.queue_id, 1);
    assert!(client.pull("Delayed", 1, 0).is_empty(), "delivered early");
    let records = client.await_records("Delayed", 1, 0, 1);
    assert_eq!(records.len(), 1, "never delivered");
    let delivered = &records[0];
    assert_eq!(delivered.body, b"later");
    assert_eq!(delivered.delay, None, "DELAY is removed on delivery");
    assert!(
        delivered.store_timestamp_ms >= sent_at + LEVEL_2_MS,
        "stored at {} for a send at {sent_at} with a {LEVEL_2_MS} ms delay",
        delivered.store_timestamp_ms
    );
    // A plain message on the same queue comes after it, not redirected.
    client.send_delayed("Delayed", 1, 0, b"now");
    let records = client.pull("Delayed", 1, 0);
    assert_eq!(records.len(), 2);
    assert_eq!(records[1].body, b"now");
    drop(client);
    assert!(broker.stop().success());
}

#[test]
fn delayed_and_timer_messages_no_longer_in_memory_when_due_are_delivered() {
    // No tail cache, and 24 MiB written after the messages before they are
    // due: their records are read from the segment when due (in the
    // background, the level or the timer entry waiting for the read).
    let store = fresh_store("schedule");
    let Some(broker) = start_broker(
        &store,
        &[
            "--shards=1".to_owned(),
            "--maxMessageSize=65536".to_owned(),
            format!("--messageDelayLevel={LADDER}"),
            "--tailCacheSize=0".to_owned(),
        ],
    ) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("Delayed", 1);
    client.create_topic("Timed", 1);
    client.create_topic("Filler", 1);
    let sent_at = now_ms();
    for n in 0..3 {
        client.send_delayed("Delayed", 0, 2, format!("later {n}").as_bytes());
    }
    for n in 0..2 {
        let delay = format!("TIMER_DELAY_MS\u{1}{LEVEL_2_MS}\u{2}");
        client.send_with("Timed", 0, &delay, format!("timed {n}").as_bytes());
    }
    client.push_out_of_memory("Filler");
    for (topic, expected) in [
        ("Delayed", vec!["later 0", "later 1", "later 2"]),
        ("Timed", vec!["timed 0", "timed 1"]),
    ] {
        let records = client.await_records(topic, 0, 0, expected.len());
        let mut bodies: Vec<String> = records
            .iter()
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
            .collect();
        // Timer entries due in the same slot may come in either order; a
        // level's come in queue order.
        if topic == "Timed" {
            bodies.sort();
        }
        assert_eq!(bodies, expected, "{topic}");
        for record in &records {
            assert!(
                record.store_timestamp_ms >= sent_at + LEVEL_2_MS,
                "{topic}: delivered early"
            );
        }
    }
    drop(client);
    assert!(broker.stop().success());
}

/// Timer messages whose records left memory before a restart: the
/// restarted wheel reads its backlog in the background (the shard does not
/// wait on the disk for it) and delivers each at its time, once.
#[test]
fn a_timer_backlog_no_longer_in_memory_is_read_back_after_a_restart() {
    const TIMER_MS: i64 = 3_000;
    let store = fresh_store("schedule");
    let cold = |store: &Path| {
        start_broker(
            store,
            &[
                "--shards=1".to_owned(),
                "--maxMessageSize=65536".to_owned(),
                format!("--messageDelayLevel={LADDER}"),
                "--tailCacheSize=0".to_owned(),
            ],
        )
    };
    let Some(broker) = cold(&store) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("Timed", 1);
    client.create_topic("Filler", 1);
    let sent_at = now_ms();
    let delay = format!("TIMER_DELAY_MS\u{1}{TIMER_MS}\u{2}");
    for n in 0..5 {
        client.send_with("Timed", 0, &delay, format!("timed {n}").as_bytes());
    }
    client.push_out_of_memory("Filler");
    drop(client);
    assert!(broker.stop().success());

    let broker = cold(&store).unwrap();
    let mut client = broker.connect();
    let records = client.await_records("Timed", 0, 0, 5);
    let mut bodies: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    bodies.sort();
    assert_eq!(
        bodies,
        ["timed 0", "timed 1", "timed 2", "timed 3", "timed 4"]
    );
    for record in &records {
        assert!(
            record.store_timestamp_ms >= sent_at + TIMER_MS,
            "delivered early"
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(client.pull("Timed", 0, 0).len(), 5, "delivered once");
    drop(client);
    assert!(broker.stop().success());
}

#[test]
fn a_delayed_message_survives_a_sigterm_restart_before_it_is_due() {
    let store = fresh_store("schedule");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("Restarted", 2);
    let sent_at = now_ms();
    client.send_delayed("Restarted", 0, 2, b"across a restart");
    // An already delivered level-1 message must not come again.
    client.send_delayed("Restarted", 0, 1, b"before the restart");
    let first = client.await_records("Restarted", 0, 0, 1);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].body, b"before the restart");
    drop(client);
    assert!(broker.stop().success());
    let delay_offsets = std::fs::read_to_string(store.join("config/delayOffset.json")).unwrap();
    assert!(delay_offsets.contains("offsetTable"), "{delay_offsets}");

    let broker = start(&store, 2).unwrap();
    let mut client = broker.connect();
    let records = client.await_records("Restarted", 0, 0, 2);
    let bodies: Vec<&[u8]> = records.iter().map(|r| r.body.as_slice()).collect();
    assert_eq!(
        bodies,
        vec![&b"before the restart"[..], &b"across a restart"[..]]
    );
    assert!(records[1].store_timestamp_ms >= sent_at + LEVEL_2_MS);
    // Nothing more arrives: the level-1 message was not delivered twice.
    std::thread::sleep(Duration::from_millis(2 * LEVEL_1_MS as u64));
    assert_eq!(client.pull("Restarted", 0, 0).len(), 2);
    drop(client);
    assert!(broker.stop().success());
}

#[test]
fn a_kill_nine_loses_no_delayed_message() {
    const COUNT: usize = 20;
    let store = fresh_store("schedule");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("Killed", 1);
    let sent_at = now_ms();
    for i in 0..COUNT {
        let level = if i % 2 == 0 { 1 } else { 2 };
        client.send_delayed("Killed", 0, level, format!("m{i}").as_bytes());
    }
    // Some (the level-1 ones) are delivered before the kill.
    let before = client.await_records("Killed", 0, 0, COUNT / 2);
    assert!(before.len() >= COUNT / 2);
    drop(client);
    broker.kill_nine();

    let broker = start(&store, 2).unwrap();
    let mut client = broker.connect();
    let mut seen = std::collections::BTreeSet::new();
    let start_wait = Instant::now();
    while seen.len() < COUNT && start_wait.elapsed() < DELIVERY_WAIT {
        let mut offset = 0;
        loop {
            let records = client.pull("Killed", 0, offset);
            let Some(last) = records.last() else {
                break;
            };
            offset = last.queue_offset + 1;
            for record in &records {
                assert!(record.store_timestamp_ms >= sent_at + LEVEL_1_MS);
                seen.insert(String::from_utf8(record.body.clone()).unwrap());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let expected: std::collections::BTreeSet<String> =
        (0..COUNT).map(|i| format!("m{i}")).collect();
    assert_eq!(
        seen, expected,
        "every delayed message arrives (duplicates allowed)"
    );
}

#[test]
fn a_message_sent_back_retries_through_the_ladder_then_goes_to_the_dlq() {
    const MAX_RECONSUME_TIMES: i32 = 2;
    let store = fresh_store("schedule");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("Failing", 2);
    client.send_delayed("Failing", 1, 0, b"poison");
    // The first pull of group cg creates the group (autoCreateSubscriptionGroup).
    let records = client.await_records("Failing", 1, 0, 1);
    assert_eq!(records.len(), 1);
    let mut offset = records[0].commit_log_offset;
    for retry in 0..MAX_RECONSUME_TIMES {
        let sent_back_at = now_ms();
        assert_eq!(
            client.send_back(offset, 0, MAX_RECONSUME_TIMES),
            response_code::SUCCESS
        );
        let retried = client.await_records("%RETRY%cg", 0, i64::from(retry), 1);
        assert_eq!(retried.len(), 1, "retry {retry} never came");
        let copy = &retried[0];
        assert_eq!(copy.reconsume_times, retry + 1);
        assert_eq!(copy.retry_topic.as_deref(), Some("Failing"));
        assert_eq!(copy.body, b"poison");
        // Level 3 + reconsumeTimes of this ladder is 1 s.
        assert!(copy.store_timestamp_ms >= sent_back_at + LEVEL_1_MS);
        offset = copy.commit_log_offset;
    }
    assert!(client.pull("%DLQ%cg", 0, 0).is_empty());
    assert_eq!(
        client.send_back(offset, 0, MAX_RECONSUME_TIMES),
        response_code::SUCCESS
    );
    let dead = client.await_records("%DLQ%cg", 0, 0, 1);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reconsume_times, MAX_RECONSUME_TIMES + 1);
    assert_eq!(dead[0].retry_topic.as_deref(), Some("Failing"));
    assert_eq!(dead[0].body, b"poison");
    // No further retry was made.
    assert_eq!(
        client.pull("%RETRY%cg", 0, 0).len(),
        MAX_RECONSUME_TIMES as usize
    );
    drop(client);
    assert!(broker.stop().success());
}

#[test]
fn a_timer_message_is_delivered_at_its_time_and_once_across_restarts() {
    const TIMER_MS: i64 = 2_000;
    let store = fresh_store("schedule");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("Timed", 2);
    let sent_at = now_ms();
    let deliver_at = sent_at + TIMER_MS;
    client.send_with(
        "Timed",
        1,
        &format!("TIMER_DELIVER_MS\u{1}{deliver_at}\u{2}"),
        b"at a time",
    );
    client.send_with("Timed", 1, "TIMER_DELAY_MS\u{1}500\u{2}", b"soon");
    assert!(
        client.pull("Timed", 1, 0).is_empty(),
        "a timer message delivered early"
    );
    let soon = client.await_records("Timed", 1, 0, 1);
    assert_eq!(soon.len(), 1);
    assert_eq!(soon[0].body, b"soon");
    assert!(soon[0].store_timestamp_ms >= sent_at + 500);
    drop(client);
    assert!(broker.stop().success());

    let broker = start(&store, 2).unwrap();
    let mut client = broker.connect();
    // "soon" fired out of queue order (before "at a time", which holds the
    // wheel's durable offset back); the progress file says it was
    // delivered, so it does not come again.
    let records = client.await_records("Timed", 1, 0, 2);
    let bodies: Vec<&[u8]> = records.iter().map(|r| r.body.as_slice()).collect();
    assert_eq!(bodies, vec![&b"soon"[..], &b"at a time"[..]]);
    assert!(
        records[1].store_timestamp_ms >= deliver_at,
        "stored at {}, due at {deliver_at}",
        records[1].store_timestamp_ms
    );
    let delivered = records.len();
    drop(client);
    assert!(broker.stop().success());

    // The wheel's progress was persisted: nothing is delivered again.
    let broker = start(&store, 2).unwrap();
    let mut client = broker.connect();
    std::thread::sleep(Duration::from_millis(1_000));
    assert_eq!(client.pull("Timed", 1, 0).len(), delivered);
    drop(client);
    assert!(broker.stop().success());
}
