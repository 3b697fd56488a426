//! A reader of Java `.properties` text, as `java.util.Properties.load`
//! reads it (the format of RocketMQ's `broker.conf`).
//!
//! ```text
//! # comment            ! also a comment        (first non-blank char # or !)
//! key=value            key = value             key:value       key value
//! long.value=first \
//!            second    (odd number of trailing backslashes joins lines;
//!                       the next line's leading blanks are skipped)
//! escaped\ key=a\tb\u0041   (\t \n \r \f \uXXXX, \X is X)
//! ```
//!
//! Java's rules kept here: blanks are space, TAB and form feed; the key ends
//! at the first unescaped `=`, `:` or blank; blanks around the separator are
//! skipped; lines end at `\n`, `\r` or `\r\n`; a later duplicate key wins
//! (the caller applies entries in order, so that falls out).
//!
//! One deliberate difference: Java keeps a value's trailing blanks, and
//! RocketMQ's `MixAll.properties2Object` then trims only `String` values, so
//! `listenPort=10911 ` is silently ignored by a Java broker. Here every value
//! is trimmed, so that line sets the port. And the text is UTF-8, where
//! `Properties.load(InputStream)` (what RocketMQ uses) reads ISO-8859-1.
//!
//! # Invariants
//!
//! - Every returned entry has a non-empty key (Java would accept an empty key
//!   from a line such as `=value`; no configuration key is empty, so it is
//!   reported as unknown by the caller instead: see [`Property::key`]).
//! - `line` is the 1-based number of the natural line the entry starts on.

use super::error::ConfigError;

/// One `key=value` entry of a properties text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    /// The key, unescaped. May be empty for a line like `=value`.
    pub key: String,
    /// The value, unescaped and trimmed of blanks at both ends.
    pub value: String,
    /// 1-based line number where the entry starts.
    pub line: usize,
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\u{c}')
}

/// Splits `text` into logical lines: natural lines joined where a line ends
/// in an odd number of backslashes. Comment and blank lines are dropped.
/// Each item is (first line number, logical line text with the joining
/// backslashes removed).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut natural: Vec<&str> = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        match rest.find(['\n', '\r']) {
            Some(end) => {
                natural.push(&rest[..end]);
                let skip = if rest[end..].starts_with("\r\n") {
                    2
                } else {
                    1
                };
                rest = &rest[end + skip..];
            }
            None => {
                natural.push(rest);
                rest = "";
            }
        }
    }
    let mut out = Vec::new();
    let mut index = 0;
    while index < natural.len() {
        let start = index;
        let first = natural[index].trim_start_matches(is_blank);
        index += 1;
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        let mut logical = String::new();
        let mut piece = first;
        loop {
            let trailing = piece.len() - piece.trim_end_matches('\\').len();
            if trailing % 2 == 1 && index < natural.len() {
                logical.push_str(&piece[..piece.len() - 1]);
                piece = natural[index].trim_start_matches(is_blank);
                index += 1;
            } else if trailing % 2 == 1 {
                // A continuation at the end of input: Java drops the backslash.
                logical.push_str(&piece[..piece.len() - 1]);
                break;
            } else {
                logical.push_str(piece);
                break;
            }
        }
        out.push((start + 1, logical));
    }
    out
}

/// Resolves Java escapes in `raw`.
fn unescape(raw: &str, line: usize) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = (hex.len() == 4)
                    .then(|| u32::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .ok_or(ConfigError::MalformedUnicodeEscape { line })?;
                // Java builds UTF-16 units; a lone surrogate has no Rust char.
                out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Ok(out)
}

