//! Crash tests over the simulated disk: random appends, then a crash of the
//! kind the flush mode promises to survive (SYNC_FLUSH: power loss with
//! un-synced writes dropped or torn, or a process kill; ASYNC_FLUSH: a
//! process kill, in-flight writes lost or torn), then recovery, several
//! rounds per seed. Checked after every recovery: every record acknowledged
//! Ok is there byte for byte; every record reachable through a ConsumeQueue
//! passes its CRC and agrees with its entry; queue offsets are dense.
//! A third of the seeds run retention at every chance (fileReservedTime 0)
//! with retired segments recycled as spares, and shut down cleanly in some
//! rounds, so recovery meets recycled segments full of stale records.
//!
//! `RINGMQ_SEED=<n>` replays one seed; `RINGMQ_SEEDS=<n>` runs n seeds.

#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failure is the test's answer"
)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use ringmq_protocol::message::{CrcCheck, decode_record};
use ringmq_storage::checkpoint::ShardFiles;
use ringmq_storage::commit_log::appender::FlushMode;
use ringmq_storage::commit_log::recovery::ScanStop;
use ringmq_storage::disk::sim::{CrashKind, SimConfig, SimDisk, SimRng};
use ringmq_storage::error::StorageError;
use ringmq_storage::index_file::IndexGeometry;
use ringmq_storage::store::{
    AckStatus, AppendAck, AppendMessage, GetMessageStatus, Store, StoreConfig,
};

const TOPIC: &str = "TopicTest";
const QUEUE_COUNT: u32 = 3;
const SEEDS_DEFAULT: u64 = 1_000;

fn host(port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], port))
}

fn config(mode: FlushMode, shard_id: u8) -> StoreConfig {
    let mut config = StoreConfig::new("/store", shard_id, host(10911));
    config.segment_size_bytes = 64 * 1024;
    config.flush_mode = mode;
    config.flush_interval_ms = 5;
    config.sync_flush_timeout_ms = 1_000_000;
    config.tail_cache_bytes = 16 * 1024;
    config.checkpoint_interval_ms = 7;
    config.consume_queue_flush_interval_ms = 3;
    // 4,096 slots: pages 1 to 3 of an index file hold only slots, which
    // the write-behind of the file being filled leaves to shutdown.
    config.index_geometry = IndexGeometry {
        hash_slot_count: 4096,
        entry_count_max: 8192,
    };
    config
}

/// [`config`] with retention deleting every segment behind the active one
/// as soon as it may, into a pool of two spares.
fn recycling_config(mode: FlushMode, shard_id: u8) -> StoreConfig {
    let mut config = config(mode, shard_id);
    config.retention.file_reserved_time_hours = 0;
    config.retention.delete_when_hours = (0..24).collect();
    config.clean_resource_interval_ms = 0;
    config.commit_log_recycle_segments = 2;
    config
}

/// An acknowledged record: where it is and its exact bytes.
#[derive(Clone, Debug)]
struct Acked {
    commit_log_offset: u64,
    queue_id: u32,
    queue_offset: u64,
    bytes: Vec<u8>,
}

#[derive(Debug)]
struct Sent {
    queue_id: u32,
    queue_offset: u64,
    offsets: Vec<u64>,
    bodies: Vec<Vec<u8>>,
}

fn body(rng: &mut SimRng) -> Vec<u8> {
    let len = match rng.below(20) {
        0 => 5_000 + rng.below(15_000) as usize,
        _ => 1 + rng.below(1_500) as usize,
    };
    let fill = rng.next_u64() as u8;
    (0..len).map(|i| fill.wrapping_add(i as u8)).collect()
}

/// Asserts that the record at `commit_log_offset` is there, passes its CRC
/// and has `body`.
fn assert_body(store: &mut Store<SimDisk>, commit_log_offset: u64, body: &[u8]) {
    let bytes = store.read_record(commit_log_offset).unwrap().unwrap();
    assert_eq!(
        decode_record(&bytes, CrcCheck::Verify).unwrap().body(),
        body,
        "record at {commit_log_offset}"
    );
}

