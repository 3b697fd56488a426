//! Limits and defaults of the store (CommitLog, checkpoint, recovery, the
//! store loop). The "queues" files keep their own constants
//! (ConsumeQueue/IndexFile sizes) beside their code.
//!
//! Relationships between limits are checked at compile time below.

use ringmq_protocol::limits::MESSAGE_SIZE_MAX;

use crate::aligned::BLOCK_SIZE;

/// Default CommitLog segment size (RocketMQ `mappedFileSizeCommitLog`, 1 GiB).
pub const COMMIT_LOG_SEGMENT_SIZE_DEFAULT: u64 = 1024 * 1024 * 1024;

/// Smallest segment size accepted by config (tests use small segments).
pub const COMMIT_LOG_SEGMENT_SIZE_MIN: u64 = 64 * 1024;

/// Largest stored record: a whole message (or batch) body plus room for the
/// fixed fields, topic and properties.
pub const RECORD_SIZE_MAX: usize = MESSAGE_SIZE_MAX as usize + 64 * 1024;

/// A CommitLog write buffer: records are encoded into the active one, and
/// group commits write its blocks straight from it; once written, it serves
/// reads as part of the tail cache.
pub const WRITE_BUFFER_SIZE: usize = 8 * 1024 * 1024;

/// Bytes of recent CommitLog kept in memory for reads (the tail cache): the
/// write buffers are kept while they hold at most this much.
pub const TAIL_CACHE_SIZE: usize = 64 * 1024 * 1024;

/// Period of the checkpoint rewrite while the store runs (RocketMQ rewrites
/// it with the thorough ConsumeQueue flush, every 60 s; ours is cheap).
pub const CHECKPOINT_INTERVAL_MS_DEFAULT: u64 = 1_000;

/// Default ConsumeQueue (and index) write-behind period
/// (`flushIntervalConsumeQueue`, RocketMQ's 1 s). Each flush writes every
/// queue's new entries through the page cache and fdatasyncs them, a
/// write and an fdatasync per queue: at 100 ms (the default from the
/// fourth session to the twenty-second) 4,000 queues asked for 80,000
/// operations a second and storage-bench's appends over them ran at half
/// the rate with a p99 of 15 ms. A hot queue does not wait for the
/// interval ([`CONSUME_QUEUE_FLUSH_EARLY_BYTES_DEFAULT`]), so the 20 MB
/// bursts that a 1 s period once meant for one queue at ~1 M appends/s
/// (docs/BENCHMARKS.md, fourth session) do not come back.
pub const CONSUME_QUEUE_FLUSH_INTERVAL_MS_DEFAULT: u64 = 1000;

/// Unwritten ConsumeQueue bytes at which a queue is flushed at once rather
/// than at the next interval, so one hot queue never meets the disk with more
/// than this in one burst. At ~1 M SYNC_FLUSH appends/s into one queue the
/// 100 ms round wrote 2 MB at a time and the appends' p99 was about 2.2 ms;
/// rounds of 5–10 ms (100–200 KB) brought it to about 1.6 ms at the same
/// throughput (docs/BENCHMARKS.md, sixth session). Queues slower than this
/// per interval still flush once per interval, so many quiet queues do not
/// multiply the fdatasyncs.
pub const CONSUME_QUEUE_FLUSH_EARLY_BYTES_DEFAULT: usize = 128 * 1024;

/// Bytes of index entries put since the file's last round of writes at
/// which the index file being filled is flushed at once rather than at the
/// next interval, for the same reason: with a Java producer's UNIQ_KEY on
/// every message, two million keys a second put 4 MB of entries into each
/// 100 ms round, and copying them took the shard 0.7–1.8 ms in one turn.
pub const INDEX_FLUSH_EARLY_BYTES_DEFAULT: usize = 128 * 1024;

/// Disk operations in flight past which ConsumeQueue flushes wait for the
/// next round. A shard with thousands of queues would otherwise fill the
/// disk's share of the ring with queue writes in one flush, and a commit
/// that then finds no room fails the CommitLog for good. The commits (at
/// most two writes each, [`COMMITS_IN_FLIGHT_MAX`] of them, and an
/// fdatasync of each of at most two segments), reads and the index keep the
/// rest of [`DISK_LANE_SLOTS_MIN`].
pub const CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX: usize = 512;

