use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ringmq_protocol::message::{CrcCheck, Properties, decode_record};

use super::*;
use std::sync::Arc;

use crate::aligned::BLOCK_SIZE;
use crate::commit_log::shard_offset;
use crate::commit_log::{ReplicaChunk, ShipPipe, Shipment, replica_whole_len};
use crate::consume_queue::CQ_ENTRY_SIZE;
use crate::disk::sim::{CrashKind, SimConfig, SimDisk, SimImage};
use crate::disk::{Disk, OpenOptions};
use crate::index_file::IndexGeometry;
use crate::limits::{
    COMMIT_BEHIND_BYTES_MAX_ASYNC, COMMIT_BEHIND_BYTES_MIN_ASYNC, COMMIT_LOG_SEGMENT_SIZE_MIN,
    PULL_READ_WINDOW_BYTES, RECORD_READ_SPAN_BYTES, WRITE_BUFFER_SIZE,
};

fn config(mode: FlushMode) -> StoreConfig {
    let mut config = StoreConfig::new("/s", 0, SocketAddr::from(([127, 0, 0, 1], 10911)));
    config.segment_size_bytes = COMMIT_LOG_SEGMENT_SIZE_MIN;
    config.flush_mode = mode;
    config.flush_interval_ms = 10;
    config.sync_flush_timeout_ms = 50;
    config.index_geometry = IndexGeometry {
        hash_slot_count: 1024,
        entry_count_max: 8192,
    };
    config
}

fn message(body: &[u8]) -> AppendMessage<'_> {
    AppendMessage {
        topic: "T",
        queue_id: 0,
        body,
        properties: b"TAGS\x01A\x02",
        flag: 0,
        sys_flag: 0,
        born_timestamp_ms: 1,
        born_host: SocketAddr::from(([10, 0, 0, 2], 999)),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
    }
}

fn settle(store: &mut Store<SimDisk>, now_ms: u64, acks: &mut Vec<AppendAck>) {
    for _ in 0..1_000 {
        store
            .poll_wait(now_ms, std::time::Duration::ZERO, acks)
            .unwrap();
        if store.pending_appends() == 0 {
            return;
        }
    }
    panic!("appends still pending");
}

#[test]
fn a_queue_with_enough_unwritten_entries_is_flushed_before_the_interval() {
    let mut config = config(FlushMode::Async);
    config.consume_queue_flush_interval_ms = u64::MAX;
    config.consume_queue_flush_early_bytes = 10 * CQ_ENTRY_SIZE;
    let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(31)), config, 0).unwrap();
    let dirty = |store: &Store<SimDisk>| store.queues.get("T", 0).unwrap().dirty_bytes();
    for _ in 0..9 {
        store.append(&message(b"x"), 1).unwrap();
    }
    turns(&mut store, 1, 20);
    assert_eq!(
        dirty(&store),
        9 * CQ_ENTRY_SIZE,
        "below the threshold: left for the interval"
    );
    store.append(&message(b"x"), 1).unwrap();
    turns(&mut store, 1, 20);
    assert_eq!(dirty(&store), 0, "written at once");
    assert!(store.queues.is_clean(), "and synced after its write");
}

#[test]
fn dispatch_properties_find_what_properties_get_finds() {
    let cases: [&[u8]; 7] = [
        b"",
        b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1\x02",
        b"TAGS\x01first\x02TAGS\x01last\x02",
        b"TAGS\x01\x02KEYS\x01\x01x\x02\x01TAGS",
        b"UNIQ_KEY\x01\xff\xfe\x02TAGS\x01t",
        b"TAGS\x01a\x01b\x02__CRC32#\x010000000000\x02",
        b"KEYS\x01k\x02UNIQ_KEY\x01u\x02TAGS\x01t\x02KEYS\x01\xff\x02",
    ];
    for bytes in cases {
        let properties = Properties::new(bytes);
        let expected = DispatchProperties {
            tags: properties.get(TAGS),
            keys: properties.get(KEYS),
            uniq_key: properties.get(UNIQ_KEY),
        };
        assert_eq!(DispatchProperties::find(bytes), expected, "{bytes:?}");
    }
}

proptest::proptest! {
    #[test]
    fn dispatch_properties_agree_with_properties_get_on_any_string(
        tokens in proptest::collection::vec(0usize..11, 0..40),
    ) {
        const TOKENS: [&[u8]; 11] = [
            b"TAGS", b"KEYS", b"UNIQ_KEY", b"\x01", b"\x02", b"a", b"T", b"\xff",
            b"TAGS\x01", b"U", b"KEYS\x01k1 k2\x02",
        ];
        let bytes: Vec<u8> = tokens.iter().flat_map(|&t| TOKENS[t].iter().copied()).collect();
        let properties = Properties::new(&bytes);
        let expected = DispatchProperties {
            tags: properties.get(TAGS),
            keys: properties.get(KEYS),
            uniq_key: properties.get(UNIQ_KEY),
        };
        proptest::prop_assert_eq!(DispatchProperties::find(&bytes), expected);
    }

    #[test]
    fn byte_positions_are_every_match_in_order(
        bytes in proptest::collection::vec(0u8..4, 0..70),
        needle in 0u8..4,
    ) {
        let expected: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] == needle).collect();
        let found: Vec<usize> = super::BytePositions::new(&bytes, needle).collect();
        proptest::prop_assert_eq!(found, expected);
    }
}

#[test]
fn sync_flush_acks_only_after_fdatasync_and_fills_record_fields() {
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(1)), config(FlushMode::Sync), 0).unwrap();
    let ticket = store.append(&message(b"hello"), 42).unwrap();
    assert_eq!(
        store.commit_log_max_offset(),
        0,
        "nothing is acknowledgeable before the flush"
    );
    assert_eq!(store.read_record(ticket.commit_log_offset).unwrap(), None);
    let mut acks = Vec::new();
    settle(&mut store, 43, &mut acks);
    assert_eq!(acks[0].status, AckStatus::Ok);
    let appender = store.commit_log().appender();
    assert_eq!(appender.durable(), appender.encoded());
    let bytes = store
        .read_record(ticket.commit_log_offset)
        .unwrap()
        .unwrap();
    let view = decode_record(&bytes, CrcCheck::Verify).unwrap();
    assert_eq!(view.store_timestamp_ms(), 42);
    assert_eq!(view.store_host(), SocketAddr::from(([127, 0, 0, 1], 10911)));
    assert_eq!(view.commit_log_offset() as u64, ticket.commit_log_offset);
    assert!(view.property("__CRC32#").is_some());
}

#[test]
fn a_steady_trickle_of_appends_is_acked_within_a_few_milliseconds() {
    // One small append per non-blocking poll, never a wait: the partial
    // tail block must still be written once its oldest record lingers.
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(9)), config(FlushMode::Async), 0).unwrap();
    let mut acks = Vec::new();
    let first = store.append(&message(b"first"), 0).unwrap();
    let mut acked_at = None;
    for step in 0..2_000u64 {
        let now_ms = step / 50; // 50 turns per millisecond
        store.append(&message(b"trickle"), now_ms).unwrap();
        store.poll(now_ms, &mut acks).unwrap();
        if acks.iter().any(|ack| ack.id == first.id) {
            acked_at = Some(now_ms);
            break;
        }
    }
    let acked_at = acked_at.expect("the first append was never acknowledged");
    assert!(acked_at <= 3, "acknowledged only at {acked_at} ms");
}

#[test]
fn sync_flush_past_its_timeout_acks_flush_timeout_once() {
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(2)), config(FlushMode::Sync), 0).unwrap();
    let ticket = store.append(&message(b"slow"), 0).unwrap();
    let mut acks = Vec::new();
    // The disk is never polled before the deadline passes.
    store.collect_acks(100, &mut acks);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].status, AckStatus::FlushTimeout);
    assert_eq!(acks[0].id, ticket.id);
    // Its write, then the group fdatasync, complete later.
    for _ in 0..100 {
        if store
            .read_record(ticket.commit_log_offset)
            .unwrap()
            .is_some()
        {
            break;
        }
        store
            .poll_wait(200, std::time::Duration::ZERO, &mut acks)
            .unwrap();
    }
    assert_eq!(
        acks.len(),
        1,
        "a timed-out append is not acknowledged again"
    );
    assert!(
        store
            .read_record(ticket.commit_log_offset)
            .unwrap()
            .is_some(),
        "the record stays stored"
    );
}

#[test]
fn records_behind_a_commit_in_flight_are_not_ready_until_it_completes() {
    let mut sim = SimConfig::new(11);
    // Nothing completes unless a poll blocks: the tail commit stays in flight.
    sim.complete_percent = 0;
    let (mut store, _) = Store::open(SimDisk::new(sim), config(FlushMode::Async), 0).unwrap();
    let ready = |store: &Store<SimDisk>| store.commit_log().appender().unsubmitted_ready();
    let mut acks = Vec::new();
    store.append(&message(b"first"), 1).unwrap();
    assert!(ready(&store), "nothing in flight: the tail can go now");
    // A turn with nothing new appended writes the partial tail block.
    for _ in 0..2 {
        store.poll(1, &mut acks).unwrap();
    }
    let appender = store.commit_log().appender();
    assert_eq!(
        appender.submitted(),
        appender.encoded(),
        "the tail commit started"
    );
    assert!(
        appender.written() < appender.submitted(),
        "and is still in flight"
    );
    store.append(&message(b"second"), 1).unwrap();
    assert!(
        !ready(&store),
        "the second record's block waits for the commit in flight: polling cannot start it"
    );
    store.poll(1, &mut acks).unwrap();
    assert!(
        !ready(&store),
        "still in flight after a poll that did not block"
    );
    settle(&mut store, 2, &mut acks);
    assert_eq!(acks.len(), 2);
    store.append(&message(b"third"), 3).unwrap();
    assert!(ready(&store), "the commit completed: the tail can go now");
}

#[test]
fn records_left_unsubmitted_by_a_failed_write_are_never_ready() {
    let mut sim = SimConfig::new(13);
    sim.complete_percent = 0;
    let (mut store, _) = Store::open(SimDisk::new(sim), config(FlushMode::Async), 0).unwrap();
    store.disk_mut().faults_mut().write_eio_nth = Some(1);
    let mut acks = Vec::new();
    store.append(&message(b"doomed"), 1).unwrap();
    for _ in 0..2 {
        store.poll(1, &mut acks).unwrap();
    }
    store.append(&message(b"behind it"), 1).unwrap();
    settle(&mut store, 2, &mut acks);
    let appender = store.commit_log().appender();
    assert!(appender.failure().is_some(), "the write failed");
    assert!(
        appender.encoded() > appender.submitted(),
        "the second record was never submitted"
    );
    assert!(
        !appender.unsubmitted_ready(),
        "nothing will submit it: a caller polling at once would spin forever"
    );
}

#[test]
fn write_error_fails_pending_appends_and_refuses_new_ones() {
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(3)), config(FlushMode::Async), 0).unwrap();
    store.disk_mut().faults_mut().write_eio_nth = Some(1);
    store.append(&message(b"doomed"), 0).unwrap();
    let mut acks = Vec::new();
    settle(&mut store, 1, &mut acks);
    assert!(matches!(acks[0].status, AckStatus::Failed(_)), "{acks:?}");
    let refused = store.append(&message(b"later"), 2).unwrap_err();
    assert!(
        matches!(refused, StorageError::NotWritable { .. }),
        "{refused}"
    );
}

#[test]
fn acknowledged_records_are_read_from_the_tail_cache_across_segment_ends() {
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(4)), config(FlushMode::Async), 0).unwrap();
    let body = vec![7u8; 3_000];
    let mut tickets = Vec::new();
    let mut acks = Vec::new();
    for i in 0..60 {
        tickets.push(store.append(&message(&body), i).unwrap());
        if i % 3 == 0 {
            store.poll(i, &mut acks).unwrap();
        }
    }
    settle(&mut store, 100, &mut acks);
    assert!(store.commit_log().segments().segments().len() >= 3);
    // Any disk read from now on fails: every record must come from the
    // write buffers, which are the tail cache.
    store.disk_mut().faults_mut().read_eio_nth = Some(1);
    for ticket in &tickets {
        let bytes = store
            .read_record(ticket.commit_log_offset)
            .unwrap()
            .unwrap();
        assert_eq!(
            decode_record(&bytes, CrcCheck::Verify).unwrap().body(),
            &body[..]
        );
    }
}

#[test]
fn records_never_cross_a_segment_end_and_reads_come_back_from_disk() {
    let mut config = config(FlushMode::Async);
    config.tail_cache_bytes = 0;
    let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(4)), config, 0).unwrap();
    let body = vec![9u8; 3_000];
    let mut tickets = Vec::new();
    let mut acks = Vec::new();
    for i in 0..60 {
        tickets.push(store.append(&message(&body), i).unwrap());
        store.poll(i, &mut acks).unwrap();
    }
    settle(&mut store, 100, &mut acks);
    let segment = COMMIT_LOG_SEGMENT_SIZE_MIN;
    assert!(store.commit_log().segments().segments().len() >= 3);
    for ticket in &tickets {
        let start = ticket.commit_log_offset;
        let end = start + u64::from(ticket.wrote_bytes);
        assert_eq!(
            start / segment,
            (end - 1) / segment,
            "record at {start} crosses a segment end"
        );
        let bytes = store.read_record(start).unwrap().unwrap();
        assert_eq!(
            decode_record(&bytes, CrcCheck::Verify).unwrap().body(),
            &body[..]
        );
    }
    // The first segment ends with a BLANK marker covering its rest.
    let image = store.disk().snapshot();
    let first = &image.files[&PathBuf::from("/s/commitlog/0/00000000000000000000")];
    let last_end = tickets
        .iter()
        .map(|t| t.commit_log_offset + u64::from(t.wrote_bytes))
        .filter(|e| *e <= segment)
        .max()
        .unwrap() as usize;
    assert_eq!(
        &first[last_end + 4..last_end + 8],
        &0xCBD4_3194u32.to_be_bytes()
    );
    assert_eq!(
        u32::from_be_bytes(first[last_end..last_end + 4].try_into().unwrap()) as u64,
        segment - last_end as u64
    );
}

#[test]
fn a_full_disk_rejects_appends_retriably() {
    let mut sim = SimConfig::new(5);
    // One segment and the checkpoint block leave about 1 % free.
    sim.capacity_bytes = COMMIT_LOG_SEGMENT_SIZE_MIN + 5 * 1024;
    let (mut store, _) = Store::open(SimDisk::new(sim), config(FlushMode::Async), 0).unwrap();
    let mut acks = Vec::new();
    store.poll(DISK_SPACE_CHECK_INTERVAL_MS, &mut acks).unwrap();
    let error = store.append(&message(b"x"), 1).unwrap_err();
    assert!(matches!(error, StorageError::DiskFull { .. }), "{error}");
    assert!(error.is_retriable());
}

