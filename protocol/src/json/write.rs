//! A writer producing the bytes fastjson 1.x produces, appended to a `Vec<u8>`.
//!
//! Conventions reproduced (fastjson `SerializeWriter`, `JavaBeanSerializer`,
//! `MapSerializer`, `ListSerializer`, `CollectionCodec`):
//!
//! - Bean members in alphabetical order (getter-derived names sorted by
//!   `String.compareTo`). [`JsonWriter::member`] asserts that each member name
//!   sorts after the previous one, so a struct written out of order fails
//!   its first test instead of producing different bytes.
//! - Null members omitted by the callers (`field_opt_*`); empty collections
//!   written as `[]` / `{}`.
//! - Doubles as Java's `Double.toString`: `0.0`, `12.5`, `1.0E7`, `1.0E-4`;
//!   NaN and infinities as `null`.
//! - Strings: `\"`, `\\`, `\b`, `\t`, `\n`, `\f`, `\r`; other characters
//!   U+0000–U+001F and U+007F–U+009F, and U+2028/U+2029, as `\uXXXX` with
//!   upper-case hex; `/` and other non-ASCII characters as they are.
//! - [`JsonStyle::Standard`] is fastjson's `BrowserCompatible` +
//!   `MapSortField`: integer map keys quoted (`"0":`), longs beyond
//!   ±(2^53−1) quoted, every non-ASCII UTF-16 unit and `/` escaped.
//!   [`JsonStyle::Java`] is the default feature set: unquoted integer keys
//!   (`{0:"a"}`). Object keys (`Map<MessageQueue,_>`) are always written in the
//!   native object-key form `{{"brokerName":"b","queueId":0,"topic":"T"}:5}`.
//!
//! Typed bodies keep maps in `BTreeMap`s, so map entries are always sorted
//! (Java's `HashMap` order for small integer keys, `MapSortField` order in
//! general); opaque [`JsonObject`](super::JsonObject)s keep their input order.
//!
//! Pretty mode is what `JSON.toJSONString(obj, true)` (`PrettyFormat`) writes
//! for RocketMQ's `config/*.json`, as read from fastjson 1.2.83's
//! `JSONSerializer.println`, `JavaBeanSerializer`, `MapSerializer`,
//! `ListSerializer` and `CollectionCodec`. The indent is one TAB per level,
//! no space after `:`, no trailing newline, and (⏎ = newline plus one TAB per
//! enclosing level, → = one more TAB):
//!
//! ```text
//! bean   {⏎→"a":1,⏎→"b":2⏎}        always a line break after `{` and before `}`
//! map    {⏎→"k":v⏎}                 string keys: a line break before each key
//!        {0:1,1:2⏎}                 non-string keys (integers, objects): no break
//!                                    before the key, one before `}` if non-empty
//!        {}                         empty
//! list   [⏎→a,⏎→b⏎]                 List with 2+ elements; 0 or 1 element inline
//! set    [a,b]                      Set/Collection: always inline
//! ```
//!
//! so `consumerOffset.json` reads
//! `{⏎→"offsetTable":{⏎→→"T@g":{0:5,1:7⏎→→}⏎→}⏎}` exactly as Java writes it.
//!
//! # Invariants
//!
//! - Nesting is tracked on a stack; `begin_*`/`end_*` must pair, a bean or map
//!   alternates key and value. Violations are bugs in our code and panic.
//! - Output is always valid input for [`parse`](super::parse).

/// Which fastjson feature set the bytes follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JsonStyle {
    /// `JSON.toJSONString(obj)` with default features: integer map keys
    /// unquoted. What Java writes for almost every body.
    Java,
    /// `BrowserCompatible` + `MapSortField`: standard JSON (quoted integer
    /// keys), as the name server sends route data to clients ≥ V4_9_4.
    Standard,
}

/// The style of `TopicRouteData` (GET_ROUTEINFO_BY_TOPIC) bodies; see
/// [`JsonStyle::for_request`].
pub type RouteKeyStyle = JsonStyle;

