//! `SimDisk`: a deterministic, in-memory [`Disk`] with seeded faults, so the
//! store's own code runs through crashes in tests.
//!
//! Every file has two images:
//!
//! ```text
//!   volatile  = what a read sees now (every completed write applied)
//!   durable   = what survives a power loss (writes covered by an fdatasync)
//!   unsynced  = completed writes not yet durable, in completion order
//! ```
//!
//! A crash produces a [`SimImage`] (path → bytes) from which a fresh disk is
//! built:
//!
//! - [`CrashKind::PowerLoss`]: the durable image, then, per un-synced write
//!   in completion order, a seeded choice among lost, applied, or torn (only a
//!   prefix or only a suffix of its bytes applied, cut at any byte);
//! - [`CrashKind::ProcessKill`]: the volatile image (the kernel keeps what
//!   completed), then the same seeded choice per write still in flight;
//!   queued, unsubmitted operations are lost.
//!
//! Operations move `queued` (by `submit`) → `in flight` (at the next `poll`)
//! → completed (a seeded subset per `poll`, in seeded order when
//! [`SimConfig::reorder`] is set, but never before the operation linked
//! ahead of it). A write takes effect on the volatile image when it
//! completes. An fdatasync makes durable exactly the writes of its file that
//! had completed when it *started* (when submitted, or when the operation
//! linked ahead of it completed): a write merely in flight beside an
//! unlinked fdatasync is not covered, as with a real kernel.
//!
//! Synchronous metadata calls (create, preallocate, set_len, remove, rename,
//! mkdir) are modelled as durable at once; `sync_dir` is accepted and does
//! nothing. File sizes grown by writes follow the write's durability.
//!
//! Background creates, removes and renames ([`Disk::submit_create`],
//! [`Disk::submit_remove`], [`Disk::submit_rename`]) run step by step, one
//! step per seeded chance at each `poll` (a blocking poll with nothing else
//! to complete finishes one): a create makes an empty file, then gives it
//! its length, fsyncs it, then fsyncs the directory; a remove unlinks (a
//! rename renames), then fsyncs the directory. A crash keeps the steps done
//! so far; a power loss before the directory fsync may also undo the
//! creation (the file is gone), the unlink (the file is back with its
//! durable bytes) or the rename (the file is back under its old name), by
//! seeded choice.
//!
//! Fault knobs ([`SimFaults`]): EIO on the nth write, fdatasync or read;
//! ENOSPC once a number of written bytes is exceeded, or when allocation
//! exceeds the disk's capacity; short reads; queue-full.
//!
//! # Invariants
//! - Same seed, same calls → same completions, same crash images.
//! - Two O_DIRECT writes overlapping the same block are never in flight
//!   together: the store promises it, and the simulator panics if not.
//! - Every submitted operation completes exactly once and gives its buffer
//!   back.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use super::{
    Disk, DiskCompletion, DiskError, DiskOp, FileId, FileView, OpId, OpenOptions, SpaceInfo, Wait,
};
use crate::aligned::{AlignedBuf, BLOCK_SIZE};

/// Default capacity of a simulated disk (bytes).
pub const SIM_CAPACITY_BYTES_DEFAULT: u64 = 1 << 40;

/// Buffers kept for reuse by [`Disk::buffer`].
pub const SIM_POOL_BUFFERS_MAX: usize = 32;

/// Default queue depth (queued plus in-flight operations).
pub const SIM_QUEUE_DEPTH_DEFAULT: usize = 4096;

/// A small deterministic PRNG (splitmix64), so tests need no `rand`.
#[derive(Clone, Debug)]
pub struct SimRng(u64);

impl SimRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SimRng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Injected faults. Counters are 1-based and count operations submitted to
/// the simulated kernel (at `poll`) from the moment the knob is set.
#[derive(Clone, Debug, Default)]
pub struct SimFaults {
    /// The nth write fails with EIO (and is not applied).
    pub write_eio_nth: Option<u64>,
    /// The nth fdatasync fails with EIO (nothing becomes durable).
    pub fsync_eio_nth: Option<u64>,
    /// The nth read fails with EIO.
    pub read_eio_nth: Option<u64>,
    /// Writes fail with ENOSPC once this many bytes have been written in all.
    pub enospc_after_write_bytes: Option<u64>,
    /// Writes to files opened without O_DIRECT (ConsumeQueue and index
    /// files, sparse on a real disk) fail with ENOSPC: the disk filled up
    /// under the store, whose CommitLog segments are preallocated.
    pub enospc_buffered_writes: bool,
    /// Percent of reads that return fewer bytes than asked (at least one
    /// block, whole blocks).
    pub short_read_percent: u64,
}

/// Knobs of a simulated disk.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Seed of every random choice.
    pub seed: u64,
    /// Complete in-flight operations in seeded order instead of submission
    /// order (links are respected either way).
    pub reorder: bool,
    /// Percent chance that an eligible in-flight operation completes at a
    /// `poll` with [`Wait::No`] (a blocking poll completes at least one).
    pub complete_percent: u64,
    /// Total bytes of the simulated file system.
    pub capacity_bytes: u64,
    /// Queued plus in-flight operations before `submit` says queue full.
    pub queue_depth: usize,
    /// Injected faults.
    pub faults: SimFaults,
}

impl SimConfig {
    /// Defaults with `seed`: reordering on, 60 % completion chance, 1 TiB,
    /// no faults.
    pub fn new(seed: u64) -> Self {
        SimConfig {
            seed,
            reorder: true,
            complete_percent: 60,
            capacity_bytes: SIM_CAPACITY_BYTES_DEFAULT,
            queue_depth: SIM_QUEUE_DEPTH_DEFAULT,
            faults: SimFaults::default(),
        }
    }
}

/// How the simulated machine stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashKind {
    /// Power loss: only durable data plus a seeded part of un-synced writes.
    PowerLoss,
    /// `kill -9` of the process: completed writes survive; in-flight writes
    /// are lost, applied or torn.
    ProcessKill,
}

/// The content of a simulated file system: directories and files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimImage {
    /// Every directory.
    pub dirs: BTreeSet<PathBuf>,
    /// Every file and its bytes.
    pub files: BTreeMap<PathBuf, Vec<u8>>,
}

/// A file's bytes: `len` bytes, of which those past `bytes.len()` are zero
/// (preallocated files cost no memory until written).
#[derive(Clone, Debug, Default)]
struct FileContent {
    len: u64,
    bytes: Vec<u8>,
}

impl FileContent {
    /// `len` zero bytes.
    fn zeroed(len: u64) -> Self {
        FileContent {
            len,
            bytes: Vec::new(),
        }
    }

    /// The given bytes.
    fn from_vec(bytes: Vec<u8>) -> Self {
        FileContent {
            len: bytes.len() as u64,
            bytes,
        }
    }

    /// The file size.
    fn len(&self) -> u64 {
        self.len
    }

