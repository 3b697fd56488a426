//! `UringDisk`: the real [`Disk`], on a shard's io_uring [`Ring`].
//!
//! Data-path operations become ring operations: `Write` is `WRITE_FIXED`
//! when its buffer is one of this disk's registered buffers and `WRITE`
//! otherwise, `Read` likewise, `Fdatasync` is `IORING_OP_FSYNC` with
//! `DATASYNC`, and `link_next` sets `IOSQE_IO_LINK` (so a write and the
//! fdatasync after it go down in one submission and stay ordered).
//! Fdatasyncs of buffered (not `direct`) files are grouped instead while
//! they arrive at [`UringDiskConfig::group_sync_min_per_s`] or more
//! (thousands of ConsumeQueues): one starts a `syncfs` on a helper thread
//! if none runs, and those arriving meanwhile wait for the next
//! (`group_sync.rs`); below that rate each goes to the ring. Metadata
//! operations are synchronous system calls that run at startup and in
//! recovery; [`Disk::submit_create`] and [`Disk::submit_remove`] run the same
//! steps in the background instead, one ring operation per step (openat,
//! fallocate, fsync, openat of the directory, fsync, close; or unlinkat and
//! the directory's three), the next submitted when the previous completes.
//!
//! Creating a file (`create_preallocated: Some(len)`): open with
//! `O_CREAT | O_TRUNC`, `fallocate(len)`, fsync the file and its directory;
//! then, by default, write zeros over the whole length in the background
//! (large writes through the ring, a few in flight, advanced by every
//! `poll`, closed by an fsync) so that later writes land on written extents:
//! on ext4 a write into an unwritten (merely fallocated) extent converts it,
//! and that metadata change makes the following fdatasync commit the journal
//! (measured here: fdatasync p50 ~120 µs on written extents, ~220 µs on
//! unwritten ones). A write reaching past the fill's frontier waits for the
//! zero writes in flight (one chunk) and ends the fill there (the rest keeps
//! unwritten extents); a write below it waits only for a zero write in
//! flight that it overlaps; reads and fdatasyncs do not wait; close and
//! set_len stop the fill (after the zero writes in flight). Zero writes go out only while no
//! caller operation is in flight, so under load a segment ends up with
//! unwritten extents past the fill's frontier rather than the fill halving
//! the bandwidth left for appends. So a zero write never lands on data, and the first append into a
//! segment created ahead of need waits at most for one zero chunk, never
//! for the whole fill.
//!
//! O_DIRECT: a file opened `direct` gets `O_DIRECT`. A file system that
//! refuses it (`EINVAL` at open) is an error naming the cause, unless
//! [`UringDiskConfig::allow_buffered_fallback`] (a development flag) is set,
//! in which case the file is opened buffered with a warning. Alignment is
//! asserted for direct files either way, so code tested on a fallback still
//! obeys the O_DIRECT rules.
//!
//! Buffers: [`Disk::buffer`] hands out a registered buffer from a pool
//! (count and size configured, typically the CommitLog's write buffer size)
//! when the request fits one, is more than half its size, and one is free,
//! zeroed like a fresh `AlignedBuf`; otherwise a plain buffer given back
//! earlier, of the size asked up to twice it, zeroed (a bounded number are
//! kept, [`PLAIN_BUFFER_SPARES_MAX`]); otherwise it allocates. When
//! registration is refused (RLIMIT_MEMLOCK), [`UringDisk::new`] fails if
//! [`UringDiskConfig::fixed_buffers_required`], else it logs the refusal (its
//! message names cause and remedy), keeps it in
//! [`UringDisk::fixed_buffers_error`], and allocates plain buffers.
//!
//! # The ring: owned or shared
//! Standalone (tests, benchmark, tools), [`UringDisk::new`] builds a ring of
//! its own and every `poll` turns it. In the broker,
//! [`UringDisk::on_shared_ring`] opens the disk's [`Lane`] of the shard's one
//! ring, which the shard loop turns (and sleeps in) for its sockets too: a
//! `poll` without waiting then only collects the completions the loop's turn
//! parked for the disk, and what the disk submits goes down with the loop's
//! next turn. A `poll` that waits, and the synchronous steps, turn the ring
//! through the lane themselves (parking what they reap for the other lanes).
//!
//! # Invariants
//! - Every submitted operation has an entry in `ops` until its completion is
//!   returned (directly or through `ready`), and counts in its file's
//!   `in_flight`; a file is closed only when that count is 0.
//! - Ring tokens carry [`DISK_OWNER`] in the top byte (the lane's owner tag);
//!   below it, a token is an `ops` key, or, with [`INTERNAL_TOKEN_BIT`], belongs to
//!   the disk's own operations (zero fill, fallocate, fsync at create, and
//!   with [`METADATA_TOKEN_BIT`] the steps of background creates and removes,
//!   which count in `in_flight` until their one caller completion).
//! - On a shared ring, the disk is dropped only after its lane has nothing
//!   in flight (Drop waits, bounded), so no queued SQE outlives the
//!   descriptor it names.
//! - On direct files, offsets, buffer ranges and lengths are multiples of
//!   [`BLOCK_SIZE`] (asserted at submission).
//! - No caller write is submitted while a zero write it overlaps is in
//!   flight, and no zero write is submitted at or past a caller write.

use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use slab::Slab;

use super::group_sync::GroupSync;
use super::{
    Disk, DiskCompletion, DiskError, DiskOp, FileId, FileView, OpId, OpenOptions, SpaceInfo, Wait,
};
use crate::aligned::{AlignedBuf, BLOCK_SIZE, align_up};
use crate::limits::{
    COMPLETIONS_PER_TURN_MAX, GROUP_SYNC_MIN_PER_S_DEFAULT, GROUP_SYNC_RATE_WINDOW,
    PLAIN_BUFFER_SPARE_BYTES_MAX, PLAIN_BUFFER_SPARES_MAX, WRITE_BUFFER_SIZE,
};
use crate::ring::{
    Completion, FixedBufferPool, Lane, OWNER_SHIFT, Op, Ring, RingConfig, RingError, RingStats,
    SetupFlags, SharedRing, TurnOutput, Waker,
};

/// The owner tag of the disk's ring tokens (their top byte).
pub const DISK_OWNER: u8 = 0xD1;
/// [`DISK_OWNER`] in place.
const DISK_TAG: u64 = (DISK_OWNER as u64) << OWNER_SHIFT;
/// The part of a token below its flags: an `ops` key, a counter, or a slot.
const TOKEN_KEY_MASK: u64 = (1 << 53) - 1;
/// Ring tokens with this bit are the disk's own operations.
pub const INTERNAL_TOKEN_BIT: u64 = 1 << 55;
/// Ring tokens with this bit (and [`INTERNAL_TOKEN_BIT`]) are steps of a
/// background create or remove; the low 32 bits are the job's key.
pub const METADATA_TOKEN_BIT: u64 = 1 << 53;
/// Ring tokens with this bit (and [`INTERNAL_TOKEN_BIT`]) are background
/// zero-fill operations; the low 32 bits are the file's slot.
pub const BACKGROUND_TOKEN_BIT: u64 = 1 << 54;
/// Size of one zero-fill write when creating a file.
pub const ZERO_FILL_CHUNK_SIZE: usize = 1 << 20;
/// Zero-fill writes in flight per file. One: a background fill competes
/// with commit writes for the device; with 4 in flight the SYNC_FLUSH
/// append p99.9 measured 415 ms here, with 1 it measured 43 ms.
pub const ZERO_FILL_IN_FLIGHT: usize = 1;
/// Default number of registered buffers.
pub const FIXED_BUFFER_COUNT_DEFAULT: usize = 4;
/// Most time a synchronous step (close, create) waits for the ring.
pub const SYNC_STEP_TIMEOUT: Duration = Duration::from_secs(60);

const _: () = assert!(ZERO_FILL_CHUNK_SIZE.is_multiple_of(BLOCK_SIZE));