/// Reads every entry of a properties text, in order.
///
/// # Errors
///
/// [`ConfigError::MalformedUnicodeEscape`] for a `\u` not followed by four
/// hex digits (Java's `Properties.load` throws on it too).
pub fn parse_properties(text: &str) -> Result<Vec<Property>, ConfigError> {
    let mut entries = Vec::new();
    for (line, logical) in logical_lines(text) {
        // Find the key's end: the first unescaped separator or blank.
        let mut key_end = logical.len();
        let mut escaped = false;
        for (position, c) in logical.char_indices() {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '=' || c == ':' || is_blank(c) {
                key_end = position;
                break;
            }
        }
        let mut rest = logical[key_end..].trim_start_matches(is_blank);
        if rest.starts_with('=') || rest.starts_with(':') {
            rest = rest[1..].trim_start_matches(is_blank);
        }
        let key = unescape(&logical[..key_end], line)?;
        let value = unescape(rest, line)?;
        entries.push(Property {
            key,
            value: value.trim_matches(is_blank).to_owned(),
            line,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        parse_properties(text)
            .unwrap()
            .into_iter()
            .map(|p| (p.key, p.value))
            .collect()
    }

    fn pair(key: &str, value: &str) -> (String, String) {
        (key.to_owned(), value.to_owned())
    }

    #[test]
    fn separators_and_blanks_are_read_as_java_reads_them() {
        assert_eq!(
            pairs("a=1\nb = 2\nc:3\nd 4\n\te\t=\t5\t\nf\n"),
            vec![
                pair("a", "1"),
                pair("b", "2"),
                pair("c", "3"),
                pair("d", "4"),
                pair("e", "5"),
                pair("f", ""),
            ]
        );
    }

    #[test]
    fn comments_and_blank_lines_are_skipped_and_line_numbers_kept() {
        let entries = parse_properties("# one\n\n   ! two\nkey=value # not a comment\n").unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].key, "key");
        assert_eq!(entries[0].value, "value # not a comment");
        assert_eq!(entries[0].line, 4);
    }

    #[test]
    fn continuation_lines_join_and_skip_leading_blanks() {
        let entries = parse_properties("a=one \\\n    two\\\\\nb=x\\\r\n  y\rc=\\").unwrap();
        let got: Vec<_> = entries
            .iter()
            .map(|p| (p.key.as_str(), p.value.as_str(), p.line))
            .collect();
        assert_eq!(
            got,
            vec![("a", "one two\\", 1), ("b", "xy", 3), ("c", "", 5)]
        );
    }

    #[test]
    fn escapes_in_keys_and_values_are_resolved() {
        assert_eq!(
            pairs("my\\ key\\=x=a\\tb\\u0041\\q"),
            vec![pair("my key=x", "a\tbAq")]
        );
    }

    #[test]
    fn a_malformed_unicode_escape_is_an_error_naming_the_line() {
        assert_eq!(
            parse_properties("ok=1\nbad=\\u12G4\n"),
            Err(ConfigError::MalformedUnicodeEscape { line: 2 })
        );
        assert_eq!(
            parse_properties("bad=\\u12"),
            Err(ConfigError::MalformedUnicodeEscape { line: 1 })
        );
    }

    #[test]
    fn values_may_contain_separators() {
        assert_eq!(
            pairs("namesrvAddr=10.0.0.1:9876;10.0.0.2:9876\nnamesrvAddr 10.0.0.3:9876\nk : v=w"),
            vec![
                pair("namesrvAddr", "10.0.0.1:9876;10.0.0.2:9876"),
                pair("namesrvAddr", "10.0.0.3:9876"),
                pair("k", "v=w"),
            ]
        );
    }

    #[test]
    fn trailing_blanks_of_values_are_trimmed_unlike_java() {
        assert_eq!(
            pairs("listenPort=10911 \t"),
            vec![pair("listenPort", "10911")]
        );
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_without_panicking_into_trimmed_entries(text in "\\PC{0,200}|[a-z=:! #\\\\\\n\\r\\t]{0,80}") {
            if let Ok(entries) = parse_properties(&text) {
                for entry in entries {
                    proptest::prop_assert_eq!(entry.value.trim_matches(is_blank), entry.value.as_str());
                    proptest::prop_assert!(entry.line >= 1);
                }
            }
        }

        #[test]
        fn simple_lines_round_trip(key in "[A-Za-z][A-Za-z0-9.]{0,20}", value in "[A-Za-z0-9.:;/_-]{0,30}") {
            let entries = parse_properties(&format!("# header\n{key}={value}\n")).unwrap();
            proptest::prop_assert_eq!(entries, vec![Property { key, value, line: 2 }]);
        }
    }
}
