//! Micro-benchmark of what an append does to each record's bytes, as
//! `CommitLog::encode_records` does it: encode into a write buffer, then the
//! body's CRC (BODYCRC), then finish the record (`commit_log::finish_record`:
//! the CRC property's trailer, the grown lengths, the record CRC around the
//! body). 1 KiB bodies, an IPv4 record with
//! no properties of its own, records written one after another through an
//! 8 MiB buffer (so, as in a shard, the bytes written are out of the
//! caches when the buffer comes round again).
//!
//! Prints one line per step, each including the steps before it:
//! `<step>_ns_per_record=<ns>`. Run with
//! `cargo bench -p ringmq-storage --bench record_seal`; pin it to one CPU
//! (`taskset -c 1`) for repeatable figures.

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Instant;

use ringmq_protocol::message::{RecordSpec, crc32_ieee};
use ringmq_storage::commit_log::record_crc::{self, Sealer};
use ringmq_storage::commit_log::{crc_combine, finish_record};

const BODY_SIZE: usize = 1024;
const BUFFER_SIZE: usize = 8 << 20;
const RECORDS: usize = 4_000_000;

#[derive(Clone, Copy, PartialEq)]
enum Steps {
    Encode,
    BodyCrc,
    Seal,
}

/// ns per record for `steps`.
fn measure(steps: Steps, buffer: &mut [u8], body: &[u8]) -> f64 {
    let host = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 10911));
    let mut sealer = Sealer::default();
    let combine_fast = crc_combine::is_hardware_accelerated();
    let mut pos = 0;
    let start = Instant::now();
    for n in 0..RECORDS {
        let mut spec = RecordSpec {
            topic: "BenchTopic",
            body,
            properties: b"",
            queue_id: (n % 8) as i32,
            flag: 0,
            queue_offset: n as i64,
            commit_log_offset: pos as i64,
            sys_flag: 0,
            born_timestamp_ms: 1_700_000_000_000 + n as i64,
            born_host: host,
            store_timestamp_ms: 1_700_000_000_000 + n as i64,
            store_host: host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body_crc: None,
            version: None,
        };
        let body_crc = if steps == Steps::Encode {
            // Any value: BODYCRC is not computed in this step.
            n as u32
        } else {
            crc32_ieee(spec.body)
        };
        spec.body_crc = Some(body_crc);
        let size = spec.encoded_len() + record_crc::added_len(spec.properties);
        if pos + size > buffer.len() {
            pos = 0;
        }
        let record = &mut buffer[pos..pos + size];
        let encoded = spec.encode_into(record).expect("the record fits its size");
        if steps == Steps::Seal {
            finish_record(record, encoded, &spec, body_crc, &mut sealer, combine_fast);
        }
        pos += size;
    }
    let ns = start.elapsed().as_nanos() as f64 / RECORDS as f64;
    black_box(&buffer[..64]);
    ns
}

fn main() {
    let body: Vec<u8> = (0..BODY_SIZE).map(|i| (i * 31 % 251) as u8).collect();
    let mut buffer = vec![0u8; BUFFER_SIZE];
    // One pass to touch the buffer's pages.
    measure(Steps::Seal, &mut buffer, &body);
    for (name, steps) in [
        ("encode", Steps::Encode),
        ("encode_body_crc", Steps::BodyCrc),
        ("encode_body_crc_seal", Steps::Seal),
    ] {
        println!(
            "{name}_ns_per_record={:.1}",
            measure(steps, &mut buffer, &body)
        );
    }
}
