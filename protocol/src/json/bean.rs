//! The glue between typed bodies and the value tree / writer: the
//! [`JsonBean`] trait, helpers for lists and maps, and writing a
//! [`JsonValue`] back out.
//!
//! # Invariants
//!
//! - For every `T: JsonBean`, `T::read_json` accepts what `T::write_json`
//!   writes, in both styles and in pretty mode, and returns an equal value
//!   (checked per type by the property tests).

use std::collections::BTreeMap;

use super::error::JsonError;
use super::parse::parse;
use super::value::{JsonKey, JsonObject, JsonValue, Members};
use super::write::{ArrayKind, JsonStyle, JsonWriter};

/// A type with a fastjson bean form.
pub trait JsonBean: Sized {
    /// Writes `self` as one JSON value.
    fn write_json(&self, writer: &mut JsonWriter<'_>);

    /// Reads a value written by Java (or by [`JsonBean::write_json`]),
    /// leniently; `path` names the value in errors (empty for the root).
    ///
    /// # Errors
    ///
    /// [`JsonError`] when a member has a type fastjson would not coerce, or a
    /// map key cannot be converted to the declared key type.
    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError>;
}

/// Appends `bean` in compact form.
pub fn encode<T: JsonBean>(bean: &T, out: &mut Vec<u8>, style: JsonStyle) {
    let mut writer = JsonWriter::new(out, style);
    bean.write_json(&mut writer);
    writer.finish();
}

/// Appends `bean` in fastjson's `PrettyFormat` layout (Java style keys), as
/// RocketMQ writes `config/*.json`.
pub fn encode_pretty<T: JsonBean>(bean: &T, out: &mut Vec<u8>) {
    let mut writer = JsonWriter::pretty(out, JsonStyle::Java);
    bean.write_json(&mut writer);
    writer.finish();
}

/// Parses `input` and reads a `T` from it.
///
/// # Errors
///
/// Any parse error, or the errors of [`JsonBean::read_json`].
pub fn decode<T: JsonBean>(input: &[u8]) -> Result<T, JsonError> {
    T::read_json(&parse(input)?, "")
}

/// Generates the inherent `to_json` / `from_json` (and, with `pretty`,
/// `write_pretty`) of a body type from its [`JsonBean`] impl.
macro_rules! json_body {
    ($ty:ty) => {
        impl $ty {
            /// Appends this body's JSON to `out` in `style`, as Java's
            /// `RemotingSerializable.encode` writes it.
            pub fn to_json(&self, out: &mut Vec<u8>, style: $crate::json::JsonStyle) {
                $crate::json::encode(self, out, style);
            }

            /// Parses this body from JSON written by any RocketMQ peer.
            ///
            /// # Errors
            ///
            /// [`JsonError`]($crate::json::JsonError) for malformed JSON or
            /// members of the wrong type.
            pub fn from_json(input: &[u8]) -> Result<Self, $crate::json::JsonError> {
                $crate::json::decode(input)
            }
        }
    };
    ($ty:ty, pretty) => {
        json_body!($ty);

        impl $ty {
            /// Appends this config file's content to `out`, pretty-printed
            /// exactly as fastjson's `PrettyFormat` writes it.
            pub fn write_pretty(&self, out: &mut Vec<u8>) {
                $crate::json::encode_pretty(self, out);
            }
        }
    };
}
pub(crate) use json_body;

impl JsonBean for JsonValue {
    fn write_json(&self, writer: &mut JsonWriter<'_>) {
        write_value(writer, self);
    }