/// `MQVersion.Version.V4_9_4.ordinal()`: from this client version on, the
/// name server answers route requests in standard JSON.
pub const ROUTE_STANDARD_JSON_VERSION_MIN: i32 = 401;

impl JsonStyle {
    /// The style a Java name server uses for route data: standard JSON when
    /// the request's `version` is at least V4_9_4 (401) or the request header
    /// sets `acceptStandardJsonOnly`; fastjson's default (unquoted keys)
    /// otherwise, which reproduces Java byte for byte.
    pub fn for_request(client_version: i32, accept_standard_json_only: bool) -> Self {
        if client_version >= ROUTE_STANDARD_JSON_VERSION_MIN || accept_standard_json_only {
            JsonStyle::Standard
        } else {
            JsonStyle::Java
        }
    }
}

/// How `JsonWriter::begin_array` lays out an array in pretty mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrayKind {
    /// A Java `List` (`ListSerializer`): one element per line when it has
    /// two or more elements.
    List,
    /// A Java `Set` or other `Collection` (`CollectionCodec`): always inline.
    Set,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameKind {
    Bean,
    Map,
    Array { multiline: bool },
    Key,
}

#[derive(Debug)]
struct Frame {
    kind: FrameKind,
    count: usize,
    last_member: &'static str,
    awaiting_value: bool,
}

/// Largest `long` that `BrowserCompatible` writes unquoted (2^53 − 1).
const BROWSER_SAFE_LONG_MAX: i64 = (1 << 53) - 1;

/// A streaming writer of fastjson-dialect JSON into a caller's buffer.
#[derive(Debug)]
pub struct JsonWriter<'a> {
    out: &'a mut Vec<u8>,
    style: JsonStyle,
    pretty: bool,
    indent: usize,
    stack: Vec<Frame>,
}

impl<'a> JsonWriter<'a> {
    /// A compact writer appending to `out`.
    pub fn new(out: &'a mut Vec<u8>, style: JsonStyle) -> Self {
        Self {
            out,
            style,
            pretty: false,
            indent: 0,
            stack: Vec::new(),
        }
    }

    /// A writer in fastjson's `PrettyFormat` layout (see the module docs).
    pub fn pretty(out: &'a mut Vec<u8>, style: JsonStyle) -> Self {
        Self {
            out,
            style,
            pretty: true,
            indent: 0,
            stack: Vec::new(),
        }
    }

    /// The style this writer follows.
    pub fn style(&self) -> JsonStyle {
        self.style
    }

    /// Checks that every bean, map and array was closed.
    ///
    /// # Panics
    ///
    /// If a `begin_*` has no matching `end_*` (a bug in the caller).
    pub fn finish(self) {
        assert!(
            self.stack.is_empty(),
            "unclosed JSON containers: {:?}",
            self.stack
        );
    }

    fn newline(&mut self) {
        self.out.push(b'\n');
        self.out.extend(std::iter::repeat_n(b'\t', self.indent));
    }

    fn before_value(&mut self) {
        let pretty = self.pretty;
        let Some(frame) = self.stack.last_mut() else {
            return;
        };
        match frame.kind {
            FrameKind::Bean | FrameKind::Map => {
                assert!(
                    frame.awaiting_value,
                    "a value in a {:?} needs a key first",
                    frame.kind
                );
                frame.awaiting_value = false;
            }
            FrameKind::Key => {
                assert!(frame.count == 0, "a map key is a single value");
                frame.count = 1;
            }
            FrameKind::Array { multiline } => {
                let first = frame.count == 0;
                frame.count += 1;
                if !first {
                    self.out.push(b',');
                }
                if pretty && multiline {
                    self.newline();
                }
            }
        }
    }

    fn push(&mut self, kind: FrameKind) {
        self.stack.push(Frame {
            kind,
            count: 0,
            last_member: "",
            awaiting_value: false,
        });
    }

    fn pop(&mut self, kind: FrameKind) -> Frame {
        let frame = self
            .stack
            .pop()
            .expect("end_* without begin_*: writer misuse");
        assert!(
            frame.kind == kind,
            "closing {kind:?} but {:?} is open",
            frame.kind
        );
        assert!(
            !frame.awaiting_value,
            "{kind:?} closed after a key without its value"
        );
        frame
    }

