//! The message properties string (remoting-protocol.md 4.6): parse, look up,
//! build and rewrite, without allocating.
//!
//! ```text
//! [key 0x01 value 0x02][key 0x01 value 0x02]...
//! ```
//!
//! Parsing follows Java's `MessageDecoder.string2messageProperties` exactly: split
//! on 0x02; keep a segment only if its first 0x01 is neither its first nor its
//! last byte (so key and value are non-empty, and the segment is ≥ 3 bytes); the
//! key runs to that 0x01 and the value to the end of the segment, so a value may
//! contain 0x01. The last segment needs no trailing 0x02. Java stores the pairs in
//! a `HashMap`, so of duplicate keys the **last** one wins; [`Properties::get`]
//! does the same. Working on bytes rather than decoded text gives the same
//! segments, because the separators are ASCII and never occur inside a UTF-8
//! sequence.
//!
//! # Invariants
//!
//! - [`PropertiesBuilder`] and [`rewrite_properties`] only write keys that are
//!   non-empty and free of separators, and values free of 0x02, so everything they
//!   write parses back to the pairs given (empty values excepted: Java writes
//!   them, and Java's parser drops them).

use bytes::BufMut;

use super::error::RecordError;

/// Separator between a key and its value. Java: `NAME_VALUE_SEPARATOR`.
pub const NAME_VALUE_SEPARATOR: u8 = 0x01;
/// Separator after every pair. Java: `PROPERTY_SEPARATOR`.
pub const PROPERTY_SEPARATOR: u8 = 0x02;

/// A borrowed properties string, parsed lazily.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Properties<'a> {
    bytes: &'a [u8],
}

impl<'a> Properties<'a> {
    /// Wraps a properties string; nothing is checked (every byte string parses).
    pub fn new(bytes: &'a [u8]) -> Properties<'a> {
        Properties { bytes }
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The pairs Java would keep, in string order, duplicates included.
    pub fn iter(&self) -> PropertyIter<'a> {
        PropertyIter {
            rest: Some(self.bytes),
        }
    }

    /// The value of `key` as Java's map would hold it (last duplicate wins).
    pub fn get_bytes(&self, key: &[u8]) -> Option<&'a [u8]> {
        self.bytes
            .rsplit(|byte| *byte == PROPERTY_SEPARATOR)
            .filter_map(split_pair)
            .find(|(k, _)| *k == key)
            .map(|(_, value)| value)
    }

    /// The value of `key` as text; `None` when absent or not UTF-8.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.get_bytes(key.as_bytes())
            .and_then(|value| std::str::from_utf8(value).ok())
    }

    /// Whether Java would see `key` in the map.
    pub fn contains(&self, key: &str) -> bool {
        self.get_bytes(key.as_bytes()).is_some()
    }
}

/// Iterator over the `(key, value)` pairs of a properties string that Java keeps.
#[derive(Debug, Clone)]
pub struct PropertyIter<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> Iterator for PropertyIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let rest = self.rest?;
            let segment = match rest.iter().position(|byte| *byte == PROPERTY_SEPARATOR) {
                Some(end) => {
                    self.rest = Some(&rest[end + 1..]);
                    &rest[..end]
                }
                None => {
                    self.rest = None;
                    rest
                }
            };
            if let Some(pair) = split_pair(segment) {
                return Some(pair);
            }
        }
    }
}

/// Java's rule for one segment: the first 0x01 is neither first nor last.
fn split_pair(segment: &[u8]) -> Option<(&[u8], &[u8])> {
    let separator = segment
        .iter()
        .position(|byte| *byte == NAME_VALUE_SEPARATOR)?;
    if separator == 0 || separator + 1 == segment.len() {
        return None;
    }
    Some((&segment[..separator], &segment[separator + 1..]))
}

fn check_pair(key: &str, value: &str) -> Result<(), RecordError> {
    let key_bytes = key.as_bytes();
    if key_bytes.is_empty()
        || key_bytes
            .iter()
            .any(|b| *b == NAME_VALUE_SEPARATOR || *b == PROPERTY_SEPARATOR)
    {
        return Err(RecordError::PropertyKeyInvalid {
            key: key.to_owned(),
        });
    }
    if value.as_bytes().contains(&PROPERTY_SEPARATOR) {
        return Err(RecordError::PropertyValueInvalid {
            key: key.to_owned(),
        });
    }
    Ok(())
}

