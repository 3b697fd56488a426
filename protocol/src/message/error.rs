//! Errors of the message record, properties, batch and id codecs.
//!
//! One enum, [`RecordError`], for everything in [`crate::message`]. Variants carry
//! the byte positions and the declared and computed values, because the store
//! decides from them whether a CommitLog tail is torn (truncate) or corrupt, and a
//! person debugging a bad pull body needs to find the byte.
//!
//! # Invariants
//!
//! - Decoding peer or disk bytes reports every defect as a `RecordError`; nothing in
//!   this module panics on input.

use thiserror::Error;

/// Why a batch entry (one short record of a SEND_BATCH_MESSAGE body) is invalid.
#[derive(Debug, Error, PartialEq, Eq, Clone, Copy)]
pub enum BatchFault {
    /// Fewer bytes remain than the entry's fixed part or its declared size.
    #[error("entry needs {needed} bytes, {available} remain")]
    Truncated {
        /// Bytes the entry needs (fixed part, or its declared TOTALSIZE).
        needed: usize,
        /// Bytes left in the body from the entry's first byte.
        available: usize,
    },
    /// BODYLENGTH is negative.
    #[error("negative body length {0}")]
    NegativeBodyLength(i32),
    /// PROPERTIESLENGTH is negative.
    #[error("negative properties length {0}")]
    NegativePropertiesLength(i16),
    /// BODYLENGTH is zero; no client sends an empty message body.
    #[error("empty body")]
    EmptyBody,
    /// TOTALSIZE disagrees with the size the entry's fields take.
    #[error("TOTALSIZE {declared} but the fields take {computed} bytes")]
    TotalSizeMismatch {
        /// TOTALSIZE as read.
        declared: i32,
        /// `22 + BODYLENGTH + PROPERTIESLENGTH`.
        computed: usize,
    },
}