#[test]
fn a_roll_over_that_cannot_create_its_segment_fails_the_appends_after_it_at_once() {
    let mut sim = SimConfig::new(6);
    // Room for one segment and a half: the second cannot be created.
    sim.capacity_bytes = COMMIT_LOG_SEGMENT_SIZE_MIN * 3 / 2;
    let (mut store, _) = Store::open(SimDisk::new(sim), config(FlushMode::Async), 0).unwrap();
    let mut acks = Vec::new();
    let body = vec![1u8; 1_000];
    let mut appended = 0;
    let error = loop {
        match store.append(&message(&body), 1) {
            Ok(_) => appended += 1,
            Err(error) => break error,
        }
        store.poll(1, &mut acks).unwrap();
    };
    assert!(appended > 30, "{appended} appended before {error}");
    assert!(matches!(error, StorageError::Disk(_)), "{error}");
    let failures = store.commit_log().segment_stats().create_failures;
    assert!(failures >= 3, "{failures}");
    // The next appends fail without attempts (and log lines) of their own.
    for _ in 0..100 {
        let again = store.append(&message(&body), 2).unwrap_err();
        assert!(matches!(again, StorageError::NotWritable { .. }), "{again}");
    }
    assert_eq!(store.commit_log().segment_stats().create_failures, failures);
}

const HOUR_MS: u64 = 3_600_000;
/// Day 1000 of the epoch, 01:00 UTC.
const T0: u64 = 1_000 * 24 * HOUR_MS + HOUR_MS;

fn retention_config() -> StoreConfig {
    let mut config = config(FlushMode::Async);
    config.retention.file_reserved_time_hours = 1;
    // These tests are about what goes, not how fast: no spacing (the
    // one-at-a-time rule still holds; its own test spaces).
    config.retention.delete_commit_log_files_interval_ms = 0;
    config.clean_resource_interval_ms = 1_000;
    config.index_geometry = IndexGeometry {
        hash_slot_count: 64,
        entry_count_max: 100,
    };
    config
}

/// Appends 1 KiB messages at `now_ms` until the CommitLog has
/// `segments` segments in use, then lets everything become durable.
fn fill_segments(store: &mut Store<SimDisk>, segments: u64, now_ms: u64) -> Vec<AppendTicket> {
    let body = vec![7u8; 1_000];
    let mut acks = Vec::new();
    let mut tickets = Vec::new();
    let size = store.config().segment_size_bytes;
    let mut at_ms = now_ms;
    while store.commit_log().encoded_offset() < (segments - 1) * size + size / 4 {
        let keys = format!("TAGS\x01A\x02KEYS\x01k{}\x02", tickets.len());
        let mut m = message(&body);
        m.properties = keys.as_bytes();
        tickets.push(store.append(&m, at_ms).unwrap());
        store.poll(at_ms, &mut acks).unwrap();
        at_ms += 1;
    }
    settle(store, at_ms, &mut acks);
    tickets
}

/// Polls `turns` times at `now_ms`, and once a second of fake time
/// later so that space checks and retention runs are due.
fn turns(store: &mut Store<SimDisk>, now_ms: u64, turns: usize) {
    let mut acks = Vec::new();
    for _ in 0..turns {
        store.poll(now_ms, &mut acks).unwrap();
    }
    settle(store, now_ms, &mut acks);
}

#[test]
fn retention_set_while_the_store_runs_plans_the_next_run() {
    let mut config = retention_config();
    // Nothing expires within these tests' hours, and never at this hour.
    config.retention.file_reserved_time_hours = 1_000;
    config.retention.delete_when_hours = vec![23];
    let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(23)), config, T0).unwrap();
    fill_segments(&mut store, 5, T0);
    let later = T0 + 3 * HOUR_MS;
    turns(&mut store, later, 50);
    assert_eq!(
        store.retention_stats().segments_removed,
        0,
        "kept for 1,000 h"
    );
    let mut retention = store.retention().clone();
    retention.file_reserved_time_hours = 1;
    retention.delete_when_hours = vec![4];
    store.set_retention(retention);
    assert_eq!(store.retention().file_reserved_time_hours, 1);
    for step in 0..50 {
        turns(&mut store, later + 1_000 + step * 100, 4);
    }
    let removed = store.retention_stats().segments_removed;
    assert!(
        removed >= 3,
        "only {removed} expired segments went at 04:00"
    );
}

#[test]
fn a_plan_removes_its_segments_one_at_a_time_spaced_by_the_interval() {
    let mut config = retention_config();
    config.retention.delete_commit_log_files_interval_ms = 100;
    let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(22)), config, T0).unwrap();
    fill_segments(&mut store, 5, T0);
    let mut acks = Vec::new();
    let at_delete_when = T0 + 3 * HOUR_MS;
    let mut removed = Vec::new();
    // 04:00, then turns 10 ms apart for a second.
    for step in 0..100 {
        store.poll(at_delete_when + step * 10, &mut acks).unwrap();
        assert!(
            store.commit_log().removals_in_flight() <= 1,
            "two segment removals in flight at step {step}"
        );
        removed.push(store.retention_stats().segments_removed);
    }
    let total = *removed.last().unwrap();
    assert!(total >= 3, "only {total} segments went in a second");
    // At most one removal starts per 100 ms (10 turns).
    for window in removed.windows(10) {
        assert!(
            window[9] - window[0] <= 1,
            "more than one removal within 100 ms: {removed:?}"
        );
    }
    settle(&mut store, at_delete_when + 1_000, &mut acks);
}

fn shrinking_config() -> StoreConfig {
    let mut config = retention_config();
    config.commit_log_recycle_segments = 0;
    config.commit_log_remove_step_bytes = config.segment_size_bytes / 4;
    config
}

fn removing_files(image: &SimImage) -> Vec<(PathBuf, u64)> {
    image
        .files
        .iter()
        .filter(|(path, _)| {
            path.file_name()
                .and_then(|n| n.to_str())
                .and_then(commit_log::segment::parse_removing_file_name)
                .is_some()
        })
        .map(|(path, bytes)| (path.clone(), bytes.len() as u64))
        .collect()
}

#[test]
fn an_unlinked_segment_is_renamed_and_shrunk_in_steps_first() {
    let config = shrinking_config();
    let size = config.segment_size_bytes;
    let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(41)), config, T0).unwrap();
    fill_segments(&mut store, 5, T0);
    let dir = PathBuf::from("/s/commitlog/0");
    let mut acks = Vec::new();
    let mut lengths_seen = std::collections::BTreeSet::new();
    for _ in 0..400 {
        store.poll(T0 + 3 * HOUR_MS, &mut acks).unwrap();
        let image = store.disk().snapshot();
        for (path, len) in removing_files(&image) {
            assert!(len <= size && len % (size / 4) == 0, "{path:?}: {len}");
            // Never under both names.
            let base = commit_log::segment::parse_removing_file_name(
                path.file_name().unwrap().to_str().unwrap(),
            )
            .unwrap();
            assert!(
                !image
                    .files
                    .contains_key(&dir.join(commit_log::segment::segment_file_name(base)))
            );
            lengths_seen.insert(len);
        }
    }
    settle(&mut store, T0 + 3 * HOUR_MS, &mut acks);
    let removed = store.retention_stats().segments_removed;
    assert!(removed >= 3, "only {removed} segments removed");
    assert_eq!(store.commit_log().removals_in_flight(), 0);
    // Four steps each (3/4, 1/2, 1/4, 0 of the segment), then the unlink.
    assert_eq!(
        store.commit_log().segment_stats().removal_steps,
        4 * removed
    );
    assert!(
        lengths_seen.len() > 1,
        "no intermediate length seen: {lengths_seen:?}"
    );
    let image = store.disk().snapshot();
    assert!(removing_files(&image).is_empty());
    for base in (0..store.commit_log_min_offset()).step_by(size as usize) {
        assert!(
            !image
                .files
                .contains_key(&dir.join(commit_log::segment::segment_file_name(base)))
        );
    }
}

#[test]
fn a_crash_while_a_segment_is_shrunk_leaves_a_store_that_opens() {
    let config = shrinking_config();
    let size = config.segment_size_bytes;
    let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(42)), config, T0).unwrap();
    fill_segments(&mut store, 5, T0);
    let mut acks = Vec::new();
    let mut cut = false;
    for _ in 0..400 {
        store.poll(T0 + 3 * HOUR_MS, &mut acks).unwrap();
        let image = store.disk().durable_image();
        if removing_files(&image)
            .iter()
            .any(|(_, len)| *len > 0 && *len < size)
        {
            cut = true;
            break;
        }
    }
    assert!(cut, "never saw a segment half shrunk");
    let log_min = store.commit_log_min_offset();
    for kind in [CrashKind::ProcessKill, CrashKind::PowerLoss] {
        let disk = store.disk_mut().crash(kind);
        let (reopened, report) = Store::open(disk, shrinking_config(), T0 + 4 * HOUR_MS).unwrap();
        assert!(report.abnormal);
        assert!(removing_files(&reopened.disk().snapshot()).is_empty());
        // Segments removed before the cut stay removed; the one being
        // shrunk was below the min offset already.
        assert_eq!(reopened.commit_log_min_offset(), log_min);
    }
}

#[test]
fn an_operators_request_removes_expired_segments_outside_delete_when() {
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(23)), retention_config(), T0).unwrap();
    fill_segments(&mut store, 4, T0);
    let size = store.config().segment_size_bytes;
    // 02:00: within the reserved hour, asked for: nothing has expired.
    store.delete_expired_now();
    turns(&mut store, T0 + HOUR_MS / 2, 50);
    assert_eq!(store.commit_log_min_offset(), 0, "unexpired segments stay");
    // 03:00: expired, but deleteWhen is 04; the request above was used up.
    turns(&mut store, T0 + 2 * HOUR_MS, 50);
    assert_eq!(store.commit_log_min_offset(), 0, "nothing goes unasked");
    store.delete_expired_now();
    turns(&mut store, T0 + 2 * HOUR_MS + 2_000, 50);
    let active = store.commit_log().encoded_offset() / size * size;
    assert_eq!(
        store.commit_log_min_offset(),
        active,
        "every expired segment went"
    );
    assert_eq!(store.retention_stats().segments_removed, active / size);
}

#[test]
fn expired_segments_go_at_delete_when_and_never_the_active_one() {
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(21)), retention_config(), T0).unwrap();
    let tickets = fill_segments(&mut store, 5, T0);
    let size = store.config().segment_size_bytes;
    let segments_before = store.commit_log().segments().segments().len();
    assert!(segments_before >= 5);
    // Expired (reserved 1 h) at 03:00, but deleteWhen is 04.
    turns(&mut store, T0 + 2 * HOUR_MS, 50);
    assert_eq!(
        store.commit_log_min_offset(),
        0,
        "nothing goes before deleteWhen"
    );
    assert_eq!(store.retention_stats().segments_removed, 0);
    // 04:00: every segment before the active one goes.
    turns(&mut store, T0 + 3 * HOUR_MS, 50);
    let active = store.commit_log().encoded_offset() / size * size;
    assert_eq!(store.commit_log_min_offset(), active);
    assert_eq!(store.retention_stats().segments_removed, active / size);
    let image = store.disk().snapshot();
    let dir = PathBuf::from("/s/commitlog/0");
    for base in (0..active).step_by(size as usize) {
        assert!(
            !image
                .files
                .contains_key(&dir.join(commit_log::segment::segment_file_name(base))),
            "segment {base} still on disk"
        );
    }
    assert!(
        image
            .files
            .contains_key(&dir.join(commit_log::segment::segment_file_name(active)))
    );
    // Reads below the min: the ConsumeQueue min moved past the removed
    // records (OFFSET_TOO_SMALL), records above it are still found.
    let queue_min = store.queue_min_offset("T", 0);
    let first_kept = tickets
        .iter()
        .find(|t| t.commit_log_offset >= active)
        .unwrap();
    assert_eq!(queue_min, first_kept.queue_offset);
    let below = store.get_messages("T", 0, 0, 8, 1 << 20, None).unwrap();
    assert_eq!(below.status, GetMessageStatus::OffsetTooSmall);
    assert_eq!(below.next_begin_offset, queue_min);
    let kept = store
        .get_messages("T", 0, queue_min, 1, 1 << 20, None)
        .unwrap();
    assert_eq!(kept.status, GetMessageStatus::Found);
    assert_eq!(
        store.read_record(tickets[0].commit_log_offset).unwrap(),
        None
    );
    // Index files wholly below the new min are gone too.
    assert!(
        store.retention_stats().files_removed > 0,
        "{:?}",
        store.retention_stats()
    );
    assert!(
        store
            .query_message("T", "k0", 10, 0, i64::MAX)
            .phy_offsets
            .is_empty()
    );
    let last_key = format!("k{}", tickets.len() - 1);
    let found = store.query_message("T", &last_key, 10, 0, i64::MAX);
    assert_eq!(
        found.phy_offsets,
        vec![tickets[tickets.len() - 1].commit_log_offset]
    );
}

#[test]
fn a_restart_after_deletion_recovers_with_the_new_min_offsets() {
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(22)), retention_config(), T0).unwrap();
    fill_segments(&mut store, 4, T0);
    turns(&mut store, T0 + 3 * HOUR_MS, 50);
    let log_min = store.commit_log_min_offset();
    let queue_min = store.queue_min_offset("T", 0);
    let queue_max = store.queue_max_offset("T", 0);
    assert!(log_min > 0 && queue_min > 0);
    let mut acks = Vec::new();
    let disk = store.shutdown(T0 + 3 * HOUR_MS, &mut acks).unwrap();
    let (mut store, report) = Store::open(disk, retention_config(), T0 + 4 * HOUR_MS).unwrap();
    assert!(!report.abnormal);
    assert_eq!(store.commit_log_min_offset(), log_min);
    assert_eq!(store.queue_min_offset("T", 0), queue_min);
    assert_eq!(store.queue_max_offset("T", 0), queue_max);
    // After a crash (abnormal recovery rebuilds the queues from the
    // CommitLog that is left) the same.
    let disk = store.disk_mut().crash(CrashKind::ProcessKill);
    let (mut store, report) = Store::open(disk, retention_config(), T0 + 5 * HOUR_MS).unwrap();
    assert!(report.abnormal);
    assert_eq!(store.commit_log_min_offset(), log_min);
    assert_eq!(store.queue_min_offset("T", 0), queue_min);
    assert_eq!(store.queue_max_offset("T", 0), queue_max);
    let below = store
        .get_messages("T", 0, queue_min - 1, 8, 1 << 20, None)
        .unwrap();
    assert_eq!(below.status, GetMessageStatus::OffsetTooSmall);
    let kept = store
        .get_messages("T", 0, queue_min, 8, 1 << 20, None)
        .unwrap();
    assert_eq!(kept.status, GetMessageStatus::Found);
}

