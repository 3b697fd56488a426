//! Master/slave replication between two real `ringmq broker` processes over
//! loopback: a slave (brokerRole=SLAVE, brokerId=1) finds its master through
//! the master's embedded name server, pulls every shard's CommitLog and
//! holds the same records at the same offsets, refuses sends, and keeps
//! what it has when the master is killed and when it is itself killed;
//! restarted as the master, it goes on where its master stopped.

#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failure is the test's answer"
)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Broker, Client, commit_log_offset, fresh_store, send_message_request, start_broker};
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::header::{
    CustomHeader, EndTransactionRequestHeader, GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader, GetMinOffsetRequestHeader, GetMinOffsetResponseHeader,
    ReplicaPullRequestHeader, ReplicaPullResponseHeader, SendMessageResponseHeader,
    TRANSACTION_COMMIT_TYPE,
};
use ringmq_protocol::json::{DelayOffsetFile, SubscriptionGroupConfig};
use ringmq_protocol::message::{CrcCheck, Decoded, RecordError, decode_entry};

const SHARDS: &str = "--shards=2";
const TOPIC: &str = "Replicated";
const QUEUES: i32 = 4;

fn start_master(store: &Path) -> Option<Broker> {
    start_broker(store, &[SHARDS.into()])
}

/// `options` and what makes a broker `master`'s slave.
fn slave_options(options: &[String], master: &Broker) -> Vec<String> {
    let mut slave = options.to_vec();
    slave.extend([
        "--brokerRole=SLAVE".to_owned(),
        "--brokerId=1".to_owned(),
        format!("--namesrvAddr=127.0.0.1:{}", master.namesrv_port),
    ]);
    slave
}

fn start_slave(store: &Path, master: &Broker) -> Option<Broker> {
    start_broker(store, &slave_options(&[SHARDS.into()], master))
}

impl Client {
    fn max_offset(&mut self, queue_id: i32) -> i64 {
        let header = GetMaxOffsetRequestHeader {
            topic: TOPIC.to_owned(),
            queue_id,
            committed: true,
            broker_name: None,
        };
        let answer = self.call_ok(RemotingCommand::new_request(
            request_code::GET_MAX_OFFSET,
            header.to_ext_fields(),
        ));
        let header: GetMaxOffsetResponseHeader = answer.decode_custom_header().unwrap();
        header.offset
    }

    fn min_offset(&mut self, queue_id: i32) -> i64 {
        let header = GetMinOffsetRequestHeader {
            topic: TOPIC.to_owned(),
            queue_id,
            broker_name: None,
        };
        let answer = self.call_ok(RemotingCommand::new_request(
            request_code::GET_MIN_OFFSET,
            header.to_ext_fields(),
        ));
        let header: GetMinOffsetResponseHeader = answer.decode_custom_header().unwrap();
        header.offset
    }

    /// Every record of a queue, by PULL_MESSAGE from its min offset (not
    /// held).
    fn pull_all(&mut self, queue_id: i32) -> Vec<Vec<u8>> {
        let from = self.min_offset(queue_id);
        self.pull_records_from("replica-readers", TOPIC, queue_id, from)
            .into_iter()
            .map(|(_, body)| body)
            .collect()
    }

    /// UPDATE_CONSUMER_OFFSET of group `readers`.
    fn commit_offset(&mut self, queue_id: i32, offset: i64) {
        self.commit_offset_of("readers", TOPIC, queue_id, offset);
    }

    /// QUERY_CONSUMER_OFFSET of group `readers`: None when there is none.
    fn committed_offset(&mut self, queue_id: i32) -> Option<i64> {
        self.committed_offset_of("readers", TOPIC, queue_id)
    }

