//! The I/O seam between the store and the kernel.
//!
//! Storage code (CommitLog, ConsumeQueue, IndexFile, recovery) never calls the
//! kernel itself: it submits [`DiskOp`]s to a [`Disk`] and later receives
//! [`DiskCompletion`]s carrying the caller's [`OpId`], the result, and the
//! buffer back. Two implementations share this seam:
//!
//! - `disk::uring::UringDisk`: the shard's io_uring (O_DIRECT files,
//!   registered buffers, `WRITE_FIXED`, linked write→fdatasync);
//! - `disk::sim::SimDisk`: a deterministic in-memory disk with seeded faults
//!   (torn writes at any byte, lost un-synced writes on crash, EIO, ENOSPC),
//!   so tests run the very same storage code through crashes.
//!
//! Data-path operations are asynchronous and batched: `submit` only queues;
//! [`Disk::poll`] submits everything queued in one go and reaps what has
//! completed. Metadata operations (open, create, remove, list, statvfs) are
//! synchronous and run at startup and in recovery; while the store runs, a
//! file is created ([`Disk::submit_create`]: open, fallocate, fsync of the
//! file and of its directory) and removed ([`Disk::submit_remove`]: unlink,
//! fsync of the directory) in the background, step by step through the same
//! queue, so neither ever stalls the loop.
//!
//! # Invariants
//! - A buffer handed to `submit` belongs to the operation until its
//!   completion is returned by `poll`; the completion always gives it back.
//! - Every submitted operation completes exactly once (success or error),
//!   including when the disk is shut down.
//! - On O_DIRECT files, `Write`/`Read`/`SpliceToPipe` offsets, buffer ranges
//!   and lengths are multiples of [`crate::aligned::BLOCK_SIZE`]
//!   ([`DiskOp::direct_range`]); implementations assert it.
//! - A buffer obtained from [`Disk::buffer`] may be registered with the kernel
//!   (io_uring fixed buffer). It is given back with [`Disk::recycle`]; dropping
//!   a registered buffer leaks its memory rather than freeing pages the kernel
//!   still has pinned.
//! - With `link_next`, the next submitted operation starts only after this one
//!   succeeded; if this one fails, the linked one completes with
//!   [`DiskError::Canceled`].

use std::io;
use std::ops::Range;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::aligned::{AlignedBuf, SharedBuf};

/// A file opened through a [`Disk`]; an index into the disk's file table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u32);

/// The caller's name for one operation, echoed in its completion.
///
/// Several components share one disk and one poll loop, so an id carries the
/// owning component in its top byte ([`OpTag`]) and a component-chosen
/// sequence number in the low 56 bits; the loop routes each completion to its
/// owner by tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// The component that owns an operation (top byte of an [`OpId`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum OpTag {
    /// CommitLog writes, fdatasyncs and reads.
    CommitLog = 1,
    /// ConsumeQueue write-behind.
    ConsumeQueue = 2,
    /// IndexFile write-behind.
    IndexFile = 3,
    /// Checkpoint file writes.
    Checkpoint = 4,
    /// Recovery scans.
    Recovery = 5,
    /// Anything else (benchmarks, tools, tests).
    Other = 6,
    /// Background removals of ConsumeQueue and index files (retention).
    Retention = 7,
}

impl OpId {
    const SEQ_MASK: u64 = (1 << 56) - 1;

    /// An id for `tag` with sequence number `seq` (masked to 56 bits).
    pub fn new(tag: OpTag, seq: u64) -> Self {
        OpId(((tag as u64) << 56) | (seq & Self::SEQ_MASK))
    }

    /// The owning component, or None for an id made without [`OpId::new`].
    pub fn tag(self) -> Option<OpTag> {
        Some(match self.0 >> 56 {
            1 => OpTag::CommitLog,
            2 => OpTag::ConsumeQueue,
            3 => OpTag::IndexFile,
            4 => OpTag::Checkpoint,
            5 => OpTag::Recovery,
            6 => OpTag::Other,
            7 => OpTag::Retention,
            _ => return None,
        })
    }

