//! Real io_uring tests of the reactor (`ring`) and of `UringDisk`, in temp
//! directories under /tmp. Each test first checks that io_uring can be set
//! up; where it cannot, it prints `skipped: io_uring unavailable: <reason>`
//! and returns.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ringmq_storage::aligned::{AlignedBuf, BLOCK_SIZE};
use ringmq_storage::disk::uring::{UringDisk, UringDiskConfig};
use ringmq_storage::disk::{
    Disk, DiskCompletion, DiskError, DiskOp, FileId, OpId, OpTag, OpenOptions, Wait,
};
use ringmq_storage::limits::{PLAIN_BUFFER_SPARE_BYTES_MAX, PLAIN_BUFFER_SPARES_MAX};
use ringmq_storage::ring::{Completion, Op, Ring, RingConfig, SharedRing, TurnOutput};
use ringmq_storage::store::{AppendMessage, Store, StoreConfig};

/// A directory under /tmp removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("ringmq-uring-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("creating the test directory");
        TempDir(path)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ring_or_skip() -> Option<Ring> {
    match Ring::new(RingConfig::default()) {
        Ok(ring) => Some(ring),
        Err(error) => {
            println!("skipped: io_uring unavailable: {error}");
            None
        }
    }
}

fn disk_or_skip(config: UringDiskConfig) -> Option<UringDisk> {
    match UringDisk::new(config) {
        Ok(disk) => Some(disk),
        Err(error) => {
            println!("skipped: io_uring unavailable: {error}");
            None
        }
    }
}

fn small_disk_config() -> UringDiskConfig {
    UringDiskConfig {
        fixed_buffer_count: 2,
        fixed_buffer_size: 16 * 1024,
        ..UringDiskConfig::default()
    }
}

/// A store in `dir` on a real ring (buffered where O_DIRECT is refused),
/// 1 MiB segments, `tweak` applied to its config; None (skipped) without
/// io_uring.
fn small_store(dir: &TempDir, tweak: impl FnOnce(&mut StoreConfig)) -> Option<Store<UringDisk>> {
    let disk = disk_or_skip(UringDiskConfig {
        allow_buffered_fallback: true,
        ..small_disk_config()
    })?;
    let mut config = StoreConfig::new(&dir.0, 0, STORE_HOST);
    config.segment_size_bytes = 1 << 20;
    tweak(&mut config);
    Some(Store::open(disk, config, 1).expect("opening the store").0)
}

/// The store's host in [`small_store`]s, and their messages' born host.
const STORE_HOST: std::net::SocketAddr = std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    10911,
));

/// A message of topic `T` for `queue_id` with `body` and nothing else.
fn message(queue_id: u32, body: &[u8]) -> AppendMessage<'_> {
    AppendMessage {
        topic: "T",
        queue_id,
        body,
        properties: b"",
        flag: 0,
        sys_flag: 0,
        born_timestamp_ms: 1,
        born_host: STORE_HOST,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
    }
}

fn id(seq: u64) -> OpId {
    OpId::new(OpTag::Other, seq)
}

/// Polls until `count` completions arrived (or 10 s passed).
fn wait_for(disk: &mut UringDisk, count: usize) -> Vec<DiskCompletion> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    while out.len() < count && Instant::now() < deadline {
        disk.poll(&mut out, 64, Wait::AtLeastOne(Duration::from_millis(500)))
            .expect("disk poll");
    }
    assert_eq!(out.len(), count, "completions after 10 s");
    out
}

/// Turns the ring until `count` completions arrived (or 10 s passed).
fn turn_until(ring: &mut Ring, count: usize) -> Vec<Completion> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = TurnOutput::new();
    while out.completions.len() < count && Instant::now() < deadline {
        ring.turn(Some(Duration::from_millis(500)), 64, &mut out)
            .expect("ring turn");
    }
    assert_eq!(out.completions.len(), count, "completions after 10 s");
    out.completions
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn filled_buf(data: &[u8]) -> AlignedBuf {
    let mut buf = AlignedBuf::new(data.len());
    buf.as_full_mut_slice()[..data.len()].copy_from_slice(data);
    buf.set_len(data.len());
    buf
}