#[test]
fn a_queue_whose_records_were_all_removed_keeps_its_offsets_through_a_crash() {
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(24)), retention_config(), T0).unwrap();
    let body = vec![5u8; 100];
    let mut early = message(&body);
    early.queue_id = 1;
    for i in 0..5 {
        store.append(&early, T0 + i).unwrap();
    }
    fill_segments(&mut store, 4, T0 + 10);
    turns(&mut store, T0 + 3 * HOUR_MS, 50);
    assert!(store.commit_log_min_offset() > 0);
    assert_eq!(
        store.queue_min_offset("T", 1),
        5,
        "all of queue 1 is removed"
    );
    assert_eq!(store.queue_max_offset("T", 1), 5);
    let disk = store.disk_mut().crash(CrashKind::ProcessKill);
    let (mut store, report) = Store::open(disk, retention_config(), T0 + 4 * HOUR_MS).unwrap();
    assert!(report.abnormal);
    assert_eq!(store.queue_max_offset("T", 1), 5);
    let ticket = store.append(&early, T0 + 4 * HOUR_MS).unwrap();
    assert_eq!(ticket.queue_offset, 5, "queue offsets never go back");
    let mut acks = Vec::new();
    settle(&mut store, T0 + 4 * HOUR_MS, &mut acks);
    // And through a clean restart after that.
    let disk = store.shutdown(T0 + 4 * HOUR_MS, &mut acks).unwrap();
    let (store, _) = Store::open(disk, retention_config(), T0 + 5 * HOUR_MS).unwrap();
    assert_eq!(store.queue_max_offset("T", 1), 6);
}

#[test]
fn a_nearly_full_disk_refuses_appends_cleans_forcibly_and_accepts_again() {
    let mut sim = SimConfig::new(23);
    // Room for about ten segments with everything else.
    sim.capacity_bytes = 10 * COMMIT_LOG_SEGMENT_SIZE_MIN + 64 * 1024;
    let mut config = retention_config();
    config.retention.file_reserved_time_hours = 72;
    let (mut store, _) = Store::open(SimDisk::new(sim), config, T0).unwrap();
    let body = vec![3u8; 1_000];
    let mut acks = Vec::new();
    let mut now_ms = T0;
    let mut refused = None;
    for _ in 0..2_000 {
        now_ms += 100;
        match store.append(&message(&body), now_ms) {
            Ok(_) => {}
            Err(error) => {
                refused = Some(error);
                break;
            }
        }
        store.poll(now_ms, &mut acks).unwrap();
    }
    let refused = refused.expect("appends are refused once the disk is nearly full");
    assert!(
        matches!(refused, StorageError::DiskFull { .. }),
        "{refused}"
    );
    assert!(refused.is_retriable());
    assert!(store.disk_usage_ratio() > 0.85);
    // Segments are young (72 h reserved) and it is not 04:00: only the
    // forced cleaning can free space.
    let min_before = store.commit_log_min_offset();
    for _ in 0..20 {
        now_ms += 1_000;
        turns(&mut store, now_ms, 20);
    }
    assert!(
        store.commit_log_min_offset() > min_before,
        "forced cleaning removed segments"
    );
    assert_eq!(
        store.commit_log().segment_stats().spared,
        0,
        "a disk over diskMaxUsedSpaceRatio gets its space back: no spares"
    );
    assert!(
        store.disk_usage_ratio() <= 0.85,
        "{}",
        store.disk_usage_ratio()
    );
    store
        .append(&message(&body), now_ms)
        .expect("appends are accepted again");
    settle(&mut store, now_ms, &mut acks);
}

#[test]
fn forced_cleaning_after_a_crash_keeps_the_segment_recovery_fenced_off() {
    // A disk above diskSpaceCleanForciblyRatio (85 %), mostly with files
    // that are not ours: retention ignores age and removes every segment
    // but the last. After a crash the appends go on in a fresh segment,
    // and the one recovery fenced off holds every message from before it.
    let mut sim = SimConfig::new(26);
    sim.capacity_bytes = 100 * COMMIT_LOG_SEGMENT_SIZE_MIN;
    let mut config = retention_config();
    config.retention.file_reserved_time_hours = 72;
    let size = config.segment_size_bytes;
    let (mut store, _) = Store::open(SimDisk::new(sim), config.clone(), T0).unwrap();
    let mut acks = Vec::new();
    for at_ms in 0..3 {
        store.append(&message(b"before"), T0 + at_ms).unwrap();
    }
    settle(&mut store, T0 + 3, &mut acks);
    let disk = store.disk_mut().crash(CrashKind::ProcessKill);
    let (mut store, report) = Store::open(disk, config, T0 + 1_000).unwrap();
    assert!(report.abnormal);
    assert_eq!(
        store.commit_log().appender().active_segment_base(),
        size,
        "appends go on in a fresh segment"
    );
    // Someone else's file takes the disk to 87 %.
    let capacity = 100 * COMMIT_LOG_SEGMENT_SIZE_MIN;
    let others = capacity * 87 / 100 - store.disk().used_bytes();
    let options = OpenOptions {
        create_preallocated: Some(others),
        sparse: false,
        direct: false,
        writable: true,
    };
    let file = store
        .disk_mut()
        .open(Path::new("/others"), options)
        .unwrap();
    store.disk_mut().close(file).unwrap();
    let mut now_ms = T0 + 1_000;
    for _ in 0..5 {
        now_ms += 1_000;
        turns(&mut store, now_ms, 20);
    }
    let ratio = store.disk_usage_ratio();
    assert!(
        ratio > store.config().retention.clean_forcibly_ratio()
            && ratio <= store.config().retention.warning_level_ratio(),
        "the disk is above the clean-forcibly ratio and below the warning level: {ratio}"
    );
    assert_eq!(store.commit_log_min_offset(), 0, "the fenced segment went");
    let found = store.get_messages("T", 0, 0, 8, 1 << 20, None).unwrap();
    assert_eq!(found.status, GetMessageStatus::Found);
    assert_eq!(found.records.len(), 3);
    // Once the fresh segment rolls over, the fenced one is an old segment
    // like any other, and forced cleaning takes it.
    let body = vec![5u8; 1_000];
    while store.commit_log().appender().active_segment_base() == size {
        now_ms += 1;
        store.append(&message(&body), now_ms).unwrap();
        store.poll(now_ms, &mut acks).unwrap();
    }
    settle(&mut store, now_ms, &mut acks);
    for _ in 0..5 {
        now_ms += 1_000;
        turns(&mut store, now_ms, 20);
    }
    assert!(
        store.commit_log_min_offset() >= size,
        "min offset {}",
        store.commit_log_min_offset()
    );
}

/// Two stores on disks of `seed` with the same records: one keeps them all
/// in its tail cache, the other none, so its pulls read them from the disk.
/// 1,200 messages over 4 queues in turn, bodies of 100 to 700 bytes, tag B
/// on every third; returns the stores and each queue's message count.
fn warm_and_cold_stores(seed: u64) -> (Store<SimDisk>, Store<SimDisk>, [u64; 4]) {
    let open = |tail_cache_bytes| {
        let mut config = config(FlushMode::Async);
        config.tail_cache_bytes = tail_cache_bytes;
        config.segment_size_bytes = 4 * COMMIT_LOG_SEGMENT_SIZE_MIN;
        Store::open(SimDisk::new(SimConfig::new(seed)), config, T0)
            .unwrap()
            .0
    };
    let (mut warm, mut cold) = (open(64 << 20), open(0));
    let mut acks = Vec::new();
    let mut counts = [0u64; 4];
    for n in 0..1_200u32 {
        let body = vec![n as u8; 100 + (n as usize * 53) % 600];
        let mut m = message(&body);
        m.queue_id = n % 4;
        if n % 3 == 0 {
            m.properties = b"TAGS\x01B\x02";
        }
        for store in [&mut warm, &mut cold] {
            store.append(&m, T0).unwrap();
            store.poll(T0, &mut acks).unwrap();
        }
        counts[(n % 4) as usize] += 1;
    }
    settle(&mut warm, T0, &mut acks);
    settle(&mut cold, T0, &mut acks);
    (warm, cold, counts)
}

#[test]
fn a_pull_of_records_the_tail_cache_no_longer_holds_reads_neighbours_together() {
    let (mut warm, mut cold, counts) = warm_and_cold_stores(12);
    assert!(cold.commit_log().encoded_offset() > 2 * cold.config().segment_size_bytes);
    let tag_b = [ringmq_protocol::message::tags_code(Some("B")) as i32];
    for queue_id in 0..4u32 {
        let mut offset = 0;
        let mut pulled = 0;
        while offset < counts[queue_id as usize] {
            let before = cold.disk().read_count();
            let found = cold
                .get_messages("T", queue_id, offset, 32, 1 << 20, None)
                .unwrap();
            let reads = cold.disk().read_count() - before;
            let expected = warm
                .get_messages("T", queue_id, offset, 32, 1 << 20, None)
                .unwrap();
            assert_eq!(found, expected, "queue {queue_id} at {offset}");
            // 32 records of 4 queues in turn lie within about 64 KiB: one
            // read, or two where a segment ends between them.
            assert!(reads <= 2, "queue {queue_id} at {offset}: {reads} reads");
            pulled += found.records.len() as u64;
            offset = found.next_begin_offset;
        }
        assert_eq!(pulled, counts[queue_id as usize]);
        // A tag filter and a byte budget take the same records either way.
        for (offset, count, bytes) in [(5, 20, 3_000), (0, 256, 1 << 20), (100, 7, 1)] {
            let filter = Some(&tag_b[..]);
            let found = cold
                .get_messages("T", queue_id, offset, count, bytes, filter)
                .unwrap();
            let expected = warm
                .get_messages("T", queue_id, offset, count, bytes, filter)
                .unwrap();
            assert_eq!(found, expected, "queue {queue_id} at {offset}, filtered");
            assert!(!found.records.is_empty());
        }
    }
}

/// Polls `store` as its owner would until its background read `ticket` is
/// done.
fn await_span_read(store: &mut Store<SimDisk>, ticket: u64) {
    let (mut acks, mut done) = (Vec::new(), Vec::new());
    for _ in 0..1_000 {
        store
            .poll_wait(T0, std::time::Duration::ZERO, &mut acks)
            .unwrap();
        store.take_span_reads(&mut done);
        if done.contains(&ticket) {
            return;
        }
    }
    panic!("background read {ticket} never completed");
}

/// A pull as the broker runs it: in the background, then executed again
/// once its read is done. Returns the answer and whether it waited for a
/// read.
fn pull_in_background(
    store: &mut Store<SimDisk>,
    queue_id: u32,
    offset: u64,
    tag_filter: Option<&[i32]>,
) -> (GetMessagesResult, bool) {
    let pull = |store: &mut Store<SimDisk>, read| {
        store
            .pull_messages("T", queue_id, offset, 32, 1 << 20, tag_filter, read)
            .unwrap()
    };
    let ticket = match pull(store, PullRead::Background) {
        Pulled::Ready(result) => return (result, false),
        Pulled::Reading(ticket) => ticket,
    };
    await_span_read(store, ticket);
    let reads = store.disk().read_count();
    let Pulled::Ready(result) = pull(store, PullRead::AfterRead) else {
        panic!("a pull executed again after its read reads again");
    };
    assert_eq!(
        store.disk().read_count(),
        reads,
        "served from the span read"
    );
    (result, true)
}

/// A store without a tail cache holding `count` records of about 1 KiB
/// over queues 0 to 3 in turn, in 4 MiB segments.
fn interleaved_cold_store(seed: u64, count: u32) -> Store<SimDisk> {
    let mut config = config(FlushMode::Async);
    config.tail_cache_bytes = 0;
    config.segment_size_bytes = 4 << 20;
    let mut store = Store::open(SimDisk::new(SimConfig::new(seed)), config, T0)
        .unwrap()
        .0;
    let mut acks = Vec::new();
    for n in 0..count {
        let body = vec![n as u8; 900 + (n as usize * 37) % 200];
        let mut m = message(&body);
        m.queue_id = n % 4;
        store.append(&m, T0).unwrap();
        store.poll(T0, &mut acks).unwrap();
    }
    settle(&mut store, T0, &mut acks);
    store
}

#[test]
fn pulls_share_the_read_of_their_window_and_a_consumer_catching_up_is_read_ahead_of() {
    let mut cold = interleaved_cold_store(21, 4_000);
    assert!(cold.commit_log().encoded_offset() > 3 * PULL_READ_WINDOW_BYTES as u64);
    let pull = |store: &mut Store<SimDisk>, queue_id, offset, read| {
        store
            .pull_messages("T", queue_id, offset, 32, 1 << 20, None, read)
            .unwrap()
    };
    // Queues 0 and 1 start in the same window: one read for both.
    let Pulled::Reading(ticket) = pull(&mut cold, 0, 0, PullRead::Background) else {
        panic!("nothing is in memory");
    };
    let Pulled::Reading(shared) = pull(&mut cold, 1, 0, PullRead::Background) else {
        panic!("nothing is in memory");
    };
    assert_eq!(shared, ticket, "the read in flight is shared");
    await_span_read(&mut cold, ticket);
    let reads = cold.disk().read_count();
    for queue_id in 0..2 {
        let Pulled::Ready(found) = pull(&mut cold, queue_id, 0, PullRead::AfterRead) else {
            panic!("queue {queue_id} read again");
        };
        assert_eq!(found.records.len(), 32, "queue {queue_id}");
    }
    assert_eq!(
        cold.disk().read_count(),
        reads,
        "both served from the one read"
    );

    // A consumer of queue 2 goes through the log with a pull in the
    // background at a time, the store polled between them as a shard
    // polls it: it waits for the first window only, the next ones are read
    // ahead of it.
    let mut acks = Vec::new();
    let (mut offset, mut waited_at, mut pulled) = (0, Vec::new(), 0);
    let max = cold.queue_max_offset("T", 2);
    while offset < max {
        let found = match pull(&mut cold, 2, offset, PullRead::Background) {
            Pulled::Ready(found) => found,
            Pulled::Reading(ticket) => {
                waited_at.push(offset);
                await_span_read(&mut cold, ticket);
                let Pulled::Ready(found) = pull(&mut cold, 2, offset, PullRead::AfterRead) else {
                    panic!("read again at {offset}");
                };
                found
            }
        };
        pulled += found.records.len() as u64;
        offset = found.next_begin_offset;
        for _ in 0..20 {
            cold.poll_wait(T0, std::time::Duration::ZERO, &mut acks)
                .unwrap();
        }
    }
    assert_eq!(pulled, max, "every record of queue 2");
    assert_eq!(
        waited_at,
        Vec::<u64>::new(),
        "queue 2's first window was read for queues 0 and 1, the others ahead"
    );
}

/// `Store::record_at` as the broker runs it: in the background, then
/// again once its read is done. Returns the record and whether it waited
/// for a read.
fn record_in_background(store: &mut Store<SimDisk>, offset: u64) -> (Option<Vec<u8>>, bool) {
    let ticket = match store.record_at(offset, PullRead::Background).unwrap() {
        RecordRead::Ready(record) => return (record, false),
        RecordRead::Reading(ticket) => ticket,
    };
    await_span_read(store, ticket);
    match store.record_at(offset, PullRead::AfterRead).unwrap() {
        RecordRead::Ready(record) => (record, true),
        RecordRead::Reading(_) => panic!("a record asked again after its read is read again"),
    }
}