    /// All bytes, materialised.
    fn to_vec(&self) -> Vec<u8> {
        let mut out = self.bytes.clone();
        out.resize(self.len as usize, 0);
        out
    }

    /// Copies the bytes at `offset` into `out` (zeros past the end).
    fn read_into(&self, offset: u64, out: &mut [u8]) {
        out.fill(0);
        let start = (offset as usize).min(self.bytes.len());
        let end = (start + out.len()).min(self.bytes.len());
        out[..end - start].copy_from_slice(&self.bytes[start..end]);
    }

    /// Writes `data` at `offset`, growing the file as needed.
    fn write_at(&mut self, offset: u64, data: &[u8]) {
        let start = offset as usize;
        let end = start + data.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[start..end].copy_from_slice(data);
        self.len = self.len.max(end as u64);
    }

    /// Truncates or extends (with zeros) to `len`.
    fn set_len(&mut self, len: u64) {
        self.bytes.truncate(len as usize);
        self.len = len;
    }
}

impl PartialEq for FileContent {
    fn eq(&self, other: &Self) -> bool {
        let common = self.bytes.len().min(other.bytes.len());
        self.len == other.len
            && self.bytes[..common] == other.bytes[..common]
            && self.bytes[common..].iter().all(|b| *b == 0)
            && other.bytes[common..].iter().all(|b| *b == 0)
    }
}

impl Eq for FileContent {}

#[derive(Debug)]
struct UnsyncedWrite {
    seq: u64,
    file_offset: u64,
    data: Vec<u8>,
}

#[derive(Debug, Default)]
struct SimFile {
    volatile: FileContent,
    durable: FileContent,
    unsynced: Vec<UnsyncedWrite>,
    open_count: u32,
}

#[derive(Debug)]
struct OpenFile {
    path: PathBuf,
    options: OpenOptions,
}

/// A background create, remove or rename in progress.
#[derive(Debug)]
struct MetaJob {
    op_id: OpId,
    /// The file (a rename's new name).
    path: PathBuf,
    /// `Some(len)` for a create.
    create_len: Option<u64>,
    /// A create's file opens with O_DIRECT.
    create_direct: bool,
    /// `Some(old path)` for a rename.
    rename_from: Option<PathBuf>,
    /// A rename's options for opening the renamed file, if it opens it.
    open: Option<OpenOptions>,
    /// Steps done (create: open, allocate, fsync, directory fsync; remove
    /// and rename: unlink or rename, directory fsync).
    steps_done: u8,
    /// A remove's unlinked file, until the directory fsync makes it final.
    removed: Option<FileContent>,
}

impl MetaJob {
    fn step_count(&self) -> u8 {
        if self.create_len.is_some() { 4 } else { 2 }
    }

    /// The directory entry is not durable yet.
    fn dir_unsynced(&self) -> bool {
        self.steps_done > 0 && self.steps_done < self.step_count()
    }
}

#[derive(Debug)]
struct InFlight {
    op_id: OpId,
    op: DiskOp,
    link_next: bool,
    /// Completion counter when the operation started; None while it waits
    /// for the operation linked ahead of it.
    started_at: Option<u64>,
    /// Whether it waits behind a linked predecessor (index in submission
    /// order, as a unique number).
    waits_on: Option<u64>,
    number: u64,
    /// CRC of a `WriteShared`'s bytes at submission: its owner must not
    /// change them before the completion (checked when it executes).
    shared_crc: Option<u32>,
}

/// A deterministic in-memory disk (see the module doc).
#[derive(Debug)]
pub struct SimDisk {
    config: SimConfig,
    rng: SimRng,
    dirs: BTreeSet<PathBuf>,
    files: BTreeMap<PathBuf, SimFile>,
    open: BTreeMap<u32, OpenFile>,
    next_file_id: u32,
    queued: Vec<(OpId, DiskOp, bool, Option<u32>)>,
    in_flight: Vec<InFlight>,
    /// Results decided for completed operations not yet handed out.
    ready: VecDeque<DiskCompletion>,
    /// Numbers of operations completed successfully / failed, for links.
    finished_ok: BTreeSet<u64>,
    finished_failed: BTreeSet<u64>,
    next_number: u64,
    completion_seq: u64,
    write_count: u64,
    fsync_count: u64,
    read_count: u64,
    written_bytes: u64,
    link_pending: Option<u64>,
    pool: Vec<AlignedBuf>,
    /// Buffers [`Disk::buffer`] allocated (none in the pool fitted), by
    /// capacity.
    fresh_buffers: BTreeMap<usize, u64>,
    /// Background creates and removes, in submission order.
    meta: Vec<MetaJob>,
}

fn io_err(op: &'static str, path: &Path, errno: i32) -> DiskError {
    DiskError::Io {
        op,
        path: path.to_path_buf(),
        source: io::Error::from_raw_os_error(errno),
    }
}

impl SimDisk {
    /// An empty disk (only `/` exists).
    pub fn new(config: SimConfig) -> Self {
        Self::from_image(SimImage::default(), config)
    }

    /// A disk holding `image`, durable (as after a restart).
    pub fn from_image(image: SimImage, config: SimConfig) -> Self {
        let contents = image
            .files
            .into_iter()
            .map(|(path, bytes)| (path, FileContent::from_vec(bytes)))
            .collect();
        Self::from_contents(image.dirs, contents, config)
    }

    fn from_contents(
        mut dirs: BTreeSet<PathBuf>,
        contents: BTreeMap<PathBuf, FileContent>,
        config: SimConfig,
    ) -> Self {
        dirs.insert(PathBuf::from("/"));
        let files = contents
            .into_iter()
            .map(|(path, bytes)| {
                let file = SimFile {
                    volatile: bytes.clone(),
                    durable: bytes,
                    ..SimFile::default()
                };
                (path, file)
            })
            .collect();
        SimDisk {
            rng: SimRng::new(config.seed ^ 0x5EED_D15C),
            config,
            dirs,
            files,
            open: BTreeMap::new(),
            next_file_id: 1,
            queued: Vec::new(),
            in_flight: Vec::new(),
            ready: VecDeque::new(),
            finished_ok: BTreeSet::new(),
            finished_failed: BTreeSet::new(),
            next_number: 0,
            completion_seq: 0,
            write_count: 0,
            fsync_count: 0,
            read_count: 0,
            written_bytes: 0,
            link_pending: None,
            pool: Vec::new(),
            fresh_buffers: BTreeMap::new(),
            meta: Vec::new(),
        }
    }

    /// Reads submitted since the disk was made (or its faults last changed,
    /// [`SimDisk::faults_mut`]).
    pub fn read_count(&self) -> u64 {
        self.read_count
    }

    /// Buffers of `capacity` bytes that [`Disk::buffer`] had to allocate
    /// because no given-back one fitted.
    pub fn fresh_buffers(&self, capacity: usize) -> u64 {
        self.fresh_buffers.get(&capacity).copied().unwrap_or(0)
    }