fn open_file(path: &Path, flags: i32) -> OwnedFd {
    let c_path =
        std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path without NUL");
    // SAFETY: test helper; the path is NUL-terminated and outlives the call.
    let fd = unsafe { libc::open(c_path.as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
    assert!(
        fd >= 0,
        "open {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    // SAFETY: a fresh descriptor.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

#[test]
fn setup_records_which_flags_the_kernel_accepted() {
    let Some(ring) = ring_or_skip() else { return };
    let flags = ring.setup_flags();
    println!("io_uring setup flags accepted: {flags:?}");
    assert!(
        !flags.defer_taskrun || flags.single_issuer,
        "DEFER_TASKRUN needs SINGLE_ISSUER: {flags:?}"
    );
    assert!(ring.capacity() >= 8);
}

#[test]
fn direct_write_then_read_round_trips() {
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    let dir = TempDir::new("direct-round-trip");
    let path = dir.path("00000000000000000000");
    let file = disk
        .open(&path, OpenOptions::create_direct(1 << 20))
        .unwrap();
    assert!(
        disk.is_o_direct(file).unwrap(),
        "/tmp should support O_DIRECT"
    );
    assert_eq!(disk.file_size(file).unwrap(), 1 << 20);
    let data = pattern(3 * BLOCK_SIZE, 7);
    let write = DiskOp::Write {
        file,
        file_offset: 8192,
        buf: filled_buf(&data),
        buf_range: 0..data.len(),
    };
    disk.submit(id(1), write, false).unwrap();
    let done = wait_for(&mut disk, 1);
    assert_eq!(done[0].op_id, id(1));
    assert_eq!(*done[0].result.as_ref().unwrap(), data.len());
    assert!(done[0].buf.is_some(), "the write gives its buffer back");

    let read = DiskOp::Read {
        file,
        file_offset: 8192,
        buf: AlignedBuf::new(data.len()),
        len: data.len(),
    };
    disk.submit(id(2), read, false).unwrap();
    let done = wait_for(&mut disk, 1);
    let buf = done.into_iter().next().unwrap().buf.unwrap();
    assert_eq!(buf.as_slice(), &data[..]);
    // The rest of the preallocated file reads as zeros.
    let read = DiskOp::Read {
        file,
        file_offset: 0,
        buf: AlignedBuf::new(8192),
        len: 8192,
    };
    disk.submit(id(3), read, false).unwrap();
    let buf = wait_for(&mut disk, 1).pop().unwrap().buf.unwrap();
    assert!(buf.as_slice().iter().all(|byte| *byte == 0));
    disk.close(file).unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap()[8192..8192 + data.len()],
        data[..]
    );
}

#[test]
fn linked_write_and_fdatasync_complete_in_order() {
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    let dir = TempDir::new("linked");
    let file = disk
        .open(&dir.path("segment"), OpenOptions::create_direct(256 * 1024))
        .unwrap();
    let data = pattern(BLOCK_SIZE, 1);
    for round in 0..4u64 {
        let write = DiskOp::Write {
            file,
            file_offset: round * BLOCK_SIZE as u64,
            buf: filled_buf(&data),
            buf_range: 0..BLOCK_SIZE,
        };
        disk.submit(id(round * 2), write, true).unwrap();
        disk.submit(id(round * 2 + 1), DiskOp::Fdatasync { file }, false)
            .unwrap();
        let done = wait_for(&mut disk, 2);
        let ids: Vec<OpId> = done.iter().map(|completion| completion.op_id).collect();
        assert_eq!(
            ids,
            vec![id(round * 2), id(round * 2 + 1)],
            "the fdatasync completes after its write"
        );
        assert_eq!(*done[0].result.as_ref().unwrap(), BLOCK_SIZE);
        assert_eq!(*done[1].result.as_ref().unwrap(), 0);
        assert!(done[1].buf.is_none());
    }
    assert_eq!(disk.in_flight(), 0);
}

#[test]
fn failed_write_cancels_the_linked_fdatasync() {
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    let dir = TempDir::new("linked-failure");
    let path = dir.path("read-only");
    std::fs::write(&path, vec![0u8; 8192]).unwrap();
    let file = disk.open(&path, OpenOptions::read_only()).unwrap();
    let write = DiskOp::Write {
        file,
        file_offset: 0,
        buf: filled_buf(&[1u8; 4096]),
        buf_range: 0..4096,
    };
    disk.submit(id(1), write, true).unwrap();
    disk.submit(id(2), DiskOp::Fdatasync { file }, false)
        .unwrap();
    let done = wait_for(&mut disk, 2);
    let write = done
        .iter()
        .find(|completion| completion.op_id == id(1))
        .unwrap();
    let sync = done
        .iter()
        .find(|completion| completion.op_id == id(2))
        .unwrap();
    match &write.result {
        Err(error) => assert_eq!(error.raw_os_error(), Some(libc::EBADF), "{error}"),
        Ok(count) => panic!("write to a read-only fd succeeded with {count}"),
    }
    assert!(
        matches!(sync.result, Err(DiskError::Canceled { .. })),
        "{:?}",
        sync.result
    );
}

#[test]
fn fixed_buffer_write_uses_write_fixed() {
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    if let Some(error) = disk.fixed_buffers_error() {
        println!("skipped: registered buffers refused: {error}");
        return;
    }
    let dir = TempDir::new("fixed");
    let file = disk
        .open(&dir.path("segment"), OpenOptions::create_direct(256 * 1024))
        .unwrap();
    let mut buf = disk.buffer(16 * 1024);
    assert!(buf.fixed_index().is_some(), "a pooled buffer is registered");
    assert!(
        buf.as_full_slice().iter().all(|byte| *byte == 0),
        "pooled buffers come zeroed"
    );
    let data = pattern(16 * 1024, 9);
    buf.as_full_mut_slice()[..data.len()].copy_from_slice(&data);
    let before = disk.ring_stats().fixed_writes;
    disk.submit(
        id(1),
        DiskOp::Write {
            file,
            file_offset: 0,
            buf,
            buf_range: 0..data.len(),
        },
        false,
    )
    .unwrap();
    let done = wait_for(&mut disk, 1).pop().unwrap();
    assert_eq!(*done.result.as_ref().unwrap(), data.len());
    assert_eq!(
        disk.ring_stats().fixed_writes,
        before + 1,
        "submitted as WRITE_FIXED"
    );
    let free_before = disk.fixed_buffer_pool().unwrap().free_count();
    disk.recycle(done.buf.unwrap());
    assert_eq!(
        disk.fixed_buffer_pool().unwrap().free_count(),
        free_before + 1
    );

    // Read it back into a registered buffer (READ_FIXED).
    let buf = disk.buffer(16 * 1024);
    let reads_before = disk.ring_stats().fixed_reads;
    disk.submit(
        id(2),
        DiskOp::Read {
            file,
            file_offset: 0,
            buf,
            len: data.len(),
        },
        false,
    )
    .unwrap();
    let done = wait_for(&mut disk, 1).pop().unwrap();
    assert_eq!(
        disk.ring_stats().fixed_reads,
        reads_before + 1,
        "submitted as READ_FIXED"
    );
    let buf = done.buf.unwrap();
    assert_eq!(buf.as_slice(), &data[..]);
    disk.recycle(buf);
}

#[test]
fn small_buffer_requests_do_not_take_a_registered_buffer() {
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    if disk.fixed_buffer_pool().is_none() {
        println!("skipped: registered buffers refused");
        return;
    }
    let free = disk.fixed_buffer_pool().unwrap().free_count();
    let small = disk.buffer(4096);
    assert_eq!(
        small.fixed_index(),
        None,
        "a 4 KiB request gets a plain buffer"
    );
    assert_eq!(small.capacity(), 4096);
    assert_eq!(disk.fixed_buffer_pool().unwrap().free_count(), free);
    disk.recycle(small);
    assert_eq!(
        disk.fixed_buffer_pool().unwrap().free_count(),
        free,
        "plain buffers are not pooled"
    );
}

#[test]
fn without_registered_buffers_buffer_allocates_plain_ones() {
    let config = UringDiskConfig {
        fixed_buffer_count: 0,
        ..small_disk_config()
    };
    let Some(mut disk) = disk_or_skip(config) else {
        return;
    };
    assert!(disk.fixed_buffer_pool().is_none());
    let buf = disk.buffer(8192);
    assert_eq!(buf.fixed_index(), None);
    assert_eq!(buf.capacity(), 8192);
    disk.recycle(buf);
}

#[test]
fn plain_buffers_given_back_are_reused_zeroed_within_their_bounds() {
    let config = UringDiskConfig {
        fixed_buffer_count: 0,
        ..small_disk_config()
    };
    let Some(mut disk) = disk_or_skip(config) else {
        return;
    };
    // A buffer given back comes back for a request of its size or of up to
    // half of it, zeroed, with nothing in use.
    let mut buf = disk.buffer(64 * 1024);
    buf.as_full_mut_slice().fill(0xA5);
    buf.set_len(1000);
    let address = buf.as_ptr();
    disk.recycle(buf);
    let again = disk.buffer(40 * 1024);
    assert_eq!(again.as_ptr(), address, "the spare is reused");
    assert_eq!(again.capacity(), 64 * 1024);
    assert_eq!(again.len(), 0);
    assert!(again.as_full_slice().iter().all(|&b| b == 0), "zeroed");
    // It is not handed to a request of less than half its size, nor to one
    // larger than it.
    disk.recycle(again);
    let small = disk.buffer(16 * 1024);
    assert_ne!(small.as_ptr(), address);
    assert_eq!(small.capacity(), 16 * 1024);
    let large = disk.buffer(128 * 1024);
    assert_ne!(large.as_ptr(), address);
    assert_eq!(disk.buffer(64 * 1024).as_ptr(), address, "still kept");
    assert_eq!(disk.plain_spares(), (0, 0));
    // At most PLAIN_BUFFER_SPARES_MAX are kept...
    let bufs: Vec<AlignedBuf> = (0..PLAIN_BUFFER_SPARES_MAX + 4)
        .map(|_| disk.buffer(BLOCK_SIZE))
        .collect();
    for buf in bufs {
        disk.recycle(buf);
    }
    assert_eq!(
        disk.plain_spares(),
        (
            PLAIN_BUFFER_SPARES_MAX,
            PLAIN_BUFFER_SPARES_MAX * BLOCK_SIZE
        )
    );
    for _ in 0..PLAIN_BUFFER_SPARES_MAX {
        drop(disk.buffer(BLOCK_SIZE));
    }
    assert_eq!(disk.plain_spares(), (0, 0), "each request took one");
    // ...and at most PLAIN_BUFFER_SPARE_BYTES_MAX in all: a buffer that
    // would pass it is freed.
    let whole = disk.buffer(PLAIN_BUFFER_SPARE_BYTES_MAX);
    disk.recycle(whole);
    assert_eq!(disk.plain_spares(), (1, PLAIN_BUFFER_SPARE_BYTES_MAX));
    let one_more = disk.buffer(BLOCK_SIZE);
    disk.recycle(one_more);
    assert_eq!(disk.plain_spares(), (1, PLAIN_BUFFER_SPARE_BYTES_MAX));
    drop((small, large));
}

#[test]
fn short_read_at_end_of_file_returns_the_bytes_there() {
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    let dir = TempDir::new("short-read");
    // A buffered file of an unaligned size.
    let path = dir.path("buffered");
    let data = pattern(5000, 3);
    std::fs::write(&path, &data).unwrap();
    let file = disk.open(&path, OpenOptions::read_only()).unwrap();
    disk.submit(
        id(1),
        DiskOp::Read {
            file,
            file_offset: 0,
            buf: AlignedBuf::new(16384),
            len: 16384,
        },
        false,
    )
    .unwrap();
    let done = wait_for(&mut disk, 1).pop().unwrap();
    assert_eq!(*done.result.as_ref().unwrap(), 5000);
    assert_eq!(done.buf.unwrap().as_slice(), &data[..]);
    // Past the end: 0 bytes.
    disk.submit(
        id(2),
        DiskOp::Read {
            file,
            file_offset: 8192,
            buf: AlignedBuf::new(4096),
            len: 4096,
        },
        false,
    )
    .unwrap();
    let done = wait_for(&mut disk, 1).pop().unwrap();
    assert_eq!(*done.result.as_ref().unwrap(), 0);

    // A direct file: a read running past the end stops at the end.
    let direct = disk
        .open(&dir.path("direct"), OpenOptions::create_direct(8192))
        .unwrap();
    disk.submit(
        id(3),
        DiskOp::Read {
            file: direct,
            file_offset: 4096,
            buf: AlignedBuf::new(16384),
            len: 16384,
        },
        false,
    )
    .unwrap();
    let done = wait_for(&mut disk, 1).pop().unwrap();
    assert_eq!(*done.result.as_ref().unwrap(), 4096);
    assert_eq!(done.buf.unwrap().len(), 4096);
}

#[test]
fn operations_on_a_closed_file_or_bad_fd_fail_with_the_errno() {
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    let dir = TempDir::new("closed");
    let file = disk
        .open(&dir.path("f"), OpenOptions::buffered(Some(4096)))
        .unwrap();
    disk.close(file).unwrap();
    let refused = disk.submit(id(1), DiskOp::Fdatasync { file }, false);
    match refused {
        Err((DiskError::NotOpen(closed), DiskOp::Fdatasync { .. })) => assert_eq!(closed, file),
        other => panic!("expected NotOpen with the op given back, got {other:?}"),
    }
    assert!(matches!(disk.close(file), Err(DiskError::NotOpen(_))));

    // At the ring level, a descriptor that is not open completes with EBADF.
    let Some(mut ring) = ring_or_skip() else {
        return;
    };
    // The number of a descriptor just closed can be reused at once by an
    // open in another test thread (it was, in a CI run), so take one at
    // the process's descriptor limit, which no open can return.
    let bad_fd = {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the local struct.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        i32::try_from(limit.rlim_cur).unwrap_or(i32::MAX)
    };
    ring.submit(
        5,
        Op::Fsync {
            fd: bad_fd,
            datasync: true,
        },
        false,
    )
    .unwrap();
    let done = turn_until(&mut ring, 1);
    assert_eq!(done[0].token, 5);
    assert_eq!(
        done[0].result.as_ref().unwrap_err().raw_os_error(),
        Some(libc::EBADF)
    );
}

#[test]
fn waker_wakes_a_waiting_ring_from_another_thread() {
    let Some(mut ring) = ring_or_skip() else {
        return;
    };
    let waker = ring.waker();
    let start = Instant::now();
    let thread = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        waker.wake().unwrap();
    });
    let mut out = TurnOutput::new();
    while !out.woken && start.elapsed() < Duration::from_secs(10) {
        ring.turn(Some(Duration::from_secs(10)), 64, &mut out)
            .unwrap();
    }
    thread.join().unwrap();
    assert!(out.woken, "the wake arrived");
    let elapsed = start.elapsed();
    assert!(
        elapsed < Duration::from_secs(5),
        "woken after {elapsed:?}, not at the 10 s timeout"
    );
    assert!(ring.stats().wakes >= 1);
    // The eventfd read is re-armed: a second wake works too.
    ring.waker().wake().unwrap();
    out.clear();
    let again = Instant::now();
    while !out.woken && again.elapsed() < Duration::from_secs(10) {
        ring.turn(Some(Duration::from_secs(10)), 64, &mut out)
            .unwrap();
    }
    assert!(out.woken);
}

#[test]
fn coalesced_wakes_lose_no_message_sent_across_threads() {
    let Some(mut ring) = ring_or_skip() else {
        return;
    };
    const COUNT: u32 = 20_000;
    let waker = ring.waker();
    let (tx, rx) = std::sync::mpsc::channel();
    let sender = std::thread::spawn(move || {
        for n in 0..COUNT {
            tx.send(n).unwrap();
            waker.wake().unwrap();
            if n % 97 == 0 {
                std::thread::yield_now();
            }
        }
    });
    let mut received = 0;
    let mut out = TurnOutput::new();
    loop {
        while let Ok(n) = rx.try_recv() {
            assert_eq!(n, received);
            received += 1;
        }
        if received == COUNT {
            break;
        }
        out.clear();
        // Nothing else is in the ring: the turn ends on a wake or at the
        // timeout, and a timeout here means a wake was lost.
        ring.turn(Some(Duration::from_secs(10)), 64, &mut out)
            .unwrap();
        assert!(
            out.woken,
            "a turn ended without a wake with {} messages missing",
            COUNT - received
        );
    }
    sender.join().unwrap();
}

#[test]
fn timers_fire_in_deadline_order_and_not_early() {
    let Some(mut ring) = ring_or_skip() else {
        return;
    };
    let start = Instant::now();
    ring.add_timer(start + Duration::from_millis(60), 3)
        .unwrap();
    ring.add_timer(start + Duration::from_millis(20), 1)
        .unwrap();
    let cancelled = ring
        .add_timer(start + Duration::from_millis(30), 99)
        .unwrap();
    ring.add_timer(start + Duration::from_millis(40), 2)
        .unwrap();
    assert!(ring.cancel_timer(cancelled));
    let mut out = TurnOutput::new();
    let mut fired_at = Vec::new();
    while out.timers.len() < 3 && start.elapsed() < Duration::from_secs(10) {
        let before = out.timers.len();
        // Wait far longer than the timers: the ring must cut the wait short.
        ring.turn(Some(Duration::from_secs(5)), 64, &mut out)
            .unwrap();
        for _ in before..out.timers.len() {
            fired_at.push(start.elapsed());
        }
    }
    assert_eq!(out.timers, vec![1, 2, 3]);
    assert!(fired_at[0] >= Duration::from_millis(20), "{fired_at:?}");
    assert!(fired_at[2] >= Duration::from_millis(60), "{fired_at:?}");
    assert!(
        fired_at[2] < Duration::from_secs(2),
        "timers cut the 5 s wait short: {fired_at:?}"
    );
    assert_eq!(ring.timer_count(), 0);
}

#[test]
fn timeout_op_completes_after_its_duration() {
    let Some(mut ring) = ring_or_skip() else {
        return;
    };
    let start = Instant::now();
    ring.submit(
        1,
        Op::Timeout {
            duration: Duration::from_millis(30),
        },
        false,
    )
    .unwrap();
    let done = turn_until(&mut ring, 1);
    assert_eq!(*done[0].result.as_ref().unwrap(), 0);
    assert!(start.elapsed() >= Duration::from_millis(30));
}

#[test]
fn splice_moves_file_bytes_through_a_pipe() {
    let Some(mut ring) = ring_or_skip() else {
        return;
    };
    let dir = TempDir::new("splice");
    let data = pattern(10_000, 5);
    std::fs::write(dir.path("src"), &data).unwrap();
    let src = open_file(&dir.path("src"), libc::O_RDONLY);
    let dst = open_file(
        &dir.path("dst"),
        libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
    );
    let mut pipe = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    assert_eq!(
        unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) },
        0
    );
    // SAFETY: fresh descriptors.
    let (pipe_read, pipe_write) =
        unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
    let mut moved = 0usize;
    while moved < data.len() {
        let len = (data.len() - moved) as u32;
        let into_pipe = Op::Splice {
            fd_in: src.as_raw_fd(),
            off_in: Some(moved as u64),
            fd_out: pipe_write.as_raw_fd(),
            off_out: None,
            len,
            flags: 0,
        };
        ring.submit(1, into_pipe, false).unwrap();
        let count = *turn_until(&mut ring, 1)[0].result.as_ref().unwrap();
        assert!(count > 0);
        let out_of_pipe = Op::Splice {
            fd_in: pipe_read.as_raw_fd(),
            off_in: None,
            fd_out: dst.as_raw_fd(),
            off_out: Some(moved as u64),
            len: count as u32,
            flags: 0,
        };
        ring.submit(2, out_of_pipe, false).unwrap();
        assert_eq!(*turn_until(&mut ring, 1)[0].result.as_ref().unwrap(), count);
        moved += count;
    }
    assert_eq!(std::fs::read(dir.path("dst")).unwrap(), data);
}

