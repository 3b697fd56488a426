//! The real `ringmq broker` binary over loopback, driven with the protocol
//! crate's frames: transactional messages (half sends, END_TRANSACTION
//! commit and rollback, CHECK_TRANSACTION_STATE to a registered producer,
//! the check-back state surviving a kill -9) and SQL92 pulls. Every port is
//! kernel-chosen, every address 127.0.0.1; a machine without io_uring makes
//! the tests print a skip line.

#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failure is the test's answer"
)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Broker, Client, fresh_store, start_broker};
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::header::{
    CheckTransactionStateRequestHeader, CustomHeader, EndTransactionRequestHeader,
    PullMessageRequestHeader, PullSysFlag, SendMessageResponseHeader, TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
};
use ringmq_protocol::json::{HeartbeatData, JsonStyle, ProducerData};
use ringmq_protocol::message::{CrcCheck, decode_offset_msg_id, decode_record, iter_pull_body};

/// Read timeout of one frame.
/// Longest wait for a check-back or a delivery before the test fails.
const DEADLINE: Duration = Duration::from_secs(60);
/// The producer group of the transactional sends.
const GROUP: &str = "txn-pg";

/// Starts the broker on `store` with two shards and `extra` options; None
/// (skip) when io_uring is unavailable here.
fn start(store: &Path, extra: &[&str]) -> Option<Broker> {
    let mut options = vec!["--shards=2".to_owned()];
    options.extend(extra.iter().map(|option| (*option).to_owned()));
    start_broker(store, &options)
}

/// A half message's identity, as the Java client keeps it from the send.
#[derive(Debug, Clone)]
struct Half {
    queue_offset: i64,
    commit_log_offset: i64,
    uniq_key: String,
}

impl Client {
    /// HEART_BEAT registering this connection as a producer of [`GROUP`].
    fn register_producer(&mut self) {
        let data = HeartbeatData {
            client_id: "127.0.0.1@txn-test".to_owned(),
            producer_data_set: vec![ProducerData {
                group_name: GROUP.to_owned(),
            }],
            ..HeartbeatData::default()
        };
        let mut body = Vec::new();
        data.to_json(&mut body, JsonStyle::Java);
        let request = RemotingCommand::new_request(request_code::HEART_BEAT, ExtFields::new())
            .with_body(Bytes::from(body));
        self.call_ok(request);
    }

    fn send(
        &mut self,
        topic: &str,
        queue_id: i32,
        properties: &str,
        body: &[u8],
    ) -> SendMessageResponseHeader {
        // Now: a half born more than fileReservedTime ago is discarded unchecked.
        let born_timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        self.send_message(
            GROUP,
            topic,
            queue_id,
            born_timestamp,
            properties.to_owned(),
            body,
        )
    }

    /// A half message (TRAN_MSG) for `topic`/`queue_id`, as the Java
    /// transaction producer sends it.
    fn send_half(&mut self, topic: &str, queue_id: i32, key: &str) -> Half {
        let uniq_key = format!("UNIQ-{key}");
        let properties = format!(
            "KEYS\u{1}{key}\u{2}TRAN_MSG\u{1}true\u{2}PGROUP\u{1}{GROUP}\u{2}UNIQ_KEY\u{1}{uniq_key}\u{2}"
        );
        let sent = self.send(topic, queue_id, &properties, key.as_bytes());
        let (_, commit_log_offset) = decode_offset_msg_id(&sent.msg_id).unwrap();
        Half {
            queue_offset: sent.queue_offset,
            commit_log_offset,
            uniq_key,
        }
    }

    /// The next request the broker sends this connection, which must be
    /// the CHECK_TRANSACTION_STATE of `half` (or a put-back copy of it).
    fn next_check_of(
        &mut self,
        half: &Half,
    ) -> (RemotingCommand, CheckTransactionStateRequestHeader) {
        let check = self.next_request();
        assert_eq!(check.code, request_code::CHECK_TRANSACTION_STATE);
        let header: CheckTransactionStateRequestHeader = check.decode_custom_header().unwrap();
        assert_eq!(
            header.transaction_id.as_deref(),
            Some(half.uniq_key.as_str())
        );
        (check, header)
    }

