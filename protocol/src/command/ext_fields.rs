//! `ExtFields`: the ordered string map of a command's custom header.
//!
//! Decoding a header must not allocate once per field (a SEND_MESSAGE_V2
//! request carries about 14), so entries are spans, not `String`s. A span
//! points either into `source`, the header bytes shared with the frame
//! (`Bytes`, reference counted, never copied), or into `arena`, one `String`
//! that holds text the decoder had to rewrite (JSON escapes) and everything
//! inserted later. A decoded header therefore costs one `Vec` of entries and,
//! only when some string had escapes, one arena allocation.
//!
//! ```text
//! source: {"code":310,"extFields":{"a":"G1","b":"T\u0001x"}, ...
//!                                   ^key ^val  ^key
//! arena:  "T\u{1}x"                 (unescaped value of "b")
//! entries: [(src 27..28, src 31..33), (src 36..37, arena 0..3)]
//! ```
//!
//! # Invariants
//!
//! - Every span lies inside its buffer and covers valid UTF-8: the callers of
//!   the `unsafe` `source_span` check the whole header or the one string
//!   first, and arena text is a `String`.
//! - No two entries have the same key. Decoders replace the value of a
//!   repeated key in place (last value wins, like Java's `HashMap.put`).
//! - Both buffers stay below 2^31 bytes, so a span's start fits 31 bits and
//!   its top bit can mark the arena.

use std::fmt;

use bytes::Bytes;

/// Top bit of [`Span::start`]: the span points into the arena.
const ARENA_BIT: u32 = 1 << 31;

/// Largest buffer a span can point into.
const BUFFER_SIZE_MAX: usize = (ARENA_BIT - 1) as usize;

const _: () = assert!(crate::limits::HEADER_SIZE_MAX as usize <= BUFFER_SIZE_MAX);

/// A byte range in `source` or, with [`ARENA_BIT`] set, in `arena`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    start: u32,
    len: u32,
}

impl Span {
    fn is_arena(self) -> bool {
        self.start & ARENA_BIT != 0
    }

    fn range(self) -> std::ops::Range<usize> {
        let start = (self.start & !ARENA_BIT) as usize;
        start..start + self.len as usize
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    key: Span,
    value: Span,
}

/// The `extFields` of a command: an insertion-ordered map of string keys to
/// string values, with unique keys.
///
/// An empty map and an absent `extFields` are the same thing here; encoders
/// omit an empty map.
#[derive(Clone, Default)]
pub struct ExtFields {
    source: Bytes,
    arena: String,
    entries: Vec<Entry>,
    /// One bit per key hash ([`key_bit`]) of every key ever pushed by a
    /// decoder: a clear bit proves a new key is not a duplicate, so decoding
    /// skips the scan for almost every key.
    key_bits: u64,
}

/// A bit chosen by a cheap hash of a key's length and first and last bytes.
/// For one-letter keys it is `3 * letter mod 64`, and 3 is odd, so any 64
/// consecutive letters (the V2 keys `a`..`n` among them) get distinct bits.
fn key_bit(key: &[u8]) -> u64 {
    let first = u32::from(key.first().copied().unwrap_or(0));
    let last = u32::from(key.last().copied().unwrap_or(0));
    let length = (key.len() as u32).wrapping_sub(1);
    let index = first
        .wrapping_add(last.wrapping_mul(2))
        .wrapping_add(length.wrapping_mul(5));
    1 << (index & 63)
}

impl ExtFields {
    /// An empty map; does not allocate.
    pub const fn new() -> Self {
        ExtFields {
            source: Bytes::new(),
            arena: String::new(),
            entries: Vec::new(),
            key_bits: 0,
        }
    }

    /// An empty map with room for `entry_count` entries and `text_size`
    /// bytes of keys and values.
    pub fn with_capacity(entry_count: usize, text_size: usize) -> Self {
        ExtFields {
            source: Bytes::new(),
            arena: String::with_capacity(text_size),
            entries: Vec::with_capacity(entry_count),
            key_bits: 0,
        }
    }