    /// Writes `null`.
    pub fn null(&mut self) {
        self.before_value();
        self.out.extend_from_slice(b"null");
    }

    /// Writes `true` or `false`.
    pub fn bool(&mut self, value: bool) {
        self.before_value();
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
    }

    /// Writes an integer (`int` or `long`); in the standard style a long
    /// beyond ±(2^53−1) is quoted, as `BrowserCompatible` does.
    pub fn i64(&mut self, value: i64) {
        self.before_value();
        let quoted = self.style == JsonStyle::Standard
            && value.unsigned_abs() > BROWSER_SAFE_LONG_MAX as u64;
        if quoted {
            self.out.push(b'"');
        }
        push_i64(self.out, value);
        if quoted {
            self.out.push(b'"');
        }
    }

    /// Writes a double as Java's `Double.toString` does (`null` for NaN and
    /// infinities, as fastjson does).
    pub fn f64(&mut self, value: f64) {
        self.before_value();
        write_java_double(self.out, value);
    }

    /// Writes a number from its text, verbatim (for numbers kept by the
    /// parser as text).
    pub fn number_text(&mut self, text: &str) {
        self.before_value();
        self.out.extend_from_slice(text.as_bytes());
    }

    /// Writes a string, escaped as fastjson escapes it.
    pub fn string(&mut self, value: &str) {
        self.before_value();
        write_string(self.out, value, self.style);
    }

    /// Opens a bean (a Java object written by `JavaBeanSerializer`).
    pub fn begin_bean(&mut self) {
        self.before_value();
        self.out.push(b'{');
        self.push(FrameKind::Bean);
        if self.pretty {
            self.indent += 1;
            self.newline();
        }
    }

    /// Closes the bean opened last.
    ///
    /// # Panics
    ///
    /// If the innermost open container is not a bean.
    pub fn end_bean(&mut self) {
        self.pop(FrameKind::Bean);
        if self.pretty {
            self.indent -= 1;
            self.newline();
        }
        self.out.push(b'}');
    }

    /// Starts a bean member; its value follows.
    ///
    /// # Panics
    ///
    /// If no bean is open, or `name` does not sort after the previous member
    /// (fastjson writes members alphabetically).
    pub fn member(&mut self, name: &'static str) {
        let pretty = self.pretty;
        let frame = self
            .stack
            .last_mut()
            .expect("member outside a bean: writer misuse");
        assert!(
            frame.kind == FrameKind::Bean,
            "member {name:?} written into a {:?}",
            frame.kind
        );
        assert!(
            !frame.awaiting_value,
            "member {name:?} follows a member without value"
        );
        assert!(
            frame.count == 0 || name > frame.last_member,
            "member {name:?} written after {:?}: fastjson sorts members alphabetically",
            frame.last_member
        );
        let first = frame.count == 0;
        frame.count += 1;
        frame.last_member = name;
        frame.awaiting_value = true;
        if !first {
            self.out.push(b',');
            if pretty {
                self.newline();
            }
        }
        write_string(self.out, name, self.style);
        self.out.push(b':');
    }

    /// Opens a map (a Java `Map` written by `MapSerializer`).
    pub fn begin_map(&mut self) {
        self.before_value();
        self.out.push(b'{');
        self.push(FrameKind::Map);
        if self.pretty {
            self.indent += 1;
        }
    }

    /// Closes the map opened last.
    ///
    /// # Panics
    ///
    /// If the innermost open container is not a map.
    pub fn end_map(&mut self) {
        let frame = self.pop(FrameKind::Map);
        if self.pretty {
            self.indent -= 1;
            if frame.count > 0 {
                self.newline();
            }
        }
        self.out.push(b'}');
    }

    fn map_entry_start(&mut self) -> bool {
        let frame = self
            .stack
            .last_mut()
            .expect("map key outside a map: writer misuse");
        assert!(
            frame.kind == FrameKind::Map,
            "map key written into a {:?}",
            frame.kind
        );
        assert!(!frame.awaiting_value, "map key follows a key without value");
        let first = frame.count == 0;
        frame.count += 1;
        if !first {
            self.out.push(b',');
        }
        first
    }

