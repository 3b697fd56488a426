//! A real full disk under a real broker: the store on a small tmpfs (which
//! takes O_DIRECT on this kernel) that another file fills while sends go
//! on. Mounting needs root (CAP_SYS_ADMIN); elsewhere the test says SKIPPED.
//! The simulated disk covers the store's side of ENOSPC in detail; this
//! covers the process: answers, logs, the space coming back, a restart.

#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failure is the test's answer"
)]

mod common;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Broker, Client, broker_logs_text, fresh_store, send_message_request, start_broker};
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::header::SendMessageResponseHeader;
use ringmq_protocol::json::TopicConfigSerializeWrapper;

/// The tmpfs: two shards' two 16 MiB segments take half of it.
const TMPFS_BYTES: u64 = 128 * 1024 * 1024;
const TOPIC: &str = "FullDisk";
/// Created while the disk is full.
const LATE_TOPIC: &str = "FullDiskLate";
const QUEUES: i32 = 4;
const BODY_BYTES: usize = 1024;
/// The store checks the disk's usage every second
/// (`DISK_SPACE_CHECK_INTERVAL_MS`); this is ample.
const SPACE_CHECK_WAIT: Duration = Duration::from_secs(10);
/// How long sends go on against the full disk after the first refusal.
const FULL_FOR: Duration = Duration::from_secs(3);

