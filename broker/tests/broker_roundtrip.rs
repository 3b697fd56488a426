//! The real `ringmq broker` binary over loopback, driven with the protocol
//! crate's frames: send and pull round trips, forwarding between shards,
//! the store lock, and a SIGTERM + restart that keeps messages and offsets.
//! Every port is kernel-chosen, every address 127.0.0.1; a machine without
//! io_uring makes the tests print a skip line.

#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failure is the test's answer"
)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Broker, Client, commit_log_offset, fresh_store, pull_request, start_broker};
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::header::{
    BoundaryType, ConsumerSendMsgBackRequestHeader, CustomHeader, DeleteTopicRequestHeader,
    GetConsumeStatsRequestHeader, GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader, GetKvConfigRequestHeader, PullMessageRequestHeader,
    PullMessageResponseHeader, PullSysFlag, PutKvConfigRequestHeader,
    QueryConsumeTimeSpanRequestHeader, QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader, QueryMessageRequestHeader, ResetOffsetRequestHeader,
    SearchOffsetRequestHeader, SearchOffsetResponseHeader, SendMessageResponseHeader,
};
use ringmq_protocol::json::{
    JsonValue, KvTable, ResetOffsetBody, SubscriptionGroupConfig, SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper, parse as json_parse,
};
use ringmq_protocol::message::{CrcCheck, iter_pull_body};

/// Starts the broker on `store` with `shards` shards; None (skip) when
/// io_uring is unavailable here.
fn start(store: &Path, shards: u32) -> Option<Broker> {
    start_broker(
        store,
        &[
            format!("--shards={shards}"),
            "--maxMessageSize=65536".into(),
        ],
    )
}

impl Client {
    /// GET_ALL_TOPIC_CONFIG's table.
    fn all_topics(&mut self) -> TopicConfigSerializeWrapper {
        let answer = self.call_ok(RemotingCommand::new_request(
            request_code::GET_ALL_TOPIC_CONFIG,
            ExtFields::new(),
        ));
        TopicConfigSerializeWrapper::from_json(answer.body_bytes()).unwrap()
    }

    fn send(&mut self, topic: &str, queue_id: i32, body: &[u8]) -> SendMessageResponseHeader {
        self.send_message(
            "pg",
            topic,
            queue_id,
            1_700_000_000_000,
            "TAGS\u{1}TagA\u{2}KEYS\u{1}k1\u{2}".to_owned(),
            body,
        )
    }

    /// Pulls with the header's subscription, without suspending; returns
    /// (code, next offset, bodies).
    fn pull(
        &mut self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        commit: Option<i64>,
    ) -> (i32, i64, Vec<Vec<u8>>) {
        let mut flags = PullSysFlag::SUBSCRIPTION;
        if commit.is_some() {
            flags |= PullSysFlag::COMMIT_OFFSET;
        }
        let header = PullMessageRequestHeader {
            consumer_group: "cg".to_owned(),
            topic: topic.to_owned(),
            queue_id,
            queue_offset: offset,
            max_msg_nums: 32,
            sys_flag: flags,
            commit_offset: commit.unwrap_or(0),
            suspend_timeout_millis: 0,
            subscription: Some("*".to_owned()),
            expression_type: Some("TAG".to_owned()),
            ..PullMessageRequestHeader::default()
        };
        let response = self.call(RemotingCommand::new_request(
            request_code::PULL_MESSAGE,
            header.to_ext_fields(),
        ));
        let pulled: PullMessageResponseHeader = response.decode_custom_header().unwrap();
        let bodies = iter_pull_body(response.body_bytes(), CrcCheck::Verify)
            .map(|record| {
                let view = record.unwrap();
                assert_eq!(view.topic(), topic);
                assert_eq!(view.queue_id(), queue_id);
                assert!(view.property("CLUSTER").is_some(), "CLUSTER added");
                view.body().to_vec()
            })
            .collect();
        (response.code, pulled.next_begin_offset, bodies)
    }

    /// Sends a pull that may be held (suspend flag, `hold_ms`), without
    /// waiting for its answer; returns its opaque.
    fn start_held_pull(&mut self, topic: &str, queue_id: i32, offset: i64, hold_ms: i64) -> i32 {
        let header = PullMessageRequestHeader {
            consumer_group: "cg".to_owned(),
            topic: topic.to_owned(),
            queue_id,
            queue_offset: offset,
            max_msg_nums: 32,
            sys_flag: PullSysFlag::SUBSCRIPTION | PullSysFlag::SUSPEND,
            suspend_timeout_millis: hold_ms,
            subscription: Some("*".to_owned()),
            expression_type: Some("TAG".to_owned()),
            ..PullMessageRequestHeader::default()
        };
        self.send_request(RemotingCommand::new_request(
            request_code::PULL_MESSAGE,
            header.to_ext_fields(),
        ))
    }

    /// Pulls once and returns the decoded records' (commit log offset,
    /// reconsume times, RETRY_TOPIC property, body).
    fn pull_records(
        &mut self,
        topic: &str,
        queue_id: i32,
    ) -> Vec<(i64, i32, Option<String>, Vec<u8>)> {
        let response = self.call_ok(pull_request("cg", topic, queue_id, 0));
        iter_pull_body(response.body_bytes(), CrcCheck::Verify)
            .map(|record| {
                let view = record.unwrap();
                (
                    view.commit_log_offset(),
                    view.reconsume_times(),
                    view.property("RETRY_TOPIC").map(str::to_owned),
                    view.body().to_vec(),
                )
            })
            .collect()
    }

    fn send_back(&mut self, offset: i64, delay_level: i32) -> i32 {
        self.send_back_answer(offset, delay_level).code
    }

    /// CONSUMER_SEND_MSG_BACK of group cg's message at `offset`.
    fn send_back_answer(&mut self, offset: i64, delay_level: i32) -> RemotingCommand {
        let header = ConsumerSendMsgBackRequestHeader {
            offset,
            group: "cg".to_owned(),
            delay_level,
            max_reconsume_times: Some(16),
            ..ConsumerSendMsgBackRequestHeader::default()
        };
        self.call(RemotingCommand::new_request(
            request_code::CONSUMER_SEND_MSG_BACK,
            header.to_ext_fields(),
        ))
    }

    /// `commitLogSyncReads` of GET_BROKER_RUNTIME_INFO: the CommitLog reads
    /// the shards waited for on their threads.
    fn sync_reads(&mut self) -> u64 {
        let info = self.call_ok(RemotingCommand::new_request(
            request_code::GET_BROKER_RUNTIME_INFO,
            ExtFields::new(),
        ));
        let table = KvTable::from_json(info.body_bytes()).unwrap().table;
        table["commitLogSyncReads"].parse().unwrap()
    }

    fn query_offset(&mut self, topic: &str, queue_id: i32) -> (i32, i64) {
        let header = QueryConsumerOffsetRequestHeader {
            consumer_group: "cg".to_owned(),
            topic: topic.to_owned(),
            queue_id,
            set_zero_if_not_found: Some(false),
            broker_name: None,
        };
        let response = self.call(RemotingCommand::new_request(
            request_code::QUERY_CONSUMER_OFFSET,
            header.to_ext_fields(),
        ));
        let offset = response
            .decode_custom_header::<QueryConsumerOffsetResponseHeader>()
            .map_or(-1, |h| h.offset);
        (response.code, offset)
    }
}

