//! The ROCKETMQ binary form of the `RemotingCommand` header (serialize type
//! 1, Java `RocketMQSerializable`).
//!
//! ```text
//! offset 0   code i16 | 2 language u8 | 3 version i16 | 5 opaque i32 | 9 flag i32
//!        13  remarkLen i32 | remark bytes
//!        17+R extLen i32 | ext map: (keyLen i16, key, valLen i32, value)*
//! ```
//!
//! Java decodes a zero-length string as `null`, so a zero-length remark, key
//! or value is absent here too (an entry with an empty key or value is
//! dropped). Bytes after the ext map are ignored, as Java ignores them.
//! Strings that are not UTF-8 are decoded lossily, as Java does.
//!
//! # Invariants
//!
//! - Every length is checked against the bytes that remain before it is
//!   used; negative lengths are errors. Nothing is allocated from a length
//!   that was not checked.

use bytes::{BufMut, Bytes};

use super::RemotingCommand;
use super::ext_fields::{ExtFields, Span};
use crate::code::LanguageCode;
use crate::error::{BinaryHeaderPart, DecodeError, EncodeError};

/// Size of the fixed part up to and including the remark length.
const FIXED_SIZE: usize = 2 + 1 + 2 + 4 + 4 + 4;

/// Size of the smallest header: fixed part, no remark, ext length 0.
pub const BINARY_HEADER_SIZE_MIN: usize = FIXED_SIZE + 4;

const _: () = assert!(BINARY_HEADER_SIZE_MIN == 21);

struct Reader<'a> {
    src: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn error(&self, part: BinaryHeaderPart, position: usize, reason: &'static str) -> DecodeError {
        DecodeError::MalformedBinaryHeader {
            part,
            position,
            reason,
        }
    }

    fn bytes<const N: usize>(
        &mut self,
        part: BinaryHeaderPart,
        end: usize,
    ) -> Result<[u8; N], DecodeError> {
        let start = self.pos;
        if end < start || end - start < N {
            return Err(self.error(part, start, "header ends inside the field"));
        }
        let mut out = [0u8; N];
        out.copy_from_slice(&self.src[start..start + N]);
        self.pos += N;
        Ok(out)
    }

    /// Reads a length word and checks it against the bytes left before `end`.
    fn length(
        &mut self,
        part: BinaryHeaderPart,
        short: bool,
        end: usize,
    ) -> Result<usize, DecodeError> {
        let start = self.pos;
        let length = if short {
            i32::from(i16::from_be_bytes(self.bytes(part, end)?))
        } else {
            i32::from_be_bytes(self.bytes(part, end)?)
        };
        let length =
            usize::try_from(length).map_err(|_| self.error(part, start, "negative length"))?;
        if length > end - self.pos {
            return Err(self.error(part, start, "length exceeds the header"));
        }
        Ok(length)
    }
}

