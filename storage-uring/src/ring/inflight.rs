//! The state of one caller operation in flight, and the two pure steps of
//! its life: building its SQE from what is left to do, and judging each CQE
//! (complete, continue, retry, park behind a continued link head, or report
//! one shot of a multishot op).
//!
//! # Invariants
//! - `progress` only grows, and never past the op's transfer length.
//! - A read's buffer length is set exactly once, when the read completes.
//! - A registered buffer is only submitted with a fixed opcode when it is
//!   exactly the registered memory of that index in this ring's table.

use std::io;
use std::ops::Range;
use std::os::fd::RawFd;

use io_uring::types::{Fd, Timespec};
use io_uring::{opcode, squeue};

use super::op::{Op, Token};
use super::{RESUBMIT_MAX, RingStats};
use crate::aligned::AlignedBuf;

/// A slab key with the sequence number of the entry it named, so a reused
/// key is not mistaken for the old entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SlotRef {
    pub(super) key: usize,
    pub(super) seq: u64,
}

/// A caller's operation in flight.
#[derive(Debug)]
pub(super) struct UserOp {
    pub(super) token: Token,
    pub(super) op: Op,
    /// Bytes already transferred (continued transfers).
    pub(super) progress: usize,
    pub(super) retries: u32,
    /// Submitted with `IOSQE_IO_LINK` to the next op.
    pub(super) link: bool,
    pub(super) prev: Option<SlotRef>,
    pub(super) next: Option<SlotRef>,
    /// Cancelled by the kernel because `prev` broke the link; waits for it.
    pub(super) parked: bool,
    /// The timespec of an `Op::Timeout`, at a stable address.
    pub(super) timespec: Option<Box<Timespec>>,
}

/// What to do with a user op after one of its CQEs.
pub(super) enum Verdict {
    Resubmit,
    Park,
    Shot(io::Result<usize>),
    Complete(io::Result<usize>),
}

/// The registered index of `buf` in `fixed`, if `buf` is exactly that
/// registered buffer (a buffer registered with another ring is not).
pub(super) fn registered_index(fixed: &[(usize, usize)], buf: &AlignedBuf) -> Option<u16> {
    let index = buf.fixed_index()?;
    let (addr, capacity) = *fixed.get(usize::from(index))?;
    (addr == buf.as_ptr() as usize && capacity == buf.capacity()).then_some(index)
}

/// Decides what a CQE means for a user op, updating its progress.
pub(super) fn judge(user: &mut UserOp, result: i32, more: bool, prev_live: bool) -> Verdict {
    let multishot = matches!(user.op, Op::AcceptMulti { .. });
    if result < 0 {
        let errno = -result;
        if matches!(user.op, Op::Timeout { .. }) && errno == libc::ETIME {
            return Verdict::Complete(Ok(0));
        }
        if errno == libc::ECANCELED && prev_live {
            return Verdict::Park;
        }
        if matches!(errno, libc::EINTR | libc::EAGAIN) && !multishot && user.retries < RESUBMIT_MAX
        {
            user.retries += 1;
            return Verdict::Resubmit;
        }
        let error = io::Error::from_raw_os_error(errno);
        if let Op::Read { buf, .. } = &mut user.op
            && user.progress > 0
        {
            // As read(2): an error after progress ends the read with what it got.
            buf.set_len(user.progress);
            return Verdict::Complete(Ok(user.progress));
        }
        return if multishot && more {
            Verdict::Shot(Err(error))
        } else {
            Verdict::Complete(Err(error))
        };
    }
    let count = result as usize;
    if multishot {
        return if more {
            Verdict::Shot(Ok(count))
        } else {
            Verdict::Complete(Ok(count))
        };
    }
    let total = user.op.transfer_len();
    match &mut user.op {
        Op::Read { buf, len, .. } => {
            user.progress += count;
            if count > 0 && user.progress < *len {
                return Verdict::Resubmit;
            }
            buf.set_len(user.progress);
            Verdict::Complete(Ok(user.progress))
        }
        Op::Write { .. } | Op::WriteShared { .. } | Op::Send { .. } => {
            let total = total.expect("writes and sends have a transfer length");
            user.progress += count;
            if user.progress >= total {
                return Verdict::Complete(Ok(total));
            }
            if count == 0 {
                return Verdict::Complete(Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!(
                        "{} made no progress at byte {} of {total}",
                        user.op.name(),
                        user.progress
                    ),
                )));
            }
            Verdict::Resubmit
        }
        Op::Recv { buf, .. } => {
            let len = buf.len() + count;
            assert!(
                len <= buf.capacity(),
                "recv of {count} past capacity {}",
                buf.capacity()
            );
            // SAFETY: the kernel initialised `count` bytes after the old
            // length, within the capacity (checked above).
            unsafe { buf.set_len(len) };
            Verdict::Complete(Ok(count))
        }
        _ => Verdict::Complete(Ok(count)),
    }
}