#[test]
fn a_sent_message_is_pulled_back_with_its_body_and_offsets() {
    let store = fresh_store("roundtrip");
    let Some(broker) = start(&store, 1) else {
        return;
    };
    let mut client = broker.connect();
    let first = client.send("RoundTrip", 0, b"hello");
    assert_eq!(first.queue_offset, 0);
    assert_eq!(first.queue_id, 0);
    assert_eq!(first.msg_id.len(), 32, "an IPv4 offset message id");
    assert_eq!(first.msg_region.as_deref(), Some("DefaultRegion"));
    let second = client.send("RoundTrip", 0, b"world");
    assert_eq!(second.queue_offset, 1);
    let (code, next, bodies) = client.pull("RoundTrip", 0, 0, None);
    assert_eq!(code, response_code::SUCCESS);
    assert_eq!(next, 2);
    assert_eq!(bodies, vec![b"hello".to_vec(), b"world".to_vec()]);
    let (code, next, bodies) = client.pull("RoundTrip", 0, 2, None);
    assert_eq!(code, response_code::PULL_NOT_FOUND);
    assert_eq!(next, 2);
    assert!(bodies.is_empty());
    let unknown = client.call(RemotingCommand::new_request(9999, ExtFields::new()));
    assert_eq!(unknown.code, response_code::REQUEST_CODE_NOT_SUPPORTED);
    let third = client.send("RoundTrip", 0, b"still usable");
    assert_eq!(third.queue_offset, 2);
    assert!(broker.stop().success());
}

/// `--print-config` prints what a broker on that store would run with: the
/// keys UPDATE_BROKER_CONFIG kept in `brokerConfigUpdates.properties` over
/// the command line, and a file the broker would refuse refuses the print.
#[test]
fn print_config_includes_the_changes_kept_in_the_store() {
    let store = fresh_store("print-config");
    let print = || {
        Command::new(env!("CARGO_BIN_EXE_ringmq"))
            .arg("broker")
            .arg(format!("--storePathRootDir={}", store.display()))
            .arg("--fileReservedTime=48")
            .arg("--print-config")
            .output()
            .unwrap()
    };
    let lines = |output: &std::process::Output| {
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout.clone()).unwrap()
    };
    let before = lines(&print());
    assert!(before.contains("\nfileReservedTime=48\n"), "{before}");
    assert!(before.contains("\nbrokerPermission=6\n"), "{before}");
    let config_dir = store.join("config");
    std::fs::create_dir_all(&config_dir).unwrap();
    let updates = config_dir.join("brokerConfigUpdates.properties");
    std::fs::write(&updates, "brokerPermission=4\nfileReservedTime=1\n").unwrap();
    let after = lines(&print());
    assert!(after.contains("\nfileReservedTime=1\n"), "{after}");
    assert!(after.contains("\nbrokerPermission=4\n"), "{after}");
    std::fs::write(&updates, "listenPort=1\n").unwrap();
    let refused = print();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("brokerConfigUpdates.properties") && stderr.contains("listenPort"),
        "{stderr}"
    );
}

#[test]
fn a_second_broker_on_the_same_store_is_refused() {
    let store = fresh_store("roundtrip");
    let Some(broker) = start(&store, 1) else {
        return;
    };
    let output = Command::new(env!("CARGO_BIN_EXE_ringmq"))
        .arg("broker")
        .arg(format!("--storePathRootDir={}", store.display()))
        .arg("--listenPort=0")
        .arg("--namesrvListenPort=0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("another broker is already running"),
        "{stderr}"
    );
    assert!(broker.stop().success());
}