/// A message of `TOPIC` tagged `TagA` to `queue_id`.
fn tagged_message(queue_id: u32, body: &[u8]) -> AppendMessage<'_> {
    AppendMessage {
        topic: TOPIC,
        queue_id,
        body,
        properties: b"TAGS\x01TagA\x02",
        flag: 0,
        sys_flag: 0,
        born_timestamp_ms: 5,
        born_host: host(1),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
    }
}

fn properties(rng: &mut SimRng) -> Vec<u8> {
    let tag = ["TagA", "TagB", "TagC"][rng.below(3) as usize];
    format!("TAGS\u{1}{tag}\u{2}KEYS\u{1}k{}\u{2}", rng.below(1000)).into_bytes()
}

struct Harness {
    seed: u64,
    rng: SimRng,
    mode: FlushMode,
    shard_id: u8,
    /// Retention with recycled segments ([`recycling_config`]).
    recycling: bool,
    now_ms: u64,
    acked: Vec<Acked>,
    sent: BTreeMap<u64, Sent>,
    acks: Vec<AppendAck>,
    /// Acknowledgements of a clean shutdown, for the next open.
    shutdown_acks: Vec<AppendAck>,
}

impl Harness {
    fn append(&mut self, store: &mut Store<SimDisk>) {
        let queue_id = self.rng.below(u64::from(QUEUE_COUNT)) as u32;
        let count = if self.rng.below(5) == 0 {
            2 + self.rng.below(3) as usize
        } else {
            1
        };
        let bodies: Vec<Vec<u8>> = (0..count).map(|_| body(&mut self.rng)).collect();
        let props: Vec<Vec<u8>> = (0..count).map(|_| properties(&mut self.rng)).collect();
        let messages: Vec<AppendMessage<'_>> = bodies
            .iter()
            .zip(&props)
            .map(|(b, p)| AppendMessage {
                topic: TOPIC,
                queue_id,
                body: b,
                properties: p,
                flag: 0,
                sys_flag: 0,
                born_timestamp_ms: self.now_ms as i64,
                born_host: host(40000),
                reconsume_times: 0,
                prepared_transaction_offset: 0,
            })
            .collect();
        let result = if count == 1 {
            store.append(&messages[0], self.now_ms).map(|mut t| {
                t.batch_commit_log_offsets = vec![t.commit_log_offset];
                t
            })
        } else {
            store.append_batch(&messages, self.now_ms)
        };
        match result {
            Ok(ticket) => {
                let sent = Sent {
                    queue_id,
                    queue_offset: ticket.queue_offset,
                    offsets: ticket.batch_commit_log_offsets.clone(),
                    bodies,
                };
                self.sent.insert(ticket.id, sent);
            }
            // A batch may exceed half of the tests' small segments.
            Err(StorageError::MessageTooLarge { .. }) if count > 1 => {}
            Err(error) => assert!(
                error.is_retriable(),
                "seed {}: append failed: {error}",
                self.seed
            ),
        }
    }

    fn config(&self) -> StoreConfig {
        if self.recycling {
            recycling_config(self.mode, self.shard_id)
        } else {
            config(self.mode, self.shard_id)
        }
    }

    fn poll(&mut self, store: &mut Store<SimDisk>) {
        // Retention runs at most once a second (the disk space check).
        self.now_ms += if self.recycling {
            self.rng.below(400)
        } else {
            self.rng.below(4)
        };
        let mut acks = std::mem::take(&mut self.acks);
        store.poll(self.now_ms, &mut acks).unwrap();
        for ack in acks.drain(..) {
            self.on_ack(store, ack);
        }
        self.acks = acks;
    }