    /// The configuration (faults may be changed through [`SimDisk::faults_mut`]).
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Changes the injected faults from now on; the nth-operation counters
    /// restart at zero.
    pub fn faults_mut(&mut self) -> &mut SimFaults {
        self.write_count = 0;
        self.fsync_count = 0;
        self.read_count = 0;
        self.written_bytes = 0;
        &mut self.config.faults
    }

    /// What a reader sees now: every file's volatile content.
    pub fn snapshot(&self) -> SimImage {
        SimImage {
            dirs: self.dirs.clone(),
            files: self
                .files
                .iter()
                .map(|(p, f)| (p.clone(), f.volatile.to_vec()))
                .collect(),
        }
    }

    /// The durable content only (what a power loss with every un-synced
    /// write lost leaves).
    pub fn durable_image(&self) -> SimImage {
        SimImage {
            dirs: self.dirs.clone(),
            files: self
                .files
                .iter()
                .map(|(p, f)| (p.clone(), f.durable.to_vec()))
                .collect(),
        }
    }

    /// The state after a crash of `kind`, with seeded choices per write.
    pub fn crash_image(&mut self, kind: CrashKind) -> SimImage {
        let files = self
            .crash_contents(kind)
            .into_iter()
            .map(|(p, c)| (p, c.to_vec()))
            .collect();
        SimImage {
            dirs: self.dirs.clone(),
            files,
        }
    }

    fn crash_contents(&mut self, kind: CrashKind) -> BTreeMap<PathBuf, FileContent> {
        let mut contents: BTreeMap<PathBuf, FileContent> = BTreeMap::new();
        for (path, file) in &self.files {
            let mut bytes = match kind {
                CrashKind::PowerLoss => file.durable.clone(),
                CrashKind::ProcessKill => file.volatile.clone(),
            };
            if kind == CrashKind::PowerLoss {
                for write in &file.unsynced {
                    apply_partially(&mut self.rng, &mut bytes, write.file_offset, &write.data);
                }
            }
            contents.insert(path.clone(), bytes);
        }
        if kind == CrashKind::PowerLoss {
            for job in self.meta.iter().filter(|job| job.dir_unsynced()) {
                if !self.rng.chance(50) {
                    continue;
                }
                match (&job.removed, &job.rename_from) {
                    (Some(content), _) => {
                        contents.insert(job.path.clone(), content.clone());
                    }
                    (None, Some(from)) => {
                        // The rename is undone: the bytes are back under
                        // the old name.
                        if let Some(content) = contents.remove(&job.path) {
                            contents.insert(from.clone(), content);
                        }
                    }
                    (None, None) => {
                        contents.remove(&job.path);
                    }
                }
            }
        }
        // In-flight writes, in submission order: the kernel may have done
        // any part of them.
        let in_flight: Vec<(PathBuf, u64, Vec<u8>)> = self
            .in_flight
            .iter()
            .filter_map(|op| {
                let (file_offset, data) = op.op.write_bytes()?;
                let path = self.open.get(&op.op.file().0)?.path.clone();
                Some((path, file_offset, data.to_vec()))
            })
            .collect();
        for (path, file_offset, data) in in_flight {
            if let Some(bytes) = contents.get_mut(&path) {
                apply_partially(&mut self.rng, bytes, file_offset, &data);
            }
        }
        contents
    }

    /// A fresh disk holding the state after a crash of `kind`, seeded with
    /// the next seed.
    pub fn crash(&mut self, kind: CrashKind) -> SimDisk {
        let contents = self.crash_contents(kind);
        let mut config = self.config.clone();
        config.seed = self.rng.next_u64();
        config.faults = SimFaults::default();
        SimDisk::from_contents(self.dirs.clone(), contents, config)
    }

    /// Bytes of all files (the space they take).
    pub fn used_bytes(&self) -> u64 {
        self.files.values().map(|f| f.volatile.len()).sum()
    }

    fn open_file(&self, file: FileId) -> Result<&OpenFile, DiskError> {
        self.open.get(&file.0).ok_or(DiskError::NotOpen(file))
    }

    fn check_space(&self, path: &Path, old_len: u64, new_len: u64) -> Result<(), DiskError> {
        let used = self.used_bytes() - old_len;
        if used + new_len > self.config.capacity_bytes {
            return Err(io_err("fallocate", path, libc::ENOSPC));
        }
        Ok(())
    }

    /// Moves queued operations to in flight.
    fn start_queued(&mut self) {
        for (op_id, op, link_next, shared_crc) in std::mem::take(&mut self.queued) {
            let number = self.next_number;
            self.next_number += 1;
            let waits_on = self.link_pending.take();
            if link_next {
                self.link_pending = Some(number);
            }
            let started_at = if waits_on.is_none() {
                Some(self.completion_seq)
            } else {
                None
            };
            self.in_flight.push(InFlight {
                op_id,
                op,
                link_next,
                started_at,
                waits_on,
                number,
                shared_crc,
            });
        }
    }

    fn eligible(&self, op: &InFlight) -> bool {
        match op.waits_on {
            None => true,
            Some(n) => self.finished_ok.contains(&n) || self.finished_failed.contains(&n),
        }
    }

    /// Completes the in-flight operation at `index`.
    fn complete(&mut self, index: usize) {
        let mut op = self.in_flight.remove(index);
        let canceled = op
            .waits_on
            .is_some_and(|n| self.finished_failed.contains(&n));
        let started_at = op.started_at.unwrap_or(self.completion_seq);
        if let (Some(crc), Some((_, data))) = (op.shared_crc, op.op.write_bytes()) {
            assert_eq!(
                crc32fast::hash(data),
                crc,
                "the bytes of a shared-buffer write changed while it was in flight"
            );
        }
        let (result, buf) = if canceled {
            let name = op.op.name();
            (Err(DiskError::Canceled { op: name }), op.op.into_buf())
        } else {
            self.execute(
                std::mem::replace(&mut op.op, DiskOp::Fdatasync { file: FileId(0) }),
                started_at,
            )
        };
        // Writes carry the counter value of their completion; anything that
        // starts from now on covers them.
        self.completion_seq += 1;
        if result.is_ok() {
            self.finished_ok.insert(op.number);
        } else {
            self.finished_failed.insert(op.number);
        }
        // Successors started now (their start is this completion).
        for next in &mut self.in_flight {
            if next.waits_on == Some(op.number) && next.started_at.is_none() {
                next.started_at = Some(self.completion_seq);
            }
        }
        let _ = op.link_next;
        self.ready.push_back(DiskCompletion {
            op_id: op.op_id,
            result,
            buf,
        });
    }