/// Runs `ringmq ARGS` for each of `runs` at once; each must exit with a
/// failure within a minute. Returns their stderr, in order.
fn refused_runs(runs: &[Vec<String>]) -> Vec<String> {
    let mut children: Vec<_> = runs
        .iter()
        .map(|args| {
            Command::new(env!("CARGO_BIN_EXE_ringmq"))
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        if Instant::now() > deadline {
            for child in &mut children {
                let _ = child.kill();
                let _ = child.wait();
            }
            panic!("some of {runs:?} still ran after a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    children
        .into_iter()
        .zip(runs)
        .map(|(child, args)| {
            let output = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            assert!(!output.status.success(), "ringmq {args:?} ran: {stderr}");
            stderr
        })
        .collect()
}

#[test]
fn a_broker_or_name_server_on_a_port_already_listened_on_is_refused() {
    let store = fresh_store("roundtrip");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let other = fresh_store("roundtrip");
    let other_too = fresh_store("roundtrip");
    let broker_port = broker.port;
    let namesrv_port = broker.namesrv_port;
    // The listeners share their port through SO_REUSEPORT among shards; a
    // second broker must not join that group and take connections.
    let runs = [
        (
            vec![
                "broker".to_string(),
                format!("--storePathRootDir={}", other.display()),
                format!("--listenPort={broker_port}"),
                "--namesrvListenPort=0".into(),
            ],
            broker_port,
        ),
        (
            vec![
                "broker".to_string(),
                format!("--storePathRootDir={}", other_too.display()),
                "--listenPort=0".into(),
                format!("--namesrvListenPort={namesrv_port}"),
            ],
            namesrv_port,
        ),
        (
            vec![
                "namesrv".to_string(),
                format!("--listen-port={namesrv_port}"),
                format!(
                    "--kv-config-path={}",
                    other.join("namesrv").join("kvConfig.json").display()
                ),
            ],
            namesrv_port,
        ),
    ];
    // Each waits up to PORT_FREE_WAIT for the port before it gives up.
    let args: Vec<Vec<String>> = runs.iter().map(|(args, _)| args.clone()).collect();
    for ((args, port), stderr) in runs.iter().zip(refused_runs(&args)) {
        assert!(
            stderr.contains(&format!("port {port} is already in use")),
            "{args:?}: {stderr}"
        );
    }
    let mut client = broker.connect();
    for index in 0..8 {
        let sent = client.send("PortTaken", index % 2, b"still ours");
        assert_eq!(sent.queue_offset, i64::from(index / 2));
    }
    assert!(broker.stop().success());
}

#[test]
fn a_broker_restarted_on_its_ports_right_after_a_kill_nine_boots() {
    let store = fresh_store("roundtrip");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let (port, namesrv_port) = (broker.port, broker.namesrv_port);
    let mut client = broker.connect();
    client.send("KilledPorts", 0, b"before");
    // Its io_uring rings keep both listeners for some milliseconds after the
    // process is gone; the restart waits for them instead of failing.
    broker.kill_nine();
    let Some(again) = start_broker(
        &store,
        &[
            "--shards=2".into(),
            format!("--listenPort={port}"),
            format!("--namesrvListenPort={namesrv_port}"),
        ],
    ) else {
        return;
    };
    assert_eq!((again.port, again.namesrv_port), (port, namesrv_port));
    let mut client = again.connect();
    let (code, _, bodies) = client.pull("KilledPorts", 0, 0, None);
    assert_eq!(code, response_code::SUCCESS);
    assert_eq!(bodies, vec![b"before".to_vec()]);
    assert!(again.stop().success());
}

#[test]
fn sigterm_exits_zero_and_a_restart_keeps_messages_and_offsets() {
    let store = fresh_store("roundtrip");
    let Some(broker) = start(&store, 1) else {
        return;
    };
    let mut client = broker.connect();
    for index in 0..3 {
        client.send("Durable", 0, format!("m{index}").as_bytes());
    }
    // A pull that commits offset 2 for group cg.
    let (code, _, bodies) = client.pull("Durable", 0, 0, Some(2));
    assert_eq!(code, response_code::SUCCESS);
    assert_eq!(bodies.len(), 3);
    drop(client);
    assert!(broker.stop().success(), "SIGTERM exits 0");
    assert!(
        !store.join("abort").join("0").exists(),
        "a clean stop removes the abort file"
    );
    let Some(broker) = start(&store, 1) else {
        return;
    };
    let mut client = broker.connect();
    assert_eq!(
        client.query_offset("Durable", 0),
        (response_code::SUCCESS, 2)
    );
    let (code, next, bodies) = client.pull("Durable", 0, 0, None);
    assert_eq!(code, response_code::SUCCESS);
    assert_eq!(next, 3);
    assert_eq!(bodies, vec![b"m0".to_vec(), b"m1".to_vec(), b"m2".to_vec()]);
    assert_eq!(client.send("Durable", 0, b"m3").queue_offset, 3);
    assert!(broker.stop().success());
}

#[test]
fn a_deleted_topic_created_again_serves_only_its_new_messages_also_after_a_restart() {
    let store = fresh_store("roundtrip");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut client = broker.connect();
    // Two queues: one on each shard.
    client.create_topic("Doomed", 2);
    for queue_id in 0..2 {
        for index in 0..3 {
            client.send(
                "Doomed",
                queue_id,
                format!("old{queue_id}-{index}").as_bytes(),
            );
        }
    }
    client.call_ok(RemotingCommand::new_request(
        request_code::DELETE_TOPIC_IN_BROKER,
        DeleteTopicRequestHeader {
            topic: "Doomed".to_owned(),
        }
        .to_ext_fields(),
    ));
    client.create_topic("Doomed", 2);
    for queue_id in 0..2 {
        let sent = client.send("Doomed", queue_id, format!("new{queue_id}").as_bytes());
        assert_eq!(sent.queue_offset, 0, "queue {queue_id} starts again at 0");
    }
    let only_new = |client: &mut Client| {
        for queue_id in 0..2 {
            let (code, next, bodies) = client.pull("Doomed", queue_id, 0, None);
            assert_eq!(code, response_code::SUCCESS);
            assert_eq!(next, 1);
            assert_eq!(bodies, vec![format!("new{queue_id}").into_bytes()]);
        }
    };
    only_new(&mut client);
    drop(client);
    assert!(broker.stop().success());
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut client = broker.connect();
    only_new(&mut client);
    drop(client);
    assert!(broker.stop().success());
}

#[test]
fn clean_unused_topic_removes_the_queues_of_a_topic_no_longer_configured() {
    let store = fresh_store("clean-unused");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut client = broker.connect();
    for topic in ["Stray", "Kept"] {
        client.create_topic(topic, 2);
        // Two queues: one on each shard.
        for queue_id in 0..2 {
            client.send(topic, queue_id, topic.as_bytes());
        }
    }
    drop(client);
    assert!(broker.stop().success());
    // The topic leaves the table and its queues stay, as when a crash's
    // recovery brings a deleted topic's records back into its queues.
    let path = store.join("config/topics.json");
    let mut table = TopicConfigSerializeWrapper::from_json(&std::fs::read(&path).unwrap()).unwrap();
    assert!(table.topic_config_table.remove("Stray").is_some());
    let mut out = Vec::new();
    table.to_json(&mut out, ringmq_protocol::json::JsonStyle::Java);
    std::fs::write(&path, out).unwrap();

    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut client = broker.connect();
    let stray: Vec<_> = (0..2)
        .map(|shard| store.join(format!("shard/{shard}/consumequeue/Stray")))
        .collect();
    assert!(stray.iter().all(|dir| dir.is_dir()), "{stray:?}");
    client.call_ok(RemotingCommand::new_request(
        request_code::CLEAN_UNUSED_TOPIC,
        ExtFields::new(),
    ));
    // Files with a write in flight go when it completes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while stray.iter().any(|dir| dir.exists()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(stray.iter().all(|dir| !dir.exists()), "{stray:?}");
    for queue_id in 0..2 {
        let (code, _, bodies) = client.pull("Kept", queue_id, 0, None);
        assert_eq!(code, response_code::SUCCESS);
        assert_eq!(
            bodies,
            vec![b"Kept".to_vec()],
            "queue {queue_id} of a configured topic"
        );
        let kept = store.join(format!("shard/{queue_id}/consumequeue/Kept"));
        assert!(kept.is_dir(), "{kept:?}");
    }
    drop(client);
    assert!(broker.stop().success());
}

#[test]
fn acknowledged_topic_and_group_changes_and_auto_created_topics_survive_a_kill_9() {
    let store = fresh_store("config-kill9");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    // Two connections: one likely on each shard, so answers also cross
    // from shard 0 (the control plane) to the connection's shard.
    let mut clients = [broker.connect(), broker.connect()];
    for index in 0..16 {
        let client = &mut clients[index % 2];
        client.create_topic(&format!("Kept{index}"), 2);
        if index % 4 == 0 {
            client.put_group(&SubscriptionGroupConfig::new(&format!(
                "kept-group-{index}"
            )));
        }
    }
    clients[1].call_ok(RemotingCommand::new_request(
        request_code::DELETE_TOPIC_IN_BROKER,
        DeleteTopicRequestHeader {
            topic: "Kept15".to_owned(),
        }
        .to_ext_fields(),
    ));
    // Sends that create their topics (from TBW102) are acknowledged too.
    for index in 0..8 {
        clients[index % 2].send(&format!("AutoMade{index}"), 0, b"auto");
    }
    // At once: the answers above promised the changes are on disk.
    drop(clients);
    broker.kill_nine();

    let broker = start(&store, 2).unwrap();
    let mut client = broker.connect();
    let topics = client.all_topics();
    let kept: Vec<String> = (0..15).map(|index| format!("Kept{index}")).collect();
    for topic in &kept {
        let config = topics.topic_config_table.get(topic);
        assert_eq!(
            config.map(|config| config.write_queue_nums),
            Some(2),
            "{topic} after the kill -9"
        );
    }
    assert!(
        !topics.topic_config_table.contains_key("Kept15"),
        "the deleted topic came back"
    );
    for index in 0..8 {
        let topic = format!("AutoMade{index}");
        assert!(
            topics.topic_config_table.contains_key(&topic),
            "{topic}, created by a send, after the kill -9"
        );
        let (code, _, bodies) = client.pull(&topic, 0, 0, None);
        assert_eq!(code, response_code::SUCCESS, "{topic}, created by a send");
        assert_eq!(bodies, vec![b"auto".to_vec()]);
    }
    let groups = client.call_ok(RemotingCommand::new_request(
        request_code::GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        ExtFields::new(),
    ));
    let groups = SubscriptionGroupWrapper::from_json(groups.body_bytes()).unwrap();
    for index in (0..16).step_by(4) {
        let group = format!("kept-group-{index}");
        assert!(
            groups.subscription_group_table.contains_key(&group),
            "{group} after the kill -9"
        );
    }
    drop(client);
    assert!(broker.stop().success());
}

#[test]
fn the_embedded_name_servers_kv_config_survives_a_kill_9_in_the_store() {
    let store = fresh_store("kv-kill9");
    let Some(broker) = start(&store, 1) else {
        return;
    };
    let mut namesrv = broker.connect_namesrv();
    let put = PutKvConfigRequestHeader {
        namespace: "ORDER_TOPIC_CONFIG".into(),
        key: "Orders".into(),
        value: "broker-a:8".into(),
    };
    namesrv.call_ok(RemotingCommand::new_request(
        request_code::PUT_KV_CONFIG,
        put.to_ext_fields(),
    ));
    drop(namesrv);
    broker.kill_nine();
    assert!(
        store.join("namesrv").join("kvConfig.json").is_file(),
        "kvConfig.json under the store root"
    );

    let broker = start(&store, 1).unwrap();
    let mut namesrv = broker.connect_namesrv();
    let get = GetKvConfigRequestHeader {
        namespace: "ORDER_TOPIC_CONFIG".into(),
        key: "Orders".into(),
    };
    let answer = namesrv.call_ok(RemotingCommand::new_request(
        request_code::GET_KV_CONFIG,
        get.to_ext_fields(),
    ));
    assert_eq!(answer.ext_fields.get("value"), Some("broker-a:8"));
    drop(namesrv);
    assert!(broker.stop().success());
}

#[test]
fn a_topic_change_whose_file_cannot_be_written_is_answered_with_the_error() {
    let store = fresh_store("config-fails");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("Before", 1);
    // A file where the config directory was: every write fails (root
    // ignores permissions, not the file type).
    let config = store.join("config");
    let moved = store.join("config.moved");
    std::fs::rename(&config, &moved).unwrap();
    std::fs::write(&config, b"not a directory").unwrap();
    let answer = client.call(common::create_topic_request("Unwritten", 1));
    assert_eq!(
        answer.code,
        response_code::SYSTEM_ERROR,
        "{:?}",
        answer.remark
    );
    let remark = answer.remark.unwrap_or_default();
    assert!(
        remark.contains("topics.json") && remark.contains("not on disk"),
        "{remark}"
    );
    // A send that creates its topic is not refused for it: the topic
    // exists, and its file is retried.
    client.send("AutoUnwritten", 0, b"kept");
    // Space for the files again: the retry writes both topics.
    std::fs::remove_file(&config).unwrap();
    std::fs::rename(&moved, &config).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let written = std::fs::read_to_string(config.join("topics.json")).unwrap_or_default();
        if written.contains("\"Unwritten\"") && written.contains("\"AutoUnwritten\"") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "topics.json never got the topics: {written}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(client);
    assert!(broker.stop().success());
}

#[test]
fn a_send_racing_with_its_topics_creation_survives_a_kill_9_right_after_its_answer() {
    // Rounds, each on a new store: the first send creates the topic, the
    // others race with that creation through whichever shard accepted
    // their connection; the broker is killed as soon as the last one is
    // answered, without waiting for the others' answers.
    for round in 0..4 {
        let store = fresh_store("race-kill9");
        let Some(broker) = start(&store, 2) else {
            return;
        };
        let mut clients: Vec<Client> = (0..4).map(|_| broker.connect()).collect();
        let topic = format!("Race{round}");
        for (queue_id, client) in clients.iter_mut().enumerate() {
            client.send_request(common::send_message_request(
                "pg",
                &topic,
                queue_id as i32,
                1_700_000_000_000,
                String::new(),
                format!("{topic}-{queue_id}").as_bytes(),
            ));
        }
        let answer = clients[3].read();
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
        broker.kill_nine();
        drop(clients);

        let broker = start(&store, 2).unwrap();
        let mut client = broker.connect();
        let topics = client.all_topics();
        assert!(
            topics.topic_config_table.contains_key(&topic),
            "{topic}: a send to it was acknowledged before the kill -9"
        );
        let (code, _, bodies) = client.pull(&topic, 3, 0, None);
        assert_eq!(code, response_code::SUCCESS);
        assert_eq!(bodies, vec![format!("{topic}-3").into_bytes()]);
        drop(client);
        assert!(broker.stop().success());
    }
}

/// io_uring instances the process `pid` holds open.
fn io_uring_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains("io_uring"))
        .count()
}

/// `Cpus_allowed_list` of each `ringmq-shard-*` thread of `pid`, by name.
fn shard_cpu_lists(pid: u32) -> Vec<(String, String)> {
    let mut lists = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status = std::fs::read_to_string(entry.unwrap().path().join("status")).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(|value| value.trim().to_owned())
                .unwrap()
        };
        let name = field("Name:");
        if name.starts_with("ringmq-shard-") {
            lists.push((name, field("Cpus_allowed_list:")));
        }
    }
    lists.sort();
    lists
}

