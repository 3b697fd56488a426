//! `RemotingCommand`: the header and body of one remoting frame, in both
//! header serializations.
//!
//! ```text
//! [length u32 BE][serialize_type u8 | header_len u24][header][body]
//!                                                     ^ JSON (json_header) or ROCKETMQ (binary_header)
//! ```
//!
//! A command decoded from a frame shares the frame's bytes: the body is a
//! `Bytes` slice of it, and `extFields` keys and values point into the header
//! bytes unless they had to be unescaped (see [`ExtFields`]).
//!
//! Normalisations (so that decode → encode → decode is the identity):
//! an empty body is `None`; an empty or `null` remark is `None`; an empty
//! `extFields` object and an absent one are both an empty [`ExtFields`], and
//! encoders omit it.
//!
//! # Invariants
//!
//! - `body` is never `Some` of an empty `Bytes` after decoding.
//! - `remark` is never `Some("")` after decoding.
//! - Encoding writes either a whole frame or nothing (the buffer is cut back
//!   on error).

mod binary_header;
mod ext_fields;
mod json_header;
pub(crate) mod json_text;

use bytes::Bytes;

pub use binary_header::BINARY_HEADER_SIZE_MIN;
pub use ext_fields::ExtFields;
pub use json_header::JSON_DEPTH_MAX;

use crate::code::{LanguageCode, SerializeType, flag, version};
use crate::error::{DecodeError, EncodeError};
use crate::frame::{self, FrameBuffer, RawFrame};
use crate::header::CustomHeader;
use crate::limits::HEADER_SIZE_MAX;

/// One remoting request or response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemotingCommand {
    /// Request code in requests, response code in responses. Unknown codes
    /// pass through unchanged.
    pub code: i32,
    /// The sender's language.
    pub language: LanguageCode,
    /// The sender's `MQVersion` ordinal.
    pub version: i32,
    /// Request id; a response carries its request's.
    pub opaque: i32,
    /// [`flag::RESPONSE`] and [`flag::ONEWAY`] bits.
    pub flag: i32,
    /// Free text, usually an error message; never `Some("")` when decoded.
    pub remark: Option<String>,
    /// The custom header fields.
    pub ext_fields: ExtFields,
    /// The body; `None` when empty.
    pub body: Option<Bytes>,
}

impl RemotingCommand {
    /// A request from us: language JAVA (what every client understands),
    /// our version, opaque 0 (the caller assigns it), no body.
    pub fn new_request(code: i32, ext_fields: ExtFields) -> Self {
        RemotingCommand {
            code,
            language: LanguageCode::Java,
            version: version::CURRENT,
            ext_fields,
            ..RemotingCommand::default()
        }
    }

    /// A response to the request with `opaque`, with the response flag set.
    pub fn new_response(code: i32, opaque: i32, remark: Option<String>) -> Self {
        RemotingCommand {
            code,
            language: LanguageCode::Java,
            version: version::CURRENT,
            opaque,
            flag: flag::RESPONSE,
            remark: remark.filter(|remark| !remark.is_empty()),
            ..RemotingCommand::default()
        }
    }

    /// Whether the response bit is set.
    pub fn is_response(&self) -> bool {
        self.flag & flag::RESPONSE != 0
    }

    /// Whether the one-way bit is set (a request that must not be answered).
    pub fn is_oneway(&self) -> bool {
        self.flag & flag::ONEWAY != 0
    }

    /// Sets the one-way bit.
    pub fn mark_oneway(&mut self) {
        self.flag |= flag::ONEWAY;
    }

    /// The command with `body` attached (`None` if it is empty).
    pub fn with_body(mut self, body: Bytes) -> Self {
        self.body = Some(body).filter(|body| !body.is_empty());
        self
    }

    /// The body, or an empty slice.
    pub fn body_bytes(&self) -> &[u8] {
        self.body.as_deref().unwrap_or_default()
    }

    /// Reads a typed custom header from `ext_fields`.
    ///
    /// # Errors
    ///
    /// A missing required field or an unparsable value, naming the field.
    pub fn decode_custom_header<H: CustomHeader>(&self) -> Result<H, DecodeError> {
        H::from_ext(&self.ext_fields)
    }

    /// The command with `header`'s fields written into `ext_fields`.
    pub fn with_custom_header(mut self, header: &impl CustomHeader) -> Self {
        header.to_ext(&mut self.ext_fields);
        self
    }

