//! The remoting frame codec.
//!
//! ```text
//! +--------------+---------------------------------+-------------+-----------+
//! | length u32BE | serialize_type u8 | header_len  | header      | body      |
//! | = 4 + H + B  | (0 JSON, 1 RMQ)   | u24 BE = H  | H bytes     | B bytes   |
//! +--------------+---------------------------------+-------------+-----------+
//! ```
//!
//! `length` counts everything after itself; the body size is never written,
//! it is what remains. A frame occupies `4 + length` bytes of the stream.
//!
//! # Reading frames from a connection
//!
//! A connection keeps one `BytesMut` read buffer, reads into its spare
//! capacity, and after each read takes every complete frame off the front:
//!
//! ```
//! use bytes::BytesMut;
//! use ringmq_protocol::{command::RemotingCommand, frame, limits::FRAME_SIZE_MAX};
//!
//! # fn on_read(read_buffer: &mut BytesMut) -> Result<(), ringmq_protocol::error::DecodeError> {
//! while let Some(raw) = frame::decode_frame_mut(read_buffer, FRAME_SIZE_MAX)? {
//!     // `raw.header` and `raw.body` share the frozen frame bytes: no copy.
//!     let command = RemotingCommand::from_frame(&raw)?;
//!     # let _ = command;
//! }
//! // Not enough bytes for the next frame: make room for it, then read again.
//! if let Some(size) = frame::peek_frame_size(read_buffer, FRAME_SIZE_MAX)? {
//!     read_buffer.reserve(size.saturating_sub(read_buffer.len()));
//! }
//! # Ok(())
//! # }
//! ```
//!
//! [`decode_frame_mut`] `split_to`s the frame off the buffer and freezes it,
//! which moves no bytes; [`decode_frame`] does the same over a `Bytes` the
//! caller already holds. Any error means the stream is unusable: close the
//! connection, as Java does.
//!
//! # Invariants
//!
//! - The length word is checked against the maximum before a single byte of
//!   the frame is reserved or copied.
//! - A decode consumes exactly one whole frame or nothing.
//! - The header-length and serialize-type checks run as soon as the first
//!   8 bytes are present, before the rest of the frame has arrived.
//! - Encoders write a whole frame or nothing: on error the buffer is cut
//!   back to its previous length.

use bytes::{BufMut, Bytes, BytesMut};

use crate::code::SerializeType;
use crate::command::RemotingCommand;
use crate::error::{DecodeError, EncodeError};
use crate::limits::{FRAME_SIZE_MAX, HEADER_SIZE_MAX};

/// Size of the length word.
pub const LENGTH_SIZE: usize = 4;

/// Size of the length word plus the header-length word.
pub const FRAME_PREFIX_SIZE: usize = 8;

/// One complete frame, split into its parts. `header` and `body` are slices
/// of the frame's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    /// How the header is serialized.
    pub serialize_type: SerializeType,
    /// The header bytes.
    pub header: Bytes,
    /// The body bytes, possibly empty.
    pub body: Bytes,
    /// Bytes of the stream the frame occupied, length word included.
    pub frame_size: usize,
}

/// The length word and header-length word of a frame, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Prefix {
    frame_size: usize,
    serialize_type: Option<(SerializeType, usize)>,
}

fn read_prefix(src: &[u8], frame_size_max: u32) -> Result<Option<Prefix>, DecodeError> {
    let Some(length_word) = src.first_chunk::<LENGTH_SIZE>() else {
        return Ok(None);
    };
    let length = u32::from_be_bytes(*length_word);
    if length > frame_size_max {
        return Err(DecodeError::FrameTooLarge {
            declared: length,
            max: frame_size_max,
        });
    }
    if (length as usize) < LENGTH_SIZE {
        return Err(DecodeError::FrameTooSmall { declared: length });
    }
    let frame_size = LENGTH_SIZE + length as usize;
    let Some(prefix) = src.first_chunk::<FRAME_PREFIX_SIZE>() else {
        return Ok(Some(Prefix {
            frame_size,
            serialize_type: None,
        }));
    };
    let header_word = u32::from_be_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]);
    let type_byte = (header_word >> 24) as u8;
    let header_size = header_word & HEADER_SIZE_MAX;
    let serialize_type =
        SerializeType::from_byte(type_byte).ok_or(DecodeError::UnknownSerializeType(type_byte))?;
    if header_size > length - LENGTH_SIZE as u32 {
        return Err(DecodeError::HeaderOverrun {
            header: header_size,
            frame: length,
        });
    }
    Ok(Some(Prefix {
        frame_size,
        serialize_type: Some((serialize_type, header_size as usize)),
    }))
}