#[test]
fn shards_are_pinned_one_per_cpu_unless_shard_cpu_pinning_is_false() {
    let process_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if process_cpus < 2 {
        eprintln!("SKIPPED: one CPU: a pinned and an unpinned shard look the same");
        return;
    }
    let store = fresh_store("pinning");
    // Each shard thread's CPU list, with two shards and `extra`.
    let shard_cpus = |extra: &[String]| {
        let mut args = vec!["--shards=2".to_owned()];
        args.extend_from_slice(extra);
        let broker = start_broker(&store, &args)?;
        let lists = shard_cpu_lists(broker.pid());
        assert!(broker.stop().success());
        assert_eq!(lists.len(), 2, "{lists:?}");
        Some(lists)
    };
    let Some(pinned) = shard_cpus(&[]) else {
        return;
    };
    for (name, cpus) in &pinned {
        assert!(
            cpus.parse::<u32>().is_ok(),
            "{name} runs on {cpus}, not one CPU"
        );
    }
    assert_ne!(
        pinned[0].1, pinned[1].1,
        "two shards on one CPU: {pinned:?}"
    );
    let unpinned = shard_cpus(&["--shardCpuPinning=false".to_owned()]).unwrap();
    for (name, cpus) in &unpinned {
        assert!(
            cpus.parse::<u32>().is_err(),
            "{name} is pinned to CPU {cpus} with shardCpuPinning=false"
        );
    }
}

#[test]
fn each_shard_serves_sockets_and_disk_on_one_ring() {
    let store = fresh_store("one-ring");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    // A send and a pull go through both lanes of the ring that serves them.
    let mut client = broker.connect();
    client.create_topic("OneRing", 2);
    for queue_id in 0..2 {
        client.send("OneRing", queue_id, b"on one ring");
        let (code, _, bodies) = client.pull("OneRing", queue_id, 0, None);
        assert_eq!(code, response_code::SUCCESS);
        assert_eq!(bodies, vec![b"on one ring".to_vec()]);
    }
    // Two shards with one ring each, and the embedded name server's.
    assert_eq!(io_uring_fds(broker.pid()), 3);
    assert!(broker.stop().success());
}

