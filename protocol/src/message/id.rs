//! Message ids (remoting-protocol.md 4.8): the offset message id the broker
//! returns, and the client-style unique id (`UNIQ_KEY`) it adds when a message
//! has none.
//!
//! ```text
//! offset msg id: [store ip 4|16][store port i32][commit_log_offset i64] -> upper hex
//! UNIQ_KEY:      [ip 4|16][pid i16][seed i32][ms since month start i32][counter i16] -> upper hex
//! ```
//!
//! # Invariants
//!
//! - Encoders write upper-case hex of exactly 2 × the byte count; decoders accept
//!   either case and decide IPv4 / IPv6 by the length alone (32 / 56 characters).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use super::error::RecordError;

/// Hex length of an offset message id with an IPv4 store host.
pub const OFFSET_MSG_ID_LEN_IPV4: usize = 32;
/// Hex length of an offset message id with an IPv6 store host.
pub const OFFSET_MSG_ID_LEN_IPV6: usize = 56;
/// Largest hex length of an offset message id (size for caller buffers).
pub const OFFSET_MSG_ID_LEN_MAX: usize = OFFSET_MSG_ID_LEN_IPV6;
/// Largest hex length of a `UNIQ_KEY` (IPv6 ip).
pub const UNIQ_ID_LEN_MAX: usize = 2 * (16 + 2 + 4 + 4 + 2);

const _: () = assert!(OFFSET_MSG_ID_LEN_IPV4 == 2 * (4 + 4 + 8));
const _: () = assert!(OFFSET_MSG_ID_LEN_IPV6 == 2 * (16 + 4 + 8));

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Writes `bytes` as upper-case hex into `out` (2 × len bytes, checked by callers).
fn write_hex(out: &mut [u8], bytes: &[u8]) {
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = HEX_UPPER[usize::from(byte >> 4)];
        pair[1] = HEX_UPPER[usize::from(byte & 0xF)];
    }
}

fn hex_value(digit: u8, index: usize) -> Result<u8, RecordError> {
    match digit {
        b'0'..=b'9' => Ok(digit - b'0'),
        b'a'..=b'f' => Ok(digit - b'a' + 10),
        b'A'..=b'F' => Ok(digit - b'A' + 10),
        _ => Err(RecordError::MessageIdNotHex { index }),
    }
}

/// Decodes hex into `out` (len/2 bytes, checked by callers).
fn read_hex(hex: &[u8], out: &mut [u8]) -> Result<(), RecordError> {
    for (i, (pair, byte)) in hex.chunks_exact(2).zip(out.iter_mut()).enumerate() {
        *byte = (hex_value(pair[0], 2 * i)? << 4) | hex_value(pair[1], 2 * i + 1)?;
    }
    Ok(())
}

fn ip_bytes(ip: &IpAddr, out: &mut [u8; 16]) -> usize {
    match ip {
        IpAddr::V4(v4) => {
            out[..4].copy_from_slice(&v4.octets());
            4
        }
        IpAddr::V6(v6) => {
            out.copy_from_slice(&v6.octets());
            16
        }
    }
}

/// Writes the offset message id of a record stored at `commit_log_offset` by
/// `store_host` into `out`; returns its length (32 or 56).
///
/// # Errors
///
/// [`RecordError::OutputTooSmall`] if `out` is shorter than the id.
pub fn write_offset_msg_id(
    store_host: &SocketAddr,
    commit_log_offset: i64,
    out: &mut [u8],
) -> Result<usize, RecordError> {
    let mut raw = [0u8; 28];
    let mut ip = [0u8; 16];
    let ip_len = ip_bytes(&store_host.ip(), &mut ip);
    raw[..ip_len].copy_from_slice(&ip[..ip_len]);
    raw[ip_len..ip_len + 4].copy_from_slice(&i32::from(store_host.port()).to_be_bytes());
    raw[ip_len + 4..ip_len + 12].copy_from_slice(&commit_log_offset.to_be_bytes());
    let raw = &raw[..ip_len + 12];
    let len = 2 * raw.len();
    let Some(out) = out.get_mut(..len) else {
        return Err(RecordError::OutputTooSmall {
            needed: len,
            available: out.len(),
        });
    };
    write_hex(out, raw);
    Ok(len)
}

/// The offset message id as a `String`, e.g. `C0A8000A00002A9F0000000000000400`
/// for 192.168.0.10:10911 at offset 1024.
pub fn offset_msg_id(store_host: &SocketAddr, commit_log_offset: i64) -> String {
    let mut id = String::with_capacity(OFFSET_MSG_ID_LEN_MAX);
    push_offset_msg_id(&mut id, store_host, commit_log_offset);
    id
}

