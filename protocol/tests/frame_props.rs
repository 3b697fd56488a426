//! Property tests of the frame and command codecs, public API only.
//!
//! proptest prints the failing input and persists its seed under
//! `proptest-regressions/`; set `PROPTEST_CASES` for longer runs.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use ringmq_protocol::code::{LanguageCode, SerializeType};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::frame::{decode_frame, decode_frame_mut, fuzz_frame};
use ringmq_protocol::limits::FRAME_SIZE_MAX;

/// Strings of arbitrary characters, control characters, U+2028 and
/// non-BMP characters included.
fn text(max_len: usize) -> impl Strategy<Value = String> {
    let special = prop_oneof![
        Just('\u{0}'),
        Just('\u{1}'),
        Just('\u{2}'),
        Just('"'),
        Just('\\'),
        Just('\u{7f}'),
        Just('\u{85}'),
        Just('\u{2028}'),
        Just('é'),
        Just('😀'),
    ];
    let ch = prop_oneof![3 => any::<char>(), 2 => special, 5 => proptest::char::range('a', 'z')];
    proptest::collection::vec(ch, 0..max_len).prop_map(String::from_iter)
}

fn non_empty_text(max_len: usize) -> impl Strategy<Value = String> {
    text(max_len).prop_filter("non-empty", |text| !text.is_empty())
}

fn command(serialize_type: SerializeType) -> impl Strategy<Value = RemotingCommand> {
    let binary = serialize_type == SerializeType::RocketMq;
    let small = move |value: i32| {
        if binary {
            i32::from(value as i16)
        } else {
            value
        }
    };
    // The binary form drops empty keys and values, as Java decodes them as null.
    let entry = if binary {
        (non_empty_text(12), non_empty_text(24)).boxed()
    } else {
        (text(12), text(24)).boxed()
    };
    (
        any::<i32>(),
        0..LanguageCode::ALL.len(),
        any::<i32>(),
        any::<i32>(),
        any::<i32>(),
        proptest::option::of(non_empty_text(40)),
        proptest::collection::vec(entry, 0..12),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 1..300)),
    )
        .prop_map(
            move |(code, language, version, opaque, flag, remark, entries, body)| RemotingCommand {
                code: small(code),
                language: LanguageCode::ALL[language],
                version: small(version),
                opaque,
                flag,
                remark,
                ext_fields: entries.into_iter().collect::<ExtFields>(),
                body: body.map(Bytes::from),
            },
        )
}

fn round_trip(command: &RemotingCommand, serialize_type: SerializeType) -> RemotingCommand {
    let mut out = Vec::new();
    let size = command.encode(serialize_type, &mut out).expect("encodes");
    assert_eq!(size, out.len());
    let frame = decode_frame(&Bytes::from(out), FRAME_SIZE_MAX)
        .expect("valid")
        .expect("complete");
    assert_eq!(frame.frame_size, size);
    assert_eq!(frame.serialize_type, serialize_type);
    RemotingCommand::from_frame(&frame).expect("decodes")
}

proptest! {
    #[test]
    fn json_commands_round_trip(command in command(SerializeType::Json)) {
        prop_assert_eq!(round_trip(&command, SerializeType::Json), command);
    }

    #[test]
    fn binary_commands_round_trip(command in command(SerializeType::RocketMq)) {
        prop_assert_eq!(round_trip(&command, SerializeType::RocketMq), command);
    }

    #[test]
    fn arbitrary_bytes_consume_one_whole_frame_or_nothing(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let src = Bytes::from(data.clone());
        if let Ok(Some(frame)) = decode_frame(&src, FRAME_SIZE_MAX) {
            let declared = u32::from_be_bytes([data[0], data[1], data[2], data[3]]) as usize;
            prop_assert_eq!(frame.frame_size, 4 + declared);
            prop_assert!(frame.frame_size <= data.len());
            prop_assert_eq!(8 + frame.header.len() + frame.body.len(), frame.frame_size);
        }
        let mut buffer = BytesMut::from(&data[..]);
        match decode_frame_mut(&mut buffer, FRAME_SIZE_MAX) {
            Ok(Some(frame)) => prop_assert_eq!(buffer.len() + frame.frame_size, data.len()),
            Ok(None) | Err(_) => prop_assert_eq!(buffer.len(), data.len()),
        }
        fuzz_frame(&data);
    }

    #[test]
    fn frame_shaped_bytes_never_panic(
        header_size in 0u32..40,
        type_byte in 0u8..3,
        rest in proptest::collection::vec(any::<u8>(), 0..60),
        extra in 0u32..8,
    ) {
        // Plausible prefixes reach the header decoders far more often than
        // uniformly random bytes do.
        let length = 4 + header_size + extra;
        let mut data = length.to_be_bytes().to_vec();
        data.extend_from_slice(&((u32::from(type_byte) << 24) | header_size).to_be_bytes());
        data.extend_from_slice(&rest);
        fuzz_frame(&data);
    }

    #[test]
    fn a_stream_read_in_pieces_yields_every_frame_in_order(
        commands in proptest::collection::vec(command(SerializeType::RocketMq), 1..6),
        cuts in proptest::collection::vec(1usize..64, 1..40),
    ) {
        let mut stream = Vec::new();
        for (index, command) in commands.iter().enumerate() {
            let serialize_type = if index % 2 == 0 { SerializeType::Json } else { SerializeType::RocketMq };
            command.encode(serialize_type, &mut stream).expect("encodes");
        }
        let mut buffer = BytesMut::new();
        let mut decoded = Vec::new();
        let mut offset = 0;
        let mut cut = cuts.iter().cycle();
        while offset < stream.len() {
            let end = (offset + cut.next().copied().unwrap_or(1)).min(stream.len());
            buffer.extend_from_slice(&stream[offset..end]);
            offset = end;
            while let Some(frame) = decode_frame_mut(&mut buffer, FRAME_SIZE_MAX).expect("valid stream") {
                decoded.push(RemotingCommand::from_frame(&frame).expect("decodes"));
            }
        }
        prop_assert!(buffer.is_empty());
        prop_assert_eq!(decoded, commands);
    }
}
