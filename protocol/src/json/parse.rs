//! A lenient parser for the JSON that fastjson writes and reads.
//!
//! Beyond RFC 8259 it accepts what fastjson's `DefaultJSONParser` accepts with
//! its default features and what RocketMQ peers send:
//!
//! ```text
//! {0:"a",-1:"b"}              unquoted integer keys (Map<Integer|Long,_>)
//! {{"topic":"T"}:1}           object keys (Map<MessageQueue,_>)
//! {'a':'b'}                   single-quoted strings (AllowSingleQuotes)
//! {abc:1}                     bare identifier keys (AllowUnQuotedFieldNames)
//! 007                         leading zeros in numbers
//! ```
//!
//! Whitespace is fastjson's set: space, `\t`, `\n`, `\r`, `\f`, `\b`.
//! A lone UTF-16 surrogate in a `\u` escape becomes U+FFFD (Rust strings
//! cannot hold it; Java's would).
//!
//! # Invariants
//!
//! - Never panics and never recurses deeper than [`JSON_DEPTH_MAX`]: every
//!   `[`, `{` and object key increments the depth before descending.
//! - Inputs over [`JSON_INPUT_SIZE_MAX`] are refused before any allocation.
//! - The input is validated as UTF-8 once, up front; every slice taken later
//!   lies between ASCII bytes, so it is valid UTF-8 too.

use super::error::JsonError;
use super::value::{JsonKey, JsonNumber, JsonObject, JsonValue};

/// Deepest nesting of arrays, objects and object keys accepted. RocketMQ
/// bodies nest at most about 8 levels.
pub const JSON_DEPTH_MAX: usize = 64;

/// Largest input accepted. Remoting bodies are bounded by the 16 MiB frame
/// limit; config files (`consumerOffset.json` of a large broker) may be larger.
pub const JSON_INPUT_SIZE_MAX: usize = 64 * 1024 * 1024;

const _: () = assert!(JSON_INPUT_SIZE_MAX >= crate::limits::FRAME_SIZE_MAX as usize);

/// Parses one JSON value of the fastjson dialect; surrounding whitespace is
/// allowed, anything else after the value is an error.
///
/// # Errors
///
/// [`JsonError::TooLarge`], [`JsonError::InvalidUtf8`], [`JsonError::Syntax`]
/// (with the byte position and what was expected) or [`JsonError::TooDeep`].
pub fn parse(input: &[u8]) -> Result<JsonValue, JsonError> {
    if input.len() > JSON_INPUT_SIZE_MAX {
        return Err(JsonError::TooLarge {
            size: input.len(),
            size_max: JSON_INPUT_SIZE_MAX,
        });
    }
    let text = std::str::from_utf8(input).map_err(|e| JsonError::InvalidUtf8 {
        position: e.valid_up_to(),
    })?;
    let mut parser = Parser {
        text,
        bytes: input,
        position: 0,
    };
    parser.skip_whitespace();
    let value = parser.value(0)?;
    parser.skip_whitespace();
    if parser.position != input.len() {
        return Err(parser.syntax("end of input"));
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    position: usize,
}

fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0C | 0x08)
}

fn is_identifier_start(byte: u8) -> bool {
    byte.is_ascii_alphabetic() || byte == b'_' || byte == b'$'
}

impl<'a> Parser<'a> {
    fn syntax(&self, expected: &'static str) -> JsonError {
        JsonError::Syntax {
            position: self.position,
            expected,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.position).copied()
    }

    fn skip_whitespace(&mut self) {
        while self.peek().is_some_and(is_whitespace) {
            self.position += 1;
        }
    }

    fn enter(&self, depth: usize) -> Result<usize, JsonError> {
        if depth >= JSON_DEPTH_MAX {
            return Err(JsonError::TooDeep {
                position: self.position,
                depth_max: JSON_DEPTH_MAX,
            });
        }
        Ok(depth + 1)
    }