/// Appends the offset message id to `out` (a batch's ids joined by commas
/// are built in one `String` this way).
pub fn push_offset_msg_id(out: &mut String, store_host: &SocketAddr, commit_log_offset: i64) {
    let mut id = [0u8; OFFSET_MSG_ID_LEN_MAX];
    let len = write_offset_msg_id(store_host, commit_log_offset, &mut id)
        .expect("invariant: OFFSET_MSG_ID_LEN_MAX holds every offset msg id");
    out.push_str(ascii(&id[..len]));
}

/// Hex digits as `&str`.
fn ascii(hex: &[u8]) -> &str {
    std::str::from_utf8(hex).expect("invariant: hex digits are ASCII")
}

/// Decodes an offset message id into the store host and the CommitLog offset.
///
/// # Errors
///
/// [`RecordError::MessageIdLength`] unless 32 or 56 characters;
/// [`RecordError::MessageIdNotHex`]; [`RecordError::PortOutOfRange`] if the port
/// field is outside `0..=65535`.
pub fn decode_offset_msg_id(msg_id: &str) -> Result<(SocketAddr, i64), RecordError> {
    let hex = msg_id.as_bytes();
    let ip_len = match hex.len() {
        OFFSET_MSG_ID_LEN_IPV4 => 4,
        OFFSET_MSG_ID_LEN_IPV6 => 16,
        len => return Err(RecordError::MessageIdLength { len }),
    };
    let mut raw = [0u8; 28];
    let raw = &mut raw[..hex.len() / 2];
    read_hex(hex, raw)?;
    let port = i32::from_be_bytes([
        raw[ip_len],
        raw[ip_len + 1],
        raw[ip_len + 2],
        raw[ip_len + 3],
    ]);
    let port = u16::try_from(port).map_err(|_| RecordError::PortOutOfRange {
        field: "store host",
        port,
    })?;
    let mut offset = [0u8; 8];
    offset.copy_from_slice(&raw[ip_len + 4..ip_len + 12]);
    let host = if ip_len == 4 {
        let ip = Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]);
        SocketAddr::V4(SocketAddrV4::new(ip, port))
    } else {
        let mut ip = [0u8; 16];
        ip.copy_from_slice(&raw[..16]);
        SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, 0))
    };
    Ok((host, i64::from_be_bytes(offset)))
}

/// Generates `UNIQ_KEY` values in Java's layout (`MessageClientIDSetter`).
///
/// The crate has no clock: the caller passes the milliseconds since the start of
/// the current month, computed in its own time zone as Java's `Calendar` does
/// (day 1, 00:00:00.000 local time). Like Java, the value is truncated to 32
/// bits (late in a 31-day month it wraps negative) and the counter to 16 bits.
#[derive(Debug, Clone)]
pub struct UniqIdGenerator {
    /// Hex of `ip ‖ pid ‖ seed`, fixed for the generator's life.
    prefix: [u8; UNIQ_ID_LEN_MAX],
    prefix_len: usize,
    counter: u16,
}

impl UniqIdGenerator {
    /// A generator for a process at `ip` with id `pid` (its low 16 bits are used,
    /// as Java's `(short)` cast does). `seed` takes the place of Java's
    /// class-loader hash code: any value that differs between processes sharing
    /// an ip and pid. The counter starts at 0.
    pub fn new(ip: IpAddr, pid: u32, seed: i32) -> UniqIdGenerator {
        let mut raw = [0u8; 16 + 2 + 4];
        let mut ip_raw = [0u8; 16];
        let ip_len = ip_bytes(&ip, &mut ip_raw);
        raw[..ip_len].copy_from_slice(&ip_raw[..ip_len]);
        raw[ip_len..ip_len + 2].copy_from_slice(&(pid as u16).to_be_bytes());
        raw[ip_len + 2..ip_len + 6].copy_from_slice(&seed.to_be_bytes());
        let raw = &raw[..ip_len + 6];
        let mut prefix = [0u8; UNIQ_ID_LEN_MAX];
        write_hex(&mut prefix, raw);
        UniqIdGenerator {
            prefix,
            prefix_len: 2 * raw.len(),
            counter: 0,
        }
    }

    /// Length of every id this generator makes: 32 (IPv4) or 56 (IPv6).
    pub fn id_len(&self) -> usize {
        self.prefix_len + 12
    }

