//! The TPS figures of GET_BROKER_RUNTIME_INFO (`putTps`, `getFoundTps`,
//! `getMissTps`, `getTransferredTps`): rates over the last 10 s, 60 s and
//! 600 s, from samples of cumulative counters.
//!
//! A shard records its counters about once a second
//! ([`TpsSampler::record`], from its tick); the sampler keeps the last
//! [`TPS_SAMPLE_COUNT_MAX`] samples in a ring. A rate over a window is what
//! Java's `StoreStatsService.CallSnapshot.getTPS` computes between the
//! newest sample and the oldest one inside the window:
//!
//! ```text
//! samples:  s0  s1  s2 ... s(n-10) ... s(n-1)      (about 1 s apart)
//!                          └─ oldest within 10 s ─┘ newest
//! rate_10s = (s(n-1).count - s(n-10).count) / (s(n-1).at - s(n-10).at) in s
//! ```
//!
//! Java samples every second and takes the sample `window` positions back,
//! leaving the figure empty while fewer samples exist. Here the base is
//! found by time (a sample counts as inside when it is at most the window
//! plus [`TPS_WINDOW_SLACK_MS`] older than the newest, so a tick a few ms
//! late does not drop the sample Java would use), and a window with fewer
//! samples uses what there is. One sample, or none, gives 0.
//!
//! # Invariants
//!
//! - At most [`TPS_SAMPLE_COUNT_MAX`] samples are kept.
//! - Sample times strictly increase, by at least
//!   [`TPS_SAMPLE_SPACING_MIN_MS`] (closer samples are dropped; a clock
//!   stepping back restarts the ring), so no elapsed time is zero or negative.
//! - Rates are never negative: a counter that went backwards gives 0.
//! - Time is a parameter; nothing here reads a clock.

use std::collections::VecDeque;

use crate::runtime_info::Tps;

/// How often a shard samples its counters (Java's `FREQUENCY_OF_SAMPLING`).
pub const TPS_SAMPLE_INTERVAL_MS: i64 = 1_000;

/// The windows of the three figures, in seconds, shortest first.
pub const TPS_WINDOWS_S: [i64; 3] = [10, 60, 600];

/// Samples kept: one per second over the longest window, plus the base
/// sample at its start (Java's `MAX_RECORDS_OF_SAMPLING + 1`).
pub const TPS_SAMPLE_COUNT_MAX: usize = 601;

/// A sample less than this after the previous one is dropped, so that
/// extra ticks do not shorten the time the ring spans.
pub const TPS_SAMPLE_SPACING_MIN_MS: i64 = TPS_SAMPLE_INTERVAL_MS / 2;

/// How much older than a window a sample may be and still be its base
/// (late ticks make the sample `window` seconds back slightly older).
pub const TPS_WINDOW_SLACK_MS: i64 = TPS_SAMPLE_INTERVAL_MS / 2;

const _: () = assert!(TPS_WINDOWS_S[0] < TPS_WINDOWS_S[1]);
const _: () = assert!(TPS_WINDOWS_S[1] < TPS_WINDOWS_S[2]);
const _: () =
    assert!(TPS_SAMPLE_COUNT_MAX as i64 * TPS_SAMPLE_INTERVAL_MS > TPS_WINDOWS_S[2] * 1_000);
const _: () = assert!(TPS_SAMPLE_SPACING_MIN_MS > 0);
const _: () = assert!(TPS_WINDOW_SLACK_MS < TPS_SAMPLE_INTERVAL_MS);

/// The cumulative counters a shard samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TpsCounters {
    /// Messages put (Java's `putMessageTimesTotal`).
    pub msg_put: u64,
    /// Pull reads that found messages (`getMessageTimesTotalFound`).
    pub get_found: u64,
    /// Pull reads that found none (`getMessageTimesTotalMiss`).
    pub get_miss: u64,
    /// Messages returned to pulls (`getMessageTransferedMsgCount`).
    pub get_transferred: u64,
}