#[test]
fn records_by_offset_are_read_in_the_background_with_their_neighbours() {
    let (mut warm, mut cold, counts) = warm_and_cold_stores(14);
    let all = warm
        .get_messages("T", 1, 0, counts[1] as usize, usize::MAX, None)
        .unwrap();
    assert!(all.records.len() > 200, "{}", all.records.len());
    let (mut waited, before) = (0, cold.disk().read_count());
    for found in &all.records {
        let offset = found.commit_log_offset;
        let (record, read) = record_in_background(&mut cold, offset);
        assert_eq!(record, warm.read_record(offset).unwrap(), "at {offset}");
        assert_eq!(record.as_deref(), Some(&all.body[found.range.clone()]));
        waited += usize::from(read);
    }
    // One read brings a record and the next ones up to 64 KiB on: the
    // queue's records (every fourth of the log, about 500 bytes each) took
    // a few dozen reads, and nothing was read twice.
    assert!(
        waited > 0 && waited * 8 < all.records.len(),
        "{waited} reads"
    );
    assert_eq!(cold.disk().read_count() - before, waited as u64);
    // Past the acknowledgeable end: nothing, at once.
    let end = shard_offset(0, cold.commit_log().appender().ack_position());
    assert_eq!(
        cold.record_at(end, PullRead::Background).unwrap(),
        RecordRead::Ready(None)
    );
}

#[test]
fn a_record_larger_than_the_background_read_comes_whole() {
    let mut uncached = config(FlushMode::Async);
    uncached.tail_cache_bytes = 0;
    uncached.segment_size_bytes = 4 << 20;
    let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(15)), uncached, T0).unwrap();
    let mut acks = Vec::new();
    let big = vec![7u8; RECORD_READ_SPAN_BYTES * 2];
    let mut offsets = Vec::new();
    for body in [&b"small"[..], &big, &b"after"[..]] {
        let ticket = store.append(&message(body), T0).unwrap();
        offsets.push(ticket.commit_log_offset);
        store.poll(T0, &mut acks).unwrap();
    }
    settle(&mut store, T0, &mut acks);
    // Fill on until the three are out of the write buffers.
    fill_until(&mut store, 3 * WRITE_BUFFER_SIZE as u64, T0, |n| n as u8);
    let (record, read) = record_in_background(&mut store, offsets[1]);
    assert!(read);
    let record = record.unwrap();
    let view = decode_record(&record, CrcCheck::Verify).unwrap();
    assert_eq!(view.body(), &big[..]);
}

#[test]
fn a_failed_background_read_leaves_the_request_to_a_synchronous_read() {
    // Two stores with the same records; the twin answers synchronously.
    let (mut store, mut twin) = (uncached_four_segments(16), uncached_four_segments(16));
    // A replica chunk: its background read fails (EIO), caches nothing,
    // and still comes back; asked again, the chunk is read synchronously.
    let next = store.disk().read_count() + 1;
    store.disk_mut().faults_mut().read_eio_nth = Some(next);
    let ReplicaChunk::Reading(ticket) =
        store.replica_chunk(0, 5_000, PullRead::Background).unwrap()
    else {
        panic!("the log's start is not in memory");
    };
    await_span_read(&mut store, ticket);
    assert!(!store.commit_log().is_cached(shard_offset(0, 0), 1));
    let chunk = store.replica_chunk(0, 5_000, PullRead::AfterRead).unwrap();
    assert_eq!(chunk, twin.replica_chunk(0, 5_000, PullRead::Sync).unwrap());
    assert!(matches!(&chunk, ReplicaChunk::Bytes(bytes) if !bytes.is_empty()));
    // A record by its offset likewise.
    let offset = shard_offset(0, 2 * store.config().segment_size_bytes);
    let next = store.disk().read_count() + 1;
    store.disk_mut().faults_mut().read_eio_nth = Some(next);
    let RecordRead::Reading(ticket) = store.record_at(offset, PullRead::Background).unwrap() else {
        panic!("the record is not in memory");
    };
    await_span_read(&mut store, ticket);
    let record = store.record_at(offset, PullRead::AfterRead).unwrap();
    assert_eq!(record, RecordRead::Ready(twin.read_record(offset).unwrap()));
    assert!(matches!(record, RecordRead::Ready(Some(_))));
}

#[test]
fn a_pull_in_the_background_gets_what_a_synchronous_one_gets() {
    let (mut warm, mut cold, _) = warm_and_cold_stores(13);
    let tag_b = [ringmq_protocol::message::tags_code(Some("B")) as i32];
    for filter in [None, Some(&tag_b[..])] {
        for queue_id in 0..4u32 {
            let everything = warm
                .get_messages("T", queue_id, 0, 256, 64 << 20, filter)
                .unwrap();
            let max = everything.max_offset;
            let mut records = Vec::new();
            let (mut offset, mut waited) = (0, 0);
            while offset < max {
                let (found, read) = pull_in_background(&mut cold, queue_id, offset, filter);
                waited += u32::from(read);
                for record in &found.records {
                    records.push((
                        record.queue_offset,
                        found.body[record.range.clone()].to_vec(),
                    ));
                }
                assert!(found.next_begin_offset > offset);
                offset = found.next_begin_offset;
            }
            let mut expected = Vec::new();
            let mut offset = 0;
            while offset < max {
                let found = warm
                    .get_messages("T", queue_id, offset, 256, 64 << 20, filter)
                    .unwrap();
                for record in &found.records {
                    expected.push((
                        record.queue_offset,
                        found.body[record.range.clone()].to_vec(),
                    ));
                }
                offset = found.next_begin_offset;
            }
            assert_eq!(records, expected, "queue {queue_id}, filter {filter:?}");
            // The first queue's pulls read each window that holds every
            // queue's records (or had it read ahead), and the cache holds
            // them all: the other queues and the second pass wait for none.
            assert_eq!(
                waited > 0,
                filter.is_none() && queue_id == 0,
                "queue {queue_id}, filter {filter:?}: {waited} pulls waited"
            );
        }
    }
}

#[test]
fn get_messages_reports_rocketmq_statuses_at_the_edges() {
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(6)), config(FlushMode::Async), 0).unwrap();
    let none = store.get_messages("T", 0, 0, 8, 1 << 20, None).unwrap();
    assert_eq!(none.status, GetMessageStatus::NoMatchedLogicQueue);
    for i in 0..3 {
        store.append(&message(b"m"), i).unwrap();
    }
    let mut acks = Vec::new();
    settle(&mut store, 10, &mut acks);
    let found = store.get_messages("T", 0, 1, 8, 1 << 20, None).unwrap();
    assert_eq!(found.status, GetMessageStatus::Found);
    assert_eq!(found.records.len(), 2);
    assert_eq!(found.next_begin_offset, 3);
    assert_eq!(
        store
            .get_messages("T", 0, 3, 8, 1 << 20, None)
            .unwrap()
            .status,
        GetMessageStatus::OffsetOverflowOne
    );
    let badly = store.get_messages("T", 0, 9, 8, 1 << 20, None).unwrap();
    assert_eq!(badly.status, GetMessageStatus::OffsetOverflowBadly);
    assert_eq!(badly.next_begin_offset, 0);
    let other_tag = [ringmq_protocol::message::java_string_hash_code("B")];
    let filtered = store
        .get_messages("T", 0, 0, 8, 1 << 20, Some(&other_tag))
        .unwrap();
    assert_eq!(filtered.status, GetMessageStatus::NoMatchedMessage);
    assert_eq!(filtered.next_begin_offset, 3);
}

/// Polls at `from_ms`, `from_ms + 50`, ... up to `to_ms` (ConsumeQueue
/// flushes and checkpoints run on their intervals).
fn run_until(store: &mut Store<SimDisk>, from_ms: u64, to_ms: u64) {
    let mut acks = Vec::new();
    let mut now_ms = from_ms;
    while now_ms <= to_ms {
        for _ in 0..5 {
            store
                .poll_wait(now_ms, std::time::Duration::ZERO, &mut acks)
                .unwrap();
        }
        now_ms += 50;
    }
}

fn queue_paths(store: &Store<SimDisk>, topic: &str) -> Vec<PathBuf> {
    let dir = store
        .config()
        .consume_queue_root
        .join(crate::consume_queue::CQ_DIR_NAME)
        .join(topic);
    let image = store.disk().snapshot();
    image
        .dirs
        .into_iter()
        .chain(image.files.into_keys())
        .filter(|p| p.starts_with(&dir))
        .collect()
}

fn bodies(store: &mut Store<SimDisk>, topic: &str, queue_id: u32) -> Vec<Vec<u8>> {
    bodies_from(store, topic, queue_id, 0)
}

/// The bodies of one read (up to 32) from queue offset `offset`.
fn bodies_from(
    store: &mut Store<SimDisk>,
    topic: &str,
    queue_id: u32,
    offset: u64,
) -> Vec<Vec<u8>> {
    let found = store
        .get_messages(topic, queue_id, offset, 32, 1 << 20, None)
        .unwrap();
    found
        .records
        .iter()
        .map(|r| {
            decode_record(&found.body[r.range.clone()], CrcCheck::Skip)
                .unwrap()
                .body()
                .to_vec()
        })
        .collect()
}

/// T/0 gets "old-0..2", U/1 gets "u-0..1"; everything flushed and
/// checkpointed by `T0 + 2_000`.
fn two_topics(seed: u64) -> Store<SimDisk> {
    let (mut store, _) = Store::open(
        SimDisk::new(SimConfig::new(seed)),
        config(FlushMode::Async),
        0,
    )
    .unwrap();
    for i in 0..3 {
        store
            .append(&message(format!("old-{i}").as_bytes()), 1)
            .unwrap();
    }
    for i in 0..2 {
        let body = format!("u-{i}");
        let mut m = message(body.as_bytes());
        m.topic = "U";
        m.queue_id = 1;
        store.append(&m, 1).unwrap();
    }
    run_until(&mut store, 10, 2_000);
    assert!(store.consume_queues().is_clean());
    assert!(!queue_paths(&store, "T").is_empty());
    store
}

#[test]
fn a_deleted_topic_is_gone_and_starts_again_at_queue_offset_zero_across_a_restart() {
    let mut store = two_topics(40);
    assert_eq!(store.delete_topic("T").unwrap(), 1);
    assert_eq!(queue_paths(&store, "T"), Vec::<PathBuf>::new());
    let gone = store.get_messages("T", 0, 0, 8, 1 << 20, None).unwrap();
    assert_eq!(gone.status, GetMessageStatus::NoMatchedLogicQueue);
    assert_eq!(store.queue_max_offset("T", 0), 0);
    assert_eq!(
        bodies(&mut store, "U", 1),
        [b"u-0".to_vec(), b"u-1".to_vec()]
    );
    let ticket = store.append(&message(b"new-0"), 2_100).unwrap();
    assert_eq!(ticket.queue_offset, 0);
    run_until(&mut store, 2_100, 3_000);
    assert_eq!(bodies(&mut store, "T", 0), [b"new-0".to_vec()]);
    let mut acks = Vec::new();
    let disk = store.shutdown(3_000, &mut acks).unwrap();
    let (mut store, report) = Store::open(disk, config(FlushMode::Async), 4_000).unwrap();
    assert!(!report.abnormal);
    assert_eq!(store.queue_max_offset("T", 0), 1);
    assert_eq!(bodies(&mut store, "T", 0), [b"new-0".to_vec()]);
    assert_eq!(
        bodies(&mut store, "U", 1),
        [b"u-0".to_vec(), b"u-1".to_vec()]
    );
    assert_eq!(store.commit_log().max_offset(), report.recovery.scan.end);
}

#[test]
fn a_clean_restart_does_not_bring_back_a_deleted_topic_from_the_commit_log() {
    // With or without an older topic left, T's records must not re-create
    // its queue (the restart scans from the checkpoint's durable points,
    // at the end; before the twenty-third session from the older topic's
    // last record, or from the start without one).
    for older_topic in [false, true] {
        let (mut store, _) = Store::open(
            SimDisk::new(SimConfig::new(41)),
            config(FlushMode::Async),
            0,
        )
        .unwrap();
        if older_topic {
            let mut m = message(b"u-0");
            m.topic = "U";
            store.append(&m, 1).unwrap();
        }
        for i in 0..3 {
            store
                .append(&message(format!("old-{i}").as_bytes()), 1)
                .unwrap();
        }
        run_until(&mut store, 10, 2_000);
        assert_eq!(store.delete_topic("T").unwrap(), 1);
        let mut acks = Vec::new();
        let disk = store.shutdown(2_000, &mut acks).unwrap();
        let (mut store, report) = Store::open(disk, config(FlushMode::Async), 3_000).unwrap();
        assert!(!report.abnormal);
        assert_eq!(report.redispatched, 0, "older topic {older_topic}");
        assert!(store.consume_queues().get("T", 0).is_none());
        assert_eq!(store.consume_queues().len(), usize::from(older_topic));
        assert_eq!(queue_paths(&store, "T"), Vec::<PathBuf>::new());
        if older_topic {
            assert_eq!(bodies(&mut store, "U", 0), [b"u-0".to_vec()]);
        }
    }
}

#[test]
fn a_clean_restart_scans_from_the_checkpoint_not_from_a_quiet_queue_or_an_empty_index() {
    let (mut store, _) = Store::open(
        SimDisk::new(SimConfig::new(43)),
        config(FlushMode::Async),
        0,
    )
    .unwrap();
    // A quiet queue's only record comes first; no record has keys, so the
    // index holds nothing.
    let mut quiet = message(b"quiet");
    quiet.topic = "U";
    store.append(&quiet, 1).unwrap();
    for i in 0..50 {
        store
            .append(&message(format!("m-{i}").as_bytes()), 1)
            .unwrap();
    }
    run_until(&mut store, 10, 2_000);
    let mut acks = Vec::new();
    let disk = store.shutdown(2_000, &mut acks).unwrap();
    let (mut store, report) = Store::open(disk, config(FlushMode::Async), 3_000).unwrap();
    assert!(!report.abnormal);
    assert_eq!(
        report.recovery.scan.record_count, 0,
        "a clean restart read records back from {}",
        report.recovery.scanned_from
    );
    assert_eq!(bodies(&mut store, "U", 0), [b"quiet".to_vec()]);
    assert_eq!(store.consume_queues().get("T", 0).unwrap().max_offset(), 50);
    assert_eq!(bodies(&mut store, "T", 0)[0], b"m-0");
    // Appends go on after the last record.
    let ticket = store.append(&message(b"after"), 3_000).unwrap();
    assert_eq!(ticket.queue_offset, 50);
    run_until(&mut store, 3_010, 5_000);
    assert_eq!(bodies_from(&mut store, "T", 0, 50), [b"after".to_vec()]);
}