    fn map_entry_key_done(&mut self) {
        self.out.push(b':');
        let frame = self.stack.last_mut().expect("map frame is open");
        frame.awaiting_value = true;
    }

    /// Starts a map entry with a string key; its value follows.
    pub fn map_key_str(&mut self, key: &str) {
        self.map_entry_start();
        if self.pretty {
            self.newline();
        }
        write_string(self.out, key, self.style);
        self.map_entry_key_done();
    }

    /// Starts a map entry with an integer key (`Map<Integer|Long,_>`):
    /// unquoted in the Java style, quoted in the standard style.
    pub fn map_key_i64(&mut self, key: i64) {
        self.map_entry_start();
        match self.style {
            JsonStyle::Java => push_i64(self.out, key),
            JsonStyle::Standard => {
                self.out.push(b'"');
                push_i64(self.out, key);
                self.out.push(b'"');
            }
        }
        self.map_entry_key_done();
    }

    /// Starts a map entry whose key is a value written by `write_key`
    /// (fastjson's native form for `Map<Bean,_>`); the entry's value follows.
    ///
    /// # Panics
    ///
    /// If `write_key` does not write exactly one value.
    pub fn map_key_with(&mut self, write_key: impl FnOnce(&mut Self)) {
        self.map_entry_start();
        self.push(FrameKind::Key);
        write_key(self);
        let frame = self.pop(FrameKind::Key);
        assert!(frame.count == 1, "a map key must be exactly one value");
        self.map_entry_key_done();
    }

    /// Opens an array of `len` elements; `kind` decides its pretty layout.
    pub fn begin_array(&mut self, kind: ArrayKind, len: usize) {
        self.before_value();
        self.out.push(b'[');
        let multiline = kind == ArrayKind::List && len > 1;
        self.push(FrameKind::Array { multiline });
        if self.pretty && multiline {
            self.indent += 1;
        }
    }

    /// Closes the array opened last.
    ///
    /// # Panics
    ///
    /// If the innermost open container is not an array.
    pub fn end_array(&mut self) {
        let frame = self
            .stack
            .pop()
            .expect("end_array without begin_array: writer misuse");
        let FrameKind::Array { multiline } = frame.kind else {
            panic!("closing an array but {:?} is open", frame.kind);
        };
        if self.pretty && multiline {
            self.indent -= 1;
            self.newline();
        }
        self.out.push(b']');
    }

    /// A string member.
    pub fn field_str(&mut self, name: &'static str, value: &str) {
        self.member(name);
        self.string(value);
    }

    /// A string member, omitted when `None` (fastjson omits nulls).
    pub fn field_opt_str(&mut self, name: &'static str, value: Option<&str>) {
        if let Some(value) = value {
            self.field_str(name, value);
        }
    }

    /// An integer member.
    pub fn field_i64(&mut self, name: &'static str, value: i64) {
        self.member(name);
        self.i64(value);
    }

    /// A boolean member.
    pub fn field_bool(&mut self, name: &'static str, value: bool) {
        self.member(name);
        self.bool(value);
    }

    /// A double member.
    pub fn field_f64(&mut self, name: &'static str, value: f64) {
        self.member(name);
        self.f64(value);
    }
}

/// Appends the decimal digits of `value` without allocating.
fn push_i64(out: &mut Vec<u8>, value: i64) {
    // 20 digits hold u64::MAX; the sign is pushed separately.
    let mut digits = [0u8; 20];
    let mut rest = value.unsigned_abs();
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[start..]);
}