    fn execute(
        &mut self,
        op: DiskOp,
        started_at: u64,
    ) -> (Result<usize, DiskError>, Option<AlignedBuf>) {
        match op {
            DiskOp::Write {
                file,
                file_offset,
                buf,
                buf_range,
            } => {
                let result = self.execute_write(file, file_offset, &buf.as_full_slice()[buf_range]);
                (result, Some(buf))
            }
            DiskOp::WriteShared {
                file,
                file_offset,
                buf,
                buf_range,
            } => (
                self.execute_write(file, file_offset, buf.slice(buf_range)),
                None,
            ),
            DiskOp::Read {
                file,
                file_offset,
                mut buf,
                len,
            } => {
                let result = self.execute_read(file, file_offset, &mut buf, len);
                (result, Some(buf))
            }
            DiskOp::SpliceToPipe {
                file,
                file_offset,
                len,
                pipe,
            } => (self.execute_splice(file, file_offset, len, pipe), None),
            DiskOp::Fdatasync { file } => (self.execute_fsync(file, started_at), None),
            // As `set_len`: the simulation applies it to the durable content
            // at once (a crash keeps the new length).
            DiskOp::Truncate { file, len } => (Disk::set_len(self, file, len).map(|()| 0), None),
        }
    }

    fn execute_write(
        &mut self,
        file: FileId,
        file_offset: u64,
        data: &[u8],
    ) -> Result<usize, DiskError> {
        let open = self.open_file(file)?;
        let path = open.path.clone();
        let direct = open.options.direct;
        if !open.options.writable {
            return Err(io_err("write", &path, libc::EBADF));
        }
        self.write_count += 1;
        if self.config.faults.write_eio_nth == Some(self.write_count) {
            return Err(io_err("write", &path, libc::EIO));
        }
        let len = data.len();
        if let Some(limit) = self.config.faults.enospc_after_write_bytes
            && self.written_bytes + len as u64 > limit
        {
            return Err(io_err("write", &path, libc::ENOSPC));
        }
        if self.config.faults.enospc_buffered_writes && !direct {
            return Err(io_err("write", &path, libc::ENOSPC));
        }
        let old_len = self.files.get(&path).map_or(0, |f| f.volatile.len());
        let end = file_offset + len as u64;
        if end > old_len {
            self.check_space(&path, old_len, end)?;
        }
        self.written_bytes += len as u64;
        let seq = self.completion_seq;
        let data = data.to_vec();
        let sim_file = self.files.get_mut(&path).expect("an open file exists");
        sim_file.volatile.write_at(file_offset, &data);
        sim_file.unsynced.push(UnsyncedWrite {
            seq,
            file_offset,
            data,
        });
        Ok(len)
    }

    fn execute_read(
        &mut self,
        file: FileId,
        file_offset: u64,
        buf: &mut AlignedBuf,
        len: usize,
    ) -> Result<usize, DiskError> {
        let open = self.open_file(file)?;
        let path = open.path.clone();
        let direct = open.options.direct;
        self.read_count += 1;
        if self.config.faults.read_eio_nth == Some(self.read_count) {
            buf.set_len(0);
            return Err(io_err("read", &path, libc::EIO));
        }
        let sim_file = self.files.get(&path).expect("an open file exists");
        let size = sim_file.volatile.len();
        let start = file_offset.min(size) as usize;
        let mut n = ((size - start as u64) as usize).min(len);
        if n > BLOCK_SIZE && self.rng.chance(self.config.faults.short_read_percent) {
            let blocks = n / BLOCK_SIZE;
            n = (1 + self.rng.below(blocks as u64) as usize) * BLOCK_SIZE;
            n = n.min(len);
        }
        let _ = direct;
        let sim_file = self.files.get(&path).expect("an open file exists");
        sim_file
            .volatile
            .read_into(start as u64, &mut buf.as_full_mut_slice()[..n]);
        buf.set_len(n);
        Ok(n)
    }

    /// A splice into a real pipe: the bytes a read would give (with the
    /// read faults: EIO, short reads), written into `pipe`.
    fn execute_splice(
        &mut self,
        file: FileId,
        file_offset: u64,
        len: usize,
        pipe: RawFd,
    ) -> Result<usize, DiskError> {
        let mut buf = AlignedBuf::new(len.max(1));
        let n = self.execute_read(file, file_offset, &mut buf, len)?;
        let mut written = 0;
        while written < n {
            let rest = &buf.as_slice()[written..n];
            // SAFETY: `rest` is a live slice of `rest.len()` bytes.
            let count = unsafe { libc::write(pipe, rest.as_ptr().cast(), rest.len()) };
            if count < 0 {
                let errno = io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                let path = self.open_file(file)?.path.clone();
                return Err(io_err("splice", &path, errno));
            }
            written += count as usize;
        }
        Ok(n)
    }

    fn execute_fsync(&mut self, file: FileId, started_at: u64) -> Result<usize, DiskError> {
        let path = self.open_file(file)?.path.clone();
        self.fsync_count += 1;
        if self.config.faults.fsync_eio_nth == Some(self.fsync_count) {
            return Err(io_err("fdatasync", &path, libc::EIO));
        }
        let sim_file = self.files.get_mut(&path).expect("an open file exists");
        let covered = sim_file
            .unsynced
            .iter()
            .take_while(|w| w.seq < started_at)
            .count();
        for write in sim_file.unsynced.drain(..covered) {
            sim_file.durable.write_at(write.file_offset, &write.data);
        }
        Ok(0)
    }

    /// Does the next step of meta job `index`; returns true when the job is
    /// over (removed from `meta`, its completion in `ready`).
    fn meta_step(&mut self, index: usize) -> bool {
        let (path, create_len, step) = {
            let job = &self.meta[index];
            (job.path.clone(), job.create_len, job.steps_done)
        };
        if let Some(from) = self.meta[index].rename_from.clone() {
            return self.rename_step(index, &from, &path, step);
        }
        let outcome: Result<bool, DiskError> = match (create_len, step) {
            (Some(_), 0) => {
                let parent = path.parent().unwrap_or(Path::new("/"));
                if !self.dirs.contains(parent) {
                    Err(io_err("open", &path, libc::ENOENT))
                } else if self.files.get(&path).is_some_and(|f| f.open_count > 0) {
                    // O_TRUNC of an open file would pull bytes from under it.
                    Err(io_err("open", &path, libc::ETXTBSY))
                } else {
                    let file = self.files.entry(path.clone()).or_default();
                    file.volatile = FileContent::zeroed(0);
                    file.durable = FileContent::zeroed(0);
                    file.unsynced.clear();
                    Ok(false)
                }
            }
            // A sparse create is charged its whole length, as `set_len` is:
            // the simulation has no holes.
            (Some(len), 1) => self.check_space(&path, 0, len).map(|()| {
                let file = self.files.get_mut(&path).expect("created at step 0");
                file.volatile = FileContent::zeroed(len);
                file.durable = FileContent::zeroed(len);
                false
            }),
            (Some(_), 2) => Ok(false),
            (Some(_), _) => Ok(true),
            (None, 0) => match self.files.get(&path) {
                None => Err(io_err("unlink", &path, libc::ENOENT)),
                Some(f) if f.open_count > 0 => Err(io_err("unlink", &path, libc::EBUSY)),
                Some(_) => {
                    let file = self.files.remove(&path).expect("checked above");
                    self.meta[index].removed = Some(file.durable);
                    Ok(false)
                }
            },
            (None, _) => Ok(true),
        };
        self.meta[index].steps_done += 1;
        match outcome {
            Ok(false) => false,
            Ok(true) => {
                let job = self.meta.remove(index);
                let result = match job.create_len {
                    Some(len) => {
                        let options = OpenOptions {
                            create_preallocated: None,
                            direct: job.create_direct,
                            ..OpenOptions::create_direct(len)
                        };
                        let id = self.insert_open(&job.path, options);
                        Ok(id.0 as usize)
                    }
                    None => Ok(0),
                };
                self.finish_meta(job.op_id, result);
                true
            }
            Err(error) => {
                let job = self.meta.remove(index);
                self.finish_meta(job.op_id, Err(error));
                true
            }
        }
    }