#[test]
fn shutdown_finishes_many_queues_on_a_disk_that_completes_one_operation_per_poll() {
    // 400 queues each create, write and fdatasync a file: well over the 600
    // rounds shutdown allows without a completion, and a bound on all
    // rounds (as before) failed this shutdown although the disk never
    // stopped.
    const QUEUES: u32 = 400;
    let mut sim = SimConfig::new(43);
    sim.complete_percent = 0;
    let (mut store, _) = Store::open(SimDisk::new(sim), config(FlushMode::Async), 0).unwrap();
    for queue_id in 0..QUEUES {
        let mut m = message(b"x");
        m.queue_id = queue_id;
        store.append(&m, 1).unwrap();
    }
    let mut acks = Vec::new();
    let disk = store.shutdown(2, &mut acks).unwrap();
    assert_eq!(acks.len(), QUEUES as usize);
    assert!(acks.iter().all(|a| a.status == AckStatus::Ok));
    let (store, report) = Store::open(disk, config(FlushMode::Async), 3).unwrap();
    assert!(!report.abnormal);
    assert_eq!(report.redispatched, 0, "every queue was on disk");
    for queue_id in 0..QUEUES {
        let queue = store.consume_queues().get("T", queue_id).unwrap();
        assert_eq!(queue.max_offset(), 1, "queue {queue_id}");
    }
}

#[test]
fn a_crash_after_the_durable_point_passed_a_deletion_does_not_bring_the_topic_back() {
    let mut store = two_topics(42);
    assert_eq!(store.delete_topic("T").unwrap(), 1);
    store.append(&message(b"new-0"), 2_100).unwrap();
    run_until(&mut store, 2_100, 4_000);
    for kind in [CrashKind::ProcessKill, CrashKind::PowerLoss] {
        let disk = store.disk_mut().crash(kind);
        let (mut reopened, report) = Store::open(disk, config(FlushMode::Async), 5_000).unwrap();
        assert!(report.abnormal, "{kind:?}");
        assert!(!report.derived_rebuilt, "{kind:?}");
        assert_eq!(
            bodies(&mut reopened, "T", 0),
            [b"new-0".to_vec()],
            "{kind:?}"
        );
        assert_eq!(
            bodies(&mut reopened, "U", 1),
            [b"u-0".to_vec(), b"u-1".to_vec()],
            "{kind:?}"
        );
    }
}

#[test]
fn deleting_a_topic_with_consume_queue_writes_in_flight_is_safe() {
    let mut store = two_topics(43);
    for i in 3..6 {
        store
            .append(&message(format!("old-{i}").as_bytes()), 2_010)
            .unwrap();
    }
    // Submit the queue's write-behind, then delete before it completes.
    let mut acks = Vec::new();
    store.poll(2_200, &mut acks).unwrap();
    assert_eq!(store.delete_topic("T").unwrap(), 1);
    assert!(
        !store.consume_queues().is_idle(),
        "the deleted queue's write is still in flight"
    );
    store.append(&message(b"new-0"), 2_210).unwrap();
    run_until(&mut store, 2_210, 4_000);
    assert!(store.consume_queues().is_idle());
    assert_eq!(bodies(&mut store, "T", 0), [b"new-0".to_vec()]);
    let disk = store.shutdown(4_000, &mut acks).unwrap();
    let (mut store, _) = Store::open(disk, config(FlushMode::Async), 5_000).unwrap();
    assert_eq!(bodies(&mut store, "T", 0), [b"new-0".to_vec()]);
    assert_eq!(
        bodies(&mut store, "U", 1),
        [b"u-0".to_vec(), b"u-1".to_vec()]
    );
}

#[test]
fn records_carry_the_crc_property_as_if_encoded_with_it() {
    // The trailer is written in place after the caller's properties; the
    // bytes must be those of the record encoded with the trailer among its
    // properties and sealed, for every kind of properties and both versions.
    let long_topic = "L".repeat(200);
    let born_v6 = SocketAddr::from(([0xfe80, 0, 0, 0, 0, 0, 0, 1], 4242));
    let cases: [(&str, &[u8], SocketAddr); 5] = [
        ("T", b"", message(b"").born_host),
        ("T", b"TAGS\x01A\x02", message(b"").born_host),
        ("T", b"TAGS\x01A", message(b"").born_host),
        (&long_topic, b"KEYS\x01k", born_v6),
        ("T", b"\x02", born_v6),
    ];
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(7)), config(FlushMode::Sync), 0).unwrap();
    let mut offsets = Vec::new();
    for (topic, properties, born_host) in cases {
        let m = AppendMessage {
            topic,
            properties,
            born_host,
            ..message(b"body bytes")
        };
        offsets.push(store.append(&m, 5).unwrap().commit_log_offset);
    }
    let mut acks = Vec::new();
    settle(&mut store, 6, &mut acks);
    for ((topic, properties, _), offset) in cases.iter().zip(offsets) {
        let stored = store.read_record(offset).unwrap().expect("record readable");
        let view = decode_record(&stored, CrcCheck::Verify).unwrap();
        assert_eq!(view.topic(), *topic);
        let mut with_trailer = Vec::new();
        crate::commit_log::record_crc::with_crc_placeholder(properties, &mut with_trailer);
        let mut expected = Vec::new();
        RecordSpec {
            properties: &with_trailer,
            body_crc: None,
            ..view.to_spec()
        }
        .encode_append(&mut expected)
        .unwrap();
        crate::commit_log::record_crc::seal(&mut expected);
        assert_eq!(stored, expected, "properties {properties:?}");
        crate::commit_log::record_crc::verify(&stored).unwrap();
    }
}

#[test]
fn a_batch_whose_properties_overflow_with_the_crc_property_writes_nothing() {
    let mut config = config(FlushMode::Sync);
    // Room for the batch: only its properties are too long.
    config.segment_size_bytes = 1 << 20;
    let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(8)), config, 0).unwrap();
    // Fits RocketMQ's limit on its own, not with the 20-byte CRC property.
    let long = vec![b'p'; ringmq_protocol::limits::PROPERTIES_SIZE_MAX - 10];
    let batch = [
        message(b"first"),
        AppendMessage {
            properties: &long,
            ..message(b"second")
        },
    ];
    let before = store.commit_log().encoded_offset();
    let error = store.append_batch(&batch, 1).unwrap_err();
    assert!(
        matches!(&error, StorageError::Record { reason, .. } if reason.contains("CRC property")),
        "{error}"
    );
    assert_eq!(
        store.commit_log().encoded_offset(),
        before,
        "no record of the batch was written"
    );
    let ticket = store.append(&message(b"after"), 2).unwrap();
    assert_eq!(ticket.commit_log_offset, before);
    let mut acks = Vec::new();
    settle(&mut store, 3, &mut acks);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].status, AckStatus::Ok);
}

#[test]
fn async_commits_behind_others_grow_with_the_bytes_in_flight_up_to_the_max() {
    let mut config = config(FlushMode::Async);
    config.segment_size_bytes = 16 * 1024 * 1024;
    let mut sim = SimConfig::new(7);
    // Nothing completes unless a poll blocks: every commit stays in flight.
    sim.complete_percent = 0;
    let (mut store, _) = Store::open(SimDisk::new(sim), config, 1).unwrap();
    let body = vec![0x42u8; 900];
    let mut acks = Vec::new();
    // (commits started in a turn, their bytes, bytes in flight before them)
    let mut turns = Vec::new();
    for _ in 0..64 {
        let appender = store.commit_log().appender();
        let (submitted, commits, written) = (
            appender.submitted(),
            appender.commit_count(),
            appender.written(),
        );
        for _ in 0..128 {
            store.append(&message(&body), 1).unwrap();
        }
        store.poll(1, &mut acks).unwrap();
        let appender = store.commit_log().appender();
        assert_eq!(appender.written(), written, "a write completed");
        if appender.commit_count() > commits {
            turns.push((
                appender.commit_count() - commits,
                appender.submitted() - submitted,
                submitted - written,
            ));
        }
    }
    let turn_bytes = 128 * (body.len() as u64 + 200);
    assert_eq!(turns[0].0, 1, "{turns:?}");
    assert!(
        turns[0].1 <= turn_bytes,
        "nothing in flight: one turn's blocks; {turns:?}"
    );
    for &(count, bytes, in_flight) in &turns {
        let min = (in_flight / 2).clamp(
            COMMIT_BEHIND_BYTES_MIN_ASYNC as u64,
            COMMIT_BEHIND_BYTES_MAX_ASYNC as u64,
        );
        assert_eq!(count, 1, "one commit a turn; {turns:?}");
        assert!(
            bytes >= min,
            "a commit behind {in_flight} bytes waits for {min}; {turns:?}"
        );
        assert!(
            bytes < min + turn_bytes,
            "and starts in the turn it has them; {turns:?}"
        );
    }
    let largest = turns.iter().map(|turn| turn.1).max().unwrap();
    assert!(
        largest >= COMMIT_BEHIND_BYTES_MAX_ASYNC as u64,
        "commits reach the max: {turns:?}"
    );
    settle(&mut store, 1, &mut acks);
}

#[test]
fn a_log_rolling_faster_than_the_space_check_keeps_recycling_its_segments() {
    // Segments expire as soon as the next one starts, and the clock stays
    // inside one disk-space check interval: only the roll-overs can tell
    // retention that a segment became removable.
    let mut config = config(FlushMode::Async);
    config.retention.file_reserved_time_hours = 0;
    config.retention.delete_when_hours = (0..24).collect();
    config.retention.delete_commit_log_files_interval_ms = 0;
    config.clean_resource_interval_ms = 0;
    config.commit_log_recycle_segments = 2;
    let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(41)), config, T0).unwrap();
    let body = vec![5u8; 1_000];
    let mut acks = Vec::new();
    let size = store.config().segment_size_bytes;
    let rolls = 12;
    let mut now_ms = T0;
    while store.commit_log().encoded_offset() < rolls * size {
        store.append(&message(&body), now_ms).unwrap();
        store.poll(now_ms, &mut acks).unwrap();
        if store.pending_appends() > 64 {
            settle(&mut store, now_ms, &mut acks);
        }
        now_ms += 1;
    }
    assert!(
        now_ms - T0 < DISK_SPACE_CHECK_INTERVAL_MS,
        "the test must stay inside one space check interval"
    );
    settle(&mut store, now_ms, &mut acks);
    let stats = store.commit_log().segment_stats();
    assert!(stats.created_ahead >= rolls - 1, "{stats:?}");
    // The pool starts empty: the first segments ahead are new files, and
    // from the first retirement on every one is a spare.
    assert!(
        stats.created_ahead - stats.recycled <= 2,
        "new files after the pool filled: {stats:?}"
    );
    assert!(
        store.commit_log_min_offset() >= (rolls - 2) * size,
        "retention kept up: min offset {}",
        store.commit_log_min_offset()
    );
}

/// Every body in queue `queue_id` of `topic`, in queue order.
fn all_bodies(store: &mut Store<SimDisk>, topic: &str, queue_id: u32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let page = bodies_from(store, topic, queue_id, out.len() as u64);
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

/// Once the CommitLog has failed, its durable point never moves again.
fn watch_durable_after_failure(store: &Store<SimDisk>, durable_at_failure: &mut Option<u64>) {
    let appender = store.commit_log().appender();
    if appender.failure().is_some() {
        let at = *durable_at_failure.get_or_insert(appender.durable());
        assert_eq!(appender.durable(), at, "durable moved after a failure");
    }
}

#[test]
fn after_a_failed_fdatasync_durable_stops_and_what_was_acknowledged_survives_a_power_loss() {
    let mut runs_with_a_failed_ack = 0;
    for (seed, nth) in (0..4u64).flat_map(|seed| (1..=16u64).map(move |nth| (seed, nth))) {
        let mut sim = SimConfig::new(200 + 16 * seed + nth);
        sim.complete_percent = 30;
        sim.faults.fsync_eio_nth = Some(nth);
        let mut config = config(FlushMode::Sync);
        config.segment_size_bytes = 16 * 1024 * 1024;
        let (mut store, _) = Store::open(SimDisk::new(sim), config.clone(), 1).unwrap();
        let mut acks = Vec::new();
        let mut bodies_by_id = std::collections::HashMap::new();
        let mut durable_at_failure = None;
        // Turns of 64 appends, as a loaded shard's: several commits in
        // flight when the fdatasync fails.
        'turns: for turn in 0..32u32 {
            for i in 0..64u32 {
                let body = format!("m-{turn}-{i}-{}", "x".repeat(900)).into_bytes();
                match store.append(&message(&body), 1) {
                    Ok(ticket) => {
                        bodies_by_id.insert(ticket.id, body);
                    }
                    Err(_) => break 'turns,
                }
            }
            store.poll(1, &mut acks).unwrap();
            watch_durable_after_failure(&store, &mut durable_at_failure);
        }
        // Past the last ack too, so fdatasyncs still in flight at a failure
        // complete under watch.
        for _ in 0..1_000 {
            if store.pending_appends() == 0 && store.disk().in_flight() == 0 {
                break;
            }
            store
                .poll_wait(1, std::time::Duration::ZERO, &mut acks)
                .unwrap();
            watch_durable_after_failure(&store, &mut durable_at_failure);
        }
        let acked: Vec<Vec<u8>> = acks
            .iter()
            .filter(|ack| ack.status == AckStatus::Ok)
            .map(|ack| bodies_by_id[&ack.id].clone())
            .collect();
        if let Some(first_failed) = acks.iter().position(|ack| ack.status != AckStatus::Ok) {
            runs_with_a_failed_ack += 1;
            assert!(
                acks[first_failed..]
                    .iter()
                    .all(|ack| ack.status != AckStatus::Ok),
                "seed {seed} nth {nth}: an append acknowledged after a failed one"
            );
        }
        let disk = store.disk_mut().crash(CrashKind::PowerLoss);
        let (mut reopened, _) = Store::open(disk, config, 2).unwrap();
        let found = all_bodies(&mut reopened, "T", 0);
        assert!(
            found.len() >= acked.len() && found[..acked.len()] == acked[..],
            "seed {seed} nth {nth}: {} acknowledged, {} found after a power loss",
            acked.len(),
            found.len()
        );
    }
    assert!(
        runs_with_a_failed_ack > 0,
        "some injected fdatasync failure hit the CommitLog"
    );
}

/// A store on a fresh simulated disk of `seed`, opened at `T0`.
fn open_sim(seed: u64, mode: FlushMode) -> Store<SimDisk> {
    Store::open(SimDisk::new(SimConfig::new(seed)), config(mode), T0)
        .unwrap()
        .0
}

/// Appends messages to two topics (single ones with keys, and batches) at
/// `now_ms` until the log has `segments` segments, and settles.
fn fill_for_replication(store: &mut Store<SimDisk>, segments: u64, now_ms: u64) {
    let size = store.config().segment_size_bytes;
    fill_until(store, (segments - 1) * size + size / 3, now_ms, |n| n as u8);
}

/// A store without a tail cache on a disk of `seed`, filled over four
/// segments ([`fill_for_replication`]): the same records for the same seed,
/// and reads of all but its newest bytes go to the disk.
fn uncached_four_segments(seed: u64) -> Store<SimDisk> {
    let mut config = config(FlushMode::Async);
    config.tail_cache_bytes = 0;
    let (mut store, _) = Store::open(SimDisk::new(SimConfig::new(seed)), config, T0).unwrap();
    fill_for_replication(&mut store, 4, T0);
    store
}

