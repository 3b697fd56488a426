//! Decode cost of a SEND_MESSAGE_V2 request as the Java 5.3 client sends it
//! (JSON header as in protocol reference 2.3.2, 128-byte body).
//!
//! Run: `cargo bench -p ringmq-protocol --bench command_decode`. Prints
//! `send_v2_decode_ns_per_op=<n>` (frame + command + typed header) and the
//! parts on their own, each the fastest of 20 batches of 100,000 operations.
//! Not a test: it asserts nothing about speed.

use std::hint::black_box;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use ringmq_protocol::code::SerializeType;
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::frame::{decode_frame, write_frame};
use ringmq_protocol::header::{CustomHeader, SendMessageRequestHeaderV2};
use ringmq_protocol::limits::FRAME_SIZE_MAX;

/// Operations per figure; `BENCH_ITERATIONS` overrides (e.g. under valgrind).
const ITERATIONS_DEFAULT: u32 = 2_000_000;
const BATCH_COUNT: u32 = 20;

/// The header bytes a Java 5.3 producer writes (fastjson, sorted members,
/// control characters in the properties escaped as `\u0001` / `\u0002`).
const JAVA_SEND_V2_HEADER: &str = concat!(
    r#"{"code":310,"extFields":{"a":"ProducerGroupA","b":"TopicTest","c":"TBW102","d":"4","#,
    r#""e":"1","f":"0","g":"1700000000000","h":"0","i":"KEYS\u0001order-1\u0002UNIQ_KEY\u0001"#,
    r#"C0A80005303918B4AAC21D5C1A2B0001\u0002WAIT\u0001true\u0002TAGS\u0001TagA\u0002","j":"0","#,
    r#""k":"false","m":"false","n":"broker-a"},"flag":0,"language":"JAVA","opaque":12,"#,
    r#""serializeTypeCurrentRPC":"JSON","version":479}"#
);

fn frame(serialize_type: SerializeType) -> Bytes {
    let mut header = Vec::new();
    match serialize_type {
        SerializeType::Json => header.extend_from_slice(JAVA_SEND_V2_HEADER.as_bytes()),
        SerializeType::RocketMq => {
            let command = RemotingCommand::decode_header(
                SerializeType::Json,
                &Bytes::from_static(JAVA_SEND_V2_HEADER.as_bytes()),
            )
            .expect("example header decodes");
            command
                .encode_header(SerializeType::RocketMq, &mut header)
                .expect("fits binary");
        }
    }
    let mut buffer = BytesMut::new();
    write_frame(&mut buffer, serialize_type, &header, &[0x5A; 128]).expect("frame fits");
    // As a connection reader gets it: split off its read buffer and frozen.
    buffer.split().freeze()
}

/// Nanoseconds this thread has spent on a CPU (`/proc/thread-self/schedstat`,
/// first field), or `None` where that file does not exist.
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Runs `op` `ITERATIONS` times in `BATCH_COUNT` batches and reports the
/// fastest batch. The machine is shared (2 cores, several builds), so the
/// time of a batch is this thread's CPU time when the kernel reports it
/// (time spent descheduled is not decode cost), wall time otherwise.
fn time(name: &str, mut op: impl FnMut()) -> f64 {
    let iterations = std::env::var("BENCH_ITERATIONS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(ITERATIONS_DEFAULT)
        .max(BATCH_COUNT);
    for _ in 0..iterations / 20 {
        op();
    }
    let batch_size = iterations / BATCH_COUNT;
    let mut best = f64::INFINITY;
    let mut best_wall = f64::INFINITY;
    for _ in 0..BATCH_COUNT {
        let cpu_start = thread_cpu_ns();
        let start = Instant::now();
        for _ in 0..batch_size {
            op();
        }
        let wall_ns = start.elapsed().as_nanos() as f64;
        let cpu_ns = match (cpu_start, thread_cpu_ns()) {
            (Some(start), Some(end)) => (end - start) as f64,
            _ => wall_ns,
        };
        best = best.min(cpu_ns / f64::from(batch_size));
        best_wall = best_wall.min(wall_ns / f64::from(batch_size));
    }
    println!("{name}={best:.1}");
    println!("# {name} wall={best_wall:.1}");
    best
}

fn main() {
    for serialize_type in [SerializeType::Json, SerializeType::RocketMq] {
        let frame = frame(serialize_type);
        let raw = decode_frame(&frame, FRAME_SIZE_MAX)
            .expect("valid")
            .expect("complete");
        let command = RemotingCommand::from_frame(&raw).expect("header decodes");
        let header = SendMessageRequestHeaderV2::from_ext(&command.ext_fields).expect("fields");
        assert_eq!(header.topic, "TopicTest");
        assert_eq!(command.body_bytes().len(), 128);

        let prefix = match serialize_type {
            SerializeType::Json => "send_v2",
            SerializeType::RocketMq => "send_v2_binary",
        };
        println!(
            "# {prefix}: frame {} bytes, header {} bytes",
            frame.len(),
            raw.header.len()
        );
        time(&format!("{prefix}_frame_ns_per_op"), || {
            black_box(decode_frame(black_box(&frame), FRAME_SIZE_MAX).ok());
        });
        time(&format!("{prefix}_command_header_ns_per_op"), || {
            black_box(RemotingCommand::decode_header(serialize_type, black_box(&raw.header)).ok());
        });
        time(&format!("{prefix}_typed_header_ns_per_op"), || {
            black_box(SendMessageRequestHeaderV2::from_ext(black_box(&command.ext_fields)).ok());
        });
        time(&format!("{prefix}_decode_ns_per_op"), || {
            let raw = decode_frame(black_box(&frame), FRAME_SIZE_MAX)
                .expect("valid")
                .expect("complete");
            let command = RemotingCommand::from_frame(&raw).expect("header decodes");
            black_box(SendMessageRequestHeaderV2::from_ext(&command.ext_fields).ok());
            black_box(command);
        });
    }
}
