//! Encoding a stored message record from its fields ([`RecordSpec`]) into a
//! caller's buffer, with no intermediate allocation (layout in
//! [`super::layout`], reference 4.1), and the end-of-file BLANK marker (4.2):
//! `[total_size i32 = bytes left in the segment][0xCBD43194]`.
//!
//! # Invariants
//!
//! - [`RecordSpec::encode_into`] writes exactly [`RecordSpec::encoded_len`] bytes
//!   or nothing (it checks every limit and the output size before the first write).
//! - The written TOTALSIZE equals the byte count, the `sysFlag` IPv6 bits match the
//!   hosts, and BODYCRC is `crc32(body) & 0x7FFFFFFF`.
//! - Version V2 iff forced, or the topic is longer than 127 bytes.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use bytes::BytesMut;

use super::crc32::crc32_ieee;
use super::error::RecordError;
use super::layout::{
    self, END_FILE_MIN_BLANK_LENGTH, HOST_SIZE_IPV4, MAGIC_CODE_BLANK, MessageVersion,
    RECORD_FIXED_SIZE_IPV4, host_size, write_host,
};
use crate::limits::PROPERTIES_SIZE_MAX;

/// Mask Java applies to the CRC-32 of a body (`UtilAll.crc32`).
pub const BODY_CRC_MASK: u32 = 0x7FFF_FFFF;

/// BODYCRC of `body`: CRC-32/IEEE (`java.util.zip.CRC32`) `& 0x7FFFFFFF`.
pub fn body_crc(body: &[u8]) -> u32 {
    crc32_ieee(body) & BODY_CRC_MASK
}

/// The fields of one stored record, borrowed from the caller.
///
/// Offsets and timestamps are raw on-disk values (`i64`); the broker assigns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSpec<'a> {
    /// Topic (UTF-8).
    pub topic: &'a str,
    /// Body as stored (compressed if `sys_flag` says so).
    pub body: &'a [u8],
    /// Properties string as stored (see [`super::properties`]).
    pub properties: &'a [u8],
    /// QUEUEID.
    pub queue_id: i32,
    /// User FLAG.
    pub flag: i32,
    /// QUEUEOFFSET: logical offset in the ConsumeQueue.
    pub queue_offset: i64,
    /// PHYSICALOFFSET: CommitLog offset of this record's first byte.
    pub commit_log_offset: i64,
    /// SYSFLAG; its IPv6 bits are replaced from the hosts when encoding.
    pub sys_flag: i32,
    /// BORNTIMESTAMP (ms since the epoch, producer clock).
    pub born_timestamp_ms: i64,
    /// BORNHOST: the producer's socket address as the broker sees it. An
    /// IPv4-mapped IPv6 peer (`::ffff:a.b.c.d`, from a dual-stack listener) is
    /// stored as IPv6 unless the caller converts it first
    /// ([`std::net::IpAddr::to_canonical`]); Java normally sees such peers as IPv4.
    pub born_host: SocketAddr,
    /// STORETIMESTAMP (ms since the epoch, broker clock at append).
    pub store_timestamp_ms: i64,
    /// STOREHOSTADDRESS: the broker's `brokerIP1:listenPort`.
    pub store_host: SocketAddr,
    /// RECONSUMETIMES.
    pub reconsume_times: i32,
    /// PREPAREDTRANSACTIONOFFSET (0 unless a committed / rolled-back transaction).
    pub prepared_transaction_offset: i64,
    /// A BODYCRC computed earlier (masked with [`BODY_CRC_MASK`] when written);
    /// `None` computes it during encoding.
    pub body_crc: Option<u32>,
    /// Force a version; `None` picks it from the topic length like Java's
    /// `autoMessageVersionOnTopicLen`.
    pub version: Option<MessageVersion>,
}

const UNSPECIFIED_HOST: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

impl Default for RecordSpec<'_> {
    /// Empty topic, body and properties, zero numbers, hosts `0.0.0.0:0`.
    fn default() -> Self {
        RecordSpec {
            topic: "",
            body: &[],
            properties: &[],
            queue_id: 0,
            flag: 0,
            queue_offset: 0,
            commit_log_offset: 0,
            sys_flag: 0,
            born_timestamp_ms: 0,
            born_host: UNSPECIFIED_HOST,
            store_timestamp_ms: 0,
            store_host: UNSPECIFIED_HOST,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body_crc: None,
            version: None,
        }
    }
}

