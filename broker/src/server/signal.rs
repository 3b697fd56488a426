//! SIGTERM and SIGINT, turned into a shutdown request for the ring thread.
//!
//! The choice: both signals are blocked in every thread (the mask is set in
//! `main` before any thread exists, and threads inherit it), and one small
//! thread waits for them with `sigwait(2)`. On the first it sets the shared
//! flag of a [`ShutdownHandle`] and wakes the ring through its eventfd
//! [`Waker`]; the ring thread sees the flag after its wait returns. On the
//! second it exits the process at once (status 130), for an operator whose
//! graceful stop hangs.
//!
//! Why not a signalfd read through the ring: a signalfd dequeues signals
//! for the task that reads it, and io_uring may complete a read from one of
//! its worker threads, a corner whose behaviour has varied between kernels.
//! A thread in `sigwait` has no such corner and costs one sleeping thread.
//!
//! # Invariants
//! - [`block_termination_signals`] runs before any other thread starts, so
//!   no thread can take SIGTERM/SIGINT with the default (killing) action.
//! - The flag is set before the wake, so a ring woken by it always sees it.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use ringmq_storage::ring::Waker;

/// Exit status after a second termination signal (128 + SIGINT, as shells do).
pub const FORCED_EXIT_STATUS: i32 = 130;

/// A request to stop a server, usable from any thread. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ShutdownHandle {
    requested: Arc<AtomicBool>,
    waker: Waker,
}

impl ShutdownHandle {
    /// A handle that wakes the ring of `waker`.
    pub fn new(waker: Waker) -> Self {
        ShutdownHandle {
            requested: Arc::new(AtomicBool::new(false)),
            waker,
        }
    }

    /// Asks the server to stop: it stops accepting, flushes pending
    /// responses and returns from `run`.
    pub fn request(&self) {
        self.requested.store(true, Ordering::Release);
        if let Err(error) = self.waker.wake() {
            tracing::error!(%error, "waking the ring for shutdown failed");
        }
    }

    /// Whether a stop was requested.
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }
}

fn termination_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set fully; sigaddset with valid
    // signal numbers cannot fail.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// Blocks SIGTERM and SIGINT in the calling thread (and every thread it
/// starts afterwards). Call first thing in `main`.
///
/// # Errors
/// The errno of `pthread_sigmask`.
pub fn block_termination_signals() -> io::Result<()> {
    let set = termination_set();
    // SAFETY: `set` is an initialised sigset; the old mask is not wanted.
    let result = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(result))
    }
}

/// Starts the thread that turns the first SIGTERM/SIGINT into
/// `handle.request()` and the second into an immediate exit.
///
/// # Errors
/// The thread could not be spawned.
pub fn spawn_signal_thread(handle: ShutdownHandle) -> io::Result<JoinHandle<()>> {
    spawn_signal_thread_with(move || handle.request())
}

/// Starts the thread that runs `on_first` at the first SIGTERM/SIGINT (a
/// process with several servers stops them all) and exits at the second.
///
/// # Errors
/// The thread could not be spawned.
pub fn spawn_signal_thread_with(
    on_first: impl FnOnce() + Send + 'static,
) -> io::Result<JoinHandle<()>> {
    let mut on_first = Some(on_first);
    std::thread::Builder::new()
        .name("ringmq-signals".into())
        .spawn(move || {
            let set = termination_set();
            let mut seen = 0u32;
            loop {
                let mut signal: i32 = 0;
                // SAFETY: `set` and `signal` are live locals.
                let result = unsafe { libc::sigwait(&set, &mut signal) };
                if result != 0 {
                    tracing::error!(
                        errno = result,
                        "sigwait failed; signals are no longer handled"
                    );
                    return;
                }
                seen += 1;
                if seen == 1 {
                    tracing::info!(signal, "termination signal: stopping gracefully");
                    if let Some(on_first) = on_first.take() {
                        on_first();
                    }
                } else {
                    tracing::warn!(signal, "second termination signal: exiting now");
                    std::process::exit(FORCED_EXIT_STATUS);
                }
            }
        })
}
