//! The value tree of the fastjson dialect and fastjson's lenient coercions.
//!
//! A [`JsonValue`] is what [`parse`](super::parse) produces: standard JSON plus
//! the non-standard map keys fastjson writes. Object members keep their input
//! order (fastjson's order carries no meaning, but keeping it makes
//! write → parse an identity). Numbers are kept exactly: integral numbers that
//! fit an `i64` as [`JsonNumber::Int`], everything else as its source text.
//!
//! ```text
//! {0:"a",-1:"b"}                         keys JsonKey::Int(0), JsonKey::Int(-1)
//! {{"brokerName":"b","queueId":0,"topic":"T"}:{..}}   key JsonKey::Object(..)
//! {"0":"a"}                              key JsonKey::Str("0"); typed readers convert it
//! ```
//!
//! # Invariants
//!
//! - `JsonNumber::Text` holds a number that is *not* an integer fitting an
//!   `i64`, in the grammar [`parse`](super::parse) accepts, so writing it
//!   verbatim re-parses to the same value.
//! - The coercions below mirror fastjson's `TypeUtils.castTo*`: a typed reader
//!   never fails on a representation fastjson would have accepted.

use std::collections::BTreeMap;

use super::error::JsonError;

/// Longest key text quoted in an [`JsonError::InvalidKey`].
pub const KEY_TEXT_SHOWN_MAX: usize = 64;

/// A JSON number, kept exactly as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonNumber {
    /// An integral number that fits an `i64` (`-0` is `Int(0)`).
    Int(i64),
    /// Any other number (fraction, exponent, or out of `i64` range), as its
    /// source text.
    Text(String),
}

impl JsonNumber {
    /// The number as an `f64` (nearest value; integers beyond 2^53 round).
    pub fn as_f64(&self) -> f64 {
        match self {
            JsonNumber::Int(v) => *v as f64,
            JsonNumber::Text(text) => text.parse::<f64>().unwrap_or(f64::NAN),
        }
    }

    /// The number as an `i64` the way Java's `Number.longValue()` truncates a
    /// fraction; `None` when it is out of range or not finite.
    pub fn as_i64_truncated(&self) -> Option<i64> {
        match self {
            JsonNumber::Int(v) => Some(*v),
            JsonNumber::Text(_) => {
                let value = self.as_f64().trunc();
                // 2^63 is exactly representable; anything at or above it is out of range.
                if value.is_finite() && value >= -(2f64.powi(63)) && value < 2f64.powi(63) {
                    Some(value as i64)
                } else {
                    None
                }
            }
        }
    }

    /// The number's text as Java's `String.valueOf` of the parsed number would
    /// give for integers, or the source text otherwise.
    pub fn to_text(&self) -> String {
        match self {
            JsonNumber::Int(v) => v.to_string(),
            JsonNumber::Text(text) => text.clone(),
        }
    }
}

/// A map key: fastjson writes three kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonKey {
    /// A quoted (or, leniently, single-quoted or bare identifier) key.
    Str(String),
    /// An unquoted integer key, from a `Map<Integer,_>` or `Map<Long,_>`.
    Int(i64),
    /// An object key, from a `Map<Bean,_>` such as `Map<MessageQueue,_>`.
    Object(Box<JsonValue>),
}

impl JsonKey {
    /// The key as a string, fastjson style: integers by their text; object
    /// keys have no string form.
    pub fn as_text(&self) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            JsonKey::Str(s) => Some(std::borrow::Cow::Borrowed(s)),
            JsonKey::Int(v) => Some(std::borrow::Cow::Owned(v.to_string())),
            JsonKey::Object(_) => None,
        }
    }

    /// The key as an integer: unquoted integers, or quoted text that parses
    /// as one (fastjson converts `"0"` to the declared `Long`).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            JsonKey::Int(v) => Some(*v),
            JsonKey::Str(s) => s.trim().parse::<i64>().ok(),
            JsonKey::Object(_) => None,
        }
    }

    /// A short description for error messages.
    pub(crate) fn shown(&self) -> String {
        let mut text = match self {
            JsonKey::Str(s) => s.clone(),
            JsonKey::Int(v) => v.to_string(),
            JsonKey::Object(_) => "{object}".to_owned(),
        };
        if text.len() > KEY_TEXT_SHOWN_MAX {
            let mut end = KEY_TEXT_SHOWN_MAX;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        text
    }
}

/// An object: members in input order; duplicate keys are kept, the last one
/// wins on lookup (as in fastjson).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JsonObject {
    /// The members, in input order.
    pub members: Vec<(JsonKey, JsonValue)>,
}