impl RecordSpec<'_> {
    /// The version this spec encodes as.
    pub fn resolved_version(&self) -> MessageVersion {
        self.version
            .unwrap_or_else(|| MessageVersion::for_topic_len(self.topic.len()))
    }

    /// SYSFLAG as it will be written: the IPv6 bits follow the hosts.
    pub fn resolved_sys_flag(&self) -> i32 {
        layout::sys_flag_for_hosts(self.sys_flag, &self.born_host, &self.store_host)
    }

    /// TOTALSIZE of the encoding:
    /// `91 + n + t + p` for IPv4 hosts and V1, +12 per IPv6 host, +1 for V2.
    pub fn encoded_len(&self) -> usize {
        RECORD_FIXED_SIZE_IPV4 + host_size(&self.born_host) - HOST_SIZE_IPV4
            + host_size(&self.store_host)
            - HOST_SIZE_IPV4
            + self.resolved_version().topic_length_size()
            + self.body.len()
            + self.topic.len()
            + self.properties.len()
    }

    /// Checks the format limits; returns the encoded length.
    fn check(&self) -> Result<usize, RecordError> {
        let version = self.resolved_version();
        if self.topic.len() > version.topic_len_max() {
            return Err(RecordError::TopicTooLong {
                len: self.topic.len(),
                max: version.topic_len_max(),
                version: version.name(),
            });
        }
        if self.properties.len() > PROPERTIES_SIZE_MAX {
            return Err(RecordError::PropertiesTooLong {
                len: self.properties.len(),
                max: PROPERTIES_SIZE_MAX,
            });
        }
        if i32::try_from(self.body.len()).is_err() {
            return Err(RecordError::TooLarge {
                field: "body",
                len: self.body.len(),
            });
        }
        let len = self.encoded_len();
        if i32::try_from(len).is_err() {
            return Err(RecordError::TooLarge {
                field: "record",
                len,
            });
        }
        Ok(len)
    }

    /// Writes the record at the start of `out`; returns its length.
    ///
    /// # Errors
    ///
    /// [`RecordError::TopicTooLong`] (V1 forced with a topic over 127 bytes),
    /// [`RecordError::PropertiesTooLong`] (over 32767 bytes),
    /// [`RecordError::TooLarge`] (body or record over `i32::MAX`),
    /// [`RecordError::OutputTooSmall`]. Nothing is written on error.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize, RecordError> {
        let len = self.check()?;
        let Some(out) = out.get_mut(..len) else {
            return Err(RecordError::OutputTooSmall {
                needed: len,
                available: out.len(),
            });
        };
        self.write(out);
        Ok(len)
    }

    /// Writes the record into `out`, which [`RecordSpec::check`] sized exactly.
    fn write(&self, out: &mut [u8]) {
        let len = out.len();
        let version = self.resolved_version();
        let crc = self
            .body_crc
            .map_or_else(|| body_crc(self.body), |crc| crc & BODY_CRC_MASK);
        // Lengths were checked against i32/i16 limits above.
        let total_size = len as i32;
        let mut w = Writer { out, at: 0 };
        w.i32(total_size);
        w.u32(version.magic_code());
        w.u32(crc);
        w.i32(self.queue_id);
        w.i32(self.flag);
        w.i64(self.queue_offset);
        w.i64(self.commit_log_offset);
        w.i32(self.resolved_sys_flag());
        w.i64(self.born_timestamp_ms);
        w.host(&self.born_host);
        w.i64(self.store_timestamp_ms);
        w.host(&self.store_host);
        w.i32(self.reconsume_times);
        w.i64(self.prepared_transaction_offset);
        w.i32(self.body.len() as i32);
        w.bytes(self.body);
        match version {
            MessageVersion::V1 => w.bytes(&[self.topic.len() as u8]),
            MessageVersion::V2 => w.bytes(&(self.topic.len() as i16).to_be_bytes()),
        }
        w.bytes(self.topic.as_bytes());
        w.bytes(&(self.properties.len() as i16).to_be_bytes());
        w.bytes(self.properties);
        assert!(w.at == len, "record encoder wrote {} of {len} bytes", w.at);
    }

    /// Appends the record to `out` (growing it once); returns its length.
    ///
    /// # Errors
    ///
    /// As [`RecordSpec::encode_into`]; `out` is unchanged on error.
    pub fn encode_append(&self, out: &mut Vec<u8>) -> Result<usize, RecordError> {
        let start = out.len();
        let len = self.check()?;
        out.resize(start + len, 0);
        self.write(&mut out[start..]);
        Ok(len)
    }

    /// [`RecordSpec::encode_append`] for a [`BytesMut`].
    ///
    /// # Errors
    ///
    /// As [`RecordSpec::encode_into`]; `out` is unchanged on error.
    pub fn encode_append_bytes(&self, out: &mut BytesMut) -> Result<usize, RecordError> {
        let start = out.len();
        let len = self.check()?;
        out.resize(start + len, 0);
        self.write(&mut out[start..]);
        Ok(len)
    }
}

