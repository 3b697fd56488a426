//! Latency recording: HdrHistograms in microseconds, per-interval statistics
//! shared between worker threads and the reporter, and warm-up exclusion.
//!
//! Each worker thread owns a [`StatsHandle`] and records every response into
//! it: the latency of the request, the latency of each message it carried (the
//! same value in closed loop; measured from each message's intended send time
//! in open loop), the message and byte counts, and errors by response code.
//! Once per interval the reporter ([`StatsCollector`]) swaps every worker's
//! [`IntervalStats`] for an empty one and merges them, so a sample belongs to
//! the interval in which its response arrived, and a worker blocked on a slow
//! response delays nothing.
//!
//! Warm-up is excluded by whole intervals: intervals that start before the
//! warm-up ends are shown live but never reach the totals or the files.
//!
//! # Invariants
//!
//! - Every histogram here has the same bounds ([`LATENCY_US_MIN`],
//!   [`LATENCY_US_MAX`], [`SIGNIFICANT_DIGITS`]), so adding one to another
//!   cannot fail.
//! - A latency above [`LATENCY_US_MAX`] is clamped to it and counted in
//!   [`IntervalStats::clamped_count`]; nothing is silently dropped.
//! - `StatsCollector::total` is the sum of the measured (post-warm-up)
//!   intervals it returned, and of nothing else.

use std::collections::BTreeMap;
use std::mem;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hdrhistogram::Histogram;

/// The smallest latency recorded, in microseconds (a histogram's lowest
/// discernible value; smaller values land in the first bucket).
pub const LATENCY_US_MIN: u64 = 1;
/// The largest latency recorded, in microseconds: one hour. Larger values are
/// clamped to it.
pub const LATENCY_US_MAX: u64 = 3_600_000_000;
/// HdrHistogram precision: 3 significant digits, so values are exact to 0.1 %.
pub const SIGNIFICANT_DIGITS: u8 = 3;
/// The most distinct response codes counted separately per interval; more are
/// folded into [`ERROR_CODE_OTHER`].
pub const ERROR_CODE_COUNT_MAX: usize = 64;
/// The code under which errors beyond [`ERROR_CODE_COUNT_MAX`] distinct codes
/// are counted.
pub const ERROR_CODE_OTHER: i32 = i32::MIN;
/// The code under which a request that never got a response (timeout, broken
/// connection) is counted.
pub const ERROR_CODE_NO_RESPONSE: i32 = -1;
/// Pseudo response code of a delayed message that arrived before its due
/// time (the `delay` workload).
pub const ERROR_CODE_EARLY: i32 = -2;

const _: () = assert!(LATENCY_US_MIN < LATENCY_US_MAX);

/// Creates an empty latency histogram with the crate-wide bounds.
pub fn new_latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(LATENCY_US_MIN, LATENCY_US_MAX, SIGNIFICANT_DIGITS)
        .expect("invariant: the latency bounds are valid constants")
}

/// What one or more workers recorded during one interval.
#[derive(Debug, Clone)]
pub struct IntervalStats {
    /// Latency of each message in microseconds.
    pub message_latency: Histogram<u64>,
    /// Latency of each request (a batch counts once) in microseconds.
    pub request_latency: Histogram<u64>,
    /// Messages acknowledged successfully.
    pub message_count: u64,
    /// Body bytes of the messages acknowledged successfully.
    pub byte_count: u64,
    /// Requests answered, successfully or not.
    pub request_count: u64,
    /// Failed requests by response code.
    pub errors_by_code: BTreeMap<i32, u64>,
    /// Latencies above [`LATENCY_US_MAX`] that were clamped to it.
    pub clamped_count: u64,
}

impl Default for IntervalStats {
    fn default() -> Self {
        Self::new()
    }
}

impl IntervalStats {
    /// Creates empty statistics.
    pub fn new() -> Self {
        Self {
            message_latency: new_latency_histogram(),
            request_latency: new_latency_histogram(),
            message_count: 0,
            byte_count: 0,
            request_count: 0,
            errors_by_code: BTreeMap::new(),
            clamped_count: 0,
        }
    }

    /// Records a successful request of `message_count` messages, all with the
    /// request's latency (closed loop, or a single message).
    pub fn record_success(&mut self, latency_us: u64, message_count: u64, byte_count: u64) {
        let latency_us = self.clamp(latency_us);
        self.request_latency.saturating_record(latency_us);
        self.message_latency
            .saturating_record_n(latency_us, message_count);
        self.request_count += 1;
        self.message_count += message_count;
        self.byte_count += byte_count;
    }

