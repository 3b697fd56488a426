//! HdrHistogram interval logs (`.hlog`), the format Java's
//! `HistogramLogWriter` writes and HistogramLogAnalyzer and
//! `HistogramLogProcessor` read.
//!
//! ```text
//! #[Histogram log format version 1.3]
//! #[StartTime: 1764576000.123 (seconds since epoch)]
//! #[BaseTime: 1764576000.123 (seconds since epoch)]
//! #Values are latencies in microseconds; Interval_Max is in microseconds too.
//! "StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
//! 2.000,1.000,1234.000,HISTFAAAA...      one line per measured interval
//! ```
//!
//! Each interval line holds its start (seconds after BaseTime), its length
//! (seconds), its max value, and the base64 of the histogram in the V2
//! compressed encoding (the `0x1c849304` cookie family followed by a
//! deflated V2 body), which is what Java's
//! `EncodableHistogram.decodeFromCompressedByteBuffer` expects. The lines
//! themselves come from the `hdrhistogram` crate's interval-log writer; this
//! module adds Java's version line and legend, which the crate does not write.
//!
//! # Invariants
//!
//! - The header is written once, before any interval line.
//! - Interval start timestamps never decrease.

use std::io::{self, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};

/// The format version Java's `HistogramLogWriter` announces.
pub const LOG_FORMAT_VERSION: &str = "1.3";

const LEGEND: &str =
    "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"";

/// Errors writing or reading an interval log.
#[derive(Debug, thiserror::Error)]
pub enum HlogError {
    /// Writing to the output failed.
    #[error("writing the interval log")]
    Io(#[from] io::Error),
    /// The histogram could not be serialized.
    #[error("serializing an interval histogram: {0}")]
    Serialize(String),
    /// A line of the log could not be parsed.
    #[error("parsing the interval log: {0}")]
    Parse(String),
    /// An interval's base64 text is not valid base64.
    #[error("interval {index}: invalid base64")]
    Base64 {
        /// Zero-based index of the interval line.
        index: usize,
    },
    /// An interval's histogram could not be decoded.
    #[error("interval {index}: decoding the histogram: {message}")]
    Decode {
        /// Zero-based index of the interval line.
        index: usize,
        /// The decoder's message.
        message: String,
    },
}

/// Writes an interval log to `W`.
pub struct HlogWriter<W: Write> {
    out: W,
    serializer: V2DeflateSerializer,
    line: Vec<u8>,
    last_start: Duration,
}

impl<W: Write> HlogWriter<W> {
    /// Writes the header: version, StartTime and BaseTime (both `start`),
    /// a units comment and the legend.
    ///
    /// # Errors
    ///
    /// [`HlogError::Io`] when writing fails.
    pub fn new(mut out: W, start: SystemTime) -> Result<Self, HlogError> {
        let start_s = start
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs_f64();
        writeln!(out, "#[Histogram log format version {LOG_FORMAT_VERSION}]")?;
        writeln!(out, "#[StartTime: {start_s:.3} (seconds since epoch)]")?;
        writeln!(out, "#[BaseTime: {start_s:.3} (seconds since epoch)]")?;
        writeln!(
            out,
            "#Values are latencies in microseconds; Interval_Max is in microseconds too."
        )?;
        writeln!(out, "{LEGEND}")?;
        Ok(Self {
            out,
            serializer: V2DeflateSerializer::new(),
            line: Vec::new(),
            last_start: Duration::ZERO,
        })
    }

    /// Appends one interval starting `start` after BaseTime and lasting
    /// `length`.
    ///
    /// # Errors
    ///
    /// [`HlogError::Io`] or [`HlogError::Serialize`].
    ///
    /// # Panics
    ///
    /// If `start` is before the previous interval's start.
    pub fn write_interval(
        &mut self,
        histogram: &Histogram<u64>,
        start: Duration,
        length: Duration,
    ) -> Result<(), HlogError> {
        assert!(
            start >= self.last_start,
            "interval {start:?} before {:?}",
            self.last_start
        );
        self.last_start = start;
        self.line.clear();
        // A builder without headers writes nothing but the interval line.
        let mut writer =
            IntervalLogWriterBuilder::new().begin_log_with(&mut self.line, &mut self.serializer)?;
        writer
            .write_histogram(histogram, start, length, None)
            .map_err(|error| HlogError::Serialize(error.to_string()))?;
        self.out.write_all(&self.line)?;
        Ok(())
    }