    /// The component's sequence number.
    pub fn seq(self) -> u64 {
        self.0 & Self::SEQ_MASK
    }
}

/// An asynchronous data-path operation.
#[derive(Debug)]
pub enum DiskOp {
    /// Writes `buf[buf_range]` at `file_offset` (O_DIRECT: all three aligned).
    Write {
        /// Target file.
        file: FileId,
        /// Byte offset in the file.
        file_offset: u64,
        /// The buffer; returned in the completion.
        buf: AlignedBuf,
        /// The part of `buf` to write.
        buf_range: Range<usize>,
    },
    /// As `Write`, from a buffer the caller keeps using: the op holds a
    /// clone of `buf` until its completion (which gives no buffer back), and
    /// the caller does not touch `buf[buf_range]` meanwhile (see
    /// [`SharedBuf::slice_mut`]). The CommitLog writes from its long-lived
    /// write buffers this way.
    WriteShared {
        /// Target file.
        file: FileId,
        /// Byte offset in the file.
        file_offset: u64,
        /// The buffer, shared with its owner.
        buf: SharedBuf,
        /// The part of `buf` to write.
        buf_range: Range<usize>,
    },
    /// Reads up to `len` bytes at `file_offset` into `buf[..len]`. A short
    /// read (end of file) completes with the count actually read.
    Read {
        /// Source file.
        file: FileId,
        /// Byte offset in the file.
        file_offset: u64,
        /// The buffer; returned in the completion with `len()` = bytes read.
        buf: AlignedBuf,
        /// Bytes wanted; at most `buf.capacity()`.
        len: usize,
    },
    /// `splice(2)` of up to `len` bytes of the file at `file_offset` into a
    /// pipe (O_DIRECT: offset and length aligned, as for `Read`): the bytes
    /// go from the file to the pipe's pages without passing through user
    /// space, for shipping a byte range on to a socket. Completes with the
    /// count moved, which a pipe with less room or the end of the file can
    /// make short. The caller keeps `pipe` (the write end) open until the
    /// completion; the pipe must have room for `len` bytes, or the splice
    /// waits for a reader.
    SpliceToPipe {
        /// Source file.
        file: FileId,
        /// Byte offset in the file.
        file_offset: u64,
        /// Bytes wanted.
        len: usize,
        /// The pipe's write end.
        pipe: RawFd,
    },
    /// `fdatasync(2)`: everything written to the file before this operation
    /// was submitted is durable when it completes successfully.
    Fdatasync {
        /// File to sync.
        file: FileId,
    },
    /// `ftruncate(2)` to `len` (metadata only: durable with the file's next
    /// fsync or a journal commit). On Linux before 6.9 the ring has no such
    /// operation and it fails with EINVAL. Used to shrink a file in steps
    /// before it is unlinked, where the file system discards freed blocks
    /// synchronously.
    Truncate {
        /// Target file.
        file: FileId,
        /// The new length.
        len: u64,
    },
}

impl DiskOp {
    /// The file the op works on.
    pub fn file(&self) -> FileId {
        match self {
            DiskOp::Write { file, .. }
            | DiskOp::WriteShared { file, .. }
            | DiskOp::Read { file, .. }
            | DiskOp::SpliceToPipe { file, .. }
            | DiskOp::Fdatasync { file }
            | DiskOp::Truncate { file, .. } => *file,
        }
    }

    /// A write's file offset, buffer and range of the buffer, owned or
    /// shared alike.
    pub fn write_parts(&self) -> Option<(u64, &AlignedBuf, &Range<usize>)> {
        match self {
            DiskOp::Write {
                file_offset,
                buf,
                buf_range,
                ..
            } => Some((*file_offset, buf, buf_range)),
            DiskOp::WriteShared {
                file_offset,
                buf,
                buf_range,
                ..
            } => Some((*file_offset, buf.buf(), buf_range)),
            DiskOp::Read { .. }
            | DiskOp::SpliceToPipe { .. }
            | DiskOp::Fdatasync { .. }
            | DiskOp::Truncate { .. } => None,
        }
    }

