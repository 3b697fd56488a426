//! Byte layout of a stored message record: magic codes, field positions,
//! `sysFlag` bits and host encoding (remoting-protocol.md 4.1–4.3, 4.5, 10).
//!
//! ```text
//! pos (IPv4 hosts)
//!  0 [total_size i32][magic i32][body_crc i32][queue_id i32][flag i32]
//! 20 [queue_offset i64][commit_log_offset i64][sys_flag i32][born_timestamp i64]
//! 48 [born_host 4|16 + port i32][store_timestamp i64][store_host 4|16 + port i32]
//!    [reconsume_times i32][prepared_transaction_offset i64][body_len i32][body]
//!    [topic_len i8 (V1) | i16 (V2)][topic][properties_len i16][properties]
//! ```
//!
//! Every field up to and including `born_host` sits at a fixed position; later
//! fields move by 12 bytes for each IPv6 host (`sysFlag` bits 0x10 and 0x20).
//!
//! # Invariants
//!
//! - `TOTALSIZE == RECORD_FIXED_SIZE_IPV4 + 12·v6_hosts + topic_len_size + n + t + p`,
//!   i.e. `91 + n + t + p` for an IPv4/V1 record (checked at compile time below).
//! - The IPv6 bits of `sysFlag` decide the host lengths; encoders derive them from
//!   the addresses, so they never disagree in a record written here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// MAGICCODE of a V1 record (1-byte topic length). Java: `MESSAGE_MAGIC_CODE`.
pub const MAGIC_CODE_V1: u32 = 0xDAA3_20A7;
/// MAGICCODE of a V2 record (2-byte topic length). Java: `MESSAGE_MAGIC_CODE_V2`.
pub const MAGIC_CODE_V2: u32 = 0xDAA3_20AB;
/// MAGICCODE of the end-of-file marker. Java: `BLANK_MAGIC_CODE`.
pub const MAGIC_CODE_BLANK: u32 = 0xCBD4_3194;
/// Size of the end-of-file marker: TOTALSIZE and MAGICCODE. A record is written
/// only if `record_size + END_FILE_MIN_BLANK_LENGTH` fits in the segment.
pub const END_FILE_MIN_BLANK_LENGTH: usize = 8;

const _: () = assert!(MAGIC_CODE_V1 as i32 == -626_843_481);
const _: () = assert!(MAGIC_CODE_V2 as i32 == -626_843_477);
const _: () = assert!(MAGIC_CODE_BLANK as i32 == -875_286_124);

/// Position of TOTALSIZE (i32).
pub const TOTAL_SIZE_POSITION: usize = 0;
/// Position of MAGICCODE (i32).
pub const MAGIC_CODE_POSITION: usize = 4;
/// Position of BODYCRC (i32).
pub const BODY_CRC_POSITION: usize = 8;
/// Position of QUEUEID (i32).
pub const QUEUE_ID_POSITION: usize = 12;
/// Position of FLAG (i32).
pub const FLAG_POSITION: usize = 16;
/// Position of QUEUEOFFSET (i64).
pub const QUEUE_OFFSET_POSITION: usize = 20;
/// Position of PHYSICALOFFSET (i64), the record's own CommitLog offset.
pub const COMMIT_LOG_OFFSET_POSITION: usize = 28;
/// Position of SYSFLAG (i32).
pub const SYS_FLAG_POSITION: usize = 36;
/// Position of BORNTIMESTAMP (i64).
pub const BORN_TIMESTAMP_POSITION: usize = 40;
/// Position of BORNHOST.
pub const BORN_HOST_POSITION: usize = 48;
/// Position of STORETIMESTAMP when the born host is IPv4; add
/// [`HOST_SIZE_IPV6`] − [`HOST_SIZE_IPV4`] for an IPv6 born host.
pub const STORE_TIMESTAMP_POSITION_IPV4: usize = 56;

/// Encoded size of an IPv4 host: 4 address bytes and an i32 port.
pub const HOST_SIZE_IPV4: usize = 8;
/// Encoded size of an IPv6 host: 16 address bytes and an i32 port.
pub const HOST_SIZE_IPV6: usize = 20;