    /// Flushes and returns the output.
    ///
    /// # Errors
    ///
    /// [`HlogError::Io`] when flushing fails.
    pub fn finish(mut self) -> Result<W, HlogError> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// One interval read back from a log.
#[derive(Debug, Clone)]
pub struct LoggedInterval {
    /// Start, in seconds after BaseTime (or StartTime).
    pub start: Duration,
    /// Length of the interval.
    pub length: Duration,
    /// The `Interval_Max` column.
    pub max: f64,
    /// The decoded histogram.
    pub histogram: Histogram<u64>,
}

/// Reads every interval of a log and decodes its histogram.
///
/// # Errors
///
/// [`HlogError::Parse`], [`HlogError::Base64`] or [`HlogError::Decode`].
pub fn read(text: &[u8]) -> Result<Vec<LoggedInterval>, HlogError> {
    let mut deserializer = Deserializer::new();
    let mut intervals = Vec::new();
    for entry in IntervalLogIterator::new(text) {
        let entry = entry.map_err(|error| HlogError::Parse(format!("{error:?}")))?;
        let LogEntry::Interval(interval) = entry else {
            continue;
        };
        let index = intervals.len();
        let bytes =
            base64_decode(interval.encoded_histogram()).ok_or(HlogError::Base64 { index })?;
        let histogram: Histogram<u64> =
            deserializer
                .deserialize(&mut bytes.as_slice())
                .map_err(|error| HlogError::Decode {
                    index,
                    message: format!("{error:?}"),
                })?;
        intervals.push(LoggedInterval {
            start: interval.start_timestamp(),
            length: interval.duration(),
            max: interval.max(),
            histogram,
        });
    }
    Ok(intervals)
}

/// Decodes standard base64 (RFC 4648, with padding), or `None` if `text` is
/// not valid base64.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    fn sextet(byte: u8) -> Option<u32> {
        match byte {
            b'A'..=b'Z' => Some(u32::from(byte - b'A')),
            b'a'..=b'z' => Some(u32::from(byte - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(byte - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let bytes = text.trim().as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let padding = chunk.iter().rev().take_while(|&&b| b == b'=').count();
        if padding > 2 {
            return None;
        }
        let mut word = 0_u32;
        for &byte in &chunk[..4 - padding] {
            word = (word << 6) | sextet(byte)?;
        }
        word <<= 6 * padding as u32;
        let decoded = [(word >> 16) as u8, (word >> 8) as u8, word as u8];
        out.extend_from_slice(&decoded[..3 - padding]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::new_latency_histogram;

    #[test]
    fn base64_decode_handles_padding() {
        assert_eq!(base64_decode("TWFu").unwrap(), b"Man");
        assert_eq!(base64_decode("TWE=").unwrap(), b"Ma");
        assert_eq!(base64_decode("TQ==").unwrap(), b"M");
        assert_eq!(base64_decode("").unwrap(), b"");
        assert!(base64_decode("TQ=").is_none());
        assert!(base64_decode("T!==").is_none());
    }

    #[test]
    fn written_log_reads_back_to_the_same_histograms() {
        let mut first = new_latency_histogram();
        let mut second = new_latency_histogram();
        for value in [5_u64, 80, 1_500, 99_999] {
            first.record(value).unwrap();
            second.record_n(value * 2, 3).unwrap();
        }
        let start = UNIX_EPOCH + Duration::from_secs(1_764_576_000);
        let mut writer = HlogWriter::new(Vec::new(), start).unwrap();
        writer
            .write_interval(&first, Duration::from_secs(2), Duration::from_secs(1))
            .unwrap();
        writer
            .write_interval(&second, Duration::from_secs(3), Duration::from_secs(1))
            .unwrap();
        let text = writer.finish().unwrap();

        let intervals = read(&text).unwrap();
        assert_eq!(intervals.len(), 2);
        assert_eq!(intervals[0].histogram, first);
        assert_eq!(intervals[1].histogram, second);
        assert_eq!(intervals[1].start, Duration::from_secs(3));
        assert_eq!(intervals[1].length, Duration::from_secs(1));
        assert_eq!(intervals[0].max, first.max() as f64);
    }

    #[test]
    fn log_has_the_java_header_and_compressed_histograms() {
        let mut histogram = new_latency_histogram();
        histogram.record(42).unwrap();
        let start = UNIX_EPOCH + Duration::from_millis(1_764_576_000_250);
        let mut writer = HlogWriter::new(Vec::new(), start).unwrap();
        writer
            .write_interval(&histogram, Duration::ZERO, Duration::from_secs(1))
            .unwrap();
        let text = String::from_utf8(writer.finish().unwrap()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "#[Histogram log format version 1.3]");
        assert_eq!(
            lines[1],
            "#[StartTime: 1764576000.250 (seconds since epoch)]"
        );
        assert_eq!(lines[4], LEGEND);
        // "HISTF" is the base64 of the V2 compressed cookie 0x1c849304 + 0x10.
        assert!(
            lines[5].starts_with("0.000,1.000,42.000,HISTF"),
            "{}",
            lines[5]
        );
    }

    #[test]
    #[should_panic(expected = "before")]
    fn write_interval_rejects_a_start_going_backwards() {
        let histogram = new_latency_histogram();
        let mut writer = HlogWriter::new(Vec::new(), UNIX_EPOCH).unwrap();
        writer
            .write_interval(&histogram, Duration::from_secs(2), Duration::from_secs(1))
            .unwrap();
        let _ = writer.write_interval(&histogram, Duration::from_secs(1), Duration::from_secs(1));
    }
}