#[test]
fn two_shards_forward_sends_and_pulls_to_the_queue_owner() {
    let store = fresh_store("roundtrip");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("Sharded", 4);
    // Whichever shard accepted this connection, half the queues belong to
    // the other one.
    for round in 0..2 {
        for queue_id in 0..4 {
            let sent = client.send(
                "Sharded",
                queue_id,
                format!("q{queue_id}r{round}").as_bytes(),
            );
            assert_eq!(sent.queue_id, queue_id);
            assert_eq!(sent.queue_offset, i64::from(round));
        }
    }
    for queue_id in 0..4 {
        let (code, next, bodies) = client.pull("Sharded", queue_id, 0, Some(1));
        assert_eq!(code, response_code::SUCCESS);
        assert_eq!(next, 2);
        assert_eq!(
            bodies,
            vec![
                format!("q{queue_id}r0").into_bytes(),
                format!("q{queue_id}r1").into_bytes()
            ]
        );
        assert_eq!(
            client.query_offset("Sharded", queue_id),
            (response_code::SUCCESS, 1)
        );
    }
    // The broker picks a queue for queueId -1, and the topic an unknown
    // send auto-creates from TBW102 is usable on both shards.
    let picked = client.send("Sharded", -1, b"any");
    assert!((0..4).contains(&picked.queue_id));
    // Every message carries KEYS k1: a key query gathers all 9 from both
    // shards' index files.
    let query = QueryMessageRequestHeader {
        topic: "Sharded".to_owned(),
        key: "k1".to_owned(),
        max_num: 64,
        begin_timestamp: 0,
        end_timestamp: i64::MAX,
        unique_key_query: Some(false),
    };
    let found = client.call_ok(RemotingCommand::new_request(
        request_code::QUERY_MESSAGE,
        query.to_ext_fields(),
    ));
    let mut queried: Vec<i32> = iter_pull_body(found.body_bytes(), CrcCheck::Verify)
        .map(|record| record.unwrap().queue_id())
        .collect();
    queried.sort_unstable();
    let mut expected = vec![0, 0, 1, 1, 2, 2, 3, 3, picked.queue_id];
    expected.sort_unstable();
    assert_eq!(queried, expected);
    let missing = QueryMessageRequestHeader {
        key: "no-such-key".to_owned(),
        ..query
    };
    let none = client.call(RemotingCommand::new_request(
        request_code::QUERY_MESSAGE,
        missing.to_ext_fields(),
    ));
    assert_eq!(none.code, response_code::QUERY_NOT_FOUND);
    // Runtime info gathers every shard's counters: 8 + 1 puts so far.
    let info = client.call_ok(RemotingCommand::new_request(
        request_code::GET_BROKER_RUNTIME_INFO,
        ExtFields::new(),
    ));
    let table = KvTable::from_json(info.body_bytes()).unwrap().table;
    assert_eq!(
        table.get("msgPutTotalTodayNow").map(String::as_str),
        Some("9")
    );
    assert_eq!(
        table.get("msgGetTotalTodayNow").map(String::as_str),
        Some("8")
    );
    let created = client.send("AutoCreated", 1, b"auto");
    assert_eq!(created.queue_offset, 0);
    let (code, _, bodies) = client.pull("AutoCreated", 1, 0, None);
    assert_eq!(code, response_code::SUCCESS);
    assert_eq!(bodies, vec![b"auto".to_vec()]);
    drop(client);
    assert!(broker.stop().success());
}

#[test]
fn a_held_pull_is_answered_by_the_next_append_to_its_queue() {
    let store = fresh_store("roundtrip");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut producer = broker.connect();
    producer.create_topic("LongPoll", 2);
    let mut consumers: Vec<(Client, i32)> = (0..2)
        .map(|queue_id| {
            let mut consumer = broker.connect();
            // Held far longer than the test's read timeout: only the append
            // can answer it in time.
            let opaque = consumer.start_held_pull("LongPoll", queue_id, 0, 600_000);
            (consumer, opaque)
        })
        .collect();
    // The held pulls were sent first; on its own connection, the send
    // cannot overtake them on the broker by much, so make sure they are
    // held by sending only after an unrelated round trip on each.
    for (consumer, _) in &mut consumers {
        let (code, _, _) = consumer.pull("LongPoll", 0, 5, None);
        assert!(code == response_code::PULL_NOT_FOUND || code == response_code::PULL_OFFSET_MOVED);
    }
    for queue_id in 0..2 {
        producer.send("LongPoll", queue_id, format!("wake{queue_id}").as_bytes());
    }
    for (queue_id, (consumer, opaque)) in consumers.iter_mut().enumerate() {
        let response = loop {
            let response = consumer.read();
            if response.is_response() && response.opaque == *opaque {
                break response;
            }
        };
        assert_eq!(
            response.code,
            response_code::SUCCESS,
            "{:?}",
            response.remark
        );
        let bodies: Vec<Vec<u8>> = iter_pull_body(response.body_bytes(), CrcCheck::Verify)
            .map(|record| record.unwrap().body().to_vec())
            .collect();
        assert_eq!(bodies, vec![format!("wake{queue_id}").into_bytes()]);
    }
    drop(consumers);
    drop(producer);
    assert!(broker.stop().success());
}

#[test]
fn send_back_stores_nothing_for_a_group_without_retry_queues_and_refuses_a_read_only_retry_topic() {
    let store = fresh_store("send-back-refusals");
    let Some(broker) = start(&store, 1) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("Failing", 1);
    client.send("Failing", 0, b"poison");
    client.put_group(&SubscriptionGroupConfig {
        retry_queue_nums: 0,
        ..SubscriptionGroupConfig::new("cg")
    });
    let (offset, _, _, _) = client.pull_records("Failing", 0)[0].clone();
    // Java answers SUCCESS and stores nothing; the DLQ target is no exception.
    assert_eq!(client.send_back(offset, 0), response_code::SUCCESS);
    assert_eq!(client.send_back(offset, -1), response_code::SUCCESS);
    let topics = client.all_topics();
    for topic in ["%RETRY%cg", "%DLQ%cg"] {
        assert!(
            !topics.topic_config_table.contains_key(topic),
            "{topic} was created"
        );
    }

    // With retry queues again, and the retry topic read-only: NO_PERMISSION.
    client.put_group(&SubscriptionGroupConfig::new("cg"));
    let mut read_only = common::create_topic_request("%RETRY%cg", 1);
    read_only.ext_fields.insert("perm", "4");
    client.call_ok(read_only);
    let answer = client.send_back_answer(offset, 0);
    assert_eq!(
        answer.code,
        response_code::NO_PERMISSION,
        "{:?}",
        answer.remark
    );
    assert_eq!(
        answer.remark.as_deref(),
        Some("the topic[%RETRY%cg] sending message is forbidden")
    );
    drop(client);
    assert!(broker.stop().success());
}