impl JsonObject {
    /// An empty object.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a member with a string key.
    pub fn push(&mut self, key: &str, value: JsonValue) {
        self.members.push((JsonKey::Str(key.to_owned()), value));
    }

    /// The value of the last member whose key is the string `name`.
    pub fn get(&self, name: &str) -> Option<&JsonValue> {
        self.members
            .iter()
            .rev()
            .find_map(|(key, value)| match key {
                JsonKey::Str(s) if s == name => Some(value),
                _ => None,
            })
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the object has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// A parsed JSON value of the fastjson dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonValue {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, kept exactly.
    Number(JsonNumber),
    /// A string, unescaped.
    String(String),
    /// An array.
    Array(Vec<JsonValue>),
    /// An object (map or bean).
    Object(JsonObject),
}

impl JsonValue {
    /// The object, if this is one.
    pub fn as_object(&self) -> Option<&JsonObject> {
        match self {
            JsonValue::Object(object) => Some(object),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[JsonValue]> {
        match self {
            JsonValue::Array(items) => Some(items),
            _ => None,
        }
    }

    /// fastjson's `castToString`: strings as they are, numbers by their text,
    /// booleans as `true`/`false`. `None` for null, arrays and objects.
    pub fn coerce_string(&self) -> Option<String> {
        match self {
            JsonValue::String(s) => Some(s.clone()),
            JsonValue::Number(n) => Some(n.to_text()),
            JsonValue::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    /// fastjson's `castToLong`: numbers (a fraction truncates), numeric
    /// strings (`"12"`), booleans as 1/0. `None` for anything else.
    pub fn coerce_i64(&self) -> Option<i64> {
        match self {
            JsonValue::Number(n) => n.as_i64_truncated(),
            JsonValue::String(s) => {
                let text = s.trim();
                text.parse::<i64>().ok().or_else(|| {
                    let number = JsonNumber::Text(text.to_owned());
                    text.parse::<f64>()
                        .ok()
                        .and_then(|_| number.as_i64_truncated())
                })
            }
            JsonValue::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    /// fastjson's `castToDouble`: numbers, numeric strings, booleans as
    /// 1/0. Non-finite results (`"NaN"`, `1e999`) are refused: they could not
    /// be written back (fastjson writes them as `null`).
    pub fn coerce_f64(&self) -> Option<f64> {
        let value = match self {
            JsonValue::Number(n) => n.as_f64(),
            JsonValue::String(s) => s.trim().parse::<f64>().ok()?,
            JsonValue::Bool(b) => f64::from(u8::from(*b)),
            _ => return None,
        };
        value.is_finite().then_some(value)
    }

    /// fastjson's `castToBoolean`: booleans, numbers (non-zero is true),
    /// strings `true`/`false` (any case), `1`/`0`, `Y`/`N`, `T`/`F`.
    pub fn coerce_bool(&self) -> Option<bool> {
        match self {
            JsonValue::Bool(b) => Some(*b),
            JsonValue::Number(n) => Some(n.as_f64() != 0.0),
            JsonValue::String(s) => {
                let text = s.trim();
                if text.eq_ignore_ascii_case("true") || text == "1" || text == "Y" || text == "T" {
                    Some(true)
                } else if text.eq_ignore_ascii_case("false")
                    || text == "0"
                    || text == "N"
                    || text == "F"
                {
                    Some(false)
                } else {
                    None
                }
            }
            _ => None,
        }
    }
}

/// Typed, lenient access to the members of one bean; `path` names the bean
/// in errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Members<'a> {
    object: &'a JsonObject,
    path: &'a str,
}

/// How an absent member reads: absent and `null` are the same in fastjson.
fn present(value: Option<&JsonValue>) -> Option<&JsonValue> {
    match value {
        None | Some(JsonValue::Null) => None,
        Some(value) => Some(value),
    }
}

impl<'a> Members<'a> {
    /// Views `value` as a bean, failing when it is not an object.
    pub(crate) fn of(value: &'a JsonValue, path: &'a str) -> Result<Self, JsonError> {
        match value {
            JsonValue::Object(object) => Ok(Self { object, path }),
            _ => Err(JsonError::WrongType {
                member: path_or_root(path),
                expected: "an object",
            }),
        }
    }

    /// Full path of a member, for errors.
    pub(crate) fn path_of(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    fn wrong(&self, name: &str, expected: &'static str) -> JsonError {
        JsonError::WrongType {
            member: self.path_of(name),
            expected,
        }
    }

    /// The raw member, `None` when absent or null.
    pub(crate) fn value(&self, name: &str) -> Option<&'a JsonValue> {
        present(self.object.get(name))
    }

    /// A string member (numbers and booleans coerce to their text).
    pub(crate) fn string(&self, name: &str) -> Result<Option<String>, JsonError> {
        match self.value(name) {
            None => Ok(None),
            Some(value) => value
                .coerce_string()
                .map(Some)
                .ok_or_else(|| self.wrong(name, "a string")),
        }
    }

    /// A string member, empty when absent.
    pub(crate) fn string_or_empty(&self, name: &str) -> Result<String, JsonError> {
        Ok(self.string(name)?.unwrap_or_default())
    }

    /// A long member (numeric strings coerce).
    pub(crate) fn i64(&self, name: &str) -> Result<Option<i64>, JsonError> {
        match self.value(name) {
            None => Ok(None),
            Some(value) => value
                .coerce_i64()
                .map(Some)
                .ok_or_else(|| self.wrong(name, "an integer")),
        }
    }

    /// An int member; values outside `i32` are an error (fastjson would
    /// overflow silently; we refuse instead).
    pub(crate) fn i32(&self, name: &str) -> Result<Option<i32>, JsonError> {
        match self.i64(name)? {
            None => Ok(None),
            Some(v) => i32::try_from(v)
                .map(Some)
                .map_err(|_| self.wrong(name, "a 32-bit integer")),
        }
    }

    /// A double member.
    pub(crate) fn f64(&self, name: &str) -> Result<Option<f64>, JsonError> {
        match self.value(name) {
            None => Ok(None),
            Some(value) => value
                .coerce_f64()
                .map(Some)
                .ok_or_else(|| self.wrong(name, "a number")),
        }
    }

    /// A boolean member (`"true"`, 1 and friends coerce).
    pub(crate) fn bool(&self, name: &str) -> Result<Option<bool>, JsonError> {
        match self.value(name) {
            None => Ok(None),
            Some(value) => value
                .coerce_bool()
                .map(Some)
                .ok_or_else(|| self.wrong(name, "a boolean")),
        }
    }

    /// An array member; empty when absent.
    pub(crate) fn array(&self, name: &str) -> Result<&'a [JsonValue], JsonError> {
        match self.value(name) {
            None => Ok(&[]),
            Some(JsonValue::Array(items)) => Ok(items),
            Some(_) => Err(self.wrong(name, "an array")),
        }
    }

    /// An object member; `None` when absent.
    pub(crate) fn object(&self, name: &str) -> Result<Option<&'a JsonObject>, JsonError> {
        match self.value(name) {
            None => Ok(None),
            Some(JsonValue::Object(object)) => Ok(Some(object)),
            Some(_) => Err(self.wrong(name, "an object")),
        }
    }

    /// An array of strings (numbers coerce), empty when absent.
    pub(crate) fn strings(&self, name: &str) -> Result<Vec<String>, JsonError> {
        self.array(name)?
            .iter()
            .filter(|item| !matches!(item, JsonValue::Null))
            .map(|item| {
                item.coerce_string()
                    .ok_or_else(|| self.wrong(name, "an array of strings"))
            })
            .collect()
    }

    /// A `Map<String,String>` member, empty when absent; null values are skipped.
    pub(crate) fn string_map(&self, name: &str) -> Result<BTreeMap<String, String>, JsonError> {
        match self.value(name) {
            None => Ok(BTreeMap::new()),
            Some(value) => string_map_of(value, &self.path_of(name)),
        }
    }
}

/// Reads a `Map<String,String>` value; null values are skipped.
pub(crate) fn string_map_of(
    value: &JsonValue,
    path: &str,
) -> Result<BTreeMap<String, String>, JsonError> {
    let object = value.as_object().ok_or_else(|| JsonError::WrongType {
        member: path_or_root(path),
        expected: "an object",
    })?;
    let mut map = BTreeMap::new();
    for (key, value) in &object.members {
        let key = key_text(key, path)?;
        if let Some(value) = present(Some(value)) {
            let value = value.coerce_string().ok_or_else(|| JsonError::WrongType {
                member: path_or_root(path),
                expected: "a map of strings",
            })?;
            map.insert(key, value);
        }
    }
    Ok(map)
}

fn path_or_root(path: &str) -> String {
    if path.is_empty() {
        "(root)".to_owned()
    } else {
        path.to_owned()
    }
}

/// A string map key: quoted keys as they are, integer keys by their text.
pub(crate) fn key_text(key: &JsonKey, path: &str) -> Result<String, JsonError> {
    key.as_text()
        .map(|text| text.into_owned())
        .ok_or_else(|| JsonError::InvalidKey {
            member: path_or_root(path),
            key: key.shown(),
            expected: "a string",
        })
}

/// An integer map key: unquoted, or quoted text that parses.
pub(crate) fn key_i64(key: &JsonKey, path: &str) -> Result<i64, JsonError> {
    key.as_i64().ok_or_else(|| JsonError::InvalidKey {
        member: path_or_root(path),
        key: key.shown(),
        expected: "an integer",
    })
}

/// An `i32` map key.
pub(crate) fn key_i32(key: &JsonKey, path: &str) -> Result<i32, JsonError> {
    i32::try_from(key_i64(key, path)?).map_err(|_| JsonError::InvalidKey {
        member: path_or_root(path),
        key: key.shown(),
        expected: "a 32-bit integer",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &str) -> JsonValue {
        JsonValue::String(s.to_owned())
    }

    #[test]
    fn coerce_string_accepts_numbers_and_booleans() {
        assert_eq!(
            JsonValue::Number(JsonNumber::Int(12))
                .coerce_string()
                .as_deref(),
            Some("12")
        );
        assert_eq!(
            JsonValue::Number(JsonNumber::Text("1.5".into()))
                .coerce_string()
                .as_deref(),
            Some("1.5")
        );
        assert_eq!(
            JsonValue::Bool(true).coerce_string().as_deref(),
            Some("true")
        );
        assert_eq!(JsonValue::Null.coerce_string(), None);
    }

    #[test]
    fn coerce_i64_accepts_numeric_strings_and_truncates_fractions() {
        assert_eq!(string("12").coerce_i64(), Some(12));
        assert_eq!(string(" -7 ").coerce_i64(), Some(-7));
        assert_eq!(string("2.9").coerce_i64(), Some(2));
        assert_eq!(
            JsonValue::Number(JsonNumber::Text("3.7".into())).coerce_i64(),
            Some(3)
        );
        assert_eq!(
            JsonValue::Number(JsonNumber::Text("1e300".into())).coerce_i64(),
            None
        );
        assert_eq!(string("abc").coerce_i64(), None);
    }

    #[test]
    fn coerce_f64_refuses_non_finite_values() {
        assert_eq!(string("12.5").coerce_f64(), Some(12.5));
        assert_eq!(string("NaN").coerce_f64(), None);
        assert_eq!(
            JsonValue::Number(JsonNumber::Text("1e999".into())).coerce_f64(),
            None
        );
        assert_eq!(JsonValue::Bool(true).coerce_f64(), Some(1.0));
    }

    #[test]
    fn coerce_bool_accepts_strings_and_numbers() {
        assert_eq!(string("true").coerce_bool(), Some(true));
        assert_eq!(string("FALSE").coerce_bool(), Some(false));
        assert_eq!(
            JsonValue::Number(JsonNumber::Int(0)).coerce_bool(),
            Some(false)
        );
        assert_eq!(
            JsonValue::Number(JsonNumber::Int(2)).coerce_bool(),
            Some(true)
        );
        assert_eq!(string("maybe").coerce_bool(), None);
    }

    #[test]
    fn object_get_returns_the_last_duplicate() {
        let mut object = JsonObject::new();
        object.push("a", JsonValue::Bool(false));
        object.push("a", JsonValue::Bool(true));
        assert_eq!(object.get("a"), Some(&JsonValue::Bool(true)));
        assert_eq!(object.get("b"), None);
    }

    #[test]
    fn key_i64_converts_quoted_numeric_keys() {
        assert_eq!(key_i64(&JsonKey::Str("0".into()), "m"), Ok(0));
        assert_eq!(key_i64(&JsonKey::Int(-3), "m"), Ok(-3));
        assert!(matches!(
            key_i64(&JsonKey::Str("x".into()), "m"),
            Err(JsonError::InvalidKey { .. })
        ));
    }

    #[test]
    fn members_report_the_path_of_a_wrong_type() {
        let mut object = JsonObject::new();
        object.push("perm", JsonValue::Array(vec![]));
        let value = JsonValue::Object(object);
        let members = Members::of(&value, "queueDatas").unwrap();
        assert_eq!(
            members.i32("perm"),
            Err(JsonError::WrongType {
                member: "queueDatas.perm".into(),
                expected: "an integer"
            })
        );
        assert_eq!(members.i32("absent"), Ok(None));
    }
}
