//! ship-cost: what sending older CommitLog bytes to a socket costs, by the
//! two paths a master has: the copy path replication uses today (a
//! background read into a span, `replica_chunk` copies whole records out,
//! `write` copies them into the socket) and splice (`Store::start_ship`:
//! segment → pipe in the kernel, pipe → socket). A receiver thread reads
//! everything from a loopback TCP connection and throws it away.
//!
//! ```text
//! cargo run --release -p ringmq-storage --example ship-cost -- DIR [MB] [CHUNK_KIB] [ROUNDS] [PATHS]
//! ```
//!
//! DIR is emptied and filled with MB megabytes (default 2,048) of 1 KiB
//! records (ASYNC_FLUSH, no tail cache, so every byte comes from the disk
//! on either path); then, ROUNDS times (default 3), each path ships the
//! whole log in chunks of CHUNK_KIB (default 1,024), one chunk at a time,
//! and splice once more with two chunks in flight (the next one's splice
//! from the disk overlapping the current one's send): PATHS, default
//! `copy,splice,splice2`. One line per run:
//! `path`, `mb_per_s`, and the CPU of the sending side (the process less
//! the receiver thread; io_uring's workers that run the splices are
//! threads of the process) and of the receiver, in µs per MB. Each round
//! first measures the disk alone in that shape (`floor_read_mb_per_s`: the
//! segments read with O_DIRECT, 1 MiB at a time, one read in flight).
//!
//! # Invariants
//! - Both paths send the log from its start to its end, and the receiver
//!   gets every byte sent (the run fails otherwise). The copy path sends a
//!   BLANK at a segment's end as its 8 bytes (as replication does), splice
//!   the whole padding.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringmq_storage::aligned::AlignedBuf;
use ringmq_storage::commit_log::{ReplicaChunk, ShipPipe, Shipment};
use ringmq_storage::disk::uring::{UringDisk, UringDiskConfig};
use ringmq_storage::store::{AppendMessage, PullRead, Store, StoreConfig, StoreFlushMode};

/// Appends between two store turns (as the storage bench does).
const APPENDS_PER_TURN: usize = 128;
/// Body size giving 1 KiB records with this topic.
const BODY_SIZE: usize = 893;
/// The largest pipe asked for.
const PIPE_SIZE_MAX: usize = 1 << 20;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: ship-cost DIR [MB] [CHUNK_KIB] [ROUNDS] [PATHS]")?,
    );
    let mb: u64 = args.next().map_or(Ok(2_048), |a| a.parse())?;
    let chunk = args.next().map_or(Ok(1_024), |a| a.parse::<usize>())? * 1024;
    let rounds: usize = args.next().map_or(Ok(3), |a| a.parse())?;
    let paths: Vec<String> = args
        .next()
        .unwrap_or_else(|| "copy,splice,splice2".to_string())
        .split(',')
        .map(str::to_string)
        .collect();
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let mut store = fill(&dir, mb << 20)?;
    let (start, end) = (store.commit_log_min_offset(), store.commit_log_max_offset());
    println!("log bytes={} chunk={chunk}", end - start);
    // A pipe holds at most /proc/sys/fs/pipe-max-size (1 MiB by default)
    // without CAP_SYS_RESOURCE, and a range takes up to two blocks more.
    let pipe_size = (chunk + 8192).min(PIPE_SIZE_MAX);
    let pipes = [
        Arc::new(ShipPipe::new(pipe_size)?),
        Arc::new(ShipPipe::new(pipe_size)?),
    ];
    let splice_chunk = chunk.min(pipes[0].capacity() - 8192);
    println!("splice_chunk={splice_chunk}");
    let segment_paths: Vec<PathBuf> = store
        .commit_log()
        .segments()
        .segments()
        .iter()
        .map(|segment| segment.path.clone())
        .collect();
    for round in 0..rounds {
        let floor = read_floor(&segment_paths, end - start)?;
        println!("round={round} floor_read_mb_per_s={floor:.0}");
        for path in paths.iter().map(String::as_str) {
            let (mut sender, receiver) = connected()?;
            let began = Instant::now();
            let cpu_before = process_cpu();
            let sent = match path {
                "copy" => send_copies(&mut store, &mut sender, start, end, chunk)?,
                "splice" => {
                    send_spliced(&mut store, &sender, &pipes[..1], start, end, splice_chunk)?
                }
                "splice2" => send_spliced(&mut store, &sender, &pipes, start, end, splice_chunk)?,
                other => return Err(format!("unknown path {other:?}").into()),
            };
            drop(sender);
            let (received, receiver_cpu) =
                receiver.join().map_err(|_| "the receiver panicked")??;
            let elapsed = began.elapsed().as_secs_f64();
            let process = process_cpu() - cpu_before;
            if received != sent {
                return Err(format!("{path}: received {received} of {sent} bytes").into());
            }
            let mb = received as f64 / 1e6;
            println!(
                "round={round} path={path} mb_per_s={:.0} sender_cpu_us_per_mb={:.0} receiver_cpu_us_per_mb={:.0}",
                mb / elapsed,
                (process - receiver_cpu) * 1e6 / mb,
                receiver_cpu * 1e6 / mb
            );
        }
    }
    Ok(())
}