/// A cursor over an output slice already checked to be exactly the record's size.
struct Writer<'b> {
    out: &'b mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, bytes: &[u8]) {
        self.out[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }
    fn i32(&mut self, value: i32) {
        self.bytes(&value.to_be_bytes());
    }
    fn u32(&mut self, value: u32) {
        self.bytes(&value.to_be_bytes());
    }
    fn i64(&mut self, value: i64) {
        self.bytes(&value.to_be_bytes());
    }
    fn host(&mut self, host: &SocketAddr) {
        self.at += write_host(&mut self.out[self.at..], host);
    }
}

/// Writes the end-of-file marker of `total_size` bytes (the rest of the segment)
/// at the start of `out`; only its 8 bytes are written. Returns 8.
///
/// # Errors
///
/// [`RecordError::TotalSizeTooSmall`] if `total_size` < 8 or over `i32::MAX`;
/// [`RecordError::OutputTooSmall`] if `out` has fewer than 8 bytes.
pub fn encode_blank(out: &mut [u8], total_size: u32) -> Result<usize, RecordError> {
    let declared = i32::try_from(total_size).unwrap_or(i32::MIN);
    if declared < END_FILE_MIN_BLANK_LENGTH as i32 {
        return Err(RecordError::TotalSizeTooSmall {
            declared,
            min: END_FILE_MIN_BLANK_LENGTH,
        });
    }
    let Some(out) = out.get_mut(..END_FILE_MIN_BLANK_LENGTH) else {
        return Err(RecordError::OutputTooSmall {
            needed: END_FILE_MIN_BLANK_LENGTH,
            available: out.len(),
        });
    };
    out[..4].copy_from_slice(&declared.to_be_bytes());
    out[4..].copy_from_slice(&MAGIC_CODE_BLANK.to_be_bytes());
    Ok(END_FILE_MIN_BLANK_LENGTH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_crc_is_masked_crc32_ieee() {
        // CRC-32/IEEE check value of "123456789" is 0xCBF43926; masked drops bit 31.
        assert_eq!(body_crc(b"123456789"), 0xCBF4_3926 & 0x7FFF_FFFF);
        assert_eq!(body_crc(b""), 0);
    }

    #[test]
    fn encode_into_rejects_small_output_without_writing() {
        let spec = RecordSpec {
            topic: "T",
            body: b"x",
            ..RecordSpec::default()
        };
        let mut out = vec![0xEEu8; spec.encoded_len() - 1];
        let err = spec.encode_into(&mut out).unwrap_err();
        assert_eq!(
            err,
            RecordError::OutputTooSmall {
                needed: 93,
                available: 92
            }
        );
        assert!(out.iter().all(|b| *b == 0xEE));
    }

    #[test]
    fn encode_rejects_forced_v1_with_long_topic() {
        let topic = "t".repeat(128);
        let spec = RecordSpec {
            topic: &topic,
            version: Some(MessageVersion::V1),
            ..RecordSpec::default()
        };
        let mut out = Vec::new();
        assert!(matches!(
            spec.encode_append(&mut out),
            Err(RecordError::TopicTooLong { .. })
        ));
        assert!(out.is_empty());
    }

    #[test]
    fn encode_rejects_properties_over_32767_bytes() {
        let props = vec![b'a'; PROPERTIES_SIZE_MAX + 1];
        let spec = RecordSpec {
            topic: "T",
            properties: &props,
            ..RecordSpec::default()
        };
        assert_eq!(
            spec.encode_append(&mut Vec::new()),
            Err(RecordError::PropertiesTooLong {
                len: 32768,
                max: 32767
            })
        );
        let ok = vec![b'a'; PROPERTIES_SIZE_MAX];
        let spec = RecordSpec {
            topic: "T",
            properties: &ok,
            ..RecordSpec::default()
        };
        assert_eq!(spec.encode_append(&mut Vec::new()), Ok(91 + 1 + 32767));
    }

    #[test]
    fn precomputed_crc_is_written_masked() {
        let spec = RecordSpec {
            topic: "T",
            body_crc: Some(0xFFFF_FFFF),
            ..RecordSpec::default()
        };
        let mut out = Vec::new();
        spec.encode_append(&mut out).unwrap();
        assert_eq!(out[8..12], 0x7FFF_FFFFu32.to_be_bytes());
    }
}
