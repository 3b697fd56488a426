//! Errors of the remoting layer: frames, `RemotingCommand` headers and typed
//! custom headers.
//!
//! Not having enough bytes yet is never an error: [`crate::frame::decode_frame`]
//! returns `Ok(None)` for that. Every variant here means the peer sent
//! something a Java broker would also refuse (and, for frames and headers,
//! close the connection over), except [`DecodeError::MissingField`] and
//! [`DecodeError::InvalidField`], which a broker answers with a response code
//! and whose field name it puts in the remark.
//!
//! # Invariants
//!
//! - Values copied from peer input into an error are truncated to
//!   [`ERROR_VALUE_SIZE_MAX`] bytes, so an error never holds a large
//!   allocation made on a peer's behalf.

use std::fmt;

/// Longest peer-supplied value kept inside an error, in bytes.
pub const ERROR_VALUE_SIZE_MAX: usize = 64;

/// Which part of a ROCKETMQ binary header a [`DecodeError::MalformedBinaryHeader`]
/// is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryHeaderPart {
    /// The 21-byte fixed part (code, language, version, opaque, flag and the
    /// remark length word).
    Fixed,
    /// The remark length or bytes.
    Remark,
    /// The ext-map length word.
    ExtLength,
    /// The length or bytes of an ext-map key.
    ExtKey,
    /// The length or bytes of an ext-map value.
    ExtValue,
}

impl fmt::Display for BinaryHeaderPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            BinaryHeaderPart::Fixed => "fixed part",
            BinaryHeaderPart::Remark => "remark",
            BinaryHeaderPart::ExtLength => "ext map length",
            BinaryHeaderPart::ExtKey => "ext key",
            BinaryHeaderPart::ExtValue => "ext value",
        };
        f.write_str(name)
    }
}

/// A frame, header or custom header field that cannot be decoded.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The length word announces more bytes than the configured maximum.
    /// Detected before any byte of the frame is buffered or allocated.
    #[error("frame of {declared} bytes exceeds the {max}-byte limit")]
    FrameTooLarge {
        /// The frame's length word (bytes after the length word).
        declared: u32,
        /// The limit in force.
        max: u32,
    },
    /// The length word is too small to hold the header-length word.
    #[error("frame length {declared} is smaller than the 4-byte header length word")]
    FrameTooSmall {
        /// The frame's length word.
        declared: u32,
    },
    /// The header length is larger than the frame length minus the
    /// header-length word.
    #[error("header length {header} is larger than frame length {frame} minus 4")]
    HeaderOverrun {
        /// Header length from the header-length word.
        header: u32,
        /// The frame's length word.
        frame: u32,
    },
    /// A header handed to the decoder directly is longer than a frame's
    /// 24-bit header length allows.
    #[error("header of {size} bytes exceeds the {max}-byte header limit")]
    HeaderTooLarge {
        /// Header size in bytes.
        size: usize,
        /// [`crate::limits::HEADER_SIZE_MAX`].
        max: u32,
    },
    /// The serialize-type byte is neither 0 (JSON) nor 1 (ROCKETMQ).
    #[error("unknown serialize type {0}")]
    UnknownSerializeType(u8),
    /// The JSON header is not a JSON object in the dialect we accept.
    #[error("malformed JSON header at byte {position}: {reason}")]
    MalformedJsonHeader {
        /// Byte offset inside the header where parsing stopped.
        position: usize,
        /// What was expected or found.
        reason: &'static str,
    },
    /// A member of the JSON header has the wrong type or range.
    #[error("JSON header member {member} at byte {position}: {reason}")]
    InvalidJsonMember {
        /// Member name, e.g. `code`.
        member: &'static str,
        /// Byte offset of the member's value inside the header.
        position: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A ROCKETMQ binary header whose lengths do not fit.
    #[error("malformed binary header, {part} at byte {position}: {reason}")]
    MalformedBinaryHeader {
        /// Which field.
        part: BinaryHeaderPart,
        /// Byte offset inside the header where the field starts.
        position: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A custom header field the Java class marks `@CFNotNull` is absent.
    #[error("the custom field <{name}> is null")]
    MissingField {
        /// The `extFields` key.
        name: &'static str,
    },
    /// A custom header field is present but cannot be parsed as its type.
    #[error("custom field <{name}> has invalid value {value:?}")]
    InvalidField {
        /// The `extFields` key.
        name: &'static str,
        /// The value, truncated to [`ERROR_VALUE_SIZE_MAX`] bytes.
        value: String,
    },
}

impl DecodeError {
    /// Builds [`DecodeError::InvalidField`], truncating `value` on a
    /// character boundary to at most [`ERROR_VALUE_SIZE_MAX`] bytes.
    pub fn invalid_field(name: &'static str, value: &str) -> Self {
        DecodeError::InvalidField {
            name,
            value: truncate(value, ERROR_VALUE_SIZE_MAX).to_owned(),
        }
    }

    /// The `extFields` key this error is about, for a response remark.
    pub fn field_name(&self) -> Option<&'static str> {
        match self {
            DecodeError::MissingField { name } | DecodeError::InvalidField { name, .. } => {
                Some(name)
            }
            _ => None,
        }
    }
}

/// A command that cannot be written in the requested form.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum EncodeError {
    /// The ROCKETMQ binary header stores `code` in 16 bits; Java truncates
    /// silently, we refuse.
    #[error("code {0} does not fit the 16-bit code of a ROCKETMQ binary header")]
    CodeOutOfRange(i32),
    /// The ROCKETMQ binary header stores `version` in 16 bits.
    #[error("version {0} does not fit the 16-bit version of a ROCKETMQ binary header")]
    VersionOutOfRange(i32),
    /// An ext-map key longer than the 16-bit length of the binary form.
    #[error("ext key of {size} bytes does not fit a 16-bit length")]
    ExtKeyTooLong {
        /// Key size in bytes.
        size: usize,
    },
    /// The header is longer than the 24-bit header length can express.
    #[error("header of {size} bytes exceeds the {max}-byte header limit")]
    HeaderTooLarge {
        /// Header size in bytes.
        size: usize,
        /// [`crate::limits::HEADER_SIZE_MAX`].
        max: u32,
    },
    /// The frame is longer than the 32-bit length word or the limit.
    #[error("frame of {size} bytes exceeds the {max}-byte limit")]
    FrameTooLarge {
        /// Frame size as the length word counts it.
        size: u64,
        /// The limit in force.
        max: u32,
    },
}

/// `s` cut to at most `max` bytes on a character boundary.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_field_truncates_long_values_on_char_boundaries() {
        let long = "é".repeat(100);
        let error = DecodeError::invalid_field("queueId", &long);
        let DecodeError::InvalidField { name, value } = &error else {
            panic!("wrong variant {error:?}");
        };
        assert_eq!(*name, "queueId");
        assert!(value.len() <= ERROR_VALUE_SIZE_MAX);
        assert_eq!(value.len(), 64);
        assert_eq!(error.field_name(), Some("queueId"));
    }

    #[test]
    fn frame_error_messages_carry_the_numbers() {
        let error = DecodeError::FrameTooLarge {
            declared: 20,
            max: 10,
        };
        assert_eq!(
            error.to_string(),
            "frame of 20 bytes exceeds the 10-byte limit"
        );
        assert_eq!(error.field_name(), None);
    }
}
