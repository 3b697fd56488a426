//! The `.hgrm` percentile distribution: the text HdrHistogram's
//! `outputPercentileDistribution` prints, written from a histogram and read
//! back for `plot` and for tests.
//!
//! Layout (values in microseconds, scaling ratio 1, three decimals because
//! the histograms keep three significant digits):
//!
//! ```text
//!        Value     Percentile TotalCount 1/(1-Percentile)
//!
//!       12.000 0.000000000000          1           1.00
//!       ...                                                  one line per tick
//!     9999.000 1.000000000000     100000                     last line: no 1/(1-p)
//! #[Mean    =      123.456, StdDeviation   =       12.345]
//! #[Max     =     9999.000, Total count    =       100000]
//! #[Buckets =           22, SubBuckets     =         2048]
//! ```
//!
//! Ticks follow HdrHistogram's percentile iterator with five ticks per half
//! distance to 100 %, the default of the Java and Rust implementations.
//!
//! # Invariants
//!
//! - Points are in increasing percentile order, and the last one, if any, is
//!   at percentile 1.0 with the histogram's total count.
//! - [`parse`] accepts everything [`write`] produces and returns the same
//!   points (to the printed precision).

use std::fmt::Write as _;

use hdrhistogram::Histogram;

/// Ticks per half distance to 100 % in the percentile iteration.
pub const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// One line of a percentile distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PercentilePoint {
    /// The highest value (µs) at or below which `percentile` of the samples fall.
    pub value_us: f64,
    /// A fraction in `[0, 1]` (HdrHistogram prints it so, despite the column name).
    pub percentile: f64,
    /// Samples at or below `value_us`.
    pub total_count: u64,
}

/// A percentile distribution with its footer.
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    /// The lines, in increasing percentile order.
    pub points: Vec<PercentilePoint>,
    /// Mean in µs.
    pub mean_us: f64,
    /// Standard deviation in µs.
    pub stdev_us: f64,
    /// Largest value in µs.
    pub max_us: f64,
    /// Samples in the histogram.
    pub total_count: u64,
    /// The histogram's bucket count.
    pub bucket_count: u32,
    /// The histogram's sub-bucket count.
    pub sub_bucket_count: u32,
}

/// Why an `.hgrm` text could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HgrmError {
    /// A line is neither a percentile line, the header, nor a footer line.
    #[error("line {line}: not a percentile distribution line: {text:?}")]
    BadLine {
        /// One-based line number.
        line: usize,
        /// The line's text.
        text: String,
    },
    /// The footer with mean, max and counts is missing.
    #[error("the #[Mean ...], #[Max ...] or #[Buckets ...] footer is missing")]
    MissingFooter,
}

impl Distribution {
    /// Computes the distribution of `histogram`.
    pub fn of(histogram: &Histogram<u64>) -> Self {
        let mut points = Vec::new();
        if !histogram.is_empty() {
            let mut running = 0_u64;
            for step in histogram.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
                running += step.count_since_last_iteration();
                points.push(PercentilePoint {
                    value_us: histogram.highest_equivalent(step.value_iterated_to()) as f64,
                    percentile: step.quantile_iterated_to(),
                    total_count: running,
                });
            }
        }
        Self {
            points,
            mean_us: histogram.mean(),
            stdev_us: histogram.stdev(),
            max_us: histogram.highest_equivalent(histogram.max()) as f64,
            total_count: histogram.len(),
            bucket_count: u32::from(histogram.buckets()),
            sub_bucket_count: sub_bucket_count(histogram.sigfig()),
        }
    }

    /// Formats the distribution as `.hgrm` text.
    pub fn write(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; the results are ignored below.
        let _ = write!(
            out,
            "{:>12} {:>14} {:>10} {:>14}\n\n",
            "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
        );
        for point in &self.points {
            if point.percentile < 1.0 {
                let _ = writeln!(
                    out,
                    "{:12.3} {:2.12} {:10} {:14.2}",
                    point.value_us,
                    point.percentile,
                    point.total_count,
                    1.0 / (1.0 - point.percentile)
                );
            } else {
                let _ = writeln!(
                    out,
                    "{:12.3} {:2.12} {:10}",
                    point.value_us, point.percentile, point.total_count
                );
            }
        }
        let _ = writeln!(
            out,
            "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
            self.mean_us, self.stdev_us
        );
        let _ = writeln!(
            out,
            "#[Max     = {:12.3}, Total count    = {:12}]",
            self.max_us, self.total_count
        );
        let _ = writeln!(
            out,
            "#[Buckets = {:12}, SubBuckets     = {:12}]",
            self.bucket_count, self.sub_bucket_count
        );
        out
    }

    /// The value (µs) at `percentile` (a fraction): the first point at or
    /// above it, or the max when there is none.
    pub fn value_at(&self, percentile: f64) -> f64 {
        self.points
            .iter()
            .find(|point| point.percentile >= percentile)
            .map_or(self.max_us, |point| point.value_us)
    }
}

/// HdrHistogram's sub-bucket count for `sigfig` significant digits: the
/// power of two at or above `2 * 10^sigfig`.
fn sub_bucket_count(sigfig: u8) -> u32 {
    let largest_single_unit = 2 * 10_u32.pow(u32::from(sigfig));
    largest_single_unit.next_power_of_two()
}

