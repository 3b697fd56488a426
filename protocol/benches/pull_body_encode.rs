//! Micro-benchmark of the two hot paths of message records: encoding records
//! from their fields into a shard's write buffer, and assembling a pull body
//! from stored records.
//!
//! Workload: 32 records, 128-byte bodies, the properties a Java 5.x producer and
//! the broker put on a normal send (`KEYS`, `UNIQ_KEY`, `WAIT`, `TAGS`,
//! `CLUSTER`, `MSG_REGION`, `TRACE_ON`), IPv4 hosts, a 9-byte topic. Output
//! buffers are reused across iterations, as the broker reuses its buffers.
//!
//! Prints `record_encode_ns_per_op=<n>` (one record from `RecordSpec`, CRC
//! included) and `pull_body_encode_32_ns_per_op=<n>` (one pull body of 32 stored
//! records). Run with `cargo bench -p ringmq-protocol --bench pull_body_encode`.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ringmq_protocol::message::{PropertiesBuilder, RecordSpec, encode_pull_body};

const RECORD_COUNT: usize = 32;
const BODY_SIZE: usize = 128;
const MEASURE_FOR: Duration = Duration::from_millis(1500);
const WARM_UP_FOR: Duration = Duration::from_millis(300);

/// Runs `op` repeatedly for about `MEASURE_FOR` after a warm-up; returns ns per call.
fn measure(mut op: impl FnMut()) -> f64 {
    let warm_up_end = Instant::now() + WARM_UP_FOR;
    while Instant::now() < warm_up_end {
        op();
    }
    let mut calls: u64 = 0;
    let mut batch: u64 = 64;
    let start = Instant::now();
    loop {
        for _ in 0..batch {
            op();
        }
        calls += batch;
        let elapsed = start.elapsed();
        if elapsed >= MEASURE_FOR {
            return elapsed.as_nanos() as f64 / calls as f64;
        }
        batch = batch.saturating_mul(2).min(1 << 20);
    }
}

fn properties(index: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let uniq_key = format!("C0A80005303918B4AAC21D5C1A2B{index:04X}");
    PropertiesBuilder::new(&mut out)
        .push("KEYS", &format!("order-{index}"))
        .and_then(|b| b.push("UNIQ_KEY", &uniq_key))
        .and_then(|b| b.push("WAIT", "true"))
        .and_then(|b| b.push("TAGS", "TagA"))
        .and_then(|b| b.push("CLUSTER", "DefaultCluster"))
        .and_then(|b| b.push("MSG_REGION", "DefaultRegion"))
        .and_then(|b| b.push("TRACE_ON", "true"))
        .expect("benchmark properties are valid");
    out
}

fn main() {
    let born_host: SocketAddr = "10.0.0.7:54321".parse().expect("literal address");
    let store_host: SocketAddr = "192.168.0.10:10911".parse().expect("literal address");
    let bodies: Vec<Vec<u8>> = (0..RECORD_COUNT)
        .map(|i| (0..BODY_SIZE).map(|j| (i * 31 + j) as u8).collect())
        .collect();
    let props: Vec<Vec<u8>> = (0..RECORD_COUNT).map(properties).collect();
    let specs: Vec<RecordSpec<'_>> = (0..RECORD_COUNT)
        .map(|i| RecordSpec {
            topic: "TopicTest",
            body: &bodies[i],
            properties: &props[i],
            queue_id: 1,
            queue_offset: i as i64,
            commit_log_offset: (i * 300) as i64,
            born_timestamp_ms: 1_700_000_000_000,
            born_host,
            store_timestamp_ms: 1_700_000_000_100,
            store_host,
            ..RecordSpec::default()
        })
        .collect();

    // (a) Encode 32 records into one reused buffer.
    let mut write_buffer: Vec<u8> = Vec::with_capacity(64 * 1024);
    let encode_32_ns = measure(|| {
        write_buffer.clear();
        for spec in &specs {
            black_box(spec)
                .encode_append(&mut write_buffer)
                .expect("benchmark record encodes");
        }
        black_box(&write_buffer);
    });

    // The stored records the pull path reads back.
    let mut stored = Vec::new();
    for spec in &specs {
        spec.encode_append(&mut stored)
            .expect("benchmark record encodes");
    }
    let mut slices = Vec::with_capacity(RECORD_COUNT);
    let mut at = 0;
    for spec in &specs {
        let len = spec.encoded_len();
        slices.push(&stored[at..at + len]);
        at += len;
    }

    // (b) Assemble a pull body from 32 stored records into a reused buffer.
    let mut body = Vec::with_capacity(stored.len());
    let pull_ns = measure(|| {
        body.clear();
        encode_pull_body(black_box(&slices).iter().copied(), &mut body)
            .expect("stored records are whole");
        black_box(&body);
    });

    let record_len = stored.len() / RECORD_COUNT;
    println!(
        "workload: {RECORD_COUNT} records, body {BODY_SIZE} B, record {record_len} B, pull body {} B",
        stored.len()
    );
    println!(
        "record_encode_ns_per_op={:.1}",
        encode_32_ns / RECORD_COUNT as f64
    );
    println!("record_encode_32_ns_per_op={encode_32_ns:.1}");
    println!("pull_body_encode_32_ns_per_op={pull_ns:.1}");
}
