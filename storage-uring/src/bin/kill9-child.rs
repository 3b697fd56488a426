//! Child process of `tests/kill9.rs`: opens a [`Store`] on the real io_uring
//! disk with SYNC_FLUSH in `<dir>`, appends deterministic messages with many
//! in flight, and prints one line per acknowledged record:
//!
//! ```text
//! READY
//! ACK <commit_log_offset> <queue_id> <queue_offset> <record bytes as hex>
//! ```
//!
//! until it is killed (the parent sends SIGKILL at a random moment) or has
//! appended `<count>` messages. Exit code 3 with `SKIP <reason>` on stdout
//! when io_uring cannot be used here.
//!
//! Usage: `kill9-child <dir> <count> <seed>`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use ringmq_storage::commit_log::appender::FlushMode;
use ringmq_storage::disk::uring::{UringDisk, UringDiskConfig};
use ringmq_storage::store::{AckStatus, AppendMessage, Store, StoreConfig};

/// Appends kept in flight at once.
const IN_FLIGHT_MAX: usize = 64;
/// Queues the messages spread over.
const QUEUE_COUNT: u32 = 4;
/// Topic of every message.
const TOPIC: &str = "Kill9Topic";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The body of message `index` for `seed` (the parent regenerates it).
fn body(seed: u64, index: u64) -> Vec<u8> {
    let len = 16 + ((seed ^ index).wrapping_mul(0x9E37_79B9) % 2000) as usize;
    (0..len)
        .map(|i| (index as u8).wrapping_add(i as u8).wrapping_mul(31))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .context("usage: kill9-child <dir> <count> <seed>")?,
    );
    let count: u64 = args
        .next()
        .context("count")?
        .parse()
        .context("count is a number")?;
    let seed: u64 = args
        .next()
        .context("seed")?
        .parse()
        .context("seed is a number")?;
    let disk_config = UringDiskConfig {
        allow_buffered_fallback: true,
        ..UringDiskConfig::default()
    };
    let disk = match UringDisk::new(disk_config) {
        Ok(disk) => disk,
        Err(error) => {
            println!("SKIP io_uring unavailable: {error}");
            std::process::exit(3);
        }
    };
    let host = SocketAddr::from(([127, 0, 0, 1], 10911));
    let mut config = StoreConfig::new(&dir, 0, host);
    config.flush_mode = FlushMode::Sync;
    config.segment_size_bytes = 1024 * 1024;
    // Only the test's own records matter: retention must not force-clean
    // them on a shared machine whose disk happens to be nearly full.
    config.retention.clean_file_forcibly_enable = false;
    let (mut store, _report) = Store::open(disk, config, now_ms()).context("opening the store")?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "READY")?;
    out.flush()?;
    let mut acks = Vec::new();
    let mut offsets = std::collections::HashMap::new();
    let mut next = 0;
    while next < count || store.pending_appends() > 0 {
        while next < count && store.pending_appends() < IN_FLIGHT_MAX {
            let body = body(seed, next);
            let properties = format!("KEYS\u{1}k{next}\u{2}");
            let message = AppendMessage {
                topic: TOPIC,
                queue_id: (next % u64::from(QUEUE_COUNT)) as u32,
                body: &body,
                properties: properties.as_bytes(),
                flag: next as i32,
                sys_flag: 0,
                born_timestamp_ms: now_ms() as i64,
                born_host: host,
                reconsume_times: 0,
                prepared_transaction_offset: 0,
            };
            let ticket = store.append(&message, now_ms()).context("append")?;
            offsets.insert(
                ticket.id,
                (
                    ticket.commit_log_offset,
                    message.queue_id,
                    ticket.queue_offset,
                ),
            );
            next += 1;
        }
        store
            .poll_wait(now_ms(), Duration::from_millis(10), &mut acks)
            .context("poll")?;
        for ack in acks.drain(..) {
            anyhow::ensure!(
                ack.status == AckStatus::Ok,
                "append failed: {:?}",
                ack.status
            );
            let (offset, queue_id, queue_offset) =
                offsets.remove(&ack.id).context("unknown ack")?;
            let record = store
                .read_record(offset)?
                .context("an acked record is readable")?;
            writeln!(
                out,
                "ACK {offset} {queue_id} {queue_offset} {}",
                hex(&record)
            )?;
        }
        out.flush()?;
    }
    Ok(())
}