/// How a [`UringDisk`] is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UringDiskConfig {
    /// The ring (depth, stall threshold).
    pub ring: RingConfig,
    /// Registered buffers in the pool (0: none).
    pub fixed_buffer_count: usize,
    /// Size of each registered buffer.
    pub fixed_buffer_size: usize,
    /// Fail [`UringDisk::new`] when registration is refused, instead of
    /// falling back to unregistered buffers.
    pub fixed_buffers_required: bool,
    /// Development only: open `direct` files without O_DIRECT when the file
    /// system refuses it (tmpfs before Linux 6.6, some FUSE and overlay
    /// setups). Durability and latency then differ from production.
    pub allow_buffered_fallback: bool,
    /// Write zeros over newly created files (see the module doc).
    pub zero_fill_on_create: bool,
    /// Fdatasyncs of buffered files per second (over the last second) from
    /// which they run as one `syncfs` per group on a helper thread (see
    /// the module doc); below it, and with `None`, a ring fsync each.
    pub group_sync_min_per_s: Option<u64>,
}

impl Default for UringDiskConfig {
    fn default() -> Self {
        UringDiskConfig {
            ring: RingConfig::default(),
            fixed_buffer_count: FIXED_BUFFER_COUNT_DEFAULT,
            fixed_buffer_size: WRITE_BUFFER_SIZE,
            fixed_buffers_required: false,
            allow_buffered_fallback: false,
            zero_fill_on_create: true,
            group_sync_min_per_s: Some(GROUP_SYNC_MIN_PER_S_DEFAULT),
        }
    }
}

#[derive(Debug)]
struct OpenFile {
    fd: OwnedFd,
    path: PathBuf,
    /// The store treats the file as O_DIRECT (alignment asserted).
    direct: bool,
    /// O_DIRECT is actually set (false after a buffered fallback).
    o_direct: bool,
    in_flight: usize,
    /// Zero fill still running in the background.
    fill: Option<ZeroFill>,
}

/// Progress of a background zero fill of a newly created file.
#[derive(Debug)]
struct ZeroFill {
    /// Next byte to submit a zero write for.
    next_offset: u64,
    /// Length to fill.
    len: u64,
    /// Zero writes in flight.
    in_flight: usize,
    /// The closing fsync is in flight.
    syncing: bool,
    /// A zero write failed; the fill is abandoned (the file still reads as
    /// zeros, its extents are merely unwritten).
    failed: bool,
}

#[derive(Debug)]
struct PendingOp {
    op_id: OpId,
    file: FileId,
}

/// The step a background create or remove waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MetaStep {
    /// `openat(O_CREAT | O_TRUNC)` of the file.
    Open,
    /// `fallocate` of its length.
    Fallocate,
    /// `fsync` of the file.
    SyncFile,
    /// `unlinkat` of the file.
    Unlink,
    /// `renameat` of the file to its new name.
    Rename,
    /// `openat(O_DIRECTORY)` of the parent.
    OpenDir,
    /// `fsync` of the parent.
    SyncDir,
    /// `close` of the parent's descriptor.
    CloseDir,
}

/// A background create ([`Disk::submit_create`]), remove
/// ([`Disk::submit_remove`]) or rename ([`Disk::submit_rename`]), one ring
/// operation per step.
#[derive(Debug)]
struct MetaJob {
    op_id: OpId,
    path: PathBuf,
    /// `Some` for a create, or a rename that opens the file: the options it
    /// was asked with.
    create: Option<OpenOptions>,
    /// `Some` for a rename: the old path (`path` is the new one).
    rename_from: Option<PathBuf>,
    /// O_DIRECT is requested at open (cleared by a buffered fallback).
    o_direct: bool,
    step: MetaStep,
    /// The created file, once open.
    fd: Option<OwnedFd>,
    /// The parent directory, while open.
    dir_fd: Option<OwnedFd>,
    /// The first error; the job still closes what it opened.
    error: Option<DiskError>,
    /// The next step's op, when the ring was full at the previous attempt.
    blocked: Option<Op>,
}

/// The io_uring disk.
#[derive(Debug)]
pub struct UringDisk {
    /// First field, so it drops first: a ring of its own waits for every
    /// in-flight operation before the descriptors in `files` are closed (on
    /// a shared ring, Drop waits for the lane's).
    lane: Lane,
    /// The ring is the disk's own (`new`): `poll` always turns it.
    owns_ring: bool,
    config: UringDiskConfig,
    pool: Option<FixedBufferPool>,
    pool_error: Option<RingError>,
    files: Vec<Option<OpenFile>>,
    free_file_slots: Vec<u32>,
    ops: Slab<PendingOp>,
    ready: VecDeque<DiskCompletion>,
    internal_done: Vec<Completion>,
    turn_output: TurnOutput,
    next_internal: u64,
    /// Files with a zero fill running.
    filling: Vec<FileId>,
    /// Zero buffers of the fills (never written into, so they stay zero).
    zero_bufs: Vec<AlignedBuf>,
    /// Plain buffers given back, for reuse by [`Disk::buffer`] (bounded by
    /// [`PLAIN_BUFFER_SPARES_MAX`] and [`PLAIN_BUFFER_SPARE_BYTES_MAX`]).
    plain_spares: Vec<AlignedBuf>,
    /// Sum of the capacities in `plain_spares`.
    plain_spare_bytes: usize,
    /// Background creates and removes.
    meta: Slab<MetaJob>,
    /// Fdatasyncs of buffered files not on the ring yet (keys in `ops`,
    /// counted in their files' `in_flight`): see `dispatch_syncs`.
    syncs_waiting: Vec<usize>,
    /// The fdatasyncs the running syncfs covers (keys in `ops`).
    syncs_in_group: Vec<usize>,
    /// The syncfs helper, started at the first group.
    group_sync: Option<GroupSync>,
    group_stats: GroupSyncStats,
    /// Fdatasyncs of buffered files asked for since `sync_rate_since`.
    sync_requests: u64,
    sync_rate_since: Instant,
    /// Their rate over the last whole window, per second.
    sync_rate_per_s: u64,
    /// The last op went to the ring with `link_next`: the next one must
    /// follow it there (so it is never grouped).
    linked_to_next: bool,
}

/// What [`UringDisk`]'s group sync has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupSyncStats {
    /// `syncfs` calls completed.
    pub syncfs_calls: u64,
    /// Fdatasyncs those calls stood for.
    pub fdatasyncs_covered: u64,
}

impl UringDisk {
    /// Builds the ring and registers the buffer pool.
    ///
    /// # Errors
    /// [`RingError::Unavailable`] / [`RingError::Unsupported`] when io_uring
    /// cannot be used (cause and fix in the message); a registration error
    /// when `fixed_buffers_required`.
    pub fn new(config: UringDiskConfig) -> Result<Self, RingError> {
        let shared = SharedRing::new(Ring::new(config.ring)?);
        let lane = shared.lane(DISK_OWNER, shared.capacity())?;
        Self::with_lane(lane, true, config)
    }

    /// The disk as a lane of `shared` (a shard's one ring), with room for
    /// `capacity` operations in flight; `config.ring` is not used. The
    /// caller turns the ring (see the module doc).
    ///
    /// # Errors
    /// [`RingError::Lane`] when the ring has no room for the lane (or has a
    /// disk lane already); registration errors as [`UringDisk::new`].
    pub fn on_shared_ring(
        shared: &SharedRing,
        capacity: usize,
        config: UringDiskConfig,
    ) -> Result<Self, RingError> {
        let lane = shared.lane(DISK_OWNER, capacity)?;
        Self::with_lane(lane, false, config)
    }