    /// Step `step` of rename job `index` (`from` → `to`): the rename, then
    /// the directory fsync, which ends it (opening `to` if asked).
    fn rename_step(&mut self, index: usize, from: &Path, to: &Path, step: u8) -> bool {
        self.meta[index].steps_done += 1;
        if step == 0 {
            let outcome = match self.files.get(from) {
                None => Err(io_err("renameat", from, libc::ENOENT)),
                Some(f) if f.open_count > 0 => Err(io_err("renameat", from, libc::EBUSY)),
                Some(_) if self.files.get(to).is_some_and(|f| f.open_count > 0) => {
                    Err(io_err("renameat", to, libc::EBUSY))
                }
                Some(_) => {
                    let file = self.files.remove(from).expect("checked above");
                    self.files.insert(to.to_path_buf(), file);
                    Ok(())
                }
            };
            if let Err(error) = outcome {
                let job = self.meta.remove(index);
                self.finish_meta(job.op_id, Err(error));
                return true;
            }
            return false;
        }
        let job = self.meta.remove(index);
        let result = match job.open {
            Some(options) => Ok(self.insert_open(to, options).0 as usize),
            None => Ok(0),
        };
        self.finish_meta(job.op_id, result);
        true
    }

    fn finish_meta(&mut self, op_id: OpId, result: Result<usize, DiskError>) {
        self.completion_seq += 1;
        self.ready.push_back(DiskCompletion {
            op_id,
            result,
            buf: None,
        });
    }

    /// Advances the background creates and removes: each takes steps while
    /// a seeded chance says so; with `force`, the first one runs to its end.
    /// Returns whether one finished.
    fn advance_meta(&mut self, force: bool) -> bool {
        let mut finished = false;
        let mut index = 0;
        while index < self.meta.len() {
            let forced = force && !finished && index == 0;
            let mut done = false;
            while forced || self.rng.chance(self.config.complete_percent) {
                if self.meta_step(index) {
                    done = true;
                    break;
                }
            }
            if done {
                finished = true;
            } else {
                index += 1;
            }
        }
        finished
    }

    fn insert_open(&mut self, path: &Path, options: OpenOptions) -> FileId {
        let file = self.files.get_mut(path).expect("the file exists");
        file.open_count += 1;
        let id = self.next_file_id;
        self.next_file_id += 1;
        self.open.insert(
            id,
            OpenFile {
                path: path.to_path_buf(),
                options,
            },
        );
        FileId(id)
    }

    fn assert_no_overlapping_direct_write(&self, op: &DiskOp) {
        let Some((file_offset, data)) = op.write_bytes() else {
            return;
        };
        let file = op.file();
        let Some(open) = self.open.get(&file.0) else {
            return;
        };
        if !open.options.direct {
            return;
        }
        let range = file_offset..file_offset + data.len() as u64;
        let others = self
            .in_flight
            .iter()
            .map(|f| &f.op)
            .chain(self.queued.iter().map(|q| &q.1));
        for other in others {
            if let Some((o2, d2)) = other.write_bytes()
                && other.file() == file
            {
                let other_range = o2..o2 + d2.len() as u64;
                assert!(
                    range.start >= other_range.end || other_range.start >= range.end,
                    "overlapping O_DIRECT writes in flight on {}: {range:?} and {other_range:?}",
                    open.path.display()
                );
            }
        }
    }
}

/// Applies all, none, a prefix or a suffix of a write (seeded).
fn apply_partially(rng: &mut SimRng, bytes: &mut FileContent, offset: u64, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    match rng.below(4) {
        0 => {}
        1 => bytes.write_at(offset, data),
        2 => {
            let cut = rng.below(data.len() as u64) as usize;
            bytes.write_at(offset, &data[..cut]);
        }
        _ => {
            let cut = rng.below(data.len() as u64) as usize;
            // Only the tail reached the medium: the file must not grow past
            // what the tail covers, and the head stays as it was.
            bytes.write_at(offset + cut as u64, &data[cut..]);
        }
    }
}

impl SimDisk {
    fn submit_meta(&mut self, job: MetaJob) -> Result<(), DiskError> {
        if self.queued.len() + self.in_flight.len() + self.meta.len() >= self.config.queue_depth {
            return Err(DiskError::QueueFull {
                capacity: self.config.queue_depth,
            });
        }
        self.meta.push(job);
        Ok(())
    }

    /// Background creates and removes not yet finished.
    pub fn metadata_jobs_in_flight(&self) -> usize {
        self.meta.len()
    }
}

impl Disk for SimDisk {
    fn open(&mut self, path: &Path, options: OpenOptions) -> Result<FileId, DiskError> {
        let parent = path.parent().unwrap_or(Path::new("/"));
        if !self.dirs.contains(parent) && parent != Path::new("") {
            return Err(io_err("open", path, libc::ENOENT));
        }
        if self.dirs.contains(path) {
            return Err(io_err("open", path, libc::EISDIR));
        }
        match options.create_preallocated {
            Some(len) => {
                let old_len = self.files.get(path).map_or(0, |f| f.volatile.len());
                self.check_space(path, old_len, len)?;
                let file = self.files.entry(path.to_path_buf()).or_default();
                file.volatile = FileContent::zeroed(len);
                file.durable = FileContent::zeroed(len);
                file.unsynced.clear();
            }
            None => {
                if !self.files.contains_key(path) {
                    return Err(io_err("open", path, libc::ENOENT));
                }
            }
        }
        Ok(self.insert_open(path, options))
    }

    fn map_read_only(&mut self, path: &Path) -> Result<FileView, DiskError> {
        // What a mapping shows: the file's bytes as written (the page
        // cache), synced or not; a copy, so later writes do not show.
        match self.files.get(path) {
            Some(file) => Ok(FileView::owned(file.volatile.to_vec())),
            None => Err(io_err("open", path, libc::ENOENT)),
        }
    }

