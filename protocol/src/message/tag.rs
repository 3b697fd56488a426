//! Java `String.hashCode()` and what RocketMQ derives from it: the ConsumeQueue
//! `tagsCode` (remoting-protocol.md 4.12) and the IndexFile key hash (6.4).
//!
//! `h = 0; for each UTF-16 code unit c: h = 31·h + c` with wrapping i32
//! arithmetic; characters outside the BMP count as their two surrogates.
//!
//! # Invariants
//!
//! - [`index_key_hash`] is never negative.

/// Java's `String.hashCode()` of `s`, over its UTF-16 code units.
pub fn java_string_hash_code(s: &str) -> i32 {
    if s.is_ascii() {
        return ascii_hash_code(s.as_bytes());
    }
    s.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// Characters [`ascii_hash_code`] takes at a time.
const CHUNK_CHARS: usize = 8;

/// `31^k` in wrapping 32-bit arithmetic.
const fn power_of_31(k: u32) -> u32 {
    let mut power = 1u32;
    let mut step = 0;
    while step < k {
        power = power.wrapping_mul(31);
        step += 1;
    }
    power
}

/// The weight of each character of a chunk: `31^7` for the first down to
/// `31^0` for the last.
const CHUNK_WEIGHTS: [u32; CHUNK_CHARS] = {
    let mut weights = [0u32; CHUNK_CHARS];
    let mut i = 0;
    while i < CHUNK_CHARS {
        weights[i] = power_of_31((CHUNK_CHARS - 1 - i) as u32);
        i += 1;
    }
    weights
};

/// [`java_string_hash_code`] of an ASCII string, whose UTF-16 code units
/// are its bytes. The hash is `Σ c_i · 31^(n-1-i)` modulo 2^32, so a chunk
/// of eight characters is one sum of eight independent products, and the
/// hash waits on one multiplication by `31^8` per chunk instead of one by
/// 31 per character (an index key `topic#UNIQ_KEY` has over 40).
fn ascii_hash_code(bytes: &[u8]) -> i32 {
    const CHUNK_SHIFT: u32 = power_of_31(CHUNK_CHARS as u32);
    let mut chunks = bytes.chunks_exact(CHUNK_CHARS);
    let mut hash = 0u32;
    for chunk in &mut chunks {
        let sum = chunk
            .iter()
            .zip(CHUNK_WEIGHTS)
            .fold(0u32, |sum, (&byte, weight)| {
                sum.wrapping_add(u32::from(byte).wrapping_mul(weight))
            });
        hash = hash.wrapping_mul(CHUNK_SHIFT).wrapping_add(sum);
    }
    for &byte in chunks.remainder() {
        hash = hash.wrapping_mul(31).wrapping_add(u32::from(byte));
    }
    hash as i32
}

/// The ConsumeQueue `tagsCode` of a message's `TAGS`: the hash sign-extended to
/// i64; 0 when there are no tags or they are empty.
pub fn tags_code(tags: Option<&str>) -> i64 {
    match tags {
        Some(tags) if !tags.is_empty() => i64::from(java_string_hash_code(tags)),
        _ => 0,
    }
}

/// The IndexFile hash of a key (`topic#key`): `Math.abs(hashCode)`, with
/// `Integer.MIN_VALUE` (whose `abs` stays negative in Java) mapped to 0.
pub fn index_key_hash(key: &str) -> i32 {
    java_string_hash_code(key).checked_abs().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one UTF-16 unit at a time.
    fn serial_hash_code(s: &str) -> i32 {
        s.encode_utf16().fold(0i32, |hash, unit| {
            hash.wrapping_mul(31).wrapping_add(i32::from(unit))
        })
    }

    proptest::proptest! {
        #[test]
        fn the_ascii_hash_in_chunks_equals_the_serial_one(s in "[\\x00-\\x7F]{0,200}") {
            proptest::prop_assert_eq!(java_string_hash_code(&s), serial_hash_code(&s));
        }

        #[test]
        fn any_string_hashes_as_the_serial_definition(s in "\\PC{0,80}") {
            proptest::prop_assert_eq!(java_string_hash_code(&s), serial_hash_code(&s));
        }
    }

    #[test]
    fn ascii_hash_at_every_length_around_the_chunks() {
        let text: String = (0..40u8).map(|i| char::from(b'!' + i * 2)).collect();
        for len in 0..=text.len() {
            assert_eq!(
                java_string_hash_code(&text[..len]),
                serial_hash_code(&text[..len]),
                "{len} characters"
            );
        }
    }

    #[test]
    fn hash_matches_reference_examples() {
        assert_eq!(java_string_hash_code("TagA"), 2_598_919);
        assert_eq!(java_string_hash_code("TagB"), 2_598_920);
        assert_eq!(java_string_hash_code("*"), 42);
        assert_eq!(java_string_hash_code("中文"), 646_394);
        assert_eq!(java_string_hash_code(""), 0);
    }

    #[test]
    fn hash_counts_non_bmp_character_as_two_surrogates() {
        // U+1F600 is the surrogate pair D83D DE00: 0xD83D·31 + 0xDE00
        // = 55357·31 + 56832 = 1716067 + 56832 = 1772899.
        assert_eq!(java_string_hash_code("\u{1F600}"), 1_772_899);
        // Hashing the scalar value 0x1F600 instead would give 128512.
        assert_ne!(java_string_hash_code("\u{1F600}"), 0x1F600);
    }

    #[test]
    fn hash_wraps_like_java_int_and_index_hash_takes_abs() {
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE in Java.
        assert_eq!(java_string_hash_code("polygenelubricants"), i32::MIN);
        assert_eq!(index_key_hash("polygenelubricants"), 0);
        // Values computed independently (Python, mod 2^32 over UTF-16 units).
        assert_eq!(java_string_hash_code("TopicTest#order-1"), -1_829_193_424);
        assert_eq!(index_key_hash("TopicTest#order-1"), 1_829_193_424);
        assert_eq!(index_key_hash("a\u{1F600}b"), 57_849_694);
    }

    #[test]
    fn tags_code_sign_extends_and_maps_absent_or_empty_to_zero() {
        assert_eq!(tags_code(Some("TagA")), 2_598_919);
        assert_eq!(tags_code(Some("polygenelubricants")), -2_147_483_648);
        assert_eq!(tags_code(Some("")), 0);
        assert_eq!(tags_code(None), 0);
    }
}