/// The SQE writing what is left of `buf[buf_range]` after `progress` bytes.
fn write_entry(
    fd: RawFd,
    file_offset: u64,
    buf: &AlignedBuf,
    buf_range: &Range<usize>,
    progress: usize,
    fixed: &[(usize, usize)],
    stats: &mut RingStats,
) -> squeue::Entry {
    let remaining = (buf_range.len() - progress) as u32;
    let offset = file_offset + progress as u64;
    let ptr = buf.as_ptr().wrapping_add(buf_range.start + progress);
    match registered_index(fixed, buf) {
        Some(index) => {
            stats.fixed_writes += 1;
            opcode::WriteFixed::new(Fd(fd), ptr, remaining, index)
                .offset(offset)
                .build()
        }
        None => opcode::Write::new(Fd(fd), ptr, remaining)
            .offset(offset)
            .build(),
    }
}

/// Builds the SQE for the remaining part of `user`'s op.
pub(super) fn build_entry(
    user: &mut UserOp,
    fixed: &[(usize, usize)],
    stats: &mut RingStats,
) -> squeue::Entry {
    let progress = user.progress;
    match &mut user.op {
        Op::Nop => opcode::Nop::new().build(),
        Op::Read {
            fd,
            file_offset,
            buf,
            len,
        } => {
            let remaining = (*len - progress) as u32;
            let offset = *file_offset + progress as u64;
            let index = registered_index(fixed, buf);
            let ptr = buf.as_mut_ptr().wrapping_add(progress);
            match index {
                Some(index) => {
                    stats.fixed_reads += 1;
                    opcode::ReadFixed::new(Fd(*fd), ptr, remaining, index)
                        .offset(offset)
                        .build()
                }
                None => opcode::Read::new(Fd(*fd), ptr, remaining)
                    .offset(offset)
                    .build(),
            }
        }
        Op::Write {
            fd,
            file_offset,
            buf,
            buf_range,
        } => write_entry(*fd, *file_offset, buf, buf_range, progress, fixed, stats),
        Op::WriteShared {
            fd,
            file_offset,
            buf,
            buf_range,
        } => write_entry(
            *fd,
            *file_offset,
            buf.buf(),
            buf_range,
            progress,
            fixed,
            stats,
        ),
        Op::Fsync { fd, datasync } => {
            let flags = if *datasync {
                io_uring::types::FsyncFlags::DATASYNC
            } else {
                io_uring::types::FsyncFlags::empty()
            };
            opcode::Fsync::new(Fd(*fd)).flags(flags).build()
        }
        Op::Fallocate {
            fd,
            file_offset,
            len,
            mode,
        } => opcode::Fallocate::new(Fd(*fd), *len)
            .offset(*file_offset)
            .mode(*mode)
            .build(),
        Op::OpenAt {
            dir_fd,
            path,
            flags,
            mode,
        } => opcode::OpenAt::new(Fd(*dir_fd), path.as_ptr())
            .flags(*flags | libc::O_CLOEXEC)
            .mode(*mode)
            .build(),
        Op::Ftruncate { fd, len } => opcode::Ftruncate::new(Fd(*fd), *len).build(),
        Op::Close { fd } => opcode::Close::new(Fd(*fd)).build(),
        Op::UnlinkAt {
            dir_fd,
            path,
            flags,
        } => opcode::UnlinkAt::new(Fd(*dir_fd), path.as_ptr())
            .flags(*flags)
            .build(),
        Op::RenameAt { from, to } => opcode::RenameAt::new(
            Fd(libc::AT_FDCWD),
            from.as_ptr(),
            Fd(libc::AT_FDCWD),
            to.as_ptr(),
        )
        .build(),
        Op::Splice {
            fd_in,
            off_in,
            fd_out,
            off_out,
            len,
            flags,
        } => {
            let off_in = off_in.map_or(-1, |offset| offset as i64);
            let off_out = off_out.map_or(-1, |offset| offset as i64);
            opcode::Splice::new(Fd(*fd_in), off_in, Fd(*fd_out), off_out, *len)
                .flags(*flags)
                .build()
        }
        Op::Timeout { .. } => {
            let timespec = user
                .timespec
                .as_deref()
                .expect("timeout ops carry a timespec");
            opcode::Timeout::new(timespec as *const Timespec).build()
        }
        Op::Accept { fd } => {
            opcode::Accept::new(Fd(*fd), std::ptr::null_mut(), std::ptr::null_mut())
                .flags(libc::SOCK_CLOEXEC)
                .build()
        }
        Op::AcceptMulti { fd } => opcode::AcceptMulti::new(Fd(*fd))
            .flags(libc::SOCK_CLOEXEC)
            .build(),
        Op::Recv { fd, buf } => {
            let spare = buf.capacity() - buf.len();
            let ptr = buf.as_mut_ptr().wrapping_add(buf.len());
            opcode::Recv::new(Fd(*fd), ptr, u32::try_from(spare).unwrap_or(u32::MAX)).build()
        }
        Op::Send { fd, data } => {
            let ptr = data.as_ptr().wrapping_add(progress);
            opcode::Send::new(Fd(*fd), ptr, (data.len() - progress) as u32)
                // MSG_WAITALL: the kernel retries a short send itself. Without
                // it a short send counts as success, so a linked follower
                // would run before the rest of the bytes went out.
                .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
                .build()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_index_rejects_a_buffer_with_a_foreign_index() {
        let mut buf = AlignedBuf::new(4096);
        let fixed = vec![(buf.as_ptr() as usize, buf.capacity())];
        assert_eq!(registered_index(&fixed, &buf), None, "unmarked buffer");
        buf.set_fixed_index(0);
        assert_eq!(registered_index(&fixed, &buf), Some(0));
        let mut other = AlignedBuf::new(4096);
        other.set_fixed_index(0);
        assert_eq!(
            registered_index(&fixed, &other),
            None,
            "same index, other memory"
        );
    }

    fn user(op: Op) -> UserOp {
        UserOp {
            token: 1,
            op,
            progress: 0,
            retries: 0,
            link: false,
            prev: None,
            next: None,
            parked: false,
            timespec: None,
        }
    }

    #[test]
    fn judge_continues_a_short_write_and_completes_with_the_total() {
        let mut op = user(Op::Write {
            fd: 0,
            file_offset: 0,
            buf: AlignedBuf::new(8192),
            buf_range: 0..8192,
        });
        assert!(matches!(
            judge(&mut op, 4096, false, false),
            Verdict::Resubmit
        ));
        assert_eq!(op.progress, 4096);
        assert!(matches!(
            judge(&mut op, 4096, false, false),
            Verdict::Complete(Ok(8192))
        ));
    }

    #[test]
    fn judge_ends_a_read_at_end_of_file_with_the_bytes_read() {
        let mut op = user(Op::Read {
            fd: 0,
            file_offset: 0,
            buf: AlignedBuf::new(8192),
            len: 8192,
        });
        assert!(matches!(
            judge(&mut op, 100, false, false),
            Verdict::Resubmit
        ));
        assert!(matches!(
            judge(&mut op, 0, false, false),
            Verdict::Complete(Ok(100))
        ));
        let Op::Read { buf, .. } = &op.op else {
            unreachable!()
        };
        assert_eq!(buf.len(), 100);
    }

    #[test]
    fn judge_retries_eintr_a_bounded_number_of_times_then_reports_it() {
        let mut op = user(Op::Fsync {
            fd: 0,
            datasync: true,
        });
        for _ in 0..RESUBMIT_MAX {
            assert!(matches!(
                judge(&mut op, -libc::EINTR, false, false),
                Verdict::Resubmit
            ));
        }
        match judge(&mut op, -libc::EINTR, false, false) {
            Verdict::Complete(Err(error)) => assert_eq!(error.raw_os_error(), Some(libc::EINTR)),
            _ => panic!("expected the EINTR to be reported after {RESUBMIT_MAX} retries"),
        }
    }

    #[test]
    fn judge_parks_a_cancelled_follower_only_while_its_leader_lives() {
        let mut op = user(Op::Fsync {
            fd: 0,
            datasync: true,
        });
        assert!(matches!(
            judge(&mut op, -libc::ECANCELED, false, true),
            Verdict::Park
        ));
        match judge(&mut op, -libc::ECANCELED, false, false) {
            Verdict::Complete(Err(error)) => {
                assert_eq!(error.raw_os_error(), Some(libc::ECANCELED))
            }
            _ => panic!("a follower of a finished leader must complete cancelled"),
        }
    }

    #[test]
    fn judge_keeps_the_errno_of_an_unexpected_error() {
        let mut op = user(Op::Write {
            fd: 0,
            file_offset: 0,
            buf: AlignedBuf::new(4096),
            buf_range: 0..4096,
        });
        match judge(&mut op, -libc::EIO, false, false) {
            Verdict::Complete(Err(error)) => assert_eq!(error.raw_os_error(), Some(libc::EIO)),
            _ => panic!("EIO must complete with the errno"),
        }
    }

    #[test]
    fn judge_reports_multishot_shots_until_the_kernel_ends_it() {
        let mut op = user(Op::AcceptMulti { fd: 3 });
        assert!(matches!(
            judge(&mut op, 7, true, false),
            Verdict::Shot(Ok(7))
        ));
        assert!(matches!(
            judge(&mut op, 8, false, false),
            Verdict::Complete(Ok(8))
        ));
    }
}