    fn on_ack(&mut self, store: &mut Store<SimDisk>, ack: AppendAck) {
        let sent = self
            .sent
            .remove(&ack.id)
            .unwrap_or_else(|| panic!("seed {}: unknown ack {ack:?}", self.seed));
        if ack.status != AckStatus::Ok {
            assert!(
                matches!(ack.status, AckStatus::Failed(_)),
                "seed {}: {ack:?}",
                self.seed
            );
            return;
        }
        for (i, (offset, body)) in sent.offsets.iter().zip(&sent.bodies).enumerate() {
            let bytes = store.read_record(*offset).unwrap().unwrap_or_else(|| {
                panic!("seed {}: acked record at {offset} unreadable", self.seed)
            });
            let view = decode_record(&bytes, CrcCheck::Verify).unwrap();
            assert_eq!(view.body(), &body[..], "seed {}", self.seed);
            assert_eq!(
                view.queue_offset() as u64,
                sent.queue_offset + i as u64,
                "seed {}",
                self.seed
            );
            self.acked.push(Acked {
                commit_log_offset: *offset,
                queue_id: sent.queue_id,
                queue_offset: sent.queue_offset + i as u64,
                bytes,
            });
        }
    }

    /// Every acked record retention kept is there byte for byte; the queues
    /// are consistent.
    fn verify(&self, store: &mut Store<SimDisk>) {
        let seed = self.seed;
        let log_min = store.commit_log_min_offset();
        for acked in self.acked.iter().filter(|a| a.commit_log_offset >= log_min) {
            let bytes = store.read_record(acked.commit_log_offset).unwrap();
            assert_eq!(
                bytes.as_deref(),
                Some(&acked.bytes[..]),
                "seed {seed}: acked record at {} lost or changed",
                acked.commit_log_offset
            );
            let found = store
                .get_messages(
                    TOPIC,
                    acked.queue_id,
                    acked.queue_offset,
                    1,
                    usize::MAX,
                    None,
                )
                .unwrap();
            assert_eq!(
                found.status,
                GetMessageStatus::Found,
                "seed {seed}: record at {} queue {} offset {}: entry {:?}, log {}..{}",
                acked.commit_log_offset,
                acked.queue_id,
                acked.queue_offset,
                store
                    .consume_queues()
                    .get(TOPIC, acked.queue_id)
                    .and_then(|q| q.entry(acked.queue_offset)),
                store.commit_log_min_offset(),
                store.commit_log_max_offset(),
            );
            assert_eq!(
                found.records[0].commit_log_offset, acked.commit_log_offset,
                "seed {seed}"
            );
            let view = decode_record(&acked.bytes, CrcCheck::Skip).unwrap();
            let key = view.property("KEYS").unwrap();
            let indexed = store.query_message(TOPIC, key, 64, 0, i64::MAX);
            assert!(
                indexed.phy_offsets.contains(&acked.commit_log_offset),
                "seed {seed}: key {key} of {} not indexed",
                acked.commit_log_offset
            );
        }
        for queue_id in 0..QUEUE_COUNT {
            let min = store.queue_min_offset(TOPIC, queue_id);
            let max = store.queue_max_offset(TOPIC, queue_id);
            let mut offset = min;
            while offset < max {
                let result = store
                    .get_messages(TOPIC, queue_id, offset, 32, 1 << 20, None)
                    .unwrap();
                if result.status == GetMessageStatus::MessageWasRemoving {
                    let entry = store
                        .consume_queues()
                        .get(TOPIC, queue_id)
                        .and_then(|q| q.entry(offset))
                        .unwrap();
                    assert!(
                        entry.commit_log_offset < log_min,
                        "seed {seed}: queue {queue_id} at {offset}: {entry:?} is above {log_min}"
                    );
                    assert!(result.next_begin_offset > offset, "seed {seed}");
                    offset = result.next_begin_offset;
                    continue;
                }
                assert_eq!(
                    result.status,
                    GetMessageStatus::Found,
                    "seed {seed}: queue {queue_id} at {offset}"
                );
                for record in &result.records {
                    assert_eq!(
                        record.queue_offset, offset,
                        "seed {seed}: queue offsets not dense"
                    );
                    let view = decode_record(&result.body[record.range.clone()], CrcCheck::Verify)
                        .unwrap_or_else(|e| {
                            panic!("seed {seed}: bad record in queue {queue_id}: {e}")
                        });
                    assert_eq!(view.queue_offset() as u64, offset, "seed {seed}");
                    assert_eq!(view.queue_id() as u32, queue_id, "seed {seed}");
                    assert_eq!(view.topic(), TOPIC, "seed {seed}");
                    // Properties are outside BODYCRC: a torn tail there must not pass.
                    assert!(
                        view.property("TAGS").is_some(),
                        "seed {seed}: record without its TAGS"
                    );
                    assert_eq!(
                        view.commit_log_offset() as u64,
                        record.commit_log_offset,
                        "seed {seed}"
                    );
                    offset += 1;
                }
                assert_eq!(result.next_begin_offset, offset, "seed {seed}");
            }
            let past = store
                .get_messages(TOPIC, queue_id, max, 1, 1 << 20, None)
                .unwrap();
            if max > 0 {
                assert_eq!(
                    past.status,
                    GetMessageStatus::OffsetOverflowOne,
                    "seed {seed}"
                );
            }
        }
    }
}

