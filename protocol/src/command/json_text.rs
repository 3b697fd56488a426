//! JSON string escaping as fastjson 1.x writes it, and unescaping as
//! fastjson's lexer reads it. Kept here, small and header-only, so the
//! command codec does not depend on the general JSON module.
//!
//! fastjson (`SerializeWriter.writeStringWithDoubleQuote` with the tables of
//! `IOUtils.specicalFlags_doubleQuotes` / `replaceChars`, default features)
//! writes, for each UTF-16 unit of a string:
//!
//! | character | written as |
//! | --- | --- |
//! | U+0008, U+0009, U+000A, U+000C, U+000D | `\b` `\t` `\n` `\f` `\r` |
//! | other U+0000..U+001F (including U+000B) | `\u00XX`, upper-case hex (`\u0001`, `\u001F`) |
//! | `"` and `\` | `\"` and `\\` |
//! | U+007F..U+009F | `\u007F`..`\u009F` |
//! | U+2028, U+2029 | `\u2028`, `\u2029` |
//! | everything else, `/` included | itself, UTF-8 encoded |
//!
//! The unescaper accepts the standard escapes plus fastjson's extras: `\'`,
//! `\v`, `\xHH` and the single octal digits `\0`..`\7`. A `\uXXXX` that is a
//! lone surrogate becomes U+FFFD (Rust strings cannot hold it; Java strings
//! can).
//!
//! # Invariants
//!
//! - `write_escaped` output, unescaped, gives back the input exactly.

use bytes::BufMut;

/// Upper-case hex digits, as fastjson's `IOUtils.DIGITS`.
const HEX_DIGITS: &[u8; 16] = b"0123456789ABCDEF";

/// For each byte: whether it may start something that needs escaping.
/// `0xC2` leads U+0080..U+00BF (C1 controls among them), `0xE2` leads
/// U+2000..U+2FFF (U+2028/U+2029 among them).
const NEEDS_CHECK: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table[0x7F] = true;
    table[0xC2] = true;
    table[0xE2] = true;
    table
};

/// Writes `text` between double quotes, escaped byte for byte as fastjson
/// does.
pub(crate) fn write_quoted<B: BufMut>(dst: &mut B, text: &str) {
    dst.put_u8(b'"');
    write_escaped(dst, text);
    dst.put_u8(b'"');
}

/// Writes `text` escaped as fastjson does, without quotes.
pub(crate) fn write_escaped<B: BufMut>(dst: &mut B, text: &str) {
    let bytes = text.as_bytes();
    let mut plain_start = 0;
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        if !NEEDS_CHECK[usize::from(byte)] {
            index += 1;
            continue;
        }
        // The candidate is a whole character: ASCII, or a 2- or 3-byte
        // sequence whose lead byte we flagged.
        let (unit, size) = match byte {
            0xC2 => (u32::from(bytes[index + 1] & 0x3F) | 0x80, 2),
            0xE2 => {
                let unit = (u32::from(byte & 0x0F) << 12)
                    | (u32::from(bytes[index + 1] & 0x3F) << 6)
                    | u32::from(bytes[index + 2] & 0x3F);
                (unit, 3)
            }
            _ => (u32::from(byte), 1),
        };
        let escape: Option<&[u8]> = match unit {
            0x08 => Some(b"\\b"),
            0x09 => Some(b"\\t"),
            0x0A => Some(b"\\n"),
            0x0C => Some(b"\\f"),
            0x0D => Some(b"\\r"),
            0x22 => Some(b"\\\""),
            0x5C => Some(b"\\\\"),
            _ => None,
        };
        let needs_unicode_escape =
            unit < 0x20 || (0x7F..=0x9F).contains(&unit) || unit == 0x2028 || unit == 0x2029;
        if escape.is_none() && !needs_unicode_escape {
            index += size;
            continue;
        }
        dst.put_slice(&bytes[plain_start..index]);
        match escape {
            Some(escape) => dst.put_slice(escape),
            None => {
                let digits = [
                    b'\\',
                    b'u',
                    HEX_DIGITS[(unit >> 12) as usize & 15],
                    HEX_DIGITS[(unit >> 8) as usize & 15],
                    HEX_DIGITS[(unit >> 4) as usize & 15],
                    HEX_DIGITS[unit as usize & 15],
                ];
                dst.put_slice(&digits);
            }
        }
        index += size;
        plain_start = index;
    }
    dst.put_slice(&bytes[plain_start..]);
}

