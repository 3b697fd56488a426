//! A small JSON value with a pretty printer and a parser, for the run summary
//! files that `--json-out` writes and `compare` and `plot` read.
//!
//! `ringmq_protocol::json` speaks RocketMQ's fastjson dialect and was still
//! being written when this module was; summaries are plain RFC 8259 JSON
//! meant for people and scripts, so loadgen keeps this tiny version of its
//! own.
//!
//! # Invariants
//!
//! - Objects keep their members in insertion order, so files diff well.
//! - [`parse`] accepts everything [`Json::to_pretty`] prints; non-finite
//!   numbers are printed as `null`.
//! - Parsing nests at most [`DEPTH_MAX`] levels deep.

use std::fmt::Write as _;

/// The deepest nesting [`parse`] accepts.
pub const DEPTH_MAX: usize = 64;

/// A JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number.
    Number(f64),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, members in order.
    Object(Vec<(String, Json)>),
}

/// Why a text is not JSON.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid JSON at byte {offset}: {reason}")]
pub struct JsonError {
    /// Byte offset of the problem.
    pub offset: usize,
    /// What was expected.
    pub reason: &'static str,
}

impl From<&str> for Json {
    fn from(value: &str) -> Self {
        Json::String(value.to_string())
    }
}

impl From<String> for Json {
    fn from(value: String) -> Self {
        Json::String(value)
    }
}

impl From<f64> for Json {
    fn from(value: f64) -> Self {
        Json::Number(value)
    }
}

impl From<u64> for Json {
    fn from(value: u64) -> Self {
        Json::Number(value as f64)
    }
}

impl From<bool> for Json {
    fn from(value: bool) -> Self {
        Json::Bool(value)
    }
}

impl Json {
    /// The member `name` of an object.
    pub fn get(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(key, _)| key == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The number, if this is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Number(number) => Some(*number),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(text) => Some(text),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }

    /// Prints the value with two-space indentation and a final newline.
    /// Arrays of scalars stay on one line.
    pub fn to_pretty(&self) -> String {
        let mut out = String::new();
        self.write_pretty(&mut out, 0);
        out.push('\n');
        out
    }

    fn write_pretty(&self, out: &mut String, depth: usize) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(value) => out.push_str(if *value { "true" } else { "false" }),
            Json::Number(number) => write_number(out, *number),
            Json::String(text) => write_string(out, text),
            Json::Array(items) => {
                let flat = items.iter().all(|item| !matches!(item, Json::Object(_)));
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                        if flat {
                            out.push(' ');
                        }
                    }
                    if !flat {
                        newline(out, depth + 1);
                    }
                    item.write_pretty(out, depth + 1);
                }
                if !flat && !items.is_empty() {
                    newline(out, depth);
                }
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (index, (key, value)) in members.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    newline(out, depth + 1);
                    write_string(out, key);
                    out.push_str(": ");
                    value.write_pretty(out, depth + 1);
                }
                if !members.is_empty() {
                    newline(out, depth);
                }
                out.push('}');
            }
        }
    }
}

fn newline(out: &mut String, depth: usize) {
    out.push('\n');
    for _ in 0..depth {
        out.push_str("  ");
    }
}

fn write_number(out: &mut String, number: f64) {
    if !number.is_finite() {
        out.push_str("null");
    } else if number.fract() == 0.0 && number.abs() < 9.0e15 {
        // Integral values print without a fraction so counts read as counts.
        let _ = write!(out, "{}", number as i64);
    } else {
        let _ = write!(out, "{number}");
    }
}

fn write_string(out: &mut String, text: &str) {
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ch if (ch as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", ch as u32);
            }
            ch => out.push(ch),
        }
    }
    out.push('"');
}

/// Parses one JSON value (surrounding whitespace allowed).
///
/// # Errors
///
/// [`JsonError`] with the offset of the first problem.
pub fn parse(text: &str) -> Result<Json, JsonError> {
    let mut parser = Parser {
        bytes: text.as_bytes(),
        offset: 0,
    };
    let value = parser.value(0)?;
    parser.skip_whitespace();
    if parser.offset != parser.bytes.len() {
        return Err(parser.error("trailing characters after the value"));
    }
    Ok(value)
}