/// The size of the frame at the front of `src`, length word included, as
/// soon as its length word is there (the frame itself may be incomplete):
/// lets a reader reserve room for the whole frame.
///
/// # Errors
///
/// The length word exceeds `frame_size_max` or is below 4; once 8 bytes are
/// present, also an unknown serialize type or a header overrun.
pub fn peek_frame_size(src: &[u8], frame_size_max: u32) -> Result<Option<usize>, DecodeError> {
    Ok(read_prefix(src, frame_size_max)?.map(|prefix| prefix.frame_size))
}

/// Decodes the frame at the front of `src`; `Ok(None)` until it is complete.
/// `header` and `body` are zero-copy slices of `src`.
///
/// # Errors
///
/// As [`peek_frame_size`]. An error means the stream cannot be resumed.
pub fn decode_frame(src: &Bytes, frame_size_max: u32) -> Result<Option<RawFrame>, DecodeError> {
    let Some(prefix) = read_prefix(src, frame_size_max)? else {
        return Ok(None);
    };
    let Some((serialize_type, header_size)) = prefix.serialize_type else {
        return Ok(None);
    };
    if src.len() < prefix.frame_size {
        return Ok(None);
    }
    let header_end = FRAME_PREFIX_SIZE + header_size;
    Ok(Some(RawFrame {
        serialize_type,
        header: src.slice(FRAME_PREFIX_SIZE..header_end),
        body: src.slice(header_end..prefix.frame_size),
        frame_size: prefix.frame_size,
    }))
}

/// Takes the complete frame at the front of a connection's read buffer off
/// it (`split_to` + `freeze`, no copy); leaves the buffer untouched and
/// returns `Ok(None)` while the frame is incomplete.
///
/// # Errors
///
/// As [`decode_frame`]; the buffer is left untouched.
pub fn decode_frame_mut(
    buffer: &mut BytesMut,
    frame_size_max: u32,
) -> Result<Option<RawFrame>, DecodeError> {
    let Some(prefix) = read_prefix(buffer, frame_size_max)? else {
        return Ok(None);
    };
    if prefix.serialize_type.is_none() || buffer.len() < prefix.frame_size {
        return Ok(None);
    }
    let frame = buffer.split_to(prefix.frame_size).freeze();
    let raw = decode_frame(&frame, frame_size_max)?.expect("a complete, validated frame decodes");
    assert_eq!(
        raw.frame_size,
        frame.len(),
        "frame size changed between peek and decode"
    );
    Ok(Some(raw))
}

/// A growable buffer frames can be written into and patched in place:
/// `Vec<u8>` and `BytesMut`.
pub trait FrameBuffer: BufMut {
    /// Bytes written so far.
    fn written(&self) -> usize;
    /// The written bytes, mutable, for patching length words.
    fn written_mut(&mut self) -> &mut [u8];
    /// Cuts the buffer back to `len` bytes.
    fn cut_back(&mut self, len: usize);
}

impl FrameBuffer for Vec<u8> {
    fn written(&self) -> usize {
        self.len()
    }
    fn written_mut(&mut self) -> &mut [u8] {
        self
    }
    fn cut_back(&mut self, len: usize) {
        self.truncate(len);
    }
}

impl FrameBuffer for BytesMut {
    fn written(&self) -> usize {
        self.len()
    }
    fn written_mut(&mut self) -> &mut [u8] {
        self
    }
    fn cut_back(&mut self, len: usize) {
        self.truncate(len);
    }
}

/// Writes a frame's length words and header, the length counting a body of
/// `body_size` bytes that the caller writes or sends after it. The header is
/// written in place by `write_header`; the words are patched afterwards, so
/// there is no intermediate buffer. Returns the bytes written.
///
/// # Errors
///
/// The header exceeds [`HEADER_SIZE_MAX`] or the frame exceeds
/// [`FRAME_SIZE_MAX`]; `dst` is cut back to its previous length.
pub fn write_frame_head<B: FrameBuffer>(
    dst: &mut B,
    serialize_type: SerializeType,
    body_size: usize,
    write_header: impl FnOnce(&mut B),
) -> Result<usize, EncodeError> {
    let start = dst.written();
    dst.put_bytes(0, FRAME_PREFIX_SIZE);
    write_header(dst);
    let header_size = dst.written() - start - FRAME_PREFIX_SIZE;
    if header_size > HEADER_SIZE_MAX as usize {
        dst.cut_back(start);
        return Err(EncodeError::HeaderTooLarge {
            size: header_size,
            max: HEADER_SIZE_MAX,
        });
    }
    let length = (LENGTH_SIZE + header_size) as u64 + body_size as u64;
    if length > u64::from(FRAME_SIZE_MAX) {
        dst.cut_back(start);
        return Err(EncodeError::FrameTooLarge {
            size: length,
            max: FRAME_SIZE_MAX,
        });
    }
    let header_word = (u32::from(serialize_type.to_byte()) << 24) | header_size as u32;
    let prefix = &mut dst.written_mut()[start..start + FRAME_PREFIX_SIZE];
    prefix[..4].copy_from_slice(&(length as u32).to_be_bytes());
    prefix[4..].copy_from_slice(&header_word.to_be_bytes());
    Ok(FRAME_PREFIX_SIZE + header_size)
}