    /// A map whose spans may point into `source`.
    pub(crate) fn with_source(source: Bytes, entry_count: usize) -> Self {
        assert!(
            source.len() <= BUFFER_SIZE_MAX,
            "ext source of {} bytes",
            source.len()
        );
        ExtFields {
            source,
            arena: String::new(),
            entries: Vec::with_capacity(entry_count),
            key_bits: 0,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.position(key)
            .map(|index| self.text(self.entries[index].value))
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// Sets `key` to `value`: replaces the value in place if the key exists,
    /// appends otherwise.
    pub fn insert(&mut self, key: &str, value: &str) {
        let value = self.push_arena(value);
        self.put(key, value);
    }

    /// Sets `key` to the `Display` text of `value` (numbers, booleans)
    /// without an intermediate `String`.
    pub fn insert_display(&mut self, key: &str, value: impl fmt::Display) {
        use fmt::Write as _;
        let start = self.arena.len();
        write!(self.arena, "{value}").expect("writing to a String cannot fail");
        let value = self.arena_span(start);
        self.put(key, value);
    }

    /// Removes `key`, returning whether it was present.
    pub fn remove(&mut self, key: &str) -> bool {
        match self.position(key) {
            Some(index) => {
                self.entries.remove(index);
                true
            }
            None => false,
        }
    }

    /// Removes every entry, keeping allocated capacity.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.arena.clear();
        self.source = Bytes::new();
        self.key_bits = 0;
    }

    /// The entries in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        self.entries
            .iter()
            .map(|entry| (self.text(entry.key), self.text(entry.value)))
    }

    /// The entries sorted by key (byte order, which is Java's `String`
    /// order for the ASCII keys RocketMQ uses).
    pub fn sorted(&self) -> Vec<(&str, &str)> {
        let mut pairs: Vec<_> = self.iter().collect();
        pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
        pairs
    }

    /// Sorts the entries by key (byte order), e.g. to write `extFields` in
    /// the order of the protocol reference's examples.
    pub fn sort_by_key(&mut self) {
        let mut entries = std::mem::take(&mut self.entries);
        entries.sort_by(|a, b| self.text(a.key).cmp(self.text(b.key)));
        self.entries = entries;
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.entries
            .iter()
            .position(|entry| self.text(entry.key) == key)
    }

    fn put(&mut self, key: &str, value: Span) {
        match self.position(key) {
            Some(index) => self.entries[index].value = value,
            None => {
                self.key_bits |= key_bit(key.as_bytes());
                let key = self.push_arena(key);
                self.entries.push(Entry { key, value });
            }
        }
    }

    #[inline]
    pub(crate) fn text(&self, span: Span) -> &str {
        let range = span.range();
        if span.is_arena() {
            &self.arena[range]
        } else {
            let bytes = &self.source[range];
            // SAFETY: source spans are only created by `source_span`, whose
            // callers guarantee that the range is valid UTF-8 (module
            // invariant); `source` is immutable.
            unsafe { std::str::from_utf8_unchecked(bytes) }
        }
    }

    /// A span over `source[start..end]`.
    ///
    /// # Safety
    ///
    /// `source[start..end]` must be valid UTF-8.
    pub(crate) unsafe fn source_span(&self, start: usize, end: usize) -> Span {
        assert!(start <= end, "span {start}..{end}");
        assert!(
            end <= self.source.len(),
            "span end {end} > source {}",
            self.source.len()
        );
        debug_assert!(std::str::from_utf8(&self.source[start..end]).is_ok());
        Span {
            start: start as u32,
            len: (end - start) as u32,
        }
    }

    /// Appends `text` to the arena and returns its span.
    pub(crate) fn push_arena(&mut self, text: &str) -> Span {
        let start = self.arena.len();
        self.arena.push_str(text);
        self.arena_span(start)
    }

    /// The arena as a `String` to append to; finish with [`Self::arena_span`].
    pub(crate) fn arena_mut(&mut self) -> &mut String {
        &mut self.arena
    }

    /// The span from `start` to the current end of the arena.
    pub(crate) fn arena_span(&self, start: usize) -> Span {
        let end = self.arena.len();
        assert!(end <= BUFFER_SIZE_MAX, "ext arena of {end} bytes");
        assert!(start <= end, "arena span {start}..{end}");
        Span {
            start: start as u32 | ARENA_BIT,
            len: (end - start) as u32,
        }
    }

    /// Adds a decoded entry; a repeated key gets the new value in place.
    #[inline]
    pub(crate) fn push_decoded(&mut self, key: Span, value: Span) {
        let key_text = self.text(key);
        let bit = key_bit(key_text.as_bytes());
        if self.key_bits & bit == 0 {
            self.key_bits |= bit;
            self.entries.push(Entry { key, value });
            return;
        }
        let existing = self
            .entries
            .iter()
            .position(|entry| self.text(entry.key) == key_text);
        match existing {
            Some(index) => self.entries[index].value = value,
            None => self.entries.push(Entry { key, value }),
        }
    }

