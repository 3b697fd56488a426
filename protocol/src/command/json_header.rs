//! The JSON form of the `RemotingCommand` header (serialize type 0).
//!
//! Decoding follows fastjson's leniency (protocol reference 1.4): members in
//! any order, unknown members skipped, repeated members last-wins,
//! `extFields` values that are strings, numbers, booleans (kept as their
//! text) or `null` (absent), nested objects or arrays as `extFields` values
//! (kept as their raw JSON text), `remark` absent, `null` or `""` (all
//! `None`), unknown `language` names (`OTHER`), `language` as an ordinal
//! number, integer members given as strings (`"code":"105"`) or `null` (0),
//! and no `serializeTypeCurrentRPC`. Headers that are not UTF-8 are decoded
//! lossily, as Java's `new String(bytes, UTF_8)` does.
//!
//! Encoding writes Java's bytes: members in fastjson's sorted order
//!
//! ```text
//! {"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA",
//!  "opaque":7,["remark":"..",]"serializeTypeCurrentRPC":"JSON","version":479}
//! ```
//!
//! with `extFields` omitted when empty and its entries in map order.
//!
//! # Invariants
//!
//! - Nesting of skipped values is bounded by [`JSON_DEPTH_MAX`]; the parser
//!   never recurses deeper and never reads past the header.

use bytes::{BufMut, Bytes};

use super::RemotingCommand;
use super::ext_fields::{ExtFields, Span};
use super::json_text::{unescape_into, write_quoted};
use crate::code::LanguageCode;
use crate::error::DecodeError;

/// Deepest nesting of objects and arrays accepted inside a header.
pub const JSON_DEPTH_MAX: usize = 32;

/// Entries reserved up front for `extFields`; SEND_MESSAGE_V2 has 14.
const EXT_ENTRY_COUNT_HINT: usize = 16;

/// Decodes a JSON header. The returned command has no body.
pub(crate) fn decode(header: &Bytes) -> Result<RemotingCommand, DecodeError> {
    if header.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8; `is_ascii` checks a word at a
        // time, several times faster than `from_utf8` on these headers.
        let text = unsafe { std::str::from_utf8_unchecked(header) };
        return decode_text(header, text);
    }
    match std::str::from_utf8(header) {
        Ok(text) => decode_text(header, text),
        Err(_) => {
            let owned = Bytes::from(String::from_utf8_lossy(header).into_owned());
            let text = std::str::from_utf8(&owned).expect("lossy decoding yields UTF-8");
            decode_text(&owned, text)
        }
    }
}

/// Decodes `text`, which is `source` checked to be UTF-8.
fn decode_text(source: &Bytes, text: &str) -> Result<RemotingCommand, DecodeError> {
    let mut parser = Parser {
        text,
        src: text.as_bytes(),
        pos: 0,
        failure: None,
    };
    match parser.command(source) {
        Some(command) => Ok(command),
        None => Err(parser.failure.map_or(
            DecodeError::MalformedJsonHeader {
                position: parser.pos,
                reason: "malformed",
            },
            Failure::into_error,
        )),
    }
}

/// Writes the JSON header of `command` exactly as fastjson writes Java's.
pub(crate) fn encode<B: BufMut>(command: &RemotingCommand, dst: &mut B) {
    dst.put_slice(b"{\"code\":");
    put_i32(dst, command.code);
    if !command.ext_fields.is_empty() {
        dst.put_slice(b",\"extFields\":{");
        for (index, (key, value)) in command.ext_fields.iter().enumerate() {
            if index > 0 {
                dst.put_u8(b',');
            }
            write_quoted(dst, key);
            dst.put_u8(b':');
            write_quoted(dst, value);
        }
        dst.put_u8(b'}');
    }
    dst.put_slice(b",\"flag\":");
    put_i32(dst, command.flag);
    dst.put_slice(b",\"language\":\"");
    dst.put_slice(command.language.name().as_bytes());
    dst.put_slice(b"\",\"opaque\":");
    put_i32(dst, command.opaque);
    if let Some(remark) = &command.remark {
        dst.put_slice(b",\"remark\":");
        write_quoted(dst, remark);
    }
    dst.put_slice(b",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    put_i32(dst, command.version);
    dst.put_u8(b'}');
}

/// Writes `value` in decimal without allocating.
fn put_i32<B: BufMut>(dst: &mut B, value: i32) {
    let mut digits = [0u8; 11];
    let mut start = digits.len();
    let mut rest = value.unsigned_abs();
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        start -= 1;
        digits[start] = b'-';
    }
    dst.put_slice(&digits[start..]);
}