/// The four rates computed from one sampler.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TpsRates {
    /// Messages put per second (`putTps`).
    pub put: Tps,
    /// Pulls that found messages, per second (`getFoundTps`).
    pub get_found: Tps,
    /// Pulls that found none, per second (`getMissTps`).
    pub get_miss: Tps,
    /// Messages returned to pulls per second (`getTransferredTps`).
    pub get_transferred: Tps,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TpsSample {
    at_ms: i64,
    counters: TpsCounters,
}

/// The last [`TPS_SAMPLE_COUNT_MAX`] samples of a shard's counters (see
/// the module doc).
#[derive(Debug, Clone, Default)]
pub struct TpsSampler {
    samples: VecDeque<TpsSample>,
}

impl TpsSampler {
    /// An empty sampler (all rates 0).
    pub fn new() -> Self {
        Self {
            samples: VecDeque::with_capacity(TPS_SAMPLE_COUNT_MAX),
        }
    }

    /// Samples kept now.
    pub fn sample_count(&self) -> usize {
        self.samples.len()
    }

    /// Records `counters` as of `now_ms`, dropping the oldest sample when
    /// the ring is full. A sample less than [`TPS_SAMPLE_SPACING_MIN_MS`]
    /// after the newest is ignored; one older than the newest (the clock
    /// stepped back) starts the ring again.
    pub fn record(&mut self, now_ms: i64, counters: TpsCounters) {
        if let Some(newest) = self.samples.back() {
            if now_ms < newest.at_ms {
                self.samples.clear();
            } else if now_ms - newest.at_ms < TPS_SAMPLE_SPACING_MIN_MS {
                return;
            }
        }
        if self.samples.len() == TPS_SAMPLE_COUNT_MAX {
            self.samples.pop_front();
        }
        self.samples.push_back(TpsSample {
            at_ms: now_ms,
            counters,
        });
        assert!(
            self.samples.len() <= TPS_SAMPLE_COUNT_MAX,
            "{} samples kept, the bound is {TPS_SAMPLE_COUNT_MAX}",
            self.samples.len()
        );
    }

    /// The rate per second of the counter `pick` selects over the last
    /// `window_ms` (see the module doc); 0 with fewer than two samples.
    pub fn rate(&self, window_ms: i64, pick: fn(&TpsCounters) -> u64) -> f64 {
        let Some(newest) = self.samples.back() else {
            return 0.0;
        };
        let oldest_inside_ms = newest
            .at_ms
            .saturating_sub(window_ms.saturating_add(TPS_WINDOW_SLACK_MS));
        // Times increase, so the samples inside the window are a suffix.
        let base_index = self
            .samples
            .partition_point(|sample| sample.at_ms < oldest_inside_ms);
        let Some(base) = self.samples.get(base_index) else {
            return 0.0;
        };
        let elapsed_ms = newest.at_ms - base.at_ms;
        if elapsed_ms <= 0 {
            return 0.0;
        }
        let delta = pick(&newest.counters).saturating_sub(pick(&base.counters));
        // Counts and spans far below 2^53: the conversions are exact.
        delta as f64 * 1_000.0 / elapsed_ms as f64
    }

    /// The rate of `pick` over each of [`TPS_WINDOWS_S`].
    pub fn tps(&self, pick: fn(&TpsCounters) -> u64) -> Tps {
        let [short, minute, long] = TPS_WINDOWS_S.map(|window_s| self.rate(window_s * 1_000, pick));
        Tps {
            last_10s: short,
            last_60s: minute,
            last_600s: long,
        }
    }

    /// All four rates over the three windows.
    pub fn rates(&self) -> TpsRates {
        TpsRates {
            put: self.tps(|counters| counters.msg_put),
            get_found: self.tps(|counters| counters.get_found),
            get_miss: self.tps(|counters| counters.get_miss),
            get_transferred: self.tps(|counters| counters.get_transferred),
        }
    }
}

