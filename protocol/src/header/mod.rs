//! Typed custom headers: the `extFields` of each command as a Rust struct
//! (protocol reference 1.8 and 2.3).
//!
//! Each header implements [`CustomHeader`]: `from_ext` reads the exact Java
//! field names, `to_ext` writes them. The rules follow Java's
//! `RemotingCommand.decodeCommandCustomHeader` / `makeCustomHeaderToNet`:
//!
//! - A required (`@CFNotNull`) field that is absent is
//!   [`DecodeError::MissingField`]; the broker answers `SYSTEM_ERROR` with
//!   the field name, as Java does.
//! - Optional fields are `Option`s; `None` is not written.
//! - Java primitives (`boolean committed = true`) are plain values, written
//!   always, and take Java's field default when absent.
//! - Integers parse like `Integer.parseInt` / `Long.parseLong` (optional
//!   sign, digits, range-checked); a failure is
//!   [`DecodeError::InvalidField`] (Java logs and leaves the field null; we
//!   refuse instead of guessing). JSON numbers sent by the C++ client reach
//!   here as text already.
//! - Booleans parse like `Boolean.parseBoolean`: `true` in any case is
//!   true, anything else false. They never fail.
//! - Unknown keys are ignored: ACL keys, and the common RPC keys `ns`,
//!   `nsd`, `oway`, `lo` (namespace, namespaced, one-way hint, logical
//!   topic). `bname` (target broker name) is exposed as `broker_name` on the
//!   queue-level request headers where Java 5.x clients set it.
//!
//! Commands with no header fields (RPC keys only): HEART_BEAT (34, body
//! `HeartbeatData`; response keys [`IS_SUPPORT_HEART_BEAT_V2`],
//! [`IS_SUB_CHANGE`]), LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42) (bodies
//! carry everything), GET_BROKER_CLUSTER_INFO (106), GET_BROKER_RUNTIME_INFO
//! (28), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200, body
//! `SubscriptionGroupConfig`), GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206),
//! GET_BROKER_CONFIG (26) requests.
//!
//! # Invariants
//!
//! - `to_ext` followed by `from_ext` gives back an equal header.
//! - `from_ext` reads each key once, in one pass over the entries.

mod admin;
mod client;
mod namesrv;
mod offset;
mod pull;
mod query;
mod replica;
mod send;
mod transaction;

pub use admin::*;
pub use client::*;
pub use namesrv::*;
pub use offset::*;
pub use pull::*;
pub use query::*;
pub use replica::*;
pub use send::*;
pub use transaction::*;

use crate::command::ExtFields;
use crate::error::DecodeError;

/// Heartbeat response key: the broker supports heartbeat V2 (`"true"`).
pub const IS_SUPPORT_HEART_BEAT_V2: &str = "IS_SUPPORT_HEART_BEAT_V2";

/// Heartbeat response key: the client must send a full heartbeat.
pub const IS_SUB_CHANGE: &str = "IS_SUB_CHANGE";

/// A command's custom header, read from and written to [`ExtFields`].
pub trait CustomHeader: Sized {
    /// Reads the header from `ext`.
    ///
    /// # Errors
    ///
    /// [`DecodeError::MissingField`] for an absent required field,
    /// [`DecodeError::InvalidField`] for a value that does not parse.
    fn from_ext(ext: &ExtFields) -> Result<Self, DecodeError>;

    /// Writes the header's fields into `ext`, replacing keys that exist.
    fn to_ext(&self, ext: &mut ExtFields);

    /// The header as a new [`ExtFields`].
    fn to_ext_fields(&self) -> ExtFields {
        let mut ext = ExtFields::with_capacity(16, 256);
        self.to_ext(&mut ext);
        ext
    }
}

/// Which end of a timestamp range `SEARCH_OFFSET_BY_TIMESTAMP` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BoundaryType {
    /// First entry with store time at or after the timestamp.
    #[default]
    Lower,
    /// Last entry with store time at or before the timestamp.
    Upper,
}