    fn with_lane(lane: Lane, owns_ring: bool, config: UringDiskConfig) -> Result<Self, RingError> {
        let (pool, pool_error) = if config.fixed_buffer_count == 0 {
            (None, None)
        } else {
            match lane.with_ring(|ring| {
                FixedBufferPool::register(ring, config.fixed_buffer_count, config.fixed_buffer_size)
            }) {
                Ok(pool) => (Some(pool), None),
                Err(error) if !config.fixed_buffers_required => {
                    tracing::warn!(error = %error, "falling back to unregistered buffers");
                    (None, Some(error))
                }
                Err(error) => return Err(error),
            }
        };
        Ok(UringDisk {
            lane,
            owns_ring,
            config,
            pool,
            pool_error,
            files: Vec::new(),
            free_file_slots: Vec::new(),
            ops: Slab::new(),
            ready: VecDeque::new(),
            internal_done: Vec::new(),
            turn_output: TurnOutput::new(),
            next_internal: 0,
            filling: Vec::new(),
            zero_bufs: Vec::new(),
            plain_spares: Vec::new(),
            plain_spare_bytes: 0,
            meta: Slab::new(),
            syncs_waiting: Vec::new(),
            syncs_in_group: Vec::new(),
            group_sync: None,
            group_stats: GroupSyncStats::default(),
            sync_requests: 0,
            sync_rate_since: Instant::now(),
            sync_rate_per_s: 0,
            linked_to_next: false,
        })
    }

    /// The setup flags the kernel accepted for the ring underneath.
    pub fn setup_flags(&self) -> SetupFlags {
        self.lane.with_ring(|ring| ring.setup_flags())
    }

    /// The counters of the ring underneath (every lane's, when shared).
    pub fn ring_stats(&self) -> RingStats {
        self.lane.with_ring(|ring| ring.stats())
    }

    /// What the group sync has done so far.
    pub fn group_sync_stats(&self) -> GroupSyncStats {
        self.group_stats
    }

    /// A handle other threads use to wake a `poll` that is waiting.
    pub fn waker(&self) -> Waker {
        self.lane.with_ring(|ring| ring.waker())
    }

    /// Why registered buffers are not in use, if registration was refused.
    pub fn fixed_buffers_error(&self) -> Option<&RingError> {
        self.pool_error.as_ref()
    }

    /// Plain buffers kept for reuse: how many, and their bytes in all.
    pub fn plain_spares(&self) -> (usize, usize) {
        (self.plain_spares.len(), self.plain_spare_bytes)
    }

    /// The registered buffer pool, if registration succeeded.
    pub fn fixed_buffer_pool(&self) -> Option<&FixedBufferPool> {
        self.pool.as_ref()
    }

    /// Whether `file` is open with O_DIRECT in effect.
    ///
    /// # Errors
    /// [`DiskError::NotOpen`].
    pub fn is_o_direct(&self, file: FileId) -> Result<bool, DiskError> {
        Ok(self.file(file)?.o_direct)
    }

    /// The raw descriptor of an open file (for splice and tools; do not close it).
    ///
    /// # Errors
    /// [`DiskError::NotOpen`].
    pub fn raw_fd(&self, file: FileId) -> Result<RawFd, DiskError> {
        Ok(self.file(file)?.fd.as_raw_fd())
    }

