//! Waking a ring from another thread: an eventfd that the ring always keeps
//! a read in flight on. Writing to it completes that read, which ends the
//! ring's wait in `io_uring_enter`.
//!
//! Wakes coalesce before the system call: a waker writes the eventfd only
//! when it turns the shared `pending` flag from false to true, and the ring
//! clears the flag when it reaps the eventfd read, before its caller looks
//! at what the wakers left for it. Under load a ring is woken by many
//! messages per turn (one shard forwards to another, the persister answers)
//! and all but the first cost an atomic swap instead of a `write(2)`.
//!
//! The eventfd is blocking on purpose: io_uring returns `EAGAIN` for reads
//! of an `O_NONBLOCK` file instead of arming its internal poll, so a
//! non-blocking eventfd would spin. A write to an eventfd blocks only when
//! the counter would reach `u64::MAX - 1`, which needs ~2^64 wakes between
//! two reads.
//!
//! # Invariants
//! - The eventfd lives as long as the ring or any [`Waker`] (shared
//!   ownership through `Arc`: this is the edge between threads, not the data
//!   path).
//! - No wake is lost: a waker that finds `pending` set saw a write not yet
//!   consumed, and the ring's clearing swap (AcqRel) comes after it in the
//!   flag's order, so it synchronizes with the waker's swap and whatever the
//!   waker published before waking is visible once the ring's turn returns;
//!   a waker whose swap comes after the clearing finds it false and writes.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The eventfd of a ring and its "a write is outstanding" flag.
#[derive(Debug)]
pub(crate) struct WakeFd {
    fd: OwnedFd,
    pending: AtomicBool,
}

impl WakeFd {
    /// The eventfd.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Called by the ring when it reaps the eventfd read, before its caller
    /// looks for work: the next wake writes again.
    pub(crate) fn consume(&self) {
        self.pending.swap(false, Ordering::AcqRel);
    }
}

/// A handle other threads use to wake one ring. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Waker {
    shared: Arc<WakeFd>,
}

impl Waker {
    pub(crate) fn new(shared: Arc<WakeFd>) -> Self {
        Waker { shared }
    }

    /// Wakes the ring: its current or next wait returns promptly, and the
    /// turn reports `woken`. Wakes coalesce: several before the ring looks
    /// are seen as one, and only the first makes a system call.
    ///
    /// # Errors
    /// The errno of `write(2)` on the eventfd (not expected in practice).
    pub fn wake(&self) -> io::Result<()> {
        if self.shared.pending.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live local u64 to an fd we own.
        let written = unsafe {
            libc::write(
                self.shared.raw_fd(),
                (&raw const one).cast(),
                size_of::<u64>(),
            )
        };
        if written == size_of::<u64>() as isize {
            Ok(())
        } else {
            let error = io::Error::last_os_error();
            // Nothing was written: the next wake must try again.
            self.shared.pending.store(false, Ordering::Release);
            Err(error)
        }
    }

    /// The eventfd itself, for [`Ring::notify_eventfd`](super::Ring::notify_eventfd)
    /// on another ring of the same thread: that ring's completions then wake
    /// this one.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.shared.fd.as_fd()
    }
}

/// Creates the blocking, close-on-exec eventfd of a ring.
pub(crate) fn new_eventfd() -> io::Result<Arc<WakeFd>> {
    // SAFETY: eventfd(2) takes no pointers; the result is checked below.
    let fd: RawFd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Arc::new(WakeFd {
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        fd: unsafe { OwnedFd::from_raw_fd(fd) },
        pending: AtomicBool::new(false),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_counter(shared: &WakeFd) -> u64 {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live local u64.
        let read =
            unsafe { libc::read(shared.raw_fd(), (&raw mut count).cast(), size_of::<u64>()) };
        assert_eq!(read, 8);
        count
    }

    #[test]
    fn wakes_before_the_ring_looks_write_the_eventfd_once() {
        let shared = new_eventfd().unwrap();
        let waker = Waker::new(shared.clone());
        waker.wake().unwrap();
        waker.clone().wake().unwrap();
        assert_eq!(read_counter(&shared), 1, "the second wake made no write");
        // The ring reaped the read: the next wake writes again.
        shared.consume();
        waker.wake().unwrap();
        assert_eq!(read_counter(&shared), 1);
    }
}