    /// Parses a value starting at the current (non-whitespace) position.
    fn value(&mut self, depth: usize) -> Result<JsonValue, JsonError> {
        match self.peek() {
            Some(b'{') => Ok(JsonValue::Object(self.object(depth)?)),
            Some(b'[') => self.array(depth),
            Some(quote @ (b'"' | b'\'')) => Ok(JsonValue::String(self.string(quote)?)),
            Some(b'-' | b'0'..=b'9') => Ok(JsonValue::Number(self.number()?)),
            Some(b't') => self.literal("true", JsonValue::Bool(true)),
            Some(b'f') => self.literal("false", JsonValue::Bool(false)),
            Some(b'n') => self.literal("null", JsonValue::Null),
            _ => Err(self.syntax("a value")),
        }
    }

    fn literal(&mut self, word: &'static str, value: JsonValue) -> Result<JsonValue, JsonError> {
        if self.bytes[self.position..].starts_with(word.as_bytes()) {
            self.position += word.len();
            Ok(value)
        } else {
            Err(self.syntax(match word {
                "true" => "`true`",
                "false" => "`false`",
                _ => "`null`",
            }))
        }
    }

    fn array(&mut self, depth: usize) -> Result<JsonValue, JsonError> {
        let depth = self.enter(depth)?;
        self.position += 1; // '['
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.position += 1;
            return Ok(JsonValue::Array(items));
        }
        loop {
            self.skip_whitespace();
            items.push(self.value(depth)?);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.position += 1,
                Some(b']') => {
                    self.position += 1;
                    return Ok(JsonValue::Array(items));
                }
                _ => return Err(self.syntax("`,` or `]`")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<JsonObject, JsonError> {
        let depth = self.enter(depth)?;
        self.position += 1; // '{'
        let mut object = JsonObject::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.position += 1;
            return Ok(object);
        }
        loop {
            self.skip_whitespace();
            let key = self.key(depth)?;
            self.skip_whitespace();
            if self.peek() != Some(b':') {
                return Err(self.syntax("`:`"));
            }
            self.position += 1;
            self.skip_whitespace();
            let value = self.value(depth)?;
            object.members.push((key, value));
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.position += 1,
                Some(b'}') => {
                    self.position += 1;
                    return Ok(object);
                }
                _ => return Err(self.syntax("`,` or `}`")),
            }
        }
    }

    fn key(&mut self, depth: usize) -> Result<JsonKey, JsonError> {
        match self.peek() {
            Some(quote @ (b'"' | b'\'')) => Ok(JsonKey::Str(self.string(quote)?)),
            Some(b'-' | b'0'..=b'9') => {
                let start = self.position;
                match self.number()? {
                    JsonNumber::Int(v) => Ok(JsonKey::Int(v)),
                    JsonNumber::Text(_) => {
                        self.position = start;
                        Err(self.syntax("an integer key that fits 64 bits"))
                    }
                }
            }
            Some(b'{') => {
                let object = self.object(depth)?;
                Ok(JsonKey::Object(Box::new(JsonValue::Object(object))))
            }
            Some(byte) if is_identifier_start(byte) => {
                let start = self.position;
                while self
                    .peek()
                    .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
                {
                    self.position += 1;
                }
                Ok(JsonKey::Str(self.text[start..self.position].to_owned()))
            }
            _ => Err(self.syntax("a key")),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.position;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.position += 1;
        }
        self.position - start
    }

