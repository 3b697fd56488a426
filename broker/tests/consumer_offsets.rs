//! `consumerOffset.json` on a broker with two shards: each shard hands the
//! persister its own queues' offsets, and the file is their merge.

#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failure is the test's answer"
)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Broker, fresh_store, send_message_request, start_broker};
use ringmq_protocol::json::{ConsumerOffsetFile, SubscriptionGroupConfig};

const TOPIC: &str = "Offsets";
const GROUP: &str = "offset-readers";
const QUEUES: i32 = 4;
/// Longer than `OFFSET_PERSIST_INTERVAL_MS` (5 s) and a write.
const PERSIST_WAIT: Duration = Duration::from_secs(20);

fn start(store: &Path) -> Option<Broker> {
    start_broker(store, &["--shards=2".to_owned()])
}

/// The group's offsets in the store's `consumerOffset.json`, by queue.
fn offsets_on_disk(store: &Path) -> Vec<(i32, i64)> {
    let Ok(content) = std::fs::read(store.join("config").join("consumerOffset.json")) else {
        return Vec::new();
    };
    let file = ConsumerOffsetFile::from_json(&content).unwrap();
    file.offset_table
        .get(&format!("{TOPIC}@{GROUP}"))
        .map(|queues| queues.iter().map(|(q, o)| (*q, *o)).collect())
        .unwrap_or_default()
}

/// After a restart only one shard's queue gets a commit: the file written
/// for it still holds the other shard's offsets (loaded at the start, never
/// changed since), and so does the broker after a kill -9.
#[test]
fn offsets_of_a_shard_with_no_new_commits_stay_in_the_file() {
    let store = fresh_store("consumer-offsets");
    let Some(broker) = start(&store) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic(TOPIC, QUEUES);
    client.put_group(&SubscriptionGroupConfig::new(GROUP));
    for queue_id in 0..QUEUES {
        for _ in 0..20 {
            client.call_ok(send_message_request(
                "offset-producer",
                TOPIC,
                queue_id,
                1_700_000_000_000,
                String::new(),
                b"body",
            ));
        }
        client.commit_offset_of(GROUP, TOPIC, queue_id, 5 + i64::from(queue_id));
    }
    drop(client);
    assert!(broker.stop().success());
    let before: Vec<(i32, i64)> = (0..QUEUES).map(|q| (q, 5 + i64::from(q))).collect();
    assert_eq!(offsets_on_disk(&store), before, "written at the stop");

    let Some(broker) = start(&store) else {
        panic!("the broker ran on this store before");
    };
    let mut client = broker.connect();
    client.commit_offset_of(GROUP, TOPIC, 0, 15);
    let mut expected = before.clone();
    expected[0] = (0, 15);
    let deadline = Instant::now() + PERSIST_WAIT;
    let mut on_disk = offsets_on_disk(&store);
    while on_disk.first() != Some(&(0, 15)) {
        assert!(
            Instant::now() < deadline,
            "the commit of queue 0 is not in the file after {PERSIST_WAIT:?}: {on_disk:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
        on_disk = offsets_on_disk(&store);
    }
    assert_eq!(on_disk, expected, "the file lost the other shard's offsets");

    drop(client);
    broker.kill_nine();
    let Some(broker) = start(&store) else {
        panic!("the broker ran on this store before");
    };
    let mut client = broker.connect();
    for (queue_id, offset) in expected {
        assert_eq!(
            client.committed_offset_of(GROUP, TOPIC, queue_id),
            Some(offset),
            "queue {queue_id} after a kill -9"
        );
    }
}