/// Decodes a binary header. The returned command has no body.
pub(crate) fn decode(header: &Bytes) -> Result<RemotingCommand, DecodeError> {
    let end = header.len();
    let mut reader = Reader {
        src: header,
        pos: 0,
    };
    let fixed = BinaryHeaderPart::Fixed;
    let code = i16::from_be_bytes(reader.bytes(fixed, end)?);
    let [language] = reader.bytes(fixed, end)?;
    let version = i16::from_be_bytes(reader.bytes(fixed, end)?);
    let opaque = i32::from_be_bytes(reader.bytes(fixed, end)?);
    let flag = i32::from_be_bytes(reader.bytes(fixed, end)?);

    let remark_size = reader.length(BinaryHeaderPart::Remark, false, end)?;
    let remark_bytes = &header[reader.pos..reader.pos + remark_size];
    reader.pos += remark_size;
    let remark = (remark_size > 0).then(|| String::from_utf8_lossy(remark_bytes).into_owned());

    let ext_size = reader.length(BinaryHeaderPart::ExtLength, false, end)?;
    let ext_end = reader.pos + ext_size;
    let mut ext_fields = if ext_size == 0 {
        ExtFields::new()
    } else {
        // An entry takes at least 6 bytes; the estimate only sizes the Vec.
        ExtFields::with_source(header.clone(), (ext_size / 16).min(64))
    };
    while reader.pos < ext_end {
        let key_size = reader.length(BinaryHeaderPart::ExtKey, true, ext_end)?;
        let key = string_span(&mut ext_fields, header, reader.pos, key_size);
        reader.pos += key_size;
        let value_size = reader.length(BinaryHeaderPart::ExtValue, false, ext_end)?;
        let value = string_span(&mut ext_fields, header, reader.pos, value_size);
        reader.pos += value_size;
        if key_size > 0 && value_size > 0 {
            ext_fields.push_decoded(key, value);
        }
    }

    Ok(RemotingCommand {
        code: i32::from(code),
        language: LanguageCode::from_byte(language),
        version: i32::from(version),
        opaque,
        flag,
        remark,
        ext_fields,
        body: None,
    })
}

/// A span for `header[start..start + size]`, copied lossily into the arena
/// when it is not UTF-8.
fn string_span(fields: &mut ExtFields, header: &[u8], start: usize, size: usize) -> Span {
    let bytes = &header[start..start + size];
    if bytes.is_ascii() {
        // SAFETY: ASCII is valid UTF-8, and `fields` was built over this
        // same `header`.
        return unsafe { fields.source_span(start, start + size) };
    }
    match std::str::from_utf8(bytes) {
        // SAFETY: the range was just checked to be valid UTF-8, and
        // `fields` was built over this same `header`.
        Ok(_) => unsafe { fields.source_span(start, start + size) },
        Err(_) => {
            let text = String::from_utf8_lossy(bytes);
            fields.push_arena(&text)
        }
    }
}

/// Checks that `command` can be written in binary form; returns the header
/// size.
pub(crate) fn encoded_size(command: &RemotingCommand) -> Result<usize, EncodeError> {
    if i16::try_from(command.code).is_err() {
        return Err(EncodeError::CodeOutOfRange(command.code));
    }
    if i16::try_from(command.version).is_err() {
        return Err(EncodeError::VersionOutOfRange(command.version));
    }
    let remark_size = command.remark.as_ref().map_or(0, String::len);
    let mut size = BINARY_HEADER_SIZE_MIN + remark_size;
    for (key, value) in command.ext_fields.iter() {
        if i16::try_from(key.len()).is_err() {
            return Err(EncodeError::ExtKeyTooLong { size: key.len() });
        }
        size += 2 + key.len() + 4 + value.len();
    }
    Ok(size)
}

/// Writes the binary header; `encoded_size` must have accepted `command`.
pub(crate) fn encode<B: BufMut>(command: &RemotingCommand, dst: &mut B) {
    let code = i16::try_from(command.code).expect("encoded_size checked the code");
    let version = i16::try_from(command.version).expect("encoded_size checked the version");
    dst.put_i16(code);
    dst.put_u8(command.language.to_byte());
    dst.put_i16(version);
    dst.put_i32(command.opaque);
    dst.put_i32(command.flag);
    let remark = command.remark.as_deref().unwrap_or("");
    dst.put_i32(len_i32(remark.len()));
    dst.put_slice(remark.as_bytes());
    let ext_size: usize = command
        .ext_fields
        .iter()
        .map(|(k, v)| 2 + k.len() + 4 + v.len())
        .sum();
    dst.put_i32(len_i32(ext_size));
    for (key, value) in command.ext_fields.iter() {
        dst.put_i16(i16::try_from(key.len()).expect("encoded_size checked key lengths"));
        dst.put_slice(key.as_bytes());
        dst.put_i32(len_i32(value.len()));
        dst.put_slice(value.as_bytes());
    }
}