/// Appends `key 0x01 value 0x02` to `out`.
///
/// # Errors
///
/// [`RecordError::PropertyKeyInvalid`] if `key` is empty or contains 0x01 or
/// 0x02; [`RecordError::PropertyValueInvalid`] if `value` contains 0x02. Nothing is
/// written on error. An empty value is written (as Java does) but parsers drop it.
pub fn append_property(out: &mut impl BufMut, key: &str, value: &str) -> Result<(), RecordError> {
    check_pair(key, value)?;
    out.put_slice(key.as_bytes());
    out.put_u8(NAME_VALUE_SEPARATOR);
    out.put_slice(value.as_bytes());
    out.put_u8(PROPERTY_SEPARATOR);
    Ok(())
}

/// Builds a properties string into a caller's buffer.
///
/// ```
/// use ringmq_protocol::message::{PropertiesBuilder, Properties, property_key};
/// let mut out = Vec::new();
/// PropertiesBuilder::new(&mut out).push(property_key::TAGS, "TagA")?.push("a", "b")?;
/// assert_eq!(out, b"TAGS\x01TagA\x02a\x01b\x02");
/// assert_eq!(Properties::new(&out).get("TAGS"), Some("TagA"));
/// # Ok::<(), ringmq_protocol::message::RecordError>(())
/// ```
#[derive(Debug)]
pub struct PropertiesBuilder<'b, B: BufMut> {
    out: &'b mut B,
}

