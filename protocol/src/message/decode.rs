//! Decoding and validating a stored message record into a borrowed view, the
//! way Java's `CommitLog.checkMessageAndReturnSize` validates during recovery
//! (remoting-protocol.md 6.9).
//!
//! Validation, in order: at least 8 bytes (TOTALSIZE, MAGICCODE); BLANK magic is
//! the end-of-file marker ([`Decoded::Blank`]); otherwise V1/V2 magic; TOTALSIZE
//! ≥ 91 and ≤ the bytes given; every length field non-negative and every field
//! inside TOTALSIZE; TOTALSIZE equal to the recomputed length; host ports within
//! `0..=65535`; topic UTF-8; BODYCRC if asked.
//!
//! Deviations from Java, which reads ports and topics leniently: a record with a
//! port outside `u16` or a non-UTF-8 topic is rejected. Java never writes either
//! (both come from Java `InetSocketAddress` and `String` values).
//!
//! # Invariants
//!
//! - A [`RecordView`] covers exactly TOTALSIZE bytes that passed every check
//!   above; its accessors index only inside ranges checked here, so they cannot
//!   panic.

use std::net::SocketAddr;

use super::crc32::crc32_ieee;
use super::encode::{BODY_CRC_MASK, RecordSpec};
use super::error::RecordError;
use super::layout::{
    self, BORN_HOST_POSITION, COMMIT_LOG_OFFSET_POSITION, END_FILE_MIN_BLANK_LENGTH, FLAG_POSITION,
    MAGIC_CODE_BLANK, MAGIC_CODE_POSITION, MessageVersion, QUEUE_ID_POSITION,
    QUEUE_OFFSET_POSITION, RECORD_SIZE_MIN, SYS_FLAG_POSITION, array_at,
};
use super::properties::Properties;

/// Whether decoding recomputes BODYCRC (Java's `checkCRCOnRecover`, default on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrcCheck {
    /// Recompute and compare; a mismatch is [`RecordError::BodyCrcMismatch`].
    Verify,
    /// Trust the stored CRC.
    Skip,
}

/// What sits at a CommitLog position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A message record.
    Record(RecordView<'a>),
    /// The end-of-file marker: the rest of the segment, `total_size` bytes from
    /// the marker's first byte, is unused.
    Blank {
        /// TOTALSIZE of the marker (the bytes left in the segment).
        total_size: u32,
    },
}

/// A validated record borrowed from a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    bytes: &'a [u8],
    version: MessageVersion,
    born_host: SocketAddr,
    store_host: SocketAddr,
    body_start: u32,
    body_len: u32,
    topic_start: u32,
    topic_len: u32,
    properties_start: u32,
    properties_len: u32,
}

fn read_i32(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(array_at(bytes, at))
}

fn read_i64(bytes: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(array_at(bytes, at))
}

/// Decodes what starts at `buf[0]`: a record or the BLANK marker. `buf` may hold
/// more bytes after it.
///
/// # Errors
///
/// [`RecordError::Truncated`] when `buf` ends before the record: a torn tail,
/// or a corrupt TOTALSIZE larger than what is left; a CommitLog scan ends at
/// either. Any other variant means the bytes are not a valid record (zero-filled,
/// never-written space reads as [`RecordError::UnknownMagic`]`(0)`).
pub fn decode_entry(buf: &[u8], crc: CrcCheck) -> Result<Decoded<'_>, RecordError> {
    if buf.len() < END_FILE_MIN_BLANK_LENGTH {
        return Err(RecordError::Truncated {
            needed: END_FILE_MIN_BLANK_LENGTH,
            available: buf.len(),
        });
    }
    let declared = read_i32(buf, 0);
    let magic = read_i32(buf, MAGIC_CODE_POSITION) as u32;
    if magic == MAGIC_CODE_BLANK {
        // Java returns "end of file" without looking at TOTALSIZE; a marker
        // smaller than itself can only be corruption.
        return match u32::try_from(declared) {
            Ok(total_size) if total_size as usize >= END_FILE_MIN_BLANK_LENGTH => {
                Ok(Decoded::Blank { total_size })
            }
            _ => Err(RecordError::TotalSizeTooSmall {
                declared,
                min: END_FILE_MIN_BLANK_LENGTH,
            }),
        };
    }
    let version = MessageVersion::from_magic_code(magic).ok_or(RecordError::UnknownMagic(magic))?;
    let total_size = match usize::try_from(declared) {
        Ok(size) if size >= RECORD_SIZE_MIN => size,
        _ => {
            return Err(RecordError::TotalSizeTooSmall {
                declared,
                min: RECORD_SIZE_MIN,
            });
        }
    };
    let Some(bytes) = buf.get(..total_size) else {
        return Err(RecordError::Truncated {
            needed: total_size,
            available: buf.len(),
        });
    };
    let view = parse_fields(bytes, version)?;
    if crc == CrcCheck::Verify {
        verify_body_crc(&view)?;
    }
    Ok(Decoded::Record(view))
}

