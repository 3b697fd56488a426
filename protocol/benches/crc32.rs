//! Micro-benchmark of CRC-32/IEEE ([`crc32_ieee`]) against the `crc32fast`
//! path it replaces on CPUs with AVX-512 VPCLMULQDQ
//! ([`crc32_ieee_fallback`]), at the sizes an append hashes: the bytes
//! before a body (92 for an IPv4 record), after it (topic and properties),
//! and bodies of 128 B to 4 KiB.
//!
//! Each call hashes a slice starting at one of 64 offsets, so alignment
//! varies as it does for records in a write buffer. Prints one line per size:
//! `crc32_<bytes>_ns_per_op=<wide> fallback_ns_per_op=<crc32fast>
//! speedup=<ratio>`. Run with `cargo bench -p ringmq-protocol --bench crc32`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ringmq_protocol::message::crc32::{crc32_ieee, crc32_ieee_fallback};

const SIZES: [usize; 9] = [20, 60, 92, 128, 256, 512, 900, 1024, 4096];
const MEASURE_FOR: Duration = Duration::from_millis(700);
const OFFSETS: usize = 64;

/// Calls `op` with a rotating offset for about `MEASURE_FOR`; ns per call.
fn measure(mut op: impl FnMut(usize) -> u32) -> f64 {
    let mut sink = 0u32;
    for offset in 0..100_000 {
        sink ^= op(offset % OFFSETS);
    }
    let mut calls: u64 = 0;
    let start = Instant::now();
    loop {
        for offset in 0..OFFSETS * 1024 {
            sink ^= op(offset % OFFSETS);
        }
        calls += (OFFSETS * 1024) as u64;
        let elapsed = start.elapsed();
        if elapsed >= MEASURE_FOR {
            black_box(sink);
            return elapsed.as_nanos() as f64 / calls as f64;
        }
    }
}

fn main() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let bytes: Vec<u8> = (0..SIZES[SIZES.len() - 1] + OFFSETS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    for size in SIZES {
        let input = |offset: usize| black_box(&bytes[offset..offset + size]);
        let wide = measure(|offset| crc32_ieee(input(offset)));
        let fallback = measure(|offset| crc32_ieee_fallback(input(offset)));
        println!(
            "crc32_{size}_ns_per_op={wide:.1} fallback_ns_per_op={fallback:.1} speedup={:.2}",
            fallback / wide
        );
    }
}