struct Parser<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl Parser<'_> {
    fn error(&self, reason: &'static str) -> JsonError {
        JsonError {
            offset: self.offset,
            reason,
        }
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.offset) {
            self.offset += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.offset).copied()
    }

    fn expect(&mut self, byte: u8, reason: &'static str) -> Result<(), JsonError> {
        if self.peek() == Some(byte) {
            self.offset += 1;
            Ok(())
        } else {
            Err(self.error(reason))
        }
    }

    fn literal(&mut self, word: &'static str, value: Json) -> Result<Json, JsonError> {
        if self.bytes[self.offset..].starts_with(word.as_bytes()) {
            self.offset += word.len();
            Ok(value)
        } else {
            Err(self.error("unknown literal"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, JsonError> {
        if depth > DEPTH_MAX {
            return Err(self.error("nesting too deep"));
        }
        self.skip_whitespace();
        match self.peek() {
            None => Err(self.error("unexpected end of input")),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'"') => self.string().map(Json::String),
            Some(b'[') => self.array(depth),
            Some(b'{') => self.object(depth),
            Some(_) => self.number(),
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json, JsonError> {
        self.offset += 1;
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.offset += 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.offset += 1,
                Some(b']') => {
                    self.offset += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json, JsonError> {
        self.offset += 1;
        let mut members = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.offset += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a member name"));
            }
            let key = self.string()?;
            self.skip_whitespace();
            self.expect(b':', "expected ':'")?;
            let value = self.value(depth + 1)?;
            members.push((key, value));
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.offset += 1,
                Some(b'}') => {
                    self.offset += 1;
                    return Ok(Json::Object(members));
                }
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }

    fn number(&mut self) -> Result<Json, JsonError> {
        let start = self.offset;
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.peek() {
            self.offset += 1;
        }
        std::str::from_utf8(&self.bytes[start..self.offset])
            .ok()
            .and_then(|text| text.parse::<f64>().ok())
            .map(Json::Number)
            .ok_or(JsonError {
                offset: start,
                reason: "invalid number",
            })
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.offset += 1;
        let mut out = Vec::new();
        loop {
            let Some(byte) = self.peek() else {
                return Err(self.error("unterminated string"));
            };
            self.offset += 1;
            match byte {
                b'"' => break,
                b'\\' => {
                    let escaped = self
                        .peek()
                        .ok_or_else(|| self.error("unterminated escape"))?;
                    self.offset += 1;
                    let ch = match escaped {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return Err(self.error("unknown escape")),
                    };
                    let mut buf = [0_u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                byte => out.push(byte),
            }
        }
        String::from_utf8(out).map_err(|_| self.error("string is not UTF-8"))
    }

    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let high = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&high) {
            if !self.bytes[self.offset..].starts_with(b"\\u") {
                return Err(self.error("lone surrogate"));
            }
            self.offset += 2;
            let low = self.hex4()?;
            if !(0xDC00..0xE000).contains(&low) {
                return Err(self.error("lone surrogate"));
            }
            0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
        } else {
            high
        };
        char::from_u32(code).ok_or_else(|| self.error("invalid code point"))
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self
            .bytes
            .get(self.offset..self.offset + 4)
            .ok_or_else(|| self.error("short \\u escape"))?;
        let text = std::str::from_utf8(digits).map_err(|_| self.error("bad \\u escape"))?;
        let code = u32::from_str_radix(text, 16).map_err(|_| self.error("bad \\u escape"))?;
        self.offset += 4;
        Ok(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pretty_output_parses_back_to_the_same_value() {
        let value = Json::Object(vec![
            ("name".into(), "run \"a\"\n".into()),
            ("msgs_per_s".into(), 1_234_567.0.into()),
            ("ratio".into(), 0.125.into()),
            ("ok".into(), true.into()),
            ("none".into(), Json::Null),
            (
                "points".into(),
                Json::Array(vec![Json::Array(vec![1.0.into(), 0.5.into()])]),
            ),
            (
                "nested".into(),
                Json::Array(vec![Json::Object(vec![("a".into(), 1.0.into())])]),
            ),
            ("empty".into(), Json::Object(vec![])),
        ]);
        let text = value.to_pretty();
        assert_eq!(parse(&text).unwrap(), value);
        assert!(text.contains("\"msgs_per_s\": 1234567,"), "{text}");
    }

    #[test]
    fn parse_reports_the_offset_of_the_problem() {
        let error = parse("{\"a\": 1,, }").unwrap_err();
        assert_eq!(error.offset, 8);
        assert!(parse("[1, 2] x").is_err());
        assert!(parse("\"abc").is_err());
    }

    #[test]
    fn parse_decodes_escapes_and_surrogate_pairs() {
        assert_eq!(
            parse(r#""a\u00e9\ud83d\ude00\/""#).unwrap(),
            Json::from("a\u{e9}\u{1f600}/")
        );
        assert!(parse(r#""\ud83d""#).is_err());
    }

    #[test]
    fn parse_rejects_nesting_deeper_than_the_limit() {
        let deep = "[".repeat(DEPTH_MAX + 2) + &"]".repeat(DEPTH_MAX + 2);
        assert_eq!(parse(&deep).unwrap_err().reason, "nesting too deep");
    }

    #[test]
    fn non_finite_numbers_print_as_null() {
        assert_eq!(Json::Number(f64::NAN).to_pretty(), "null\n");
    }

    proptest! {
        #[test]
        fn strings_and_numbers_round_trip(text in any::<String>(), number in -1e300_f64..1e300) {
            let value = Json::Array(vec![Json::String(text), Json::Number(number)]);
            prop_assert_eq!(parse(&value.to_pretty()).unwrap(), value);
        }

        #[test]
        fn parse_never_panics(text in any::<String>()) {
            let _ = parse(&text);
        }
    }
}