    /// Writes the next id into `out`; returns its length.
    ///
    /// # Errors
    ///
    /// [`RecordError::OutputTooSmall`] if `out` is shorter than [`Self::id_len`];
    /// the counter does not advance then.
    pub fn next_into(
        &mut self,
        ms_since_month_start: u64,
        out: &mut [u8],
    ) -> Result<usize, RecordError> {
        let len = self.id_len();
        let Some(out) = out.get_mut(..len) else {
            return Err(RecordError::OutputTooSmall {
                needed: len,
                available: out.len(),
            });
        };
        out[..self.prefix_len].copy_from_slice(&self.prefix[..self.prefix_len]);
        let mut tail = [0u8; 6];
        // Java: `(int) (now - startTime)`, a wrapping truncation.
        tail[..4].copy_from_slice(&(ms_since_month_start as u32).to_be_bytes());
        tail[4..].copy_from_slice(&self.counter.to_be_bytes());
        write_hex(&mut out[self.prefix_len..], &tail);
        self.counter = self.counter.wrapping_add(1);
        Ok(len)
    }

    /// The next id as a `String`.
    pub fn next(&mut self, ms_since_month_start: u64) -> String {
        let mut out = [0u8; UNIQ_ID_LEN_MAX];
        let len = self
            .next_into(ms_since_month_start, &mut out)
            .expect("invariant: UNIQ_ID_LEN_MAX holds every uniq id");
        ascii(&out[..len]).to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_msg_id_matches_reference_example() {
        let host: SocketAddr = "192.168.0.10:10911".parse().unwrap();
        assert_eq!(
            offset_msg_id(&host, 1024),
            "C0A8000A00002A9F0000000000000400"
        );
    }

    #[test]
    fn push_offset_msg_id_appends_to_what_is_there() {
        let host: SocketAddr = "192.168.0.10:10911".parse().unwrap();
        let mut ids = String::from("X,");
        push_offset_msg_id(&mut ids, &host, 1024);
        assert_eq!(ids, "X,C0A8000A00002A9F0000000000000400");
    }

    #[test]
    fn decode_offset_msg_id_reads_reference_example_in_either_case() {
        let host: SocketAddr = "192.168.0.10:10911".parse().unwrap();
        assert_eq!(
            decode_offset_msg_id("C0A8000A00002A9F0000000000000400"),
            Ok((host, 1024))
        );
        assert_eq!(
            decode_offset_msg_id("c0a8000a00002a9f0000000000000400"),
            Ok((host, 1024))
        );
    }

    #[test]
    fn offset_msg_id_round_trips_ipv6() {
        let host: SocketAddr = "[2001:db8::7]:10911".parse().unwrap();
        let id = offset_msg_id(&host, -5);
        assert_eq!(id.len(), OFFSET_MSG_ID_LEN_IPV6);
        assert!(id.starts_with("20010DB8"));
        assert_eq!(decode_offset_msg_id(&id), Ok((host, -5)));
    }

    #[test]
    fn decode_offset_msg_id_rejects_bad_length_and_digits() {
        assert_eq!(
            decode_offset_msg_id("00"),
            Err(RecordError::MessageIdLength { len: 2 })
        );
        assert_eq!(
            decode_offset_msg_id("C0A8000A00002A9F000000000000040G"),
            Err(RecordError::MessageIdNotHex { index: 31 })
        );
        assert_eq!(
            decode_offset_msg_id("C0A8000AFFFFFFFF0000000000000400"),
            Err(RecordError::PortOutOfRange {
                field: "store host",
                port: -1
            })
        );
    }

    #[test]
    fn write_offset_msg_id_rejects_short_buffer() {
        let host: SocketAddr = "1.2.3.4:5".parse().unwrap();
        let mut out = [0u8; 31];
        assert_eq!(
            write_offset_msg_id(&host, 0, &mut out),
            Err(RecordError::OutputTooSmall {
                needed: 32,
                available: 31
            })
        );
    }

    #[test]
    fn uniq_id_has_java_layout_and_wrapping_counter() {
        let ip: IpAddr = "192.168.0.5".parse().unwrap();
        let mut generator = UniqIdGenerator::new(ip, 0x1_3039, 0x18B4_AAC2);
        // ip C0A80005, pid 3039 (low 16 bits), seed 18B4AAC2, time, counter.
        assert_eq!(
            generator.next(0x1D5C_1A2B),
            "C0A80005303918B4AAC21D5C1A2B0000"
        );
        assert_eq!(
            generator.next(0x1D5C_1A2B),
            "C0A80005303918B4AAC21D5C1A2B0001"
        );
        generator.counter = u16::MAX;
        assert!(generator.next(1).ends_with("00000001FFFF"));
        assert!(generator.next(1).ends_with("000000010000"));
        // 31 days of ms exceed i32::MAX: truncated like Java's (int) cast.
        assert!(generator.next(0x1_0000_0002).ends_with("000000020001"));
    }

    #[test]
    fn uniq_id_for_ipv6_is_56_characters() {
        let ip: IpAddr = "::1".parse().unwrap();
        let mut generator = UniqIdGenerator::new(ip, 1, 2);
        assert_eq!(generator.id_len(), 56);
        assert_eq!(generator.next(3).len(), 56);
    }
}