/// The index of the first `"` or `\\` at or after `from`, eight bytes at a
/// time (header strings such as message properties run to hundreds of
/// bytes).
#[inline]
fn find_quote_or_backslash(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut index = from;
    while let Some(chunk) = bytes.get(index..).and_then(|rest| rest.first_chunk::<8>()) {
        let word = u64::from_le_bytes(*chunk);
        let quotes = word ^ (ONES * u64::from(b'"'));
        let backslashes = word ^ (ONES * u64::from(b'\\'));
        // A byte of `x` is zero iff the byte matched; this classic test sets
        // the high bit of the lowest zero byte exactly (higher ones may be
        // false positives, which the lowest-bit search ignores).
        let zero_bytes =
            (quotes.wrapping_sub(ONES) & !quotes) | (backslashes.wrapping_sub(ONES) & !backslashes);
        let found = zero_bytes & HIGHS;
        if found != 0 {
            return Some(index + (found.trailing_zeros() / 8) as usize);
        }
        index += 8;
    }
    let rest = bytes.get(index..)?;
    rest.iter()
        .position(|&byte| byte == b'"' || byte == b'\\')
        .map(|offset| index + offset)
}

enum Member {
    Code,
    Flag,
    Opaque,
    Version,
    Language,
    Remark,
    ExtFields,
    Other,
}

/// A JSON string's content range (between the quotes) in the source. Kept
/// small so that `Option<StringToken>` travels in registers.
#[derive(Clone, Copy)]
struct StringToken {
    start: u32,
    end: u32,
    escaped: bool,
}

impl StringToken {
    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// Where and why parsing stopped; becomes a [`DecodeError`] once, at the end,
/// so the hot paths pass small `Option`s instead of large `Result`s.
#[derive(Clone, Copy)]
struct Failure {
    position: usize,
    reason: &'static str,
    member: Option<&'static str>,
}

impl Failure {
    fn into_error(self) -> DecodeError {
        match self.member {
            Some(member) => DecodeError::InvalidJsonMember {
                member,
                position: self.position,
                reason: self.reason,
            },
            None => DecodeError::MalformedJsonHeader {
                position: self.position,
                reason: self.reason,
            },
        }
    }
}

struct Parser<'a> {
    /// The header as text; `src` is the same bytes.
    text: &'a str,
    src: &'a [u8],
    pos: usize,
    failure: Option<Failure>,
}