/// What the seeds exercised, so the test fails if the crashes stop biting.
#[derive(Debug, Default)]
struct Coverage {
    acked: usize,
    torn_tails: usize,
    fenced: usize,
    power_losses: usize,
    /// Roll-overs into a segment created ahead of need, in the background.
    rollovers_precreated: u64,
    /// Crashes while the next segment's creation was in flight.
    crashes_mid_creation: usize,
    /// Abnormal recoveries that kept the derived files up to the
    /// checkpoint's durable points.
    derived_kept: usize,
    /// Abnormal recoveries that rebuilt them from the whole CommitLog.
    derived_rebuilt: usize,
    /// Segments made from a spare (a retired segment).
    segments_recycled: u64,
    /// Normal restarts after a clean shutdown (recycling seeds only).
    clean_restarts: usize,
}

fn run_seed(seed: u64, coverage: &mut Coverage) {
    let mut rng = SimRng::new(seed);
    let mode = if rng.below(2) == 0 {
        FlushMode::Sync
    } else {
        FlushMode::Async
    };
    let shard_id = if rng.below(4) == 0 { 3 } else { 0 };
    let mut sim = SimConfig::new(seed);
    sim.complete_percent = 30 + rng.below(60);
    let mut disk = SimDisk::new(sim);
    let recycling = rng.below(4) == 0;
    let mut h = Harness {
        seed,
        rng,
        mode,
        shard_id,
        recycling,
        now_ms: 1_000,
        acked: Vec::new(),
        sent: BTreeMap::new(),
        acks: Vec::new(),
        shutdown_acks: Vec::new(),
    };
    let rounds = 2 + h.rng.below(3);
    let mut clean = false;
    for round in 0..=rounds {
        let (mut store, report) = Store::open(disk, h.config(), h.now_ms)
            .unwrap_or_else(|e| panic!("seed {seed} round {round}: open failed: {e}"));
        if clean {
            assert!(
                !report.abnormal,
                "seed {seed}: a clean shutdown reopens normally"
            );
            assert!(
                matches!(
                    report.recovery.scan.stop,
                    ScanStop::Zeros | ScanStop::EndOfSegments
                ) && !report.recovery.fenced,
                "seed {seed}: a clean shutdown ends at zeros: {:?}",
                report.recovery
            );
            coverage.clean_restarts += 1;
            for ack in std::mem::take(&mut h.shutdown_acks) {
                h.on_ack(&mut store, ack);
            }
        }
        coverage.fenced += usize::from(report.recovery.fenced);
        coverage.derived_kept += usize::from(report.abnormal && !report.derived_rebuilt);
        coverage.derived_rebuilt += usize::from(report.derived_rebuilt);
        coverage.torn_tails += usize::from(matches!(
            report.recovery.scan.stop,
            ScanStop::Invalid { .. }
        ));
        h.verify(&mut store);
        if round == rounds {
            coverage.acked += h.acked.len();
            return;
        }
        let faulty = h.rng.below(10) == 0;
        if faulty {
            store.disk_mut().faults_mut().write_eio_nth = Some(1 + h.rng.below(10));
        }
        let steps = if h.recycling {
            60 + h.rng.below(120)
        } else {
            10 + h.rng.below(60)
        };
        for _ in 0..steps {
            match h.rng.below(10) {
                0..=5 => h.append(&mut store),
                _ => h.poll(&mut store),
            }
        }
        coverage.segments_recycled += store.commit_log().segment_stats().recycled;
        // A store failed by a write error keeps its abort file.
        clean = h.recycling && !faulty && h.rng.below(3) == 0;
        if clean {
            let mut acks = std::mem::take(&mut h.acks);
            disk = store.shutdown(h.now_ms, &mut acks).unwrap();
            assert_eq!(
                acks.len(),
                h.sent.len(),
                "seed {seed}: shutdown left appends unacknowledged"
            );
            // Checked (read back) once the store is open again.
            h.shutdown_acks = acks;
            continue;
        }
        h.sent.clear();
        let kind = match h.mode {
            FlushMode::Sync if h.rng.below(3) != 0 => CrashKind::PowerLoss,
            _ => CrashKind::ProcessKill,
        };
        coverage.power_losses += usize::from(kind == CrashKind::PowerLoss);
        coverage.rollovers_precreated += store.commit_log().segment_stats().rollovers_ready;
        coverage.crashes_mid_creation += usize::from(store.commit_log().is_creating_segment());
        disk = store.disk_mut().crash(kind);
    }
}