/// Writes a whole frame from an already serialized header and a body.
///
/// # Errors
///
/// As [`write_frame_head`].
pub fn write_frame<B: FrameBuffer>(
    dst: &mut B,
    serialize_type: SerializeType,
    header: &[u8],
    body: &[u8],
) -> Result<usize, EncodeError> {
    let head_size = write_frame_head(dst, serialize_type, body.len(), |dst| dst.put_slice(header))?;
    dst.put_slice(body);
    Ok(head_size + body.len())
}

/// Fuzz body for the frame decoder: decodes frames from `data` in a loop.
/// Each decode consumes one whole frame (exactly its declared size) or
/// nothing; one byte less than a frame is incomplete; every command that
/// decodes re-encodes in its own form and decodes to an equal command.
///
/// # Panics
///
/// When a property above is violated, which is the point of a fuzz target.
pub fn fuzz_frame(data: &[u8]) {
    let mut rest = Bytes::copy_from_slice(data);
    // Each round consumes at least the 8-byte prefix, so this bounds the loop.
    for _ in 0..=data.len() / FRAME_PREFIX_SIZE {
        let raw = match decode_frame(&rest, FRAME_SIZE_MAX) {
            Ok(Some(raw)) => raw,
            Ok(None) | Err(_) => return,
        };
        let declared = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        assert_eq!(
            raw.frame_size,
            LENGTH_SIZE + declared,
            "consumed size is not the frame"
        );
        assert!(raw.frame_size <= rest.len(), "consumed more than the input");
        assert_eq!(
            decode_frame(&rest.slice(..raw.frame_size - 1), FRAME_SIZE_MAX),
            Ok(None),
            "a frame missing its last byte must be incomplete"
        );
        let mut buffer = BytesMut::from(&rest[..]);
        let from_buffer = decode_frame_mut(&mut buffer, FRAME_SIZE_MAX);
        assert_eq!(
            from_buffer.as_ref().ok().and_then(Option::as_ref),
            Some(&raw)
        );
        assert_eq!(
            buffer.len(),
            rest.len() - raw.frame_size,
            "split the wrong size"
        );
        if let Ok(command) = RemotingCommand::from_frame(&raw) {
            let mut encoded = Vec::new();
            match command.encode(raw.serialize_type, &mut encoded) {
                Ok(_) => {}
                // JSON escapes can grow a header past the limits; only a
                // frame near the 16 MiB limit can get there.
                Err(EncodeError::HeaderTooLarge { .. } | EncodeError::FrameTooLarge { .. }) => {
                    return;
                }
                Err(error) => panic!("a decoded command does not re-encode: {error}"),
            }
            let again = decode_frame(&Bytes::from(encoded), FRAME_SIZE_MAX)
                .expect("a re-encoded frame is valid")
                .expect("a re-encoded frame is complete");
            let again = RemotingCommand::from_frame(&again).expect("a re-encoded header decodes");
            assert_eq!(again, command, "command changed after re-encoding");
        }
        rest = rest.slice(raw.frame_size..);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_frame(header: &[u8], body: &[u8]) -> Bytes {
        let mut out = Vec::new();
        write_frame(&mut out, SerializeType::Json, header, body).unwrap();
        Bytes::from(out)
    }

    #[test]
    fn decode_frame_returns_none_at_every_truncation_point() {
        let frame = json_frame(br#"{"code":1}"#, b"body");
        for size in 0..frame.len() {
            assert_eq!(
                decode_frame(&frame.slice(..size), FRAME_SIZE_MAX),
                Ok(None),
                "size {size}"
            );
            let mut buffer = BytesMut::from(&frame[..size]);
            assert_eq!(decode_frame_mut(&mut buffer, FRAME_SIZE_MAX), Ok(None));
            assert_eq!(buffer.len(), size);
        }
        let raw = decode_frame(&frame, FRAME_SIZE_MAX).unwrap().unwrap();
        assert_eq!(raw.frame_size, frame.len());
        assert_eq!(&raw.header[..], br#"{"code":1}"#);
        assert_eq!(&raw.body[..], b"body");
    }

    #[test]
    fn body_is_a_slice_of_the_input_not_a_copy() {
        let frame = json_frame(b"{}", &[9; 64]);
        let raw = decode_frame(&frame, FRAME_SIZE_MAX).unwrap().unwrap();
        let frame_range = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        assert!(frame_range.contains(&(raw.body.as_ptr() as usize)));
    }

    #[test]
    fn oversized_length_is_rejected_from_the_length_word_alone() {
        // Only the 4-byte length word is present: nothing could have been
        // allocated for the frame yet.
        let src = Bytes::from_static(&[0xFF, 0xFF, 0xFF, 0xFF]);
        assert_eq!(
            decode_frame(&src, FRAME_SIZE_MAX),
            Err(DecodeError::FrameTooLarge {
                declared: u32::MAX,
                max: FRAME_SIZE_MAX
            })
        );
        assert_eq!(
            peek_frame_size(&[0x01, 0x00, 0x00, 0x01], FRAME_SIZE_MAX),
            Err(DecodeError::FrameTooLarge {
                declared: FRAME_SIZE_MAX + 1,
                max: FRAME_SIZE_MAX
            })
        );
        let mut buffer = BytesMut::from(&[0x7F, 0, 0, 0][..]);
        assert!(decode_frame_mut(&mut buffer, 1024).is_err());
        assert_eq!(buffer.len(), 4);
    }

    #[test]
    fn length_below_four_is_rejected() {
        let src = Bytes::from_static(&[0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(
            decode_frame(&src, FRAME_SIZE_MAX),
            Err(DecodeError::FrameTooSmall { declared: 3 })
        );
    }

    #[test]
    fn header_longer_than_the_frame_is_rejected_early() {
        let src = Bytes::from_static(&[0, 0, 0, 10, 0, 0, 0, 7]);
        assert_eq!(
            decode_frame(&src, FRAME_SIZE_MAX),
            Err(DecodeError::HeaderOverrun {
                header: 7,
                frame: 10
            })
        );
    }

    #[test]
    fn unknown_serialize_type_is_rejected() {
        let src = Bytes::from_static(&[0, 0, 0, 4, 2, 0, 0, 0]);
        assert_eq!(
            decode_frame(&src, FRAME_SIZE_MAX),
            Err(DecodeError::UnknownSerializeType(2))
        );
    }

    #[test]
    fn decode_frame_mut_takes_frames_one_at_a_time() {
        let first = json_frame(b"{}", b"a");
        let second = json_frame(b"{}", b"bc");
        let mut buffer = BytesMut::new();
        buffer.extend_from_slice(&first);
        buffer.extend_from_slice(&second);
        buffer.extend_from_slice(&second[..3]);
        let raw = decode_frame_mut(&mut buffer, FRAME_SIZE_MAX)
            .unwrap()
            .unwrap();
        assert_eq!(&raw.body[..], b"a");
        let raw = decode_frame_mut(&mut buffer, FRAME_SIZE_MAX)
            .unwrap()
            .unwrap();
        assert_eq!(&raw.body[..], b"bc");
        assert_eq!(decode_frame_mut(&mut buffer, FRAME_SIZE_MAX), Ok(None));
        assert_eq!(buffer.len(), 3);
        assert_eq!(peek_frame_size(&buffer, FRAME_SIZE_MAX), Ok(None));
    }

    #[test]
    fn peek_reports_the_whole_frame_size_from_the_length_word() {
        assert_eq!(peek_frame_size(&[0, 0, 0, 9], FRAME_SIZE_MAX), Ok(Some(13)));
        assert_eq!(peek_frame_size(&[0, 0], FRAME_SIZE_MAX), Ok(None));
    }

    #[test]
    fn frames_too_large_to_encode_leave_the_buffer_as_it_was() {
        let mut out = vec![1];
        let result = write_frame_head(
            &mut out,
            SerializeType::Json,
            FRAME_SIZE_MAX as usize,
            |dst| {
                dst.put_slice(b"{}");
            },
        );
        assert_eq!(
            result,
            Err(EncodeError::FrameTooLarge {
                size: u64::from(FRAME_SIZE_MAX) + 6,
                max: FRAME_SIZE_MAX
            })
        );
        assert_eq!(out, [1]);
    }

    #[test]
    fn fuzz_frame_accepts_valid_streams_and_garbage() {
        let mut stream = json_frame(br#"{"code":10,"extFields":{"a":"b"}}"#, b"xyz").to_vec();
        stream.extend_from_slice(&json_frame(b"not json", b"")[..]);
        stream.extend_from_slice(&[0, 0, 0, 4, 1, 0, 0, 0]);
        fuzz_frame(&stream);
        fuzz_frame(&[0xFF; 9]);
        fuzz_frame(&[]);
    }
}