/// Checks BODYCRC against the body; returns the body's CRC-32 unmasked (as
/// `crc32fast::hash(body)`), for callers that go on to CRC the record.
///
/// # Errors
/// [`RecordError::BodyCrcMismatch`].
pub fn verify_body_crc(view: &RecordView<'_>) -> Result<u32, RecordError> {
    let raw = crc32_ieee(view.body());
    let computed = raw & BODY_CRC_MASK;
    if computed != view.body_crc() {
        return Err(RecordError::BodyCrcMismatch {
            stored: view.body_crc(),
            computed,
        });
    }
    Ok(raw)
}

/// Decodes the record at `buf[0]`.
///
/// # Errors
///
/// As [`decode_entry`], and [`RecordError::UnexpectedBlank`] for the BLANK marker.
pub fn decode_record(buf: &[u8], crc: CrcCheck) -> Result<RecordView<'_>, RecordError> {
    match decode_entry(buf, crc)? {
        Decoded::Record(view) => Ok(view),
        Decoded::Blank { total_size } => Err(RecordError::UnexpectedBlank { total_size }),
    }
}

/// Reads the variable part of a record of exactly `bytes.len()` = TOTALSIZE bytes.
fn parse_fields(bytes: &[u8], version: MessageVersion) -> Result<RecordView<'_>, RecordError> {
    let total = bytes.len();
    let declared = total as u32;
    let overrun = |computed: usize| RecordError::TotalSizeMismatch { declared, computed };
    let sys_flag = read_i32(bytes, SYS_FLAG_POSITION);
    let born_size = layout::born_host_size(sys_flag);
    let store_size = layout::store_host_size(sys_flag);
    // Fixed part: everything up to and including BODYLENGTH.
    let store_host_at = BORN_HOST_POSITION + born_size + 8;
    let body_len_at = store_host_at + store_size + 4 + 8;
    let body_start = body_len_at + 4;
    if body_start > total {
        return Err(overrun(body_start));
    }
    let born_host = layout::read_host(&bytes[BORN_HOST_POSITION..], born_size).map_err(|port| {
        RecordError::PortOutOfRange {
            field: "born host",
            port,
        }
    })?;
    let store_host = layout::read_host(&bytes[store_host_at..], store_size).map_err(|port| {
        RecordError::PortOutOfRange {
            field: "store host",
            port,
        }
    })?;
    let body_len = read_i32(bytes, body_len_at);
    let body_len = usize::try_from(body_len).map_err(|_| RecordError::NegativeLength {
        field: "body length",
        value: body_len,
    })?;
    let topic_len_at = body_start + body_len;
    let topic_start = topic_len_at + version.topic_length_size();
    if topic_start > total {
        return Err(overrun(topic_start));
    }
    let topic_len = match version {
        MessageVersion::V1 => i32::from(bytes[topic_len_at] as i8),
        MessageVersion::V2 => i32::from(i16::from_be_bytes(array_at(bytes, topic_len_at))),
    };
    let topic_len = usize::try_from(topic_len).map_err(|_| RecordError::NegativeLength {
        field: "topic length",
        value: topic_len,
    })?;
    let properties_len_at = topic_start + topic_len;
    let properties_start = properties_len_at + 2;
    if properties_start > total {
        return Err(overrun(properties_start));
    }
    let properties_len = i16::from_be_bytes(array_at(bytes, properties_len_at));
    let properties_len =
        usize::try_from(properties_len).map_err(|_| RecordError::NegativeLength {
            field: "properties length",
            value: i32::from(properties_len),
        })?;
    let computed = properties_start + properties_len;
    if computed != total {
        return Err(overrun(computed));
    }
    if std::str::from_utf8(&bytes[topic_start..properties_len_at]).is_err() {
        return Err(RecordError::TopicNotUtf8);
    }
    // Every position is below TOTALSIZE, which fits an i32.
    Ok(RecordView {
        bytes,
        version,
        born_host,
        store_host,
        body_start: body_start as u32,
        body_len: body_len as u32,
        topic_start: topic_start as u32,
        topic_len: topic_len as u32,
        properties_start: properties_start as u32,
        properties_len: properties_len as u32,
    })
}