/// Fdatasyncs of buffered files (ConsumeQueues, the index) per second from
/// which the disk runs them as one `syncfs` per group instead of a ring
/// fsync each (see `disk::group_sync`). Measured here (one shard, 1 KiB
/// records, ASYNC_FLUSH): with 10,000 queues (about 8,000 fdatasyncs a
/// second) groups took appends from 430–590 to 760–810 MB/s and p99.9 from
/// 148–254 to 31–49 ms; with 1,000 queues (about 1,000 a second)
/// throughput moved within the noise but p99 rose from 0.83–0.94 to
/// 1.1–1.8 ms, so below this rate each stays a ring fsync.
pub const GROUP_SYNC_MIN_PER_S_DEFAULT: u64 = 2_000;

/// Window over which the disk measures that rate.
pub const GROUP_SYNC_RATE_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

/// Fewest ring slots a shard's disk lane gets beside its connections.
pub const DISK_LANE_SLOTS_MIN: usize = 1024;

const _: () = assert!(
    CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX + 2 * COMMITS_IN_FLIGHT_MAX + 2 < DISK_LANE_SLOTS_MIN
);

/// How often the store checks the disk usage (statvfs).
pub const DISK_SPACE_CHECK_INTERVAL_MS: u64 = 1_000;

/// Largest message body accepted (RocketMQ `maxMessageSize`).
pub const MESSAGE_SIZE_MAX_BYTES: usize = MESSAGE_SIZE_MAX as usize;

/// ConsumeQueue entries one `get_messages` call walks at most (RocketMQ
/// `maxFilterMessageCount` 16000 bytes of entries / 20).
pub const GET_MESSAGES_SCAN_ENTRIES_MAX: usize = 800;

/// Poll rounds of 100 ms in a row without a completion after which
/// `shutdown` gives up on the disk (60 s of no progress). Only rounds that
/// saw nothing count: a store with thousands of queues needs thousands of
/// rounds to write and fdatasync them all, each ending at its first
/// completion, and a bound on all rounds failed such a shutdown on a
/// healthy disk.
pub const SHUTDOWN_IDLE_POLL_ROUNDS_MAX: u32 = 600;

/// Rounds of a shutdown in which ConsumeQueue or index writes failed (each
/// round retries them) before they are left to the next start's recovery:
/// on a full disk they fail every time.
pub const SHUTDOWN_DERIVED_FAILED_ROUNDS_MAX: u32 = 10;

/// Most completions reaped per poll turn (style.md section 2).
pub const COMPLETIONS_PER_TURN_MAX: usize = 256;

/// Default period of the ASYNC_FLUSH fdatasync (RocketMQ
/// `flushIntervalCommitLog`, 500 ms).
pub const FLUSH_INTERVAL_MS_DEFAULT: u64 = 500;

/// Default SYNC_FLUSH timeout (RocketMQ `syncFlushTimeout`, 5 s).
pub const SYNC_FLUSH_TIMEOUT_MS_DEFAULT: u64 = 5_000;

/// The next segment is created when the active one is filled past this
/// fraction (in percent), so an append never waits for a `fallocate`.
pub const SEGMENT_PREALLOCATE_THRESHOLD_PERCENT: u64 = 50;

/// Default spare pool of retired CommitLog segments kept for reuse
/// (`StoreConfig::commit_log_recycle_segments`).
pub const COMMIT_LOG_RECYCLE_SEGMENTS_DEFAULT: usize = 2;

/// Default step by which a retired CommitLog segment is shrunk before its
/// unlink (`StoreConfig::commit_log_remove_step_bytes`): 0, unlinked whole.
/// Steps (64 MiB, say) cut the longest stall behind the discard of a
/// removed segment but raise p99 append latency, because the CommitLog then
/// waits behind discards for more of the time (docs/BENCHMARKS.md, tenth
/// and eleventh sessions), so they are opt-in.
pub const COMMIT_LOG_REMOVE_STEP_BYTES_DEFAULT: u64 = 0;