/// Parses `.hgrm` text as [`Distribution::write`] (or HdrHistogram's Java
/// `outputPercentileDistribution`) prints it.
///
/// # Errors
///
/// [`HgrmError::BadLine`] on a line that is not part of the format,
/// [`HgrmError::MissingFooter`] when a footer line is absent.
pub fn parse(text: &str) -> Result<Distribution, HgrmError> {
    let mut points = Vec::new();
    let mut mean = None;
    let mut max = None;
    let mut buckets = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        let bad = || HgrmError::BadLine {
            line: index + 1,
            text: line.to_string(),
        };
        if trimmed.is_empty() || trimmed.starts_with("Value") {
            continue;
        }
        if let Some(footer) = trimmed.strip_prefix("#[") {
            let pair = footer_pair(footer).ok_or_else(bad)?;
            match pair.0.as_str() {
                "Mean" => mean = Some((pair.1, pair.3)),
                "Max" => max = Some((pair.1, pair.3)),
                "Buckets" => buckets = Some((pair.1, pair.3)),
                _ => return Err(bad()),
            }
            continue;
        }
        let fields: Vec<&str> = trimmed.split_whitespace().collect();
        if fields.len() != 3 && fields.len() != 4 {
            return Err(bad());
        }
        let value_us = fields[0].parse::<f64>().map_err(|_| bad())?;
        let percentile = fields[1].parse::<f64>().map_err(|_| bad())?;
        let total_count = fields[2].parse::<u64>().map_err(|_| bad())?;
        points.push(PercentilePoint {
            value_us,
            percentile,
            total_count,
        });
    }
    let (mean_us, stdev_us) = mean.ok_or(HgrmError::MissingFooter)?;
    let (max_us, total_count) = max.ok_or(HgrmError::MissingFooter)?;
    let (bucket_count, sub_bucket_count) = buckets.ok_or(HgrmError::MissingFooter)?;
    Ok(Distribution {
        points,
        mean_us,
        stdev_us,
        max_us,
        total_count: total_count as u64,
        bucket_count: bucket_count as u32,
        sub_bucket_count: sub_bucket_count as u32,
    })
}

/// Splits `Name = v1, Other name = v2]` into its two names and values.
fn footer_pair(footer: &str) -> Option<(String, f64, String, f64)> {
    let body = footer.strip_suffix(']')?;
    let (first, second) = body.split_once(',')?;
    let (name_a, value_a) = first.split_once('=')?;
    let (name_b, value_b) = second.split_once('=')?;
    Some((
        name_a.trim().to_string(),
        value_a.trim().parse().ok()?,
        name_b.trim().to_string(),
        value_b.trim().parse().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::new_latency_histogram;

    fn sample_histogram() -> Histogram<u64> {
        let mut histogram = new_latency_histogram();
        for value in 1..=10_000_u64 {
            histogram.record(value * 3).unwrap();
        }
        histogram.record(2_000_000).unwrap();
        histogram
    }

    #[test]
    fn sub_bucket_count_matches_hdrhistogram_for_three_digits() {
        assert_eq!(sub_bucket_count(3), 2048);
        assert_eq!(sub_bucket_count(2), 256);
    }

    #[test]
    fn write_then_parse_returns_the_same_distribution() {
        let distribution = Distribution::of(&sample_histogram());
        let parsed = parse(&distribution.write()).unwrap();
        assert_eq!(parsed.points.len(), distribution.points.len());
        for (a, b) in parsed.points.iter().zip(&distribution.points) {
            assert_eq!(a.value_us, b.value_us);
            assert_eq!(a.total_count, b.total_count);
            assert!((a.percentile - b.percentile).abs() < 1e-12);
        }
        assert_eq!(parsed.total_count, 10_001);
        assert_eq!(parsed.max_us, distribution.max_us);
        assert!((parsed.mean_us - distribution.mean_us).abs() < 0.001);
        assert_eq!(parsed.bucket_count, distribution.bucket_count);
        assert_eq!(parsed.sub_bucket_count, 2048);
    }

    #[test]
    fn distribution_ends_at_percentile_one_with_the_total_count() {
        let histogram = sample_histogram();
        let distribution = Distribution::of(&histogram);
        let last = distribution.points.last().unwrap();
        assert_eq!(last.percentile, 1.0);
        assert_eq!(last.total_count, histogram.len());
        assert_eq!(
            last.value_us,
            histogram.highest_equivalent(2_000_000) as f64
        );
        assert!(
            distribution
                .points
                .windows(2)
                .all(|w| w[0].percentile <= w[1].percentile)
        );
    }

    #[test]
    fn written_text_has_the_hdrhistogram_header_and_footer() {
        let text = Distribution::of(&sample_histogram()).write();
        let mut lines = text.lines();
        assert_eq!(
            lines.next().unwrap(),
            "       Value     Percentile TotalCount 1/(1-Percentile)"
        );
        assert_eq!(lines.next().unwrap(), "");
        let first = lines.next().unwrap();
        assert_eq!(
            first,
            "       3.000 0.000000000000          1           1.00"
        );
        assert!(text.contains("#[Buckets =           "));
        assert!(text.contains(", SubBuckets     =         2048]"));
        let last_point = text.lines().rev().nth(3).unwrap();
        assert_eq!(last_point.split_whitespace().count(), 3, "{last_point}");
    }

    #[test]
    fn value_at_returns_the_first_point_at_or_above() {
        let histogram = sample_histogram();
        let distribution = Distribution::of(&histogram);
        let p50 = distribution.value_at(0.5);
        assert!(histogram.equivalent(p50 as u64, histogram.value_at_quantile(0.5)));
    }

    #[test]
    fn parse_rejects_a_line_that_is_not_in_the_format() {
        let error = parse("       Value     Percentile\n\nhello world\n").unwrap_err();
        assert!(
            matches!(error, HgrmError::BadLine { line: 3, .. }),
            "{error:?}"
        );
    }

    #[test]
    fn parse_requires_the_footer() {
        assert_eq!(
            parse("1.0 0.5 1 2.0\n").unwrap_err(),
            HgrmError::MissingFooter
        );
    }
}