    /// The transaction checker's progress in the half queue (its internal
    /// group's offset).
    fn transaction_checked(&mut self) -> Option<i64> {
        self.committed_offset_of("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0)
    }
}

/// A first replica pull of shard 0 from offset 0, as a slave with
/// `shard_count` shards and 16 MiB segments sends it.
fn replica_pull_from_zero(shard_count: i32) -> RemotingCommand {
    let header = ReplicaPullRequestHeader {
        shard: 0,
        shard_count,
        segment_size: 16 * 1024 * 1024,
        offset: 0,
        durable_offset: 0,
        max_bytes: 1024,
        ..ReplicaPullRequestHeader::default()
    };
    RemotingCommand::new_request(request_code::RINGMQ_REPLICA_PULL, header.to_ext_fields())
}

/// Sends `count` messages over the queues; returns their CommitLog offsets.
fn send_some(master: &mut Client, first: usize, count: usize) -> Vec<i64> {
    send_sized(master, first, count, |n| n % 700)
}

/// As [`send_some`], the `n`th body padded with `padding(n)` bytes.
fn send_sized(
    master: &mut Client,
    first: usize,
    count: usize,
    padding: impl Fn(usize) -> usize,
) -> Vec<i64> {
    (first..first + count)
        .map(|n| {
            let body = format!("replicated message {n} {}", "x".repeat(padding(n)));
            let request = send_message_request(
                "pg",
                TOPIC,
                (n % QUEUES as usize) as i32,
                1_700_000_000_000,
                format!("KEYS\u{1}key-{n}\u{2}"),
                body.as_bytes(),
            );
            let answer: SendMessageResponseHeader =
                master.call_ok(request).decode_custom_header().unwrap();
            commit_log_offset(&answer.msg_id)
        })
        .collect()
}

/// Waits until the slave's queues end where the master's do.
fn wait_caught_up(master: &mut Client, slave: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for queue_id in 0..QUEUES {
        let want = master.max_offset(queue_id);
        loop {
            let have = slave.max_offset(queue_id);
            if have == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "queue {queue_id}: the slave has {have} entries, the master {want}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The stored records at `offsets`, each found.
fn records_at(client: &mut Client, offsets: &[i64]) -> Vec<(i64, Vec<u8>)> {
    offsets
        .iter()
        .map(|&offset| {
            let answer = client.view(offset);
            assert_eq!(
                answer.code,
                response_code::SUCCESS,
                "offset {offset}: {:?}",
                answer.remark
            );
            (offset, answer.body_bytes().to_vec())
        })
        .collect()
}

/// Every record is on the slave byte for byte as on the master.
fn assert_same_records(master: &mut Client, slave: &mut Client, offsets: &[i64]) {
    assert_slave_holds(slave, &records_at(master, offsets));
}

fn assert_slave_holds(slave: &mut Client, expected: &[(i64, Vec<u8>)]) {
    for (offset, record) in expected {
        let answer = slave.view(*offset);
        assert_eq!(
            answer.code,
            response_code::SUCCESS,
            "offset {offset} on the slave: {:?}",
            answer.remark
        );
        assert_eq!(answer.body_bytes(), record.as_slice(), "offset {offset}");
    }
}

#[test]
fn a_slave_holds_its_masters_records_refuses_sends_and_keeps_them_when_either_is_killed() {
    let master_store = fresh_store("repl-master");
    let slave_store = fresh_store("repl-slave");
    let Some(master) = start_master(&master_store) else {
        return;
    };
    let mut to_master = master.connect();
    to_master.create_topic(TOPIC, QUEUES);
    // Records written before the slave exists, then while it follows.
    let mut offsets = send_some(&mut to_master, 0, 120);
    // A consumer group's progress on the master (every queue, so both
    // shards), which the slave takes when it connects.
    to_master.put_group(&SubscriptionGroupConfig::new("readers"));
    for queue_id in 0..QUEUES {
        to_master.commit_offset(queue_id, 10 + i64::from(queue_id));
    }
    let slave = start_slave(&slave_store, &master).unwrap();
    let mut to_slave = slave.connect();
    offsets.extend(send_some(&mut to_master, 120, 120));
    wait_caught_up(&mut to_master, &mut to_slave);
    assert_same_records(&mut to_master, &mut to_slave, &offsets);
    // Consumers pull the same messages from the slave (it took the
    // master's topic table).
    let pulled: Vec<Vec<Vec<u8>>> = (0..QUEUES).map(|q| to_master.pull_all(q)).collect();
    assert_eq!(pulled.iter().map(Vec::len).sum::<usize>(), 240);
    for queue_id in 0..QUEUES {
        assert_eq!(
            to_slave.pull_all(queue_id),
            pulled[queue_id as usize],
            "queue {queue_id}"
        );
    }

    for queue_id in 0..QUEUES {
        assert_eq!(
            to_slave.committed_offset(queue_id),
            Some(10 + i64::from(queue_id))
        );
    }

    // A slave takes no writes.
    let refused = to_slave.call(send_message_request(
        "pg",
        TOPIC,
        0,
        1_700_000_000_000,
        String::new(),
        b"to the slave",
    ));
    assert_eq!(
        refused.code,
        response_code::SERVICE_NOT_AVAILABLE,
        "{:?}",
        refused.remark
    );
    // Nor does it serve replication itself.
    let cascade = to_slave.call(replica_pull_from_zero(2));
    assert_eq!(
        cascade.code,
        response_code::SERVICE_NOT_AVAILABLE,
        "{:?}",
        cascade.remark
    );

    let expected = records_at(&mut to_master, &offsets);
    // The master dies: the slave still serves everything.
    drop(to_master);
    master.kill_nine();
    assert_slave_holds(&mut to_slave, &expected);
    for queue_id in 0..QUEUES {
        assert_eq!(
            to_slave.pull_all(queue_id),
            pulled[queue_id as usize],
            "queue {queue_id}"
        );
    }
    // The slave dies too, and recovers what it had.
    drop(to_slave);
    slave.kill_nine();
    let master = start_master(&master_store).unwrap();
    let slave = start_slave(&slave_store, &master).unwrap();
    let mut to_slave = slave.connect();
    assert_slave_holds(&mut to_slave, &expected);
    // And follows its restarted master on.
    let mut to_master = master.connect();
    let more = send_some(&mut to_master, 240, 40);
    wait_caught_up(&mut to_master, &mut to_slave);
    assert_same_records(&mut to_master, &mut to_slave, &more);
}

#[test]
fn a_fresh_slave_of_a_master_whose_log_starts_later_copies_it_from_there() {
    // 1 MiB segments on both (a slave needs its master's segment size).
    let small = [
        SHARDS.to_owned(),
        "--mapedFileSizeCommitLog=1048576".to_owned(),
        "--maxMessageSize=65536".to_owned(),
    ];
    let master_store = fresh_store("repl-master-later");
    let slave_store = fresh_store("repl-slave-later");
    let Some(master) = start_broker(&master_store, &small) else {
        return;
    };
    let mut to_master = master.connect();
    to_master.create_topic(TOPIC, QUEUES);
    // About 3.3 MiB per shard: each shard's log fills three segments and
    // starts a fourth.
    let offsets = send_sized(&mut to_master, 0, 1_700, |_| 4_000);
    drop(to_master);
    assert!(master.stop().success());
    // What retention does to a master's oldest segments, done by hand:
    // each shard's log now starts at its second segment.
    for shard in 0..2 {
        let first = master_store.join(format!("commitlog/{shard}/{:020}", 0));
        std::fs::remove_file(&first).unwrap();
    }
    let master = start_broker(&master_store, &small).unwrap();
    let mut to_master = master.connect();
    let kept: Vec<i64> = offsets
        .iter()
        .copied()
        .filter(|&offset| to_master.view(offset).code == response_code::SUCCESS)
        .collect();
    assert!(
        kept.len() > offsets.len() / 2 && kept.len() < offsets.len(),
        "{} of {} records kept",
        kept.len(),
        offsets.len()
    );
    for queue_id in 0..QUEUES {
        assert!(to_master.min_offset(queue_id) > 0, "queue {queue_id}");
    }
    let slave_options = slave_options(&small, &master);
    let slave = start_broker(&slave_store, &slave_options).unwrap();
    let mut to_slave = slave.connect();
    let more = send_sized(&mut to_master, 1_700, 200, |_| 4_000);
    wait_caught_up(&mut to_master, &mut to_slave);
    assert_same_records(&mut to_master, &mut to_slave, &kept);
    assert_same_records(&mut to_master, &mut to_slave, &more);
    for queue_id in 0..QUEUES {
        assert_eq!(
            to_slave.min_offset(queue_id),
            to_master.min_offset(queue_id),
            "queue {queue_id}"
        );
        assert_eq!(
            to_slave.pull_all(queue_id),
            to_master.pull_all(queue_id),
            "queue {queue_id}"
        );
    }
    // A restart keeps the log where it now starts, and follows on.
    drop(to_slave);
    slave.kill_nine();
    let slave = start_broker(&slave_store, &slave_options).unwrap();
    let mut to_slave = slave.connect();
    let last = send_sized(&mut to_master, 1_900, 40, |_| 4_000);
    wait_caught_up(&mut to_master, &mut to_slave);
    assert_same_records(&mut to_master, &mut to_slave, &kept);
    assert_same_records(&mut to_master, &mut to_slave, &last);
    let log = common::broker_logs_text(&slave_store);
    assert_eq!(
        log.matches("the empty log starts there too").count(),
        2,
        "once per shard, at the first start only:\n{log}"
    );
}

#[test]
fn a_slave_with_another_shard_count_is_refused_and_stays_empty() {
    let master_store = fresh_store("repl-master-shards");
    let slave_store = fresh_store("repl-slave-shards");
    let Some(master) = start_master(&master_store) else {
        return;
    };
    let mut to_master = master.connect();
    to_master.create_topic(TOPIC, QUEUES);
    send_some(&mut to_master, 0, 10);
    let answer = to_master.call(replica_pull_from_zero(1));
    assert_eq!(answer.code, response_code::SYSTEM_ERROR);
    let remark = answer.remark.unwrap_or_default();
    assert!(remark.contains("shard count"), "{remark}");
    // A real slave with one shard: refused, so it holds nothing.
    let slave = start_broker(
        &slave_store,
        &[
            "--shards=1".into(),
            "--brokerRole=SLAVE".into(),
            "--brokerId=1".into(),
            format!("--namesrvAddr=127.0.0.1:{}", master.namesrv_port),
        ],
    )
    .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let mut to_slave = slave.connect();
    assert_eq!(to_slave.max_offset(0), 0);
    drop(slave);
    let log = common::broker_logs_text(&slave_store);
    assert!(
        log.contains("shard count"),
        "the slave's log says why: {log}"
    );
}

#[test]
fn a_sync_master_answers_once_its_slave_has_the_message_and_says_when_it_cannot() {
    let master_store = fresh_store("repl-sync-master");
    let slave_store = fresh_store("repl-sync-slave");
    let Some(master) = start_broker(
        &master_store,
        &[
            SHARDS.into(),
            "--brokerRole=SYNC_MASTER".into(),
            "--syncFlushTimeout=1000".into(),
        ],
    ) else {
        return;
    };
    let mut to_master = master.connect();
    to_master.create_topic(TOPIC, QUEUES);
    let lonely = to_master.call(send_message_request(
        "pg",
        TOPIC,
        0,
        1_700_000_000_000,
        String::new(),
        b"before any slave",
    ));
    // Stored, but no slave has it.
    assert_eq!(
        lonely.code,
        response_code::SLAVE_NOT_AVAILABLE,
        "{:?}",
        lonely.remark
    );
    assert_eq!(to_master.max_offset(0), 1);

    let slave = start_slave(&slave_store, &master).unwrap();
    let mut to_slave = slave.connect();
    // The slave's first pulls come within a second or so.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut sent = 0usize;
    loop {
        let request = send_message_request(
            "pg",
            TOPIC,
            (sent % QUEUES as usize) as i32,
            1_700_000_000_000,
            String::new(),
            format!("sync {sent}").as_bytes(),
        );
        let answer = to_master.call(request);
        sent += 1;
        if answer.code == response_code::SUCCESS {
            break;
        }
        assert_eq!(
            answer.code,
            response_code::SLAVE_NOT_AVAILABLE,
            "{:?}",
            answer.remark
        );
        assert!(Instant::now() < deadline, "the slave never came in sync");
        std::thread::sleep(Duration::from_millis(100));
    }
    // From now on every SUCCESS means the slave holds the record already.
    for n in 0..60 {
        let request = send_message_request(
            "pg",
            TOPIC,
            n % QUEUES,
            1_700_000_000_000,
            String::new(),
            format!("sync {n} {}", "y".repeat(n as usize * 37)).as_bytes(),
        );
        let answer = to_master.call_ok(request);
        let header: SendMessageResponseHeader = answer.decode_custom_header().unwrap();
        let offset = commit_log_offset(&header.msg_id);
        let on_slave = to_slave.view(offset);
        assert_eq!(
            on_slave.code,
            response_code::SUCCESS,
            "send {n}: {:?}",
            on_slave.remark
        );
        assert_eq!(on_slave.body_bytes(), to_master.view(offset).body_bytes());
    }
    // The slave dies: a send waits for it syncFlushTimeout, then says so.
    drop(to_slave);
    slave.kill_nine();
    let started = Instant::now();
    let answer = to_master.call(send_message_request(
        "pg",
        TOPIC,
        1,
        1_700_000_000_000,
        String::new(),
        b"after the slave",
    ));
    assert_eq!(
        answer.code,
        response_code::FLUSH_SLAVE_TIMEOUT,
        "{:?}",
        answer.remark
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_slave_catching_up_on_records_no_longer_in_memory_gets_them_spliced() {
    // No tail cache on the master: every record a slave asks for is on the
    // disk only, so its chunks are spliced from the segments, cut anywhere.
    let cold = [
        SHARDS.to_owned(),
        "--mapedFileSizeCommitLog=16777216".to_owned(),
        "--tailCacheSize=0".to_owned(),
    ];
    let master_store = fresh_store("repl-master-cold");
    let slave_store = fresh_store("repl-slave-cold");
    let Some(master) = start_broker(&master_store, &cold) else {
        return;
    };
    let mut to_master = master.connect();
    to_master.create_topic(TOPIC, QUEUES);
    // About 19 MB per shard over two segments (so chunks meet a BLANK),
    // the last 10 MB more than the write buffers keep in memory.
    let mut offsets = send_sized(&mut to_master, 0, 600, |n| (n * 7_919) % 60_000);
    offsets.extend(send_sized(&mut to_master, 600, 400, |n| 50_000 + n % 3_000));

    // A raw pull as a slave sends it: the log's bytes from 0, cut at
    // maxBytes in the middle of a record; its whole records are the
    // master's.
    let pull_from_zero = |client: &mut Client, max_bytes, raw| {
        let header = ReplicaPullRequestHeader {
            shard: 0,
            shard_count: 2,
            segment_size: 16 * 1024 * 1024,
            offset: 0,
            durable_offset: 0,
            max_bytes,
            raw,
            ..ReplicaPullRequestHeader::default()
        };
        let answer = client.call_ok(RemotingCommand::new_request(
            request_code::RINGMQ_REPLICA_PULL,
            header.to_ext_fields(),
        ));
        let pulled: ReplicaPullResponseHeader = answer.decode_custom_header().unwrap();
        (pulled.raw, answer.body_bytes().to_vec())
    };
    let (raw, body) = pull_from_zero(&mut to_master, 10_000, Some(true));
    assert_eq!(raw, Some(true), "spliced, cut anywhere");
    assert_eq!(body.len(), 10_000);
    // A raw chunk shorter than its first record holds no whole record;
    // asked again without raw, as a slave then asks, the record comes
    // whole (copied). (Before any read of these records: bytes a read
    // brought into memory are copied, raw or not.)
    let (raw, cut) = pull_from_zero(&mut to_master, 100, Some(true));
    assert_eq!((raw, cut.len()), (Some(true), 100));
    assert!(matches!(
        decode_entry(&cut, CrcCheck::Skip),
        Err(RecordError::Truncated { .. })
    ));
    let (raw, copied) = pull_from_zero(&mut to_master, 100, None);
    assert_eq!(raw, None);
    let mut at = 0;
    let mut whole = Vec::new();
    while let Ok(Decoded::Record(record)) = decode_entry(&body[at..], CrcCheck::Verify) {
        whole.push(at as i64);
        at += record.total_size() as usize;
    }
    assert!(
        !whole.is_empty() && at < body.len(),
        "whole records, then a cut one"
    );
    let records = records_at(&mut to_master, &whole);
    assert_eq!(copied, records[0].1);
    for (offset, bytes) in records {
        let start = offset as usize;
        assert_eq!(&body[start..start + bytes.len()], bytes.as_slice());
    }

    // A slave catches up through such chunks and holds every record.
    let slave = start_broker(&slave_store, &slave_options(&cold, &master)).unwrap();
    let mut to_slave = slave.connect();
    wait_caught_up(&mut to_master, &mut to_slave);
    assert_same_records(&mut to_master, &mut to_slave, &offsets);
    let more = send_some(&mut to_master, 1_004, 40);
    wait_caught_up(&mut to_master, &mut to_slave);
    assert_same_records(&mut to_master, &mut to_slave, &more);
    let log = common::broker_logs_text(&master_store);
    assert!(
        log.contains("splicing older records to a slave"),
        "the master spliced:\n{log}"
    );
}

/// The content of `file` under the store's `config/` directory ("" when
/// there is none yet).
fn config_file(store: &Path, file: &str) -> String {
    std::fs::read_to_string(store.join("config").join(file)).unwrap_or_default()
}

/// Every body of every queue of [`TOPIC`], pulled from the start, sorted.
fn all_bodies(client: &mut Client) -> Vec<String> {
    let mut bodies: Vec<String> = (0..QUEUES)
        .flat_map(|q| client.pull_all(q))
        .map(|body| String::from_utf8(body).unwrap())
        .collect();
    bodies.sort();
    bodies
}

/// Pulls [`TOPIC`] until it holds `count` messages (delayed and timer
/// messages arrive when due); returns them sorted.
fn await_bodies(client: &mut Client, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let bodies = all_bodies(client);
        if bodies.len() >= count {
            return bodies;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {count} messages arrived",
            bodies.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sends `body` with `properties` to queue `queue_id` of [`TOPIC`].
fn send_with(client: &mut Client, queue_id: i32, properties: String, body: &str) {
    client.send_message(
        "pg",
        TOPIC,
        queue_id,
        1_700_000_000_000,
        properties,
        body.as_bytes(),
    );
}

/// A half message to queue 0 whose body and transaction id are `body`,
/// committed with a one-way END_TRANSACTION as the Java producer does.
fn send_committed_transaction(client: &mut Client, body: &str) {
    let born = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let properties = format!("TRAN_MSG\u{1}true\u{2}PGROUP\u{1}pg\u{2}UNIQ_KEY\u{1}{body}\u{2}");
    let sent = client.send_message("pg", TOPIC, 0, born, properties, body.as_bytes());
    let header = EndTransactionRequestHeader {
        producer_group: "pg".to_owned(),
        tran_state_table_offset: sent.queue_offset,
        commit_log_offset: commit_log_offset(&sent.msg_id),
        commit_or_rollback: TRANSACTION_COMMIT_TYPE,
        from_transaction_check: Some(false),
        msg_id: body.to_owned(),
        transaction_id: Some(body.to_owned()),
        ..EndTransactionRequestHeader::default()
    };
    client.oneway(RemotingCommand::new_request(
        request_code::END_TRANSACTION,
        header.to_ext_fields(),
    ));
}

/// A delayed message of `level` and a timer message due in a second, one
/// per queue, each body tagged with `tag`.
fn send_scheduled(client: &mut Client, tag: &str) {
    for queue_id in 0..QUEUES {
        let level = 1 + queue_id % 2;
        send_with(
            client,
            queue_id,
            format!("DELAY\u{1}{level}\u{2}"),
            &format!("{tag} delayed {queue_id}"),
        );
        let due = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            + 1_000;
        send_with(
            client,
            queue_id,
            format!("TIMER_DELIVER_MS\u{1}{due}\u{2}"),
            &format!("{tag} timed {queue_id}"),
        );
    }
}

#[test]
fn a_slave_restarted_as_master_goes_on_where_its_master_stopped() {
    // Two short delay levels, owned by the two shards (level n's queue is
    // n - 1).
    let options = [
        SHARDS.to_owned(),
        "--messageDelayLevel=1s 2s".to_owned(),
        "--transactionCheckInterval=500".to_owned(),
    ];
    let master_store = fresh_store("repl-master-failover");
    let slave_store = fresh_store("repl-slave-failover");
    let Some(master) = start_broker(&master_store, &options) else {
        return;
    };
    let slave = start_broker(&slave_store, &slave_options(&options, &master)).unwrap();
    let mut to_master = master.connect();
    to_master.create_topic(TOPIC, QUEUES);
    let plain = send_some(&mut to_master, 0, 40);
    send_scheduled(&mut to_master, "before");
    send_committed_transaction(&mut to_master, "before committed");
    // Every delayed and timer message delivered on the master, the
    // transaction's message, the checker past its half, and a consumer's
    // progress.
    let delivered = await_bodies(&mut to_master, 40 + 2 * QUEUES as usize + 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while to_master.transaction_checked() != Some(1) {
        assert!(
            Instant::now() < deadline,
            "the checker's progress: {:?}",
            to_master.transaction_checked()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    to_master.put_group(&SubscriptionGroupConfig::new("readers"));
    for queue_id in 0..QUEUES {
        to_master.commit_offset(queue_id, 3 + i64::from(queue_id));
    }
    let expected = records_at(&mut to_master, &plain);

    // The slave holds it all, and the master's delivery progress (which it
    // takes as it takes the consumer offsets, at most 10 s later).
    let mut to_slave = slave.connect();
    wait_caught_up(&mut to_master, &mut to_slave);
    let deadline = Instant::now() + Duration::from_secs(30);
    for file in ["delayOffset.json", "timerProgress.json"] {
        loop {
            let (on_master, on_slave) = (
                config_file(&master_store, file),
                config_file(&slave_store, file),
            );
            if !on_master.is_empty() && on_master == on_slave {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{file}: the master has {on_master:?}, the slave {on_slave:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // The transaction checker's progress comes with the delivery progress.
    assert_eq!(to_slave.transaction_checked(), Some(1));
    for queue_id in 0..QUEUES {
        assert_eq!(
            to_slave.committed_offset(queue_id),
            Some(3 + i64::from(queue_id))
        );
    }
    // Both answer GET_ALL_DELAY_OFFSET with what the file holds.
    let on_disk =
        DelayOffsetFile::from_json(config_file(&master_store, "delayOffset.json").as_bytes())
            .unwrap();
    assert_eq!(on_disk.offset_table.len(), 2, "{on_disk:?}");
    for client in [&mut to_master, &mut to_slave] {
        let answer = client.call_ok(RemotingCommand::new_request(
            request_code::GET_ALL_DELAY_OFFSET,
            ExtFields::new(),
        ));
        assert_eq!(
            DelayOffsetFile::from_json(answer.body_bytes()).unwrap(),
            on_disk
        );
    }

    // The master is lost; the operator restarts the slave as the master
    // (brokerId 0, the default role).
    drop(to_master);
    master.kill_nine();
    drop(to_slave);
    assert!(slave.stop().success());
    let promoted = start_broker(&slave_store, &options).unwrap();
    let mut client = promoted.connect();
    assert_slave_holds(&mut client, &expected);
    for queue_id in 0..QUEUES {
        assert_eq!(
            client.committed_offset(queue_id),
            Some(3 + i64::from(queue_id))
        );
    }
    assert_eq!(client.transaction_checked(), Some(1));
    // It takes sends and delivers new delayed and timer messages, and the
    // ones its master had delivered are not delivered again (those were
    // due long before the new ones, so they would have come first).
    send_some(&mut client, 40, 4);
    send_scheduled(&mut client, "after");
    let mut want = delivered;
    want.extend((40..44).map(|n| format!("replicated message {n} {}", "x".repeat(n))));
    want.extend(
        (0..QUEUES).flat_map(|q| [format!("after delayed {q}"), format!("after timed {q}")]),
    );
    want.sort();
    assert_eq!(await_bodies(&mut client, want.len()), want);
    drop(client);
    assert!(promoted.stop().success());
}