/// A broker on `store` with `shards` shards and no tail cache (a record
/// leaves memory once its shard's write buffers move on, see
/// [`Client::push_out_of_memory_on`]), `topic` and `Filler` with a queue per
/// shard, and a client. None (skip) when io_uring is unavailable here.
fn start_cold(store: &Path, shards: u32, topic: &str) -> Option<(Broker, Client)> {
    let broker = start_broker(
        store,
        &[
            format!("--shards={shards}"),
            "--maxMessageSize=65536".to_owned(),
            "--tailCacheSize=0".to_owned(),
        ],
    )?;
    let mut client = broker.connect();
    client.create_topic(topic, shards as i32);
    client.create_topic("Filler", shards as i32);
    Some((broker, client))
}

#[test]
fn a_record_no_longer_in_memory_is_viewed_and_sent_back() {
    // No tail cache: once the write buffers holding a record are written
    // and reused, it is read from the segment (in the background, the
    // request parked).
    let store = fresh_store("roundtrip");
    let Some((broker, mut client)) = start_cold(&store, 1, "Cold") else {
        return;
    };
    // Two records with three write buffers' worth (24 MiB) after each,
    // so that reading one does not bring the other.
    let mut offsets = Vec::new();
    for body in [&b"sent back"[..], b"viewed"] {
        offsets.push(commit_log_offset(&client.send("Cold", 0, body).msg_id));
        client.push_out_of_memory("Filler");
    }
    let (sent_back, viewed) = (offsets[0], offsets[1]);
    let sync_reads = client.sync_reads();
    assert_eq!(client.send_back(sent_back, -1), response_code::SUCCESS);
    let dead = client.pull_records("%DLQ%cg", 0);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].3, b"sent back");
    let answer = client.view(viewed);
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    let view =
        ringmq_protocol::message::decode_record(answer.body_bytes(), CrcCheck::Verify).unwrap();
    assert_eq!(view.body(), b"viewed");
    assert_eq!(view.commit_log_offset(), viewed);
    assert_eq!(client.sync_reads(), sync_reads, "read on a shard's thread");
    // An offset past the end is refused, not waited for.
    let past = client.view(viewed + (1 << 40));
    assert_eq!(past.code, response_code::SYSTEM_ERROR);
    drop(client);
    assert!(broker.stop().success());
}

#[test]
fn records_no_longer_in_memory_are_found_by_key_on_every_shard() {
    // No tail cache: each shard reads its record from the segment in the
    // background while the query waits, whichever shard it arrived on
    // (that shard's own part and the other's both come late).
    let store = fresh_store("roundtrip");
    let Some((broker, mut client)) = start_cold(&store, 2, "Cold") else {
        return;
    };
    for queue_id in 0..2 {
        client.send(
            "Cold",
            queue_id,
            format!("cold on queue {queue_id}").as_bytes(),
        );
        client.push_out_of_memory_on("Filler", queue_id);
    }
    let query = QueryMessageRequestHeader {
        topic: "Cold".to_owned(),
        key: "k1".to_owned(),
        max_num: 64,
        begin_timestamp: 0,
        end_timestamp: i64::MAX,
        unique_key_query: Some(false),
    };
    let sync_reads = client.sync_reads();
    for _ in 0..2 {
        let found = client.call_ok(RemotingCommand::new_request(
            request_code::QUERY_MESSAGE,
            query.to_ext_fields(),
        ));
        let mut bodies: Vec<Vec<u8>> = iter_pull_body(found.body_bytes(), CrcCheck::Verify)
            .map(|record| record.unwrap().body().to_vec())
            .collect();
        bodies.sort();
        assert_eq!(
            bodies,
            [b"cold on queue 0".to_vec(), b"cold on queue 1".to_vec()]
        );
    }
    assert_eq!(client.sync_reads(), sync_reads, "read on a shard's thread");
    drop(client);
    assert!(broker.stop().success());
}

/// Now on the wall clock, in ms.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Sends `count` bursts of twenty 20 KiB records to each of `queues` of
/// `topic`, 30 ms apart; returns when each burst began and ended, so that
/// its records' store times lie within.
fn send_bursts(client: &mut Client, topic: &str, queues: &[i32], count: usize) -> Vec<(i64, i64)> {
    let body = vec![b't'; 20 * 1024];
    let mut bursts = Vec::new();
    for _ in 0..count {
        let began = now_ms();
        for _ in 0..20 {
            for queue_id in queues {
                client.send(topic, *queue_id, &body);
            }
        }
        bursts.push((began, now_ms()));
        std::thread::sleep(Duration::from_millis(30));
    }
    bursts
}

/// SEARCH_OFFSET_BY_TIMESTAMP and GET_EARLIEST_MSG_STORETIME over records no
/// longer in memory (no tail cache, their shard written far past them): the
/// probes' records are read in the background while the request waits, and
/// the answers follow the records' store times.
#[test]
fn offsets_by_time_are_found_among_records_no_longer_in_memory() {
    let store = fresh_store("roundtrip");
    let Some((broker, mut client)) = start_cold(&store, 2, "Timed") else {
        return;
    };
    let bursts = send_bursts(&mut client, "Timed", &[0], 3);
    assert!(bursts[1].1 + 1 < bursts[2].0);
    // Queue 0 is shard 0's on both topics.
    client.push_out_of_memory_on("Filler", 0);
    let sync_reads = client.sync_reads();
    let search = |client: &mut Client, timestamp: i64, boundary: BoundaryType| -> i64 {
        let header = SearchOffsetRequestHeader {
            topic: "Timed".to_owned(),
            queue_id: 0,
            timestamp,
            boundary_type: Some(boundary),
            ..SearchOffsetRequestHeader::default()
        };
        let answer = client.call_ok(RemotingCommand::new_request(
            request_code::SEARCH_OFFSET_BY_TIMESTAMP,
            header.to_ext_fields(),
        ));
        let found: SearchOffsetResponseHeader = answer.decode_custom_header().unwrap();
        found.offset
    };
    // Between the second and the third burst.
    let between = bursts[1].1 + 1;
    assert_eq!(search(&mut client, between, BoundaryType::Lower), 40);
    assert_eq!(search(&mut client, between, BoundaryType::Upper), 39);
    assert_eq!(search(&mut client, 0, BoundaryType::Lower), 0);
    assert_eq!(search(&mut client, 0, BoundaryType::Upper), 0);
    assert_eq!(search(&mut client, i64::MAX, BoundaryType::Lower), 60);
    let header = GetEarliestMsgStoretimeRequestHeader {
        topic: "Timed".to_owned(),
        queue_id: 0,
        ..GetEarliestMsgStoretimeRequestHeader::default()
    };
    let answer = client.call_ok(RemotingCommand::new_request(
        request_code::GET_EARLIEST_MSG_STORETIME,
        header.to_ext_fields(),
    ));
    let earliest: GetEarliestMsgStoretimeResponseHeader = answer.decode_custom_header().unwrap();
    assert!(
        (bursts[0].0..=bursts[0].1).contains(&earliest.timestamp),
        "{} not within the first burst {:?}",
        earliest.timestamp,
        bursts[0]
    );
    // Every probe's record was read in the background.
    assert_eq!(client.sync_reads(), sync_reads);
    drop(client);
    assert!(broker.stop().success());
}