/// As [`fill_for_replication`] until the log passes local `end`, the
/// bodies of the `n`th message filled with `byte(n)`.
fn fill_until(store: &mut Store<SimDisk>, end: u64, now_ms: u64, byte: impl Fn(u64) -> u8) {
    let mut acks = Vec::new();
    let mut n = 0u64;
    while store.commit_log().encoded_offset() < end {
        let body = vec![byte(n); 300 + (n as usize * 37) % 700];
        let keys = format!("TAGS\x01A\x02KEYS\x01k{n}\x02");
        let mut m = message(&body);
        m.properties = keys.as_bytes();
        if n % 5 == 4 {
            let mut batch = vec![m; 3];
            batch.iter_mut().for_each(|m| m.topic = "U");
            store.append_batch(&batch, now_ms + n).unwrap();
        } else {
            store.append(&m, now_ms + n).unwrap();
        }
        store.poll(now_ms + n, &mut acks).unwrap();
        n += 1;
    }
    settle(store, now_ms + n, &mut acks);
}

/// What `Store::replica_chunk` gives at `from` as the broker runs it: in
/// the background, then executed again once its read is done.
fn chunk_at(
    store: &mut Store<SimDisk>,
    from: u64,
    max_bytes: usize,
) -> Result<Vec<u8>, StorageError> {
    let ticket = match store.replica_chunk(from, max_bytes, PullRead::Background)? {
        ReplicaChunk::Bytes(bytes) => return Ok(bytes),
        ReplicaChunk::Reading(ticket) => ticket,
    };
    await_span_read(store, ticket);
    match store.replica_chunk(from, max_bytes, PullRead::AfterRead)? {
        ReplicaChunk::Bytes(bytes) => Ok(bytes),
        ReplicaChunk::Reading(_) => {
            panic!("a replica pull executed again after its read reads again")
        }
    }
}

/// Every chunk `chunk_at` gives from the log's start to its end,
/// concatenated.
fn replica_stream(store: &mut Store<SimDisk>, max_bytes: usize) -> Vec<u8> {
    let mut stream = Vec::new();
    let mut from = store.commit_log().min_local_offset();
    loop {
        let chunk = chunk_at(store, from, max_bytes).unwrap();
        if chunk.is_empty() {
            return stream;
        }
        let size = store.config().segment_size_bytes;
        from = if chunk.ends_with_blank(from, size) {
            (from / size + 1) * size
        } else {
            from + chunk.len() as u64
        };
        stream.extend_from_slice(&chunk);
    }
}

/// Whether a chunk read at `from` ends with a BLANK: it then ends at its
/// segment's end.
trait EndsWithBlank {
    fn ends_with_blank(&self, from: u64, segment_size: u64) -> bool;
}

impl EndsWithBlank for Vec<u8> {
    fn ends_with_blank(&self, from: u64, segment_size: u64) -> bool {
        let Some(start) = self.len().checked_sub(8) else {
            return false;
        };
        let total = u32::from_be_bytes(self[start..start + 4].try_into().unwrap());
        let magic = u32::from_be_bytes(self[start + 4..start + 8].try_into().unwrap());
        magic == ringmq_protocol::message::layout::MAGIC_CODE_BLANK
            && from + start as u64 + u64::from(total) == (from / segment_size + 1) * segment_size
    }
}

/// `actual == expected`, saying where they part (not printing them).
fn assert_same_bytes(actual: &[u8], expected: &[u8]) {
    let first_difference = actual.iter().zip(expected).position(|(a, b)| a != b);
    assert!(
        actual == expected,
        "{} bytes against {} expected, first difference at {first_difference:?}",
        actual.len(),
        expected.len()
    );
}

/// Feeds `slave` the master's chunks until it has the master's log.
fn replicate(
    master: &mut Store<SimDisk>,
    slave: &mut Store<SimDisk>,
    max_bytes: usize,
    now_ms: u64,
) {
    let mut acks = Vec::new();
    loop {
        let from = slave.commit_log().appender().encoded();
        let chunk = chunk_at(master, from, max_bytes).unwrap();
        if chunk.is_empty() {
            break;
        }
        let end = slave.append_replicated(from, &chunk, now_ms).unwrap();
        assert!(end > from);
        slave.poll(now_ms, &mut acks).unwrap();
    }
    // Replicated appends wait for no ack: poll until they are durable.
    for _ in 0..1_000 {
        let appender = slave.commit_log().appender();
        if appender.durable() == appender.encoded() {
            return;
        }
        slave
            .poll_wait(now_ms, std::time::Duration::ZERO, &mut acks)
            .unwrap();
    }
    panic!("replicated appends never became durable");
}

#[test]
fn a_slave_fed_the_masters_chunks_holds_its_log_and_answers_its_reads() {
    let mut master = open_sim(31, FlushMode::Async);
    let mut slave = open_sim(32, FlushMode::Sync);
    fill_for_replication(&mut master, 4, T0);
    // Chunks of about 5 KiB: records, BLANKs and segment ends all fall
    // inside and at the edges of chunks.
    replicate(&mut master, &mut slave, 5_000, T0 + 10_000);
    let size = master.config().segment_size_bytes;
    assert!(slave.commit_log().appender().encoded() > 3 * size);
    assert_eq!(
        slave.commit_log().appender().durable(),
        master.commit_log().appender().encoded(),
        "the slave made all of it durable"
    );
    let expected = replica_stream(&mut master, 1 << 20);
    assert_same_bytes(&replica_stream(&mut slave, 1 << 20), &expected);
    for (topic, queues) in [("T", 0..1), ("U", 0..1)] {
        for queue_id in queues {
            let max = master.queue_max_offset(topic, queue_id);
            assert!(max > 10);
            assert_eq!(slave.queue_max_offset(topic, queue_id), max, "{topic}");
            let on_master = master
                .get_messages(topic, queue_id, 0, 64, 1 << 20, None)
                .unwrap();
            let on_slave = slave
                .get_messages(topic, queue_id, 0, 64, 1 << 20, None)
                .unwrap();
            assert_eq!(on_slave.status, GetMessageStatus::Found);
            assert_eq!(on_slave.body, on_master.body, "{topic}");
        }
    }
    let by_key = slave.query_message("T", "k3", 10, 0, i64::MAX);
    assert_eq!(
        by_key.phy_offsets,
        master.query_message("T", "k3", 10, 0, i64::MAX).phy_offsets
    );
    assert_eq!(by_key.phy_offsets.len(), 1);
    // A kill -9 of the slave: recovery takes the replicated log as its own
    // and, a replica, ends it where the master's goes on (no fence).
    let disk = slave.disk_mut().crash(CrashKind::ProcessKill);
    let (mut slave, report) = Store::open(disk, replica_config(), T0 + 20_000).unwrap();
    assert!(report.abnormal);
    assert!(!report.recovery.fenced);
    assert_same_bytes(&replica_stream(&mut slave, 1 << 20), &expected);
    assert_eq!(
        slave.queue_max_offset("U", 0),
        master.queue_max_offset("U", 0)
    );
    // The master goes on and the slave follows.
    fill_for_replication(&mut master, 6, T0 + 30_000);
    replicate(&mut master, &mut slave, 7_000, T0 + 40_000);
    assert_same_bytes(
        &replica_stream(&mut slave, 1 << 20),
        &replica_stream(&mut master, 1 << 20),
    );
    assert_eq!(
        slave.queue_max_offset("T", 0),
        master.queue_max_offset("T", 0)
    );
}

#[test]
fn a_master_reads_what_its_tail_cache_no_longer_holds_in_the_background() {
    let mut master = uncached_four_segments(41);
    let ReplicaChunk::Reading(ticket) = master
        .replica_chunk(0, 5_000, PullRead::Background)
        .unwrap()
    else {
        panic!("the log's start is not in the tail cache");
    };
    // Nothing is done before a poll.
    let mut done = Vec::new();
    master.take_span_reads(&mut done);
    assert!(done.is_empty());
    await_span_read(&mut master, ticket);
    // Executed again, the pull finds the span its read brought.
    let reads = master.disk().read_count();
    let ReplicaChunk::Bytes(bytes) = master.replica_chunk(0, 5_000, PullRead::AfterRead).unwrap()
    else {
        panic!("a replica pull executed again after its read reads again");
    };
    assert_eq!(
        master.disk().read_count(),
        reads,
        "served from the span read"
    );
    assert!(
        bytes.len() <= 5_000 && bytes.len() > 1_000,
        "{}",
        bytes.len()
    );
    // Read synchronously instead (a pull executed again whose span was
    // evicted), from a store with the same records and nothing cached: the
    // same chunk, and a first record longer than asked for comes whole.
    let mut twin = uncached_four_segments(41);
    let reads = twin.disk().read_count();
    assert_eq!(
        twin.replica_chunk(0, 5_000, PullRead::Sync).unwrap(),
        ReplicaChunk::Bytes(bytes.clone())
    );
    assert!(twin.disk().read_count() > reads, "read from the segment");
    let ReplicaChunk::Bytes(first) = twin.replica_chunk(0, 200, PullRead::Sync).unwrap() else {
        panic!("a synchronous chunk was read in the background");
    };
    assert!(
        first.len() > 200 && bytes.starts_with(&first),
        "{}",
        first.len()
    );
    // Chunks of 200 bytes: every first record is longer, and each read
    // grows to take it whole; then chunks of 20 KiB from reads the disk
    // cuts short at random. The slave checks every record it gets.
    let mut slave = open_replica(42);
    let mut acks = Vec::new();
    let half = master.commit_log().appender().encoded() / 2;
    while slave.commit_log().appender().encoded() < half {
        let from = slave.commit_log().appender().encoded();
        let chunk = chunk_at(&mut master, from, 200).unwrap();
        slave.append_replicated(from, &chunk, T0).unwrap();
        slave.poll(T0, &mut acks).unwrap();
    }
    master.disk_mut().faults_mut().short_read_percent = 50;
    replicate(&mut master, &mut slave, 20_000, T0 + 1_000);
    assert_eq!(
        slave.commit_log().appender().encoded(),
        master.commit_log().appender().encoded()
    );
    let expected = replica_stream(&mut master, 1 << 20);
    assert_same_bytes(&replica_stream(&mut slave, 1 << 20), &expected);
    assert!(expected.starts_with(&bytes));
    // Where a slave goes on after a chunk: its end, or past the BLANK that
    // ends its segment.
    let size = master.config().segment_size_bytes;
    assert_eq!(master.replica_chunk_end(0, &bytes), bytes.len() as u64);
    let mut from = 0;
    let mut blanks = 0;
    while from < master.commit_log().appender().encoded() {
        let chunk = chunk_at(&mut master, from, 20_000).unwrap();
        let next = master.replica_chunk_end(from, &chunk);
        if chunk.ends_with_blank(from, size) {
            blanks += 1;
            assert_eq!(next, (from / size + 1) * size);
        } else {
            assert_eq!(next, from + chunk.len() as u64);
        }
        from = next;
    }
    assert_eq!(blanks, 3, "four segments, three ends");
    // Not a record boundary: the read's answer says so.
    let error = chunk_at(&mut master, 100, 5_000).unwrap_err();
    assert!(matches!(error, StorageError::Record { .. }), "{error}");
}

/// A slave's store: SYNC_FLUSH, a replica.
fn replica_config() -> StoreConfig {
    let mut config = config(FlushMode::Sync);
    config.replica = true;
    config
}

/// A slave's store on a fresh simulated disk of `seed`, opened at `T0`.
fn open_replica(seed: u64) -> Store<SimDisk> {
    Store::open(SimDisk::new(SimConfig::new(seed)), replica_config(), T0)
        .unwrap()
        .0
}

#[test]
fn a_slave_that_loses_power_mid_stream_recovers_and_catches_up_byte_for_byte() {
    for seed in 0..20 {
        let mut master = open_sim(40 + seed, FlushMode::Async);
        fill_for_replication(&mut master, 3, T0);
        let mut slave = open_replica(60 + seed);
        // Part of the log, polled but not settled: writes and fdatasyncs
        // are in flight when the power goes.
        let mut acks = Vec::new();
        for _ in 0..(5 + seed % 7) {
            let from = slave.commit_log().appender().encoded();
            let chunk = chunk_at(&mut master, from, 9_000).unwrap();
            slave.append_replicated(from, &chunk, T0).unwrap();
            slave.poll(T0, &mut acks).unwrap();
        }
        let durable = slave.commit_log().appender().durable();
        let kind = if seed % 2 == 0 {
            CrashKind::PowerLoss
        } else {
            CrashKind::ProcessKill
        };
        let disk = slave.disk_mut().crash(kind);
        let (mut slave, report) = Store::open(disk, replica_config(), T0 + 1_000).unwrap();
        assert!(report.abnormal);
        let end = slave.commit_log().appender().encoded();
        assert!(end >= durable, "seed {seed}: {end} < durable {durable}");
        replicate(&mut master, &mut slave, 9_000, T0 + 2_000);
        assert_same_bytes(
            &replica_stream(&mut slave, 1 << 20),
            &replica_stream(&mut master, 1 << 20),
        );
        for topic in ["T", "U"] {
            assert_eq!(
                slave.queue_max_offset(topic, 0),
                master.queue_max_offset(topic, 0),
                "seed {seed} {topic}"
            );
        }
    }
}

