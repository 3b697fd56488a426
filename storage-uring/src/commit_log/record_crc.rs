//! The whole-record CRC property (`__CRC32#`, RocketMQ 5.x
//! `enabledAppendPropCRC` / `forceVerifyPropCRC`, reference 4.1).
//!
//! BODYCRC covers only the body: a torn write that leaves the tail of a
//! record's topic or properties as zeros passes every other check. So ringmq
//! appends, to every record it writes, the 20-byte property
//!
//! ```text
//!  "__CRC32#" 0x01 d0 d1 .. d9 0x02     (digits of the CRC, least significant first)
//! ```
//!
//! where the number is the CRC-32 (`& 0x7FFFFFFF`) of the record bytes before
//! these 20 bytes, and recovery requires it on every record past the last
//! confirmed offset.
//!
//! # Invariants
//! - The trailer is always the last 20 bytes of PROPERTIES, so of the record.

use ringmq_protocol::message::{body_crc, crc32_ieee};

use super::crc_combine::{AroundBody, Combiner};
use ringmq_protocol::message::property_key::CRC32 as CRC32_KEY;

/// Bytes of the trailer property.
pub const PROP_CRC_TRAILER_SIZE: usize = 20;

const DIGITS: usize = 10;
const _: () = assert!(PROP_CRC_TRAILER_SIZE == 8 + 1 + DIGITS + 1);

/// Bytes a record with `properties` gains by the trailer: the trailer, and
/// a separator before it when `properties` does not end with one.
pub fn added_len(properties: &[u8]) -> usize {
    let separator = !properties.is_empty() && properties.last() != Some(&0x02);
    PROP_CRC_TRAILER_SIZE + usize::from(separator)
}

/// Writes the trailer, with zero placeholder digits, into `out` (exactly
/// [`added_len`] bytes), led by the separator `properties` needs.
pub fn write_trailer(properties: &[u8], out: &mut [u8]) {
    let (separator, trailer) = out.split_at_mut(out.len() - PROP_CRC_TRAILER_SIZE);
    assert!(
        separator.len() == added_len(properties) - PROP_CRC_TRAILER_SIZE,
        "trailer of {} bytes for these properties",
        out.len()
    );
    separator.fill(0x02);
    let (key, rest) = trailer.split_at_mut(CRC32_KEY.len());
    key.copy_from_slice(CRC32_KEY.as_bytes());
    rest[0] = 0x01;
    rest[1..=DIGITS].fill(b'0');
    rest[DIGITS + 1] = 0x02;
}

/// `properties` followed by the trailer with a zero placeholder, into `out`.
#[cfg(test)]
pub fn with_crc_placeholder(properties: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(properties);
    let at = out.len();
    out.resize(at + added_len(properties), 0);
    write_trailer(properties, &mut out[at..]);
}

fn digits_range(record: &[u8]) -> std::ops::Range<usize> {
    let end = record.len() - 1;
    end - DIGITS..end
}

/// Writes the CRC digits into a record encoded with the placeholder.
///
/// # Panics
/// If the record does not end with a trailer.
pub fn seal(record: &mut [u8]) {
    assert!(has_trailer(record), "record without a CRC trailer");
    let crc = body_crc(&record[..record.len() - PROP_CRC_TRAILER_SIZE]);
    write_digits(record, crc);
}

/// As [`seal`], in one pass over the bytes around the body: the body's
/// CRC-32 (`body_crc_raw`, unmasked, as `crc32fast::hash(body)`) is already
/// known from BODYCRC, so only the bytes before `body` and between its end
/// and the trailer are read (CRC-32 is linear): with the wide CRC kernel,
/// in one call that folds both and joins the body's CRC before a single
/// reduction (`crc32::wide::crc_around_body`); elsewhere the CRC of the
/// bytes before the body is combined with the body's, and that with the CRC
/// of the bytes after it ([`super::crc_combine`]). `body` is the body's
/// place in `record`; `sealer` carries the constants for the lengths of the
/// record before.
///
/// # Panics
/// If the record does not end with a trailer, or `body` is not inside the
/// part the CRC covers.
pub fn seal_with_body_crc(
    record: &mut [u8],
    body: std::ops::Range<usize>,
    body_crc_raw: u32,
    sealer: &mut Sealer,
) {
    let crc = covered_crc(record, body, body_crc_raw, sealer);
    // Checked after the CRC work, still before anything is written: the
    // trailer was stored just before this call by overlapping stores that
    // an 8-byte load cannot be forwarded from, so checking it first made
    // the CPU wait for the whole record to reach the cache.
    assert!(has_trailer(record), "record without a CRC trailer");
    write_digits(record, crc & BODY_CRC_MASK);
}