/// The disk alone in the paths' shape: the log's segments read with
/// O_DIRECT in 1 MiB reads, one at a time, up to `bytes`; MB/s.
fn read_floor(segments: &[PathBuf], bytes: u64) -> Result<f64, Error> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    const READ: usize = 1 << 20;
    let mut buf = AlignedBuf::new(READ);
    let began = Instant::now();
    let mut read = 0u64;
    for path in segments {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)?;
        let mut offset = 0u64;
        while read < bytes {
            let count = file.read_at(&mut buf.as_full_mut_slice()[..READ], offset)?;
            if count == 0 {
                break;
            }
            offset += count as u64;
            read += count as u64;
        }
    }
    Ok(read as f64 / 1e6 / began.elapsed().as_secs_f64())
}

/// A store in `dir` holding `bytes` of 1 KiB records, all acknowledged.
fn fill(dir: &std::path::Path, bytes: u64) -> Result<Store<UringDisk>, Error> {
    let disk = UringDisk::new(UringDiskConfig {
        fixed_buffer_count: 8,
        fixed_buffer_size: 1 << 20,
        ..UringDiskConfig::default()
    })?;
    let host = SocketAddr::from(([127, 0, 0, 1], 10911));
    let mut config = StoreConfig::new(dir, 0, host);
    config.flush_mode = StoreFlushMode::Async;
    config.tail_cache_bytes = 0;
    let (mut store, _) = Store::open(disk, config, now_ms())?;
    let body = vec![0x5A_u8; BODY_SIZE];
    let mut acks = Vec::new();
    let (mut appended, mut acked) = (0u64, 0u64);
    while store.commit_log_max_offset() < bytes {
        for _ in 0..APPENDS_PER_TURN {
            let message = AppendMessage {
                topic: "ShipCostTopic",
                queue_id: 0,
                body: &body,
                properties: b"",
                flag: 0,
                sys_flag: 0,
                born_timestamp_ms: 1,
                born_host: host,
                reconsume_times: 0,
                prepared_transaction_offset: 0,
            };
            match store.append(&message, now_ms()) {
                Ok(_) => appended += 1,
                Err(ringmq_storage::error::StorageError::Busy { .. }) => break,
                Err(error) => return Err(error.into()),
            }
        }
        store.poll_wait(now_ms(), Duration::from_millis(1), &mut acks)?;
        acked += acks.len() as u64;
        acks.clear();
    }
    while acked < appended {
        store.poll_wait(now_ms(), Duration::from_millis(10), &mut acks)?;
        acked += acks.len() as u64;
        acks.clear();
    }
    Ok(store)
}