/// Appends the unescaped form of `raw` (a JSON string's content between the
/// quotes, valid UTF-8) to `out`.
///
/// # Errors
///
/// Returns the offset inside `raw` and a reason for a malformed escape.
pub(crate) fn unescape_into(raw: &str, out: &mut String) -> Result<(), (usize, &'static str)> {
    let bytes = raw.as_bytes();
    let mut plain_start = 0;
    while let Some(escape_at) = find_backslash(bytes, plain_start) {
        out.push_str(&raw[plain_start..escape_at]);
        let Some(&kind) = bytes.get(escape_at + 1) else {
            return Err((escape_at, "backslash at end of string"));
        };
        let mut index = escape_at + 2;
        let ch = match kind {
            b'u' => {
                let unit = hex_value(bytes, index, 4).ok_or((escape_at, "bad \\u escape"))?;
                index += 4;
                if (0xD800..=0xDBFF).contains(&unit) {
                    let low = match bytes.get(index..index + 2) {
                        Some(b"\\u") => hex_value(bytes, index + 2, 4)
                            .filter(|low| (0xDC00..=0xDFFF).contains(low)),
                        _ => None,
                    };
                    match low {
                        Some(low) => {
                            index += 6;
                            let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                            char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER)
                        }
                        None => char::REPLACEMENT_CHARACTER,
                    }
                } else {
                    char::from_u32(unit).unwrap_or(char::REPLACEMENT_CHARACTER)
                }
            }
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'\'' => '\'',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'v' => '\u{b}',
            b'0'..=b'7' => char::from(kind - b'0'),
            b'x' => {
                let value = hex_value(bytes, index, 2).ok_or((escape_at, "bad \\x escape"))?;
                index += 2;
                char::from_u32(value).ok_or((escape_at, "bad \\x escape"))?
            }
            _ => return Err((escape_at, "unknown escape")),
        };
        out.push(ch);
        plain_start = index;
    }
    out.push_str(&raw[plain_start..]);
    Ok(())
}

/// The index of the first `\\` at or after `from`, eight bytes at a time.
fn find_backslash(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut index = from;
    while let Some(chunk) = bytes.get(index..).and_then(|rest| rest.first_chunk::<8>()) {
        let backslashes = u64::from_le_bytes(*chunk) ^ (ONES * u64::from(b'\\'));
        // The lowest zero byte of `backslashes` gets its high bit set exactly.
        let found = backslashes.wrapping_sub(ONES) & !backslashes & HIGHS;
        if found != 0 {
            return Some(index + (found.trailing_zeros() / 8) as usize);
        }
        index += 8;
    }
    let rest = bytes.get(index..)?;
    rest.iter()
        .position(|&byte| byte == b'\\')
        .map(|offset| index + offset)
}

fn hex_value(bytes: &[u8], start: usize, count: usize) -> Option<u32> {
    let digits = bytes.get(start..start + count)?;
    let mut value = 0u32;
    for &digit in digits {
        let nibble = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            b'A'..=b'F' => digit - b'A' + 10,
            _ => return None,
        };
        value = (value << 4) | u32::from(nibble);
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str) -> String {
        let mut out = Vec::new();
        write_escaped(&mut out, text);
        String::from_utf8(out).unwrap()
    }

    fn unescaped(raw: &str) -> String {
        let mut out = String::new();
        unescape_into(raw, &mut out).unwrap();
        out
    }

    #[test]
    fn control_characters_are_escaped_as_fastjson_does() {
        assert_eq!(escaped("KEYS\u{1}k\u{2}"), r"KEYS\u0001k\u0002");
        assert_eq!(escaped("\u{8}\t\n\u{c}\r"), r"\b\t\n\f\r");
        assert_eq!(escaped("\u{0}\u{b}\u{1f}"), r"\u0000\u000B\u001F");
        assert_eq!(escaped("\"\\/"), r#"\"\\/"#);
        assert_eq!(
            escaped("\u{7f}\u{80}\u{9f}\u{a0}"),
            "\\u007F\\u0080\\u009F\u{a0}"
        );
        assert_eq!(
            escaped("a\u{2028}b\u{2029}\u{2027}"),
            "a\\u2028b\\u2029\u{2027}"
        );
        assert_eq!(escaped("中文é😀"), "中文é😀");
    }

    #[test]
    fn unescape_reverses_escape() {
        let text = "a\u{0}b\u{1}\u{2}\"\\\n\u{7f}\u{85}\u{2028}é😀/";
        assert_eq!(unescaped(&escaped(text)), text);
    }

    #[test]
    fn unescape_accepts_fastjson_extras_and_surrogate_pairs() {
        assert_eq!(unescaped(r"\'\v\x41\3\/"), "'\u{b}A\u{3}/");
        assert_eq!(unescaped(r"\ud83d\ude00"), "😀");
        assert_eq!(unescaped(r"\ud83dx"), "\u{fffd}x");
        assert_eq!(unescaped(r"\u00e9"), "é");
    }

    #[test]
    fn find_backslash_finds_the_first_at_every_position() {
        for size in 0..30 {
            for target in 0..size {
                let mut bytes = vec![b'"'; size];
                bytes[target] = b'\\';
                if target + 1 < size {
                    bytes[target + 1] = b'\\';
                }
                for from in 0..=target {
                    assert_eq!(find_backslash(&bytes, from), Some(target));
                }
            }
            assert_eq!(find_backslash(&vec![0xDC; size], 0), None);
        }
    }

    #[test]
    fn unescape_rejects_malformed_escapes() {
        let mut out = String::new();
        assert_eq!(unescape_into(r"ab\q", &mut out), Err((2, "unknown escape")));
        assert_eq!(unescape_into(r"\u12", &mut out), Err((0, "bad \\u escape")));
        assert_eq!(
            unescape_into("x\\", &mut out),
            Err((1, "backslash at end of string"))
        );
    }
}