/// As [`verify`], from the body's CRC-32 (`body_crc_raw`, unmasked) as
/// [`seal_with_body_crc`] does: the bytes around the body are read, the
/// body is not (recovery has just computed its CRC for BODYCRC).
///
/// # Errors
/// As [`verify`], with the same messages.
///
/// # Panics
/// If `body` is not inside the part the CRC covers.
pub fn verify_with_body_crc(
    record: &[u8],
    body: std::ops::Range<usize>,
    body_crc_raw: u32,
    sealer: &mut Sealer,
) -> Result<(), String> {
    let stored = stored_digits(record)?;
    let computed = u64::from(covered_crc(record, body, body_crc_raw, sealer) & BODY_CRC_MASK);
    if stored != computed {
        return Err(format!("record CRC {stored} stored, {computed} computed"));
    }
    Ok(())
}

/// The CRC-32 of `record` up to its trailer, from the body's.
fn covered_crc(
    record: &[u8],
    body: std::ops::Range<usize>,
    body_crc_raw: u32,
    sealer: &mut Sealer,
) -> u32 {
    let Some(covered) = record.len().checked_sub(PROP_CRC_TRAILER_SIZE) else {
        panic!("record of {} bytes without a CRC trailer", record.len());
    };
    assert!(
        body.start <= body.end && body.end <= covered,
        "body {body:?} outside the {covered} covered bytes"
    );
    #[cfg(target_arch = "x86_64")]
    {
        use ringmq_protocol::message::crc32::wide;
        if body.start >= wide::INPUT_BYTES_MIN
            && covered - body.end >= wide::AFTER_BODY_BYTES_MIN
            && wide::is_available()
        {
            let (fold, constant) = sealer
                .around_body
                .constants(body.len() as u64, (covered - body.end) as u64);
            // SAFETY: `is_available` found every CPU feature the kernel
            // enables.
            return unsafe {
                wide::crc_around_body(record, body, covered, body_crc_raw, fold, constant)
            };
        }
    }
    let before_body = crc32_ieee(&record[..body.start]);
    let after_body = crc32_ieee(&record[body.end..covered]);
    let through_body = sealer
        .body
        .combine(before_body, body_crc_raw, body.len() as u64);
    sealer
        .after_body
        .combine(through_body, after_body, (covered - body.end) as u64)
}

/// What [`seal_with_body_crc`] keeps from one record to the next: the
/// powers of `x` for the last body length and the last length after the
/// body (topic and properties), which a producer's records tend to repeat.
/// On CPUs with the wide CRC kernel the record CRC is one call of
/// `crc_around_body`, with `around_body`'s constants; elsewhere the two
/// combiners join three CRCs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sealer {
    body: Combiner,
    after_body: Combiner,
    around_body: AroundBody,
}

/// BODYCRC and the record CRC are both masked to 31 bits, as Java's
/// `UtilAll.crc32`.
const BODY_CRC_MASK: u32 = 0x7FFF_FFFF;

/// Writes the ten decimal digits of `crc`, least significant first, as two
/// halves of five that do not wait on each other (dividing by ten ten times
/// was a chain of ten multiplications, about 4 % of an appending thread).
fn write_digits(record: &mut [u8], crc: u32) {
    let range = digits_range(record);
    let mut digits = [0u8; DIGITS];
    let (low, high) = digits.split_at_mut(DIGITS / 2);
    five_digits_reversed(crc % 100_000, low);
    five_digits_reversed(crc / 100_000, high);
    record[range].copy_from_slice(&digits);
}

/// `⌈2^32 / 10^4⌉`: `v` times it holds `v / 10^4` above bit 32 and the rest
/// of `v / 10^4` as a 32-bit fraction below, close enough for every `v`
/// below `10^5` that each further digit is the integer part of ten times
/// the fraction (checked for all of them by a test).
const FIVE_DIGITS_SCALE: u64 = (1 << 32) / 10_000 + 1;