/// Bytes of a record without body, topic, properties and topic-length field,
/// with two IPv4 hosts.
pub const RECORD_FIXED_SIZE_IPV4: usize =
    4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + HOST_SIZE_IPV4 + 8 + HOST_SIZE_IPV4 + 4 + 8 + 4 + 2;

/// Smallest possible record: IPv4 hosts, V1, empty body, topic and properties.
pub const RECORD_SIZE_MIN: usize = RECORD_FIXED_SIZE_IPV4 + 1;

const _: () = assert!(RECORD_SIZE_MIN == 91);
const _: () = assert!(STORE_TIMESTAMP_POSITION_IPV4 == BORN_HOST_POSITION + HOST_SIZE_IPV4);
const _: () = assert!(SYS_FLAG_POSITION + 4 == BORN_TIMESTAMP_POSITION);

/// `sysFlag` bit: the body is compressed.
pub const SYS_FLAG_COMPRESSED: i32 = 0x1;
/// `sysFlag` bit: the topic filters by multiple tags.
pub const SYS_FLAG_MULTI_TAGS: i32 = 0x2;
/// `sysFlag` mask of the transaction type (bits 2–3).
pub const SYS_FLAG_TRANSACTION_MASK: i32 = 0xC;
/// Transaction type: not a transactional message.
pub const SYS_FLAG_TRANSACTION_NOT_TYPE: i32 = 0x0;
/// Transaction type: half (prepared) message.
pub const SYS_FLAG_TRANSACTION_PREPARED_TYPE: i32 = 0x4;
/// Transaction type: committed message.
pub const SYS_FLAG_TRANSACTION_COMMIT_TYPE: i32 = 0x8;
/// Transaction type: rolled-back message.
pub const SYS_FLAG_TRANSACTION_ROLLBACK_TYPE: i32 = 0xC;
/// `sysFlag` bit: the born host is IPv6.
pub const SYS_FLAG_BORN_HOST_V6: i32 = 0x10;
/// `sysFlag` bit: the store host is IPv6.
pub const SYS_FLAG_STORE_HOST_V6: i32 = 0x20;
/// `sysFlag` bit: 5.x inner batch that consumers unwrap.
pub const SYS_FLAG_NEED_UNWRAP: i32 = 0x40;
/// `sysFlag` bit: 5.x inner batch.
pub const SYS_FLAG_INNER_BATCH: i32 = 0x80;
/// `sysFlag` mask of the compression type (bits 8–10).
pub const SYS_FLAG_COMPRESSION_TYPE_MASK: i32 = 0x700;
/// Compression type LZ4.
pub const SYS_FLAG_COMPRESSION_LZ4: i32 = 0x100;
/// Compression type ZSTD.
pub const SYS_FLAG_COMPRESSION_ZSTD: i32 = 0x200;
/// Compression type ZLIB (0 also means ZLIB, from pre-5.x producers).
pub const SYS_FLAG_COMPRESSION_ZLIB: i32 = 0x300;

/// The transaction type bits of `sys_flag` (one of the `SYS_FLAG_TRANSACTION_*`).
pub fn transaction_type(sys_flag: i32) -> i32 {
    sys_flag & SYS_FLAG_TRANSACTION_MASK
}

/// `sys_flag` with its transaction type replaced by `transaction_type`, as the
/// broker rewrites it for half, commit and rollback records.
///
/// # Panics
///
/// If `transaction_type` has bits outside [`SYS_FLAG_TRANSACTION_MASK`]: callers
/// pass one of the `SYS_FLAG_TRANSACTION_*` constants.
pub fn with_transaction_type(sys_flag: i32, transaction_type: i32) -> i32 {
    assert!(
        transaction_type & !SYS_FLAG_TRANSACTION_MASK == 0,
        "transaction type {transaction_type:#x} outside mask"
    );
    (sys_flag & !SYS_FLAG_TRANSACTION_MASK) | transaction_type
}

