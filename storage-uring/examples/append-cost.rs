//! append-cost: the CPU cost of `Store::append` on the simulated disk, for
//! instruction counting (`valgrind --tool=callgrind`); no real I/O, so only
//! the append path's own work is measured.
//!
//! ```text
//! cargo build --release -p ringmq-storage --example append-cost
//! valgrind --tool=callgrind target/release/examples/append-cost 100000
//! ```
//!
//! # Invariants
//! - Every append is acknowledged before the program ends.

use std::net::SocketAddr;

use ringmq_storage::disk::sim::{SimConfig, SimDisk};
use ringmq_storage::store::{AppendMessage, Store, StoreConfig, StoreFlushMode};

/// Appends between two store turns (as the storage bench does).
const APPENDS_PER_TURN: usize = 128;
/// Body size giving 1 KiB records with the bench's topic.
const BODY_SIZE: usize = 893;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let count: usize = std::env::args()
        .nth(1)
        .map_or(Ok(100_000), |arg| arg.parse())?;
    let disk = SimDisk::new(SimConfig::new(1));
    let mut config = StoreConfig::new("/append-cost", 0, SocketAddr::from(([127, 0, 0, 1], 10911)));
    config.flush_mode = StoreFlushMode::Async;
    let (mut store, _) = Store::open(disk, config, 1)?;
    let body = vec![0x5A_u8; BODY_SIZE];
    let born_host = SocketAddr::from(([127, 0, 0, 1], 40000));
    let mut acks = Vec::new();
    let mut acked = 0;
    let mut appended = 0;
    while appended < count {
        for _ in 0..APPENDS_PER_TURN.min(count - appended) {
            let message = AppendMessage {
                topic: "StorageBenchTopic",
                queue_id: 0,
                body: &body,
                properties: b"",
                flag: 0,
                sys_flag: 0,
                born_timestamp_ms: 1,
                born_host,
                reconsume_times: 0,
                prepared_transaction_offset: 0,
            };
            store.append(&message, 1)?;
            appended += 1;
        }
        store.poll(1, &mut acks)?;
        acked += acks.len();
        acks.clear();
    }
    while acked < count {
        store.poll(1, &mut acks)?;
        acked += acks.len();
        acks.clear();
    }
    println!(
        "appended={appended} acked={acked} wrote_bytes={}",
        store.commit_log_max_offset()
    );
    Ok(())
}