    /// What an O_DIRECT file needs aligned to
    /// [`crate::aligned::BLOCK_SIZE`] for this op (file offset, start in
    /// the buffer, length): writes', reads' and splices'; None for ops that
    /// move no data.
    pub fn direct_range(&self) -> Option<(u64, usize, usize)> {
        match self {
            DiskOp::Write { .. } | DiskOp::WriteShared { .. } => self
                .write_parts()
                .map(|(offset, _, range)| (offset, range.start, range.len())),
            DiskOp::Read {
                file_offset, len, ..
            }
            | DiskOp::SpliceToPipe {
                file_offset, len, ..
            } => Some((*file_offset, 0, *len)),
            DiskOp::Fdatasync { .. } | DiskOp::Truncate { .. } => None,
        }
    }

    /// A write's file offset and the bytes it writes.
    ///
    /// # Panics
    /// If the range is past the buffer.
    pub fn write_bytes(&self) -> Option<(u64, &[u8])> {
        self.write_parts()
            .map(|(offset, buf, range)| (offset, &buf.as_full_slice()[range.clone()]))
    }

    /// A short name for errors ("write", "read", "fdatasync").
    pub fn name(&self) -> &'static str {
        match self {
            DiskOp::Write { .. } | DiskOp::WriteShared { .. } => "write",
            DiskOp::Read { .. } => "read",
            DiskOp::SpliceToPipe { .. } => "splice",
            DiskOp::Fdatasync { .. } => "fdatasync",
            DiskOp::Truncate { .. } => "ftruncate",
        }
    }

    /// The buffer the op owns, given back in its completion.
    pub fn into_buf(self) -> Option<AlignedBuf> {
        match self {
            DiskOp::Write { buf, .. } | DiskOp::Read { buf, .. } => Some(buf),
            DiskOp::WriteShared { .. }
            | DiskOp::SpliceToPipe { .. }
            | DiskOp::Fdatasync { .. }
            | DiskOp::Truncate { .. } => None,
        }
    }
}

/// The outcome of one [`DiskOp`].
#[derive(Debug)]
pub struct DiskCompletion {
    /// The id given at submission.
    pub op_id: OpId,
    /// Bytes transferred (0 for fdatasync), or the error.
    pub result: Result<usize, DiskError>,
    /// The operation's buffer, given back (None for fdatasync and `WriteShared`).
    pub buf: Option<AlignedBuf>,
}

/// How long [`Disk::poll`] may wait for a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Reap only what has already completed.
    No,
    /// Block until at least one completion arrives or the timeout passes.
    AtLeastOne(Duration),
}

/// How a file is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    /// `Some(len)`: create (or truncate) the file with `len` bytes,
    /// preallocated and zero-filled, then fsync it and its directory, so that
    /// later writes never extend the file or convert extents. `None`: the file
    /// must exist.
    pub create_preallocated: Option<u64>,
    /// With `create_preallocated`: the length is only set (`ftruncate`, a
    /// hole), nothing allocated or zero-filled, so the file costs no space
    /// until written (IndexFile, as RocketMQ's sparse index files).
    pub sparse: bool,
    /// O_DIRECT: writes bypass the page cache and must be block-aligned
    /// (CommitLog). Without it the file is written through the page cache
    /// (ConsumeQueue and IndexFile, which are derived data).
    pub direct: bool,
    /// Open for writing as well as reading.
    pub writable: bool,
}

impl OpenOptions {
    /// A new CommitLog segment: preallocated, O_DIRECT, writable.
    pub fn create_direct(len: u64) -> Self {
        OpenOptions {
            create_preallocated: Some(len),
            sparse: false,
            direct: true,
            writable: true,
        }
    }

    /// An existing file, O_DIRECT, writable (CommitLog segments on restart).
    pub fn existing_direct() -> Self {
        OpenOptions {
            create_preallocated: None,
            sparse: false,
            direct: true,
            writable: true,
        }
    }