    /// END_TRANSACTION, one-way as from the Java client.
    fn end(&mut self, half: &Half, kind: i32, from_check: bool) {
        self.oneway(end_request(half, kind, from_check));
    }

    /// Pulls `topic`/`queue_id` from 0 with `expression` of `expression_type`;
    /// returns the response code and the (KEYS, body) of the records.
    fn pull(
        &mut self,
        topic: &str,
        queue_id: i32,
        expression_type: &str,
        expression: &str,
    ) -> (i32, Vec<(String, Vec<u8>)>) {
        let header = PullMessageRequestHeader {
            consumer_group: "txn-cg".to_owned(),
            topic: topic.to_owned(),
            queue_id,
            queue_offset: 0,
            max_msg_nums: 32,
            sys_flag: PullSysFlag::SUBSCRIPTION,
            subscription: Some(expression.to_owned()),
            expression_type: Some(expression_type.to_owned()),
            ..PullMessageRequestHeader::default()
        };
        let response = self.call(RemotingCommand::new_request(
            request_code::PULL_MESSAGE,
            header.to_ext_fields(),
        ));
        let records = iter_pull_body(response.body_bytes(), CrcCheck::Verify)
            .map(|record| {
                let view = record.unwrap();
                assert_eq!(view.topic(), topic);
                (
                    view.property("KEYS").unwrap_or_default().to_owned(),
                    view.body().to_vec(),
                )
            })
            .collect();
        (response.code, records)
    }