/// The five decimal digits of `value` into `out`, least significant first.
///
/// # Panics
/// If `value` has more than five digits or `out` is not five bytes.
fn five_digits_reversed(value: u32, out: &mut [u8]) {
    assert!(
        value < 100_000 && out.len() == 5,
        "{value} into {} digits",
        out.len()
    );
    let mut scaled = u64::from(value) * FIVE_DIGITS_SCALE;
    for digit in out.iter_mut().rev() {
        *digit = b'0' + (scaled >> 32) as u8;
        scaled = (scaled & 0xFFFF_FFFF) * 10;
    }
}

fn has_trailer(record: &[u8]) -> bool {
    let Some(start) = record.len().checked_sub(PROP_CRC_TRAILER_SIZE) else {
        return false;
    };
    let trailer = &record[start..];
    trailer.starts_with(CRC32_KEY.as_bytes())
        && trailer[8] == 0x01
        && trailer[PROP_CRC_TRAILER_SIZE - 1] == 0x02
}

/// Checks the trailer of a whole record.
///
/// # Errors
/// A description when the trailer is missing or its CRC does not match.
pub fn verify(record: &[u8]) -> Result<(), String> {
    let stored = stored_digits(record)?;
    let computed = u64::from(body_crc(&record[..record.len() - PROP_CRC_TRAILER_SIZE]));
    if stored != computed {
        return Err(format!("record CRC {stored} stored, {computed} computed"));
    }
    Ok(())
}

