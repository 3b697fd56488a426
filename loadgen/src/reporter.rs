//! The reporter's clock: closes an interval every second, prints the live
//! progress line when stdout is a terminal, writes measured intervals to the
//! interval log, and closes the last, partial interval when the workers have
//! drained.
//!
//! ```text
//! start      warm-up end                           end      drained
//!   |--w--|--w--|--m--|--m--| ... |--m--|--m--|-----|--m'--|
//!   w: warm-up interval (live only)   m: measured   m': final partial
//! ```
//!
//! # Invariants
//!
//! - Interval boundaries are `start + k * interval`, computed from `k`, so
//!   they do not drift with the reporter's own delays.
//! - Only measured intervals are written to the interval log, and the log
//!   holds exactly the intervals whose sum is the run's total.

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::time::{Duration, Instant};

use crate::hist::{IntervalStats, StatsCollector};
use crate::hlog::{HlogError, HlogWriter};
use crate::report::progress_line;

/// The reporting interval: one second, as HdrHistogram logs usually use.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// Drives a [`StatsCollector`] in real time.
pub struct Reporter {
    collector: StatsCollector,
    start: Instant,
    next_index: u32,
    progress: bool,
    hlog: Option<HlogWriter<BufWriter<File>>>,
    live: IntervalStats,
    secondary: Option<StatsCollector>,
}

impl Reporter {
    /// A reporter for a run that started at `start`. `progress` enables the
    /// live line (pass whether stdout is a terminal).
    pub fn new(
        collector: StatsCollector,
        start: Instant,
        progress: bool,
        hlog: Option<HlogWriter<BufWriter<File>>>,
    ) -> Self {
        Self {
            collector,
            start,
            next_index: 1,
            progress,
            hlog,
            live: IntervalStats::new(),
            secondary: None,
        }
    }

    /// Also closes `secondary`'s intervals at the same instants (the
    /// consumers of an e2e run); it is not printed or logged.
    pub fn with_secondary(mut self, secondary: StatsCollector) -> Self {
        self.secondary = Some(secondary);
        self
    }

    /// Closes intervals on their boundaries until `end` (a boundary or not),
    /// sleeping in between.
    ///
    /// # Errors
    ///
    /// [`HlogError`] when the interval log cannot be written.
    pub fn run_until(&mut self, end: Instant) -> Result<(), HlogError> {
        loop {
            let boundary = self.start + INTERVAL * self.next_index;
            let now = Instant::now();
            if boundary > end {
                if end > now {
                    std::thread::sleep(end - now);
                }
                return Ok(());
            }
            if boundary > now {
                std::thread::sleep(boundary - now);
            }
            self.close(boundary)?;
            self.next_index += 1;
        }
    }

    /// Closes the final interval at `now` and returns the collector with the
    /// run's totals.
    ///
    /// # Errors
    ///
    /// [`HlogError`] when the interval log cannot be written or flushed.
    pub fn finish(self, now: Instant) -> Result<StatsCollector, HlogError> {
        self.finish_both(now).map(|(primary, _)| primary)
    }

    /// As [`Reporter::finish`], also returning the secondary collector.
    ///
    /// # Errors
    ///
    /// [`HlogError`] when the interval log cannot be written or flushed.
    pub fn finish_both(
        mut self,
        now: Instant,
    ) -> Result<(StatsCollector, Option<StatsCollector>), HlogError> {
        // The final, partial interval (mostly draining) is not shown: its
        // rate would be over a fraction of a second.
        self.close_and_show(now, false)?;
        if self.progress {
            println!();
        }
        if let Some(hlog) = self.hlog.take() {
            hlog.finish()?;
        }
        Ok((self.collector, self.secondary))
    }

    fn close(&mut self, at: Instant) -> Result<(), HlogError> {
        self.close_and_show(at, true)
    }

    fn close_and_show(&mut self, at: Instant, show: bool) -> Result<(), HlogError> {
        let at_us = micros(at.saturating_duration_since(self.start));
        let interval = self.collector.close_interval(at_us);
        if let Some(secondary) = &mut self.secondary {
            secondary.close_interval(at_us);
        }
        if !interval.is_warmup {
            self.live.add(&interval.stats);
            if let Some(hlog) = &mut self.hlog {
                hlog.write_interval(
                    &interval.stats.message_latency,
                    Duration::from_micros(interval.start_us),
                    Duration::from_micros(interval.length_us),
                )?;
            }
        }
        if self.progress && show {
            // During warm-up the line shows the interval itself; after it,
            // p99 and errors of everything measured so far.
            let so_far = if interval.is_warmup {
                &interval.stats
            } else {
                &self.live
            };
            let line = progress_line(at_us as f64 / 1e6, &interval, so_far);
            print!("\r{line}   ");
            let _ = std::io::stdout().flush();
        }
        Ok(())
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::StatsHandle;
    use crate::hlog;

    #[test]
    fn reporter_logs_only_measured_intervals_that_sum_to_the_total() {
        let worker = StatsHandle::new();
        let start = Instant::now();
        let collector = StatsCollector::new(vec![worker.clone()], 0);
        let path =
            std::env::temp_dir().join(format!("ringmq-reporter-{}.hlog", std::process::id()));
        let file = BufWriter::new(File::create(&path).unwrap());
        let hlog_writer = HlogWriter::new(file, std::time::SystemTime::now()).unwrap();
        let mut reporter = Reporter::new(collector, start, false, Some(hlog_writer));
        worker.with(|s| s.record_success(100, 1, 1));
        reporter
            .run_until(start + Duration::from_millis(1100))
            .unwrap();
        worker.with(|s| s.record_success(300, 2, 2));
        let collector = reporter.finish(Instant::now()).unwrap();
        assert_eq!(collector.total().message_count, 3);

        let intervals = hlog::read(&std::fs::read(&path).unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(intervals.len(), 2);
        assert_eq!(intervals[0].start, Duration::ZERO);
        assert_eq!(intervals[0].length, Duration::from_secs(1));
        let logged: u64 = intervals.iter().map(|i| i.histogram.len()).sum();
        assert_eq!(logged, collector.total().message_latency.len());
    }
}