/// Pause before a failed background segment creation is tried again.
pub const SEGMENT_CREATE_RETRY_MS: u64 = 100;

/// Creation attempts a roll-over waiting for its segment makes before the
/// append fails.
pub const SEGMENT_CREATE_WAIT_MAX: u32 = 3;

/// After a roll-over failed to create its segment, appends that need it
/// fail at once for this long, instead of each waiting for attempts of its
/// own (and logging them): with the store's directory gone, every append
/// of a loaded broker made three attempts and five log lines.
pub const SEGMENT_CREATE_FAILED_HOLD_MS: u64 = 1_000;

/// A failing background segment creation is logged at most this often.
pub const SEGMENT_CREATE_LOG_INTERVAL_MS: u64 = 10_000;

/// Size of the checkpoint file (one block, written with O_DIRECT).
pub const CHECKPOINT_FILE_SIZE: usize = 4096;

/// How far past the end of the active write buffer's records an append asks
/// the CPU to fetch cache lines for writing (as many bytes as the record it
/// encodes). A write buffer's bytes were last used a tail cache (tens of
/// MiB) ago, so without it each record's stores miss the core's caches, and
/// the CRC loads that follow them, which the CPU cannot forward from several
/// smaller stores, wait for those misses. One sweep of
/// `examples/append-cost` (user CPU per append against none): 1,024 B
/// -13 %, 2,048 B -17 %, 4,096 B -24 %, 8,192 B no clear gain; storage-bench
/// ASYNC_FLUSH with 4,096 in flight: CPU per MB -16 % (docs/BENCHMARKS.md,
/// twelfth session).
pub const WRITE_PREFETCH_AHEAD_BYTES: usize = 4096;

/// CommitLog commits (O_DIRECT writes) in flight at once. Each holds a
/// write buffer until it completes. 8 measured ~7 % more ASYNC_FLUSH
/// throughput than 4 here.
pub const COMMITS_IN_FLIGHT_MAX: usize = 8;

/// ASYNC_FLUSH: whole-block bytes a commit started behind others (or
/// while appends keep arriving) waits for at least; fewer wait for the next
/// turn. With more in flight it waits for half the bytes of the commits in
/// flight, up to [`COMMIT_BEHIND_BYTES_MAX_ASYNC`]: every write costs the
/// appending thread its direct-I/O submission and a virtio doorbell (about
/// 8 µs together here), and while the disk holds two such halves it does not
/// idle. storage-bench ASYNC_FLUSH, 1,024 appends of 1 KiB in flight,
/// against a fixed 64 KiB: commits of about 190 instead of 128 records,
/// +11 % MB/s and -9 % CPU per MB on average over 8 alternating pairs
/// (docs/BENCHMARKS.md, seventeenth session). With 512 or fewer in flight
/// the commits keep the sizes they had. A fixed 512 KiB, tried before, lost
/// 14-45 % there: the window then held fewer than two commits.
pub const COMMIT_BEHIND_BYTES_MIN_ASYNC: usize = 64 * 1024;

/// ASYNC_FLUSH: the most a commit behind others waits for.
pub const COMMIT_BEHIND_BYTES_MAX_ASYNC: usize = 512 * 1024;

/// SYNC_FLUSH: as [`COMMIT_BEHIND_BYTES_MIN_ASYNC`]. Measured when each
/// commit still carried its own fdatasync: 64, 128 and 256 KiB gave the same
/// throughput here, and 64 KiB the lowest p99.
pub const COMMIT_BEHIND_BYTES_MIN_SYNC: usize = 64 * 1024;

/// Size of one recovery scan read. The scan is CPU-bound on this machine and
/// touches each record's first and last cache lines: chunks that small are
/// still in the cache when scanned; 8 MiB chunks (4 in flight) scanned 4 GiB
/// at 960-1,080 MB/s, 1 MiB (8 in flight) at 1,100-1,240 MB/s. A record
/// larger than a chunk is assembled across chunks (the scan's carry).
pub const RECOVERY_READ_SIZE: usize = 1024 * 1024;