    /// Decodes the header and takes the body of a frame.
    ///
    /// # Errors
    ///
    /// A malformed JSON or binary header.
    pub fn from_frame(frame: &RawFrame) -> Result<Self, DecodeError> {
        let mut command = Self::decode_header(frame.serialize_type, &frame.header)?;
        command.body = Some(frame.body.clone()).filter(|body| !body.is_empty());
        Ok(command)
    }

    /// Decodes a header alone; the command has no body.
    ///
    /// # Errors
    ///
    /// A malformed JSON or binary header, or one longer than
    /// [`HEADER_SIZE_MAX`] (which no frame can carry).
    pub fn decode_header(
        serialize_type: SerializeType,
        header: &Bytes,
    ) -> Result<Self, DecodeError> {
        if header.len() > HEADER_SIZE_MAX as usize {
            return Err(DecodeError::HeaderTooLarge {
                size: header.len(),
                max: HEADER_SIZE_MAX,
            });
        }
        match serialize_type {
            SerializeType::Json => json_header::decode(header),
            SerializeType::RocketMq => binary_header::decode(header),
        }
    }

    /// Writes the header alone (no frame words) to `dst`.
    ///
    /// # Errors
    ///
    /// The binary form cannot hold the code, version or a key length;
    /// nothing is written then.
    pub fn encode_header<B: bytes::BufMut>(
        &self,
        serialize_type: SerializeType,
        dst: &mut B,
    ) -> Result<(), EncodeError> {
        match serialize_type {
            SerializeType::Json => json_header::encode(self, dst),
            SerializeType::RocketMq => {
                binary_header::encoded_size(self)?;
                binary_header::encode(self, dst);
            }
        }
        Ok(())
    }

    /// Writes the whole frame, body included, to `dst`; returns the bytes
    /// written. This copies the body; see [`Self::encode_head`] to send a
    /// large body from its own buffer.
    ///
    /// # Errors
    ///
    /// See [`Self::encode_head`]; nothing is written then.
    pub fn encode<B: FrameBuffer>(
        &self,
        serialize_type: SerializeType,
        dst: &mut B,
    ) -> Result<usize, EncodeError> {
        let head_size = self.encode_head(serialize_type, dst)?;
        let body = self.body_bytes();
        dst.put_slice(body);
        Ok(head_size + body.len())
    }

    /// Writes the frame without the body bytes (length words, header), the
    /// length word counting the body, so that the caller can send the body
    /// from its own buffer in the same vectored write. Returns the bytes
    /// written.
    ///
    /// # Errors
    ///
    /// The header exceeds the 24-bit header length, the frame exceeds
    /// [`crate::limits::FRAME_SIZE_MAX`], or the binary form cannot hold the
    /// code, version or a key length; nothing is written then.
    pub fn encode_head<B: FrameBuffer>(
        &self,
        serialize_type: SerializeType,
        dst: &mut B,
    ) -> Result<usize, EncodeError> {
        self.encode_head_for_body(serialize_type, self.body_bytes().len(), dst)
    }

    /// As [`Self::encode_head`], the length word counting a body of
    /// `body_len` bytes that the caller sends from elsewhere (a pipe) in
    /// place of the command's own, which is ignored.
    ///
    /// # Errors
    ///
    /// As [`Self::encode_head`].
    pub fn encode_head_for_body<B: FrameBuffer>(
        &self,
        serialize_type: SerializeType,
        body_len: usize,
        dst: &mut B,
    ) -> Result<usize, EncodeError> {
        if serialize_type == SerializeType::RocketMq {
            binary_header::encoded_size(self)?;
        }
        frame::write_frame_head(dst, serialize_type, body_len, |dst| match serialize_type {
            SerializeType::Json => json_header::encode(self, dst),
            SerializeType::RocketMq => binary_header::encode(self, dst),
        })
    }
}