/// Appends `value` as Java's `Double.toString` formats it; NaN and the
/// infinities become `null`, as in fastjson.
pub fn write_java_double(out: &mut Vec<u8>, value: f64) {
    if !value.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    let magnitude = value.abs();
    if value == 0.0 || (1e-3..1e7).contains(&magnitude) {
        // Rust's Display prints the shortest round-tripping digits without an
        // exponent; Java always shows a fraction digit.
        let text = value.to_string();
        out.extend_from_slice(text.as_bytes());
        if !text.contains('.') {
            out.extend_from_slice(b".0");
        }
        return;
    }
    let text = format!("{value:e}");
    let (mantissa, exponent) = text
        .split_once('e')
        .expect("LowerExp output has an exponent");
    out.extend_from_slice(mantissa.as_bytes());
    if !mantissa.contains('.') {
        out.extend_from_slice(b".0");
    }
    out.push(b'E');
    out.extend_from_slice(exponent.as_bytes());
}

const HEX_DIGITS_UPPER: &[u8; 16] = b"0123456789ABCDEF";

fn push_unicode_escape(out: &mut Vec<u8>, unit: u16) {
    out.extend_from_slice(b"\\u");
    for shift in [12, 8, 4, 0] {
        out.push(HEX_DIGITS_UPPER[usize::from((unit >> shift) & 0xF)]);
    }
}