/// The copy path: whole records read in the background, copied out, written.
fn send_copies(
    store: &mut Store<UringDisk>,
    socket: &mut TcpStream,
    start: u64,
    end: u64,
    chunk: usize,
) -> Result<u64, Error> {
    let (mut acks, mut done) = (Vec::new(), Vec::new());
    let mut sent = 0;
    let mut from = start;
    let mut read = PullRead::Background;
    while from < end {
        match store.replica_chunk(from, chunk, read)? {
            ReplicaChunk::Bytes(bytes) => {
                socket.write_all(&bytes)?;
                sent += bytes.len() as u64;
                from = store.replica_chunk_end(from, &bytes);
                read = PullRead::Background;
            }
            ReplicaChunk::Reading(ticket) => {
                while !done.contains(&ticket) {
                    store.poll_wait(now_ms(), Duration::from_millis(100), &mut acks)?;
                    store.take_span_reads(&mut done);
                }
                done.clear();
                read = PullRead::AfterRead;
            }
        }
    }
    Ok(sent)
}

/// The splice path, with as many chunks in flight as `pipes`.
fn send_spliced(
    store: &mut Store<UringDisk>,
    socket: &TcpStream,
    pipes: &[Arc<ShipPipe>],
    start: u64,
    end: u64,
    chunk: usize,
) -> Result<u64, Error> {
    let segment = store.config().segment_size_bytes;
    let (mut acks, mut done) = (Vec::new(), Vec::new());
    // Ships in log order: (ticket, pipe index, shipment once done).
    let mut in_flight: VecDeque<(u64, usize, Option<Shipment>)> = VecDeque::new();
    let mut next = start;
    let mut free: Vec<usize> = (0..pipes.len()).rev().collect();
    while next < end || !in_flight.is_empty() {
        while next < end
            && let Some(pipe) = free.pop()
        {
            let segment_end = next - next % segment + segment;
            let len = (end.min(segment_end) - next).min(chunk as u64) as usize;
            let ticket = store
                .start_ship(next, len, &pipes[pipe])?
                .ok_or("a range of the log is not readable")?;
            in_flight.push_back((ticket, pipe, None));
            next += len as u64;
        }
        store.poll_wait(now_ms(), Duration::from_millis(100), &mut acks)?;
        store.take_shipped(&mut done);
        for shipped in done.drain(..) {
            let shipment = shipped.map_err(|(_, error)| error)?;
            let slot = in_flight
                .iter_mut()
                .find(|(ticket, ..)| *ticket == shipment.ticket)
                .ok_or("a ship completed that was not started")?;
            slot.2 = Some(shipment);
        }
        while let Some((_, pipe, Some(shipment))) = in_flight.front() {
            let pipe_index = *pipe;
            let shipment = *shipment;
            let pipe = &pipes[pipe_index];
            pipe.discard(shipment.head)?;
            pipe.splice_to(socket.as_raw_fd(), shipment.len)?;
            pipe.discard(shipment.tail)?;
            in_flight.pop_front();
            free.push(pipe_index);
        }
    }
    Ok(end - start)
}

type Receiver = std::thread::JoinHandle<Result<(u64, f64), std::io::Error>>;

/// A loopback connection and the thread reading its far end: bytes
/// received and the thread's CPU seconds.
fn connected() -> Result<(TcpStream, Receiver), Error> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let sender = TcpStream::connect(listener.local_addr()?)?;
    let (mut far, _) = listener.accept()?;
    let receiver = std::thread::spawn(move || {
        let before = thread_cpu();
        let mut buf = vec![0u8; 1 << 20];
        let mut received = 0u64;
        loop {
            let count = far.read(&mut buf)?;
            if count == 0 {
                return Ok((received, thread_cpu() - before));
            }
            received += count as u64;
        }
    });
    Ok((sender, receiver))
}

fn rusage_seconds(who: libc::c_int) -> f64 {
    // SAFETY: getrusage fills the struct.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(who, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

fn process_cpu() -> f64 {
    rusage_seconds(libc::RUSAGE_SELF)
}

fn thread_cpu() -> f64 {
    rusage_seconds(libc::RUSAGE_THREAD)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
