//! Open-loop pacing (`--rate`): intended send times at fixed intervals, and
//! latency measured from them, so a stalled broker cannot hide its stall by
//! slowing the load down (no coordinated omission).
//!
//! With a total rate `R` shared by `N` senders, message `k` of the whole run
//! is intended at `start + k / R`; sender `s` owns messages `k = s, s + N,
//! s + 2N, ...`. Times are computed from the index each time (integer
//! nanoseconds, 128-bit product), so they never drift.
//!
//! ```text
//! rate 4/s, 2 senders:  k=0    k=1    k=2    k=3    k=4
//!                       s0     s1     s0     s1     s0
//! intended (ms):        0      250    500    750    1000
//! ```
//!
//! A sender that falls behind sends the overdue messages at once, and each
//! one's latency still counts from its own intended time.
//!
//! # Invariants
//!
//! - Intended times of one sender strictly increase.
//! - Latency is never measured from a time later than the intended one.

use std::time::{Duration, Instant};

const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// A source of monotonic time in nanoseconds since some origin, and a way to
/// wait for it. Tests use a fake one.
pub trait Clock {
    /// Nanoseconds since the clock's origin.
    fn now_ns(&self) -> u64;
    /// Returns once `now_ns() >= deadline_ns`.
    fn sleep_until_ns(&self, deadline_ns: u64);
}

/// The system's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose origin is `origin`.
    pub fn new(origin: Instant) -> Self {
        Self { origin }
    }
}