impl Parser<'_> {
    /// Records why parsing failed and returns `None` for `?`.
    #[cold]
    fn fail<T>(&mut self, position: usize, reason: &'static str) -> Option<T> {
        self.failure = Some(Failure {
            position,
            reason,
            member: None,
        });
        None
    }

    #[cold]
    fn fail_member<T>(
        &mut self,
        member: &'static str,
        position: usize,
        reason: &'static str,
    ) -> Option<T> {
        self.failure = Some(Failure {
            position,
            reason,
            member: Some(member),
        });
        None
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    #[inline(always)]
    fn skip_whitespace(&mut self) {
        // fastjson also treats \b and \f as whitespace between tokens.
        while let Some(b' ' | b'\t' | b'\n' | b'\r' | 0x08 | 0x0C) = self.peek() {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8, reason: &'static str) -> Option<()> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Some(())
        } else {
            self.fail(self.pos, reason)
        }
    }

    /// After a member or element: `,` (true) or the closing `close` (false).
    fn separator(&mut self, close: u8, reason: &'static str) -> Option<bool> {
        self.skip_whitespace();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Some(true)
            }
            Some(byte) if byte == close => {
                self.pos += 1;
                Some(false)
            }
            _ => self.fail(self.pos, reason),
        }
    }

    fn command(&mut self, source: &Bytes) -> Option<RemotingCommand> {
        let mut command = RemotingCommand::default();
        self.skip_whitespace();
        self.expect(b'{', "expected '{'")?;
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
        } else {
            loop {
                self.skip_whitespace();
                let key = self.string_token()?;
                self.skip_whitespace();
                self.expect(b':', "expected ':'")?;
                self.skip_whitespace();
                match self.member_name(key)? {
                    Member::Code => command.code = self.int_value("code")?,
                    Member::Flag => command.flag = self.int_value("flag")?,
                    Member::Opaque => command.opaque = self.int_value("opaque")?,
                    Member::Version => command.version = self.int_value("version")?,
                    Member::Language => command.language = self.language_value()?,
                    Member::Remark => command.remark = self.remark_value()?,
                    Member::ExtFields => command.ext_fields = self.ext_fields_value(source)?,
                    Member::Other => self.skip_value(0)?,
                }
                if !self.separator(b'}', "expected ',' or '}'")? {
                    break;
                }
            }
        }
        self.skip_whitespace();
        if self.pos != self.src.len() {
            return self.fail(self.pos, "trailing bytes after the header object");
        }
        Some(command)
    }

    /// Reads a string starting at its opening quote.
    #[inline(always)]
    fn string_token(&mut self) -> Option<StringToken> {
        if self.peek() != Some(b'"') {
            return self.fail(self.pos, "expected '\"'");
        }
        let start = self.pos + 1;
        let mut escaped = false;
        let mut index = start;
        while let Some(found) = find_quote_or_backslash(self.src, index) {
            if self.src[found] == b'"' {
                self.pos = found + 1;
                // Headers are at most 2^24 bytes (24-bit length), so
                // positions fit 32 bits.
                return Some(StringToken {
                    start: start as u32,
                    end: found as u32,
                    escaped,
                });
            }
            escaped = true;
            index = found + 2;
        }
        self.fail(start - 1, "unterminated string")
    }

    fn raw_text(&self, token: StringToken) -> &str {
        // The range lies between two ASCII quotes, so on char boundaries.
        &self.text[token.range()]
    }

    fn unescaped(&mut self, token: StringToken) -> Option<String> {
        let mut text = String::with_capacity(token.range().len());
        match unescape_into(self.raw_text(token), &mut text) {
            Ok(()) => Some(text),
            Err((offset, reason)) => self.fail(token.start as usize + offset, reason),
        }
    }

    fn member_name(&mut self, token: StringToken) -> Option<Member> {
        let owned;
        let name: &[u8] = if token.escaped {
            owned = self.unescaped(token)?;
            owned.as_bytes()
        } else {
            &self.src[token.range()]
        };
        Some(match name {
            b"code" => Member::Code,
            b"flag" => Member::Flag,
            b"opaque" => Member::Opaque,
            b"version" => Member::Version,
            b"language" => Member::Language,
            b"remark" => Member::Remark,
            b"extFields" => Member::ExtFields,
            _ => Member::Other,
        })
    }

    /// Reads a number's text (lenient JSON number syntax); returns its range.
    fn number_token(&mut self) -> Option<std::ops::Range<usize>> {
        let start = self.pos;
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.peek() {
            self.pos += 1;
        }
        if self.pos == start {
            return self.fail(start, "expected a value");
        }
        Some(start..self.pos)
    }

    fn literal(&mut self, word: &'static [u8]) -> Option<()> {
        if self.src[self.pos..].starts_with(word) {
            self.pos += word.len();
            Some(())
        } else {
            self.fail(self.pos, "expected a value")
        }
    }

    fn int_value(&mut self, member: &'static str) -> Option<i32> {
        let position = self.pos;
        let text = match self.peek() {
            Some(b'"') => {
                let token = self.string_token()?;
                self.raw_text(token).trim()
            }
            Some(b'n') => {
                self.literal(b"null")?;
                return Some(0);
            }
            Some(b'-' | b'0'..=b'9') => {
                let range = self.number_token()?;
                &self.text[range]
            }
            _ => return self.fail_member(member, position, "expected an integer"),
        };
        match text.parse::<i32>() {
            Ok(value) => Some(value),
            Err(_) => self.fail_member(member, position, "not a 32-bit integer"),
        }
    }

    fn language_value(&mut self) -> Option<LanguageCode> {
        let position = self.pos;
        match self.peek() {
            Some(b'"') => {
                let token = self.string_token()?;
                if token.escaped {
                    Some(LanguageCode::from_name(&self.unescaped(token)?))
                } else {
                    Some(LanguageCode::from_name(self.raw_text(token)))
                }
            }
            Some(b'n') => {
                self.literal(b"null")?;
                Some(LanguageCode::Java)
            }
            Some(b'0'..=b'9') => {
                let range = self.number_token()?;
                match self.text[range].parse::<u8>() {
                    Ok(ordinal) => Some(LanguageCode::from_byte(ordinal)),
                    Err(_) => self.fail_member("language", position, "not a language ordinal"),
                }
            }
            _ => self.fail_member("language", position, "expected a string"),
        }
    }

    fn remark_value(&mut self) -> Option<Option<String>> {
        match self.peek() {
            Some(b'"') => {
                let token = self.string_token()?;
                let text = if token.escaped {
                    self.unescaped(token)?
                } else {
                    self.raw_text(token).to_owned()
                };
                Some(Some(text).filter(|text| !text.is_empty()))
            }
            Some(b'n') => {
                self.literal(b"null")?;
                Some(None)
            }
            _ => self.fail_member("remark", self.pos, "expected a string"),
        }
    }

    /// A span for a string token: in the source when unescaped, else in the
    /// arena.
    #[inline(always)]
    fn string_span(&mut self, fields: &mut ExtFields, token: StringToken) -> Option<Span> {
        if !token.escaped {
            // SAFETY: the range lies between two ASCII quotes of `text`,
            // the UTF-8 view of the same source bytes `fields` holds, so it
            // starts and ends on character boundaries.
            return Some(unsafe { fields.source_span(token.start as usize, token.end as usize) });
        }
        let arena_start = fields.arena_mut().len();
        // Unescaped text is never longer than its escaped form.
        fields.arena_mut().reserve(token.range().len());
        match unescape_into(self.raw_text(token), fields.arena_mut()) {
            Ok(()) => Some(fields.arena_span(arena_start)),
            Err((offset, reason)) => self.fail(token.start as usize + offset, reason),
        }
    }

    fn ext_fields_value(&mut self, source: &Bytes) -> Option<ExtFields> {
        match self.peek() {
            Some(b'n') => {
                self.literal(b"null")?;
                return Some(ExtFields::new());
            }
            Some(b'{') => self.pos += 1,
            _ => return self.fail_member("extFields", self.pos, "expected an object"),
        }
        let mut fields = ExtFields::with_source(source.clone(), EXT_ENTRY_COUNT_HINT);
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Some(fields);
        }
        loop {
            self.skip_whitespace();
            let key_token = self.string_token()?;
            let key = self.string_span(&mut fields, key_token)?;
            self.skip_whitespace();
            self.expect(b':', "expected ':'")?;
            self.skip_whitespace();
            let value_start = self.pos;
            let value = match self.peek() {
                Some(b'"') => {
                    let token = self.string_token()?;
                    Some(self.string_span(&mut fields, token)?)
                }
                Some(b'n') => {
                    self.literal(b"null")?;
                    None
                }
                Some(b't') => {
                    self.literal(b"true")?;
                    Some(self.raw_span(&fields, value_start))
                }
                Some(b'f') => {
                    self.literal(b"false")?;
                    Some(self.raw_span(&fields, value_start))
                }
                Some(b'{' | b'[') => {
                    self.skip_value(1)?;
                    Some(self.raw_span(&fields, value_start))
                }
                _ => {
                    self.number_token()?;
                    Some(self.raw_span(&fields, value_start))
                }
            };
            match value {
                Some(value) => fields.push_decoded(key, value),
                None => fields.remove_decoded(key),
            }
            if !self.separator(b'}', "expected ',' or '}'")? {
                return Some(fields);
            }
        }
    }

    /// The span from `start` to the current position, raw source text.
    fn raw_span(&self, fields: &ExtFields, start: usize) -> Span {
        // SAFETY: `start` is the position of an ASCII token start and
        // `self.pos` just past an ASCII token end (literal, number, closing
        // bracket), in a source that is valid UTF-8.
        unsafe { fields.source_span(start, self.pos) }
    }

    /// Skips one JSON value of any kind.
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        if depth > JSON_DEPTH_MAX {
            return self.fail(self.pos, "nested too deeply");
        }
        match self.peek() {
            Some(b'"') => self.string_token().map(drop),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(open @ (b'{' | b'[')) => {
                let close = if open == b'{' { b'}' } else { b']' };
                self.pos += 1;
                self.skip_whitespace();
                if self.peek() == Some(close) {
                    self.pos += 1;
                    return Some(());
                }
                loop {
                    self.skip_whitespace();
                    if open == b'{' {
                        self.string_token()?;
                        self.skip_whitespace();
                        self.expect(b':', "expected ':'")?;
                        self.skip_whitespace();
                    }
                    self.skip_value(depth + 1)?;
                    if !self.separator(close, "expected ',' or a close bracket")? {
                        return Some(());
                    }
                }
            }
            _ => self.number_token().map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(text: &str) -> RemotingCommand {
        decode(&Bytes::copy_from_slice(text.as_bytes())).unwrap()
    }

    fn decode_error(text: &str) -> DecodeError {
        decode(&Bytes::copy_from_slice(text.as_bytes())).unwrap_err()
    }

    fn encoded(command: &RemotingCommand) -> String {
        let mut out = Vec::new();
        encode(command, &mut out);
        String::from_utf8(out).unwrap()
    }

    const JAVA_ROUTE_REQUEST: &str = r#"{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":479}"#;

    #[test]
    fn java_route_request_decodes_and_re_encodes_byte_for_byte() {
        assert_eq!(JAVA_ROUTE_REQUEST.len(), 131);
        let command = decoded(JAVA_ROUTE_REQUEST);
        assert_eq!(command.code, 105);
        assert_eq!(command.language, LanguageCode::Java);
        assert_eq!(command.version, 479);
        assert_eq!(command.opaque, 7);
        assert_eq!(command.flag, 0);
        assert_eq!(command.remark, None);
        assert_eq!(command.ext_fields.get("topic"), Some("TopicTest"));
        assert_eq!(encoded(&command), JAVA_ROUTE_REQUEST);
    }

    #[test]
    fn go_style_header_with_empty_remark_decodes() {
        let command = decoded(
            r#"{"code":10,"language":"GO","version":317,"opaque":3,"flag":0,"remark":"","extFields":{"producerGroup":"g","topic":"T"}}"#,
        );
        assert_eq!(command.code, 10);
        assert_eq!(command.language, LanguageCode::Go);
        assert_eq!(command.version, 317);
        assert_eq!(command.opaque, 3);
        assert_eq!(command.remark, None);
        assert_eq!(command.ext_fields.get("producerGroup"), Some("g"));
    }

    #[test]
    fn rust_client_style_header_with_null_remark_decodes() {
        let command = decoded(
            r#"{"code":34,"language":"RUST","version":474,"opaque":5,"flag":0,"remark":null,"extFields":null,"serializeTypeCurrentRPC":"JSON"}"#,
        );
        assert_eq!(command.language, LanguageCode::Rust);
        assert_eq!(command.version, 474);
        assert_eq!(command.remark, None);
        assert!(command.ext_fields.is_empty());
    }

    #[test]
    fn cpp_style_numeric_and_boolean_ext_values_become_text() {
        let command = decoded(
            r#"{"code":310,"language":"CPP","version":333,"opaque":1,"flag":0,"remark":"","extFields":{"AccessKey":"","a":"g","d":4,"e":-1,"k":false,"x":null,"nested":{"a":[1,2]}}}"#,
        );
        assert_eq!(command.language, LanguageCode::Cpp);
        assert_eq!(command.ext_fields.get("d"), Some("4"));
        assert_eq!(command.ext_fields.get("e"), Some("-1"));
        assert_eq!(command.ext_fields.get("k"), Some("false"));
        assert_eq!(command.ext_fields.get("AccessKey"), Some(""));
        assert_eq!(command.ext_fields.get("x"), None);
        assert_eq!(command.ext_fields.get("nested"), Some(r#"{"a":[1,2]}"#));
    }

    #[test]
    fn header_without_serialize_type_and_with_unknown_members_decodes() {
        let command = decoded(
            r#" { "opaque" : 9 , "unknown":[1,{"x":"y"}], "code":"34", "language":"COBOL", "flag":null } "#,
        );
        assert_eq!(command.code, 34);
        assert_eq!(command.opaque, 9);
        assert_eq!(command.language, LanguageCode::Other);
        assert_eq!(command.flag, 0);
        assert!(command.ext_fields.is_empty());
    }

    #[test]
    fn escaped_ext_values_and_repeated_keys_decode() {
        let command = decoded(
            r#"{"code":1,"extFields":{"i":"KEYS\u0001k\u0002","i":"x\ty","t\u0041":"v"},"remark":"r\n"}"#,
        );
        assert_eq!(command.ext_fields.len(), 2);
        assert_eq!(command.ext_fields.get("i"), Some("x\ty"));
        assert_eq!(command.ext_fields.get("tA"), Some("v"));
        assert_eq!(command.remark.as_deref(), Some("r\n"));
    }

    #[test]
    fn malformed_headers_are_errors_with_positions() {
        assert_eq!(
            decode_error(r#"{"code":1"#),
            DecodeError::MalformedJsonHeader {
                position: 9,
                reason: "expected ',' or '}'"
            }
        );
        assert!(matches!(
            decode_error(""),
            DecodeError::MalformedJsonHeader { position: 0, .. }
        ));
        assert!(matches!(
            decode_error(r#"{"code":1}x"#),
            DecodeError::MalformedJsonHeader { .. }
        ));
        assert!(matches!(
            decode_error(r#"{"code":1.5}"#),
            DecodeError::InvalidJsonMember {
                member: "code",
                position: 8,
                ..
            }
        ));
        assert!(matches!(
            decode_error(r#"{"code":99999999999}"#),
            DecodeError::InvalidJsonMember { member: "code", .. }
        ));
        assert!(matches!(
            decode_error(r#"{"extFields":[]}"#),
            DecodeError::InvalidJsonMember { .. }
        ));
        let deep = format!(r#"{{"x":{}{}}}"#, "[".repeat(40), "]".repeat(40));
        assert!(matches!(
            decode_error(&deep),
            DecodeError::MalformedJsonHeader { .. }
        ));
    }

    #[test]
    fn find_quote_or_backslash_finds_the_first_match_at_every_position() {
        for size in 0..40 {
            for target in 0..size {
                for byte in [b'"', b'\\'] {
                    let mut bytes = vec![b'a'; size];
                    bytes[target] = byte;
                    if target + 1 < size {
                        bytes[target + 1] = b'"';
                    }
                    for from in 0..=target {
                        assert_eq!(find_quote_or_backslash(&bytes, from), Some(target));
                    }
                    assert_eq!(find_quote_or_backslash(&bytes, size), None);
                }
            }
            assert_eq!(find_quote_or_backslash(&vec![0x21; size], 0), None);
            assert_eq!(find_quote_or_backslash(&vec![0xA2; size], 0), None);
        }
    }

    #[test]
    fn invalid_utf8_is_decoded_lossily() {
        let mut bytes = br#"{"code":1,"remark":"a"#.to_vec();
        bytes.push(0xFF);
        bytes.extend_from_slice(br#""}"#);
        let command = decode(&Bytes::from(bytes)).unwrap();
        assert_eq!(command.remark.as_deref(), Some("a\u{fffd}"));
    }

    #[test]
    fn encode_writes_remark_and_negative_numbers_in_sorted_order() {
        let command = RemotingCommand {
            code: -1,
            opaque: i32::MIN,
            flag: 1,
            version: 479,
            remark: Some("bad \"x\"\u{1}".into()),
            ..RemotingCommand::default()
        };
        assert_eq!(
            encoded(&command),
            r#"{"code":-1,"flag":1,"language":"JAVA","opaque":-2147483648,"remark":"bad \"x\"\u0001","serializeTypeCurrentRPC":"JSON","version":479}"#
        );
    }
}