#[test]
fn multishot_accept_recv_and_send_work_on_loopback() {
    let Some(mut ring) = ring_or_skip() else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    ring.submit(
        1,
        Op::AcceptMulti {
            fd: listener.as_raw_fd(),
        },
        false,
    )
    .unwrap();
    let mut clients: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(address).unwrap())
        .collect();
    let accepted = turn_until(&mut ring, 2);
    let mut sockets = Vec::new();
    for shot in accepted {
        assert!(shot.more, "the multishot accept stays armed");
        assert!(shot.op.is_none());
        // SAFETY: the accepted descriptor is ours.
        sockets.push(unsafe { OwnedFd::from_raw_fd(*shot.result.as_ref().unwrap() as i32) });
    }
    clients[0].write_all(b"ping").unwrap();
    ring.submit(
        2,
        Op::Recv {
            fd: sockets[0].as_raw_fd(),
            buf: Vec::with_capacity(64),
        },
        false,
    )
    .unwrap();
    let done = turn_until(&mut ring, 1).pop().unwrap();
    let Some(Op::Recv { buf, .. }) = done.op else {
        panic!("recv gives its buffer back")
    };
    // Both connections may be accepted in either order; find the one that got data.
    if buf.is_empty() {
        panic!("recv returned no bytes");
    }
    assert_eq!(&buf[..], b"ping");
    ring.submit(
        3,
        Op::Send {
            fd: sockets[0].as_raw_fd(),
            data: Bytes::from_static(b"pong"),
        },
        false,
    )
    .unwrap();
    assert_eq!(*turn_until(&mut ring, 1)[0].result.as_ref().unwrap(), 4);
    let mut reply = [0u8; 4];
    clients[0].read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"pong");
    clients.clear();
}