#[test]
fn an_empty_slave_starts_where_its_masters_log_now_starts() {
    let mut master = open_sim(36, FlushMode::Async);
    fill_for_replication(&mut master, 4, T0);
    let size = master.config().segment_size_bytes;
    // Retention's work, done by hand after a clean stop: the master's log
    // now starts at its third segment.
    let mut acks = Vec::new();
    let mut disk = master.shutdown(T0 + 1_000, &mut acks).unwrap();
    let dir = config(FlushMode::Async).commit_log_dir();
    for base in [0, size] {
        disk.remove(&dir.join(crate::commit_log::segment::segment_file_name(base)))
            .unwrap();
    }
    let (mut master, _) = Store::open(disk, config(FlushMode::Async), T0 + 2_000).unwrap();
    let start = master.commit_log().min_local_offset();
    assert_eq!(start, 2 * size);
    assert!(master.queue_min_offset("T", 0) > 0);
    let mut slave = open_replica(37);
    let empty = slave.replica_position().unwrap();
    assert_eq!(empty.last_record, None);
    let error = master.check_replica_position(&empty).unwrap_err();
    assert!(error.to_string().contains("the log holds"), "{error}");
    // Refused: not a segment base, not past the end.
    for base in [start + 4096, 0] {
        let error = slave.restart_empty_replica_at(base).unwrap_err();
        assert!(matches!(error, StorageError::InvalidArgument(_)), "{error}");
    }
    slave.restart_empty_replica_at(start).unwrap();
    let moved = slave.replica_position().unwrap();
    assert_eq!((moved.end, moved.last_record), (start, None));
    master.check_replica_position(&moved).unwrap();
    // An empty log elsewhere than a segment start names no last record.
    let odd = crate::commit_log::ReplicaPosition {
        end: start + 4096,
        last_record: None,
    };
    assert!(master.check_replica_position(&odd).is_err());
    // A last record that does not end by the slave's end, even one no
    // offset can name, is refused, not read.
    for (offset, size) in [(1 << 60, 100), (u64::MAX - 10, u32::MAX), (start, 4097)] {
        let bogus = crate::commit_log::ReplicaPosition {
            end: start + 4096,
            last_record: Some(crate::commit_log::RecordMark {
                offset,
                size,
                crc: 0,
            }),
        };
        let error = master.check_replica_position(&bogus).unwrap_err();
        assert!(error.to_string().contains("ends past it"), "{error}");
    }
    // Nor does a slave move to a base no offset can name.
    let error = slave.restart_empty_replica_at(1 << 56).unwrap_err();
    assert!(matches!(error, StorageError::InvalidArgument(_)), "{error}");
    replicate(&mut master, &mut slave, 6_000, T0 + 3_000);
    assert_eq!(slave.commit_log().min_local_offset(), start);
    let expected = replica_stream(&mut master, 1 << 20);
    assert_same_bytes(&replica_stream(&mut slave, 1 << 20), &expected);
    let check_queues = |master: &mut Store<SimDisk>, slave: &mut Store<SimDisk>| {
        for topic in ["T", "U"] {
            let (min, max) = (
                master.queue_min_offset(topic, 0),
                master.queue_max_offset(topic, 0),
            );
            assert_eq!(slave.queue_min_offset(topic, 0), min, "{topic}");
            assert_eq!(slave.queue_max_offset(topic, 0), max, "{topic}");
            let on_master = master
                .get_messages(topic, 0, min, 64, 1 << 20, None)
                .unwrap();
            let on_slave = slave
                .get_messages(topic, 0, min, 64, 1 << 20, None)
                .unwrap();
            assert_eq!(on_slave.status, GetMessageStatus::Found, "{topic}");
            assert_eq!(on_slave.body, on_master.body, "{topic}");
        }
    };
    check_queues(&mut master, &mut slave);
    // A log that holds records is not moved.
    let error = slave.restart_empty_replica_at(8 * size).unwrap_err();
    assert!(error.to_string().contains("holds records"), "{error}");
    // A kill -9 of the slave: it opens where it was, from `start`.
    let disk = slave.disk_mut().crash(CrashKind::ProcessKill);
    let (mut slave, _) = Store::open(disk, replica_config(), T0 + 4_000).unwrap();
    assert_eq!(slave.commit_log().min_local_offset(), start);
    assert_same_bytes(&replica_stream(&mut slave, 1 << 20), &expected);
    fill_for_replication(&mut master, 6, T0 + 5_000);
    replicate(&mut master, &mut slave, 6_000, T0 + 6_000);
    assert_same_bytes(
        &replica_stream(&mut slave, 1 << 20),
        &replica_stream(&mut master, 1 << 20),
    );
    check_queues(&mut master, &mut slave);
    // Only a replica's log moves.
    let mut plain = open_sim(38, FlushMode::Sync);
    let error = plain.restart_empty_replica_at(start).unwrap_err();
    assert!(error.to_string().contains("not a replica"), "{error}");
}

#[test]
fn an_empty_slave_moved_to_its_masters_start_and_crashed_at_once_opens_empty() {
    let size = config(FlushMode::Sync).segment_size_bytes;
    for kind in [CrashKind::ProcessKill, CrashKind::PowerLoss] {
        let mut slave = open_replica(39);
        slave.restart_empty_replica_at(5 * size).unwrap();
        let disk = slave.disk_mut().crash(kind);
        let (mut slave, _) = Store::open(disk, replica_config(), T0 + 1_000).unwrap();
        let position = slave.replica_position().unwrap();
        assert_eq!(position.last_record, None, "{kind:?}");
        // Either the move or the empty log at 0 it started from.
        assert!(
            position.end == 5 * size || position.end == 0,
            "{kind:?}: {}",
            position.end
        );
        assert_eq!(slave.commit_log().min_local_offset(), position.end);
    }
}

#[test]
fn a_master_that_lost_what_its_slave_has_refuses_to_serve_past_its_fence() {
    let config = config(FlushMode::Async);
    let (mut master, _) =
        Store::open(SimDisk::new(SimConfig::new(80)), config.clone(), T0).unwrap();
    let mut acks = Vec::new();
    // Ten messages made durable by the timed fdatasync, then ten only
    // written (polled at the same time, so no fdatasync is due).
    for n in 0..20u64 {
        let now_ms = if n < 10 { T0 } else { T0 + 1_000 };
        master.append(&message(&[n as u8; 500]), now_ms).unwrap();
        master.poll(now_ms, &mut acks).unwrap();
        if n == 9 {
            settle(&mut master, T0 + 1_000, &mut acks);
            while master.commit_log().appender().durable()
                < master.commit_log().appender().encoded()
            {
                master
                    .poll_wait(T0 + 1_000, std::time::Duration::ZERO, &mut acks)
                    .unwrap();
            }
        }
    }
    settle(&mut master, T0 + 1_000, &mut acks);
    let mut slave = open_replica(81);
    replicate(&mut master, &mut slave, 1 << 20, T0);
    let slave_end = slave.commit_log().appender().encoded();
    assert!(master.commit_log().appender().durable() < slave_end);
    let disk = master.disk_mut().crash(CrashKind::PowerLoss);
    let (mut master, report) = Store::open(disk, config, T0 + 1_000).unwrap();
    assert!(report.recovery.fenced);
    let fence = report.recovery.scan.end;
    assert!(fence < slave_end, "the master lost records the slave has");
    // The master goes on in its fresh segment, past the slave's end.
    master.append(&message(b"new"), T0 + 1_000).unwrap();
    settle(&mut master, T0 + 1_000, &mut acks);
    assert!(master.commit_log().appender().encoded() > slave_end);
    let error = chunk_at(&mut master, slave_end, 1 << 20).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the slave holds records this log lost"),
        "{error}"
    );
}

#[test]
fn a_replicated_chunk_that_fails_a_check_is_refused_whole() {
    let mut master = open_sim(33, FlushMode::Async);
    fill_for_replication(&mut master, 2, T0);
    let mut slave = open_sim(34, FlushMode::Sync);
    let chunk = chunk_at(&mut master, 0, 3_000).unwrap();
    let first_len = u32::from_be_bytes(chunk[..4].try_into().unwrap()) as usize;
    assert!(
        chunk.len() > 2 * first_len,
        "several records: {}",
        chunk.len()
    );
    let refuse = |slave: &mut Store<SimDisk>, from: u64, bytes: &[u8]| {
        let before = (
            slave.commit_log().appender().encoded(),
            slave.queue_max_offset("T", 0),
        );
        let error = slave.append_replicated(from, bytes, T0).unwrap_err();
        let after = (
            slave.commit_log().appender().encoded(),
            slave.queue_max_offset("T", 0),
        );
        assert_eq!(after, before, "nothing appended on {error}");
        error
    };
    // A bit flipped in the second record's body.
    let mut flipped = chunk.clone();
    flipped[first_len + 150] ^= 1;
    let error = refuse(&mut slave, 0, &flipped);
    assert!(matches!(error, StorageError::Record { .. }), "{error}");
    assert!(error.to_string().contains("CRC"), "{error}");
    // Cut inside its last record.
    let error = refuse(&mut slave, 0, &chunk[..chunk.len() - 10]);
    assert!(
        error.to_string().contains("ends inside a record"),
        "{error}"
    );
    // Not where the slave's log ends.
    let error = refuse(&mut slave, 8, &chunk);
    assert!(matches!(error, StorageError::InvalidArgument(_)), "{error}");
    // Records of another position (the chunk from its second record on).
    let error = refuse(&mut slave, 0, &chunk[first_len..]);
    assert!(error.to_string().contains("PHYSICALOFFSET"), "{error}");
    // The chunk itself is taken after all that.
    assert_eq!(
        slave.append_replicated(0, &chunk, T0).unwrap(),
        chunk.len() as u64
    );
    // A slave with segments twice the master's: the master's BLANK does not
    // end its segment.
    let mut other = config(FlushMode::Sync);
    other.segment_size_bytes = 2 * COMMIT_LOG_SEGMENT_SIZE_MIN;
    let (mut unlike, _) = Store::open(SimDisk::new(SimConfig::new(35)), other, T0).unwrap();
    let error = loop {
        let from = unlike.commit_log().appender().encoded();
        let chunk = chunk_at(&mut master, from, 16_000).unwrap();
        assert!(!chunk.is_empty(), "the BLANK was never refused");
        match unlike.append_replicated(from, &chunk, T0) {
            Ok(_) => {}
            Err(error) => break error,
        }
    };
    assert!(
        error.to_string().contains("misses the segment end"),
        "{error}"
    );
    // A record over what the slave's segments can hold (half a segment).
    let mut larger = config(FlushMode::Async);
    larger.segment_size_bytes = 4 * COMMIT_LOG_SEGMENT_SIZE_MIN;
    let (mut big_master, _) = Store::open(SimDisk::new(SimConfig::new(37)), larger, T0).unwrap();
    let body = vec![1u8; COMMIT_LOG_SEGMENT_SIZE_MIN as usize];
    big_master.append(&message(&body), T0).unwrap();
    let mut acks = Vec::new();
    settle(&mut big_master, T0, &mut acks);
    let chunk = chunk_at(&mut big_master, 0, 1 << 20).unwrap();
    let mut small = open_sim(38, FlushMode::Sync);
    let error = refuse(&mut small, 0, &chunk);
    assert!(error.to_string().contains("limit"), "{error}");
}

#[test]
fn replica_bytes_answers_whole_acknowledgeable_records_from_a_record_boundary() {
    let mut master = open_sim(36, FlushMode::Async);
    let body = vec![9u8; 2_000];
    master.append(&message(&body), T0).unwrap();
    // Encoded, not written yet: nothing to send.
    assert!(chunk_at(&mut master, 0, 1 << 20).unwrap().is_empty());
    let mut acks = Vec::new();
    settle(&mut master, T0, &mut acks);
    master.append(&message(b"small"), T0).unwrap();
    settle(&mut master, T0, &mut acks);
    let first = chunk_at(&mut master, 0, 100).unwrap();
    let first_len = u32::from_be_bytes(first[..4].try_into().unwrap()) as usize;
    assert_eq!(
        first.len(),
        first_len,
        "a record over max_bytes comes whole"
    );
    assert!(first_len > 2_000);
    let both = chunk_at(&mut master, 0, 1 << 20).unwrap();
    assert_eq!(&both[..first_len], &first[..]);
    let end = master.commit_log().appender().encoded();
    assert_eq!(both.len() as u64, end);
    assert!(chunk_at(&mut master, end, 1 << 20).unwrap().is_empty());
    let error = chunk_at(&mut master, end + 8, 1 << 20).unwrap_err();
    assert!(matches!(error, StorageError::InvalidArgument(_)), "{error}");
    let error = chunk_at(&mut master, 100, 1 << 20).unwrap_err();
    assert!(
        error.to_string().contains("not a record boundary"),
        "{error}"
    );
}

#[test]
fn a_master_checks_a_slaves_position_by_its_last_record_at_every_step_and_after_a_restart() {
    let mut master = open_sim(90, FlushMode::Async);
    fill_for_replication(&mut master, 3, T0);
    let mut slave = open_replica(91);
    let empty = slave.replica_position().unwrap();
    assert_eq!((empty.end, empty.last_record), (0, None));
    master.check_replica_position(&empty).unwrap();
    let size = slave.config().segment_size_bytes;
    let mut at_segment_start = 0;
    let mut acks = Vec::new();
    loop {
        let from = slave.commit_log().appender().encoded();
        let chunk = chunk_at(&mut master, from, 6_000).unwrap();
        if chunk.is_empty() {
            break;
        }
        slave.append_replicated(from, &chunk, T0).unwrap();
        // Acknowledgeable (durable: the slave flushes synchronously).
        while slave.commit_log().appender().durable() < slave.commit_log().appender().encoded() {
            slave
                .poll_wait(T0, std::time::Duration::ZERO, &mut acks)
                .unwrap();
        }
        let position = slave.replica_position().unwrap();
        assert_eq!(position.end, slave.commit_log().appender().encoded());
        if position.end.is_multiple_of(size) {
            at_segment_start += 1;
        }
        master.check_replica_position(&position).unwrap();
    }
    assert!(
        at_segment_start >= 2,
        "ended at a segment start {at_segment_start} times"
    );
    // A clean restart: the slave finds its last record again.
    let expected = slave.replica_position().unwrap();
    assert_eq!(
        master.replica_position().unwrap(),
        expected,
        "the master's own appends (batches too) name the same last record"
    );
    let disk = slave.shutdown(T0, &mut acks).unwrap();
    let (mut slave, report) = Store::open(disk, replica_config(), T0 + 1_000).unwrap();
    assert!(!report.abnormal);
    assert_eq!(slave.replica_position().unwrap(), expected);
    master.check_replica_position(&expected).unwrap();
}

#[test]
fn a_master_refuses_a_slave_whose_last_record_it_does_not_hold() {
    let mut master = open_sim(92, FlushMode::Async);
    fill_for_replication(&mut master, 2, T0);
    let mut slave = open_replica(93);
    replicate(&mut master, &mut slave, 5_000, T0);
    // Another master, with records of the same sizes at the same offsets
    // but other bodies.
    let mut other = open_sim(94, FlushMode::Async);
    let end = master.commit_log().encoded_offset();
    fill_until(&mut other, end, T0, |n| !(n as u8));
    let mut acks = Vec::new();
    assert_eq!(
        other.commit_log().encoded_offset(),
        master.commit_log().encoded_offset(),
        "the same layout"
    );
    let position = slave.replica_position().unwrap();
    master.check_replica_position(&position).unwrap();
    let error = other.check_replica_position(&position).unwrap_err();
    assert!(error.to_string().contains("holds other bytes"), "{error}");
    // A slave ahead of its master.
    let mut behind = open_sim(95, FlushMode::Async);
    behind.append(&message(b"one"), T0).unwrap();
    settle(&mut behind, T0, &mut acks);
    let error = behind.check_replica_position(&position).unwrap_err();
    assert!(error.to_string().contains("the log holds"), "{error}");
    // A position whose last record does not end where it says.
    let mut wrong = position;
    wrong.end -= 8;
    let error = master.check_replica_position(&wrong).unwrap_err();
    assert!(error.to_string().contains("ends past it"), "{error}");
    // Nor is followed by the end: the first record named as the last.
    let first = chunk_at(&mut master, 0, 1).unwrap();
    let early = crate::commit_log::ReplicaPosition {
        end: position.end,
        last_record: Some(crate::commit_log::RecordMark {
            offset: 0,
            size: first.len() as u32,
            crc: crc32c::crc32c(&first),
        }),
    };
    let error = master.check_replica_position(&early).unwrap_err();
    assert!(error.to_string().contains("no BLANK"), "{error}");
}

