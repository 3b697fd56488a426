//! Many fdatasyncs of buffered files as one `syncfs(2)`, on a helper thread.
//!
//! A shard with thousands of ConsumeQueues fdatasyncs every queue written
//! in a flush interval: 10,000 queues meant about 8,000 ring fsyncs a
//! second, each a device cache flush and a sleep and wake of an io-wq
//! worker, and the appending thread's CPU per MB four times one queue's.
//! `syncfs` makes every file of the file system durable (data and
//! metadata, one device flush), so it covers each of those fdatasyncs whose
//! file's writes completed before it started. The ring has no syncfs
//! operation, so it runs here, one call at a time; the disk wakes its ring
//! with the result (see `UringDisk`'s group sync).
//!
//! The cost moves to whatever else is dirty on the same file system, which
//! the call writes too: a store on a disk shared with a heavy writer waits
//! longer for its ConsumeQueues' durable point (never for appends, whose
//! O_DIRECT CommitLog fdatasyncs stay on the ring).
//!
//! # Invariants
//! - At most one syncfs runs per [`GroupSync`]; a result is sent for every
//!   request, in order, while the owner listens.
//! - The descriptor a request carries is the helper's own (a `dup`), so the
//!   disk may close its file while the call runs.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::ring::Waker;

/// Name of the helper thread.
pub const GROUP_SYNC_THREAD_NAME: &str = "ringmq-syncfs";

/// The helper thread and its two channels.
#[derive(Debug)]
pub(crate) struct GroupSync {
    requests: Option<mpsc::Sender<OwnedFd>>,
    results: mpsc::Receiver<io::Result<()>>,
    thread: Option<JoinHandle<()>>,
}

impl GroupSync {
    /// Starts the helper; it wakes `waker` after each call.
    ///
    /// # Errors
    /// The error spawning the thread.
    pub(crate) fn spawn(waker: Waker) -> io::Result<Self> {
        let (requests, jobs) = mpsc::channel::<OwnedFd>();
        let (done, results) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(GROUP_SYNC_THREAD_NAME.to_owned())
            .spawn(move || {
                while let Ok(fd) = jobs.recv() {
                    // SAFETY: syncfs(2) on a descriptor this thread owns.
                    let result = if unsafe { libc::syncfs(fd.as_raw_fd()) } == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::last_os_error())
                    };
                    drop(fd);
                    if done.send(result).is_err() {
                        return;
                    }
                    if let Err(error) = waker.wake() {
                        tracing::warn!(%error, "waking the ring after a syncfs failed");
                    }
                }
            })?;
        Ok(GroupSync {
            requests: Some(requests),
            results,
            thread: Some(thread),
        })
    }

    /// Starts a syncfs of the file system holding `fd` (a descriptor the
    /// helper closes when done).
    ///
    /// # Errors
    /// The helper is gone (it panicked); `fd` is dropped.
    pub(crate) fn start(&self, fd: OwnedFd) -> io::Result<()> {
        self.requests
            .as_ref()
            .and_then(|requests| requests.send(fd).ok())
            .ok_or_else(|| io::Error::other(format!("the {GROUP_SYNC_THREAD_NAME} thread is gone")))
    }

    /// The result of the running call, if it has finished (`Some(Err)` also
    /// when the helper died with the call running).
    pub(crate) fn try_result(&self) -> Option<io::Result<()>> {
        match self.results.try_recv() {
            Ok(result) => Some(result),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => Some(Err(io::Error::other(format!(
                "the {GROUP_SYNC_THREAD_NAME} thread is gone"
            )))),
        }
    }
}

impl Drop for GroupSync {
    fn drop(&mut self) {
        // Closing the request channel ends the helper after its running call.
        self.requests = None;
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the {GROUP_SYNC_THREAD_NAME} thread panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{Ring, RingConfig, TurnOutput};
    use std::time::{Duration, Instant};

    #[test]
    fn a_syncfs_reports_its_result_and_wakes_the_ring() {
        let mut ring = match Ring::new(RingConfig::default()) {
            Ok(ring) => ring,
            Err(error) => {
                eprintln!("skipped: {error}");
                return;
            }
        };
        let group = GroupSync::spawn(ring.waker()).unwrap();
        assert!(group.try_result().is_none(), "nothing ran yet");
        let dir = std::fs::File::open(std::env::temp_dir()).unwrap();
        group.start(OwnedFd::from(dir)).unwrap();
        // The ring's wait ends with the wake, long before its timeout.
        let started = Instant::now();
        let mut out = TurnOutput::new();
        while !out.woken {
            assert!(started.elapsed() < Duration::from_secs(60), "never woken");
            ring.turn(Some(Duration::from_secs(60)), 16, &mut out)
                .unwrap();
        }
        let result = group.try_result().expect("the result is there once woken");
        result.unwrap();
        assert!(group.try_result().is_none(), "one result per call");
    }
}