#[test]
fn short_send_is_continued_and_its_linked_follower_still_runs() {
    let Some(mut ring) = ring_or_skip() else {
        return;
    };
    let (sender, mut receiver) = std::os::unix::net::UnixStream::pair().unwrap();
    let small: libc::c_int = 4096;
    // SAFETY: setsockopt reads an int from the live local.
    let set = unsafe {
        libc::setsockopt(
            sender.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&raw const small).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
    let data = Bytes::from(pattern(1 << 20, 11));
    let expected = data.clone();
    let reader = std::thread::spawn(move || {
        let mut got = vec![0u8; 1 << 20];
        receiver.read_exact(&mut got).unwrap();
        got
    });
    ring.submit(
        1,
        Op::Send {
            fd: sender.as_raw_fd(),
            data,
        },
        true,
    )
    .unwrap();
    ring.submit(2, Op::Nop, false).unwrap();
    let done = turn_until(&mut ring, 2);
    assert_eq!(
        done[0].token, 1,
        "the send completes before its linked follower"
    );
    assert_eq!(*done[0].result.as_ref().unwrap(), 1 << 20);
    assert_eq!(done[1].token, 2);
    assert_eq!(
        *done[1].result.as_ref().unwrap(),
        0,
        "the follower ran, it was not cancelled"
    );
    assert_eq!(reader.join().unwrap(), &expected[..]);
    let stats = ring.stats();
    println!(
        "continuations {} relinked {}",
        stats.continuations, stats.relinked
    );
    assert_eq!(
        stats.relinked > 0,
        stats.continuations > 0,
        "a continued head relinks its follower"
    );
}

#[test]
fn write_to_a_pipe_completes_whole_and_in_order_with_its_linked_follower() {
    let Some(mut ring) = ring_or_skip() else {
        return;
    };
    let mut pipe = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    assert_eq!(
        unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) },
        0
    );
    // SAFETY: fresh descriptors.
    let (pipe_read, pipe_write) =
        unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
    let data = pattern(1 << 20, 13);
    let expected = data.clone();
    let reader = std::thread::spawn(move || {
        let mut file = std::fs::File::from(pipe_read);
        let mut got = vec![0u8; 1 << 20];
        file.read_exact(&mut got).unwrap();
        got
    });
    let buf = filled_buf(&data);
    ring.submit(
        1,
        Op::Write {
            fd: pipe_write.as_raw_fd(),
            file_offset: 0,
            buf,
            buf_range: 0..data.len(),
        },
        true,
    )
    .unwrap();
    ring.submit(2, Op::Nop, false).unwrap();
    let done = turn_until(&mut ring, 2);
    assert_eq!(
        done[0].token, 1,
        "the write completes before its linked follower"
    );
    assert_eq!(*done[0].result.as_ref().unwrap(), 1 << 20);
    assert_eq!(done[1].token, 2);
    assert_eq!(
        *done[1].result.as_ref().unwrap(),
        0,
        "the follower ran, it was not cancelled"
    );
    assert_eq!(reader.join().unwrap(), expected);
    let stats = ring.stats();
    println!(
        "continuations {} relinked {}",
        stats.continuations, stats.relinked
    );
    if stats.continuations > 0 {
        // The first short write broke the link; the follower was parked and
        // resubmitted exactly once, after the write finished.
        assert_eq!(stats.relinked, 1);
    }
}

#[test]
fn full_ring_gives_the_op_back_and_drop_cancels_what_is_in_flight() {
    let config = RingConfig {
        entries: 8,
        ..RingConfig::default()
    };
    let mut ring = match Ring::new(config) {
        Ok(ring) => ring,
        Err(error) => {
            println!("skipped: io_uring unavailable: {error}");
            return;
        }
    };
    let capacity = ring.capacity();
    for token in 0..capacity as u64 {
        ring.submit(
            token,
            Op::Timeout {
                duration: Duration::from_secs(60),
            },
            false,
        )
        .unwrap();
    }
    let mut out = TurnOutput::new();
    ring.turn(None, 64, &mut out).unwrap();
    assert!(
        out.completions.is_empty(),
        "60 s timeouts are still pending"
    );
    match ring.submit(99, Op::Nop, false) {
        Err((error, Op::Nop)) => assert!(error.to_string().contains("full"), "{error}"),
        other => panic!("expected QueueFull with the op given back, got {other:?}"),
    }
    assert_eq!(ring.in_flight(), capacity);
    let start = Instant::now();
    drop(ring);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "drop cancelled the timeouts instead of waiting 60 s"
    );
}

/// Set in the child process of the memlock test.
const MEMLOCK_CHILD_ENV: &str = "RINGMQ_URING_TEST_MEMLOCK_CHILD";

/// Drops CAP_IPC_LOCK from this thread (so registered buffers count against
/// RLIMIT_MEMLOCK) and lowers RLIMIT_MEMLOCK to `limit` bytes.
fn lose_memlock_privilege(limit: u64) {
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    const CAP_IPC_LOCK: u32 = 14;
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget/capset read and write the two live local structs, laid
    // out as the kernel's v3 capability ABI.
    unsafe {
        assert_eq!(
            libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()),
            0
        );
        data[0].effective &= !(1 << CAP_IPC_LOCK);
        data[0].permitted &= !(1 << CAP_IPC_LOCK);
        assert_eq!(
            libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()),
            0
        );
    }
    let rlimit = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: setrlimit reads the live local struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlimit) }, 0);
}