    fn close(&mut self, file: FileId) -> Result<(), DiskError> {
        let busy = self
            .in_flight
            .iter()
            .map(|f| &f.op)
            .chain(self.queued.iter().map(|q| &q.1))
            .any(|op| op.file() == file);
        assert!(!busy, "close of {file:?} with operations in flight");
        let open = self.open.remove(&file.0).ok_or(DiskError::NotOpen(file))?;
        if let Some(f) = self.files.get_mut(&open.path) {
            f.open_count -= 1;
        }
        Ok(())
    }

    fn file_size(&self, file: FileId) -> Result<u64, DiskError> {
        let open = self.open_file(file)?;
        Ok(self.files.get(&open.path).map_or(0, |f| f.volatile.len()))
    }

    fn remove(&mut self, path: &Path) -> Result<(), DiskError> {
        match self.files.get(path) {
            None => Err(io_err("unlink", path, libc::ENOENT)),
            Some(f) if f.open_count > 0 => Err(io_err("unlink", path, libc::EBUSY)),
            Some(_) => {
                self.files.remove(path);
                Ok(())
            }
        }
    }

    fn set_len(&mut self, file: FileId, len: u64) -> Result<(), DiskError> {
        let path = self.open_file(file)?.path.clone();
        let old_len = self.files.get(&path).map_or(0, |f| f.volatile.len());
        if len > old_len {
            self.check_space(&path, old_len, len)?;
        }
        let f = self.files.get_mut(&path).expect("an open file exists");
        f.volatile.set_len(len);
        f.durable.set_len(len);
        // Un-synced writes past the new end are gone; those inside keep
        // their place (a crash may still drop them).
        for write in &mut f.unsynced {
            let keep = len
                .saturating_sub(write.file_offset)
                .min(write.data.len() as u64);
            write.data.truncate(keep as usize);
        }
        f.unsynced.retain(|w| !w.data.is_empty());
        Ok(())
    }

    fn create_dir_all(&mut self, dir: &Path) -> Result<(), DiskError> {
        if self.files.contains_key(dir) {
            return Err(io_err("mkdir", dir, libc::ENOTDIR));
        }
        for ancestor in dir.ancestors() {
            if !ancestor.as_os_str().is_empty() {
                self.dirs.insert(ancestor.to_path_buf());
            }
        }
        Ok(())
    }

    fn remove_dir(&mut self, dir: &Path) -> Result<(), DiskError> {
        if !self.dirs.contains(dir) {
            return Err(io_err("rmdir", dir, libc::ENOENT));
        }
        let occupied = self
            .dirs
            .iter()
            .chain(self.files.keys())
            .any(|p| p.parent() == Some(dir));
        if occupied {
            return Err(io_err("rmdir", dir, libc::ENOTEMPTY));
        }
        self.dirs.remove(dir);
        Ok(())
    }