/// GET_CONSUME_STATS and QUERY_CONSUME_TIME_SPAN over records no longer in
/// memory on both shards: each shard's part (the arrival shard's own and
/// the other's) waits for the reads of the store times it needs (the time
/// spans' oldest and newest records are not among those the stats read),
/// and the figures follow the records' store times.
#[test]
fn consume_stats_and_time_spans_read_store_times_no_longer_in_memory() {
    let store = fresh_store("roundtrip");
    let Some((broker, mut client)) = start_cold(&store, 2, "Spans") else {
        return;
    };
    // Two bursts on each queue (one per shard); the group consumed the first.
    let bursts = send_bursts(&mut client, "Spans", &[0, 1], 2);
    for queue_id in 0..2 {
        client.pull("Spans", queue_id, 40, Some(20));
        client.push_out_of_memory_on("Filler", queue_id);
    }
    let within = |time: i64, burst: usize, what: &str| {
        let (began, ended) = bursts[burst];
        assert!(
            (began..=ended).contains(&time),
            "{what} {time} not within burst {burst} {:?}",
            bursts[burst]
        );
    };
    let field = |value: &JsonValue, name: &str| -> i64 {
        value
            .as_object()
            .and_then(|object| object.get(name))
            .and_then(|field| match field {
                JsonValue::Number(number) => number.as_i64_truncated(),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no {name} in {value:?}"))
    };
    let sync_reads = client.sync_reads();
    let header = GetConsumeStatsRequestHeader {
        consumer_group: "cg".to_owned(),
        topic: Some("Spans".to_owned()),
        ..GetConsumeStatsRequestHeader::default()
    };
    let mut json_answer = |code, fields| {
        let answer = client.call_ok(RemotingCommand::new_request(code, fields));
        json_parse(answer.body_bytes()).unwrap()
    };
    let body = json_answer(request_code::GET_CONSUME_STATS, header.to_ext_fields());
    let offsets = body
        .as_object()
        .and_then(|object| object.get("offsetTable"))
        .and_then(JsonValue::as_object)
        .unwrap();
    assert_eq!(offsets.members.len(), 2, "{body:?}");
    for (_, queue) in &offsets.members {
        assert_eq!(field(queue, "consumerOffset"), 20);
        assert_eq!(field(queue, "brokerOffset"), 40);
        within(field(queue, "lastTimestamp"), 0, "last consumed");
    }
    let header = QueryConsumeTimeSpanRequestHeader {
        topic: "Spans".to_owned(),
        group: "cg".to_owned(),
    };
    let body = json_answer(
        request_code::QUERY_CONSUME_TIME_SPAN,
        header.to_ext_fields(),
    );
    let spans = body
        .as_object()
        .and_then(|object| object.get("consumeTimeSpanSet"))
        .and_then(JsonValue::as_array)
        .unwrap();
    assert_eq!(spans.len(), 2, "{body:?}");
    for span in spans {
        within(field(span, "minTimeStamp"), 0, "oldest");
        within(field(span, "maxTimeStamp"), 1, "newest");
        within(field(span, "consumeTimeStamp"), 0, "last consumed");
    }
    // Every store time was read in the background.
    assert_eq!(client.sync_reads(), sync_reads);
    drop(client);
    assert!(broker.stop().success());
}

/// INVOKE_BROKER_TO_RESET_OFFSET by time over records no longer in memory
/// on both shards: each queue's binary search goes on across its probes'
/// background reads (several rounds: the bursts' records are too far apart
/// for one read to bring two probes), and only then are the offsets stored.
#[test]
fn a_reset_by_time_searches_records_no_longer_in_memory() {
    let store = fresh_store("roundtrip");
    let Some((broker, mut client)) = start_cold(&store, 2, "Rewound") else {
        return;
    };
    let bursts = send_bursts(&mut client, "Rewound", &[0, 1], 3);
    for queue_id in 0..2 {
        // The group's first pull creates it; it consumed everything.
        client.pull("Rewound", queue_id, 60, Some(60));
        client.push_out_of_memory_on("Filler", queue_id);
    }
    let reset = |client: &mut Client, timestamp: i64| -> Vec<(i32, i64)> {
        let header = ResetOffsetRequestHeader {
            topic: "Rewound".to_owned(),
            group: "cg".to_owned(),
            timestamp,
            ..ResetOffsetRequestHeader::default()
        };
        let answer = client.call_ok(RemotingCommand::new_request(
            request_code::INVOKE_BROKER_TO_RESET_OFFSET,
            header.to_ext_fields(),
        ));
        ResetOffsetBody::from_json(answer.body_bytes())
            .unwrap()
            .offset_table
            .into_iter()
            .map(|(queue, offset)| (queue.queue_id, offset))
            .collect()
    };
    // Between the second and the third burst, then between the first and
    // the second: each queue's first message stored at or after the time,
    // and no probe read on a shard's thread.
    let sync_reads = client.sync_reads();
    assert_eq!(reset(&mut client, bursts[1].1 + 1), vec![(0, 40), (1, 40)]);
    assert_eq!(reset(&mut client, bursts[0].1 + 1), vec![(0, 20), (1, 20)]);
    assert_eq!(client.sync_reads(), sync_reads);
    // Stored: the group's committed offsets are the new ones.
    for queue_id in 0..2 {
        assert_eq!(
            client.query_offset("Rewound", queue_id),
            (response_code::SUCCESS, 20),
            "queue {queue_id}"
        );
    }
    drop(client);
    assert!(broker.stop().success());
}

#[test]
fn a_message_sent_back_with_delay_level_minus_one_goes_straight_to_the_dlq_across_a_kill_9() {
    // Retries through the delay ladder (level 3 + reconsume times) are
    // covered with a short ladder in broker_schedule.rs; here the direct
    // path, which needs no waiting.
    let store = fresh_store("roundtrip");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic("Failing", 2);
    client.send("Failing", 1, b"poison");
    // The first pull of group cg creates the group (autoCreateSubscriptionGroup).
    let records = client.pull_records("Failing", 1);
    assert_eq!(records.len(), 1);
    let (offset, times, _, _) = records[0].clone();
    assert_eq!(times, 0);
    assert_eq!(client.send_back(offset, -1), response_code::SUCCESS);
    // The answer promised the DLQ topic it created, and the message in it,
    // are on disk: a kill -9 at once loses neither.
    drop(client);
    broker.kill_nine();
    let broker = start(&store, 2).unwrap();
    let mut client = broker.connect();
    let dead = client.pull_records("%DLQ%cg", 0);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].1, 1);
    assert_eq!(dead[0].2.as_deref(), Some("Failing"));
    assert_eq!(dead[0].3, b"poison");
    drop(client);
    assert!(broker.stop().success());
}