    /// A buffered (page-cache) file, created with `len` bytes if `Some`.
    pub fn buffered(create_len: Option<u64>) -> Self {
        OpenOptions {
            create_preallocated: create_len,
            sparse: false,
            direct: false,
            writable: true,
        }
    }

    /// A buffered file created with length `len` as a hole (see
    /// [`OpenOptions::sparse`]).
    pub fn buffered_sparse(len: u64) -> Self {
        OpenOptions {
            sparse: true,
            ..OpenOptions::buffered(Some(len))
        }
    }

    /// An existing file, read-only, buffered.
    pub fn read_only() -> Self {
        OpenOptions {
            create_preallocated: None,
            sparse: false,
            direct: false,
            writable: false,
        }
    }
}

/// Space on the file system holding a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpaceInfo {
    /// Total bytes.
    pub total_bytes: u64,
    /// Bytes available to this process (`f_bavail`).
    pub available_bytes: u64,
    /// Bytes not allocated, including those reserved for root (`f_bfree`).
    pub free_bytes: u64,
}

impl SpaceInfo {
    /// Used space as RocketMQ measures it (`UtilAll.
    /// getDiskPartitionSpaceUsedPercent`, as `df`): used over used plus
    /// available, where used is total minus free; 0.0 for an empty file
    /// system.
    pub fn used_ratio(&self) -> f64 {
        let used = self.total_bytes.saturating_sub(self.free_bytes);
        let entire = used + self.available_bytes;
        if entire == 0 {
            0.0
        } else {
            used as f64 / entire as f64
        }
    }
}

/// Errors of disk operations; each keeps the operation, the file and the
/// cause so the broker can answer and a person can debug.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// An errno from the kernel (or its simulation).
    #[error("{op} on {path}: {source}")]
    Io {
        /// What was attempted ("write", "fdatasync", "open", ...).
        op: &'static str,
        /// The file, as far as known.
        path: PathBuf,
        /// The errno, kept.
        #[source]
        source: io::Error,
    },
    /// The operation was linked to one that failed, and never ran.
    #[error("{op} canceled because the operation linked before it failed")]
    Canceled {
        /// What was canceled.
        op: &'static str,
    },
    /// The submission queue is full; the operation is given back unchanged.
    #[error("submission queue full ({capacity} entries)")]
    QueueFull {
        /// Queue capacity.
        capacity: usize,
    },
    /// The file id is not (or no longer) open.
    #[error("file {0:?} is not open")]
    NotOpen(FileId),
}

impl DiskError {
    /// The errno, when the error carries one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            DiskError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// Whether the error means the file system is full (ENOSPC or EDQUOT).
    pub fn is_no_space(&self) -> bool {
        matches!(self.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
    }
}

/// [`Disk::submit_rename`]'s contract: a renamed file is opened as it is,
/// never created or truncated.
pub(crate) fn assert_renamed_file_opens_as_it_is(open: Option<OpenOptions>) {
    assert!(
        open.is_none_or(|options| options.create_preallocated.is_none()),
        "submit_rename opens the renamed file as it is"
    );
}

/// The file id carried by a successful [`Disk::submit_create`] completion.
///
/// # Panics
/// If `result` cannot be a file id (the disk broke its contract).
pub fn created_file_id(result: usize) -> FileId {
    FileId(u32::try_from(result).expect("a created file's id fits u32"))
}

/// Removes the files `names` of `dir`, then makes the removals durable with
/// one fsync of `dir` (none when `names` is empty).
///
/// # Errors
/// The first error of unlink (the files after it are left) or of the fsync.
pub fn remove_files<D: Disk + ?Sized>(
    disk: &mut D,
    dir: &Path,
    names: &[String],
) -> Result<(), DiskError> {
    for name in names {
        disk.remove(&dir.join(name))?;
    }
    if !names.is_empty() {
        disk.sync_dir(dir)?;
    }
    Ok(())
}

/// The seam: everything the store needs from a disk.
pub trait Disk {
    /// Opens or creates a file (synchronous; not for the append path).
    ///
    /// # Errors
    /// The errno of open, fallocate or fsync.
    fn open(&mut self, path: &Path, options: OpenOptions) -> Result<FileId, DiskError>;