/// Whether a record of this `sys_flag` gets a ConsumeQueue entry: only NOT and
/// COMMIT records are dispatched (4.3).
pub fn is_dispatched_to_consume_queue(sys_flag: i32) -> bool {
    matches!(
        transaction_type(sys_flag),
        SYS_FLAG_TRANSACTION_NOT_TYPE | SYS_FLAG_TRANSACTION_COMMIT_TYPE
    )
}

/// Encoded size of the born host given `sys_flag`.
pub fn born_host_size(sys_flag: i32) -> usize {
    if sys_flag & SYS_FLAG_BORN_HOST_V6 != 0 {
        HOST_SIZE_IPV6
    } else {
        HOST_SIZE_IPV4
    }
}

/// Encoded size of the store host given `sys_flag`.
pub fn store_host_size(sys_flag: i32) -> usize {
    if sys_flag & SYS_FLAG_STORE_HOST_V6 != 0 {
        HOST_SIZE_IPV6
    } else {
        HOST_SIZE_IPV4
    }
}

/// Position of STORETIMESTAMP given `sys_flag` (it follows the born host).
pub fn store_timestamp_position(sys_flag: i32) -> usize {
    BORN_HOST_POSITION + born_host_size(sys_flag)
}

/// `sys_flag` with its two IPv6 bits set from the host addresses.
pub fn sys_flag_for_hosts(sys_flag: i32, born_host: &SocketAddr, store_host: &SocketAddr) -> i32 {
    let mut flag = sys_flag & !(SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6);
    if born_host.is_ipv6() {
        flag |= SYS_FLAG_BORN_HOST_V6;
    }
    if store_host.is_ipv6() {
        flag |= SYS_FLAG_STORE_HOST_V6;
    }
    flag
}

/// Encoded size of `host`.
pub fn host_size(host: &SocketAddr) -> usize {
    if host.is_ipv6() {
        HOST_SIZE_IPV6
    } else {
        HOST_SIZE_IPV4
    }
}

/// The record (and msg id) version: it decides the width of the topic length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageVersion {
    /// Magic `0xDAA320A7`, topic length in a signed byte (≤ 127).
    V1,
    /// Magic `0xDAA320AB`, topic length in an i16.
    V2,
}

impl MessageVersion {
    /// The MAGICCODE of this version.
    pub fn magic_code(self) -> u32 {
        match self {
            MessageVersion::V1 => MAGIC_CODE_V1,
            MessageVersion::V2 => MAGIC_CODE_V2,
        }
    }

    /// The version a MAGICCODE names, or `None` (BLANK or unknown).
    pub fn from_magic_code(magic_code: u32) -> Option<MessageVersion> {
        match magic_code {
            MAGIC_CODE_V1 => Some(MessageVersion::V1),
            MAGIC_CODE_V2 => Some(MessageVersion::V2),
            _ => None,
        }
    }

    /// Width of the topic length field: 1 or 2 bytes.
    pub fn topic_length_size(self) -> usize {
        match self {
            MessageVersion::V1 => 1,
            MessageVersion::V2 => 2,
        }
    }

    /// Longest topic this version stores (Java reads V1's byte as signed).
    pub fn topic_len_max(self) -> usize {
        match self {
            MessageVersion::V1 => i8::MAX as usize,
            MessageVersion::V2 => i16::MAX as usize,
        }
    }

    /// Java's `autoMessageVersionOnTopicLen` (default on): V2 iff the topic is
    /// longer than 127 bytes.
    pub fn for_topic_len(topic_len: usize) -> MessageVersion {
        if topic_len > i8::MAX as usize {
            MessageVersion::V2
        } else {
            MessageVersion::V1
        }
    }

    /// `"V1"` or `"V2"`, for messages.
    pub fn name(self) -> &'static str {
        match self {
            MessageVersion::V1 => "V1",
            MessageVersion::V2 => "V2",
        }
    }
}