    /// Removes a decoded key whose value was JSON `null`.
    pub(crate) fn remove_decoded(&mut self, key: Span) {
        let key_text = self.text(key);
        if let Some(index) = self
            .entries
            .iter()
            .position(|entry| self.text(entry.key) == key_text)
        {
            self.entries.remove(index);
        }
    }
}

impl PartialEq for ExtFields {
    /// Equal when both hold the same entries in the same order, wherever the
    /// text lives.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for ExtFields {}

impl fmt::Debug for ExtFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for ExtFields {
    fn from_iter<T: IntoIterator<Item = (K, V)>>(iter: T) -> Self {
        let mut fields = ExtFields::new();
        for (key, value) in iter {
            fields.insert(key.as_ref(), value.as_ref());
        }
        fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_replaces_existing_keys_in_place() {
        let mut fields = ExtFields::new();
        fields.insert("a", "1");
        fields.insert("b", "2");
        fields.insert("a", "3");
        assert_eq!(fields.iter().collect::<Vec<_>>(), [("a", "3"), ("b", "2")]);
        assert_eq!(fields.get("a"), Some("3"));
        assert_eq!(fields.get("c"), None);
    }

    #[test]
    fn insert_display_writes_numbers_as_text() {
        let mut fields = ExtFields::new();
        fields.insert_display("queueOffset", -42i64);
        fields.insert_display("committed", true);
        assert_eq!(fields.get("queueOffset"), Some("-42"));
        assert_eq!(fields.get("committed"), Some("true"));
    }

    #[test]
    fn sort_by_key_orders_entries_by_key_bytes() {
        let mut fields: ExtFields = [("queueId", "1"), ("MSG_REGION", "r"), ("msgId", "m")]
            .into_iter()
            .collect();
        fields.sort_by_key();
        let keys: Vec<_> = fields.iter().map(|(key, _)| key).collect();
        assert_eq!(keys, ["MSG_REGION", "msgId", "queueId"]);
        assert_eq!(fields.get("queueId"), Some("1"));
    }

    #[test]
    fn remove_deletes_only_the_named_key() {
        let mut fields: ExtFields = [("a", "1"), ("b", "2")].into_iter().collect();
        assert!(fields.remove("a"));
        assert!(!fields.remove("a"));
        assert_eq!(fields.iter().collect::<Vec<_>>(), [("b", "2")]);
    }

    #[test]
    fn source_spans_read_the_shared_bytes() {
        let mut fields = ExtFields::with_source(Bytes::from_static(b"xtopicTopicTest"), 1);
        // SAFETY: ASCII ranges.
        let (key, value) = unsafe { (fields.source_span(1, 6), fields.source_span(6, 15)) };
        fields.push_decoded(key, value);
        let arena_value = fields.push_arena("Other");
        fields.push_decoded(key, arena_value);
        assert_eq!(fields.iter().collect::<Vec<_>>(), [("topic", "Other")]);
        fields.remove_decoded(key);
        assert!(fields.is_empty());
    }

    #[test]
    fn push_decoded_finds_duplicates_among_many_keys() {
        let mut fields = ExtFields::new();
        let keys: Vec<String> = (0..200).map(|index| format!("key{index}")).collect();
        for round in 0..2 {
            for key in &keys {
                let key_span = fields.push_arena(key);
                let value_span = fields.push_arena(&format!("{round}"));
                fields.push_decoded(key_span, value_span);
            }
        }
        assert_eq!(fields.len(), 200);
        assert!(fields.iter().all(|(_, value)| value == "1"));
    }

    #[test]
    fn one_letter_keys_have_distinct_bits() {
        let bits: std::collections::HashSet<u64> =
            (b'a'..=b'n').map(|letter| key_bit(&[letter])).collect();
        assert_eq!(bits.len(), 14);
    }

    #[test]
    fn decoded_keys_are_deduplicated_against_inserted_ones() {
        let mut fields = ExtFields::new();
        fields.insert("topic", "a");
        let key = fields.push_arena("topic");
        let value = fields.push_arena("b");
        fields.push_decoded(key, value);
        assert_eq!(fields.iter().collect::<Vec<_>>(), [("topic", "b")]);
    }

    #[test]
    fn equality_ignores_where_text_lives_but_not_order() {
        let a: ExtFields = [("a", "1"), ("b", "2")].into_iter().collect();
        let b: ExtFields = [("a", "1"), ("b", "2")].into_iter().collect();
        let c: ExtFields = [("b", "2"), ("a", "1")].into_iter().collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(format!("{a:?}"), r#"{"a": "1", "b": "2"}"#);
    }
}