/// Recovery scan chunks read ahead at once: reads in flight plus chunks
/// that arrived and wait to be scanned.
pub const RECOVERY_READS_IN_FLIGHT_MAX: usize = 8;

/// Plain (unregistered) buffers a `UringDisk` keeps for reuse once their
/// writes complete, at most this many and [`PLAIN_BUFFER_SPARE_BYTES_MAX`]
/// bytes in all. The ConsumeQueue, index and checkpoint writes stage their
/// bytes in such buffers. Freed and allocated again for every write, each
/// one was faulted in as fresh (huge) pages and zeroed: 5 % of the
/// appending thread's samples in ASYNC_FLUSH, and reusing them cut its CPU
/// per MB by 17 % on a growing log (fifteenth session, docs/BENCHMARKS.md).
pub const PLAIN_BUFFER_SPARES_MAX: usize = 16;

/// Bytes of the plain buffers a `UringDisk` keeps for reuse, at most.
pub const PLAIN_BUFFER_SPARE_BYTES_MAX: usize = 4 * WRITE_BUFFER_SIZE;

/// Bytes appended but not yet written beyond which appends are refused with
/// `StorageError::Busy`.
pub const PENDING_WRITE_BYTES_MAX: usize = 2 * WRITE_BUFFER_SIZE;

/// Write buffers a CommitLog uses at most with a tail cache of
/// `tail_cache_bytes`: the written ones the cache keeps, those holding
/// [`PENDING_WRITE_BYTES_MAX`] not yet written, and the active one. The
/// size of a registered-buffer pool that covers them all.
pub const fn write_buffers_in_use_max(tail_cache_bytes: usize) -> usize {
    tail_cache_bytes.div_ceil(WRITE_BUFFER_SIZE) + PENDING_WRITE_BYTES_MAX / WRITE_BUFFER_SIZE + 1
}

/// Default disk usage ratio above which writes are rejected (RocketMQ
/// `diskMaxUsedSpaceRatio` 75 % triggers cleaning; 95 % rejects writes).
pub const DISK_FULL_RATIO_DEFAULT: f64 = 0.95;

/// Bits of an outside-visible commit log offset that carry the shard id
/// (design.md: the shard id is the offset's top byte).
pub const SHARD_ID_BITS: u32 = 8;

/// Bits of an outside-visible commit log offset that carry the position in
/// the shard's CommitLog.
pub const SHARD_OFFSET_BITS: u32 = 64 - SHARD_ID_BITS;

/// Largest messages one `get_messages` call returns (RocketMQ
/// `maxTransferCountOnMessageInMemory` is 32; clients ask for 32 by default).
pub const GET_MESSAGES_COUNT_MAX: usize = 256;

/// Largest bytes one `get_messages` call returns (RocketMQ
/// `maxTransferBytesOnMessageInMemory`, 256 KiB; we allow more).
pub const GET_MESSAGES_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Longest read a pull makes of records not in the tail cache, their
/// neighbours in the CommitLog included (`Store::get_messages`).
pub const GET_MESSAGES_READ_SPAN_MAX: usize = 1024 * 1024;

/// A pull's background read covers the whole window of this many bytes
/// (aligned within its segment) that holds its first record: the pulls
/// after it, of its queue and of the queues whose records lie between its
/// own, find their records in the read cache instead of each reading its
/// own overlapping span (`CommitLog::start_pull_read`).
pub const PULL_READ_WINDOW_BYTES: usize = 1024 * 1024;

/// How far a pull window's read goes into the next window, so that a
/// record starting near a window's end, up to this long, lies whole in one
/// cached span (a longer one crossing the end is read on its own).
pub const PULL_READ_OVERLAP_BYTES: usize = 64 * 1024;

/// Reads ahead of consumers catching up, in flight at once per shard
/// (`CommitLog::read_ahead`): each a [`PULL_READ_WINDOW_BYTES`] window.
pub const PULL_READ_AHEAD_MAX: usize = 2;

/// Bytes a background read of one record by its offset takes, its
/// neighbours after it included (`Store::record_at`: a consumer's
/// CONSUMER_SEND_MSG_BACK, VIEW_MESSAGE_BY_ID), whose size is not known
/// before the read: most records fit; a larger one is read synchronously
/// when the request runs again.
pub const RECORD_READ_SPAN_BYTES: usize = 64 * 1024;

