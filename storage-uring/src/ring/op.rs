//! The operations a ring runs and the completions it gives back.
//!
//! An [`Op`] owns everything the kernel reads or writes while it is in
//! flight (buffers, the path of an `openat`, the byte string of a send):
//! the ring keeps the `Op` in its slab until the final completion, then
//! hands it back inside the [`Completion`]. That is how a buffer "belongs to
//! the operation until its completion arrives" without lifetimes or pins.
//!
//! Disk operations are implemented now; network operations (accept,
//! multishot accept, recv, send) are too, so the broker's shard loop can add
//! connections to the same ring. To add another (sendmsg, recv with provided
//! buffers, ...): a variant here holding what the kernel touches (boxed if
//! its address must be stable, like a `msghdr`), a branch in the ring's entry
//! builder, and — if it transfers bytes in parts — a continuation rule in the
//! ring's completion handler.
//!
//! # Invariants
//! - `Read`: `len <= buf.capacity()`; the completion sets `buf.len()` to the
//!   bytes read.
//! - `Write`: `buf_range.end <= buf.capacity()`; bytes come from the buffer's
//!   full capacity (`as_full_slice`), not from `len()`.
//! - Lengths given to the kernel fit in `u32` (asserted at submission).

use std::ffi::CString;
use std::io;
use std::ops::Range;
use std::os::fd::RawFd;
use std::time::Duration;

use bytes::Bytes;

use crate::aligned::{AlignedBuf, SharedBuf};

/// The caller's name for an operation, echoed in its completion. The ring
/// does not interpret it; a shard loop typically puts the owning component
/// in the top bits (see [`crate::disk::OpId`]).
pub type Token = u64;

/// One operation for the ring.
#[derive(Debug)]
pub enum Op {
    /// Does nothing; completes with 0 (tests, and a cheap way to get a turn).
    Nop,
    /// `pread` into `buf[..len]` at `file_offset`; `READ_FIXED` when `buf` is
    /// registered with this ring. Short reads are continued until `len` bytes
    /// or end of file.
    Read {
        /// File descriptor.
        fd: RawFd,
        /// Byte offset in the file.
        file_offset: u64,
        /// Destination; returned with `len()` = bytes read.
        buf: AlignedBuf,
        /// Bytes wanted.
        len: usize,
    },
    /// `pwrite` of `buf[buf_range]` at `file_offset`; `WRITE_FIXED` when `buf`
    /// is registered with this ring. Short writes are continued.
    Write {
        /// File descriptor.
        fd: RawFd,
        /// Byte offset in the file.
        file_offset: u64,
        /// Source; returned unchanged.
        buf: AlignedBuf,
        /// Part of the buffer (of its full capacity) to write.
        buf_range: Range<usize>,
    },
    /// As `Write`, from a buffer shared with its owner (the op keeps a clone
    /// alive until the completion; the owner leaves `buf_range` alone).
    WriteShared {
        /// File descriptor.
        fd: RawFd,
        /// Byte offset in the file.
        file_offset: u64,
        /// Source, shared.
        buf: SharedBuf,
        /// Part of the buffer (of its full capacity) to write.
        buf_range: Range<usize>,
    },
    /// `fsync`, or `fdatasync` when `datasync`.
    Fsync {
        /// File descriptor.
        fd: RawFd,
        /// Data-only sync (`IORING_FSYNC_DATASYNC`).
        datasync: bool,
    },
    /// `fallocate(fd, mode, file_offset, len)`.
    Fallocate {
        /// File descriptor.
        fd: RawFd,
        /// Start of the range.
        file_offset: u64,
        /// Length of the range.
        len: u64,
        /// `fallocate` mode bits (0 = allocate and extend).
        mode: i32,
    },
    /// `ftruncate(fd, len)` (IORING_OP_FTRUNCATE, Linux 6.9; older kernels
    /// complete it with EINVAL).
    Ftruncate {
        /// File descriptor.
        fd: RawFd,
        /// The new length.
        len: u64,
    },
    /// `openat(dir_fd, path, flags | O_CLOEXEC, mode)`; completes with the new
    /// descriptor.
    OpenAt {
        /// Directory descriptor (`libc::AT_FDCWD` for the working directory).
        dir_fd: RawFd,
        /// Path, kept alive by the op.
        path: CString,
        /// `open(2)` flags.
        flags: i32,
        /// Mode for created files.
        mode: u32,
    },
    /// `close(fd)`.
    Close {
        /// File descriptor.
        fd: RawFd,
    },
    /// `unlinkat(dir_fd, path, flags)`; completes with 0.
    UnlinkAt {
        /// Directory descriptor (`libc::AT_FDCWD` for the working directory).
        dir_fd: RawFd,
        /// Path, kept alive by the op.
        path: CString,
        /// `unlinkat(2)` flags (`libc::AT_REMOVEDIR` for a directory).
        flags: i32,
    },
    /// `renameat(AT_FDCWD, from, AT_FDCWD, to)`; completes with 0.
    RenameAt {
        /// Old path, kept alive by the op.
        from: CString,
        /// New path, kept alive by the op.
        to: CString,
    },
    /// `splice(fd_in, off_in, fd_out, off_out, len, flags)`; one side must be
    /// a pipe (its offset `None`). Completes with the bytes moved, which may
    /// be fewer than `len` (not continued: the caller drains the pipe).
    Splice {
        /// Source descriptor.
        fd_in: RawFd,
        /// Source offset, `None` for a pipe.
        off_in: Option<u64>,
        /// Destination descriptor.
        fd_out: RawFd,
        /// Destination offset, `None` for a pipe.
        off_out: Option<u64>,
        /// Most bytes to move.
        len: u32,
        /// `SPLICE_F_*` flags.
        flags: u32,
    },
    /// `IORING_OP_TIMEOUT`: completes with 0 after `duration`. (The ring's
    /// own timers do not use it; see `Ring::add_timer`.)
    Timeout {
        /// Relative expiry.
        duration: Duration,
    },
    /// `accept4(fd, NULL, NULL, SOCK_CLOEXEC)`; completes with the new socket.
    Accept {
        /// Listening socket.
        fd: RawFd,
    },
    /// Multishot accept: one completion per connection (with `more` set)
    /// until the kernel ends it; then the op is given back.
    AcceptMulti {
        /// Listening socket.
        fd: RawFd,
    },
    /// `recv` into the spare capacity of `buf` (`buf.len()..buf.capacity()`);
    /// the completion extends `buf.len()` by the bytes received (0 = peer
    /// closed). Not continued.
    Recv {
        /// Connected socket.
        fd: RawFd,
        /// Destination; must have spare capacity.
        buf: Vec<u8>,
    },
    /// `send(fd, data, MSG_NOSIGNAL | MSG_WAITALL)`: completes when all of
    /// `data` is sent (a short send after an error or signal is continued).
    Send {
        /// Connected socket.
        fd: RawFd,
        /// Bytes to send.
        data: Bytes,
    },
}