impl<'a> RecordView<'a> {
    /// The record's bytes, exactly TOTALSIZE of them.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// TOTALSIZE.
    pub fn total_size(&self) -> u32 {
        self.bytes.len() as u32
    }
    /// The version named by MAGICCODE.
    pub fn version(&self) -> MessageVersion {
        self.version
    }
    /// BODYCRC as stored.
    pub fn body_crc(&self) -> u32 {
        read_i32(self.bytes, layout::BODY_CRC_POSITION) as u32
    }
    /// QUEUEID.
    pub fn queue_id(&self) -> i32 {
        read_i32(self.bytes, QUEUE_ID_POSITION)
    }
    /// FLAG.
    pub fn flag(&self) -> i32 {
        read_i32(self.bytes, FLAG_POSITION)
    }
    /// QUEUEOFFSET.
    pub fn queue_offset(&self) -> i64 {
        read_i64(self.bytes, QUEUE_OFFSET_POSITION)
    }
    /// PHYSICALOFFSET.
    pub fn commit_log_offset(&self) -> i64 {
        read_i64(self.bytes, COMMIT_LOG_OFFSET_POSITION)
    }
    /// SYSFLAG.
    pub fn sys_flag(&self) -> i32 {
        read_i32(self.bytes, SYS_FLAG_POSITION)
    }
    /// BORNTIMESTAMP in ms.
    pub fn born_timestamp_ms(&self) -> i64 {
        read_i64(self.bytes, layout::BORN_TIMESTAMP_POSITION)
    }
    /// BORNHOST (IPv6 flow info and scope id are not stored and read as 0).
    pub fn born_host(&self) -> SocketAddr {
        self.born_host
    }
    /// STORETIMESTAMP in ms.
    pub fn store_timestamp_ms(&self) -> i64 {
        read_i64(
            self.bytes,
            layout::store_timestamp_position(self.sys_flag()),
        )
    }
    /// STOREHOSTADDRESS.
    pub fn store_host(&self) -> SocketAddr {
        self.store_host
    }
    fn after_store_host(&self) -> usize {
        let sys_flag = self.sys_flag();
        layout::store_timestamp_position(sys_flag) + 8 + layout::store_host_size(sys_flag)
    }
    /// RECONSUMETIMES.
    pub fn reconsume_times(&self) -> i32 {
        read_i32(self.bytes, self.after_store_host())
    }
    /// PREPAREDTRANSACTIONOFFSET.
    pub fn prepared_transaction_offset(&self) -> i64 {
        read_i64(self.bytes, self.after_store_host() + 4)
    }
    /// BODY as stored.
    pub fn body(&self) -> &'a [u8] {
        &self.bytes[self.body_range()]
    }
    /// Where BODY lies in [`RecordView::as_bytes`].
    pub fn body_range(&self) -> std::ops::Range<usize> {
        let start = self.body_start as usize;
        start..start + self.body_len as usize
    }
    /// TOPIC (checked UTF-8 at decode).
    pub fn topic(&self) -> &'a str {
        let start = self.topic_start as usize;
        let topic = &self.bytes[start..start + self.topic_len as usize];
        std::str::from_utf8(topic).expect("invariant: topic checked UTF-8 in parse_fields")
    }
    /// PROPERTIES as raw bytes.
    pub fn properties_bytes(&self) -> &'a [u8] {
        let start = self.properties_start as usize;
        &self.bytes[start..start + self.properties_len as usize]
    }
    /// PROPERTIES as text.
    ///
    /// # Errors
    ///
    /// [`RecordError::PropertiesNotUtf8`].
    pub fn properties_str(&self) -> Result<&'a str, RecordError> {
        std::str::from_utf8(self.properties_bytes()).map_err(|_| RecordError::PropertiesNotUtf8)
    }
    /// PROPERTIES, parsed lazily for lookups.
    pub fn properties(&self) -> Properties<'a> {
        Properties::new(self.properties_bytes())
    }
    /// The value of one property (last duplicate wins, as in Java).
    pub fn property(&self, key: &str) -> Option<&'a str> {
        self.properties().get(key)
    }

    /// The fields as a spec that re-encodes to these exact bytes (stored CRC and
    /// version included).
    pub fn to_spec(&self) -> RecordSpec<'a> {
        RecordSpec {
            topic: self.topic(),
            body: self.body(),
            properties: self.properties_bytes(),
            queue_id: self.queue_id(),
            flag: self.flag(),
            queue_offset: self.queue_offset(),
            commit_log_offset: self.commit_log_offset(),
            sys_flag: self.sys_flag(),
            born_timestamp_ms: self.born_timestamp_ms(),
            born_host: self.born_host(),
            store_timestamp_ms: self.store_timestamp_ms(),
            store_host: self.store_host(),
            reconsume_times: self.reconsume_times(),
            prepared_transaction_offset: self.prepared_transaction_offset(),
            body_crc: Some(self.body_crc()),
            version: Some(self.version),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::encode::{body_crc, encode_blank};
    use crate::message::layout::{
        MAGIC_CODE_V1, MAGIC_CODE_V2, SYS_FLAG_BORN_HOST_V6, SYS_FLAG_STORE_HOST_V6,
    };
    use crate::message::peek::*;

    const BORN: &str = "10.0.0.7:54321";
    const STORE: &str = "192.168.0.10:10911";

    fn spec<'a>(topic: &'a str, body: &'a [u8], properties: &'a [u8]) -> RecordSpec<'a> {
        RecordSpec {
            topic,
            body,
            properties,
            queue_id: 3,
            flag: -7,
            queue_offset: 42,
            commit_log_offset: 1024,
            sys_flag: 0x301,
            born_timestamp_ms: 1_700_000_000_000,
            born_host: BORN.parse().unwrap(),
            store_timestamp_ms: 1_700_000_000_123,
            store_host: STORE.parse().unwrap(),
            reconsume_times: 2,
            prepared_transaction_offset: 77,
            body_crc: None,
            version: None,
        }
    }

    fn be32(bytes: &[u8], at: usize) -> u32 {
        u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap())
    }

    fn be64(bytes: &[u8], at: usize) -> u64 {
        u64::from_be_bytes(bytes[at..at + 8].try_into().unwrap())
    }

    fn encode(spec: &RecordSpec<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        spec.encode_append(&mut out).unwrap();
        out
    }

    #[test]
    fn v1_ipv4_record_has_every_field_at_its_reference_position() {
        let props = b"TAGS\x01TagA\x02";
        let out = encode(&spec("TopicTest", b"hello", props));
        // TOTALSIZE = 91 + n + t + p = 91 + 5 + 9 + 10.
        assert_eq!(out.len(), 115);
        assert_eq!(be32(&out, 0), 115);
        assert_eq!(be32(&out, 4), MAGIC_CODE_V1);
        assert_eq!(be32(&out, 8), body_crc(b"hello"));
        assert_eq!(be32(&out, 12), 3);
        assert_eq!(be32(&out, 16) as i32, -7);
        assert_eq!(be64(&out, 20), 42);
        assert_eq!(be64(&out, 28), 1024);
        assert_eq!(be32(&out, 36), 0x301);
        assert_eq!(be64(&out, 40), 1_700_000_000_000);
        assert_eq!(out[48..52], [10, 0, 0, 7]);
        assert_eq!(be32(&out, 52), 54321);
        assert_eq!(be64(&out, 56), 1_700_000_000_123);
        assert_eq!(out[64..68], [192, 168, 0, 10]);
        assert_eq!(be32(&out, 68), 10911);
        assert_eq!(be32(&out, 72), 2);
        assert_eq!(be64(&out, 76), 77);
        assert_eq!(be32(&out, 84), 5);
        assert_eq!(&out[88..93], b"hello");
        assert_eq!(out[93], 9);
        assert_eq!(&out[94..103], b"TopicTest");
        assert_eq!(out[103..105], [0, 10]);
        assert_eq!(&out[105..], props);

        let view = decode_record(&out, CrcCheck::Verify).unwrap();
        assert_eq!(
            view.to_spec(),
            RecordSpec {
                body_crc: Some(body_crc(b"hello")),
                version: Some(MessageVersion::V1),
                ..spec("TopicTest", b"hello", props)
            }
        );
        assert_eq!(view.property("TAGS"), Some("TagA"));
        assert_eq!(view.properties_str(), Ok("TAGS\x01TagA\x02"));
    }

    #[test]
    fn long_topic_selects_v2_with_two_byte_topic_length() {
        let topic = "t".repeat(200);
        let out = encode(&spec(&topic, b"b", b""));
        assert_eq!(out.len(), 91 + 1 + 200 + 1);
        assert_eq!(be32(&out, 4), MAGIC_CODE_V2);
        assert_eq!(out[89..91], 200u16.to_be_bytes());
        let view = decode_record(&out, CrcCheck::Verify).unwrap();
        assert_eq!(view.version(), MessageVersion::V2);
        assert_eq!(view.topic(), topic);
    }

    #[test]
    fn forced_v2_with_short_topic_round_trips() {
        let spec = RecordSpec {
            version: Some(MessageVersion::V2),
            ..spec("T", b"b", b"")
        };
        let out = encode(&spec);
        assert_eq!(out.len(), 91 + 1 + 1 + 1);
        assert_eq!(
            decode_record(&out, CrcCheck::Verify)
                .unwrap()
                .to_spec()
                .version,
            Some(MessageVersion::V2)
        );
    }

    #[test]
    fn ipv6_hosts_add_twelve_bytes_each_and_set_sys_flag_bits() {
        let born: SocketAddr = "[2001:db8::1]:4000".parse().unwrap();
        let store: SocketAddr = "[fe80::2]:10911".parse().unwrap();
        let spec = RecordSpec {
            born_host: born,
            store_host: store,
            sys_flag: 0,
            ..spec("T", b"body", b"")
        };
        let out = encode(&spec);
        assert_eq!(out.len(), 91 + 4 + 1 + 24);
        let flag = be32(&out, 36) as i32;
        assert_eq!(flag, SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6);
        // Born host 48..68, store timestamp 68..76, store host 76..96, then
        // reconsume times at 96 and the body at 88 + 24 = 112.
        let SocketAddr::V6(born_v6) = born else {
            unreachable!()
        };
        assert_eq!(out[48..64], born_v6.ip().octets());
        assert_eq!(be32(&out, 64), 4000);
        assert_eq!(be64(&out, 68), 1_700_000_000_123);
        assert_eq!(be32(&out, 92), 10911);
        assert_eq!(be32(&out, 96), 2);
        assert_eq!(&out[112..116], b"body");
        assert_eq!(peek_store_timestamp_ms(&out), Ok(1_700_000_000_123));
        let view = decode_record(&out, CrcCheck::Verify).unwrap();
        assert_eq!(view.born_host(), born);
        assert_eq!(view.store_host(), store);
        assert_eq!(view.reconsume_times(), 2);
        assert_eq!(view.prepared_transaction_offset(), 77);
        assert_eq!(view.body(), b"body");
    }

    #[test]
    fn ipv6_bits_in_spec_are_cleared_for_ipv4_hosts() {
        let spec = RecordSpec {
            sys_flag: 0x31,
            ..spec("T", b"", b"")
        };
        let out = encode(&spec);
        assert_eq!(be32(&out, 36), 0x1);
        assert_eq!(out.len(), 92);
    }

    #[test]
    fn blank_marker_is_recognised_and_written() {
        let mut out = [0u8; 16];
        assert_eq!(encode_blank(&mut out, 4096), Ok(8));
        assert_eq!(be32(&out, 0), 4096);
        assert_eq!(be32(&out, 4), MAGIC_CODE_BLANK);
        assert_eq!(
            decode_entry(&out, CrcCheck::Verify),
            Ok(Decoded::Blank { total_size: 4096 })
        );
        assert_eq!(
            decode_record(&out, CrcCheck::Verify),
            Err(RecordError::UnexpectedBlank { total_size: 4096 })
        );
        assert!(encode_blank(&mut out, 7).is_err());
        assert!(encode_blank(&mut out[..7], 8).is_err());
        out[..4].copy_from_slice(&4i32.to_be_bytes());
        assert_eq!(
            decode_entry(&out, CrcCheck::Skip),
            Err(RecordError::TotalSizeTooSmall {
                declared: 4,
                min: 8
            })
        );
    }

    #[test]
    fn crc_mismatch_is_detected_only_when_verifying() {
        let mut out = encode(&spec("T", b"payload", b""));
        out[88] ^= 1;
        let computed = body_crc(&out[88..95]);
        assert_eq!(
            decode_record(&out, CrcCheck::Verify),
            Err(RecordError::BodyCrcMismatch {
                stored: body_crc(b"payload"),
                computed
            })
        );
        assert!(decode_record(&out, CrcCheck::Skip).is_ok());
    }

    #[test]
    fn truncated_record_at_every_length_is_an_error() {
        let out = encode(&spec("TopicTest", b"hello", b"a\x01b\x02"));
        for len in 0..out.len() {
            let err = decode_entry(&out[..len], CrcCheck::Verify).unwrap_err();
            assert!(
                matches!(err, RecordError::Truncated { .. }),
                "len {len}: {err:?}"
            );
        }
        assert!(decode_entry(&out, CrcCheck::Verify).is_ok());
    }

    #[test]
    fn inconsistent_lengths_are_rejected() {
        let good = encode(&spec("T", b"abc", b"k\x01v"));
        // TOTALSIZE one larger than the fields (buffer padded so it is not truncation).
        let mut padded = good.clone();
        padded.push(0);
        padded[3] += 1;
        assert_eq!(
            decode_record(&padded, CrcCheck::Skip),
            Err(RecordError::TotalSizeMismatch {
                declared: good.len() as u32 + 1,
                computed: good.len()
            })
        );
        // Body length running past TOTALSIZE.
        let mut bad = good.clone();
        bad[84..88].copy_from_slice(&1000i32.to_be_bytes());
        assert!(matches!(
            decode_record(&bad, CrcCheck::Skip),
            Err(RecordError::TotalSizeMismatch { .. })
        ));
        // Negative body length.
        let mut bad = good.clone();
        bad[84..88].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            decode_record(&bad, CrcCheck::Skip),
            Err(RecordError::NegativeLength {
                field: "body length",
                value: -1
            })
        );
        // V1 topic length byte above 127 reads as negative, as in Java.
        let mut bad = good.clone();
        bad[91] = 0x80;
        assert_eq!(
            decode_record(&bad, CrcCheck::Skip),
            Err(RecordError::NegativeLength {
                field: "topic length",
                value: -128
            })
        );
        // Unknown magic and a TOTALSIZE below the minimum.
        let mut bad = good.clone();
        bad[7] ^= 0xFF;
        assert!(matches!(
            decode_record(&bad, CrcCheck::Skip),
            Err(RecordError::UnknownMagic(_))
        ));
        let mut bad = good;
        bad[..4].copy_from_slice(&90i32.to_be_bytes());
        assert_eq!(
            decode_record(&bad, CrcCheck::Skip),
            Err(RecordError::TotalSizeTooSmall {
                declared: 90,
                min: 91
            })
        );
    }

    #[test]
    fn out_of_range_port_and_non_utf8_topic_are_rejected() {
        let good = encode(&spec("T", b"", b""));
        let mut bad = good.clone();
        bad[52..56].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            decode_record(&bad, CrcCheck::Skip),
            Err(RecordError::PortOutOfRange {
                field: "born host",
                port: -1
            })
        );
        let mut bad = good;
        bad[89] = 0xFF;
        assert_eq!(
            decode_record(&bad, CrcCheck::Skip),
            Err(RecordError::TopicNotUtf8)
        );
    }

    #[test]
    fn record_is_decoded_from_a_longer_buffer() {
        let mut out = encode(&spec("T", b"x", b""));
        let len = out.len();
        out.extend_from_slice(&[0xAB; 10]);
        assert_eq!(
            decode_record(&out, CrcCheck::Verify)
                .unwrap()
                .as_bytes()
                .len(),
            len
        );
    }

    #[test]
    fn peeks_and_patches_use_fixed_positions() {
        let mut out = encode(&spec("T", b"x", b""));
        assert_eq!(peek_total_size(&out), Ok(out.len() as i32));
        assert_eq!(peek_magic_code(&out), Ok(MAGIC_CODE_V1));
        assert_eq!(peek_queue_offset(&out), Ok(42));
        assert_eq!(peek_commit_log_offset(&out), Ok(1024));
        assert_eq!(peek_sys_flag(&out), Ok(0x301));
        patch_queue_offset(&mut out, 43).unwrap();
        patch_commit_log_offset(&mut out, 2048).unwrap();
        patch_store_timestamp_ms(&mut out, 9).unwrap();
        let view = decode_record(&out, CrcCheck::Verify).unwrap();
        assert_eq!(
            (
                view.queue_offset(),
                view.commit_log_offset(),
                view.store_timestamp_ms()
            ),
            (43, 2048, 9)
        );
        assert_eq!(
            peek_queue_offset(&out[..27]),
            Err(RecordError::Truncated {
                needed: 28,
                available: 27
            })
        );
        assert!(patch_store_timestamp_ms(&mut out[..60], 1).is_err());
    }
}