/// Appends `value` as a quoted, escaped JSON string, as fastjson's
/// `writeStringWithDoubleQuote` does in `style`.
pub fn write_string(out: &mut Vec<u8>, value: &str, style: JsonStyle) {
    if style == JsonStyle::Java {
        // fastjson's default escapes, the same as in remoting headers: one
        // implementation for both.
        crate::command::json_text::write_quoted(out, value);
        return;
    }
    out.push(b'"');
    // BrowserCompatible: also `/` and every non-ASCII character.
    // Fast path: printable ASCII without quotes or backslashes (names,
    // addresses, topics) is copied as it is.
    let plain = value
        .bytes()
        .all(|b| (0x20..0x7F).contains(&b) && b != b'"' && b != b'\\' && b != b'/');
    if plain {
        out.extend_from_slice(value.as_bytes());
        out.push(b'"');
        return;
    }
    let mut run_start = 0;
    for (index, ch) in value.char_indices() {
        let short = match ch {
            '"' => Some(b'"'),
            '\\' => Some(b'\\'),
            '\u{8}' => Some(b'b'),
            '\t' => Some(b't'),
            '\n' => Some(b'n'),
            '\u{c}' => Some(b'f'),
            '\r' => Some(b'r'),
            '/' => Some(b'/'),
            _ => None,
        };
        let escape_unicode = match ch {
            '\0'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' => short.is_none(),
            _ => !ch.is_ascii(),
        };
        if short.is_none() && !escape_unicode {
            continue;
        }
        out.extend_from_slice(&value.as_bytes()[run_start..index]);
        run_start = index + ch.len_utf8();
        if let Some(byte) = short {
            out.push(b'\\');
            out.push(byte);
        } else {
            let mut units = [0u16; 2];
            for unit in ch.encode_utf16(&mut units) {
                push_unicode_escape(out, *unit);
            }
        }
    }
    out.extend_from_slice(&value.as_bytes()[run_start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn double(value: f64) -> String {
        let mut out = Vec::new();
        write_java_double(&mut out, value);
        String::from_utf8(out).unwrap()
    }

    fn string(value: &str, style: JsonStyle) -> String {
        let mut out = Vec::new();
        write_string(&mut out, value, style);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn doubles_are_formatted_like_java() {
        assert_eq!(double(0.0), "0.0");
        assert_eq!(double(-0.0), "-0.0");
        assert_eq!(double(12.5), "12.5");
        assert_eq!(double(100.0), "100.0");
        assert_eq!(double(0.001), "0.001");
        assert_eq!(double(0.0001), "1.0E-4");
        assert_eq!(double(1.0e7), "1.0E7");
        assert_eq!(double(1.2345e10), "1.2345E10");
        assert_eq!(double(9999999.0), "9999999.0");
        assert_eq!(double(f64::NAN), "null");
        assert_eq!(double(f64::INFINITY), "null");
    }

    #[test]
    fn integers_are_written_in_decimal() {
        for value in [0, 7, -7, 10, 1_700_000_000_000, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            push_i64(&mut out, value);
            assert_eq!(String::from_utf8(out).unwrap(), value.to_string());
        }
    }

    #[test]
    fn strings_are_escaped_like_fastjson() {
        assert_eq!(string("a\"b\\c/d", JsonStyle::Java), r#""a\"b\\c/d""#);
        assert_eq!(
            string("\u{8}\t\n\u{c}\r", JsonStyle::Java),
            r#""\b\t\n\f\r""#
        );
        assert_eq!(
            string("\0\u{b}\u{1f}\u{7f}\u{9f}", JsonStyle::Java),
            r#""\u0000\u000B\u001F\u007F\u009F""#
        );
        assert_eq!(string("é\u{2028}😀", JsonStyle::Java), "\"é\\u2028😀\"");
    }

    #[test]
    fn standard_style_escapes_non_ascii_and_slash() {
        assert_eq!(
            string("é/😀", JsonStyle::Standard),
            r#""\u00E9\/\uD83D\uDE00""#
        );
    }

    #[test]
    fn route_style_is_standard_from_v4_9_4_or_when_asked() {
        assert_eq!(RouteKeyStyle::for_request(400, false), JsonStyle::Java);
        assert_eq!(RouteKeyStyle::for_request(401, false), JsonStyle::Standard);
        assert_eq!(RouteKeyStyle::for_request(0, true), JsonStyle::Standard);
    }

    #[test]
    fn standard_style_quotes_longs_beyond_two_to_the_53() {
        let mut out = Vec::new();
        let mut writer = JsonWriter::new(&mut out, JsonStyle::Standard);
        writer.begin_array(ArrayKind::List, 2);
        writer.i64(BROWSER_SAFE_LONG_MAX);
        writer.i64(-BROWSER_SAFE_LONG_MAX - 1);
        writer.end_array();
        writer.finish();
        assert_eq!(out, b"[9007199254740991,\"-9007199254740992\"]");
    }

    #[test]
    #[should_panic(expected = "sorts members alphabetically")]
    fn member_out_of_alphabetical_order_panics() {
        let mut out = Vec::new();
        let mut writer = JsonWriter::new(&mut out, JsonStyle::Java);
        writer.begin_bean();
        writer.field_i64("b", 1);
        writer.field_i64("a", 2);
    }

    #[test]
    fn pretty_layout_matches_fastjson_prettyformat() {
        let mut out = Vec::new();
        let mut w = JsonWriter::pretty(&mut out, JsonStyle::Java);
        w.begin_bean();
        w.member("a");
        w.begin_map();
        w.map_key_str("k");
        w.begin_map();
        w.map_key_i64(0);
        w.i64(5);
        w.map_key_i64(1);
        w.i64(7);
        w.end_map();
        w.end_map();
        w.member("b");
        w.begin_array(ArrayKind::List, 2);
        w.i64(1);
        w.i64(2);
        w.end_array();
        w.member("c");
        w.begin_array(ArrayKind::Set, 2);
        w.i64(1);
        w.i64(2);
        w.end_array();
        w.member("d");
        w.begin_map();
        w.end_map();
        w.member("e");
        w.begin_array(ArrayKind::List, 1);
        w.begin_bean();
        w.field_i64("x", 1);
        w.end_bean();
        w.end_array();
        w.end_bean();
        w.finish();
        let expected = "{\n\t\"a\":{\n\t\t\"k\":{0:5,1:7\n\t\t}\n\t},\n\t\"b\":[\n\t\t1,\n\t\t2\n\t],\n\t\
                        \"c\":[1,2],\n\t\"d\":{},\n\t\"e\":[{\n\t\t\"x\":1\n\t}]\n}";
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn object_keys_are_written_natively() {
        let mut out = Vec::new();
        let mut w = JsonWriter::new(&mut out, JsonStyle::Standard);
        w.begin_map();
        w.map_key_with(|w| {
            w.begin_bean();
            w.field_i64("queueId", 0);
            w.end_bean();
        });
        w.i64(5);
        w.end_map();
        w.finish();
        assert_eq!(out, br#"{{"queueId":0}:5}"#);
    }
}