/// A custom header field type: parsed from and written as text.
pub(crate) trait FieldValue: Sized {
    fn parse_field(name: &'static str, text: &str) -> Result<Self, DecodeError>;
    fn write_field(&self, name: &str, ext: &mut ExtFields);
}

impl FieldValue for String {
    fn parse_field(_name: &'static str, text: &str) -> Result<Self, DecodeError> {
        Ok(text.to_owned())
    }
    fn write_field(&self, name: &str, ext: &mut ExtFields) {
        ext.insert(name, self);
    }
}

impl FieldValue for i32 {
    fn parse_field(name: &'static str, text: &str) -> Result<Self, DecodeError> {
        text.parse()
            .map_err(|_| DecodeError::invalid_field(name, text))
    }
    fn write_field(&self, name: &str, ext: &mut ExtFields) {
        ext.insert_display(name, self);
    }
}

impl FieldValue for i64 {
    fn parse_field(name: &'static str, text: &str) -> Result<Self, DecodeError> {
        text.parse()
            .map_err(|_| DecodeError::invalid_field(name, text))
    }
    fn write_field(&self, name: &str, ext: &mut ExtFields) {
        ext.insert_display(name, self);
    }
}

impl FieldValue for bool {
    fn parse_field(_name: &'static str, text: &str) -> Result<Self, DecodeError> {
        Ok(text.eq_ignore_ascii_case("true"))
    }
    fn write_field(&self, name: &str, ext: &mut ExtFields) {
        ext.insert(name, if *self { "true" } else { "false" });
    }
}

impl FieldValue for BoundaryType {
    /// Java's `BoundaryType.getType`: `upper` in any case is `Upper`,
    /// anything else `Lower`.
    fn parse_field(_name: &'static str, text: &str) -> Result<Self, DecodeError> {
        Ok(if text.eq_ignore_ascii_case("upper") {
            BoundaryType::Upper
        } else {
            BoundaryType::Lower
        })
    }
    fn write_field(&self, name: &str, ext: &mut ExtFields) {
        ext.insert(
            name,
            if *self == BoundaryType::Upper {
                "UPPER"
            } else {
                "LOWER"
            },
        );
    }
}

/// Defines a header struct and its [`CustomHeader`] impl from a field list:
/// `rust_name: required|optional|primitive Type = "javaKey" [=> default],`.
macro_rules! custom_header {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                $field:ident : $kind:ident $ty:ty = $key:literal $(=> $default:expr)?,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$field_meta])* pub $field: custom_header!(@type $kind $ty), )*
        }

        impl Default for $name {
            /// Empty strings, zeros, `None`, and Java's defaults for primitives.
            fn default() -> Self {
                Self { $( $field: custom_header!(@default $kind $($default)?), )* }
            }
        }

        impl $crate::header::CustomHeader for $name {
            fn from_ext(
                ext: &$crate::command::ExtFields,
            ) -> Result<Self, $crate::error::DecodeError> {
                $( let mut $field: Option<$ty> = None; )*
                for (key, value) in ext.iter() {
                    match key {
                        $(
                            $key => {
                                $field = Some(
                                    <$ty as $crate::header::FieldValue>::parse_field($key, value)?,
                                );
                            }
                        )*
                        _ => {}
                    }
                }
                Ok(Self { $( $field: custom_header!(@finish $kind $field $key $($default)?), )* })
            }

            fn to_ext(&self, ext: &mut $crate::command::ExtFields) {
                $( custom_header!(@write $kind self.$field, $key, ext); )*
            }
        }
    };
    (@type required $ty:ty) => { $ty };
    (@type optional $ty:ty) => { Option<$ty> };
    (@type primitive $ty:ty) => { $ty };
    (@default primitive $default:expr) => { $default };
    (@default $kind:ident) => { Default::default() };
    (@finish required $field:ident $key:literal) => {
        $field.ok_or($crate::error::DecodeError::MissingField { name: $key })?
    };
    (@finish optional $field:ident $key:literal) => { $field };
    (@finish primitive $field:ident $key:literal $default:expr) => { $field.unwrap_or($default) };
    (@write optional $value:expr, $key:literal, $ext:ident) => {
        if let Some(value) = &$value {
            $crate::header::FieldValue::write_field(value, $key, $ext);
        }
    };
    (@write $kind:ident $value:expr, $key:literal, $ext:ident) => {
        $crate::header::FieldValue::write_field(&$value, $key, $ext)
    };
}

pub(crate) use custom_header;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_like_java_and_reject_garbage() {
        assert_eq!(i32::parse_field("queueId", "+7"), Ok(7));
        assert_eq!(i32::parse_field("queueId", "-1"), Ok(-1));
        assert_eq!(
            i32::parse_field("queueId", " 1"),
            Err(DecodeError::invalid_field("queueId", " 1"))
        );
        assert!(i32::parse_field("queueId", "2147483648").is_err());
        assert_eq!(
            i64::parse_field("offset", "9223372036854775807"),
            Ok(i64::MAX)
        );
        assert!(i64::parse_field("offset", "4.0").is_err());
    }

    #[test]
    fn booleans_parse_like_java_parse_boolean() {
        assert_eq!(bool::parse_field("k", "TRUE"), Ok(true));
        assert_eq!(bool::parse_field("k", "true"), Ok(true));
        assert_eq!(bool::parse_field("k", "yes"), Ok(false));
        assert_eq!(bool::parse_field("k", ""), Ok(false));
    }

    #[test]
    fn boundary_types_parse_case_insensitively() {
        assert_eq!(
            BoundaryType::parse_field("b", "upper"),
            Ok(BoundaryType::Upper)
        );
        assert_eq!(
            BoundaryType::parse_field("b", "UPPER"),
            Ok(BoundaryType::Upper)
        );
        assert_eq!(
            BoundaryType::parse_field("b", "LOWER"),
            Ok(BoundaryType::Lower)
        );
        assert_eq!(
            BoundaryType::parse_field("b", "sideways"),
            Ok(BoundaryType::Lower)
        );
    }
}
