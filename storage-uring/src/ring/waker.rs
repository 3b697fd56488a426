//! Waking a ring from another thread: an eventfd that the ring always keeps
//! a read in flight on. Writing to it completes that read, which ends the
//! ring's wait in `io_uring_enter`.
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

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// A handle other threads use to wake one ring. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Waker {
    eventfd: Arc<OwnedFd>,
}

impl Waker {
    pub(crate) fn new(eventfd: Arc<OwnedFd>) -> Self {
        Waker { eventfd }
    }

    /// Wakes the ring: its current or next wait returns promptly, and the
    /// turn reports `woken`. Wakes coalesce: several before the ring looks
    /// are seen as one.
    ///
    /// # Errors
    /// The errno of `write(2)` on the eventfd (not expected in practice).
    pub fn wake(&self) -> io::Result<()> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live local u64 to an fd we own.
        let written = unsafe {
            libc::write(
                self.eventfd.as_raw_fd(),
                (&raw const one).cast(),
                size_of::<u64>(),
            )
        };
        if written == size_of::<u64>() as isize {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// The eventfd itself, for [`Ring::notify_eventfd`](super::Ring::notify_eventfd)
    /// on another ring of the same thread: that ring's completions then wake
    /// this one.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.eventfd.as_fd()
    }
}

/// Creates the blocking, close-on-exec eventfd of a ring.
pub(crate) fn new_eventfd() -> io::Result<Arc<OwnedFd>> {
    // SAFETY: eventfd(2) takes no pointers; the result is checked below.
    let fd: RawFd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    Ok(Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_increments_the_eventfd_counter() {
        let eventfd = new_eventfd().unwrap();
        let waker = Waker::new(eventfd.clone());
        waker.wake().unwrap();
        waker.clone().wake().unwrap();
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live local u64.
        let read = unsafe {
            libc::read(
                eventfd.as_raw_fd(),
                (&raw mut count).cast(),
                size_of::<u64>(),
            )
        };
        assert_eq!(read, 8);
        assert_eq!(count, 2);
    }
}