impl Op {
    /// A short name for logs and errors ("write", "fdatasync", ...).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Nop => "nop",
            Op::Read { .. } => "read",
            Op::Write { .. } | Op::WriteShared { .. } => "write",
            Op::Fsync { datasync: true, .. } => "fdatasync",
            Op::Fsync {
                datasync: false, ..
            } => "fsync",
            Op::Fallocate { .. } => "fallocate",
            Op::Ftruncate { .. } => "ftruncate",
            Op::OpenAt { .. } => "openat",
            Op::Close { .. } => "close",
            Op::UnlinkAt { .. } => "unlinkat",
            Op::RenameAt { .. } => "renameat",
            Op::Splice { .. } => "splice",
            Op::Timeout { .. } => "timeout",
            Op::Accept { .. } => "accept",
            Op::AcceptMulti { .. } => "accept (multishot)",
            Op::Recv { .. } => "recv",
            Op::Send { .. } => "send",
        }
    }

    /// Total bytes a transfer op moves when complete (continuation target).
    pub(crate) fn transfer_len(&self) -> Option<usize> {
        match self {
            Op::Read { len, .. } => Some(*len),
            Op::Write { buf_range, .. } | Op::WriteShared { buf_range, .. } => {
                Some(buf_range.len())
            }
            Op::Send { data, .. } => Some(data.len()),
            _ => None,
        }
    }

    /// Checks the op's own invariants before it is handed to the kernel.
    ///
    /// # Panics
    /// If a length or range is out of bounds: that is a bug of the caller,
    /// and submitting it would let the kernel touch memory past the buffer.
    pub(crate) fn assert_valid(&self) {
        match self {
            Op::Read { buf, len, .. } => {
                assert!(
                    *len <= buf.capacity(),
                    "read of {len} into {} bytes",
                    buf.capacity()
                );
                assert!(
                    u32::try_from(*len).is_ok(),
                    "read of {len} bytes exceeds u32"
                );
            }
            Op::Write { buf, buf_range, .. } => assert_write_range(buf, buf_range),
            Op::WriteShared { buf, buf_range, .. } => assert_write_range(buf.buf(), buf_range),
            Op::Recv { buf, .. } => {
                assert!(buf.len() < buf.capacity(), "recv into a full buffer");
            }
            Op::Send { data, .. } => {
                assert!(u32::try_from(data.len()).is_ok(), "send exceeds u32");
            }
            _ => {}
        }
    }
}

fn assert_write_range(buf: &AlignedBuf, buf_range: &Range<usize>) {
    assert!(
        buf_range.start <= buf_range.end,
        "write range {buf_range:?} reversed"
    );
    assert!(
        buf_range.end <= buf.capacity(),
        "write range {buf_range:?} past {} bytes",
        buf.capacity()
    );
    assert!(u32::try_from(buf_range.len()).is_ok(), "write exceeds u32");
}

/// The outcome of an operation (or one shot of a multishot operation).
#[derive(Debug)]
pub struct Completion {
    /// The token given at submission.
    pub token: Token,
    /// Bytes transferred (the whole transfer, for continued reads, writes and
    /// sends), the new descriptor (openat, accept), or 0; or the errno. An
    /// operation cancelled because the one linked before it failed completes
    /// with `ECANCELED`.
    pub result: io::Result<usize>,
    /// The operation with its resources, given back; `None` while a
    /// multishot operation stays armed (`more`).
    pub op: Option<Op>,
    /// A multishot operation that stays armed: more completions will follow.
    pub more: bool,
}