#[test]
fn acknowledged_records_survive_the_crashes_their_flush_mode_promises() {
    let seeds = common::seeds(SEEDS_DEFAULT);
    let mut coverage = Coverage::default();
    for &seed in &seeds {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_seed(seed, &mut coverage)
        }));
        if let Err(panic) = result {
            eprintln!("failing seed: {seed} (replay with RINGMQ_SEED={seed})");
            std::panic::resume_unwind(panic);
        }
    }
    println!("{} seeds: {coverage:?}", seeds.len());
    if seeds.len() >= 100 {
        assert!(
            coverage.acked > 10 * seeds.len(),
            "too few acknowledged records: {coverage:?}"
        );
        assert!(
            coverage.torn_tails > 0,
            "no crash left a torn tail: {coverage:?}"
        );
        assert!(
            coverage.fenced > 0,
            "no recovery fenced a tail: {coverage:?}"
        );
        assert!(
            coverage.power_losses > 0,
            "no power loss was simulated: {coverage:?}"
        );
        assert!(
            coverage.rollovers_precreated > 0,
            "no roll-over into a segment created ahead of need: {coverage:?}"
        );
        assert!(
            coverage.crashes_mid_creation > 0,
            "no crash between the steps of a segment creation: {coverage:?}"
        );
        assert!(
            coverage.segments_recycled > 0,
            "no segment was made from a spare: {coverage:?}"
        );
        assert!(
            coverage.clean_restarts > 0,
            "no clean restart of a recycling store: {coverage:?}"
        );
        assert!(
            coverage.derived_kept > coverage.derived_rebuilt,
            "abnormal recoveries mostly rebuild the derived files: {coverage:?}"
        );
    }
}

#[test]
fn a_clean_shutdown_keeps_every_appended_record_and_reopens_normally() {
    let disk = SimDisk::new(SimConfig::new(77));
    let (mut store, report) = Store::open(disk, config(FlushMode::Async, 0), 0).unwrap();
    assert!(!report.abnormal);
    let body = vec![7u8; 300];
    let message = tagged_message(1, &body);
    let mut tickets = Vec::new();
    for i in 0..200 {
        tickets.push(store.append(&message, i).unwrap());
    }
    let mut acks = Vec::new();
    let disk = store.shutdown(1_000, &mut acks).unwrap();
    assert_eq!(acks.len(), 200);
    assert!(acks.iter().all(|a| a.status == AckStatus::Ok));
    let (mut store, report) = Store::open(disk, config(FlushMode::Async, 0), 2_000).unwrap();
    assert!(!report.abnormal);
    assert!(report.checkpoint_valid);
    assert!(!report.recovery.fenced);
    assert_eq!(store.queue_max_offset(TOPIC, 1), 200);
    for ticket in &tickets {
        assert_body(&mut store, ticket.commit_log_offset, &body);
    }
    // Appends continue where the log ended, not in a fresh segment.
    let next = store.append(&message, 3_000).unwrap();
    assert_eq!(next.queue_offset, 200);
    assert_eq!(
        next.commit_log_offset,
        store.commit_log().encoded_offset() - u64::from(next.wrote_bytes)
    );
}