    /// Records a successful request whose messages each have their own
    /// latency (open loop: measured from each message's intended send time).
    pub fn record_success_each(
        &mut self,
        request_latency_us: u64,
        message_latencies_us: &[u64],
        byte_count: u64,
    ) {
        let latency_us = self.clamp(request_latency_us);
        self.request_latency.saturating_record(latency_us);
        for &each in message_latencies_us {
            let each = self.clamp(each);
            self.message_latency.saturating_record(each);
        }
        self.request_count += 1;
        self.message_count += message_latencies_us.len() as u64;
        self.byte_count += byte_count;
    }

    /// Records a failed request with its response code (or
    /// [`ERROR_CODE_NO_RESPONSE`]). Failed requests carry no latency: their
    /// time is not a broker's answer to the workload.
    pub fn record_error(&mut self, code: i32) {
        self.request_count += 1;
        self.count_error(code, 1);
    }

    /// Total failed requests.
    pub fn error_count(&self) -> u64 {
        self.errors_by_code.values().sum()
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &IntervalStats) {
        self.message_latency
            .add(&other.message_latency)
            .expect("invariant: all latency histograms share bounds");
        self.request_latency
            .add(&other.request_latency)
            .expect("invariant: all latency histograms share bounds");
        self.message_count += other.message_count;
        self.byte_count += other.byte_count;
        self.request_count += other.request_count;
        self.clamped_count += other.clamped_count;
        for (&code, &count) in &other.errors_by_code {
            self.count_error(code, count);
        }
    }

    /// Empties these statistics, keeping the histograms' allocations.
    pub fn reset(&mut self) {
        self.message_latency.reset();
        self.request_latency.reset();
        self.message_count = 0;
        self.byte_count = 0;
        self.request_count = 0;
        self.errors_by_code.clear();
        self.clamped_count = 0;
    }

    fn clamp(&mut self, latency_us: u64) -> u64 {
        if latency_us > LATENCY_US_MAX {
            self.clamped_count += 1;
            LATENCY_US_MAX
        } else {
            latency_us
        }
    }

    fn count_error(&mut self, code: i32, count: u64) {
        let full = self.errors_by_code.len() >= ERROR_CODE_COUNT_MAX;
        let code = if full && !self.errors_by_code.contains_key(&code) {
            ERROR_CODE_OTHER
        } else {
            code
        };
        *self.errors_by_code.entry(code).or_insert(0) += count;
    }
}

/// A worker's handle on its current interval's statistics.
///
/// Cloning gives another handle on the same statistics. The lock is taken
/// once per response by the worker and once per interval by the reporter, so
/// it is almost never contended.
#[derive(Debug, Clone, Default)]
pub struct StatsHandle {
    shared: Arc<Mutex<IntervalStats>>,
}

impl StatsHandle {
    /// Creates a handle on empty statistics.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `record` on the current interval's statistics.
    pub fn with<R>(&self, record: impl FnOnce(&mut IntervalStats) -> R) -> R {
        record(&mut lock(&self.shared))
    }

    /// Moves the current statistics into `out` (which must be empty) and
    /// leaves an empty set in their place, so no allocation happens under the
    /// lock.
    fn swap_into(&self, out: &mut IntervalStats) {
        let mut guard = lock(&self.shared);
        mem::swap(&mut *guard, out);
    }
}

// A worker that panicked while holding the lock leaves consistent counters
// (every update is a few additions), so the statistics stay usable.
fn lock(shared: &Mutex<IntervalStats>) -> MutexGuard<'_, IntervalStats> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One interval as the reporter closes it.
#[derive(Debug, Clone)]
pub struct Interval {
    /// Zero-based index of the interval since the run started.
    pub index: u64,
    /// Start of the interval, in microseconds since the run started.
    pub start_us: u64,
    /// Length of the interval in microseconds.
    pub length_us: u64,
    /// Whether the interval falls inside the warm-up (excluded from results).
    pub is_warmup: bool,
    /// What all workers recorded in it.
    pub stats: IntervalStats,
}

/// The reporter's side: gathers the workers' intervals and keeps the totals.
#[derive(Debug)]
pub struct StatsCollector {
    handles: Vec<StatsHandle>,
    warmup_us: u64,
    next_index: u64,
    interval_start_us: u64,
    spare: IntervalStats,
    total: IntervalStats,
    measured_us: u64,
}

impl StatsCollector {
    /// Creates a collector over `handles`; intervals starting before
    /// `warmup_us` are warm-up.
    pub fn new(handles: Vec<StatsHandle>, warmup_us: u64) -> Self {
        Self {
            handles,
            warmup_us,
            next_index: 0,
            interval_start_us: 0,
            spare: IntervalStats::new(),
            total: IntervalStats::new(),
            measured_us: 0,
        }
    }