/// Thousands of sends to a topic that does not exist (and cannot be
/// auto-created), pipelined on connections to both shards: each one that
/// reaches the shard of the topic table finds the topic missing and looks
/// in its inbox for a snapshot creating it. That look ran the requests
/// waiting behind it too, each of which looked again, one nested call
/// chain per waiting send, until the shard's stack overflowed and the
/// broker aborted (found by the hostile-headers test). Every send is now
/// refused and the broker stops cleanly.
#[test]
fn a_stream_of_sends_to_a_missing_topic_is_refused_without_nesting() {
    const CONNECTIONS: usize = 4;
    const SENDS: usize = 5_000;
    let store = fresh_store("roundtrip");
    let Some(broker) = start(&store, 2) else {
        return;
    };
    let mut workers = Vec::new();
    for connection in 0..CONNECTIONS {
        let stream = std::net::TcpStream::connect(("127.0.0.1", broker.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut writer = stream.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            let mut frames = Vec::new();
            for index in 0..SENDS {
                let mut request = common::send_message_request(
                    "pg",
                    "NoSuchTopic",
                    (index % 8) as i32,
                    1_700_000_000_000,
                    String::new(),
                    b"lost",
                );
                // No default topic to create it from.
                request.ext_fields.insert("c", "NoSuchDefault");
                request.opaque = (connection * SENDS + index) as i32;
                request
                    .encode(ringmq_protocol::code::SerializeType::Json, &mut frames)
                    .unwrap();
            }
            std::io::Write::write_all(&mut writer, &frames).unwrap();
        });
        let reader = std::thread::spawn(move || {
            let mut stream = stream;
            let mut codes = BTreeMap::new();
            for _ in 0..SENDS {
                let mut length = [0u8; 4];
                std::io::Read::read_exact(&mut stream, &mut length).unwrap();
                let mut frame = vec![0u8; 4 + u32::from_be_bytes(length) as usize];
                frame[..4].copy_from_slice(&length);
                std::io::Read::read_exact(&mut stream, &mut frame[4..]).unwrap();
                let raw = ringmq_protocol::frame::decode_frame(
                    &bytes::Bytes::from(frame),
                    ringmq_protocol::limits::FRAME_SIZE_MAX,
                )
                .unwrap()
                .unwrap();
                let answer = RemotingCommand::from_frame(&raw).unwrap();
                *codes.entry(answer.code).or_insert(0) += 1;
            }
            codes
        });
        workers.push((sender, reader));
    }
    for (sender, reader) in workers {
        sender.join().unwrap();
        let codes = reader.join().unwrap();
        assert_eq!(
            codes,
            BTreeMap::from([(response_code::TOPIC_NOT_EXIST, SENDS)]),
            "answers by code"
        );
    }
    assert!(broker.stop().success());
}

/// A name server that answers each REGISTER_BROKER `delay` late and keeps
/// the time it accepted each one, with the registration's body; once told
/// to, it refuses registrations of only some topics (as a name server that
/// forgot the broker refuses its single-topic registrations).
struct SlowNameServer {
    port: u16,
    answered: std::sync::Arc<std::sync::Mutex<Vec<(Instant, String)>>>,
    refuse_partial: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SlowNameServer {
    fn start(delay: Duration) -> Self {
        use std::io::{Read, Write};
        use std::sync::{Arc, Mutex};
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let answered = Arc::new(Mutex::new(Vec::new()));
        let refuse_partial = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let log = answered.clone();
        let refusing = refuse_partial.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let log = log.clone();
                let refusing = refusing.clone();
                std::thread::spawn(move || {
                    loop {
                        let mut length = [0u8; 4];
                        if stream.read_exact(&mut length).is_err() {
                            return;
                        }
                        let mut bytes = length.to_vec();
                        bytes.resize(4 + u32::from_be_bytes(length) as usize, 0);
                        if stream.read_exact(&mut bytes[4..]).is_err() {
                            return;
                        }
                        let raw = ringmq_protocol::frame::decode_frame(
                            &bytes::Bytes::from(bytes),
                            ringmq_protocol::limits::FRAME_SIZE_MAX,
                        )
                        .unwrap()
                        .unwrap();
                        let request = RemotingCommand::from_frame(&raw).unwrap();
                        let body = String::from_utf8_lossy(request.body_bytes()).into_owned();
                        let registers = request.code == request_code::REGISTER_BROKER;
                        if registers {
                            std::thread::sleep(delay);
                        }
                        let refused = registers
                            && refusing.load(std::sync::atomic::Ordering::SeqCst)
                            && !body.contains("\"TBW102\"");
                        let code = if refused {
                            response_code::SYSTEM_ERROR
                        } else {
                            response_code::SUCCESS
                        };
                        let mut answer = RemotingCommand::new_response(code, request.opaque, None);
                        answer.ext_fields.insert("masterAddr", "");
                        let mut out = Vec::new();
                        answer
                            .encode(ringmq_protocol::code::SerializeType::Json, &mut out)
                            .unwrap();
                        if registers && !refused {
                            log.lock().unwrap().push((Instant::now(), body));
                        }
                        if stream.write_all(&out).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        SlowNameServer {
            port,
            answered,
            refuse_partial,
        }
    }

    /// The bodies of the registrations naming `topic` accepted before
    /// `when`.
    fn routed_before(&self, topic: &str, when: Instant) -> Vec<String> {
        let quoted = format!("\"{topic}\"");
        self.answered
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, body)| *at <= when && body.contains(&quoted))
            .map(|(_, body)| body.clone())
            .collect()
    }
}

#[test]
fn a_topic_is_answered_for_only_once_its_registration_was_answered() {
    // Java's broker registers a topic it creates (by a send, or by
    // UPDATE_AND_CREATE_TOPIC) before it answers, so a client asking the
    // name server for the route right after the answer finds it. The name
    // server here answers registrations 300 ms late.
    let names = SlowNameServer::start(Duration::from_millis(300));
    let store = fresh_store("routed-first");
    let Some(broker) = start_broker(
        &store,
        &[
            "--shards=2".into(),
            format!("--namesrvAddr=127.0.0.1:{}", names.port),
        ],
    ) else {
        return;
    };
    let mut client = broker.connect();
    client.send("AutoRouted", 0, b"first");
    assert!(
        !names.routed_before("AutoRouted", Instant::now()).is_empty(),
        "the send that created AutoRouted was answered before its registration was"
    );
    client.send("AutoRouted", 1, b"second");

    client.call_ok(common::create_topic_request("AdminRouted", 4));
    let registrations = names.routed_before("AdminRouted", Instant::now());
    assert!(
        !registrations.is_empty(),
        "UPDATE_AND_CREATE_TOPIC was answered before its registration was"
    );
    // The name server had the other topics: it was sent only the new one.
    assert!(
        registrations
            .iter()
            .all(|body| !body.contains("\"TBW102\"")),
        "{registrations:?}"
    );

    // A name server that refuses a registration of only the new topic gets
    // the whole table before the creation is answered.
    names
        .refuse_partial
        .store(true, std::sync::atomic::Ordering::SeqCst);
    client.call_ok(common::create_topic_request("AfterRefusal", 4));
    let registrations = names.routed_before("AfterRefusal", Instant::now());
    assert!(
        registrations.iter().any(|body| body.contains("\"TBW102\"")),
        "{registrations:?}"
    );
    drop(client);
    assert!(broker.stop().success());
}