#[test]
fn records_larger_than_a_scan_read_are_recovered_whole_after_a_kill() {
    use ringmq_storage::disk::Disk;
    use ringmq_storage::limits::{MESSAGE_SIZE_MAX_BYTES, RECOVERY_READ_SIZE};
    let mut store_config = config(FlushMode::Sync, 0);
    store_config.segment_size_bytes = 10 * 1024 * 1024;
    store_config.tail_cache_bytes = 16 * 1024 * 1024;
    let disk = SimDisk::new(SimConfig::new(5));
    let (mut store, _) = Store::open(disk, store_config.clone(), 0).unwrap();
    // Sizes around and across the read size, up to the largest message, so
    // records start at every phase of a chunk and run over one or several.
    let sizes = [
        100,
        RECOVERY_READ_SIZE - 300,
        RECOVERY_READ_SIZE + 7,
        3,
        2 * RECOVERY_READ_SIZE + 1_000,
        MESSAGE_SIZE_MAX_BYTES,
        5_000,
        RECOVERY_READ_SIZE / 2,
        MESSAGE_SIZE_MAX_BYTES - 1,
        64,
    ];
    let mut acks = Vec::new();
    let mut tickets = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let body: Vec<u8> = (0..size).map(|b| (b * 31 + i) as u8).collect();
        let message = tagged_message(0, &body);
        tickets.push((store.append(&message, 10).unwrap(), body));
        while store.pending_appends() > 0 {
            store
                .poll_wait(10, std::time::Duration::ZERO, &mut acks)
                .unwrap();
        }
    }
    assert_eq!(acks.len(), sizes.len());
    assert!(acks.iter().all(|a| a.status == AckStatus::Ok));
    assert!(
        store.commit_log().encoded_offset() > store_config.segment_size_bytes,
        "the records should fill more than one segment"
    );
    let mut disk = store.disk_mut().crash(CrashKind::ProcessKill);
    // Without a checkpoint the scan covers the whole log, every record.
    let checkpoint = ShardFiles::new(&store_config.root, 0).checkpoint;
    disk.remove(&checkpoint).unwrap();
    let (mut store, report) = Store::open(disk, store_config, 1_000).unwrap();
    assert!(report.abnormal);
    assert_eq!(report.recovery.scanned_from, 0);
    assert_eq!(report.recovery.scan.record_count, sizes.len() as u64);
    assert_eq!(store.queue_max_offset(TOPIC, 0), sizes.len() as u64);
    for (ticket, body) in &tickets {
        assert_body(&mut store, ticket.commit_log_offset, body);
    }
}

#[test]
fn a_recovery_without_a_checkpoint_reads_the_log_once_into_a_bounded_set_of_buffers() {
    use ringmq_storage::disk::Disk;
    use ringmq_storage::limits::{RECOVERY_READ_SIZE, RECOVERY_READS_IN_FLIGHT_MAX};
    let mut store_config = config(FlushMode::Async, 0);
    store_config.segment_size_bytes = 48 * RECOVERY_READ_SIZE as u64;
    store_config.tail_cache_bytes = 16 * 1024 * 1024;
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(17)), store_config.clone(), 0).unwrap();
    let body = vec![0x5A_u8; 60 * 1024];
    let mut acks = Vec::new();
    while store.commit_log().encoded_offset() < 40 * RECOVERY_READ_SIZE as u64 {
        store.append(&tagged_message(0, &body), 10).unwrap();
        while store.pending_appends() > 0 {
            store
                .poll_wait(10, std::time::Duration::ZERO, &mut acks)
                .unwrap();
        }
    }
    let appended = acks.len() as u64;
    let log_end = store.commit_log().encoded_offset();
    let mut disk = store.disk_mut().crash(CrashKind::ProcessKill);
    disk.remove(&ShardFiles::new(&store_config.root, 0).checkpoint)
        .unwrap();
    // The simulated disk completes every read at the next poll, far faster
    // than the scan: without a bound on the chunks read ahead, the reads
    // ran through the segment, each into a buffer of its own.
    let (store, report) = Store::open(disk, store_config, 1_000).unwrap();
    assert_eq!(report.recovery.scan.record_count, appended);
    // One pass over the log: its chunks, the read-ahead past its end and
    // the kept ConsumeQueue read for its floor. Two passes (a scan to find
    // the end, then one to rebuild the queues) read every chunk twice.
    let log_chunks = log_end.div_ceil(RECOVERY_READ_SIZE as u64);
    let reads = store.disk().read_count();
    assert!(
        reads < 2 * log_chunks,
        "{reads} reads for a log of {log_chunks} chunks"
    );
    let chunk_buffers = store.disk().fresh_buffers(RECOVERY_READ_SIZE);
    assert!(
        chunk_buffers <= RECOVERY_READS_IN_FLIGHT_MAX as u64 + 1,
        "{chunk_buffers} chunk buffers for {RECOVERY_READS_IN_FLIGHT_MAX} reads in flight"
    );
}