    /// Pulls until `want` records are there (or fails at [`DEADLINE`]).
    fn pull_until(&mut self, topic: &str, queue_id: i32, want: usize) -> Vec<(String, Vec<u8>)> {
        let start = Instant::now();
        loop {
            let (code, records) = self.pull(topic, queue_id, "TAG", "*");
            if records.len() >= want {
                return records;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "only {records:?} arrived (last pull answered {code})"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The END_TRANSACTION request of `half`, as the Java client sends it.
fn end_request(half: &Half, kind: i32, from_check: bool) -> RemotingCommand {
    let header = EndTransactionRequestHeader {
        producer_group: GROUP.to_owned(),
        tran_state_table_offset: half.queue_offset,
        commit_log_offset: half.commit_log_offset,
        commit_or_rollback: kind,
        from_transaction_check: Some(from_check),
        msg_id: half.uniq_key.clone(),
        transaction_id: Some(half.uniq_key.clone()),
        ..EndTransactionRequestHeader::default()
    };
    RemotingCommand::new_request(request_code::END_TRANSACTION, header.to_ext_fields())
}

#[test]
fn committed_and_checked_back_halves_arrive_and_the_rolled_back_never_across_a_kill_9() {
    let store = fresh_store("txn");
    // No check-back in the first run: every half is younger than the timeout.
    let Some(broker) = start(&store, &["--transactionTimeOut=3600000"]) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("TxT", 2);
    // Queue 1 is shard 1's, the half queue shard 0's: the commit crosses shards.
    let commit = client.send_half("TxT", 1, "commit");
    let rollback = client.send_half("TxT", 1, "rollback");
    let unknown = client.send_half("TxT", 1, "unknown");
    assert_eq!(
        (
            commit.queue_offset,
            rollback.queue_offset,
            unknown.queue_offset
        ),
        (0, 1, 2),
        "half queue offsets"
    );
    let (code, records) = client.pull("TxT", 1, "TAG", "*");
    assert!(
        records.is_empty(),
        "a half message is not delivered ({code})"
    );
    client.end(&commit, TRANSACTION_COMMIT_TYPE, false);
    client.end(&rollback, TRANSACTION_ROLLBACK_TYPE, false);
    let records = client.pull_until("TxT", 1, 1);
    assert_eq!(records, vec![("commit".to_owned(), b"commit".to_vec())]);
    drop(client);
    broker.kill_nine();

    // Second run: check back at once; the unknown half is asked about.
    let broker = start(
        &store,
        &["--transactionTimeOut=0", "--transactionCheckInterval=500"],
    )
    .unwrap();
    let mut producer = broker.connect();
    producer.register_producer();
    let checked = loop {
        let check = producer.next_request();
        assert_eq!(check.code, request_code::CHECK_TRANSACTION_STATE);
        let header: CheckTransactionStateRequestHeader = check.decode_custom_header().unwrap();
        assert_eq!(header.topic.as_deref(), Some("TxT"));
        let body = decode_record(check.body_bytes(), CrcCheck::Skip).unwrap();
        assert_eq!(body.topic(), "TxT", "the check carries the real topic");
        assert_eq!(body.commit_log_offset(), header.commit_log_offset);
        let half = Half {
            queue_offset: header.tran_state_table_offset,
            commit_log_offset: header.commit_log_offset,
            uniq_key: header.transaction_id.clone().unwrap_or_default(),
        };
        if half.uniq_key == rollback.uniq_key {
            // The rollback was one-way: killed before its op record was
            // stored, the half is undecided again, and asking is right.
            assert_eq!(body.body(), b"rollback");
            producer.end(&half, TRANSACTION_ROLLBACK_TYPE, true);
            continue;
        }
        assert_eq!(
            half.uniq_key, unknown.uniq_key,
            "only undecided halves are checked back"
        );
        assert_eq!(body.body(), b"unknown");
        assert_ne!(
            header.commit_log_offset, unknown.commit_log_offset,
            "the check names the put-back copy"
        );
        break half;
    };
    producer.end(&checked, TRANSACTION_COMMIT_TYPE, true);
    let records = producer.pull_until("TxT", 1, 2);
    let keys: Vec<&str> = records.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, vec!["commit", "unknown"], "exactly the committed two");
}

/// No tail cache: a record leaves memory once its shard's write buffers
/// move on.
const COLD: [&str; 2] = ["--tailCacheSize=0", "--maxMessageSize=65536"];

/// A broker on `store` ([`COLD`], no check-back) with a half of each of
/// `keys` on `topic`'s queue 1, no longer in memory: the half queue's shard
/// written 25 MB past them. None (skip) when io_uring is unavailable here.
fn start_with_cold_halves(
    store: &Path,
    topic: &str,
    keys: &[&str],
) -> Option<(Broker, Client, Vec<Half>)> {
    let mut options = vec!["--transactionTimeOut=3600000"];
    options.extend(COLD);
    let broker = start(store, &options)?;
    let mut client = broker.connect();
    client.create_topic(topic, 2);
    client.create_topic("Filler", 2);
    let halves = keys
        .iter()
        .map(|key| client.send_half(topic, 1, key))
        .collect();
    // The half queue is shard 0's, and so is Filler's queue 0.
    client.push_out_of_memory_on("Filler", 0);
    Some((broker, client, halves))
}

/// END_TRANSACTION of halves no longer in memory (no tail cache, the half
/// queue's shard written far past them, as for a check-back's answer): the
/// half is read in the background while the request waits, and the commit
/// and the rollback do what they say; an offset where no half is stored is
/// answered SYSTEM_ERROR.
#[test]
fn halves_no_longer_in_memory_are_ended_after_their_read() {
    let store = fresh_store("txn");
    let Some((broker, mut client, halves)) =
        start_with_cold_halves(&store, "TxCold", &["commit", "rollback"])
    else {
        return;
    };
    let (commit, rollback) = (&halves[0], &halves[1]);
    let ended = client.call(end_request(rollback, TRANSACTION_ROLLBACK_TYPE, true));
    assert_eq!(ended.code, response_code::SUCCESS, "{:?}", ended.remark);
    let ended = client.call(end_request(commit, TRANSACTION_COMMIT_TYPE, true));
    assert_eq!(ended.code, response_code::SUCCESS, "{:?}", ended.remark);
    // Answered once the committed message is stored: it is there at once,
    // and the rolled-back one never.
    let (_, records) = client.pull("TxCold", 1, "TAG", "*");
    assert_eq!(records, vec![("commit".to_owned(), b"commit".to_vec())]);
    std::thread::sleep(Duration::from_millis(500));
    let (_, records) = client.pull("TxCold", 1, "TAG", "*");
    assert_eq!(records, vec![("commit".to_owned(), b"commit".to_vec())]);
    // Past shard 0's log end: nothing to end.
    let nowhere = Half {
        commit_log_offset: commit.commit_log_offset + (1 << 30),
        ..commit.clone()
    };
    let refused = client.call(end_request(&nowhere, TRANSACTION_COMMIT_TYPE, true));
    assert_eq!(refused.code, response_code::SYSTEM_ERROR);
    assert_eq!(
        refused.remark.as_deref(),
        Some("Find prepared transaction message failed")
    );
    drop(client);
    assert!(broker.stop().success());
}

/// A check round whose halves are no longer in memory (no tail cache, the
/// half queue's shard written far past them before a restart) reads them in
/// the background and checks them back; the answer commits the half.
#[test]
fn a_half_no_longer_in_memory_is_checked_back_after_its_read() {
    let store = fresh_store("txn");
    let Some((broker, client, halves)) = start_with_cold_halves(&store, "TxCheckCold", &["cold"])
    else {
        return;
    };
    let half = &halves[0];
    drop(client);
    assert!(broker.stop().success());

    let mut options = vec!["--transactionTimeOut=0", "--transactionCheckInterval=500"];
    options.extend(COLD);
    let broker = start(&store, &options).unwrap();
    let mut producer = broker.connect();
    producer.register_producer();
    let (check, header) = producer.next_check_of(half);
    let body = decode_record(check.body_bytes(), CrcCheck::Skip).unwrap();
    assert_eq!(body.body(), b"cold");
    let checked = Half {
        queue_offset: header.tran_state_table_offset,
        commit_log_offset: header.commit_log_offset,
        uniq_key: half.uniq_key.clone(),
    };
    producer.end(&checked, TRANSACTION_COMMIT_TYPE, true);
    let records = producer.pull_until("TxCheckCold", 1, 1);
    assert_eq!(records, vec![("cold".to_owned(), b"cold".to_vec())]);
    drop(producer);
    assert!(broker.stop().success());
}

#[test]
fn sql92_pulls_get_exactly_the_matching_messages() {
    let store = fresh_store("txn");
    let Some(broker) = start(&store, &["--enablePropertyFilter=true"]) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("SqlT", 1);
    for i in 0..6 {
        let properties = format!("KEYS\u{1}k{i}\u{2}a\u{1}{i}\u{2}");
        client.send("SqlT", 0, &properties, format!("b{i}").as_bytes());
    }
    client.send("SqlT", 0, "KEYS\u{1}none\u{2}", b"none");
    let (code, records) = client.pull("SqlT", 0, "SQL92", "a BETWEEN 2 AND 4 OR a = 0");
    assert_eq!(code, response_code::SUCCESS);
    let keys: Vec<&str> = records.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, vec!["k0", "k2", "k3", "k4"]);
    let (code, records) = client.pull("SqlT", 0, "SQL92", "a IS NULL");
    assert_eq!(code, response_code::SUCCESS);
    assert_eq!(records, vec![("none".to_owned(), b"none".to_vec())]);
    let (code, _) = client.pull("SqlT", 0, "SQL92", "a > AND");
    assert_eq!(code, response_code::SUBSCRIPTION_PARSE_FAILED);
}

#[test]
fn sql92_pulls_are_refused_unless_the_property_filter_is_enabled() {
    let store = fresh_store("txn");
    let Some(broker) = start(&store, &[]) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("SqlOff", 1);
    client.send("SqlOff", 0, "a\u{1}1\u{2}", b"x");
    let (code, records) = client.pull("SqlOff", 0, "SQL92", "a = 1");
    assert_eq!(code, response_code::SYSTEM_ERROR);
    assert!(records.is_empty());
}

#[test]
fn a_half_checked_transaction_check_max_times_goes_to_the_check_max_time_topic() {
    let store = fresh_store("txn");
    let Some(broker) = start(
        &store,
        &[
            "--transactionTimeOut=0",
            "--transactionCheckInterval=500",
            "--transactionCheckMax=2",
        ],
    ) else {
        return;
    };
    let mut producer = broker.connect();
    producer.create_topic("TxMax", 1);
    producer.register_producer();
    let half = producer.send_half("TxMax", 0, "never-answered");
    // Checked twice (never answered), then discarded.
    for round in 1..=2 {
        let check = producer.next_request();
        assert_eq!(
            check.code,
            request_code::CHECK_TRANSACTION_STATE,
            "check {round}"
        );
        let header: CheckTransactionStateRequestHeader = check.decode_custom_header().unwrap();
        assert_eq!(
            header.transaction_id.as_deref(),
            Some(half.uniq_key.as_str())
        );
        let body = decode_record(check.body_bytes(), CrcCheck::Skip).unwrap();
        assert_eq!(
            body.property("TRANSACTION_CHECK_TIMES"),
            Some(round.to_string().as_str()),
            "check times of check {round}"
        );
    }
    let discarded = producer.pull_until("TRANS_CHECK_MAX_TIME_TOPIC", 0, 1);
    assert_eq!(
        discarded,
        vec![("never-answered".to_owned(), b"never-answered".to_vec())]
    );
    let (_, delivered) = producer.pull("TxMax", 0, "TAG", "*");
    assert!(delivered.is_empty(), "a discarded half is never delivered");
}

#[test]
fn a_half_is_discarded_only_once_its_topic_is_on_disk_and_stays_across_a_kill_9() {
    let store = fresh_store("txn");
    let options = [
        "--transactionTimeOut=0",
        "--transactionCheckInterval=500",
        "--transactionCheckMax=1",
    ];
    let Some(broker) = start(&store, &options) else {
        return;
    };
    let mut producer = broker.connect();
    producer.create_topic("TxGone", 1);
    producer.register_producer();
    // The pulls' group exists before the config files become unwritable.
    let (_, nothing) = producer.pull("TxGone", 0, "TAG", "*");
    assert!(nothing.is_empty());
    // A file where the config directory was: topics.json cannot be written
    // (root ignores permissions, not the file type).
    let config = store.join("config");
    let moved = store.join("config.moved");
    std::fs::rename(&config, &moved).unwrap();
    std::fs::write(&config, b"not a directory").unwrap();
    let half = producer.send_half("TxGone", 0, "discarded");
    producer.next_check_of(&half);
    // Checked once and never answered: the next rounds discard it, into a
    // topic they create, but not before topics.json holds that topic.
    let waited_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < waited_until {
        let (code, records) = producer.pull("TRANS_CHECK_MAX_TIME_TOPIC", 0, "TAG", "*");
        assert!(
            records.is_empty(),
            "discarded into a topic not on disk (pull answered {code})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::remove_file(&config).unwrap();
    std::fs::rename(&moved, &config).unwrap();
    let discarded = producer.pull_until("TRANS_CHECK_MAX_TIME_TOPIC", 0, 1);
    assert_eq!(
        discarded,
        vec![("discarded".to_owned(), b"discarded".to_vec())]
    );
    drop(producer);
    broker.kill_nine();

    let broker = start(&store, &options).unwrap();
    let mut client = broker.connect();
    let (code, after) = client.pull("TRANS_CHECK_MAX_TIME_TOPIC", 0, "TAG", "*");
    assert_eq!(
        after,
        vec![("discarded".to_owned(), b"discarded".to_vec())],
        "the discarded half after a kill -9 (pull answered {code})"
    );
    let (_, delivered) = client.pull("TxGone", 0, "TAG", "*");
    assert!(delivered.is_empty(), "a discarded half is never delivered");
}