#[test]
fn registration_refused_by_memlock_names_cause_and_remedy_and_falls_back() {
    if std::env::var_os(MEMLOCK_CHILD_ENV).is_none() {
        // Run this same test in a child process: dropping a capability and
        // lowering a limit must not leak into the other tests.
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "registration_refused_by_memlock_names_cause_and_remedy_and_falls_back",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(MEMLOCK_CHILD_ENV, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        println!("{stdout}");
        assert!(
            output.status.success(),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains("child checked the refusal") || stdout.contains("skipped:"),
            "{stdout}"
        );
        return;
    }
    lose_memlock_privilege(1 << 20);
    let config = UringDiskConfig {
        fixed_buffer_count: 4,
        fixed_buffer_size: 1 << 20,
        fixed_buffers_required: true,
        ..UringDiskConfig::default()
    };
    let error = match UringDisk::new(config) {
        Ok(_) => panic!("4 MiB of registered buffers under a 1 MiB RLIMIT_MEMLOCK were accepted"),
        Err(error) if error.raw_os_error() != Some(libc::ENOMEM) => {
            println!("skipped: io_uring unavailable: {error}");
            return;
        }
        Err(error) => error,
    };
    let text = error.to_string();
    println!("refusal: {text}");
    assert!(
        text.contains("RLIMIT_MEMLOCK") && text.contains("1048576 bytes"),
        "{text}"
    );
    assert!(
        text.contains("ulimit -l") && text.contains("fewer or smaller"),
        "{text}"
    );
    // Not required: the disk falls back to plain buffers and says why.
    let mut disk = UringDisk::new(UringDiskConfig {
        fixed_buffers_required: false,
        ..config
    })
    .unwrap();
    assert!(disk.fixed_buffer_pool().is_none());
    assert!(
        disk.fixed_buffers_error()
            .is_some_and(|error| error.to_string().contains("RLIMIT_MEMLOCK"))
    );
    assert_eq!(disk.buffer(1 << 20).fixed_index(), None);
    println!("child checked the refusal");
}

#[test]
fn a_turn_submits_everything_queued_in_one_enter() {
    let Some(mut ring) = ring_or_skip() else {
        return;
    };
    let mut out = TurnOutput::new();
    ring.turn(None, 64, &mut out).unwrap();
    let before = ring.stats();
    for token in 0..10 {
        ring.submit(token, Op::Nop, false).unwrap();
    }
    assert_eq!(ring.stats().enters, before.enters, "submit only queues");
    ring.turn(Some(Duration::from_secs(1)), 64, &mut out)
        .unwrap();
    let after = ring.stats();
    assert_eq!(
        after.enters,
        before.enters + 1,
        "one io_uring_enter for the whole turn"
    );
    assert!(
        after.sqes_submitted >= before.sqes_submitted + 10,
        "{after:?}"
    );
    let done = turn_until(&mut ring, 10 - out.completions.len());
    assert_eq!(out.completions.len() + done.len(), 10);
}

#[test]
fn stall_detector_counts_a_turn_longer_than_the_threshold() {
    let config = RingConfig {
        stall_threshold: Duration::from_millis(50),
        ..RingConfig::default()
    };
    let mut ring = match Ring::new(config) {
        Ok(ring) => ring,
        Err(error) => {
            println!("skipped: io_uring unavailable: {error}");
            return;
        }
    };
    let mut out = TurnOutput::new();
    ring.turn(None, 64, &mut out).unwrap();
    ring.turn(None, 64, &mut out).unwrap();
    assert_eq!(ring.stats().stalls, 0, "back-to-back turns do not stall");
    // The caller's handlers take too long between two turns.
    std::thread::sleep(Duration::from_millis(120));
    ring.turn(None, 64, &mut out).unwrap();
    assert_eq!(ring.stats().stalls, 1);
}

#[test]
fn zero_fill_runs_in_the_background_and_never_overwrites_data() {
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    let dir = TempDir::new("zero-fill");
    let len = 16 << 20;
    let file = disk
        .open(&dir.path("background"), OpenOptions::create_direct(len))
        .unwrap();
    assert!(
        disk.is_zero_fill_pending(file).unwrap(),
        "open returns before the fill is done"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    while disk.is_zero_fill_pending(file).unwrap() && Instant::now() < deadline {
        disk.poll(&mut out, 64, Wait::AtLeastOne(Duration::from_millis(10)))
            .unwrap();
    }
    assert!(
        !disk.is_zero_fill_pending(file).unwrap(),
        "polling finishes the fill"
    );
    assert!(out.is_empty(), "the fill reports no completions of its own");
    assert_eq!(disk.in_flight(), 0);

    // A write right after creation waits for the fill, so no zero write can
    // land on top of it.
    let other = disk
        .open(&dir.path("immediate"), OpenOptions::create_direct(len))
        .unwrap();
    let data = pattern(BLOCK_SIZE, 21);
    let last_block = len - BLOCK_SIZE as u64;
    let write = DiskOp::Write {
        file: other,
        file_offset: last_block,
        buf: filled_buf(&data),
        buf_range: 0..BLOCK_SIZE,
    };
    disk.submit(id(1), write, false).unwrap();
    assert!(!disk.is_zero_fill_pending(other).unwrap());
    wait_for(&mut disk, 1);
    disk.close(other).unwrap();
    disk.close(file).unwrap();
    let bytes = std::fs::read(dir.path("immediate")).unwrap();
    assert_eq!(&bytes[last_block as usize..], &data[..]);
    assert!(bytes[..last_block as usize].iter().all(|byte| *byte == 0));
}

#[test]
fn a_completion_on_a_notifying_ring_wakes_the_ring_that_sleeps() {
    let (Some(mut sleeper), Some(mut worker)) = (ring_or_skip(), ring_or_skip()) else {
        return;
    };
    worker
        .notify_eventfd(sleeper.waker().as_fd())
        .expect("register eventfd");
    // Let the worker's own eventfd read arm and any startup signal drain.
    let mut out = TurnOutput::new();
    worker
        .turn(Some(Duration::ZERO), 64, &mut out)
        .expect("worker turn");
    sleeper
        .turn(Some(Duration::from_millis(50)), 64, &mut out)
        .expect("sleeper turn");
    out.clear();
    // The sleeper now waits up to 5 s; the worker's Nop, submitted by a
    // zero-wait turn, completes at once and must cut that wait short.
    worker.submit(7, Op::Nop, false).expect("submit nop");
    worker
        .turn(Some(Duration::ZERO), 64, &mut out)
        .expect("worker turn");
    let started = Instant::now();
    let mut sleeper_out = TurnOutput::new();
    sleeper
        .turn(Some(Duration::from_secs(5)), 64, &mut sleeper_out)
        .expect("sleeper turn");
    let waited = started.elapsed();
    assert!(
        sleeper_out.woken,
        "sleeper not woken by the worker's completion"
    );
    assert!(waited < Duration::from_secs(2), "sleeper waited {waited:?}");
    let completions = if out.completions.is_empty() {
        turn_until(&mut worker, 1)
    } else {
        out.completions
    };
    assert_eq!(completions[0].token, 7);
}

#[test]
fn a_later_socket_completion_on_a_notifying_ring_wakes_the_sleeping_ring() {
    let (Some(mut sleeper), Some(mut worker)) = (ring_or_skip(), ring_or_skip()) else {
        return;
    };
    worker
        .notify_eventfd(sleeper.waker().as_fd())
        .expect("register eventfd");
    let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let mut out = TurnOutput::new();
    worker
        .submit(
            9,
            Op::Recv {
                fd: ours.as_raw_fd(),
                buf: Vec::with_capacity(64),
            },
            false,
        )
        .expect("submit recv");
    worker
        .turn(Some(Duration::ZERO), 64, &mut out)
        .expect("worker turn");
    assert!(out.completions.is_empty(), "recv completed with no data");
    // Drain wakes caused by the worker's setup.
    sleeper
        .turn(Some(Duration::from_millis(50)), 64, &mut out)
        .expect("sleeper turn");
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        std::io::Write::write_all(&mut theirs, b"ping").expect("write");
        theirs
    });
    let started = Instant::now();
    let mut sleeper_out = TurnOutput::new();
    sleeper
        .turn(Some(Duration::from_secs(5)), 64, &mut sleeper_out)
        .expect("sleeper turn");
    let waited = started.elapsed();
    let _theirs = writer.join().expect("writer");
    assert!(
        sleeper_out.woken,
        "sleeper not woken by the worker's completion"
    );
    assert!(waited < Duration::from_secs(2), "sleeper waited {waited:?}");
    let completions = turn_until(&mut worker, 1);
    assert_eq!(completions[0].token, 9);
    assert_eq!(completions[0].result.as_ref().ok(), Some(&4));
}

#[test]
fn a_sparse_create_sets_the_length_and_allocates_nothing() {
    use std::os::unix::fs::MetadataExt;
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    let dir = TempDir::new("sparse-create");
    // An odd length, as an index file's 420,000,040 bytes.
    let len = (64 << 20) + 40;
    let background = dir.path("background");
    disk.submit_create(id(1), &background, OpenOptions::buffered_sparse(len))
        .unwrap();
    let done = wait_for(&mut disk, 1);
    let file = ringmq_storage::disk::created_file_id(*done[0].result.as_ref().unwrap());
    assert_eq!(disk.file_size(file).unwrap(), len);
    disk.close(file).unwrap();
    let inline = dir.path("inline");
    let file = disk
        .open(&inline, OpenOptions::buffered_sparse(len))
        .unwrap();
    assert_eq!(disk.file_size(file).unwrap(), len);
    disk.close(file).unwrap();
    // No zero fill either, after a while to let one run if it had started.
    let _ = disk.poll(
        &mut Vec::new(),
        16,
        Wait::AtLeastOne(Duration::from_millis(50)),
    );
    for path in [&background, &inline] {
        let meta = std::fs::metadata(path).unwrap();
        assert_eq!(meta.len(), len);
        assert!(
            meta.blocks() * 512 < 1 << 20,
            "{}: {} blocks allocated",
            path.display(),
            meta.blocks()
        );
    }
}

