//! Errors of the fastjson-dialect parser and of the typed body decoders.
//!
//! Syntax errors carry the byte position in the input and what the parser
//! expected there; typed errors carry the member (a dotted path such as
//! `brokerDatas.brokerAddrs`) and the JSON type that was expected. Absent
//! members are never an error: as in fastjson, they take the Java class's
//! default.
//!
//! # Invariants
//!
//! - A `position` is a byte offset into the input and is never larger than
//!   the input's length.

/// What went wrong while parsing or decoding a JSON body.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum JsonError {
    /// The input is not JSON of the fastjson dialect at `position`.
    #[error("malformed JSON at byte {position}: expected {expected}")]
    Syntax {
        /// Byte offset of the offending (or missing) character.
        position: usize,
        /// What the parser expected at that position.
        expected: &'static str,
    },
    /// The input is not UTF-8.
    #[error("invalid UTF-8 at byte {position}")]
    InvalidUtf8 {
        /// Byte offset of the first invalid byte.
        position: usize,
    },
    /// Arrays, objects and object keys are nested deeper than allowed.
    #[error("JSON nested deeper than {depth_max} levels at byte {position}")]
    TooDeep {
        /// Byte offset of the opening bracket that went too deep.
        position: usize,
        /// The limit, [`JSON_DEPTH_MAX`](super::JSON_DEPTH_MAX).
        depth_max: usize,
    },
    /// The input is larger than allowed; nothing was parsed.
    #[error("JSON input of {size} bytes exceeds the {size_max}-byte limit")]
    TooLarge {
        /// Size of the input.
        size: usize,
        /// The limit, [`JSON_INPUT_SIZE_MAX`](super::JSON_INPUT_SIZE_MAX).
        size_max: usize,
    },
    /// A member has a JSON type that cannot be coerced into the declared type.
    #[error("member `{member}` is not {expected}")]
    WrongType {
        /// Dotted path of the member.
        member: String,
        /// The declared type, e.g. "an integer", "an object".
        expected: &'static str,
    },
    /// A map key cannot be converted into the declared key type.
    #[error("key {key:?} of `{member}` is not {expected}")]
    InvalidKey {
        /// Dotted path of the map.
        member: String,
        /// The key, truncated to [`KEY_TEXT_SHOWN_MAX`](super::KEY_TEXT_SHOWN_MAX) bytes.
        key: String,
        /// The declared key type.
        expected: &'static str,
    },
    /// A REGISTER_BROKER body in the zlib-compressed form: decoding it needs
    /// an inflater, which this crate does not have.
    #[error("compressed register body not supported (zlib stream of {size} bytes)")]
    CompressedRegisterBodyUnsupported {
        /// Size of the body.
        size: usize,
    },
}