    /// A read-only view of the whole file at `path` as it is now (see
    /// [`FileView`]); synchronous, not for the append path.
    ///
    /// # Errors
    /// The errno of open, fstat or mmap.
    fn map_read_only(&mut self, path: &Path) -> Result<FileView, DiskError>;

    /// Closes a file. Operations still in flight on it complete first.
    ///
    /// # Errors
    /// [`DiskError::NotOpen`], or the errno of close.
    fn close(&mut self, file: FileId) -> Result<(), DiskError>;

    /// The file's current size in bytes.
    ///
    /// # Errors
    /// [`DiskError::NotOpen`], or the errno of fstat.
    fn file_size(&self, file: FileId) -> Result<u64, DiskError>;

    /// Removes a file by path (it must not be open).
    ///
    /// # Errors
    /// The errno of unlink.
    fn remove(&mut self, path: &Path) -> Result<(), DiskError>;

    /// Truncates or extends an open file to `len` bytes (synchronous; used by
    /// recovery and by the derived ConsumeQueue files).
    ///
    /// # Errors
    /// The errno of ftruncate.
    fn set_len(&mut self, file: FileId, len: u64) -> Result<(), DiskError>;

    /// Creates a directory and its parents.
    ///
    /// # Errors
    /// The errno of mkdir.
    fn create_dir_all(&mut self, dir: &Path) -> Result<(), DiskError>;

    /// Removes an empty directory (rmdir(2)); fsync its parent to make the
    /// removal durable.
    ///
    /// # Errors
    /// The errno of rmdir (ENOENT if it does not exist, ENOTEMPTY if it is
    /// not empty).
    fn remove_dir(&mut self, dir: &Path) -> Result<(), DiskError>;

    /// Names of the entries of a directory, sorted; empty if it does not exist.
    ///
    /// # Errors
    /// The errno of opendir/readdir, other than ENOENT.
    fn list_dir(&mut self, dir: &Path) -> Result<Vec<String>, DiskError>;

    /// fsyncs a directory, making creations, renames and removals in it durable.
    ///
    /// # Errors
    /// The errno of open or fsync.
    fn sync_dir(&mut self, dir: &Path) -> Result<(), DiskError>;

    /// Atomically replaces `to` with `from` (rename(2)).
    ///
    /// # Errors
    /// The errno of rename.
    fn rename(&mut self, from: &Path, to: &Path) -> Result<(), DiskError>;

    /// Space on the file system that holds `path`.
    ///
    /// # Errors
    /// The errno of statvfs.
    fn space(&self, path: &Path) -> Result<SpaceInfo, DiskError>;

    /// Queues an operation. It is submitted to the kernel by the next
    /// [`Disk::poll`]. With `link_next`, the next queued operation runs only
    /// after this one succeeds (io_uring `IOSQE_IO_LINK`).
    ///
    /// # Errors
    /// [`DiskError::QueueFull`] gives the operation back untouched.
    fn submit(
        &mut self,
        op_id: OpId,
        op: DiskOp,
        link_next: bool,
    ) -> Result<(), (DiskError, DiskOp)>;

    /// Submits everything queued (one system call) and appends finished
    /// operations to `out`, at most `max` of them, waiting as `wait` says.
    /// Returns how many were appended.
    ///
    /// # Errors
    /// A failure of the submission itself (not of an operation: those arrive
    /// as completions).
    fn poll(
        &mut self,
        out: &mut Vec<DiskCompletion>,
        max: usize,
        wait: Wait,
    ) -> Result<usize, DiskError>;

    /// Starts creating `path` in the background as [`Disk::open`] with
    /// `options` would (`options.create_preallocated` must be `Some`): open
    /// with `O_CREAT | O_TRUNC`, fallocate (sparse: `ftruncate`, done
    /// inline after the open: on a new empty file it only sets the inode's
    /// size), fsync the file, fsync its directory. Its completion (from `poll`, with `op_id`, no buffer)
    /// carries the new file's id as `Ok(id)`; read it with
    /// [`created_file_id`]. On error the file may exist, empty or partly
    /// allocated, and is not open.
    ///
    /// # Errors
    /// [`DiskError::QueueFull`]; a path the disk cannot name.
    fn submit_create(
        &mut self,
        op_id: OpId,
        path: &Path,
        options: OpenOptions,
    ) -> Result<(), DiskError>;