/// The number the trailer holds.
fn stored_digits(record: &[u8]) -> Result<u64, String> {
    if !has_trailer(record) {
        return Err("record CRC property missing".into());
    }
    let mut stored: u64 = 0;
    for digit in record[digits_range(record)].iter().rev() {
        if !digit.is_ascii_digit() {
            return Err("record CRC property is not a number".into());
        }
        stored = stored * 10 + u64::from(digit - b'0');
    }
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_combined_seal_equals_the_two_pass_seal(
            head in proptest::collection::vec(any::<u8>(), 0..200),
            body in proptest::collection::vec(any::<u8>(), 0..5_000),
            tail in proptest::collection::vec(any::<u8>(), 0..300),
            properties in proptest::collection::vec(1u8..=255, 0..100),
        ) {
            let mut props = Vec::new();
            with_crc_placeholder(&properties, &mut props);
            let mut record = head.clone();
            record.extend_from_slice(&body);
            record.extend_from_slice(&tail);
            record.extend_from_slice(&props);
            let mut two_pass = record.clone();
            seal(&mut two_pass);
            // Twice with one sealer: the second seal uses the kept powers.
            let mut sealer = Sealer::default();
            for _ in 0..2 {
                let mut combined = record.clone();
                seal_with_body_crc(
                    &mut combined,
                    head.len()..head.len() + body.len(),
                    crc32fast::hash(&body),
                    &mut sealer,
                );
                prop_assert_eq!(&combined, &two_pass);
                prop_assert_eq!(verify(&combined), Ok(()));
            }
            // Verifying from the body's CRC agrees with the full pass, on the
            // sealed record and on one with a byte around the body changed.
            let body_range = head.len()..head.len() + body.len();
            let body_crc_raw = crc32fast::hash(&body);
            prop_assert_eq!(
                verify_with_body_crc(&two_pass, body_range.clone(), body_crc_raw, &mut sealer),
                Ok(())
            );
            let covered = two_pass.len() - PROP_CRC_TRAILER_SIZE;
            let outside_body: Vec<usize> =
                (0..covered).filter(|i| !body_range.contains(i)).collect();
            if let Some(&at) = outside_body.get(body.len() % outside_body.len().max(1)) {
                let mut flipped = two_pass.clone();
                flipped[at] ^= 0x10;
                prop_assert_eq!(
                    verify_with_body_crc(&flipped, body_range.clone(), body_crc_raw, &mut sealer),
                    verify(&flipped)
                );
                prop_assert!(verify(&flipped).is_err());
            }
        }
    }

    #[test]
    fn sealing_around_the_body_equals_a_full_pass_at_the_kernels_edges() {
        // Bytes before the body from none to past one 64-byte group (below
        // 16 the three-CRC path runs), after it from none (three CRCs below
        // four) across one 16-byte block; one sealer throughout, so its
        // constants are both kept and recomputed.
        let mut sealer = Sealer::default();
        let mut trailer = Vec::new();
        with_crc_placeholder(b"", &mut trailer);
        for head_len in [0usize, 15, 16, 17, 63, 64, 92, 104, 130] {
            for body_len in [0usize, 1, 16, 255, 1_024, 1_500] {
                for tail_len in 0..=40usize {
                    let mut record: Vec<u8> = (0..head_len).map(|i| (i * 13 + 5) as u8).collect();
                    let body: Vec<u8> = (0..body_len).map(|i| (i * 31 % 251) as u8).collect();
                    record.extend_from_slice(&body);
                    record.extend((0..tail_len).map(|i| (i * 7 + 1) as u8));
                    record.extend_from_slice(&trailer);
                    let mut full = record.clone();
                    seal(&mut full);
                    seal_with_body_crc(
                        &mut record,
                        head_len..head_len + body_len,
                        crc32fast::hash(&body),
                        &mut sealer,
                    );
                    assert_eq!(record, full, "{head_len} + {body_len} + {tail_len} bytes");
                }
            }
        }
    }

    #[test]
    fn five_digits_are_exact_for_every_value_below_100_000() {
        let mut out = [0u8; 5];
        for value in 0..100_000u32 {
            five_digits_reversed(value, &mut out);
            let mut expected = format!("{value:05}").into_bytes();
            expected.reverse();
            assert_eq!(out.as_slice(), expected.as_slice(), "{value}");
        }
    }

    #[test]
    fn the_digits_read_back_as_the_number_written() {
        let mut record = Vec::new();
        with_crc_placeholder(b"", &mut record);
        record.splice(..0, [1u8, 2, 3, 4]);
        for crc in [
            0u32,
            9,
            10,
            99_999,
            100_000,
            1_234_567_890,
            0x7FFF_FFFF,
            u32::MAX,
        ] {
            write_digits(&mut record, crc);
            assert_eq!(stored_digits(&record), Ok(u64::from(crc)), "{crc}");
        }
    }

    #[test]
    fn sealed_record_verifies_and_a_zeroed_tail_does_not() {
        let mut props = Vec::new();
        with_crc_placeholder(b"TAGS\x01TagA\x02", &mut props);
        assert_eq!(props.len(), 10 + PROP_CRC_TRAILER_SIZE);
        let mut record = b"header-and-body".to_vec();
        record.extend_from_slice(&props);
        seal(&mut record);
        assert_eq!(verify(&record), Ok(()));
        let mut torn = record.clone();
        let n = torn.len();
        torn[n - 25..].fill(0);
        assert!(verify(&torn).is_err());
        let mut flipped = record;
        flipped[3] ^= 1;
        assert!(verify(&flipped).is_err());
    }

    #[test]
    fn placeholder_adds_a_separator_after_an_unterminated_pair() {
        let mut props = Vec::new();
        with_crc_placeholder(b"A\x01B", &mut props);
        assert!(props.starts_with(b"A\x01B\x02__CRC32#\x01"));
    }

    #[test]
    fn sealing_with_the_body_crc_gives_the_same_digits_as_a_full_pass() {
        let mut props = Vec::new();
        with_crc_placeholder(b"KEYS\x01k\x02", &mut props);
        // One sealer throughout, lengths repeated and changed, as a stream of
        // records has them.
        let mut sealer = Sealer::default();
        for body_len in [0usize, 1, 7, 893, 893, 4_096, 7, 7, 0] {
            let mut record: Vec<u8> = (0..88u8).collect();
            let body: Vec<u8> = (0..body_len).map(|i| (i * 31 % 251) as u8).collect();
            record.extend_from_slice(&body);
            record.extend_from_slice(b"\x05Topic\x00\x1e");
            record.extend_from_slice(&props);
            let mut full = record.clone();
            seal(&mut full);
            let mut fused = record;
            seal_with_body_crc(
                &mut fused,
                88..88 + body_len,
                crc32fast::hash(&body),
                &mut sealer,
            );
            assert_eq!(fused, full, "body of {body_len} bytes");
            assert_eq!(verify(&fused), Ok(()));
        }
    }
}