/// Bytes of spans that background reads for pulls (consumers' and slaves')
/// brought, kept per shard for the pulls executed again once their read
/// completed (and for others of the same span: other queues' records lie
/// between a queue's).
pub const READ_CACHE_BYTES_MAX: usize = 32 * 1024 * 1024;

/// Spans kept at most in that cache: a lookup scans them, and a consumer
/// of one queue among thousands reads spans of one record each.
pub const READ_CACHE_SPANS_MAX: usize = 512;

/// Read buffers the background reads keep for their next reads, the
/// largest (each at most a replica chunk and a block); the spans in the
/// cache hold their buffers too (counted in [`READ_CACHE_BYTES_MAX`]).
pub const SPAN_READ_SPARES_MAX: usize = 4;

const _: () = assert!(COMMIT_LOG_SEGMENT_SIZE_DEFAULT.is_multiple_of(BLOCK_SIZE as u64));
const _: () = assert!(COMMIT_LOG_SEGMENT_SIZE_MIN.is_multiple_of(BLOCK_SIZE as u64));
const _: () = assert!(WRITE_BUFFER_SIZE.is_multiple_of(BLOCK_SIZE));
const _: () = assert!(TAIL_CACHE_SIZE.is_multiple_of(BLOCK_SIZE));
const _: () = assert!(RECOVERY_READ_SIZE.is_multiple_of(BLOCK_SIZE));
const _: () = assert!(CHECKPOINT_FILE_SIZE == BLOCK_SIZE);
// A record always fits the write buffer with room for the partial block
// re-written ahead of it.
const _: () = assert!(RECORD_SIZE_MAX + BLOCK_SIZE <= WRITE_BUFFER_SIZE);
const _: () = assert!(RECORD_SIZE_MAX as u64 <= COMMIT_LOG_SEGMENT_SIZE_DEFAULT / 2);
const _: () = assert!(TAIL_CACHE_SIZE >= 2 * WRITE_BUFFER_SIZE);
const _: () = assert!(SEGMENT_PREALLOCATE_THRESHOLD_PERCENT < 100);
// A commit behind others must fit one write buffer.
const _: () = assert!(COMMIT_BEHIND_BYTES_MIN_ASYNC <= COMMIT_BEHIND_BYTES_MAX_ASYNC);
const _: () = assert!(COMMIT_BEHIND_BYTES_MAX_ASYNC + BLOCK_SIZE <= WRITE_BUFFER_SIZE);
const _: () = assert!(COMMIT_BEHIND_BYTES_MIN_SYNC + BLOCK_SIZE <= WRITE_BUFFER_SIZE);

/// Default `cleanResourceInterval`: how often retention runs (RocketMQ's
/// 10 s).
pub const CLEAN_RESOURCE_INTERVAL_MS_DEFAULT: u64 = 10_000;

/// ConsumeQueues cleaned below the CommitLog min offset per loop turn after
/// a segment removal (each may unlink a few files in the background).
pub const RETENTION_QUEUES_PER_TURN_MAX: usize = 16;

/// ConsumeQueue files removed per loop turn at most after a segment
/// removal: dropping a file's 6 MB image is about 75 frees, and a turn that
/// dropped every expired file of a shard's queues spent 27 ms in them (ninth
/// session, docs/BENCHMARKS.md).
pub const RETENTION_CQ_FILES_PER_TURN_MAX: usize = 8;

/// Without a hardware carry-less multiplication, bodies at least this large
/// get their record CRC (`__CRC32#`) by combining BODYCRC with the CRC of the
/// bytes around the body instead of a second pass over it; smaller ones take
/// the pass. With PCLMULQDQ every body is combined (the combination costs
/// about 140 instructions, a pass about 0.55 per byte plus the bytes around
/// the body read twice; callgrind, `examples/append-cost.rs`). The portable
/// combination costs a few hundred instructions; this bound, set when the
/// combination took about 4,300, has not been measured again.
pub const RECORD_CRC_COMBINE_BODY_SIZE_MIN: usize = 16 * 1024;