/// Fuzz body for header decoders: `data[0]` picks the serialize type, the
/// rest is a header. Decoding never panics; whatever decodes re-encodes in
/// the same form and decodes to an equal command.
///
/// # Panics
///
/// When a property above is violated, which is the point of a fuzz target.
pub fn fuzz_header(data: &[u8]) {
    let Some((&selector, header)) = data.split_first() else {
        return;
    };
    let serialize_type = if selector & 1 == 0 {
        SerializeType::Json
    } else {
        SerializeType::RocketMq
    };
    let header = Bytes::copy_from_slice(header);
    let Ok(command) = RemotingCommand::decode_header(serialize_type, &header) else {
        return;
    };
    let mut encoded = Vec::new();
    command
        .encode_header(serialize_type, &mut encoded)
        .expect("a decoded header re-encodes in its own form");
    let again = RemotingCommand::decode_header(serialize_type, &Bytes::from(encoded))
        .expect("a re-encoded header decodes");
    assert_eq!(again, command, "header changed after re-encoding");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::decode_frame;
    use crate::limits::FRAME_SIZE_MAX;

    const JAVA_ROUTE_REQUEST: &str = r#"{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":479}"#;

    fn route_request() -> RemotingCommand {
        let mut command =
            RemotingCommand::new_request(105, [("topic", "TopicTest")].into_iter().collect());
        command.opaque = 7;
        command
    }

    #[test]
    fn json_example_frame_is_byte_for_byte_java() {
        let mut out = Vec::new();
        let size = route_request()
            .encode(SerializeType::Json, &mut out)
            .unwrap();
        // The length word says 135 (0x87): it does not count itself.
        assert_eq!(size, 139);
        assert_eq!(out[..8], [0x00, 0x00, 0x00, 0x87, 0x00, 0x00, 0x00, 0x83]);
        assert_eq!(&out[8..], JAVA_ROUTE_REQUEST.as_bytes());
        let frame = decode_frame(&Bytes::from(out), FRAME_SIZE_MAX)
            .unwrap()
            .unwrap();
        assert_eq!(
            RemotingCommand::from_frame(&frame).unwrap(),
            route_request()
        );
    }

    #[test]
    fn binary_example_frame_is_byte_for_byte_java() {
        let mut out = bytes::BytesMut::new();
        let size = route_request()
            .encode(SerializeType::RocketMq, &mut out)
            .unwrap();
        // The length word says 45 (0x2d); the stream carries 4 more bytes.
        assert_eq!(size, 49);
        let expected: [u8; 49] = [
            0x00, 0x00, 0x00, 0x2d, 0x01, 0x00, 0x00, 0x29, // length 45, type 1, H 41
            0x00, 0x69, 0x00, 0x01, 0xdf, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,
            0x00, // fixed
            0x00, 0x00, 0x00, 0x00, // remark length
            0x00, 0x00, 0x00, 0x14, // ext length
            0x00, 0x05, 0x74, 0x6f, 0x70, 0x69, 0x63, // "topic"
            0x00, 0x00, 0x00, 0x09, 0x54, 0x6f, 0x70, 0x69, 0x63, 0x54, 0x65, 0x73,
            0x74, // "TopicTest"
        ];
        assert_eq!(out[..], expected);
        let frame = decode_frame(&out.freeze(), FRAME_SIZE_MAX)
            .unwrap()
            .unwrap();
        assert_eq!(frame.serialize_type, SerializeType::RocketMq);
        assert_eq!(
            RemotingCommand::from_frame(&frame).unwrap(),
            route_request()
        );
    }

    #[test]
    fn send_v2_examples_of_the_reference_re_encode_byte_for_byte() {
        let request = concat!(
            r#"{"code":310,"extFields":{"a":"ProducerGroupA","b":"TopicTest","c":"TBW102","d":"4","#,
            r#""e":"1","f":"0","g":"1700000000000","h":"0","i":"KEYS\u0001order-1\u0002UNIQ_KEY"#,
            r#"\u0001C0A80005303918B4AAC21D5C1A2B0001\u0002WAIT\u0001true\u0002TAGS\u0001TagA"#,
            r#"\u0002","j":"0","k":"false","m":"false","n":"broker-a"},"flag":0,"language":"JAVA","#,
            r#""opaque":12,"serializeTypeCurrentRPC":"JSON","version":479}"#
        );
        let response = concat!(
            r#"{"code":0,"extFields":{"MSG_REGION":"DefaultRegion","TRACE_ON":"true","#,
            r#""msgId":"C0A8000A00002A9F0000000000000400","queueId":"1","queueOffset":"42","#,
            r#""transactionId":"C0A80005303918B4AAC21D5C1A2B0001"},"flag":1,"language":"JAVA","#,
            r#""opaque":12,"serializeTypeCurrentRPC":"JSON","version":479}"#
        );
        for text in [request, response] {
            let header = Bytes::from_static(text.as_bytes());
            let command = RemotingCommand::decode_header(SerializeType::Json, &header).unwrap();
            let mut out = Vec::new();
            command
                .encode_header(SerializeType::Json, &mut out)
                .unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), text);
        }
        let command = RemotingCommand::decode_header(
            SerializeType::Json,
            &Bytes::from_static(request.as_bytes()),
        )
        .unwrap();
        assert_eq!(
            command.ext_fields.get("i"),
            Some(
                "KEYS\u{1}order-1\u{2}UNIQ_KEY\u{1}C0A80005303918B4AAC21D5C1A2B0001\u{2}WAIT\u{1}true\u{2}TAGS\u{1}TagA\u{2}"
            )
        );
    }

    #[test]
    fn responses_and_oneway_flags_are_reported() {
        let response = RemotingCommand::new_response(17, 9, Some(String::new()));
        assert!(response.is_response());
        assert!(!response.is_oneway());
        assert_eq!(response.remark, None);
        assert_eq!(response.opaque, 9);
        let mut request = RemotingCommand::new_request(15, ExtFields::new());
        assert!(!request.is_response());
        request.mark_oneway();
        assert!(request.is_oneway());
        assert_eq!(request.flag, 2);
    }

    #[test]
    fn unknown_codes_pass_through_both_forms() {
        for serialize_type in [SerializeType::Json, SerializeType::RocketMq] {
            let command = RemotingCommand::new_request(31000, ExtFields::new())
                .with_body(Bytes::from_static(b"body"));
            let mut out = Vec::new();
            command.encode(serialize_type, &mut out).unwrap();
            let frame = decode_frame(&Bytes::from(out), FRAME_SIZE_MAX)
                .unwrap()
                .unwrap();
            let decoded = RemotingCommand::from_frame(&frame).unwrap();
            assert_eq!(decoded.code, 31000);
            assert_eq!(decoded, command);
        }
    }

    #[test]
    fn typed_headers_attach_and_decode() {
        use crate::header::{GetRouteInfoRequestHeader, SearchOffsetResponseHeader};
        let command = RemotingCommand::new_response(0, 3, None)
            .with_custom_header(&SearchOffsetResponseHeader { offset: 12 });
        assert_eq!(command.ext_fields.get("offset"), Some("12"));
        let header: SearchOffsetResponseHeader = command.decode_custom_header().unwrap();
        assert_eq!(header.offset, 12);
        assert_eq!(
            command.decode_custom_header::<GetRouteInfoRequestHeader>(),
            Err(DecodeError::MissingField { name: "topic" })
        );
    }

    #[test]
    fn headers_longer_than_a_frame_can_carry_are_refused() {
        let header = Bytes::from(vec![b' '; HEADER_SIZE_MAX as usize + 1]);
        assert_eq!(
            RemotingCommand::decode_header(SerializeType::Json, &header),
            Err(DecodeError::HeaderTooLarge {
                size: header.len(),
                max: HEADER_SIZE_MAX
            })
        );
    }

    #[test]
    fn empty_bodies_decode_as_none() {
        let command = RemotingCommand::new_request(34, ExtFields::new()).with_body(Bytes::new());
        assert_eq!(command.body, None);
        let mut out = Vec::new();
        command.encode(SerializeType::Json, &mut out).unwrap();
        let frame = decode_frame(&Bytes::from(out), FRAME_SIZE_MAX)
            .unwrap()
            .unwrap();
        assert_eq!(RemotingCommand::from_frame(&frame).unwrap().body, None);
    }

    #[test]
    fn failed_binary_encode_writes_nothing() {
        let command = RemotingCommand::new_request(200050, ExtFields::new());
        let mut out = vec![1, 2, 3];
        assert_eq!(
            command.encode(SerializeType::RocketMq, &mut out),
            Err(EncodeError::CodeOutOfRange(200050))
        );
        assert_eq!(out, [1, 2, 3]);
    }

    #[test]
    fn encode_head_counts_the_body_without_writing_it() {
        let command = route_request().with_body(Bytes::from_static(&[7; 128]));
        let mut head = Vec::new();
        let head_size = command.encode_head(SerializeType::Json, &mut head).unwrap();
        assert_eq!(head_size, head.len());
        let mut whole = Vec::new();
        command.encode(SerializeType::Json, &mut whole).unwrap();
        assert_eq!(whole[..head_size], head[..]);
        assert_eq!(whole.len(), head_size + 128);
    }

    #[test]
    fn fuzz_header_accepts_examples_and_garbage() {
        let mut json = vec![0];
        json.extend_from_slice(JAVA_ROUTE_REQUEST.as_bytes());
        fuzz_header(&json);
        fuzz_header(&[1, 0, 0]);
        fuzz_header(&[]);
        fuzz_header(b"\x00{\"extFields\":{\"\":\"\\u0000\"}}");
    }
}