/// Bytes moved per second, as Java's `FlowMonitor` reports them for
/// replication (`transferredByteInSecond`): the bytes of the last whole
/// second of the wall clock, 0 once a second passed without any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BytesPerSecond {
    /// The second (ms since the epoch / 1000) `this_second` counts.
    pub second: i64,
    /// Bytes in `second` so far.
    pub this_second: u64,
    /// Bytes in the second before `second`.
    pub last_second: u64,
}

impl BytesPerSecond {
    /// Counts `bytes` moved at `now_ms`.
    pub fn add(&mut self, now_ms: i64, bytes: u64) {
        let second = now_ms.div_euclid(1_000);
        if second != self.second {
            self.last_second = if second == self.second + 1 {
                self.this_second
            } else {
                0
            };
            self.this_second = 0;
            self.second = second;
        }
        self.this_second = self.this_second.saturating_add(bytes);
    }

    /// The bytes of the last whole second before `now_ms`.
    pub fn per_second(&self, now_ms: i64) -> u64 {
        let second = now_ms.div_euclid(1_000);
        if second == self.second {
            self.last_second
        } else if second == self.second + 1 {
            self.this_second
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_per_second_reports_the_last_whole_second() {
        let mut rate = BytesPerSecond::default();
        let t = 1_000_000;
        assert_eq!(rate.per_second(t), 0);
        rate.add(t, 100);
        rate.add(t + 500, 50);
        assert_eq!(rate.per_second(t + 999), 0, "the second is not over");
        assert_eq!(rate.per_second(t + 1_000), 150);
        rate.add(t + 1_200, 7);
        assert_eq!(rate.per_second(t + 1_999), 150);
        assert_eq!(rate.per_second(t + 2_000), 7);
        assert_eq!(rate.per_second(t + 3_000), 0, "a second without bytes");
        rate.add(t + 5_000, 9);
        assert_eq!(
            rate.per_second(t + 5_500),
            0,
            "the second before carried nothing"
        );
        assert_eq!(rate.per_second(t + 6_000), 9);
    }

    const START: i64 = 1_700_000_000_000;

    fn puts(msg_put: u64) -> TpsCounters {
        TpsCounters {
            msg_put,
            ..TpsCounters::default()
        }
    }

    /// `count` samples one second apart, the put counter rising by
    /// `per_second(i)` before sample `i`.
    fn sampled(count: usize, per_second: impl Fn(usize) -> u64) -> TpsSampler {
        let mut sampler = TpsSampler::new();
        let mut total = 0;
        for index in 0..count {
            if index > 0 {
                total += per_second(index);
            }
            sampler.record(START + index as i64 * 1_000, puts(total));
        }
        sampler
    }

    #[test]
    fn no_sample_or_one_sample_gives_zero() {
        let mut sampler = TpsSampler::new();
        assert_eq!(sampler.rates(), TpsRates::default());
        sampler.record(START, puts(1_000));
        assert_eq!(sampler.sample_count(), 1);
        assert_eq!(sampler.rates(), TpsRates::default());
    }

    #[test]
    fn each_window_measures_from_its_own_base_sample() {
        // 700 seconds: 1/s for the first 600, then 10/s for the last 100.
        let sampler = sampled(701, |second| if second <= 600 { 1 } else { 10 });
        assert_eq!(sampler.sample_count(), TPS_SAMPLE_COUNT_MAX);
        let tps = sampler.tps(|counters| counters.msg_put);
        assert_eq!(tps.last_10s, 10.0);
        assert_eq!(tps.last_60s, 10.0);
        // 500 s at 1/s and 100 s at 10/s over 600 s.
        assert_eq!(tps.last_600s, (500.0 + 1_000.0) / 600.0);
    }

    #[test]
    fn fewer_samples_than_a_window_use_what_there_is() {
        // 5 samples, 4 seconds, 3 puts per second.
        let sampler = sampled(5, |_| 3);
        let tps = sampler.tps(|counters| counters.msg_put);
        assert_eq!(
            tps,
            Tps {
                last_10s: 3.0,
                last_60s: 3.0,
                last_600s: 3.0,
            }
        );
        // 30 s of history: the 10 s window is complete, the others are not.
        let sampler = sampled(31, |second| if second <= 20 { 1 } else { 4 });
        let tps = sampler.tps(|counters| counters.msg_put);
        assert_eq!(tps.last_10s, 4.0);
        assert_eq!(tps.last_60s, (20.0 + 40.0) / 30.0);
        assert_eq!(tps.last_600s, tps.last_60s);
    }

    #[test]
    fn the_ring_keeps_the_last_samples_after_it_wraps() {
        // Twice around the ring; the first lap put 100/s, the second 2/s.
        let laps = 2 * TPS_SAMPLE_COUNT_MAX;
        let sampler = sampled(laps, |second| {
            if second < TPS_SAMPLE_COUNT_MAX {
                100
            } else {
                2
            }
        });
        assert_eq!(sampler.sample_count(), TPS_SAMPLE_COUNT_MAX);
        let oldest = sampler.samples.front().unwrap();
        assert_eq!(
            oldest.at_ms,
            START + (laps - TPS_SAMPLE_COUNT_MAX) as i64 * 1_000
        );
        let tps = sampler.tps(|counters| counters.msg_put);
        assert_eq!(tps.last_10s, 2.0);
        assert_eq!(tps.last_60s, 2.0);
        assert_eq!(tps.last_600s, 2.0);
    }

    #[test]
    fn late_ticks_keep_the_base_sample_java_would_take() {
        // Ticks 1.01 s apart: the sample 10 ticks back is 10.1 s old and
        // still the 10 s base.
        let mut sampler = TpsSampler::new();
        for index in 0..20 {
            sampler.record(START + index * 1_010, puts(index as u64 * 5));
        }
        let expected = 50.0 * 1_000.0 / 10_100.0;
        assert_eq!(sampler.rate(10_000, |counters| counters.msg_put), expected);
    }

    #[test]
    fn the_four_counters_have_their_own_rates() {
        let mut sampler = TpsSampler::new();
        sampler.record(START, TpsCounters::default());
        sampler.record(
            START + 2_000,
            TpsCounters {
                msg_put: 8,
                get_found: 4,
                get_miss: 2,
                get_transferred: 64,
            },
        );
        let rates = sampler.rates();
        assert_eq!(rates.put.last_10s, 4.0);
        assert_eq!(rates.get_found.last_60s, 2.0);
        assert_eq!(rates.get_miss.last_600s, 1.0);
        assert_eq!(rates.get_transferred.last_10s, 32.0);
    }

    #[test]
    fn close_samples_are_dropped_and_a_clock_step_back_restarts() {
        let mut sampler = TpsSampler::new();
        sampler.record(START, puts(0));
        sampler.record(START + TPS_SAMPLE_SPACING_MIN_MS - 1, puts(100));
        assert_eq!(sampler.sample_count(), 1);
        sampler.record(START + 1_000, puts(10));
        assert_eq!(sampler.rate(10_000, |counters| counters.msg_put), 10.0);
        sampler.record(START - 5_000, puts(20));
        assert_eq!(sampler.sample_count(), 1);
        assert_eq!(sampler.rates(), TpsRates::default());
    }

    #[test]
    fn a_counter_going_backwards_gives_zero_not_a_negative_rate() {
        let mut sampler = TpsSampler::new();
        sampler.record(START, puts(50));
        sampler.record(START + 1_000, puts(10));
        assert_eq!(sampler.rate(10_000, |counters| counters.msg_put), 0.0);
    }
}
