//! Property tests of the header decoders and typed custom headers, public
//! API only.
//!
//! proptest prints the failing input and persists its seed under
//! `proptest-regressions/`; set `PROPTEST_CASES` for longer runs.

use bytes::Bytes;
use proptest::prelude::*;
use ringmq_protocol::code::SerializeType;
use ringmq_protocol::command::{RemotingCommand, fuzz_header};
use ringmq_protocol::header::{
    BoundaryType, ConsumerSendMsgBackRequestHeader, CustomHeader, EndTransactionRequestHeader,
    GetMaxOffsetRequestHeader, PullMessageRequestHeader, PullMessageResponseHeader,
    RegisterBrokerRequestHeader, SearchOffsetRequestHeader, SendMessageRequestHeader,
    SendMessageRequestHeaderV2, SendMessageResponseHeader,
};

fn text() -> impl Strategy<Value = String> {
    let ch = prop_oneof![4 => proptest::char::range('a', 'z'), 1 => any::<char>()];
    proptest::collection::vec(ch, 1..20).prop_map(String::from_iter)
}

fn send_v2() -> impl Strategy<Value = SendMessageRequestHeaderV2> {
    (
        (
            text(),
            text(),
            text(),
            any::<i32>(),
            any::<i32>(),
            any::<i32>(),
            any::<i64>(),
        ),
        (
            any::<i32>(),
            proptest::option::of(text()),
            proptest::option::of(any::<i32>()),
            proptest::option::of(any::<bool>()),
            proptest::option::of(any::<i32>()),
            proptest::option::of(any::<bool>()),
            proptest::option::of(text()),
        ),
    )
        .prop_map(|((a, b, c, d, e, f, g), (h, i, j, k, l, m, n))| {
            SendMessageRequestHeaderV2 {
                producer_group: a,
                topic: b,
                default_topic: c,
                default_topic_queue_nums: d,
                queue_id: e,
                sys_flag: f,
                born_timestamp: g,
                flag: h,
                properties: i,
                reconsume_times: j,
                unit_mode: k,
                max_reconsume_times: l,
                batch: m,
                broker_name: n,
            }
        })
}

fn pull() -> impl Strategy<Value = PullMessageRequestHeader> {
    (
        (
            text(),
            text(),
            any::<i32>(),
            any::<i64>(),
            any::<i32>(),
            any::<i32>(),
            any::<i64>(),
        ),
        (
            any::<i64>(),
            proptest::option::of(text()),
            any::<i64>(),
            proptest::option::of(text()),
            proptest::option::of(any::<i32>()),
            proptest::option::of(any::<i32>()),
            proptest::option::of(text()),
            proptest::option::of(text()),
        ),
    )
        .prop_map(
            |((group, topic, queue_id, queue_offset, max, sys, commit), rest)| {
                PullMessageRequestHeader {
                    consumer_group: group,
                    topic,
                    queue_id,
                    queue_offset,
                    max_msg_nums: max,
                    sys_flag: sys,
                    commit_offset: commit,
                    suspend_timeout_millis: rest.0,
                    subscription: rest.1,
                    sub_version: rest.2,
                    expression_type: rest.3,
                    max_msg_bytes: rest.4,
                    request_source: rest.5,
                    proxy_forward_client_id: rest.6,
                    broker_name: rest.7,
                }
            },
        )
}

/// Header → ext → command → frame header bytes → command → header.
fn through_the_wire<H: CustomHeader>(header: &H, serialize_type: SerializeType) -> H {
    let command = RemotingCommand::new_request(10, header.to_ext_fields());
    let mut bytes = Vec::new();
    command
        .encode_header(serialize_type, &mut bytes)
        .expect("encodes");
    let decoded =
        RemotingCommand::decode_header(serialize_type, &Bytes::from(bytes)).expect("decodes");
    H::from_ext(&decoded.ext_fields).expect("typed header decodes")
}