/// Writes `host` as address bytes then the port as an i32; returns the size.
/// `out` must hold [`host_size`] bytes (the caller checked the whole record).
pub(crate) fn write_host(out: &mut [u8], host: &SocketAddr) -> usize {
    match host.ip() {
        IpAddr::V4(ip) => {
            out[..4].copy_from_slice(&ip.octets());
            out[4..8].copy_from_slice(&i32::from(host.port()).to_be_bytes());
            HOST_SIZE_IPV4
        }
        IpAddr::V6(ip) => {
            out[..16].copy_from_slice(&ip.octets());
            out[16..20].copy_from_slice(&i32::from(host.port()).to_be_bytes());
            HOST_SIZE_IPV6
        }
    }
}

/// Reads a host of `size` bytes ([`HOST_SIZE_IPV4`] or [`HOST_SIZE_IPV6`]);
/// returns the address, or the raw port when it is outside `0..=65535`.
pub(crate) fn read_host(bytes: &[u8], size: usize) -> Result<SocketAddr, i32> {
    let port_at = size - 4;
    let port = i32::from_be_bytes(array_at(bytes, port_at));
    let port = u16::try_from(port).map_err(|_| port)?;
    if size == HOST_SIZE_IPV4 {
        let ip = Ipv4Addr::from(array_at::<4>(bytes, 0));
        Ok(SocketAddr::V4(SocketAddrV4::new(ip, port)))
    } else {
        let ip = Ipv6Addr::from(array_at::<16>(bytes, 0));
        Ok(SocketAddr::V6(SocketAddrV6::new(ip, port, 0, 0)))
    }
}

/// The `N` bytes at `at`. Callers have bounds-checked the record, so a short
/// slice is a bug in this module.
pub(crate) fn array_at<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    bytes[at..at + N]
        .try_into()
        .expect("invariant: slice of N bytes converts to [u8; N]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_fixed_size_matches_the_reference_formula() {
        assert_eq!(RECORD_FIXED_SIZE_IPV4 + 1, 91);
        assert_eq!(STORE_TIMESTAMP_POSITION_IPV4, 56);
    }

    #[test]
    fn transaction_type_helpers_rewrite_only_bits_2_and_3() {
        let flag = SYS_FLAG_COMPRESSED | SYS_FLAG_TRANSACTION_PREPARED_TYPE | 0x300;
        assert_eq!(transaction_type(flag), SYS_FLAG_TRANSACTION_PREPARED_TYPE);
        let committed = with_transaction_type(flag, SYS_FLAG_TRANSACTION_COMMIT_TYPE);
        assert_eq!(
            committed,
            SYS_FLAG_COMPRESSED | SYS_FLAG_TRANSACTION_COMMIT_TYPE | 0x300
        );
        assert!(is_dispatched_to_consume_queue(committed));
        assert!(!is_dispatched_to_consume_queue(flag));
        assert!(!is_dispatched_to_consume_queue(
            SYS_FLAG_TRANSACTION_ROLLBACK_TYPE
        ));
    }

    #[test]
    fn sys_flag_for_hosts_sets_and_clears_ipv6_bits() {
        let v4: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let v6: SocketAddr = "[::1]:2".parse().unwrap();
        assert_eq!(sys_flag_for_hosts(0x30, &v4, &v4), 0);
        assert_eq!(sys_flag_for_hosts(0, &v6, &v4), SYS_FLAG_BORN_HOST_V6);
        assert_eq!(sys_flag_for_hosts(1, &v4, &v6), 1 | SYS_FLAG_STORE_HOST_V6);
    }

    #[test]
    fn version_follows_topic_length_like_java() {
        assert_eq!(MessageVersion::for_topic_len(127), MessageVersion::V1);
        assert_eq!(MessageVersion::for_topic_len(128), MessageVersion::V2);
        assert_eq!(MessageVersion::from_magic_code(MAGIC_CODE_BLANK), None);
    }

    #[test]
    fn read_host_rejects_ports_outside_u16() {
        let mut bytes = [0u8; 8];
        bytes[4..].copy_from_slice(&70_000i32.to_be_bytes());
        assert_eq!(read_host(&bytes, HOST_SIZE_IPV4), Err(70_000));
    }
}