#[test]
fn queue_entries_are_the_acknowledgeable_ones_of_the_range_asked() {
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(5)), config(FlushMode::Async), 0).unwrap();
    let mut acks = Vec::new();
    let tickets: Vec<AppendTicket> = (0..5u8)
        .map(|i| store.append(&message(&[b'a' + i; 10]), 1).unwrap())
        .collect();
    settle(&mut store, 2, &mut acks);
    let entries = store.queue_entries("T", 0, 1, 3).unwrap();
    let offsets: Vec<u64> = entries.iter().map(|e| e.commit_log_offset).collect();
    let expected: Vec<u64> = tickets[1..4].iter().map(|t| t.commit_log_offset).collect();
    assert_eq!(offsets, expected);
    assert!(entries.iter().all(|e| e.size == tickets[0].wrote_bytes));
    assert_eq!(store.queue_entries("T", 0, 4, 10).unwrap().len(), 1);
    assert!(store.queue_entries("T", 0, 5, 10).unwrap().is_empty());
    assert!(store.queue_entries("T", 0, 500, 10).unwrap().is_empty());
    assert_eq!(store.queue_entries("T", 1, 0, 10), None);
    assert_eq!(store.queue_entries("U", 0, 0, 10), None);
    // An appended record not yet acknowledgeable is not listed.
    store.append(&message(b"unacked"), 3).unwrap();
    assert_eq!(store.queue_entries("T", 0, 0, 10).unwrap().len(), 5);
}

#[test]
fn topics_not_kept_lose_their_queues_and_kept_ones_stay() {
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(6)), config(FlushMode::Async), 0).unwrap();
    let mut acks = Vec::new();
    for (topic, queue_id) in [("T", 0), ("U", 0), ("U", 3), ("rmq_sys_x", 0)] {
        let mut message = message(b"body");
        message.topic = topic;
        message.queue_id = queue_id;
        store.append(&message, 1).unwrap();
    }
    settle(&mut store, 2, &mut acks);
    let (removed, error) = store.delete_topics_not_kept(|topic| topic == "T");
    assert!(error.is_none(), "{error:?}");
    assert_eq!(removed, ["U", "rmq_sys_x"]);
    assert_eq!(store.queue_entries("U", 0, 0, 10), None);
    assert_eq!(store.queue_entries("U", 3, 0, 10), None);
    assert_eq!(store.queue_entries("T", 0, 0, 10).unwrap().len(), 1);
    let (again, _) = store.delete_topics_not_kept(|topic| topic == "T");
    assert!(again.is_empty(), "nothing left to remove: {again:?}");
}

/// Polls `store` until ship `ticket` is done; its shipment or error.
fn await_ship(store: &mut Store<SimDisk>, ticket: u64) -> Result<Shipment, StorageError> {
    let (mut acks, mut done) = (Vec::new(), Vec::new());
    for _ in 0..1_000 {
        store
            .poll_wait(T0, std::time::Duration::ZERO, &mut acks)
            .unwrap();
        store.take_shipped(&mut done);
        if let Some(index) = done.iter().position(|shipped| match shipped {
            Ok(shipment) => shipment.ticket == ticket,
            Err((failed, _)) => *failed == ticket,
        }) {
            return done.swap_remove(index).map_err(|(_, error)| error);
        }
    }
    panic!("ship {ticket} never completed");
}

/// Ships `len` bytes at local `local` of shard 0 and takes them out of the
/// pipe as their owner would: head dropped, range kept, tail dropped.
fn ship_and_take(
    store: &mut Store<SimDisk>,
    pipe: &Arc<ShipPipe>,
    local: u64,
    len: usize,
) -> Vec<u8> {
    let offset = shard_offset(0, local);
    let ticket = store
        .start_ship(offset, len, pipe)
        .unwrap()
        .expect("the range is kept and acknowledgeable");
    let shipment = await_ship(store, ticket).unwrap();
    let blocks = shipment.head + shipment.len + shipment.tail;
    assert_eq!(shipment.offset, offset);
    assert_eq!(shipment.len, len);
    assert_eq!(shipment.head as u64, local % BLOCK_SIZE as u64);
    assert!(blocks.is_multiple_of(BLOCK_SIZE) && shipment.tail < BLOCK_SIZE);
    assert_eq!(
        pipe.held().unwrap(),
        blocks,
        "the whole blocks are in the pipe"
    );
    pipe.discard(shipment.head).unwrap();
    let mut bytes = vec![0; len];
    pipe.take(&mut bytes).unwrap();
    pipe.discard(shipment.tail).unwrap();
    assert_eq!(pipe.held().unwrap(), 0);
    bytes
}

#[test]
fn ranges_shipped_through_a_pipe_hold_the_bytes_a_read_gives() {
    let mut store = uncached_four_segments(41);
    let segment = store.config().segment_size_bytes;
    let pipe = Arc::new(ShipPipe::new(1 << 20).unwrap());
    let ranges = [
        (0, 1),
        (100, 5_000),
        (2 * BLOCK_SIZE as u64, 3 * BLOCK_SIZE),
        (segment - 3_000, 3_000),
        (segment + 4_095, 60_000),
    ];
    for (local, len) in ranges {
        let shipped = ship_and_take(&mut store, &pipe, local, len);
        let read = store
            .commit_log
            .read(&mut store.disk, shard_offset(0, local), len)
            .unwrap()
            .unwrap();
        assert!(shipped == read, "{len} bytes at {local}");
    }
    // Short splices (the sim's short reads) go on until every block is in.
    store.disk_mut().faults_mut().short_read_percent = 100;
    let shipped = ship_and_take(&mut store, &pipe, 2 * segment + 10, 65_000);
    assert!(store.disk().read_count() > 1, "more than one splice");
    let read = store
        .commit_log
        .read(&mut store.disk, shard_offset(0, 2 * segment + 10), 65_000);
    assert!(shipped == read.unwrap().unwrap());
}

#[test]
fn a_ship_is_refused_what_a_read_is_refused_and_a_pipe_it_does_not_fit() {
    let mut store = uncached_four_segments(42);
    let segment = store.config().segment_size_bytes;
    let end = store.commit_log().max_offset();
    let pipe = Arc::new(ShipPipe::new(1 << 20).unwrap());
    // Nothing past the acknowledgeable end, nothing of another shard, not
    // nothing.
    assert_eq!(store.start_ship(end - 10, 11, &pipe).unwrap(), None);
    assert!(matches!(
        store.start_ship(shard_offset(0, 0), 0, &pipe),
        Err(StorageError::InvalidArgument(_))
    ));
    assert!(matches!(
        store.start_ship(shard_offset(1, 0), 10, &pipe),
        Err(StorageError::InvalidArgument(_))
    ));
    // Not across a segment end.
    let across = store.start_ship(shard_offset(0, segment - 10), 20, &pipe);
    assert!(matches!(across, Err(StorageError::InvalidArgument(m)) if m.contains("segment end")));
    // Not into a pipe its blocks do not fit in: 2 bytes across a block
    // boundary are two blocks.
    let small = Arc::new(ShipPipe::new(BLOCK_SIZE).unwrap());
    assert_eq!(small.capacity(), BLOCK_SIZE);
    let refused = store.start_ship(shard_offset(0, BLOCK_SIZE as u64 - 1), 2, &small);
    assert!(
        matches!(refused, Err(StorageError::InvalidArgument(m)) if m.contains("more than the pipe's"))
    );
    // Not into a pipe that still holds an earlier ship's bytes.
    let ticket = store
        .start_ship(shard_offset(0, 0), 10, &pipe)
        .unwrap()
        .unwrap();
    await_ship(&mut store, ticket).unwrap();
    let again = store.start_ship(shard_offset(0, 0), 10, &pipe);
    assert!(
        matches!(again, Err(StorageError::InvalidArgument(m)) if m.contains("still holds 4096"))
    );
    // A failed splice comes back with its ticket and the error.
    let fresh = Arc::new(ShipPipe::new(1 << 20).unwrap());
    // (`faults_mut` counts reads from 0 again.)
    store.disk_mut().faults_mut().read_eio_nth = Some(1);
    let ticket = store
        .start_ship(shard_offset(0, 0), 10, &fresh)
        .unwrap()
        .unwrap();
    let failed = await_ship(&mut store, ticket);
    assert!(matches!(failed, Err(StorageError::Disk(e)) if e.raw_os_error() == Some(libc::EIO)));
}

#[test]
fn a_chunk_cut_anywhere_gives_its_whole_records_through_a_blank() {
    use ringmq_protocol::message::{Decoded, decode_entry};
    let mut store = uncached_four_segments(43);
    let segment = store.config().segment_size_bytes;
    let mut read = |from: u64, to: u64| {
        store
            .commit_log
            .read(&mut store.disk, shard_offset(0, from), (to - from) as usize)
            .unwrap()
            .unwrap()
    };
    // Where segment 0's records end (its BLANK), and the record before.
    let log = read(0, segment);
    let (mut at, mut last) = (0, 0);
    while let Ok(Decoded::Record(record)) = decode_entry(&log[at..], CrcCheck::Skip) {
        last = at;
        at += record.total_size() as usize;
    }
    assert!(matches!(
        decode_entry(&log[at..], CrcCheck::Skip),
        Ok(Decoded::Blank { .. })
    ));
    let blank = at as u64;
    // Through the BLANK's 8 bytes, however much of its padding came.
    for padding in [0, 10, segment - blank - 8] {
        let chunk = read(0, blank + 8 + padding);
        assert_eq!(replica_whole_len(0, &chunk).unwrap(), at + 8);
    }
    // A cut BLANK or a cut record: up to the record before it.
    assert_eq!(replica_whole_len(0, &read(0, blank + 5)).unwrap(), at);
    assert_eq!(replica_whole_len(0, &read(0, blank - 3)).unwrap(), last);
    // Not even the first record whole, or not a record at all.
    assert_eq!(
        replica_whole_len(last as u64, &read(last as u64, last as u64 + 40)).unwrap(),
        0
    );
    assert!(replica_whole_len(1, &read(1, 2_000)).is_err());
}

/// An offset that is no record's start (a made-up message id or VIEW
/// offset) points at bytes that may read as any TOTALSIZE: negative, or
/// far past a record's size. Both are answered "no record", in memory and
/// from the disk, where a negative one overflowed the range check and a
/// huge one would have read up to a whole segment.
#[test]
fn an_offset_inside_a_record_whose_bytes_read_as_a_wild_size_is_no_record() {
    let (mut store, _) =
        Store::open(SimDisk::new(SimConfig::new(1)), config(FlushMode::Sync), 0).unwrap();
    let mut body = b"negative:".to_vec();
    body.extend_from_slice(&(-7_i32).to_be_bytes());
    body.extend_from_slice(b"huge:");
    body.extend_from_slice(&(1_i32 << 30).to_be_bytes());
    body.extend_from_slice(b"zero:");
    body.extend_from_slice(&0_i32.to_be_bytes());
    let ticket = store.append(&message(&body), 42).unwrap();
    let mut acks = Vec::new();
    settle(&mut store, 43, &mut acks);
    let record = store
        .read_record(ticket.commit_log_offset)
        .unwrap()
        .unwrap();
    for marker in [&b"negative:"[..], b"huge:", b"zero:"] {
        let at = record
            .windows(marker.len())
            .position(|window| window == marker)
            .unwrap()
            + marker.len();
        let offset = ticket.commit_log_offset + at as u64;
        assert_eq!(store.read_record(offset).unwrap(), None, "{marker:?}");
        for read in [PullRead::Background, PullRead::AfterRead, PullRead::Sync] {
            assert_eq!(
                store.record_at(offset, read).unwrap(),
                RecordRead::Ready(None),
                "{marker:?} {read:?}"
            );
        }
    }
}

/// Appends `m-0` to `m-{n-1}` to T/0 and waits until they are written;
/// returns their bodies.
fn append_numbered(store: &mut Store<SimDisk>, n: usize) -> Vec<Vec<u8>> {
    let bodies: Vec<Vec<u8>> = (0..n).map(|i| format!("m-{i}").into_bytes()).collect();
    for body in &bodies {
        store.append(&message(body), 1).unwrap();
    }
    settle(store, 1, &mut Vec::new());
    bodies
}

/// The bodies of T/0 from offset 0, two reads' worth (up to 64).
fn first_bodies(store: &mut Store<SimDisk>) -> Vec<Vec<u8>> {
    let mut all = bodies(store, "T", 0);
    all.extend(bodies_from(store, "T", 0, all.len() as u64));
    all
}

#[test]
fn a_shutdown_whose_queue_writes_keep_failing_ends_and_the_next_start_rebuilds_them() {
    let (mut store, _) = Store::open(
        SimDisk::new(SimConfig::new(41)),
        config(FlushMode::Async),
        0,
    )
    .unwrap();
    let expected = append_numbered(&mut store, 50);
    // The disk fills up under the store: its CommitLog segments are
    // preallocated, its sparse ConsumeQueue and index files cannot grow.
    store.disk_mut().faults_mut().enospc_buffered_writes = true;
    let mut disk = store.shutdown(2_000, &mut Vec::new()).unwrap();
    disk.faults_mut().enospc_buffered_writes = false;
    let (mut store, report) = Store::open(disk, config(FlushMode::Async), 3_000).unwrap();
    assert!(report.abnormal, "the abort file stays for the next start");
    assert_eq!(store.consume_queues().get("T", 0).unwrap().max_offset(), 50);
    assert_eq!(first_bodies(&mut store), expected);
}

#[test]
fn an_abnormal_recovery_with_no_space_for_a_fresh_segment_zeroes_the_tail_in_place() {
    let mut sim = SimConfig::new(43);
    // One segment and a little: the fresh segment a fence needs cannot be
    // created.
    sim.capacity_bytes = COMMIT_LOG_SEGMENT_SIZE_MIN + 64 * 1024;
    let (mut store, _) = Store::open(SimDisk::new(sim), config(FlushMode::Async), 0).unwrap();
    let expected = append_numbered(&mut store, 50);
    for round in 0..2 {
        let disk = store.disk_mut().crash(CrashKind::ProcessKill);
        let (reopened, report) = Store::open(disk, config(FlushMode::Async), 2).unwrap();
        store = reopened;
        assert!(report.abnormal);
        assert!(
            !report.recovery.fenced,
            "round {round}: no room for a fence"
        );
        assert_eq!(report.recovery.append_from, report.recovery.scan.end);
        assert_eq!(first_bodies(&mut store), expected, "round {round}");
    }
    // Appends go on after the last record.
    let ticket = store.append(&message(b"after"), 3).unwrap();
    assert_eq!(ticket.queue_offset, 50);
    settle(&mut store, 3, &mut Vec::new());
    let disk = store.disk_mut().crash(CrashKind::ProcessKill);
    let (mut store, _) = Store::open(disk, config(FlushMode::Async), 4).unwrap();
    assert_eq!(bodies_from(&mut store, "T", 0, 50), [b"after".to_vec()]);
}