proptest! {
    #[test]
    fn send_v2_round_trips_through_ext_and_both_wire_forms(header in send_v2()) {
        prop_assert_eq!(&SendMessageRequestHeaderV2::from_ext(&header.to_ext_fields()).unwrap(), &header);
        prop_assert_eq!(&through_the_wire(&header, SerializeType::Json), &header);
        prop_assert_eq!(&through_the_wire(&header, SerializeType::RocketMq), &header);
        let v1 = SendMessageRequestHeader::from(header.clone());
        prop_assert_eq!(&SendMessageRequestHeader::from_ext(&v1.to_ext_fields()).unwrap(), &v1);
        prop_assert_eq!(SendMessageRequestHeaderV2::from(v1), header);
    }

    #[test]
    fn pull_request_round_trips(header in pull()) {
        prop_assert_eq!(&PullMessageRequestHeader::from_ext(&header.to_ext_fields()).unwrap(), &header);
        prop_assert_eq!(&through_the_wire(&header, SerializeType::Json), &header);
    }

    #[test]
    fn response_headers_round_trip(
        offsets in any::<(i64, i64, i64, i64)>(),
        optionals in any::<(Option<i64>, Option<i32>, Option<i32>, Option<i32>)>(),
        msg_id in text(),
        queue_id in any::<i32>(),
        region in proptest::option::of(text()),
        trace_on in proptest::option::of(any::<bool>()),
    ) {
        let pull = PullMessageResponseHeader {
            suggest_which_broker_id: offsets.0,
            next_begin_offset: offsets.1,
            min_offset: offsets.2,
            max_offset: offsets.3,
            offset_delta: optionals.0,
            topic_sys_flag: optionals.1,
            group_sys_flag: optionals.2,
            forbidden_type: optionals.3,
        };
        prop_assert_eq!(&PullMessageResponseHeader::from_ext(&pull.to_ext_fields()).unwrap(), &pull);
        let send = SendMessageResponseHeader {
            msg_id,
            queue_id,
            queue_offset: offsets.0,
            transaction_id: region.clone(),
            msg_region: region,
            trace_on: trace_on.map(|on| on.to_string()),
            ..SendMessageResponseHeader::default()
        };
        prop_assert_eq!(&through_the_wire(&send, SerializeType::Json), &send);
    }

    #[test]
    fn other_request_headers_round_trip(
        topic in text(),
        numbers in any::<(i32, i64, i64, i32)>(),
        flags in any::<(bool, bool, Option<bool>)>(),
        name in proptest::option::of(text()),
    ) {
        let send_back = ConsumerSendMsgBackRequestHeader {
            offset: numbers.1,
            group: topic.clone(),
            delay_level: numbers.0,
            origin_msg_id: name.clone(),
            origin_topic: None,
            unit_mode: flags.0,
            max_reconsume_times: Some(numbers.3),
            broker_name: name.clone(),
        };
        prop_assert_eq!(&ConsumerSendMsgBackRequestHeader::from_ext(&send_back.to_ext_fields()).unwrap(), &send_back);
        let end = EndTransactionRequestHeader {
            topic: name.clone(),
            producer_group: topic.clone(),
            tran_state_table_offset: numbers.1,
            commit_log_offset: numbers.2,
            commit_or_rollback: numbers.0,
            from_transaction_check: flags.2,
            msg_id: topic.clone(),
            transaction_id: name.clone(),
            broker_name: None,
        };
        prop_assert_eq!(&EndTransactionRequestHeader::from_ext(&end.to_ext_fields()).unwrap(), &end);
        let max = GetMaxOffsetRequestHeader {
            topic: topic.clone(),
            queue_id: numbers.0,
            committed: flags.1,
            broker_name: name.clone(),
        };
        prop_assert_eq!(&GetMaxOffsetRequestHeader::from_ext(&max.to_ext_fields()).unwrap(), &max);
        let search = SearchOffsetRequestHeader {
            topic: topic.clone(),
            queue_id: numbers.0,
            timestamp: numbers.1,
            boundary_type: flags.2.map(|upper| if upper { BoundaryType::Upper } else { BoundaryType::Lower }),
            broker_name: None,
        };
        prop_assert_eq!(&through_the_wire(&search, SerializeType::RocketMq), &search);
        let register = RegisterBrokerRequestHeader {
            broker_name: topic.clone(),
            broker_addr: topic.clone(),
            cluster_name: topic.clone(),
            ha_server_addr: topic,
            broker_id: numbers.2,
            heartbeat_timeout_millis: Some(numbers.1),
            enable_acting_master: flags.2,
            compressed: flags.0,
            body_crc32: numbers.3,
            zone_name: name,
        };
        prop_assert_eq!(&RegisterBrokerRequestHeader::from_ext(&register.to_ext_fields()).unwrap(), &register);
    }

    #[test]
    fn arbitrary_headers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        fuzz_header(&data);
    }

    #[test]
    fn json_shaped_headers_never_panic(
        pieces in proptest::collection::vec(
            prop_oneof![
                Just("{"), Just("}"), Just("["), Just("]"), Just(","), Just(":"), Just("\""),
                Just("\\"), Just("\\u00"), Just("null"), Just("true"), Just("-1"), Just("1e9"),
                Just("\"code\""), Just("\"extFields\""), Just("\"remark\""), Just("\"language\""),
                Just("\"a\""), Just(" "), Just("\u{1}"), Just("é"),
            ],
            0..40,
        ),
    ) {
        let mut data = vec![0u8];
        data.extend(pieces.concat().into_bytes());
        fuzz_header(&data);
    }
}