/// A tmpfs mounted on a directory, detached when dropped.
struct Tmpfs {
    dir: CString,
}

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` on `dir`; Err with the reason when this
    /// process may not mount.
    fn mount(dir: &Path, bytes: u64) -> Result<Tmpfs, String> {
        let dir = CString::new(dir.as_os_str().as_bytes()).unwrap();
        let fs_type = CString::new("tmpfs").unwrap();
        let options = CString::new(format!("size={bytes},mode=0700")).unwrap();
        // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
        let mounted = unsafe {
            libc::mount(
                fs_type.as_ptr(),
                dir.as_ptr(),
                fs_type.as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        if mounted != 0 {
            return Err(format!(
                "mounting a tmpfs failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Tmpfs { dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // SAFETY: umount2(2) with a NUL-terminated path.
        unsafe { libc::umount2(self.dir.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Writes a file in `dir` until its file system has no page left; returns
/// the file's path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    for chunk in [1024 * 1024, 4096] {
        let bytes = vec![0xf1u8; chunk];
        loop {
            match file.write(&bytes) {
                Ok(written) if written == chunk => {}
                Ok(_) => break,
                Err(error) => {
                    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
                    break;
                }
            }
        }
    }
    path
}

/// A message body that names its number.
fn body(n: usize) -> Vec<u8> {
    let mut body = format!("full-disk message {n:08} ").into_bytes();
    body.resize(BODY_BYTES, b'.');
    body
}

/// What the broker acknowledged: each queue's bodies by queue offset.
#[derive(Default)]
struct Acknowledged {
    queues: BTreeMap<i32, BTreeMap<i64, Vec<u8>>>,
    sent: usize,
    refused: usize,
}

impl Acknowledged {
    /// Sends the next message to `TOPIC`; true when it was stored. A
    /// refusal must be SERVICE_NOT_AVAILABLE naming the full disk.
    fn send(&mut self, client: &mut Client) -> bool {
        let n = self.sent;
        self.sent += 1;
        let queue_id = (n % QUEUES as usize) as i32;
        let body = body(n);
        let answer = client.call(send_message_request(
            "full-disk-producer",
            TOPIC,
            queue_id,
            1_700_000_000_000,
            String::new(),
            &body,
        ));
        if answer.code != response_code::SUCCESS {
            let remark = answer.remark.unwrap_or_default();
            assert_eq!(
                answer.code,
                response_code::SERVICE_NOT_AVAILABLE,
                "send {n} refused with {}: {remark}",
                answer.code
            );
            assert!(remark.contains("full"), "send {n} refused: {remark}");
            self.refused += 1;
            return false;
        }
        let header: SendMessageResponseHeader = answer.decode_custom_header().unwrap();
        let previous = self
            .queues
            .entry(header.queue_id)
            .or_default()
            .insert(header.queue_offset, body);
        assert!(
            previous.is_none(),
            "two sends acknowledged at queue {} offset {}",
            header.queue_id,
            header.queue_offset
        );
        true
    }

    /// Sends until one is refused, within `within`.
    fn send_until_refused(&mut self, client: &mut Client, within: Duration) {
        let deadline = Instant::now() + within;
        while self.send(client) {
            assert!(
                Instant::now() < deadline,
                "no send refused within {within:?}"
            );
        }
    }

    /// Sends until one round over every queue (so both shards, which check
    /// the disk each on its own) is stored, within `within`.
    fn send_until_all_stored(&mut self, client: &mut Client, within: Duration) {
        let deadline = Instant::now() + within;
        let mut stored_in_a_row = 0;
        while stored_in_a_row < QUEUES {
            stored_in_a_row = if self.send(client) {
                stored_in_a_row + 1
            } else {
                0
            };
            assert!(
                Instant::now() < deadline,
                "sends still refused after {within:?}"
            );
        }
    }

    /// Every queue of `TOPIC` pulled from offset 0 holds exactly the
    /// acknowledged bodies, at their offsets.
    fn assert_pulled(&self, client: &mut Client, when: &str) {
        for queue_id in 0..QUEUES {
            let pulled = client.pull_records_from("full-disk-readers", TOPIC, queue_id, 0);
            let expected: Vec<(i64, &Vec<u8>)> = self
                .queues
                .get(&queue_id)
                .into_iter()
                .flatten()
                .map(|(offset, body)| (*offset, body))
                .collect();
            assert_eq!(
                pulled.len(),
                expected.len(),
                "{when}: queue {queue_id} holds {} messages, {} were acknowledged",
                pulled.len(),
                expected.len()
            );
            for ((offset, body), (want_offset, want_body)) in pulled.iter().zip(&expected) {
                assert_eq!(offset, want_offset, "{when}: queue {queue_id}");
                assert!(
                    body == *want_body,
                    "{when}: queue {queue_id} offset {offset} holds another body"
                );
            }
        }
    }
}

/// Whether the broker's topic table holds `topic`.
fn has_topic(client: &mut Client, topic: &str) -> bool {
    let answer = client.call_ok(RemotingCommand::new_request(
        request_code::GET_ALL_TOPIC_CONFIG,
        ExtFields::new(),
    ));
    let table = TopicConfigSerializeWrapper::from_json(answer.body_bytes()).unwrap();
    table.topic_config_table.contains_key(topic)
}

fn start(store: &Path) -> Option<Broker> {
    start_broker(store, &["--shards=2".to_owned()])
}

/// Stops `broker` with SIGTERM (it must exit cleanly) and starts it again
/// on `store`, with a new connection.
fn restart(broker: Broker, client: Client, store: &Path, when: &str) -> (Broker, Client) {
    drop(client);
    let status = broker.stop();
    assert!(status.success(), "{when}: exit {status}");
    let broker = start(store).expect("the broker ran on this store before");
    let client = broker.connect();
    (broker, client)
}

/// Another file fills the disk while sends go on: sends are refused with
/// SERVICE_NOT_AVAILABLE naming the full disk (nothing else, and the
/// broker does not stop), flush failures are logged once a second rather
/// than once per queue, a stop and a start on the full disk work, sends
/// are stored again once the file is gone, and
/// every acknowledged message is pulled back, byte for byte at its offset,
/// then and after a restart; a topic created meanwhile, which takes effect
/// with its config file write retried, exists after the restart.
#[test]
fn a_disk_filled_by_another_file_refuses_sends_and_keeps_every_acknowledged_message() {
    let store = fresh_store("full-disk");
    let _tmpfs = match Tmpfs::mount(&store, TMPFS_BYTES) {
        Ok(tmpfs) => tmpfs,
        Err(reason) => return eprintln!("SKIPPED: {reason} (the test needs root)"),
    };
    let Some(broker) = start(&store) else {
        return;
    };
    let mut client = broker.connect();
    client.create_topic(TOPIC, QUEUES);
    let mut acknowledged = Acknowledged::default();
    for _ in 0..200 {
        assert!(acknowledged.send(&mut client), "a send with space left");
    }
    // The readers' group is created (and its file written) now.
    acknowledged.assert_pulled(&mut client, "before the disk filled");

    let filler = fill(&store);
    let full_since = Instant::now();
    acknowledged.send_until_refused(&mut client, SPACE_CHECK_WAIT);
    let refused_at = Instant::now();
    while refused_at.elapsed() < FULL_FOR {
        acknowledged.send(&mut client);
    }
    acknowledged.assert_pulled(&mut client, "disk full");

    // Stopped and started again while the disk is still full: a clean exit
    // (the config files hold what they held), and a broker that boots,
    // serves what it acknowledged and refuses sends.
    let (broker, mut client) = restart(broker, client, &store, "stopping on a full disk");
    acknowledged.assert_pulled(&mut client, "restarted on a full disk");
    acknowledged.send_until_refused(&mut client, SPACE_CHECK_WAIT);

    let late_topic = client.call(common::create_topic_request(LATE_TOPIC, QUEUES));
    // Stored, or in effect with its config file write retried: either way
    // it must be there after the space came back and a restart.
    let late_topic_in_effect = late_topic.code == response_code::SUCCESS
        || late_topic
            .remark
            .as_deref()
            .is_some_and(|remark| remark.contains("in effect"));
    eprintln!(
        "full for {:?}: {} sends, {} refused; topic creation answered {} ({:?})",
        full_since.elapsed(),
        acknowledged.sent,
        acknowledged.refused,
        late_topic.code,
        late_topic.remark
    );

    std::fs::remove_file(filler).unwrap();
    let full_for = full_since.elapsed();
    acknowledged.send_until_all_stored(&mut client, SPACE_CHECK_WAIT);
    for _ in 0..200 {
        assert!(acknowledged.send(&mut client), "a send with space back");
    }
    acknowledged.assert_pulled(&mut client, "space back");

    let (broker, mut client) = restart(broker, client, &store, "stopping with space back");
    acknowledged.assert_pulled(&mut client, "after a restart");
    if late_topic_in_effect {
        assert!(
            has_topic(&mut client, LATE_TOPIC),
            "a topic created while the disk was full was in effect and is gone"
        );
    }
    drop(client);
    assert!(broker.stop().success());

    let log = broker_logs_text(&store);
    assert!(!log.contains("panicked"), "{log}");
    // One line a second for all queues' flush failures, not one a queue.
    let flush_failures = log
        .lines()
        .filter(|line| line.contains("flush") && line.contains("failed"))
        .count();
    let seconds = full_for.as_secs() as usize + 2;
    assert!(
        flush_failures <= 2 * seconds,
        "{flush_failures} lines of flush failures for a disk full {full_for:?}:\n{log}"
    );
}