    fn number(&mut self) -> Result<JsonNumber, JsonError> {
        let start = self.position;
        if self.peek() == Some(b'-') {
            self.position += 1;
        }
        if self.digits() == 0 {
            return Err(self.syntax("a digit"));
        }
        let mut integral = true;
        if self.peek() == Some(b'.') {
            integral = false;
            self.position += 1;
            if self.digits() == 0 {
                return Err(self.syntax("a digit after `.`"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            integral = false;
            self.position += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.position += 1;
            }
            if self.digits() == 0 {
                return Err(self.syntax("a digit in the exponent"));
            }
        }
        let text = &self.text[start..self.position];
        if integral && let Ok(v) = text.parse::<i64>() {
            return Ok(JsonNumber::Int(v));
        }
        Ok(JsonNumber::Text(text.to_owned()))
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let Some(digits) = self.bytes.get(self.position..self.position + 4) else {
            return Err(self.syntax("four hex digits"));
        };
        let mut code = 0u32;
        for &digit in digits {
            let nibble = (digit as char)
                .to_digit(16)
                .ok_or_else(|| self.syntax("a hex digit"))?;
            code = code * 16 + nibble;
        }
        self.position += 4;
        Ok(code)
    }

    /// Parses a string opened by `quote`, unescaping it.
    fn string(&mut self, quote: u8) -> Result<String, JsonError> {
        self.position += 1; // opening quote
        let mut out = String::new();
        loop {
            let run_start = self.position;
            while self.peek().is_some_and(|b| b != quote && b != b'\\') {
                self.position += 1;
            }
            out.push_str(&self.text[run_start..self.position]);
            match self.peek() {
                None => return Err(self.syntax("closing quote")),
                Some(b'\\') => {
                    self.position += 1;
                    self.escape(&mut out)?;
                }
                Some(_) => {
                    self.position += 1;
                    return Ok(out);
                }
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), JsonError> {
        let Some(byte) = self.peek() else {
            return Err(self.syntax("an escape character"));
        };
        self.position += 1;
        let ch = match byte {
            b'"' => '"',
            b'\'' => '\'',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'v' => '\u{b}', // fastjson writes \v for U+000B in some versions
            b'0' => '\0',
            b'u' => self.unicode_escape()?,
            _ => {
                self.position -= 1;
                return Err(self.syntax("a valid escape"));
            }
        };
        out.push(ch);
        Ok(())
    }

    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let high = self.hex4()?;
        if (0xD800..0xDC00).contains(&high) {
            let rest = &self.bytes[self.position..];
            if rest.len() >= 6 && rest[0] == b'\\' && rest[1] == b'u' {
                let saved = self.position;
                self.position += 2;
                let low = self.hex4()?;
                if (0xDC00..0xE000).contains(&low) {
                    let code = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                    return Ok(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                }
                // Not a low surrogate: leave it to be read as its own escape.
                self.position = saved;
            }
            return Ok(char::REPLACEMENT_CHARACTER);
        }
        Ok(char::from_u32(high).unwrap_or(char::REPLACEMENT_CHARACTER))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: i64) -> JsonValue {
        JsonValue::Number(JsonNumber::Int(v))
    }

    #[test]
    fn parse_accepts_unquoted_and_negative_integer_keys() {
        let value = parse(br#"{0:"a", -1 : "b"}"#).unwrap();
        let object = value.as_object().unwrap();
        assert_eq!(
            object.members[0],
            (JsonKey::Int(0), JsonValue::String("a".into()))
        );
        assert_eq!(
            object.members[1],
            (JsonKey::Int(-1), JsonValue::String("b".into()))
        );
    }

    #[test]
    fn parse_accepts_object_keys() {
        let value = parse(br#"{{"brokerName":"b","queueId":0,"topic":"T"}:{"x":1}}"#).unwrap();
        let (key, member) = &value.as_object().unwrap().members[0];
        let JsonKey::Object(key) = key else {
            panic!("object key expected, got {key:?}")
        };
        assert_eq!(key.as_object().unwrap().get("queueId"), Some(&int(0)));
        assert_eq!(member.as_object().unwrap().get("x"), Some(&int(1)));
    }

    #[test]
    fn parse_accepts_single_quotes_and_bare_identifier_keys() {
        let value = parse(b"{'a':'it''s', b_1:true}").err();
        // 'it' followed by 's' is a syntax error (no doubled-quote escape).
        assert!(matches!(value, Some(JsonError::Syntax { .. })));
        let value = parse(br"{'a':'it\'s', b_1:true}").unwrap();
        let object = value.as_object().unwrap();
        assert_eq!(object.get("a"), Some(&JsonValue::String("it's".into())));
        assert_eq!(object.get("b_1"), Some(&JsonValue::Bool(true)));
    }

    #[test]
    fn parse_unescapes_all_escapes_and_surrogate_pairs() {
        let value = parse(br#""\"\\\/\b\f\n\r\t\u0041\u00e9\ud83d\ude00""#).unwrap();
        assert_eq!(
            value,
            JsonValue::String("\"\\/\u{8}\u{c}\n\r\tA\u{e9}\u{1F600}".into())
        );
    }

    #[test]
    fn parse_replaces_lone_surrogates() {
        let value = parse(br#""\ud83dx\ude00""#).unwrap();
        assert_eq!(value, JsonValue::String("\u{FFFD}x\u{FFFD}".into()));
    }

    #[test]
    fn parse_keeps_numbers_exactly() {
        let value =
            parse(b"[12, -0, 9223372036854775807, 9223372036854775808, 12.50, 1E3]").unwrap();
        let items = value.as_array().unwrap();
        assert_eq!(items[0], int(12));
        assert_eq!(items[1], int(0));
        assert_eq!(items[2], int(i64::MAX));
        assert_eq!(
            items[3],
            JsonValue::Number(JsonNumber::Text("9223372036854775808".into()))
        );
        assert_eq!(
            items[4],
            JsonValue::Number(JsonNumber::Text("12.50".into()))
        );
        assert_eq!(items[5], JsonValue::Number(JsonNumber::Text("1E3".into())));
    }

    #[test]
    fn parse_allows_surrounding_whitespace_and_rejects_trailing_bytes() {
        assert_eq!(
            parse(b" \n\t{} \r\n").unwrap(),
            JsonValue::Object(JsonObject::new())
        );
        assert_eq!(
            parse(b"{} x"),
            Err(JsonError::Syntax {
                position: 3,
                expected: "end of input"
            })
        );
    }

    #[test]
    fn parse_reports_position_and_expectation() {
        assert_eq!(
            parse(br#"{"a" 1}"#),
            Err(JsonError::Syntax {
                position: 5,
                expected: "`:`"
            })
        );
        assert_eq!(
            parse(b"[1,"),
            Err(JsonError::Syntax {
                position: 3,
                expected: "a value"
            })
        );
        assert_eq!(
            parse(b"\"abc"),
            Err(JsonError::Syntax {
                position: 4,
                expected: "closing quote"
            })
        );
        assert_eq!(
            parse(b"{1.5:2}"),
            Err(JsonError::Syntax {
                position: 1,
                expected: "an integer key that fits 64 bits"
            })
        );
    }

    #[test]
    fn parse_rejects_nesting_beyond_the_depth_limit() {
        let deep = "[".repeat(JSON_DEPTH_MAX + 1) + &"]".repeat(JSON_DEPTH_MAX + 1);
        assert_eq!(
            parse(deep.as_bytes()),
            Err(JsonError::TooDeep {
                position: JSON_DEPTH_MAX,
                depth_max: JSON_DEPTH_MAX
            })
        );
        let ok = "[".repeat(JSON_DEPTH_MAX) + &"]".repeat(JSON_DEPTH_MAX);
        assert!(parse(ok.as_bytes()).is_ok());
        // Object keys count as nesting too.
        let keys = "{".repeat(JSON_DEPTH_MAX * 2);
        assert!(matches!(
            parse(keys.as_bytes()),
            Err(JsonError::TooDeep { .. })
        ));
    }

    #[test]
    fn parse_survives_a_million_open_brackets() {
        let deep = vec![b'['; 1_000_000];
        assert!(matches!(parse(&deep), Err(JsonError::TooDeep { .. })));
    }

    #[test]
    fn parse_rejects_invalid_utf8_with_its_position() {
        assert_eq!(
            parse(b"\"ab\xff\""),
            Err(JsonError::InvalidUtf8 { position: 3 })
        );
    }

    #[test]
    fn parse_refuses_inputs_over_the_size_limit() {
        let big = vec![b' '; JSON_INPUT_SIZE_MAX + 1];
        assert_eq!(
            parse(&big),
            Err(JsonError::TooLarge {
                size: JSON_INPUT_SIZE_MAX + 1,
                size_max: JSON_INPUT_SIZE_MAX
            })
        );
    }
}