    fn list_dir(&mut self, dir: &Path) -> Result<Vec<String>, DiskError> {
        let mut names: Vec<String> = self
            .dirs
            .iter()
            .chain(self.files.keys())
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn sync_dir(&mut self, dir: &Path) -> Result<(), DiskError> {
        if !self.dirs.contains(dir) {
            return Err(io_err("open", dir, libc::ENOENT));
        }
        Ok(())
    }

    fn rename(&mut self, from: &Path, to: &Path) -> Result<(), DiskError> {
        let file = self
            .files
            .remove(from)
            .ok_or_else(|| io_err("rename", from, libc::ENOENT))?;
        for open in self.open.values_mut() {
            if open.path == from {
                open.path = to.to_path_buf();
            }
        }
        self.files.insert(to.to_path_buf(), file);
        Ok(())
    }

    fn space(&self, _path: &Path) -> Result<SpaceInfo, DiskError> {
        let total = self.config.capacity_bytes;
        Ok(SpaceInfo {
            total_bytes: total,
            available_bytes: total.saturating_sub(self.used_bytes()),
            free_bytes: total.saturating_sub(self.used_bytes()),
        })
    }

    fn submit(
        &mut self,
        op_id: OpId,
        op: DiskOp,
        link_next: bool,
    ) -> Result<(), (DiskError, DiskOp)> {
        if self.queued.len() + self.in_flight.len() >= self.config.queue_depth {
            return Err((
                DiskError::QueueFull {
                    capacity: self.config.queue_depth,
                },
                op,
            ));
        }
        if let Some((_, buf, buf_range)) = op.write_parts() {
            assert!(
                buf_range.end <= buf.capacity(),
                "write range {buf_range:?} past buffer"
            );
        }
        if let DiskOp::Read { buf, len, .. } = &op {
            assert!(
                *len <= buf.capacity(),
                "read of {len} into a {}-byte buffer",
                buf.capacity()
            );
        }
        let file = op.file();
        if let (Some(open), Some((offset, start, len))) =
            (self.open.get(&file.0), op.direct_range())
            && open.options.direct
        {
            let block = BLOCK_SIZE as u64;
            assert!(
                offset.is_multiple_of(block),
                "O_DIRECT offset {offset} unaligned"
            );
            assert!(
                start.is_multiple_of(BLOCK_SIZE),
                "O_DIRECT buffer start {start} unaligned"
            );
            assert!(
                len.is_multiple_of(BLOCK_SIZE),
                "O_DIRECT length {len} unaligned"
            );
        }
        self.assert_no_overlapping_direct_write(&op);
        let shared_crc = match &op {
            DiskOp::WriteShared { .. } => op.write_bytes().map(|(_, data)| crc32fast::hash(data)),
            _ => None,
        };
        self.queued.push((op_id, op, link_next, shared_crc));
        Ok(())
    }

    fn poll(
        &mut self,
        out: &mut Vec<DiskCompletion>,
        max: usize,
        wait: Wait,
    ) -> Result<usize, DiskError> {
        self.start_queued();
        let must_complete = matches!(wait, Wait::AtLeastOne(_)) && self.ready.is_empty();
        let mut completed_any = false;
        loop {
            let eligible: Vec<usize> = (0..self.in_flight.len())
                .filter(|&i| self.eligible(&self.in_flight[i]))
                .collect();
            if eligible.is_empty() {
                break;
            }
            let pick = if self.config.reorder {
                eligible[self.rng.below(eligible.len() as u64) as usize]
            } else {
                eligible[0]
            };
            let forced = must_complete && !completed_any;
            if !forced && !self.rng.chance(self.config.complete_percent) {
                break;
            }
            self.complete(pick);
            completed_any = true;
        }
        let force_meta = must_complete && !completed_any;
        self.advance_meta(force_meta);
        let mut n = 0;
        while n < max {
            let Some(c) = self.ready.pop_front() else {
                break;
            };
            out.push(c);
            n += 1;
        }
        Ok(n)
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
        self.submit_meta(MetaJob {
            op_id,
            path: path.to_path_buf(),
            create_len: Some(len),
            create_direct: options.direct,
            rename_from: None,
            open: None,
            steps_done: 0,
            removed: None,
        })
    }

    fn submit_remove(&mut self, op_id: OpId, path: &Path) -> Result<(), DiskError> {
        self.submit_meta(MetaJob {
            op_id,
            path: path.to_path_buf(),
            create_len: None,
            create_direct: false,
            rename_from: None,
            open: None,
            steps_done: 0,
            removed: None,
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
        self.submit_meta(MetaJob {
            op_id,
            path: to.to_path_buf(),
            create_len: None,
            create_direct: false,
            rename_from: Some(from.to_path_buf()),
            open,
            steps_done: 0,
            removed: None,
        })
    }

    fn in_flight(&self) -> usize {
        self.queued.len() + self.in_flight.len() + self.ready.len() + self.meta.len()
    }

    fn buffer(&mut self, capacity: usize) -> AlignedBuf {
        let capacity = capacity.max(1);
        // Like a registered pool, buffers come back with old bytes in them.
        match self
            .pool
            .iter()
            .position(|b| b.capacity() >= capacity && b.capacity() <= 2 * capacity.max(BLOCK_SIZE))
        {
            Some(index) => {
                let mut buf = self.pool.swap_remove(index);
                buf.set_len(0);
                buf
            }
            None => {
                let buf = AlignedBuf::new(capacity);
                *self.fresh_buffers.entry(buf.capacity()).or_default() += 1;
                buf
            }
        }
    }

    fn recycle(&mut self, buf: AlignedBuf) {
        if self.pool.len() < SIM_POOL_BUFFERS_MAX {
            self.pool.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aligned::SharedBuf;
    use crate::disk::OpTag;

    fn block_buf(byte: u8, blocks: usize) -> AlignedBuf {
        let mut buf = AlignedBuf::new(blocks * BLOCK_SIZE);
        buf.as_full_mut_slice().fill(byte);
        buf.set_len(blocks * BLOCK_SIZE);
        buf
    }

    fn drain(disk: &mut SimDisk) -> Vec<DiskCompletion> {
        let mut out = Vec::new();
        while disk.in_flight() > 0 {
            disk.poll(&mut out, 64, Wait::AtLeastOne(std::time::Duration::ZERO))
                .unwrap();
        }
        out
    }

    fn setup(seed: u64) -> (SimDisk, FileId, PathBuf) {
        let mut disk = SimDisk::new(SimConfig::new(seed));
        disk.create_dir_all(Path::new("/d")).unwrap();
        let path = PathBuf::from("/d/f");
        let file = disk
            .open(&path, OpenOptions::create_direct(4 * BLOCK_SIZE as u64))
            .unwrap();
        (disk, file, path)
    }

    fn write(disk: &mut SimDisk, file: FileId, offset: u64, byte: u8, link: bool) {
        let op = DiskOp::Write {
            file,
            file_offset: offset,
            buf: block_buf(byte, 1),
            buf_range: 0..BLOCK_SIZE,
        };
        disk.submit(OpId::new(OpTag::Other, offset), op, link)
            .unwrap();
    }

    fn shared_write(disk: &mut SimDisk, file: FileId, shared: &SharedBuf) {
        let op = DiskOp::WriteShared {
            file,
            file_offset: 0,
            buf: shared.clone(),
            buf_range: 0..BLOCK_SIZE,
        };
        disk.submit(OpId::new(OpTag::Other, 1), op, false).unwrap();
    }

    #[test]
    fn a_shared_write_writes_its_bytes_and_gives_no_buffer_back() {
        let (mut disk, file, path) = setup(5);
        let shared = SharedBuf::new(block_buf(9, 2));
        shared_write(&mut disk, file, &shared);
        let out = drain(&mut disk);
        assert_eq!(out.len(), 1);
        assert_eq!(*out[0].result.as_ref().unwrap(), BLOCK_SIZE);
        assert!(out[0].buf.is_none());
        assert!(
            disk.snapshot().files[&path][..BLOCK_SIZE]
                .iter()
                .all(|b| *b == 9)
        );
        shared.try_into_inner().expect("the disk dropped its clone");
    }

    #[test]
    #[should_panic(expected = "changed while it was in flight")]
    fn a_shared_write_whose_bytes_change_in_flight_is_caught() {
        let (mut disk, file, _) = setup(6);
        let shared = SharedBuf::new(block_buf(9, 1));
        shared_write(&mut disk, file, &shared);
        // SAFETY: deliberately breaks the contract the sim checks; the sim
        // only reads the bytes when it executes the write, on this thread.
        let bytes = unsafe { shared.slice_mut(0..1) };
        bytes[0] = 1;
        drain(&mut disk);
    }

    #[test]
    fn a_crash_between_the_steps_of_a_background_create_leaves_no_data_behind() {
        let (mut lengths, mut missing) = (BTreeSet::new(), 0);
        for seed in 0..64 {
            let mut disk = SimDisk::new(SimConfig::new(seed));
            disk.create_dir_all(Path::new("/d")).unwrap();
            let path = PathBuf::from("/d/next");
            let len = 4 * BLOCK_SIZE as u64;
            disk.submit_create(
                OpId::new(OpTag::Other, 1),
                &path,
                OpenOptions::create_direct(len),
            )
            .unwrap();
            let polls = seed % 4;
            let mut out = Vec::new();
            for _ in 0..polls {
                disk.poll(&mut out, 8, Wait::No).unwrap();
            }
            let kind = if seed % 2 == 0 {
                CrashKind::PowerLoss
            } else {
                CrashKind::ProcessKill
            };
            let image = disk.crash_image(kind);
            match image.files.get(&path) {
                Some(bytes) => {
                    assert!(bytes.iter().all(|b| *b == 0), "seed {seed}");
                    lengths.insert(bytes.len() as u64);
                }
                None => missing += 1,
            }
            // Without a crash the creation ends with the file open.
            while disk.in_flight() > 0 {
                disk.poll(&mut out, 8, Wait::AtLeastOne(std::time::Duration::ZERO))
                    .unwrap();
            }
            let id = super::super::created_file_id(*out[0].result.as_ref().unwrap());
            assert_eq!(disk.file_size(id).unwrap(), len);
        }
        assert!(
            lengths.contains(&0),
            "some crash fell between open and fallocate"
        );
        assert!(lengths.contains(&(4 * BLOCK_SIZE as u64)));
        assert!(
            missing > 0,
            "some crash came before the creation started or was undone"
        );
    }

    #[test]
    fn a_background_remove_unlinks_and_a_power_loss_before_the_directory_sync_may_undo_it() {
        let mut undone = 0;
        for seed in 0..32 {
            let (mut disk, file, path) = setup(seed);
            write(&mut disk, file, 0, 4, true);
            disk.submit(
                OpId::new(OpTag::Other, 9),
                DiskOp::Fdatasync { file },
                false,
            )
            .unwrap();
            drain(&mut disk);
            disk.close(file).unwrap();
            disk.submit_remove(OpId::new(OpTag::Other, 10), &path)
                .unwrap();
            let mut out = Vec::new();
            disk.poll(&mut out, 8, Wait::No).unwrap();
            let image = disk.crash_image(CrashKind::PowerLoss);
            if let Some(bytes) = image.files.get(&path) {
                assert!(bytes[..BLOCK_SIZE].iter().all(|b| *b == 4), "seed {seed}");
                undone += 1;
            }
            let done = drain(&mut disk);
            assert!(out.iter().chain(&done).all(|c| c.result.is_ok()));
            assert!(!disk.snapshot().files.contains_key(&path));
        }
        assert!(undone > 0);
    }

    #[test]
    fn synced_write_survives_power_loss_and_unsynced_may_not() {
        let mut lost = 0;
        for seed in 0..64 {
            let (mut disk, file, path) = setup(seed);
            write(&mut disk, file, 0, 7, true);
            disk.submit(
                OpId::new(OpTag::Other, 99),
                DiskOp::Fdatasync { file },
                false,
            )
            .unwrap();
            assert!(drain(&mut disk).iter().all(|c| c.result.is_ok()));
            write(&mut disk, file, BLOCK_SIZE as u64, 9, false);
            drain(&mut disk);
            let image = disk.crash_image(CrashKind::PowerLoss);
            let bytes = &image.files[&path];
            assert!(bytes[..BLOCK_SIZE].iter().all(|b| *b == 7), "seed {seed}");
            if bytes[BLOCK_SIZE..2 * BLOCK_SIZE].iter().any(|b| *b != 9) {
                lost += 1;
            }
            assert_eq!(disk.snapshot().files[&path][BLOCK_SIZE], 9);
        }
        assert!(lost > 0, "some seed must lose or tear the un-synced write");
    }

    #[test]
    fn process_kill_keeps_completed_writes_without_fsync() {
        let (mut disk, file, path) = setup(3);
        write(&mut disk, file, 0, 5, false);
        drain(&mut disk);
        let image = disk.crash_image(CrashKind::ProcessKill);
        assert!(image.files[&path][..BLOCK_SIZE].iter().all(|b| *b == 5));
    }

    #[test]
    fn nth_write_fails_with_eio_and_cancels_the_linked_fsync() {
        let (mut disk, file, _) = setup(4);
        disk.faults_mut().write_eio_nth = Some(1);
        write(&mut disk, file, 0, 5, true);
        disk.submit(
            OpId::new(OpTag::Other, 99),
            DiskOp::Fdatasync { file },
            false,
        )
        .unwrap();
        let out = drain(&mut disk);
        assert_eq!(out.len(), 2);
        let write_result = out.iter().find(|c| c.op_id.seq() == 0).unwrap();
        assert_eq!(
            write_result.result.as_ref().unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        let sync_result = out.iter().find(|c| c.op_id.seq() == 99).unwrap();
        assert!(matches!(
            sync_result.result,
            Err(DiskError::Canceled { .. })
        ));
    }

    #[test]
    fn unlinked_fsync_beside_an_in_flight_write_does_not_cover_it() {
        let (mut disk, file, path) = setup(5);
        write(&mut disk, file, 0, 5, false);
        disk.submit(
            OpId::new(OpTag::Other, 99),
            DiskOp::Fdatasync { file },
            false,
        )
        .unwrap();
        drain(&mut disk);
        assert!(
            disk.durable_image().files[&path][..BLOCK_SIZE]
                .iter()
                .all(|b| *b == 0)
        );
    }

    #[test]
    fn same_seed_gives_same_crash_image() {
        let run = |seed| {
            let (mut disk, file, _) = setup(seed);
            for i in 0..4 {
                write(&mut disk, file, i * BLOCK_SIZE as u64, i as u8 + 1, false);
            }
            let mut out = Vec::new();
            disk.poll(&mut out, 64, Wait::No).unwrap();
            disk.crash_image(CrashKind::PowerLoss)
        };
        assert_eq!(run(11), run(11));
    }

    #[test]
    #[should_panic(expected = "overlapping")]
    fn overlapping_direct_writes_in_flight_panic() {
        let (mut disk, file, _) = setup(6);
        write(&mut disk, file, 0, 1, false);
        write(&mut disk, file, 0, 2, false);
    }

    #[test]
    fn reads_see_completed_writes_and_short_reads_are_whole_blocks() {
        let (mut disk, file, _) = setup(7);
        write(&mut disk, file, 0, 3, false);
        drain(&mut disk);
        disk.faults_mut().short_read_percent = 100;
        let op = DiskOp::Read {
            file,
            file_offset: 0,
            buf: AlignedBuf::new(4 * BLOCK_SIZE),
            len: 4 * BLOCK_SIZE,
        };
        disk.submit(OpId::new(OpTag::Other, 1), op, false).unwrap();
        let out = drain(&mut disk);
        let n = *out[0].result.as_ref().unwrap();
        assert!(n < 4 * BLOCK_SIZE && n.is_multiple_of(BLOCK_SIZE) && n > 0);
        assert_eq!(out[0].buf.as_ref().unwrap().as_slice()[0], 3);
    }

    #[test]
    fn enospc_after_write_bytes_rejects_the_write() {
        let (mut disk, file, _) = setup(8);
        disk.faults_mut().enospc_after_write_bytes = Some(BLOCK_SIZE as u64);
        write(&mut disk, file, 0, 1, false);
        write(&mut disk, file, BLOCK_SIZE as u64, 1, false);
        let out = drain(&mut disk);
        assert_eq!(out.iter().filter(|c| c.result.is_err()).count(), 1);
        assert!(
            out.iter()
                .any(|c| c.result.as_ref().is_err_and(|e| e.is_no_space()))
        );
    }

    #[test]
    fn remove_dir_removes_only_an_empty_directory_and_survives_a_crash() {
        let mut d = SimDisk::new(SimConfig::new(31));
        let dir = Path::new("/q/T/0");
        d.create_dir_all(dir).unwrap();
        let id = d
            .open(&dir.join("f"), OpenOptions::buffered(Some(8)))
            .unwrap();
        let full = d.remove_dir(dir).unwrap_err();
        assert_eq!(full.raw_os_error(), Some(libc::ENOTEMPTY));
        assert_eq!(
            d.remove_dir(Path::new("/q/T")).unwrap_err().raw_os_error(),
            Some(libc::ENOTEMPTY),
            "a subdirectory counts"
        );
        d.close(id).unwrap();
        d.remove(&dir.join("f")).unwrap();
        d.remove_dir(dir).unwrap();
        assert_eq!(
            d.remove_dir(dir).unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
        assert!(d.list_dir(Path::new("/q/T")).unwrap().is_empty());
        let crashed = d.crash(CrashKind::PowerLoss);
        assert!(!crashed.snapshot().dirs.contains(dir));
        assert!(crashed.snapshot().dirs.contains(Path::new("/q/T")));
    }
}