    fn file(&self, file: FileId) -> Result<&OpenFile, DiskError> {
        self.files
            .get(file.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(DiskError::NotOpen(file))
    }

    fn file_mut(&mut self, file: FileId) -> Result<&mut OpenFile, DiskError> {
        self.files
            .get_mut(file.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(DiskError::NotOpen(file))
    }

    /// One ring turn (`collect_only`: only what other lanes' turns parked
    /// for the disk, no system call); disk completions go to `ready`,
    /// internal ones to `internal_done`. Returns the number of disk
    /// completions added.
    fn drive(
        &mut self,
        wait: Option<Duration>,
        max: usize,
        collect_only: bool,
    ) -> Result<usize, DiskError> {
        self.turn_output.clear();
        // A syncfs that ended since the last turn frees the waiting syncs
        // to go down with this one.
        let mut added = self.collect_group_sync();
        self.dispatch_syncs();
        if collect_only {
            self.lane.take_parked(max, &mut self.turn_output);
        } else {
            self.lane
                .turn(wait, max, &mut self.turn_output)
                .map_err(|error| ring_error("io_uring_enter", error))?;
        }
        added += self.collect_group_sync();
        let mut completions = std::mem::take(&mut self.turn_output.completions);
        for completion in completions.drain(..) {
            if completion.token & BACKGROUND_TOKEN_BIT != 0 {
                self.on_fill_completion(completion);
                continue;
            }
            if completion.token & METADATA_TOKEN_BIT != 0 {
                added += self.on_meta_completion(completion);
                continue;
            }
            if completion.token & INTERNAL_TOKEN_BIT != 0 {
                self.internal_done.push(completion);
                continue;
            }
            let (pending, path) = self.end_op((completion.token & TOKEN_KEY_MASK) as usize);
            let Some(op) = completion.op else {
                unreachable!("disk ops are single-shot");
            };
            let name = op.name();
            // A shared write's clone of its buffer is dropped here.
            let buf = match op {
                Op::Read { buf, .. } | Op::Write { buf, .. } => Some(buf),
                _ => None,
            };
            let result = completion
                .result
                .map_err(|source| match source.raw_os_error() {
                    Some(libc::ECANCELED) => DiskError::Canceled { op: name },
                    _ => DiskError::Io {
                        op: name,
                        path,
                        source,
                    },
                });
            self.ready.push_back(DiskCompletion {
                op_id: pending.op_id,
                result,
                buf,
            });
            added += 1;
        }
        self.turn_output.completions = completions;
        self.dispatch_syncs();
        Ok(added)
    }

    /// Removes the ended caller op `key` from `ops` and from its file's
    /// `in_flight`; returns it with the file's path (empty if the file is
    /// gone).
    fn end_op(&mut self, key: usize) -> (PendingOp, PathBuf) {
        let pending = self.ops.remove(key);
        let path = match self
            .files
            .get_mut(pending.file.0 as usize)
            .and_then(Option::as_mut)
        {
            Some(file) => {
                assert!(
                    file.in_flight > 0,
                    "file {:?} in_flight underflow",
                    pending.file
                );
                file.in_flight -= 1;
                file.path.clone()
            }
            None => PathBuf::new(),
        };
        (pending, path)
    }

    /// Whether fdatasyncs of buffered files arrive at
    /// [`UringDiskConfig::group_sync_min_per_s`] or more (over the last
    /// whole [`GROUP_SYNC_RATE_WINDOW`]).
    fn grouping(&mut self) -> bool {
        let Some(min) = self.config.group_sync_min_per_s else {
            return false;
        };
        let elapsed = self.sync_rate_since.elapsed();
        if elapsed >= GROUP_SYNC_RATE_WINDOW {
            self.sync_rate_per_s =
                (self.sync_requests as f64 / elapsed.as_secs_f64()).round() as u64;
            (self.sync_requests, self.sync_rate_since) = (0, Instant::now());
        }
        self.sync_rate_per_s >= min
    }

    /// Sends the waiting fdatasyncs of buffered files on: with a syncfs
    /// running, they wait for it to end; while [`UringDisk::grouping`], one
    /// syncfs on the helper covers them all; else (or when the helper
    /// cannot be used) each goes to the ring, as far as it has room.
    fn dispatch_syncs(&mut self) {
        if self.syncs_waiting.is_empty() || !self.syncs_in_group.is_empty() {
            return;
        }
        if self.grouping() {
            match self.start_group_sync() {
                Ok(()) => return,
                Err(error) => {
                    tracing::warn!(%error, "group sync unavailable; fdatasyncs go to the ring one by one");
                    self.config.group_sync_min_per_s = None;
                }
            }
        }
        let waiting = std::mem::take(&mut self.syncs_waiting);
        let mut left = waiting.into_iter();
        while let Some(key) = left.next() {
            let file = self.ops[key].file;
            let fd = match self.file(file) {
                Ok(open) => open.fd.as_raw_fd(),
                Err(_) => unreachable!("a file with a waiting fdatasync stays open"),
            };
            let op = Op::Fsync { fd, datasync: true };
            if self.lane.submit(DISK_TAG | key as u64, op, false).is_err() {
                // The ring is full: the rest waits for the next turn.
                self.syncs_waiting.push(key);
                self.syncs_waiting.extend(left);
                return;
            }
        }
    }

    /// Hands every waiting fdatasync to one syncfs of their file system.
    fn start_group_sync(&mut self) -> io::Result<()> {
        if self.group_sync.is_none() {
            self.group_sync = Some(GroupSync::spawn(self.waker())?);
        }
        let file = self.ops[self.syncs_waiting[0]].file;
        let fd = self
            .file(file)
            .map_err(|_| io::Error::other("a file with a waiting fdatasync is closed"))?
            .fd
            .try_clone()?;
        self.group_sync.as_ref().expect("started above").start(fd)?;
        self.syncs_in_group = std::mem::take(&mut self.syncs_waiting);
        Ok(())
    }

    /// Completes the fdatasyncs of a finished syncfs (into `ready`);
    /// returns how many.
    fn collect_group_sync(&mut self) -> usize {
        if self.syncs_in_group.is_empty() {
            return 0;
        }
        let Some(result) = self.group_sync.as_ref().and_then(GroupSync::try_result) else {
            return 0;
        };
        self.group_stats.syncfs_calls += 1;
        self.group_stats.fdatasyncs_covered += self.syncs_in_group.len() as u64;
        let keys = std::mem::take(&mut self.syncs_in_group);
        let count = keys.len();
        for key in keys {
            let (pending, path) = self.end_op(key);
            let result = match &result {
                Ok(()) => Ok(0),
                Err(error) => Err(DiskError::Io {
                    op: "syncfs",
                    path,
                    source: match error.raw_os_error() {
                        Some(errno) => io::Error::from_raw_os_error(errno),
                        None => io::Error::new(error.kind(), error.to_string()),
                    },
                }),
            };
            self.ready.push_back(DiskCompletion {
                op_id: pending.op_id,
                result,
                buf: None,
            });
        }
        count
    }

    /// Whether `file`'s background zero fill is still running.
    ///
    /// # Errors
    /// [`DiskError::NotOpen`].
    pub fn is_zero_fill_pending(&self, file: FileId) -> Result<bool, DiskError> {
        Ok(self.file(file)?.fill.is_some())
    }

    /// Submits what the running zero fills can take now (at most
    /// [`ZERO_FILL_IN_FLIGHT`] writes per file, and never more than half the
    /// ring), then each fill's closing fsync.
    fn advance_fills(&mut self) {
        let mut index = 0;
        while index < self.filling.len() {
            let file = self.filling[index];
            if self.advance_fill(file) {
                self.filling.swap_remove(index);
            } else {
                index += 1;
            }
        }
    }

    /// Returns true when the fill of `file_id` is over.
    fn advance_fill(&mut self, file_id: FileId) -> bool {
        let Some(file) = self
            .files
            .get_mut(file_id.0 as usize)
            .and_then(Option::as_mut)
        else {
            return true;
        };
        let fd = file.fd.as_raw_fd();
        let Some(fill) = file.fill.as_mut() else {
            return true;
        };
        if fill.failed {
            if fill.in_flight == 0 {
                file.fill = None;
                return true;
            }
            return false;
        }
        if fill.syncing {
            return false;
        }
        let token = DISK_TAG | INTERNAL_TOKEN_BIT | BACKGROUND_TOKEN_BIT | u64::from(file_id.0);
        // Zero writes only go out while no caller operation is in flight: a
        // fill is worth having only if it costs the caller nothing, and under
        // sustained load it would take half the disk's bandwidth (a write
        // that reaches an unfilled range ends the fill instead).
        let idle = self.ops.is_empty();
        while idle
            && fill.next_offset < fill.len
            && fill.in_flight < ZERO_FILL_IN_FLIGHT
            && self.lane.in_flight() < self.lane.capacity() / 2
        {
            let buf = self
                .zero_bufs
                .pop()
                .unwrap_or_else(|| AlignedBuf::new(ZERO_FILL_CHUNK_SIZE));
            let chunk = (fill.len - fill.next_offset).min(ZERO_FILL_CHUNK_SIZE as u64) as usize;
            let file_offset = fill.next_offset;
            let write = Op::Write {
                fd,
                file_offset,
                buf,
                buf_range: 0..chunk,
            };
            match self.lane.submit(token, write, false) {
                Ok(()) => {
                    fill.next_offset += chunk as u64;
                    fill.in_flight += 1;
                }
                Err((_, Op::Write { buf, .. })) => {
                    self.zero_bufs.push(buf);
                    break;
                }
                Err(_) => unreachable!("the ring gives back the op it refused"),
            }
        }
        if fill.next_offset >= fill.len && fill.in_flight == 0 {
            // The zero writes converted the extents; make that durable now,
            // so the first fdatasync of real data does not pay for it.
            if self
                .lane
                .submit(
                    token,
                    Op::Fsync {
                        fd,
                        datasync: false,
                    },
                    false,
                )
                .is_ok()
            {
                fill.syncing = true;
            }
        }
        false
    }

    fn on_fill_completion(&mut self, completion: Completion) {
        let slot = (completion.token & u64::from(u32::MAX)) as usize;
        let op = completion.op.expect("zero-fill ops are single-shot");
        let file = self.files.get_mut(slot).and_then(Option::as_mut);
        let Some(file) = file.filter(|file| file.fill.is_some()) else {
            unreachable!("a zero-fill completion for file slot {slot} without a fill");
        };
        let fill = file.fill.as_mut().expect("filtered above");
        match op {
            Op::Write { buf, .. } => {
                fill.in_flight -= 1;
                if self.zero_bufs.len() < ZERO_FILL_IN_FLIGHT {
                    self.zero_bufs.push(buf);
                }
                if let Err(error) = completion.result {
                    tracing::warn!(
                        path = %file.path.display(),
                        %error,
                        "zero fill failed; the file stays usable with unwritten extents"
                    );
                    fill.failed = true;
                }
            }
            Op::Fsync { .. } => {
                if let Err(error) = completion.result {
                    tracing::warn!(path = %file.path.display(), %error, "fsync after zero fill failed");
                }
                file.fill = None;
            }
            other => unreachable!("zero fills run writes and fsyncs, not {}", other.name()),
        }
    }

    /// Stops `file`'s zero fill: waits for its zero writes (or closing
    /// fsync) in flight and submits no more; the rest of the file keeps
    /// unwritten extents, which read as zeros (the fill only saves later
    /// fdatasyncs work, so nothing depends on it finishing).
    fn stop_fill(&mut self, file: FileId) -> Result<(), DiskError> {
        let deadline = Instant::now() + SYNC_STEP_TIMEOUT;
        loop {
            let open = self.file_mut(file)?;
            let Some(fill) = open.fill.as_mut() else {
                return Ok(());
            };
            if fill.in_flight == 0 && !fill.syncing {
                open.fill = None;
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(DiskError::Io {
                    op: "zero fill",
                    path: open.path.clone(),
                    source: io::Error::from(io::ErrorKind::TimedOut),
                });
            }
            self.drive(
                Some(Duration::from_millis(100)),
                COMPLETIONS_PER_TURN_MAX,
                false,
            )?;
        }
    }

    /// Lets a caller operation on `file`, whose zero fill runs, go ahead
    /// without waiting for the whole fill: an fdatasync needs nothing; a
    /// write below the fill's frontier waits only for the zero writes in
    /// flight that it overlaps (none, once the fill is ahead of the writer); a
    /// write reaching past the frontier waits for the zero writes in flight
    /// (at most [`ZERO_FILL_IN_FLIGHT`] chunks) and ends the fill there (the
    /// rest of the file keeps unwritten extents, which read as zeros). So no
    /// zero write is ever in flight with, or lands after, a caller write it
    /// overlaps. A read does not wait (zero writes only ever cover zeros).
    fn yield_fill(&mut self, file: FileId, op: &DiskOp) -> Result<(), DiskError> {
        // A read needs no wait: a zero write only ever covers zeros.
        let Some((file_offset, data)) = op.write_bytes() else {
            return Ok(());
        };
        let range = file_offset..file_offset + data.len() as u64;
        let deadline = Instant::now() + SYNC_STEP_TIMEOUT;
        loop {
            let open = self.file_mut(file)?;
            let Some(fill) = open.fill.as_mut() else {
                return Ok(());
            };
            if fill.syncing {
                // Every zero write is done; only the closing fsync runs.
                return Ok(());
            }
            // Zero writes go out in order, one chunk each, so those in flight
            // cover at most `[in_flight_from, next_offset)`.
            let in_flight_from = fill
                .next_offset
                .saturating_sub(fill.in_flight as u64 * ZERO_FILL_CHUNK_SIZE as u64);
            if range.end <= in_flight_from {
                return Ok(());
            }
            if fill.in_flight == 0 {
                if range.end > fill.next_offset {
                    // Ends the fill at its frontier: nothing past it is ever
                    // zero-written now (`advance_fills` drops the file).
                    open.fill = None;
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(DiskError::Io {
                    op: "zero fill",
                    path: open.path.clone(),
                    source: io::Error::from(io::ErrorKind::TimedOut),
                });
            }
            self.drive(
                Some(Duration::from_millis(100)),
                COMPLETIONS_PER_TURN_MAX,
                false,
            )?;
        }
    }

    /// Submits the op of job `key`'s current step (kept for a retry when
    /// the ring is full).
    fn submit_meta_step(&mut self, key: usize) {
        let job = &mut self.meta[key];
        let op = match job.blocked.take() {
            Some(op) => op,
            None => match meta_step_op(job) {
                Ok(op) => op,
                Err(error) => {
                    job.error.get_or_insert(error);
                    self.finish_meta(key);
                    return;
                }
            },
        };
        let token = DISK_TAG | INTERNAL_TOKEN_BIT | METADATA_TOKEN_BIT | key as u64;
        if let Err((_, op)) = self.lane.submit(token, op, false) {
            self.meta[key].blocked = Some(op);
        }
    }

    /// Retries the steps the ring had no room for.
    fn retry_blocked_meta(&mut self) {
        let blocked: Vec<usize> = self
            .meta
            .iter()
            .filter(|(_, job)| job.blocked.is_some())
            .map(|(key, _)| key)
            .collect();
        for key in blocked {
            self.submit_meta_step(key);
        }
    }

    /// Advances a background create or remove; returns 1 when it finished
    /// (its completion is in `ready`), else 0.
    fn on_meta_completion(&mut self, completion: Completion) -> usize {
        let key = (completion.token & u64::from(u32::MAX)) as usize;
        let op = completion.op.expect("metadata ops are single-shot");
        let allow_fallback = self.config.allow_buffered_fallback;
        let job = self
            .meta
            .get_mut(key)
            .expect("a metadata completion belongs to a job");
        let failed = |job: &mut MetaJob, source: io::Error| {
            job.error.get_or_insert(DiskError::Io {
                op: op.name(),
                path: job.path.clone(),
                source,
            });
        };
        match (job.step, completion.result) {
            (MetaStep::Open, Ok(fd)) => {
                let fd = i32::try_from(fd).expect("openat returns a descriptor");
                // SAFETY: the kernel just returned this descriptor; nothing
                // else owns it.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                let options = job.create.expect("only a create or a rename opens");
                let len = options.create_preallocated.unwrap_or(0);
                job.step = if options.sparse {
                    // Setting the size of a new empty file only changes its
                    // inode (no blocks, no I/O to wait for), and the ring
                    // has IORING_OP_FTRUNCATE only from Linux 6.9 on.
                    if let Err(source) = ftruncate(fd.as_raw_fd(), len) {
                        failed(job, source);
                    }
                    MetaStep::SyncFile
                } else if len > 0 {
                    MetaStep::Fallocate
                } else {
                    MetaStep::SyncFile
                };
                job.fd = Some(fd);
            }
            (MetaStep::Open, Err(source))
                if source.raw_os_error() == Some(libc::EINVAL)
                    && job.o_direct
                    && allow_fallback =>
            {
                tracing::warn!(
                    path = %job.path.display(),
                    "O_DIRECT unsupported here; opening buffered (development fallback)"
                );
                job.o_direct = false;
            }
            (MetaStep::Open, Err(source))
                if source.raw_os_error() == Some(libc::EINVAL) && job.o_direct =>
            {
                job.error = Some(DiskError::Io {
                    op: "open with O_DIRECT (this file system does not support O_DIRECT; \
                         put the store on ext4 or xfs, or enable the development flag \
                         allow_buffered_fallback)",
                    path: job.path.clone(),
                    source,
                });
                return self.finish_meta(key);
            }
            (MetaStep::Fallocate, Ok(_)) => job.step = MetaStep::SyncFile,
            (MetaStep::SyncFile | MetaStep::Unlink, Ok(_)) => job.step = MetaStep::OpenDir,
            (MetaStep::Rename, Ok(_)) => {
                job.step = if job.create.is_some() {
                    MetaStep::Open
                } else {
                    MetaStep::OpenDir
                };
            }
            (MetaStep::OpenDir, Ok(fd)) => {
                let fd = i32::try_from(fd).expect("openat returns a descriptor");
                // SAFETY: as for the file above.
                job.dir_fd = Some(unsafe { OwnedFd::from_raw_fd(fd) });
                job.step = MetaStep::SyncDir;
            }
            (MetaStep::SyncDir, result) => {
                if let Err(source) = result {
                    failed(job, source);
                }
                job.step = MetaStep::CloseDir;
            }
            (MetaStep::CloseDir, result) => {
                if let Err(source) = result {
                    failed(job, source);
                }
                return self.finish_meta(key);
            }
            (_, Err(source)) => {
                failed(job, source);
                return self.finish_meta(key);
            }
        }
        self.submit_meta_step(key);
        0
    }

    /// Ends job `key`: a created file joins the file table (its zero fill
    /// starts), and the caller's completion goes to `ready`.
    fn finish_meta(&mut self, key: usize) -> usize {
        let job = self.meta.remove(key);
        let result = match (job.error, job.create, job.fd) {
            (Some(error), _, _) => Err(error),
            (None, Some(options), Some(fd)) => {
                let len = options.create_preallocated.unwrap_or(0);
                let fill = (len > 0 && !options.sparse && self.config.zero_fill_on_create)
                    .then_some(ZeroFill {
                        next_offset: 0,
                        len,
                        in_flight: 0,
                        syncing: false,
                        failed: false,
                    });
                let filling = fill.is_some();
                let file = self.insert_file(OpenFile {
                    fd,
                    path: job.path,
                    direct: options.direct,
                    o_direct: job.o_direct,
                    in_flight: 0,
                    fill,
                });
                if filling {
                    self.filling.push(file);
                }
                Ok(file.0 as usize)
            }
            (None, Some(_), None) => unreachable!("a create finishes with its file open"),
            (None, None, _) => Ok(0),
        };
        self.ready.push_back(DiskCompletion {
            op_id: job.op_id,
            result,
            buf: None,
        });
        1
    }

    fn start_meta(&mut self, job: MetaJob) -> Result<(), DiskError> {
        if self.meta.len() >= self.lane.capacity() {
            return Err(DiskError::QueueFull {
                capacity: self.lane.capacity(),
            });
        }
        let key = self.meta.insert(job);
        assert!(
            key <= u32::MAX as usize,
            "metadata job key {key} overflows u32"
        );
        self.submit_meta_step(key);
        Ok(())
    }

    fn internal_token(&mut self) -> u64 {
        self.next_internal += 1;
        DISK_TAG | INTERNAL_TOKEN_BIT | (self.next_internal & TOKEN_KEY_MASK)
    }

    /// Runs the disk's own ops (all for one file) to completion, at most
    /// `in_flight` at a time; `next` yields the next op given a recycled
    /// buffer. Disk completions reaped meanwhile wait in `ready`.
    fn run_internal(
        &mut self,
        path: &Path,
        in_flight: usize,
        mut next: impl FnMut(Option<AlignedBuf>) -> Option<Op>,
    ) -> Result<(), DiskError> {
        let deadline = Instant::now() + SYNC_STEP_TIMEOUT;
        let mut outstanding = 0usize;
        let mut first_error: Option<DiskError> = None;
        let mut spare: Vec<Option<AlignedBuf>> = (0..in_flight).map(|_| None).collect();
        let mut exhausted = false;
        loop {
            while !exhausted && first_error.is_none() && outstanding < in_flight {
                let Some(op) = next(spare.pop().flatten()) else {
                    exhausted = true;
                    break;
                };
                let token = self.internal_token();
                self.lane
                    .submit(token, op, false)
                    .map_err(|(error, _)| ring_error("submit", error))?;
                outstanding += 1;
            }
            if outstanding == 0 {
                return first_error.map_or(Ok(()), Err);
            }
            if Instant::now() > deadline {
                return Err(DiskError::Io {
                    op: "waiting for the disk's own operations",
                    path: path.to_path_buf(),
                    source: io::Error::from(io::ErrorKind::TimedOut),
                });
            }
            self.drive(
                Some(Duration::from_millis(100)),
                COMPLETIONS_PER_TURN_MAX,
                false,
            )?;
            for completion in std::mem::take(&mut self.internal_done) {
                outstanding -= 1;
                let op = completion.op.expect("internal ops are single-shot");
                let name = op.name();
                if let Err(source) = completion.result
                    && first_error.is_none()
                {
                    first_error = Some(DiskError::Io {
                        op: name,
                        path: path.to_path_buf(),
                        source,
                    });
                }
                if let Op::Write { buf, .. } = op {
                    spare.push(Some(buf));
                }
            }
        }
    }

    fn create_file(
        &mut self,
        fd: RawFd,
        path: &Path,
        len: u64,
        options: OpenOptions,
    ) -> Result<(), DiskError> {
        if options.direct {
            assert!(
                len.is_multiple_of(BLOCK_SIZE as u64),
                "direct file length {len} is not block-aligned"
            );
        }
        if options.sparse {
            ftruncate(fd, len).map_err(|source| DiskError::Io {
                op: "ftruncate",
                path: path.to_path_buf(),
                source,
            })?;
        } else if len > 0 {
            let mut fallocate = Some(Op::Fallocate {
                fd,
                file_offset: 0,
                len,
                mode: 0,
            });
            self.run_internal(path, 1, |_| fallocate.take())?;
        }
        let mut fsync = Some(Op::Fsync {
            fd,
            datasync: false,
        });
        self.run_internal(path, 1, |_| fsync.take())?;
        let dir = path
            .parent()
            .filter(|dir| !dir.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        self.sync_dir(dir)
    }

    fn insert_file(&mut self, file: OpenFile) -> FileId {
        match self.free_file_slots.pop() {
            Some(slot) => {
                self.files[slot as usize] = Some(file);
                FileId(slot)
            }
            None => {
                let slot = u32::try_from(self.files.len()).expect("fewer than 2^32 files open");
                self.files.push(Some(file));
                FileId(slot)
            }
        }
    }

    fn to_ring_op(&self, op: DiskOp) -> Result<(FileId, Op), (DiskError, DiskOp)> {
        let file_id = op.file();
        let file = match self.file(file_id) {
            Ok(file) => file,
            Err(error) => return Err((error, op)),
        };
        let fd = file.fd.as_raw_fd();
        if file.direct
            && let Some((file_offset, start, len)) = op.direct_range()
        {
            let name = op.name();
            assert_aligned(name, "offset", file_offset);
            assert_aligned(name, "buffer start", start as u64);
            assert_aligned(name, "length", len as u64);
        }
        let ring_op = match op {
            DiskOp::Write {
                file_offset,
                buf,
                buf_range,
                ..
            } => Op::Write {
                fd,
                file_offset,
                buf,
                buf_range,
            },
            DiskOp::WriteShared {
                file_offset,
                buf,
                buf_range,
                ..
            } => Op::WriteShared {
                fd,
                file_offset,
                buf,
                buf_range,
            },
            DiskOp::Read {
                file_offset,
                buf,
                len,
                ..
            } => Op::Read {
                fd,
                file_offset,
                buf,
                len,
            },
            DiskOp::SpliceToPipe {
                file_offset,
                len,
                pipe,
                ..
            } => Op::Splice {
                fd_in: fd,
                off_in: Some(file_offset),
                fd_out: pipe,
                off_out: None,
                len: u32::try_from(len).expect("a splice moves less than 4 GiB"),
                flags: 0,
            },
            DiskOp::Fdatasync { .. } => Op::Fsync { fd, datasync: true },
            DiskOp::Truncate { len, .. } => Op::Ftruncate { fd, len },
        };
        Ok((file_id, ring_op))
    }
}

impl Disk for UringDisk {
    fn map_read_only(&mut self, path: &Path) -> Result<FileView, DiskError> {
        FileView::map(path)
    }

    fn open(&mut self, path: &Path, options: OpenOptions) -> Result<FileId, DiskError> {
        let mut flags = libc::O_CLOEXEC
            | if options.writable {
                libc::O_RDWR
            } else {
                libc::O_RDONLY
            };
        if options.create_preallocated.is_some() {
            flags |= libc::O_CREAT | libc::O_TRUNC;
        }
        let (fd, o_direct) = if options.direct {
            match open_raw(path, flags | libc::O_DIRECT) {
                Ok(fd) => (fd, true),
                Err(source) if source.raw_os_error() == Some(libc::EINVAL) => {
                    if !self.config.allow_buffered_fallback {
                        return Err(DiskError::Io {
                            op: "open with O_DIRECT (this file system does not support O_DIRECT; \
                                 put the store on ext4 or xfs, or enable the development flag \
                                 allow_buffered_fallback)",
                            path: path.to_path_buf(),
                            source,
                        });
                    }
                    tracing::warn!(
                        path = %path.display(),
                        "O_DIRECT unsupported here; opening buffered (development fallback)"
                    );
                    let fd = open_raw(path, flags).map_err(|source| DiskError::Io {
                        op: "open",
                        path: path.to_path_buf(),
                        source,
                    })?;
                    (fd, false)
                }
                Err(source) => {
                    return Err(DiskError::Io {
                        op: "open",
                        path: path.to_path_buf(),
                        source,
                    });
                }
            }
        } else {
            let fd = open_raw(path, flags).map_err(|source| DiskError::Io {
                op: "open",
                path: path.to_path_buf(),
                source,
            })?;
            (fd, false)
        };
        if let Some(len) = options.create_preallocated {
            let raw = fd.as_raw_fd();
            // On error `fd` closes on drop; the partial file stays for the
            // caller to remove or retry.
            self.create_file(raw, path, len, options)?;
        }
        let fill = match options.create_preallocated {
            Some(len) if len > 0 && !options.sparse && self.config.zero_fill_on_create => {
                Some(ZeroFill {
                    next_offset: 0,
                    len,
                    in_flight: 0,
                    syncing: false,
                    failed: false,
                })
            }
            _ => None,
        };
        let filling = fill.is_some();
        let file = self.insert_file(OpenFile {
            fd,
            path: path.to_path_buf(),
            direct: options.direct,
            o_direct,
            in_flight: 0,
            fill,
        });
        if filling {
            self.filling.push(file);
            self.advance_fills();
        }
        Ok(file)
    }

    fn close(&mut self, file: FileId) -> Result<(), DiskError> {
        self.stop_fill(file)?;
        let deadline = Instant::now() + SYNC_STEP_TIMEOUT;
        while self.file(file)?.in_flight > 0 {
            if Instant::now() > deadline {
                return Err(DiskError::Io {
                    op: "close (waiting for in-flight operations)",
                    path: self.file(file)?.path.clone(),
                    source: io::Error::from(io::ErrorKind::TimedOut),
                });
            }
            self.drive(
                Some(Duration::from_millis(100)),
                COMPLETIONS_PER_TURN_MAX,
                false,
            )?;
        }
        let open = self.files[file.0 as usize]
            .take()
            .expect("checked open above");
        self.free_file_slots.push(file.0);
        let raw = open.fd.into_raw_fd();
        // SAFETY: `raw` was just released from its OwnedFd; nothing else
        // closes it, and no operation on it is in flight (checked above).
        if unsafe { libc::close(raw) } != 0 {
            return Err(DiskError::Io {
                op: "close",
                path: open.path,
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    fn file_size(&self, file: FileId) -> Result<u64, DiskError> {
        let open = self.file(file)?;
        // SAFETY: fstat writes into the zeroed local struct; the fd is open.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(open.fd.as_raw_fd(), &mut stat) } != 0 {
            return Err(DiskError::Io {
                op: "fstat",
                path: open.path.clone(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(stat.st_size as u64)
    }

    fn remove(&mut self, path: &Path) -> Result<(), DiskError> {
        std::fs::remove_file(path).map_err(|source| DiskError::Io {
            op: "unlink",
            path: path.to_path_buf(),
            source,
        })
    }

    fn set_len(&mut self, file: FileId, len: u64) -> Result<(), DiskError> {
        self.stop_fill(file)?;
        let open = self.file_mut(file)?;
        ftruncate(open.fd.as_raw_fd(), len).map_err(|source| DiskError::Io {
            op: "ftruncate",
            path: open.path.clone(),
            source,
        })
    }

    fn create_dir_all(&mut self, dir: &Path) -> Result<(), DiskError> {
        std::fs::create_dir_all(dir).map_err(|source| DiskError::Io {
            op: "mkdir",
            path: dir.to_path_buf(),
            source,
        })
    }

    fn remove_dir(&mut self, dir: &Path) -> Result<(), DiskError> {
        std::fs::remove_dir(dir).map_err(|source| DiskError::Io {
            op: "rmdir",
            path: dir.to_path_buf(),
            source,
        })
    }

    fn list_dir(&mut self, dir: &Path) -> Result<Vec<String>, DiskError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(DiskError::Io {
                    op: "opendir",
                    path: dir.to_path_buf(),
                    source,
                });
            }
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| DiskError::Io {
                op: "readdir",
                path: dir.to_path_buf(),
                source,
            })?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn sync_dir(&mut self, dir: &Path) -> Result<(), DiskError> {
        let fd = open_raw(dir, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC).map_err(
            |source| DiskError::Io {
                op: "open directory",
                path: dir.to_path_buf(),
                source,
            },
        )?;
        // SAFETY: fsync takes no pointers; fd is open.
        if unsafe { libc::fsync(fd.as_raw_fd()) } != 0 {
            return Err(DiskError::Io {
                op: "fsync directory",
                path: dir.to_path_buf(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    fn rename(&mut self, from: &Path, to: &Path) -> Result<(), DiskError> {
        std::fs::rename(from, to).map_err(|source| DiskError::Io {
            op: "rename",
            path: from.to_path_buf(),
            source,
        })
    }

    fn space(&self, path: &Path) -> Result<SpaceInfo, DiskError> {
        let c_path = c_path(path)?;
        // SAFETY: statvfs writes into the zeroed local struct; c_path is a
        // valid NUL-terminated string that outlives the call.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
            return Err(DiskError::Io {
                op: "statvfs",
                path: path.to_path_buf(),
                source: io::Error::last_os_error(),
            });
        }
        let fragment = stat.f_frsize as u64;
        Ok(SpaceInfo {
            total_bytes: stat.f_blocks as u64 * fragment,
            available_bytes: stat.f_bavail as u64 * fragment,
            free_bytes: stat.f_bfree as u64 * fragment,
        })
    }

    fn submit(
        &mut self,
        op_id: OpId,
        op: DiskOp,
        link_next: bool,
    ) -> Result<(), (DiskError, DiskOp)> {
        if self.lane.in_flight() >= self.lane.capacity() {
            return Err((
                DiskError::QueueFull {
                    capacity: self.lane.capacity(),
                },
                op,
            ));
        }
        let file_id = op.file();
        if self.file(file_id).is_ok_and(|file| file.fill.is_some())
            && let Err(error) = self.yield_fill(file_id, &op)
        {
            return Err((error, op));
        }
        if let DiskOp::Fdatasync { file } = op
            && !link_next
            && !self.linked_to_next
            && self.file(file).is_ok_and(|open| !open.direct)
        {
            self.sync_requests += 1;
            if self.grouping() {
                // A buffered file's fdatasync joins the group: it starts one
                // at once if none runs, else waits for the next.
                let key = self.ops.insert(PendingOp { op_id, file });
                self.file_mut(file).expect("checked open above").in_flight += 1;
                self.syncs_waiting.push(key);
                self.dispatch_syncs();
                return Ok(());
            }
        }
        let (file, ring_op) = self.to_ring_op(op)?;
        let key = self.ops.insert(PendingOp { op_id, file });
        match self.lane.submit(DISK_TAG | key as u64, ring_op, link_next) {
            Ok(()) => {
                self.linked_to_next = link_next;
                self.file_mut(file)
                    .expect("checked open in to_ring_op")
                    .in_flight += 1;
                Ok(())
            }
            Err((error, ring_op)) => {
                self.ops.remove(key);
                let capacity = match error {
                    RingError::QueueFull { capacity } => capacity,
                    _ => self.lane.capacity(),
                };
                Err((
                    DiskError::QueueFull { capacity },
                    back_to_disk_op(file, ring_op),
                ))
            }
        }
    }

    fn poll(
        &mut self,
        out: &mut Vec<DiskCompletion>,
        max: usize,
        wait: Wait,
    ) -> Result<usize, DiskError> {
        let deadline = match wait {
            Wait::No => None,
            Wait::AtLeastOne(timeout) => Some(Instant::now() + timeout),
        };
        let mut appended = 0;
        let mut submitted = false;
        loop {
            while appended < max
                && let Some(completion) = self.ready.pop_front()
            {
                out.push(completion);
                appended += 1;
            }
            let now = Instant::now();
            let wait_now = match deadline {
                _ if appended > 0 || max == 0 => None,
                Some(deadline) if deadline > now => Some(deadline - now),
                _ => None,
            };
            // Always one turn (it submits what is queued), then more only
            // while waiting for a first completion.
            if submitted && wait_now.is_none() {
                return Ok(appended);
            }
            self.advance_fills();
            self.retry_blocked_meta();
            // On a shared ring a poll that does not wait only collects what
            // the shard loop's turn reaped; one that may wait turns it.
            let collect_only = !self.owns_ring && matches!(wait, Wait::No);
            self.drive(wait_now, (max - appended).max(1), collect_only)?;
            submitted = true;
            if self.ready.is_empty() && wait_now.is_none() {
                return Ok(appended);
            }
        }
    }

    fn submit_create(
        &mut self,
        op_id: OpId,
        path: &Path,
        options: OpenOptions,
    ) -> Result<(), DiskError> {
        let len = options
            .create_preallocated
            .expect("submit_create creates a file");
        if options.direct {
            assert!(
                len.is_multiple_of(BLOCK_SIZE as u64),
                "direct file length {len} is not block-aligned"
            );
        }
        self.start_meta(MetaJob {
            op_id,
            path: path.to_path_buf(),
            create: Some(options),
            rename_from: None,
            o_direct: options.direct,
            step: MetaStep::Open,
            fd: None,
            dir_fd: None,
            error: None,
            blocked: None,
        })
    }

    fn submit_remove(&mut self, op_id: OpId, path: &Path) -> Result<(), DiskError> {
        self.start_meta(MetaJob {
            op_id,
            path: path.to_path_buf(),
            create: None,
            rename_from: None,
            o_direct: false,
            step: MetaStep::Unlink,
            fd: None,
            dir_fd: None,
            error: None,
            blocked: None,
        })
    }

    fn submit_rename(
        &mut self,
        op_id: OpId,
        from: &Path,
        to: &Path,
        open: Option<OpenOptions>,
    ) -> Result<(), DiskError> {
        super::assert_renamed_file_opens_as_it_is(open);
        self.start_meta(MetaJob {
            op_id,
            path: to.to_path_buf(),
            create: open,
            rename_from: Some(from.to_path_buf()),
            o_direct: open.is_some_and(|options| options.direct),
            step: MetaStep::Rename,
            fd: None,
            dir_fd: None,
            error: None,
            blocked: None,
        })
    }

    fn in_flight(&self) -> usize {
        self.ops.len() + self.ready.len() + self.meta.len()
    }

    fn buffer(&mut self, capacity: usize) -> AlignedBuf {
        // Only requests of more than half a pooled buffer get one: a small
        // request (a checkpoint block) must neither take a write buffer away
        // from the CommitLog nor pay for zeroing all of it.
        if let Some(pool) = self.pool.as_mut()
            && capacity <= pool.buffer_size()
            && capacity > pool.buffer_size() / 2
            && let Some(mut buf) = pool.take()
        {
            // Same contract as a fresh AlignedBuf: zeroed. The CommitLog
            // writes whole blocks, so stale bytes past its data would reach
            // the disk otherwise.
            buf.as_full_mut_slice().fill(0);
            return buf;
        }
        // A plain spare of at least the size asked, and at most twice it (a
        // small request must not hold a large buffer), zeroed likewise.
        let wanted = align_up(capacity.max(1));
        if let Some(index) = self
            .plain_spares
            .iter()
            .position(|buf| (wanted..=2 * wanted).contains(&buf.capacity()))
        {
            let mut buf = self.plain_spares.swap_remove(index);
            self.plain_spare_bytes -= buf.capacity();
            buf.as_full_mut_slice().fill(0);
            buf.set_len(0);
            return buf;
        }
        AlignedBuf::new(capacity)
    }

    fn recycle(&mut self, buf: AlignedBuf) {
        if self.lane.with_ring(|ring| ring.is_registered(&buf)) {
            if let Some(pool) = self.pool.as_mut() {
                pool.give_back(buf);
            }
            return;
        }
        if buf.fixed_index().is_none()
            && self.plain_spares.len() < PLAIN_BUFFER_SPARES_MAX
            && self.plain_spare_bytes + buf.capacity() <= PLAIN_BUFFER_SPARE_BYTES_MAX
        {
            self.plain_spare_bytes += buf.capacity();
            self.plain_spares.push(buf);
        }
        // Otherwise dropped: freed if plain, leaked if registered elsewhere.
    }
}

impl Drop for UringDisk {
    fn drop(&mut self) {
        if self.owns_ring {
            // The ring drops with the lane, first, and drains itself.
            return;
        }
        // A shared ring lives on: wait (bounded) for the lane's operations,
        // so none is still queued when the descriptors close.
        let deadline = Instant::now() + SYNC_STEP_TIMEOUT;
        while self.lane.in_flight() > 0 && Instant::now() < deadline {
            self.turn_output.clear();
            if let Err(error) = self.lane.turn(
                Some(Duration::from_millis(100)),
                COMPLETIONS_PER_TURN_MAX,
                &mut self.turn_output,
            ) {
                tracing::error!(%error, "draining the disk's lane failed");
                return;
            }
        }
        if self.lane.in_flight() > 0 {
            tracing::error!(
                in_flight = self.lane.in_flight(),
                "disk dropped with operations still in flight on the shared ring"
            );
        }
    }
}

/// The ring op of `job`'s current step.
fn meta_step_op(job: &mut MetaJob) -> Result<Op, DiskError> {
    Ok(match job.step {
        MetaStep::Open => {
            let writable = job.create.is_none_or(|options| options.writable);
            let mut flags = if writable {
                libc::O_RDWR
            } else {
                libc::O_RDONLY
            };
            // A create truncates; a renamed file is opened as it is.
            if job
                .create
                .is_none_or(|options| options.create_preallocated.is_some())
            {
                flags |= libc::O_CREAT | libc::O_TRUNC;
            }
            if job.o_direct {
                flags |= libc::O_DIRECT;
            }
            Op::OpenAt {
                dir_fd: libc::AT_FDCWD,
                path: c_path(&job.path)?,
                flags,
                mode: 0o644,
            }
        }
        MetaStep::Fallocate => Op::Fallocate {
            fd: job.fd.as_ref().expect("open before fallocate").as_raw_fd(),
            file_offset: 0,
            len: job
                .create
                .and_then(|options| options.create_preallocated)
                .unwrap_or(0),
            mode: 0,
        },
        MetaStep::SyncFile => Op::Fsync {
            fd: job.fd.as_ref().expect("open before fsync").as_raw_fd(),
            datasync: false,
        },
        MetaStep::Unlink => Op::UnlinkAt {
            dir_fd: libc::AT_FDCWD,
            path: c_path(&job.path)?,
            flags: 0,
        },
        MetaStep::Rename => Op::RenameAt {
            from: c_path(
                job.rename_from
                    .as_ref()
                    .expect("a rename job has its old path"),
            )?,
            to: c_path(&job.path)?,
        },
        MetaStep::OpenDir => Op::OpenAt {
            dir_fd: libc::AT_FDCWD,
            path: c_path(parent_dir(&job.path))?,
            flags: libc::O_RDONLY | libc::O_DIRECTORY,
            mode: 0,
        },
        MetaStep::SyncDir => Op::Fsync {
            fd: job.dir_fd.as_ref().expect("open before fsync").as_raw_fd(),
            datasync: false,
        },
        MetaStep::CloseDir => Op::Close {
            // The ring's close takes the descriptor over.
            fd: job.dir_fd.take().expect("open before close").into_raw_fd(),
        },
    })
}

/// The directory holding `path` (`.` for a bare name).
fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

fn back_to_disk_op(file: FileId, op: Op) -> DiskOp {
    match op {
        Op::Write {
            file_offset,
            buf,
            buf_range,
            ..
        } => DiskOp::Write {
            file,
            file_offset,
            buf,
            buf_range,
        },
        Op::WriteShared {
            file_offset,
            buf,
            buf_range,
            ..
        } => DiskOp::WriteShared {
            file,
            file_offset,
            buf,
            buf_range,
        },
        Op::Read {
            file_offset,
            buf,
            len,
            ..
        } => DiskOp::Read {
            file,
            file_offset,
            buf,
            len,
        },
        Op::Splice {
            off_in: Some(file_offset),
            fd_out,
            len,
            ..
        } => DiskOp::SpliceToPipe {
            file,
            file_offset,
            len: len as usize,
            pipe: fd_out,
        },
        Op::Fsync { .. } => DiskOp::Fdatasync { file },
        Op::Ftruncate { len, .. } => DiskOp::Truncate { file, len },
        other => unreachable!(
            "disk ops map to write, read, splice, fsync or ftruncate, not {}",
            other.name()
        ),
    }
}

fn assert_aligned(op: &str, what: &str, value: u64) {
    assert!(
        value.is_multiple_of(BLOCK_SIZE as u64),
        "O_DIRECT {op} {what} {value} is not a multiple of {BLOCK_SIZE}"
    );
}

fn ring_error(op: &'static str, error: RingError) -> DiskError {
    let source = match error.raw_os_error() {
        Some(errno) => io::Error::from_raw_os_error(errno),
        None => io::Error::other(error.to_string()),
    };
    DiskError::Io {
        op,
        path: PathBuf::new(),
        source,
    }
}

fn c_path(path: &Path) -> Result<CString, DiskError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| DiskError::Io {
        op: "path with a NUL byte",
        path: path.to_path_buf(),
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })
}

/// `ftruncate(fd, len)`.
fn ftruncate(fd: RawFd, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: ftruncate takes no pointers; the caller keeps `fd` open.
    if unsafe { libc::ftruncate(fd, len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn open_raw(path: &Path, flags: i32) -> io::Result<OwnedFd> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: c_path is NUL-terminated and outlives the call; the mode is
    // passed as the variadic argument open(2) reads with O_CREAT.
    let fd = unsafe { libc::open(c_path.as_ptr(), flags, 0o644 as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_to_disk_op_restores_the_original_operation() {
        let op = back_to_disk_op(
            FileId(3),
            Op::Fsync {
                fd: 9,
                datasync: true,
            },
        );
        assert!(matches!(op, DiskOp::Fdatasync { file: FileId(3) }));
        let op = back_to_disk_op(
            FileId(4),
            Op::Write {
                fd: 9,
                file_offset: 4096,
                buf: AlignedBuf::new(4096),
                buf_range: 0..4096,
            },
        );
        match op {
            DiskOp::Write {
                file,
                file_offset,
                buf_range,
                ..
            } => {
                assert_eq!(file, FileId(4));
                assert_eq!(file_offset, 4096);
                assert_eq!(buf_range, 0..4096);
            }
            other => panic!("expected a write, got {other:?}"),
        }
    }

    #[test]
    #[should_panic(expected = "not a multiple")]
    fn assert_aligned_rejects_an_unaligned_offset() {
        assert_aligned("write", "offset", 100);
    }
}
