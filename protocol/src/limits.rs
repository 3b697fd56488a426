//! Limits of the wire protocol, with the defaults of the Java implementation.
//!
//! Relationships between limits are checked at compile time below.

/// Largest frame accepted, counted as the frame's length word counts it
/// (everything after the length word). Java: `com.rocketmq.remoting.frameMaxLength`.
pub const FRAME_SIZE_MAX: u32 = 16 * 1024 * 1024;

/// Largest message body a broker accepts by default (`maxMessageSize`); also
/// the limit of a whole SEND_BATCH_MESSAGE body.
pub const MESSAGE_SIZE_MAX: u32 = 4 * 1024 * 1024;

/// Largest properties string: its length is a signed 16-bit field on disk.
pub const PROPERTIES_SIZE_MAX: usize = i16::MAX as usize;

/// Longest topic name for ordinary topics (a V1 record stores the length in a
/// signed byte).
pub const TOPIC_NAME_SIZE_MAX: usize = 127;

/// Longest topic name for `%RETRY%` and `%DLQ%` topics.
pub const SYSTEM_TOPIC_NAME_SIZE_MAX: usize = 255;

/// The header length is the low 24 bits of the header-length word.
pub const HEADER_SIZE_MAX: u32 = (1 << 24) - 1;

const _: () = assert!(MESSAGE_SIZE_MAX < FRAME_SIZE_MAX);
const _: () = assert!(HEADER_SIZE_MAX < FRAME_SIZE_MAX);