/// Whether the running kernel's release is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .expect("/proc/sys/kernel/osrelease is readable");
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    found >= (major, minor)
}

#[test]
fn truncate_shrinks_a_file_through_the_ring() {
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    let dir = TempDir::new("truncate");
    let path = dir.path("f");
    let file = disk
        .open(&path, OpenOptions::buffered(Some(1 << 20)))
        .unwrap();
    disk.submit(
        id(1),
        DiskOp::Truncate {
            file,
            len: 256 << 10,
        },
        false,
    )
    .unwrap();
    let done = wait_for(&mut disk, 1);
    assert_eq!(done[0].op_id, id(1));
    match &done[0].result {
        Ok(_) => assert_eq!(std::fs::metadata(&path).unwrap().len(), 256 << 10),
        // Linux before 6.9 has no IORING_OP_FTRUNCATE.
        Err(error) => {
            assert!(!kernel_at_least(6, 9), "{error}");
            assert_eq!(error.raw_os_error(), Some(libc::EINVAL), "{error}");
        }
    }
    disk.close(file).unwrap();
}

#[test]
fn background_create_and_remove_run_through_the_ring() {
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    let dir = TempDir::new("background-create");
    let path = dir.path("segment");
    let len = 4 << 20;
    disk.submit_create(id(1), &path, OpenOptions::create_direct(len))
        .unwrap();
    assert_eq!(disk.in_flight(), 1, "the creation counts as in flight");
    let done = wait_for(&mut disk, 1);
    assert_eq!(done[0].op_id, id(1));
    let file = ringmq_storage::disk::created_file_id(*done[0].result.as_ref().unwrap());
    assert_eq!(disk.file_size(file).unwrap(), len);
    assert!(disk.is_o_direct(file).unwrap() || small_disk_config().allow_buffered_fallback);
    // The new file takes O_DIRECT writes at once.
    let data = pattern(BLOCK_SIZE, 33);
    let write = DiskOp::Write {
        file,
        file_offset: 0,
        buf: filled_buf(&data),
        buf_range: 0..BLOCK_SIZE,
    };
    disk.submit(id(2), write, false).unwrap();
    assert!(wait_for(&mut disk, 1)[0].result.is_ok());
    let mut on_disk = vec![0u8; BLOCK_SIZE];
    std::fs::File::open(&path)
        .unwrap()
        .read_exact(&mut on_disk)
        .unwrap();
    assert_eq!(on_disk, data);
    disk.close(file).unwrap();

    disk.submit_remove(id(3), &path).unwrap();
    let removed = wait_for(&mut disk, 1);
    assert_eq!(removed[0].op_id, id(3));
    assert!(removed[0].result.is_ok());
    assert!(!path.exists());
    // Removing what is not there fails with the errno, through the ring.
    disk.submit_remove(id(4), &path).unwrap();
    let missing = wait_for(&mut disk, 1);
    assert_eq!(
        missing[0].result.as_ref().unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );
    assert_eq!(disk.in_flight(), 0);
}

#[test]
fn background_rename_moves_a_file_and_can_open_it_as_it_is() {
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    let dir = TempDir::new("background-rename");
    let (old, spare, new) = (
        dir.path("00000000000000000000"),
        dir.path("00000000000000000000.spare"),
        dir.path("00000000000001048576"),
    );
    let file = disk
        .open(&old, OpenOptions::create_direct(1 << 20))
        .unwrap();
    let data = pattern(2 * BLOCK_SIZE, 9);
    let write = DiskOp::Write {
        file,
        file_offset: 4096,
        buf: filled_buf(&data),
        buf_range: 0..data.len(),
    };
    disk.submit(id(1), write, false).unwrap();
    wait_for(&mut disk, 1);
    disk.close(file).unwrap();
    // Without open: the file only moves.
    disk.submit_rename(id(2), &old, &spare, None).unwrap();
    let done = wait_for(&mut disk, 1);
    assert_eq!(done[0].op_id, id(2));
    assert_eq!(*done[0].result.as_ref().unwrap(), 0);
    assert!(!old.exists() && spare.exists());
    // With open: the renamed file is open, its bytes and length kept.
    disk.submit_rename(id(3), &spare, &new, Some(OpenOptions::existing_direct()))
        .unwrap();
    let done = wait_for(&mut disk, 1);
    let file = ringmq_storage::disk::created_file_id(*done[0].result.as_ref().unwrap());
    assert!(!spare.exists());
    assert!(disk.is_o_direct(file).unwrap());
    assert_eq!(disk.file_size(file).unwrap(), 1 << 20);
    let read = DiskOp::Read {
        file,
        file_offset: 4096,
        buf: AlignedBuf::new(data.len()),
        len: data.len(),
    };
    disk.submit(id(4), read, false).unwrap();
    let buf = wait_for(&mut disk, 1).pop().unwrap().buf.unwrap();
    assert_eq!(buf.as_slice(), &data[..]);
    disk.close(file).unwrap();
    // A missing source fails with its errno, and nothing is left open.
    disk.submit_rename(id(5), &spare, &old, Some(OpenOptions::existing_direct()))
        .unwrap();
    let done = wait_for(&mut disk, 1);
    assert!(
        done[0]
            .result
            .as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::ENOENT)),
        "{:?}",
        done[0].result
    );
}

#[test]
fn remove_dir_removes_only_an_empty_directory() {
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    let dir = TempDir::new("remove-dir");
    let sub = dir.path("queue");
    disk.create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("00000000000000000000"), b"x").unwrap();
    let full = disk.remove_dir(&sub).unwrap_err();
    assert_eq!(full.raw_os_error(), Some(libc::ENOTEMPTY), "{full}");
    disk.remove(&sub.join("00000000000000000000")).unwrap();
    disk.remove_dir(&sub).unwrap();
    assert!(!sub.exists());
    let gone = disk.remove_dir(&sub).unwrap_err();
    assert_eq!(gone.raw_os_error(), Some(libc::ENOENT), "{gone}");
}

#[test]
fn a_disk_on_a_shared_ring_gets_its_completions_from_the_loops_turn() {
    let Some(ring) = ring_or_skip() else {
        return;
    };
    const LOOP_OWNER: u8 = 0x4E;
    let shared = SharedRing::new(ring);
    let loop_lane = shared.lane(LOOP_OWNER, 16).expect("the loop's lane");
    let disk_slots = shared.capacity() - 16;
    let mut disk = UringDisk::on_shared_ring(&shared, disk_slots, small_disk_config())
        .expect("the disk's lane");
    let dir = TempDir::new("shared-ring");
    let path = dir.path("00000000000000000000");
    let file = disk
        .open(&path, OpenOptions::create_direct(1 << 20))
        .unwrap();
    let data = pattern(2 * BLOCK_SIZE, 3);
    let write = DiskOp::Write {
        file,
        file_offset: 0,
        buf: filled_buf(&data),
        buf_range: 0..data.len(),
    };
    disk.submit(id(1), write, true).unwrap();
    disk.submit(id(2), DiskOp::Fdatasync { file }, false)
        .unwrap();
    loop_lane
        .submit(u64::from(LOOP_OWNER) << 56 | 9, Op::Nop, false)
        .unwrap();
    // A poll that does not wait neither submits nor reaps on a shared ring.
    let enters = disk.ring_stats().enters;
    let mut out = Vec::new();
    disk.poll(&mut out, 64, Wait::No).unwrap();
    assert!(out.is_empty());
    assert_eq!(
        disk.ring_stats().enters,
        enters,
        "nothing entered the kernel"
    );
    // The loop's turns submit everything and keep only the loop's own.
    let mut turn = TurnOutput::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while disk.in_flight() > 0 && Instant::now() < deadline {
        loop_lane
            .turn(Some(Duration::from_millis(100)), 64, &mut turn)
            .unwrap();
        disk.poll(&mut out, 64, Wait::No).unwrap();
    }
    let tokens: Vec<u64> = turn.completions.iter().map(|c| c.token).collect();
    assert_eq!(tokens, vec![u64::from(LOOP_OWNER) << 56 | 9]);
    let ids: Vec<OpId> = out.iter().map(|c| c.op_id).collect();
    assert_eq!(ids, vec![id(1), id(2)], "the write, then its fdatasync");
    assert!(out.iter().all(|c| c.result.is_ok()));
    // A poll that waits turns the ring itself, parking the loop's.
    loop_lane
        .submit(u64::from(LOOP_OWNER) << 56 | 10, Op::Nop, false)
        .unwrap();
    let read = DiskOp::Read {
        file,
        file_offset: 0,
        buf: AlignedBuf::new(data.len()),
        len: data.len(),
    };
    disk.submit(id(3), read, false).unwrap();
    let done = wait_for(&mut disk, 1);
    assert_eq!(done[0].buf.as_ref().unwrap().as_slice(), &data[..]);
    let mut turn = TurnOutput::new();
    loop_lane.take_parked(64, &mut turn);
    let deadline = Instant::now() + Duration::from_secs(10);
    while turn.completions.is_empty() && Instant::now() < deadline {
        loop_lane
            .turn(Some(Duration::from_millis(100)), 64, &mut turn)
            .unwrap();
    }
    assert_eq!(turn.completions[0].token, u64::from(LOOP_OWNER) << 56 | 10);
    disk.close(file).unwrap();
}