    /// Starts removing `path` (which must not be open) in the background:
    /// unlink, then fsync of its directory. Completes with `Ok(0)`.
    ///
    /// # Errors
    /// [`DiskError::QueueFull`]; a path the disk cannot name.
    fn submit_remove(&mut self, op_id: OpId, path: &Path) -> Result<(), DiskError>;

    /// Starts renaming `from` to `to` (same directory) in the background:
    /// renameat, then, with `open`, opening `to` as [`Disk::open`] with those
    /// options would (`open.create_preallocated` must be `None`: the file is
    /// reused as it is), then fsync of the directory. Completes with the
    /// opened file's id as `Ok(id)` ([`created_file_id`]) with `open`, else
    /// `Ok(0)`. A crash before the directory fsync may leave the file under
    /// either name. On error the file may be under either name and is not
    /// open.
    ///
    /// # Errors
    /// [`DiskError::QueueFull`]; a path the disk cannot name.
    fn submit_rename(
        &mut self,
        op_id: OpId,
        from: &Path,
        to: &Path,
        open: Option<OpenOptions>,
    ) -> Result<(), DiskError>;

    /// Operations submitted and not yet returned by `poll`.
    fn in_flight(&self) -> usize;

    /// A buffer of at least `capacity` bytes, from the disk's pool of
    /// registered buffers when one of that size is free (so writes from it use
    /// `WRITE_FIXED`), otherwise freshly allocated.
    fn buffer(&mut self, capacity: usize) -> AlignedBuf {
        AlignedBuf::new(capacity)
    }

    /// Gives a buffer back to the disk's pool (or frees it).
    fn recycle(&mut self, buf: AlignedBuf) {
        drop(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_ratio_counts_root_reserved_space_as_rocketmq_and_df_do() {
        let space = SpaceInfo {
            total_bytes: 264,
            available_bytes: 40,
            free_bytes: 209,
        };
        assert!((space.used_ratio() - 55.0 / 95.0).abs() < 1e-9);
        let empty = SpaceInfo {
            total_bytes: 0,
            available_bytes: 0,
            free_bytes: 0,
        };
        assert_eq!(empty.used_ratio(), 0.0);
    }

    #[test]
    fn remove_files_removes_the_named_files_and_syncs_only_when_it_removed() {
        use crate::disk::sim::{SimConfig, SimDisk};
        let mut disk = SimDisk::new(SimConfig::new(1));
        let dir = Path::new("/d");
        disk.create_dir_all(dir).unwrap();
        for name in ["a", "b", "c"] {
            let file = disk
                .open(&dir.join(name), OpenOptions::buffered(Some(4096)))
                .unwrap();
            disk.close(file).unwrap();
        }
        remove_files(&mut disk, dir, &["a".to_string(), "c".to_string()]).unwrap();
        assert_eq!(disk.list_dir(dir).unwrap(), ["b"]);
        // No names: not even the directory's fsync, which would fail here.
        remove_files(&mut disk, Path::new("/missing"), &[]).unwrap();
        let error = remove_files(&mut disk, dir, &["x".to_string(), "b".to_string()]);
        assert!(error.is_err(), "a missing file is an error");
        assert_eq!(
            disk.list_dir(dir).unwrap(),
            ["b"],
            "nothing after it is removed"
        );
    }

    #[test]
    fn op_id_keeps_tag_and_sequence_apart() {
        let id = OpId::new(OpTag::IndexFile, u64::MAX);
        assert_eq!(id.tag(), Some(OpTag::IndexFile));
        assert_eq!(id.seq(), (1 << 56) - 1);
        assert_eq!(OpId(0).tag(), None);
    }
}
mod group_sync;
pub mod sim;
pub mod uring;
mod view;

pub use view::FileView;