/// Below this, waiting yields in a loop instead of sleeping: a sleep
/// overshoots by the timer slack (50 µs by default, see
/// [`set_fine_timer_slack`]). Yielding, not spinning, so a sender never
/// starves the reader threads that share its core (their delays would show
/// up as broker latency).
const YIELD_BELOW_NS: u64 = 100_000;
/// A sleep is cut short by this much and the rest is yielded away.
const SLEEP_MARGIN_NS: u64 = 60_000;
const _: () = assert!(SLEEP_MARGIN_NS < YIELD_BELOW_NS);

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn sleep_until_ns(&self, deadline_ns: u64) {
        loop {
            let now = self.now_ns();
            if now >= deadline_ns {
                return;
            }
            let left = deadline_ns - now;
            if left > YIELD_BELOW_NS {
                std::thread::sleep(Duration::from_nanos(left - SLEEP_MARGIN_NS));
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Sets the calling thread's timer slack to 1 µs (prctl(2),
/// `PR_SET_TIMERSLACK`), so its sleeps end close to their deadline; open-loop
/// senders call it. Failure leaves the default slack, which only makes
/// sleeps less precise.
pub fn set_fine_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no
    // memory of ours.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000_u64, 0_u64, 0_u64, 0_u64) };
}

/// One sender's share of an open-loop schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    start_ns: u64,
    rate_per_s: u64,
    stride: u64,
    next_global_index: u64,
}

impl Schedule {
    /// The schedule of sender `sender_index` of `sender_count`, sharing
    /// `rate_per_s` messages per second from `start_ns`.
    ///
    /// # Panics
    ///
    /// If `rate_per_s` or `sender_count` is zero, or `sender_index >=
    /// sender_count`.
    pub fn new(start_ns: u64, rate_per_s: u64, sender_count: u64, sender_index: u64) -> Self {
        assert!(rate_per_s > 0, "rate must be positive");
        assert!(sender_count > 0, "sender count must be positive");
        assert!(
            sender_index < sender_count,
            "sender {sender_index} of {sender_count}"
        );
        Self {
            start_ns,
            rate_per_s,
            stride: sender_count,
            next_global_index: sender_index,
        }
    }

    /// The intended time of the run's message `global_index`.
    pub fn intended_ns(&self, global_index: u64) -> u64 {
        let offset = u128::from(global_index) * NANOS_PER_SECOND / u128::from(self.rate_per_s);
        let offset = u64::try_from(offset).unwrap_or(u64::MAX);
        self.start_ns.saturating_add(offset)
    }

    /// The intended time of this sender's next message.
    pub fn peek_ns(&self) -> u64 {
        self.intended_ns(self.next_global_index)
    }

    /// Takes the next message's intended time, advancing the schedule.
    pub fn take(&mut self) -> u64 {
        let intended = self.peek_ns();
        self.next_global_index += self.stride;
        intended
    }

    /// Waits on `clock` until the next message is due and takes its intended
    /// time (at once if it is overdue).
    pub fn wait_next(&mut self, clock: &impl Clock) -> u64 {
        let intended = self.peek_ns();
        if clock.now_ns() < intended {
            clock.sleep_until_ns(intended);
        }
        self.take()
    }
}

/// Latency in microseconds from `from_ns` (intended or actual send time) to
/// `completed_ns`, rounded up so a sub-microsecond answer is 1 µs, not 0.
pub fn latency_us(from_ns: u64, completed_ns: u64) -> u64 {
    completed_ns.saturating_sub(from_ns).div_ceil(1000)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A clock that only moves when told to, or when slept on.
    struct FakeClock {
        now: Cell<u64>,
        sleeps: Cell<u32>,
    }

    impl FakeClock {
        fn at(now: u64) -> Self {
            Self {
                now: Cell::new(now),
                sleeps: Cell::new(0),
            }
        }

        fn advance(&self, by_ns: u64) {
            self.now.set(self.now.get() + by_ns);
        }
    }

    impl Clock for FakeClock {
        fn now_ns(&self) -> u64 {
            self.now.get()
        }

        fn sleep_until_ns(&self, deadline_ns: u64) {
            self.sleeps.set(self.sleeps.get() + 1);
            self.now.set(self.now.get().max(deadline_ns));
        }
    }

    #[test]
    fn senders_interleave_at_the_total_rate() {
        let first = Schedule::new(0, 4, 2, 0);
        let second = Schedule::new(0, 4, 2, 1);
        let mut a = first.clone();
        let mut b = second.clone();
        assert_eq!(
            [a.take(), a.take(), a.take()],
            [0, 500_000_000, 1_000_000_000]
        );
        assert_eq!([b.take(), b.take()], [250_000_000, 750_000_000]);
    }

    #[test]
    fn intended_times_do_not_drift_at_rates_that_do_not_divide_a_second() {
        let schedule = Schedule::new(7, 3, 1, 0);
        assert_eq!(schedule.intended_ns(1), 7 + 333_333_333);
        assert_eq!(
            schedule.intended_ns(3_000_000),
            7 + 1_000_000 * 1_000_000_000
        );
    }

    #[test]
    fn wait_next_sleeps_until_the_intended_time() {
        let clock = FakeClock::at(0);
        let mut schedule = Schedule::new(1_000, 1_000, 1, 0);
        assert_eq!(schedule.wait_next(&clock), 1_000);
        assert_eq!(clock.now_ns(), 1_000);
        assert_eq!(schedule.wait_next(&clock), 1_001_000);
        assert_eq!(clock.now_ns(), 1_001_000);
        assert_eq!(clock.sleeps.get(), 2);
    }

    #[test]
    fn a_stall_is_measured_from_the_intended_times_not_hidden() {
        // 1,000 msgs/s: one every millisecond. The broker stalls 10 ms on the
        // first message; the next ten are overdue and go out at once, and
        // their latencies count the time they waited to be sent.
        let clock = FakeClock::at(0);
        let mut schedule = Schedule::new(0, 1_000, 1, 0);
        let first = schedule.wait_next(&clock);
        clock.advance(10_000_000);
        let mut latencies = vec![latency_us(first, clock.now_ns())];
        let sleeps_before = clock.sleeps.get();
        for _ in 0..10 {
            let intended = schedule.wait_next(&clock);
            clock.advance(100_000);
            latencies.push(latency_us(intended, clock.now_ns()));
        }
        assert_eq!(
            clock.sleeps.get(),
            sleeps_before,
            "overdue messages must not wait"
        );
        assert_eq!(latencies[0], 10_000);
        assert_eq!(latencies[1], 10_000 - 1_000 + 100);
        assert_eq!(latencies[10], 10_000 + 1_000 - 10_000);
        assert!(latencies.windows(2).all(|w| w[0] >= w[1]));
    }

    #[test]
    fn latency_rounds_up_and_never_goes_negative() {
        assert_eq!(latency_us(0, 1), 1);
        assert_eq!(latency_us(0, 1_000), 1);
        assert_eq!(latency_us(0, 1_001), 2);
        assert_eq!(latency_us(5, 3), 0);
    }

    #[test]
    #[should_panic(expected = "sender 2 of 2")]
    fn schedule_rejects_a_sender_index_out_of_range() {
        let _ = Schedule::new(0, 1, 2, 2);
    }

    #[test]
    fn monotonic_clock_sleeps_at_least_until_the_deadline() {
        let clock = MonotonicClock::new(Instant::now());
        let deadline = clock.now_ns() + 300_000;
        clock.sleep_until_ns(deadline);
        assert!(clock.now_ns() >= deadline);
    }
}
