//! How long the ring's thread waited for a CPU: the run-queue wait of
//! `/proc/thread-self/schedstat`, so a stall warning can tell a turn that
//! worked for 20 ms from one whose thread was preempted.
//!
//! A turn's busy time is wall time. A shard thread is pinned to one core, so
//! when another process (a load generator on the same machine, say) holds
//! that core, the shard waits in the run queue and its turn looks busy. The
//! kernel counts that wait per thread (the second field of
//! `/proc/<pid>/task/<tid>/schedstat`, nanoseconds runnable but not
//! running). Reading it costs a syscall, too much for every turn, so the
//! ring samples it at most every [`SAMPLE_INTERVAL`] and, when a turn
//! stalls, reports the wait since the last sample.
//!
//! # Invariants
//! - The file is opened by, and only read from, the thread that created the
//!   clock (`thread-self`); the ring is used from one thread only.
//! - When the kernel has no schedstat (CONFIG_SCHED_INFO off) the clock is
//!   empty and reports nothing; it never fails the ring.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// Shortest time between two reads of the wait counter outside a stall.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Bytes read from the schedstat file: three decimal u64s and separators.
const SCHEDSTAT_BYTES_MAX: usize = 96;

/// The run-queue wait of one thread, sampled.
#[derive(Debug)]
pub struct RunQueueClock {
    file: Option<File>,
    sampled_at: Instant,
    wait_ns: u64,
}

/// The run-queue wait over a window ending now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunQueueWait {
    /// Time the thread was runnable but not running.
    pub waited: Duration,
    /// The window: since the last sample.
    pub window: Duration,
}

impl RunQueueClock {
    /// Opens the calling thread's counter; empty when the kernel has none.
    pub fn for_this_thread(now: Instant) -> Self {
        let file = File::open("/proc/thread-self/schedstat").ok();
        let mut clock = RunQueueClock {
            file,
            sampled_at: now,
            wait_ns: 0,
        };
        match clock.read() {
            Some(wait_ns) => clock.wait_ns = wait_ns,
            None => clock.file = None,
        }
        clock
    }

    /// Whether the kernel gives the counter.
    #[cfg(test)]
    pub fn is_available(&self) -> bool {
        self.file.is_some()
    }

    /// Samples the counter if [`SAMPLE_INTERVAL`] has passed since the last
    /// sample.
    pub fn tick(&mut self, now: Instant) {
        if now.duration_since(self.sampled_at) >= SAMPLE_INTERVAL {
            self.since_last_sample(now);
        }
    }

    /// The wait since the last sample, which this call becomes; None when
    /// the counter is not available.
    pub fn since_last_sample(&mut self, now: Instant) -> Option<RunQueueWait> {
        let wait_ns = self.read()?;
        let wait = RunQueueWait {
            waited: Duration::from_nanos(wait_ns.saturating_sub(self.wait_ns)),
            window: now.duration_since(self.sampled_at),
        };
        self.sampled_at = now;
        self.wait_ns = wait_ns;
        Some(wait)
    }

    fn read(&self) -> Option<u64> {
        let file = self.file.as_ref()?;
        let mut buf = [0u8; SCHEDSTAT_BYTES_MAX];
        let len = file.read_at(&mut buf, 0).ok()?;
        parse_wait_ns(&buf[..len])
    }
}

/// The run-queue wait (second field) of a schedstat line
/// `"<on cpu ns> <waiting ns> <timeslices>\n"`.
fn parse_wait_ns(line: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(line).ok()?;
    let mut fields = text.split_ascii_whitespace();
    fields.next()?.parse::<u64>().ok()?;
    let wait = fields.next()?.parse().ok()?;
    fields.next()?.parse::<u64>().ok()?;
    Some(wait)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::affinity::pin_to_cpu;

    #[test]
    fn the_wait_is_the_second_of_three_numbers() {
        assert_eq!(
            parse_wait_ns(b"18207538166 6760408581 104312\n"),
            Some(6_760_408_581)
        );
        assert_eq!(parse_wait_ns(b"1 2 3"), Some(2));
        assert_eq!(parse_wait_ns(b""), None);
        assert_eq!(parse_wait_ns(b"1 2\n"), None);
        assert_eq!(parse_wait_ns(b"1 x 3\n"), None);
        assert_eq!(parse_wait_ns(b"-1 2 3\n"), None);
    }

    /// Spins on the calling thread for `length` of wall time.
    fn spin(length: Duration) {
        let until = Instant::now() + length;
        let mut n = 0u64;
        while Instant::now() < until {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }

    #[test]
    fn a_thread_sharing_its_cpu_with_a_spinner_shows_run_queue_wait() {
        let available = std::thread::spawn(|| {
            pin_to_cpu(0).expect("pinning");
            let mut clock = RunQueueClock::for_this_thread(Instant::now());
            if !clock.is_available() {
                return None;
            }
            let alone = {
                spin(Duration::from_millis(50));
                clock.since_last_sample(Instant::now())
            };
            // Two more threads spin on the same CPU: the scheduler shares
            // it three ways, so this thread runs about a third of the time
            // and waits about two thirds (the time on CPU, the first field,
            // would be about a third).
            let rivals: Vec<_> = (0..2)
                .map(|_| {
                    std::thread::spawn(|| {
                        pin_to_cpu(0).expect("pinning a rival");
                        spin(Duration::from_millis(450));
                    })
                })
                .collect();
            spin(Duration::from_millis(300));
            let shared = clock.since_last_sample(Instant::now());
            for rival in rivals {
                rival.join().expect("a rival");
            }
            Some((alone, shared))
        })
        .join()
        .expect("the measuring thread");
        // The kernels this project runs on have schedstat
        // (CONFIG_SCHED_INFO); without it the clock must say so and give
        // nothing, which the ring then leaves out of its warning.
        let Some((alone, shared)) = available else {
            assert!(!std::path::Path::new("/proc/thread-self/schedstat").exists());
            return;
        };
        let shared = shared.expect("a sample while sharing");
        assert!(alone.is_some());
        assert!(
            shared.waited * 10 >= shared.window * 4,
            "waited {:?} of {:?} beside two spinners on the same CPU",
            shared.waited,
            shared.window
        );
        assert!(shared.waited <= shared.window);
    }
}