impl<'b, B: BufMut> PropertiesBuilder<'b, B> {
    /// A builder appending to `out` (which may already hold pairs).
    pub fn new(out: &'b mut B) -> PropertiesBuilder<'b, B> {
        PropertiesBuilder { out }
    }

    /// Appends one pair; see [`append_property`].
    ///
    /// # Errors
    ///
    /// As [`append_property`].
    pub fn push(&mut self, key: &str, value: &str) -> Result<&mut Self, RecordError> {
        append_property(self.out, key, value)?;
        Ok(self)
    }
}

/// Copies `existing` into `out` without the segments whose key is in `remove` or
/// is one of the keys of `add`, then appends the pairs of `add`.
///
/// This is what the broker does to a send's properties: add `UNIQ_KEY` (when
/// absent), `CLUSTER`, `MSG_REGION`, `TRACE_ON`, remove `POP_CK` or `DELAY`. A
/// segment's key is the bytes before its first 0x01 (the whole segment if it has
/// none), so a key is removed even from segments Java's parser would ignore. Other
/// segments are copied byte for byte, each followed by 0x02 (so a last pair
/// without its 0x02 gets one); empty segments are dropped.
///
/// # Errors
///
/// As [`append_property`] for the pairs of `add`; nothing is written on error.
pub fn rewrite_properties(
    existing: &[u8],
    remove: &[&str],
    add: &[(&str, &str)],
    out: &mut impl BufMut,
) -> Result<(), RecordError> {
    for (key, value) in add {
        check_pair(key, value)?;
    }
    copy_retained(
        existing,
        |key| {
            remove.iter().any(|k| k.as_bytes() == key)
                || add.iter().any(|(k, _)| k.as_bytes() == key)
        },
        out,
    );
    for (key, value) in add {
        append_property(out, key, value)?;
    }
    Ok(())
}

/// Copies the non-empty segments of `existing` whose key is not `dropped`, each
/// followed by 0x02.
fn copy_retained(existing: &[u8], dropped: impl Fn(&[u8]) -> bool, out: &mut impl BufMut) {
    for segment in existing.split(|byte| *byte == PROPERTY_SEPARATOR) {
        if segment.is_empty() {
            continue;
        }
        let key_end = segment
            .iter()
            .position(|byte| *byte == NAME_VALUE_SEPARATOR)
            .unwrap_or(segment.len());
        if !dropped(&segment[..key_end]) {
            out.put_slice(segment);
            out.put_u8(PROPERTY_SEPARATOR);
        }
    }
}

/// `existing` with `key` set to `value` (replacing every earlier occurrence),
/// written to `out`.
///
/// # Errors
///
/// As [`append_property`].
pub fn set_property(
    existing: &[u8],
    key: &str,
    value: &str,
    out: &mut impl BufMut,
) -> Result<(), RecordError> {
    rewrite_properties(existing, &[], &[(key, value)], out)
}

/// `existing` without the segments of the given keys, written to `out`.
pub fn remove_properties(existing: &[u8], keys: &[&str], out: &mut impl BufMut) {
    copy_retained(
        existing,
        |key| keys.iter().any(|k| k.as_bytes() == key),
        out,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(bytes: &[u8]) -> Vec<(&[u8], &[u8])> {
        Properties::new(bytes).iter().collect()
    }

    #[test]
    fn parse_keeps_well_formed_pairs_and_a_trailing_pair_without_separator() {
        let got = pairs(b"KEYS\x01k1 k2\x02TAGS\x01TagA");
        assert_eq!(
            got,
            vec![(&b"KEYS"[..], &b"k1 k2"[..]), (&b"TAGS"[..], &b"TagA"[..])]
        );
    }

    #[test]
    fn parse_drops_segment_with_empty_key() {
        assert_eq!(
            pairs(b"\x01value\x02a\x01b\x02"),
            vec![(&b"a"[..], &b"b"[..])]
        );
    }

    #[test]
    fn parse_drops_segment_with_empty_value() {
        assert_eq!(pairs(b"DELAY\x01\x02a\x01b"), vec![(&b"a"[..], &b"b"[..])]);
        assert_eq!(Properties::new(b"DELAY\x01\x02").get("DELAY"), None);
    }

    #[test]
    fn parse_drops_segment_without_name_value_separator() {
        assert_eq!(
            pairs(b"novalue\x02\x02\x02x\x01y\x02"),
            vec![(&b"x"[..], &b"y"[..])]
        );
        assert!(pairs(b"").is_empty());
        assert!(pairs(b"\x02\x02").is_empty());
    }

    #[test]
    fn parse_keeps_name_value_separator_inside_value() {
        assert_eq!(pairs(b"k\x01v\x01w\x02"), vec![(&b"k"[..], &b"v\x01w"[..])]);
    }

    #[test]
    fn parse_accepts_minimal_three_byte_segment() {
        assert_eq!(pairs(b"a\x01b"), vec![(&b"a"[..], &b"b"[..])]);
        assert!(pairs(b"a\x01").is_empty());
    }

    #[test]
    fn get_returns_the_last_duplicate_like_java_hash_map() {
        let props = Properties::new(b"K\x01first\x02K\x01second\x02K\x01\x02");
        assert_eq!(props.get("K"), Some("second"));
        assert!(props.contains("K"));
        assert!(!props.contains("k"));
    }

    #[test]
    fn get_returns_none_for_non_utf8_value_but_bytes_are_available() {
        let props = Properties::new(b"K\x01\xff\x02");
        assert_eq!(props.get("K"), None);
        assert_eq!(props.get_bytes(b"K"), Some(&b"\xff"[..]));
    }

    #[test]
    fn builder_rejects_separators_and_empty_keys_without_writing() {
        let mut out = Vec::new();
        let mut builder = PropertiesBuilder::new(&mut out);
        assert!(matches!(
            builder.push("", "v"),
            Err(RecordError::PropertyKeyInvalid { .. })
        ));
        assert!(matches!(
            builder.push("a\x01", "v"),
            Err(RecordError::PropertyKeyInvalid { .. })
        ));
        assert!(matches!(
            builder.push("a", "v\x02"),
            Err(RecordError::PropertyValueInvalid { .. })
        ));
        assert!(out.is_empty());
    }

    #[test]
    fn rewrite_replaces_removes_and_appends() {
        let existing = b"UNIQ_KEY\x01AB\x02POP_CK\x01x\x02CLUSTER\x01old\x02TAGS\x01T";
        let mut out = Vec::new();
        rewrite_properties(
            existing,
            &["POP_CK"],
            &[("CLUSTER", "c1"), ("TRACE_ON", "true")],
            &mut out,
        )
        .unwrap();
        assert_eq!(
            out,
            b"UNIQ_KEY\x01AB\x02TAGS\x01T\x02CLUSTER\x01c1\x02TRACE_ON\x01true\x02"
        );
    }

    #[test]
    fn remove_properties_drops_even_unparsed_segments_of_the_key() {
        let mut out = Vec::new();
        remove_properties(
            b"DELAY\x01\x02DELAY\x013\x02\x02a\x01b\x02",
            &["DELAY"],
            &mut out,
        );
        assert_eq!(out, b"a\x01b\x02");
    }

    #[test]
    fn set_property_on_empty_string_writes_one_pair() {
        let mut out = Vec::new();
        set_property(b"", "UNIQ_KEY", "00", &mut out).unwrap();
        assert_eq!(out, b"UNIQ_KEY\x0100\x02");
    }
}
