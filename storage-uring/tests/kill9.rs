//! A real `kill -9`: the `kill9-child` binary appends with SYNC_FLUSH on the
//! io_uring disk and prints every acknowledged record; the parent kills it
//! with SIGKILL at a random moment (sometimes during its own recovery),
//! recovers the store, and checks every acknowledged record byte for byte,
//! and through its ConsumeQueue. Several rounds on one directory, so each
//! child also recovers what the previous one left.
//!
//! Prints `skipped: io_uring unavailable: ...` where io_uring cannot be set
//! up. `RINGMQ_SEED=<n>` replays the kill timings.

#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failure is the test's answer"
)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ringmq_protocol::message::{CrcCheck, decode_record};
use ringmq_storage::commit_log::appender::FlushMode;
use ringmq_storage::disk::sim::SimRng;
use ringmq_storage::disk::uring::{UringDisk, UringDiskConfig};
use ringmq_storage::store::{GetMessageStatus, Store, StoreConfig};

const ROUNDS: u64 = 4;
const TOPIC: &str = "Kill9Topic";

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Debug)]
struct Acked {
    commit_log_offset: u64,
    queue_id: u32,
    queue_offset: u64,
    bytes: Vec<u8>,
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn disk() -> Option<UringDisk> {
    match UringDisk::new(UringDiskConfig {
        allow_buffered_fallback: true,
        ..UringDiskConfig::default()
    }) {
        Ok(disk) => Some(disk),
        Err(error) => {
            println!("skipped: io_uring unavailable: {error}");
            None
        }
    }
}

fn config(dir: &std::path::Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir, 0, SocketAddr::from(([127, 0, 0, 1], 10911)));
    config.flush_mode = FlushMode::Sync;
    config.segment_size_bytes = 1024 * 1024;
    // Only the test's own records matter: retention must not force-clean
    // them on a shared machine whose disk happens to be nearly full.
    config.retention.clean_file_forcibly_enable = false;
    config
}

/// Runs one child, kills it after `kill_after`, returns the acks it printed.
fn run_child(dir: &std::path::Path, seed: u64, kill_after: Duration) -> Option<Vec<Acked>> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kill9-child"))
        .arg(dir)
        .arg("1000000")
        .arg(seed.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        // A line cut by the kill has no newline: it is not an ack.
        while reader.read_line(&mut line).unwrap_or(0) > 0 {
            if line.ends_with('\n') {
                lines.push(line.trim_end().to_string());
            }
            line.clear();
        }
        lines
    });
    let started = Instant::now();
    while started.elapsed() < kill_after {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap_or(());
    let status = child.wait().unwrap();
    let lines = reader.join().unwrap();
    if lines.first().is_some_and(|l| l.starts_with("SKIP")) {
        println!("skipped: {}", lines[0]);
        return None;
    }
    assert!(
        status.code().is_none(),
        "the child exited by itself (see its stderr): {status:?}"
    );
    let acks = lines
        .iter()
        .filter_map(|line| line.strip_prefix("ACK "))
        .map(|rest| {
            let fields: Vec<&str> = rest.split(' ').collect();
            Acked {
                commit_log_offset: fields[0].parse().unwrap(),
                queue_id: fields[1].parse().unwrap(),
                queue_offset: fields[2].parse().unwrap(),
                bytes: unhex(fields[3]),
            }
        })
        .collect();
    Some(acks)
}

#[test]
fn every_acknowledged_record_survives_kill_9_byte_for_byte() {
    let Some(probe) = disk() else { return };
    drop(probe);
    let seed = std::env::var("RINGMQ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(now_ms);
    println!("kill9 seed {seed} (replay the timings with RINGMQ_SEED={seed})");
    let mut rng = SimRng::new(seed);
    let dir = TempDir(std::env::temp_dir().join(format!("ringmq-kill9-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let mut acked: Vec<Acked> = Vec::new();
    for round in 0..ROUNDS {
        // Sometimes early, while the child still recovers.
        let kill_after = Duration::from_millis(if rng.below(4) == 0 {
            rng.below(60)
        } else {
            150 + rng.below(600)
        });
        let Some(acks) = run_child(&dir.0, seed.wrapping_add(round), kill_after) else {
            return;
        };
        println!(
            "round {round}: killed after {kill_after:?} with {} acks",
            acks.len()
        );
        acked.extend(acks);
        let (mut store, report) = Store::open(disk().unwrap(), config(&dir.0), now_ms()).unwrap();
        assert!(
            report.abnormal || acked.is_empty(),
            "seed {seed}: the abort file must survive a kill"
        );
        for record in &acked {
            let bytes = store.read_record(record.commit_log_offset).unwrap();
            assert_eq!(
                bytes.as_deref(),
                Some(&record.bytes[..]),
                "seed {seed} round {round}: acked record at {} lost or changed",
                record.commit_log_offset
            );
            let view = decode_record(&record.bytes, CrcCheck::Verify).unwrap();
            assert_eq!(
                view.queue_offset() as u64,
                record.queue_offset,
                "seed {seed}"
            );
            let found = store
                .get_messages(
                    TOPIC,
                    record.queue_id,
                    record.queue_offset,
                    1,
                    1 << 20,
                    None,
                )
                .unwrap();
            assert_eq!(
                found.status,
                GetMessageStatus::Found,
                "seed {seed}: {record:?}"
            );
            assert_eq!(
                found.records[0].commit_log_offset, record.commit_log_offset,
                "seed {seed}"
            );
        }
        // Leave the store as a killed process would: the next child recovers it.
        drop(store.into_disk());
    }
    assert!(
        !acked.is_empty(),
        "seed {seed}: no child acknowledged anything in {ROUNDS} rounds"
    );
}