/// A full index file, once written and synced, is read through a mapping
/// of the file rather than held in memory; queries answer the same, and a
/// reopened index maps it again.
#[test]
fn a_full_index_file_is_read_through_a_mapping_of_it() {
    use ringmq_storage::index_file::{IndexGeometry, IndexRecord, IndexService};
    let Some(mut disk) = disk_or_skip(small_disk_config()) else {
        return;
    };
    let dir = TempDir::new("index-view");
    let index_dir = dir.path("index");
    let geometry = IndexGeometry {
        hash_slot_count: 4096,
        entry_count_max: 500,
    };
    let mut index = IndexService::new(&index_dir, geometry).unwrap();
    let keys: Vec<String> = (0..700).map(|i| format!("{i}-key")).collect();
    for (i, key) in keys.iter().enumerate() {
        let record = IndexRecord {
            topic: "T",
            commit_log_offset: 1000 + i as u64,
            store_timestamp_ms: 1_700_000_000_000,
            sys_flag: 0,
            uniq_key: Some(key),
            keys: None,
        };
        index.build_index(&record, 1_700_000_000_000);
    }
    assert_eq!(index.files().len(), 2);
    let answers = |index: &IndexService| -> Vec<Vec<u64>> {
        keys.iter()
            .map(|key| index.query("T", key, 8, 0, i64::MAX).phy_offsets)
            .collect()
    };
    let expected = answers(&index);
    assert!(expected.iter().all(|found| found.len() == 1));
    // One turn of the store's loop: the flush (the write-behind, or
    // everything as at shutdown), then the completions.
    let turn = |index: &mut IndexService, disk: &mut UringDisk, everything: bool| {
        if everything {
            index.flush_everything(disk).unwrap();
        } else {
            index.flush(disk).unwrap();
        }
        let mut out = Vec::new();
        disk.poll(&mut out, 64, Wait::AtLeastOne(Duration::from_millis(10)))
            .unwrap();
        for completion in out {
            index.on_completion(disk, completion);
        }
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !index.files()[0].is_on_view() {
        assert!(Instant::now() < deadline, "the full file never left memory");
        turn(&mut index, &mut disk, false);
        index.advance_durable_point(1000 + keys.len() as u64);
    }
    assert!(index.take_errors().is_empty());
    assert_eq!(index.files()[0].allocated_pages(), 0);
    assert_eq!(answers(&index), expected);
    // Shut down as the store does, then open the directory again.
    while !index.is_clean() || !index.is_idle() {
        assert!(Instant::now() < deadline, "the index never became clean");
        turn(&mut index, &mut disk, true);
    }
    index.close_all(&mut disk).unwrap();
    drop(index);
    let loaded = IndexService::load(&mut disk, &index_dir, geometry).unwrap();
    assert!(loaded.files()[0].is_on_view());
    assert!(!loaded.files()[1].is_on_view());
    assert_eq!(answers(&loaded), expected);
}

/// A ConsumeQueue on a real disk leaves memory for mappings of its files:
/// a full file wholly, the file being filled in whole chunks, both once
/// written and fdatasynced; reads answer the same, and so does a reload.
#[test]
fn consume_queue_entries_leave_memory_for_mappings_once_synced() {
    use ringmq_storage::consume_queue::{CQ_FILE_ENTRY_COUNT, ConsumeQueue, CqEntry, LastStop};
    let Some(mut disk) = disk_or_skip(UringDiskConfig {
        allow_buffered_fallback: true,
        ..small_disk_config()
    }) else {
        return;
    };
    let dir = TempDir::new("cq-views");
    let root = dir.path("consumequeue");
    // A full file and 3,000 entries: two whole 1,024-entry chunks and a
    // partial one.
    let total = CQ_FILE_ENTRY_COUNT as u64 + 3_000;
    let entry = |n: u64| CqEntry {
        commit_log_offset: 1_000 + n * 100,
        size: 100,
        tags_code: n as i64,
    };
    let mut queue = ConsumeQueue::new(&root, "T", 0).unwrap();
    for n in 0..total {
        queue.append(n, entry(n)).unwrap();
    }
    let held_at_first = queue.memory_bytes();
    assert_eq!(held_at_first, total as usize * 20);
    let deadline = Instant::now() + Duration::from_secs(20);
    // Flushes until everything is written and synced, then one more: the
    // flush after a sync completes hands the synced bytes to the mappings.
    let mut settled_flushes = 0;
    while settled_flushes < 2 {
        assert!(Instant::now() < deadline, "the queue never settled");
        queue.flush(&mut disk).unwrap();
        let mut out = Vec::new();
        disk.poll(&mut out, 64, Wait::AtLeastOne(Duration::from_millis(10)))
            .unwrap();
        for completion in out {
            queue.on_completion(&mut disk, completion);
        }
        if queue.is_clean() && queue.is_idle() {
            settled_flushes += 1;
        }
    }
    assert!(queue.take_errors().is_empty());
    assert_eq!(queue.file_count(), 2);
    let held = queue.memory_bytes();
    assert!(
        held < 1_024 * 20,
        "{held} of {held_at_first} bytes still in memory: more than one partial chunk"
    );
    let check = |queue: &ConsumeQueue| {
        for n in [
            0,
            1,
            CQ_FILE_ENTRY_COUNT as u64 - 1,
            CQ_FILE_ENTRY_COUNT as u64,
            total - 1,
        ] {
            assert_eq!(queue.entry(n), Some(entry(n)), "entry {n}");
        }
        let across = queue.entries(CQ_FILE_ENTRY_COUNT as u64 - 2, 4);
        let want: Vec<CqEntry> = (CQ_FILE_ENTRY_COUNT as u64 - 2..CQ_FILE_ENTRY_COUNT as u64 + 2)
            .map(entry)
            .collect();
        assert_eq!(across, want);
    };
    check(&queue);
    queue.close_files(&mut disk).unwrap();
    drop(queue);
    let loaded = ConsumeQueue::load(&mut disk, &root, "T", 0, LastStop::Clean).unwrap();
    assert_eq!(loaded.max_offset(), total);
    assert_eq!(loaded.memory_bytes(), 0, "a loaded queue maps every file");
    check(&loaded);
}

#[test]
fn consume_queue_files_on_disk_take_only_the_blocks_written() {
    use ringmq_storage::consume_queue::CQ_FILE_SIZE;
    use std::os::unix::fs::MetadataExt;
    // A broker with thousands of queues must not reserve 6 MB of disk for
    // each queue's first message (RocketMQ's mapped files are sparse too).
    const QUEUES: u32 = 8;
    let dir = TempDir::new("cq-sparse");
    let mut queue_root = PathBuf::new();
    let Some(mut store) = small_store(&dir, |config| {
        config.retention.clean_file_forcibly_enable = false;
        queue_root = config.consume_queue_root.clone();
    }) else {
        return;
    };
    for queue_id in 0..QUEUES {
        store.append(&message(queue_id, b"x"), 1).unwrap();
    }
    let mut acks = Vec::new();
    store.shutdown(2, &mut acks).unwrap();
    assert_eq!(acks.len(), QUEUES as usize);
    let mut files = 0;
    for queue_id in 0..QUEUES {
        let queue_dir = ringmq_storage::consume_queue::queue_dir(&queue_root, "T", queue_id);
        for entry in std::fs::read_dir(&queue_dir).unwrap() {
            let meta = entry.unwrap().metadata().unwrap();
            assert_eq!(meta.len(), CQ_FILE_SIZE as u64, "Java's file size");
            assert!(
                meta.blocks() * 512 <= 64 * 1024,
                "queue {queue_id}: {} bytes allocated for one entry",
                meta.blocks() * 512
            );
            files += 1;
        }
    }
    assert_eq!(files, QUEUES);
}

/// Opens `count` buffered files under `dir` and writes 4 KiB to each.
fn written_buffered_files(disk: &mut UringDisk, dir: &TempDir, count: usize) -> Vec<FileId> {
    let files: Vec<FileId> = (0..count)
        .map(|n| {
            disk.open(&dir.path(&format!("q{n}")), OpenOptions::buffered(Some(0)))
                .expect("opening a buffered file")
        })
        .collect();
    for (n, &file) in files.iter().enumerate() {
        let data = pattern(4096, n as u8);
        disk.submit(
            id(n as u64),
            DiskOp::Write {
                file,
                file_offset: 0,
                buf: filled_buf(&data),
                buf_range: 0..4096,
            },
            false,
        )
        .expect("submitting a write");
    }
    for done in wait_for(disk, count) {
        assert_eq!(done.result.expect("a write"), 4096);
    }
    files
}

/// Fdatasyncs every file (ids from `first_id`), waits for them all, and
/// returns the (syncfs calls, fdatasyncs they covered, ring fsyncs) added.
fn sync_all(disk: &mut UringDisk, files: &[FileId], first_id: u64) -> (u64, u64, u64) {
    let (group_before, ring_before) = (disk.group_sync_stats(), disk.ring_stats());
    for (n, &file) in files.iter().enumerate() {
        disk.submit(id(first_id + n as u64), DiskOp::Fdatasync { file }, false)
            .expect("submitting an fdatasync");
    }
    let mut done = wait_for(disk, files.len());
    done.sort_by_key(|c| c.op_id.seq());
    let ids: Vec<u64> = done.iter().map(|c| c.op_id.seq()).collect();
    let want: Vec<u64> = (first_id..first_id + files.len() as u64).collect();
    assert_eq!(ids, want, "every fdatasync completes once");
    for completion in done {
        assert_eq!(completion.result.expect("an fdatasync"), 0);
    }
    let (group, ring) = (disk.group_sync_stats(), disk.ring_stats());
    (
        group.syncfs_calls - group_before.syncfs_calls,
        group.fdatasyncs_covered - group_before.fdatasyncs_covered,
        ring.fsyncs_submitted - ring_before.fsyncs_submitted,
    )
}

/// Fdatasyncs of buffered files run as one syncfs per group once their
/// rate reaches `group_sync_min_per_s`, else as a ring fsync each; either
/// way each completes with its own id, and a file can be closed while its
/// sync waits.
#[test]
fn fdatasyncs_of_buffered_files_run_as_one_syncfs_from_the_configured_rate() {
    let config = |group_sync_min_per_s| UringDiskConfig {
        group_sync_min_per_s,
        ..small_disk_config()
    };
    // Always grouped: the first fdatasync starts a syncfs at once, the 39
    // submitted while it runs wait for one more; none goes to the ring.
    let Some(mut disk) = disk_or_skip(config(Some(0))) else {
        return;
    };
    let dir = TempDir::new("group-sync-always");
    let files = written_buffered_files(&mut disk, &dir, 40);
    assert_eq!(sync_all(&mut disk, &files, 1_000), (2, 40, 0));
    // Closing waits for the file's sync, wherever it runs; its completion
    // is still returned.
    for (n, &file) in files.iter().enumerate() {
        disk.submit(id(2_000 + n as u64), DiskOp::Fdatasync { file }, false)
            .unwrap();
    }
    disk.close(files[0]).unwrap();
    assert_eq!(wait_for(&mut disk, 40).len(), 40);
    for (n, &file) in files.iter().enumerate().skip(1) {
        disk.close(file).unwrap();
        let bytes = std::fs::read(dir.path(&format!("q{n}"))).unwrap();
        assert_eq!(bytes, pattern(4096, n as u8));
    }

    // An fdatasync linked behind a write follows it on the ring.
    let file = disk
        .open(&dir.path("linked"), OpenOptions::buffered(Some(0)))
        .unwrap();
    let write = DiskOp::Write {
        file,
        file_offset: 0,
        buf: filled_buf(&pattern(4096, 7)),
        buf_range: 0..4096,
    };
    let (group_before, ring_before) = (disk.group_sync_stats(), disk.ring_stats());
    disk.submit(id(3_000), write, true).unwrap();
    disk.submit(id(3_001), DiskOp::Fdatasync { file }, false)
        .unwrap();
    for completion in wait_for(&mut disk, 2) {
        assert!(completion.result.is_ok(), "{completion:?}");
    }
    assert_eq!(disk.group_sync_stats(), group_before);
    assert_eq!(
        disk.ring_stats().fsyncs_submitted,
        ring_before.fsyncs_submitted + 1
    );

    // Off: a ring fsync each.
    let mut disk = disk_or_skip(config(None)).unwrap();
    let dir = TempDir::new("group-sync-off");
    let files = written_buffered_files(&mut disk, &dir, 40);
    assert_eq!(sync_all(&mut disk, &files, 1_000), (0, 0, 40));

    // From a rate of 30 a second: the first 40 (no rate measured yet) go to
    // the ring, the next 40, a second later, in two syncfs as above.
    let mut disk = disk_or_skip(config(Some(30))).unwrap();
    let dir = TempDir::new("group-sync-rate");
    let files = written_buffered_files(&mut disk, &dir, 40);
    assert_eq!(sync_all(&mut disk, &files, 1_000), (0, 0, 40));
    std::thread::sleep(Duration::from_millis(1_100));
    assert_eq!(sync_all(&mut disk, &files, 2_000), (2, 40, 0));
}

#[test]
fn a_range_shipped_from_a_segment_reaches_a_socket_through_the_pipe() {
    use ringmq_storage::commit_log::ShipPipe;
    use std::sync::Arc;
    let dir = TempDir::new("ship");
    let Some(mut store) = small_store(&dir, |config| config.tail_cache_bytes = 0) else {
        return;
    };
    let mut acks = Vec::new();
    for n in 0..300usize {
        let body = vec![n as u8; 200 + n * 13 % 1_500];
        store.append(&message(0, &body), 1).unwrap();
        store.poll(1, &mut acks).unwrap();
    }
    while acks.len() < 300 {
        store
            .poll_wait(1, Duration::from_millis(100), &mut acks)
            .unwrap();
    }
    let mut offsets: Vec<u64> = acks.iter().map(|ack| ack.commit_log_offset).collect();
    offsets.sort_unstable();
    // Records 7 to 249, at an offset no block boundary: the pipe gets
    // whole blocks around them.
    let (from, to) = (offsets[7], offsets[250]);
    let len = (to - from) as usize;
    let mut want = Vec::new();
    for offset in &offsets[7..250] {
        want.extend(store.read_record(*offset).unwrap().unwrap());
    }
    assert_eq!(want.len(), len);
    let pipe = Arc::new(ShipPipe::new(1 << 20).unwrap());
    let ticket = store.start_ship(from, len, &pipe).unwrap().unwrap();
    let mut done = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while done.is_empty() && Instant::now() < deadline {
        store
            .poll_wait(1, Duration::from_millis(100), &mut acks)
            .unwrap();
        store.take_shipped(&mut done);
    }
    let shipment = done.pop().expect("the ship completes").unwrap();
    assert_eq!(shipment.ticket, ticket);
    assert_eq!(shipment.head as u64, from % BLOCK_SIZE as u64);
    assert_eq!(pipe.held().unwrap(), shipment.head + len + shipment.tail);
    // Head dropped, the range spliced on to a socket, tail dropped.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut receiver, _) = listener.accept().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = vec![0; len];
        receiver.read_exact(&mut got).unwrap();
        got
    });
    pipe.discard(shipment.head).unwrap();
    pipe.splice_to(sender.as_raw_fd(), len).unwrap();
    pipe.discard(shipment.tail).unwrap();
    assert_eq!(pipe.held().unwrap(), 0);
    assert!(
        reader.join().unwrap() == want,
        "the socket got the records' bytes"
    );
    // What is not acknowledgeable is not shipped.
    let end = store.commit_log().max_offset();
    assert_eq!(store.start_ship(end - 1, 2, &pipe).unwrap(), None);
}