#[test]
fn retired_segments_become_later_segments_and_a_clean_end_in_one_reopens_at_zeros() {
    let store_config = recycling_config(FlushMode::Async, 0);
    let size = store_config.segment_size_bytes;
    let dir = std::path::PathBuf::from("/store/commitlog/0");
    let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(91)), store_config, 0).unwrap();
    // Records of exactly 1 KiB: every fourth one ends on a block boundary.
    let mut body = vec![3u8; 900];
    let probe = store.append(&tagged_message(0, &body), 0).unwrap();
    body.resize(body.len() + 1024 - probe.wrote_bytes as usize, 3);
    let mut now_ms = 0;
    let mut acks = Vec::new();
    let mut tickets = Vec::new();
    // Until the active segment is a renamed spare, with its old records
    // past the end, and the end is on a block boundary.
    loop {
        let ticket = store.append(&tagged_message(0, &body), now_ms).unwrap();
        assert_eq!(ticket.wrote_bytes, 1024);
        tickets.push(ticket);
        now_ms += 50;
        store.poll(now_ms, &mut acks).unwrap();
        let stats = store.commit_log().segment_stats();
        let end = store.commit_log().encoded_offset();
        if stats.recycled >= 2 && end % 4096 == 0 && end % size > 8192 {
            break;
        }
    }
    let stats = store.commit_log().segment_stats();
    assert!(stats.spared >= 2, "{stats:?}");
    let end = store.commit_log().encoded_offset();
    let mut shutdown_acks = Vec::new();
    let disk = store.shutdown(now_ms, &mut shutdown_acks).unwrap();
    acks.extend(shutdown_acks);
    assert!(acks.iter().all(|a| a.status == AckStatus::Ok));
    let image = disk.snapshot();
    let segment = &image.files[&dir.join(ringmq_storage::commit_log::segment::segment_file_name(
        end / size * size,
    ))];
    let at = (end % size) as usize;
    assert!(
        segment[at..at + 4096].iter().all(|b| *b == 0),
        "the block after a clean end on a block boundary is zeroed"
    );
    assert!(
        segment[at + 4096..].iter().any(|b| *b != 0),
        "the active segment holds stale records past the end"
    );
    let (mut store, report) =
        Store::open(disk, recycling_config(FlushMode::Async, 0), now_ms).unwrap();
    assert!(!report.abnormal);
    assert_eq!(report.recovery.scan.stop, ScanStop::Zeros);
    assert!(!report.recovery.fenced);
    assert_eq!(
        report.recovery.append_from, end,
        "appends continue at the end"
    );
    let log_min = store.commit_log_min_offset();
    let kept: Vec<_> = tickets
        .iter()
        .filter(|t| t.commit_log_offset >= log_min)
        .collect();
    assert!(!kept.is_empty());
    for ticket in kept {
        assert_body(&mut store, ticket.commit_log_offset, &body);
    }
}