/// An error encoding or decoding a message record, a properties string, a batch
/// body, a pull body or a message id.
#[derive(Debug, Error, PartialEq, Eq, Clone)]
pub enum RecordError {
    /// The buffer ends before the record (or the part read so far) does. At the
    /// end of a CommitLog scan this is a torn write, not corruption.
    #[error("record needs {needed} bytes, only {available} available")]
    Truncated {
        /// Bytes needed from the record's first byte.
        needed: usize,
        /// Bytes available from the record's first byte.
        available: usize,
    },
    /// MAGICCODE is none of V1, V2 or BLANK.
    #[error("unknown magic code {0:#010x}")]
    UnknownMagic(u32),
    /// TOTALSIZE is negative or smaller than the smallest possible record.
    #[error("TOTALSIZE {declared} is below the {min}-byte minimum")]
    TotalSizeTooSmall {
        /// TOTALSIZE as read.
        declared: i32,
        /// Smallest valid size for this kind of record.
        min: usize,
    },
    /// A field runs past TOTALSIZE, or the fields end before it.
    #[error("TOTALSIZE {declared} but the fields take {computed} bytes")]
    TotalSizeMismatch {
        /// TOTALSIZE as read.
        declared: u32,
        /// Bytes taken by the fields read so far (a lower bound when a field
        /// overruns).
        computed: usize,
    },
    /// A length field of the record is negative.
    #[error("negative {field} {value}")]
    NegativeLength {
        /// Which field: `"body length"`, `"topic length"` or `"properties length"`.
        field: &'static str,
        /// The value as read.
        value: i32,
    },
    /// A host's port field is outside `0..=65535`.
    #[error("{field} port {port} is out of range")]
    PortOutOfRange {
        /// `"born host"` or `"store host"`.
        field: &'static str,
        /// The value as read.
        port: i32,
    },
    /// The topic is not UTF-8.
    #[error("topic is not valid UTF-8")]
    TopicNotUtf8,
    /// The topic does not fit the record version's length field.
    #[error("topic of {len} bytes exceeds the {max}-byte limit of a {version} record")]
    TopicTooLong {
        /// Topic length in bytes.
        len: usize,
        /// Largest length the version stores.
        max: usize,
        /// `"V1"` or `"V2"`.
        version: &'static str,
    },
    /// The properties string exceeds its signed 16-bit length field
    /// (Java answers `PROPERTIES_SIZE_EXCEEDED`).
    #[error("properties of {len} bytes exceed the {max}-byte limit")]
    PropertiesTooLong {
        /// Properties length in bytes.
        len: usize,
        /// [`crate::limits::PROPERTIES_SIZE_MAX`].
        max: usize,
    },
    /// The properties string is not UTF-8 (only reported by accessors that need text).
    #[error("properties are not valid UTF-8")]
    PropertiesNotUtf8,
    /// The body or the whole record does not fit a signed 32-bit length.
    #[error("{field} of {len} bytes does not fit an i32 length")]
    TooLarge {
        /// `"body"` or `"record"`.
        field: &'static str,
        /// The length in bytes.
        len: usize,
    },
    /// The stored BODYCRC differs from the CRC of the body.
    #[error("body CRC {stored:#010x} stored, {computed:#010x} computed")]
    BodyCrcMismatch {
        /// BODYCRC as read.
        stored: u32,
        /// CRC-32 of the body `& 0x7FFFFFFF`.
        computed: u32,
    },
    /// A BLANK (end-of-file) marker was found where a message record was required.
    #[error("BLANK end-of-file marker of {total_size} bytes where a record was expected")]
    UnexpectedBlank {
        /// TOTALSIZE of the marker.
        total_size: u32,
    },
    /// The output buffer is smaller than the encoding.
    #[error("output needs {needed} bytes, has {available}")]
    OutputTooSmall {
        /// Bytes the encoding takes.
        needed: usize,
        /// Bytes in the caller's buffer.
        available: usize,
    },
    /// A property key is empty or contains a separator (0x01 or 0x02).
    #[error("property key {key:?} is empty or contains a separator")]
    PropertyKeyInvalid {
        /// The key, lossily decoded.
        key: String,
    },
    /// A property value contains the pair separator 0x02.
    #[error("value of property {key:?} contains the pair separator 0x02")]
    PropertyValueInvalid {
        /// The key the value belongs to.
        key: String,
    },
    /// An entry of a SEND_BATCH_MESSAGE body is invalid.
    #[error("batch entry {entry_index} at byte {byte_offset}: {fault}")]
    BatchEntry {
        /// Zero-based index of the entry in the body.
        entry_index: usize,
        /// Offset of the entry's first byte in the body.
        byte_offset: usize,
        /// What is wrong with it.
        fault: BatchFault,
    },
    /// A record inside a pull body is invalid.
    #[error("pull body record {record_index} at byte {byte_offset}: {source}")]
    PullBodyRecord {
        /// Zero-based index of the record in the body.
        record_index: usize,
        /// Offset of the record's first byte in the body.
        byte_offset: usize,
        /// The record's own error.
        #[source]
        source: Box<RecordError>,
    },
    /// A pull body ends with bytes that do not form a whole record.
    #[error("pull body has {count} trailing bytes at byte {byte_offset}")]
    PullBodyTrailing {
        /// Offset of the first trailing byte.
        byte_offset: usize,
        /// Number of trailing bytes.
        count: usize,
    },
    /// A stored record handed to the pull body encoder is not one whole record.
    #[error("pull body record {record_index}: TOTALSIZE {declared:?}, slice of {len} bytes")]
    PullBodyRecordLength {
        /// Zero-based index of the record.
        record_index: usize,
        /// TOTALSIZE read from the slice (`None` when under 8 bytes or not a record).
        declared: Option<u32>,
        /// Length of the slice.
        len: usize,
    },
    /// A message id is neither 32 (IPv4) nor 56 (IPv6) characters long.
    #[error("message id of {len} characters is neither 32 nor 56 long")]
    MessageIdLength {
        /// Length in bytes.
        len: usize,
    },
    /// A message id contains a byte that is not a hex digit.
    #[error("message id has a non-hex byte at {index}")]
    MessageIdNotHex {
        /// Offset of the byte.
        index: usize,
    },
}