    fn read_json(value: &JsonValue, _path: &str) -> Result<Self, JsonError> {
        Ok(value.clone())
    }
}

/// Writes an arbitrary value: objects as maps, arrays as lists (what
/// fastjson does for `JSONObject` / `JSONArray`), numbers verbatim.
pub fn write_value(writer: &mut JsonWriter<'_>, value: &JsonValue) {
    match value {
        JsonValue::Null => writer.null(),
        JsonValue::Bool(b) => writer.bool(*b),
        JsonValue::Number(super::value::JsonNumber::Int(v)) => writer.i64(*v),
        JsonValue::Number(super::value::JsonNumber::Text(text)) => writer.number_text(text),
        JsonValue::String(s) => writer.string(s),
        JsonValue::Array(items) => {
            writer.begin_array(ArrayKind::List, items.len());
            for item in items {
                write_value(writer, item);
            }
            writer.end_array();
        }
        JsonValue::Object(object) => write_object(writer, object),
    }
}

/// Writes an object as a map, members in their order.
pub fn write_object(writer: &mut JsonWriter<'_>, object: &JsonObject) {
    writer.begin_map();
    for (key, member) in &object.members {
        match key {
            JsonKey::Str(s) => writer.map_key_str(s),
            JsonKey::Int(v) => writer.map_key_i64(*v),
            JsonKey::Object(key) => writer.map_key_with(|w| write_value(w, key)),
        }
        write_value(writer, member);
    }
    writer.end_map();
}

/// Writes a member holding an array of beans.
pub(crate) fn field_list<T: JsonBean>(
    writer: &mut JsonWriter<'_>,
    name: &'static str,
    kind: ArrayKind,
    items: &[T],
) {
    writer.member(name);
    writer.begin_array(kind, items.len());
    for item in items {
        item.write_json(writer);
    }
    writer.end_array();
}

/// Writes a member holding an array of strings.
pub(crate) fn field_strings(
    writer: &mut JsonWriter<'_>,
    name: &'static str,
    kind: ArrayKind,
    items: &[String],
) {
    writer.member(name);
    writer.begin_array(kind, items.len());
    for item in items {
        writer.string(item);
    }
    writer.end_array();
}

/// Writes a member holding a `Map<String,V>`.
pub(crate) fn field_str_map<V>(
    writer: &mut JsonWriter<'_>,
    name: &'static str,
    map: &BTreeMap<String, V>,
    mut write: impl FnMut(&mut JsonWriter<'_>, &V),
) {
    writer.member(name);
    writer.begin_map();
    for (key, value) in map {
        writer.map_key_str(key);
        write(writer, value);
    }
    writer.end_map();
}

/// Writes a member holding a `Map<Integer|Long,V>`.
pub(crate) fn field_int_map<K: Copy + Into<i64>, V>(
    writer: &mut JsonWriter<'_>,
    name: &'static str,
    map: &BTreeMap<K, V>,
    mut write: impl FnMut(&mut JsonWriter<'_>, &V),
) {
    writer.member(name);
    writer.begin_map();
    for (key, value) in map {
        writer.map_key_i64((*key).into());
        write(writer, value);
    }
    writer.end_map();
}

/// Reads a member holding an array of beans (empty when absent; null
/// elements skipped, as fastjson leaves them out of typed sets).
pub(crate) fn read_list<T: JsonBean>(
    members: &Members<'_>,
    name: &str,
) -> Result<Vec<T>, JsonError> {
    let path = members.path_of(name);
    members
        .array(name)?
        .iter()
        .filter(|item| !matches!(item, JsonValue::Null))
        .map(|item| T::read_json(item, &path))
        .collect()
}

/// Reads a member holding one bean (`None` when absent or null).
pub(crate) fn read_opt<T: JsonBean>(
    members: &Members<'_>,
    name: &str,
) -> Result<Option<T>, JsonError> {
    match members.value(name) {
        None | Some(JsonValue::Null) => Ok(None),
        Some(value) => T::read_json(value, &members.path_of(name)).map(Some),
    }
}

/// Writes member `name` holding `bean`; nothing for `None` (fastjson
/// leaves null members out).
pub(crate) fn field_opt_bean<T: JsonBean>(
    writer: &mut JsonWriter<'_>,
    name: &'static str,
    bean: Option<&T>,
) {
    if let Some(bean) = bean {
        writer.member(name);
        bean.write_json(writer);
    }
}

/// Reads a member holding a map, converting each key with `read_key`
/// (null values skipped).
pub(crate) fn read_map<K: Ord, V>(
    members: &Members<'_>,
    name: &str,
    read_key: impl Fn(&JsonKey, &str) -> Result<K, JsonError>,
    read_value: impl Fn(&JsonValue, &str) -> Result<V, JsonError>,
) -> Result<BTreeMap<K, V>, JsonError> {
    let mut map = BTreeMap::new();
    if let Some(object) = members.object(name)? {
        let path = members.path_of(name);
        for (key, value) in &object.members {
            if matches!(value, JsonValue::Null) {
                continue;
            }
            map.insert(read_key(key, &path)?, read_value(value, &path)?);
        }
    }
    Ok(map)
}

/// Reads a long from a map value.
pub(crate) fn value_i64(value: &JsonValue, path: &str) -> Result<i64, JsonError> {
    value.coerce_i64().ok_or_else(|| JsonError::WrongType {
        member: path.to_owned(),
        expected: "an integer",
    })
}

/// Reads a string from a map value or array element.
pub(crate) fn value_string(value: &JsonValue, path: &str) -> Result<String, JsonError> {
    value.coerce_string().ok_or_else(|| JsonError::WrongType {
        member: path.to_owned(),
        expected: "a string",
    })
}

/// The non-null items of an array map value.
fn value_items<'a>(
    value: &'a JsonValue,
    path: &str,
) -> Result<impl Iterator<Item = &'a JsonValue>, JsonError> {
    let items = value.as_array().ok_or_else(|| JsonError::WrongType {
        member: path.to_owned(),
        expected: "an array",
    })?;
    Ok(items.iter().filter(|item| !matches!(item, JsonValue::Null)))
}

/// Reads an array of strings from a map value.
pub(crate) fn value_strings(value: &JsonValue, path: &str) -> Result<Vec<String>, JsonError> {
    value_items(value, path)?
        .map(|item| value_string(item, path))
        .collect()
}

/// Reads an array of beans from a map value.
pub(crate) fn value_list<T: JsonBean>(value: &JsonValue, path: &str) -> Result<Vec<T>, JsonError> {
    value_items(value, path)?
        .map(|item| T::read_json(item, path))
        .collect()
}

/// Declares an enum written by name, with an `Other(String)` variant that
/// keeps names this crate does not know (a newer peer's), so reading never
/// fails on them and writing reproduces them.
macro_rules! java_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident default $default:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A name this crate does not know, kept as sent.
            Other(String),
        }

        impl $name {
            /// Java's `name()` of the constant.
            pub fn name(&self) -> &str {
                match self {
                    $( $name::$variant => $text, )+
                    $name::Other(text) => text,
                }
            }

            /// The constant named `text`; unknown names become `Other`.
            pub fn from_name(text: &str) -> Self {
                match text {
                    $( $text => $name::$variant, )+
                    other => $name::Other(other.to_owned()),
                }
            }
        }

        impl Default for $name {
            fn default() -> Self {
                $name::$default
            }
        }
    };
}
pub(crate) use java_enum;