fn len_i32(size: usize) -> i32 {
    // Header sizes are bounded by the 24-bit header length checked by the
    // frame encoder before anything is sent; a String over 2 GiB would be a
    // bug of ours.
    i32::try_from(size).expect("header string below 2 GiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route_request() -> RemotingCommand {
        RemotingCommand {
            code: 105,
            version: 479,
            opaque: 7,
            ext_fields: [("topic", "TopicTest")].into_iter().collect(),
            ..RemotingCommand::default()
        }
    }

    const ROUTE_REQUEST_HEADER: [u8; 41] = [
        0x00, 0x69, 0x00, 0x01, 0xdf, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, // fixed
        0x00, 0x00, 0x00, 0x00, // remark
        0x00, 0x00, 0x00, 0x14, // ext length
        0x00, 0x05, b't', b'o', b'p', b'i', b'c', 0x00, 0x00, 0x00, 0x09, b'T', b'o', b'p', b'i',
        b'c', b'T', b'e', b's', b't',
    ];

    #[test]
    fn worked_example_encodes_and_decodes() {
        let command = route_request();
        assert_eq!(encoded_size(&command), Ok(41));
        let mut out = Vec::new();
        encode(&command, &mut out);
        assert_eq!(out, ROUTE_REQUEST_HEADER);
        assert_eq!(decode(&Bytes::copy_from_slice(&out)).unwrap(), command);
    }

    #[test]
    fn every_truncation_of_the_example_is_an_error() {
        for size in 0..ROUTE_REQUEST_HEADER.len() {
            let header = Bytes::copy_from_slice(&ROUTE_REQUEST_HEADER[..size]);
            assert!(
                matches!(
                    decode(&header),
                    Err(DecodeError::MalformedBinaryHeader { .. })
                ),
                "size {size}"
            );
        }
    }

    #[test]
    fn negative_and_oversized_lengths_are_errors() {
        let mut header = ROUTE_REQUEST_HEADER;
        header[13..17].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            decode(&Bytes::copy_from_slice(&header)),
            Err(DecodeError::MalformedBinaryHeader {
                part: BinaryHeaderPart::Remark,
                position: 13,
                reason: "negative length"
            })
        );
        let mut header = ROUTE_REQUEST_HEADER;
        header[21..23].copy_from_slice(&100i16.to_be_bytes());
        assert_eq!(
            decode(&Bytes::copy_from_slice(&header)),
            Err(DecodeError::MalformedBinaryHeader {
                part: BinaryHeaderPart::ExtKey,
                position: 21,
                reason: "length exceeds the header"
            })
        );
    }

    #[test]
    fn empty_values_are_absent_and_trailing_bytes_ignored() {
        let mut header = ROUTE_REQUEST_HEADER[..21].to_vec();
        header[17..21].copy_from_slice(&7i32.to_be_bytes());
        header.extend_from_slice(&[0x00, 0x01, b'k', 0, 0, 0, 0]);
        header.extend_from_slice(b"junk");
        let command = decode(&Bytes::from(header)).unwrap();
        assert!(command.ext_fields.is_empty());
    }

    #[test]
    fn unknown_language_bytes_decode_as_other_and_codes_out_of_range_do_not_encode() {
        let mut header = ROUTE_REQUEST_HEADER;
        header[2] = 99;
        let command = decode(&Bytes::copy_from_slice(&header)).unwrap();
        assert_eq!(command.language, LanguageCode::Other);
        let pop = RemotingCommand {
            code: 200050,
            ..RemotingCommand::default()
        };
        assert_eq!(encoded_size(&pop), Err(EncodeError::CodeOutOfRange(200050)));
        let version = RemotingCommand {
            version: 40000,
            ..RemotingCommand::default()
        };
        assert_eq!(
            encoded_size(&version),
            Err(EncodeError::VersionOutOfRange(40000))
        );
    }
}