    /// Closes the interval that ends at `now_us` (microseconds since the run
    /// started), gathering every worker's statistics.
    ///
    /// # Panics
    ///
    /// If `now_us` is before the end of the previous interval.
    pub fn close_interval(&mut self, now_us: u64) -> Interval {
        assert!(
            now_us >= self.interval_start_us,
            "interval end {now_us} before its start {}",
            self.interval_start_us
        );
        let mut merged = IntervalStats::new();
        for handle in &self.handles {
            self.spare.reset();
            handle.swap_into(&mut self.spare);
            merged.add(&self.spare);
        }
        let interval = Interval {
            index: self.next_index,
            start_us: self.interval_start_us,
            length_us: now_us - self.interval_start_us,
            is_warmup: self.interval_start_us < self.warmup_us,
            stats: merged,
        };
        if !interval.is_warmup {
            self.total.add(&interval.stats);
            self.measured_us += interval.length_us;
        }
        self.next_index += 1;
        self.interval_start_us = now_us;
        interval
    }

    /// The sum of all measured (post-warm-up) intervals closed so far.
    pub fn total(&self) -> &IntervalStats {
        &self.total
    }

    /// Measured time, in microseconds: the length of the post-warm-up
    /// intervals closed so far.
    pub fn measured_us(&self) -> u64 {
        self.measured_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_success_counts_each_message_of_a_batch() {
        let mut stats = IntervalStats::new();
        stats.record_success(250, 32, 3200);
        assert_eq!(stats.request_latency.len(), 1);
        assert_eq!(stats.message_latency.len(), 32);
        assert_eq!(stats.message_count, 32);
        assert_eq!(stats.byte_count, 3200);
        assert!(
            stats
                .message_latency
                .equivalent(stats.message_latency.max(), 250)
        );
    }

    #[test]
    fn latency_above_the_max_is_clamped_and_counted() {
        let mut stats = IntervalStats::new();
        stats.record_success(LATENCY_US_MAX * 2, 1, 1);
        assert_eq!(stats.clamped_count, 1);
        assert!(
            stats
                .request_latency
                .equivalent(stats.request_latency.max(), LATENCY_US_MAX)
        );
    }

    #[test]
    fn errors_beyond_the_code_limit_fold_into_other() {
        let mut stats = IntervalStats::new();
        for code in 0..(ERROR_CODE_COUNT_MAX as i32 + 10) {
            stats.record_error(code);
        }
        assert_eq!(stats.errors_by_code.len(), ERROR_CODE_COUNT_MAX + 1);
        assert_eq!(stats.errors_by_code[&ERROR_CODE_OTHER], 10);
        assert_eq!(stats.error_count(), ERROR_CODE_COUNT_MAX as u64 + 10);
    }

    #[test]
    fn collector_excludes_warmup_intervals_from_the_total() {
        let worker = StatsHandle::new();
        let mut collector = StatsCollector::new(vec![worker.clone()], 2_000_000);
        worker.with(|s| s.record_success(100, 1, 10));
        let first = collector.close_interval(1_000_000);
        worker.with(|s| s.record_success(200, 1, 10));
        let second = collector.close_interval(2_000_000);
        worker.with(|s| s.record_success(300, 2, 20));
        worker.with(|s| s.record_error(17));
        let third = collector.close_interval(3_000_000);
        assert!(first.is_warmup && second.is_warmup && !third.is_warmup);
        assert_eq!(third.index, 2);
        assert_eq!(third.start_us, 2_000_000);
        assert_eq!(collector.total().message_count, 2);
        assert_eq!(collector.total().errors_by_code[&17], 1);
        assert_eq!(collector.total().message_latency.min(), 300);
        assert_eq!(collector.measured_us(), 1_000_000);
    }

    #[test]
    fn collector_merges_all_workers_and_empties_them() {
        let workers = [StatsHandle::new(), StatsHandle::new()];
        let mut collector = StatsCollector::new(workers.to_vec(), 0);
        workers[0].with(|s| s.record_success(10, 1, 5));
        workers[1].with(|s| s.record_success(20, 1, 5));
        let interval = collector.close_interval(500);
        assert_eq!(interval.stats.message_count, 2);
        assert_eq!(interval.stats.byte_count, 10);
        let next = collector.close_interval(1000);
        assert_eq!(next.stats.message_count, 0);
        assert_eq!(collector.total().message_count, 2);
    }

    #[test]
    fn record_success_each_keeps_every_message_latency() {
        let mut stats = IntervalStats::new();
        stats.record_success_each(50, &[50, 150, 250], 30);
        assert_eq!(stats.message_latency.len(), 3);
        assert_eq!(stats.request_latency.len(), 1);
        assert!(
            stats
                .message_latency
                .equivalent(stats.message_latency.max(), 250)
        );
    }
}
