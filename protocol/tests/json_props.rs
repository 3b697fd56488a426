//! Property tests of the fastjson-dialect JSON layer, through the public API:
//! value write → parse identity in both key styles, compact and pretty;
//! typed bodies encode → decode identity; arbitrary bytes never panic.
//!
//! proptest prints the failing (shrunk) input and the seed it used; set
//! `PROPTEST_CASES` to run more cases.

use std::collections::BTreeMap;

use proptest::prelude::*;
use ringmq_protocol::json::{
    self, BrokerData, ConsumeFromWhere, ConsumeStats, ConsumeType, ConsumerData, DataVersion,
    HeartbeatData, JsonKey, JsonNumber, JsonObject, JsonStyle, JsonValue, JsonWriter, MessageModel,
    MessageQueue, OffsetWrapper, ProducerData, QueueData, SubscriptionData, TopicConfig,
    TopicConfigSerializeWrapper, TopicFilterType, TopicRouteData,
};

fn text() -> impl Strategy<Value = String> {
    // Mostly ASCII names, sometimes any Unicode (controls, quotes, emoji).
    prop_oneof![3 => "[a-zA-Z0-9_%@.:-]{0,12}", 1 => any::<String>()]
}

fn number() -> impl Strategy<Value = JsonNumber> {
    prop_oneof![
        any::<i64>().prop_map(JsonNumber::Int),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| JsonNumber::Text(format!("{f:?}"))),
        Just(JsonNumber::Text("9223372036854775808".to_owned())),
        Just(JsonNumber::Text("-1.5E-7".to_owned())),
    ]
}

fn leaf() -> impl Strategy<Value = JsonValue> {
    prop_oneof![
        Just(JsonValue::Null),
        any::<bool>().prop_map(JsonValue::Bool),
        number().prop_map(JsonValue::Number),
        text().prop_map(JsonValue::String),
    ]
}

fn value() -> impl Strategy<Value = JsonValue> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            text().prop_map(JsonKey::Str),
            any::<i64>().prop_map(JsonKey::Int),
            prop::collection::vec((text(), inner.clone()), 0..3).prop_map(|members| {
                let mut object = JsonObject::new();
                for (k, v) in members {
                    object.push(&k, v);
                }
                JsonKey::Object(Box::new(JsonValue::Object(object)))
            }),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(JsonValue::Array),
            prop::collection::vec((key, inner), 0..6)
                .prop_map(|members| JsonValue::Object(JsonObject { members })),
        ]
    })
}

fn standard_form(value: &JsonValue) -> JsonValue {
    match value {
        JsonValue::Array(items) => JsonValue::Array(items.iter().map(standard_form).collect()),
        JsonValue::Object(object) => JsonValue::Object(JsonObject {
            members: object
                .members
                .iter()
                .map(|(key, member)| {
                    let key = match key {
                        JsonKey::Int(v) => JsonKey::Str(v.to_string()),
                        JsonKey::Object(inner) => JsonKey::Object(Box::new(standard_form(inner))),
                        JsonKey::Str(s) => JsonKey::Str(s.clone()),
                    };
                    (key, standard_form(member))
                })
                .collect(),
        }),
        JsonValue::Number(JsonNumber::Int(v)) if v.unsigned_abs() > (1 << 53) - 1 => {
            JsonValue::String(v.to_string())
        }
        other => other.clone(),
    }
}

fn write(value: &JsonValue, style: JsonStyle, pretty: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = if pretty {
        JsonWriter::pretty(&mut out, style)
    } else {
        JsonWriter::new(&mut out, style)
    };
    json::write_value(&mut writer, value);
    writer.finish();
    out
}

fn queue_data() -> impl Strategy<Value = QueueData> {
    (text(), 0..64i32, 0..64i32, 0..8i32, 0..4i32).prop_map(|(broker_name, r, w, perm, flag)| {
        QueueData {
            broker_name,
            read_queue_nums: r,
            write_queue_nums: w,
            perm,
            topic_sys_flag: flag,
        }
    })
}

fn broker_data() -> impl Strategy<Value = BrokerData> {
    (
        text(),
        text(),
        prop::collection::btree_map(any::<i64>(), text(), 0..4),
        prop::option::of(text()),
        any::<bool>(),
    )
        .prop_map(
            |(cluster, broker_name, broker_addrs, zone_name, enable_acting_master)| BrokerData {
                cluster,
                broker_name,
                broker_addrs,
                zone_name,
                enable_acting_master,
            },
        )
}

fn route_data() -> impl Strategy<Value = TopicRouteData> {
    (
        prop::option::of(text()),
        prop::collection::vec(queue_data(), 0..4),
        prop::collection::vec(broker_data(), 0..4),
        prop::collection::btree_map(text(), prop::collection::vec(text(), 0..3), 0..3),
    )
        .prop_map(
            |(order_topic_conf, queue_datas, broker_datas, filter_server_table)| TopicRouteData {
                order_topic_conf,
                queue_datas,
                broker_datas,
                filter_server_table,
                topic_queue_mapping_by_broker: None,
            },
        )
}

fn enum_name<T>(known: Vec<T>, other: fn(String) -> T) -> impl Strategy<Value = T>
where
    T: Clone + std::fmt::Debug + 'static,
{
    prop_oneof![3 => prop::sample::select(known), 1 => "[A-Z_]{1,10}".prop_map(other)]
}

fn subscription() -> impl Strategy<Value = SubscriptionData> {
    (
        text(),
        text(),
        prop::collection::vec(text(), 0..3),
        prop::collection::vec(any::<i32>(), 0..3),
        any::<i64>(),
        prop::sample::select(vec!["TAG", "SQL92"]),
        any::<bool>(),
    )
        .prop_map(
            |(topic, sub_string, tags_set, code_set, sub_version, kind, class_filter_mode)| {
                SubscriptionData {
                    topic,
                    sub_string,
                    tags_set,
                    code_set,
                    sub_version,
                    expression_type: kind.to_owned(),
                    class_filter_mode,
                }
            },
        )
}

fn consumer_data() -> impl Strategy<Value = ConsumerData> {
    (
        text(),
        enum_name(
            vec![
                ConsumeType::ConsumeActively,
                ConsumeType::ConsumePassively,
                ConsumeType::ConsumePop,
            ],
            ConsumeType::Other,
        ),
        enum_name(
            vec![MessageModel::Clustering, MessageModel::Broadcasting],
            MessageModel::Other,
        ),
        enum_name(
            vec![
                ConsumeFromWhere::ConsumeFromFirstOffset,
                ConsumeFromWhere::ConsumeFromTimestamp,
            ],
            ConsumeFromWhere::Other,
        ),
        prop::collection::vec(subscription(), 0..3),
        any::<bool>(),
    )
        .prop_map(
            |(group_name, consume_type, message_model, consume_from_where, subs, unit_mode)| {
                ConsumerData {
                    group_name,
                    consume_type,
                    message_model,
                    consume_from_where,
                    subscription_data_set: subs,
                    unit_mode,
                }
            },
        )
}

fn heartbeat() -> impl Strategy<Value = HeartbeatData> {
    (
        text(),
        prop::collection::vec(
            text().prop_map(|group_name| ProducerData { group_name }),
            0..3,
        ),
        prop::collection::vec(consumer_data(), 0..3),
        any::<i32>(),
        any::<bool>(),
    )
        .prop_map(
            |(client_id, producers, consumers, heartbeat_fingerprint, without_sub)| HeartbeatData {
                client_id,
                producer_data_set: producers,
                consumer_data_set: consumers,
                heartbeat_fingerprint,
                without_sub,
            },
        )
}

fn consume_stats() -> impl Strategy<Value = ConsumeStats> {
    let queue = (text(), text(), any::<i32>()).prop_map(|(t, b, q)| MessageQueue::new(&t, &b, q));
    let offsets = any::<[i64; 4]>().prop_map(|[b, c, p, l]| OffsetWrapper {
        broker_offset: b,
        consumer_offset: c,
        pull_offset: p,
        last_timestamp: l,
    });
    (
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
        prop::collection::btree_map(queue, offsets, 0..4),
    )
        .prop_map(|(consume_tps, offset_table)| ConsumeStats {
            consume_tps,
            offset_table,
        })
}

fn topic_config_wrapper() -> impl Strategy<Value = TopicConfigSerializeWrapper> {
    let config = (
        text(),
        any::<[i32; 4]>(),
        enum_name(
            vec![TopicFilterType::SingleTag, TopicFilterType::MultiTag],
            TopicFilterType::Other,
        ),
        any::<bool>(),
        prop::collection::btree_map(text(), text(), 0..3),
    )
        .prop_map(
            |(topic_name, [r, w, perm, flag], topic_filter_type, order, attributes)| TopicConfig {
                topic_name,
                read_queue_nums: r,
                write_queue_nums: w,
                perm,
                topic_filter_type,
                topic_sys_flag: flag,
                order,
                attributes,
            },
        );
    let version = any::<[i64; 3]>().prop_map(|[timestamp, counter, state_version]| DataVersion {
        timestamp,
        counter,
        state_version,
    });
    (
        version.clone(),
        prop::collection::btree_map(text(), config, 0..4),
        any::<bool>(),
    )
        .prop_map(|(data_version, table, mappings)| {
            if mappings {
                TopicConfigSerializeWrapper::with_empty_mappings(data_version, table)
            } else {
                TopicConfigSerializeWrapper {
                    data_version,
                    topic_config_table: table,
                    ..Default::default()
                }
            }
        })
}

/// Encodes `body` in both styles and pretty, decoding each back.
fn check_round_trip<T>(body: &T) -> Result<(), TestCaseError>
where
    T: json::JsonBean + PartialEq + std::fmt::Debug,
{
    for style in [JsonStyle::Java, JsonStyle::Standard] {
        let mut out = Vec::new();
        json::encode(body, &mut out, style);
        let decoded = json::decode::<T>(&out);
        prop_assert_eq!(decoded.as_ref(), Ok(body), "style {:?}", style);
    }
    let mut out = Vec::new();
    json::encode_pretty(body, &mut out);
    let decoded = json::decode::<T>(&out);
    prop_assert_eq!(decoded.as_ref(), Ok(body), "pretty");
    Ok(())
}

proptest! {
    #[test]
    fn value_write_then_parse_is_identity(value in value()) {
        for pretty in [false, true] {
            let java = write(&value, JsonStyle::Java, pretty);
            prop_assert_eq!(json::parse(&java).unwrap(), value.clone(), "Java, pretty={}", pretty);
            let standard = write(&value, JsonStyle::Standard, pretty);
            prop_assert!(standard.is_ascii(), "standard style output is ASCII");
            prop_assert_eq!(json::parse(&standard).unwrap(), standard_form(&value), "standard, pretty={}", pretty);
        }
    }

    #[test]
    fn route_data_encode_then_decode_is_identity(route in route_data()) {
        check_round_trip(&route)?;
        let mut out = Vec::new();
        route.to_json(&mut out, JsonStyle::Java);
        prop_assert_eq!(TopicRouteData::from_json(&out).unwrap(), route);
    }

    #[test]
    fn heartbeat_encode_then_decode_is_identity(heartbeat in heartbeat()) {
        check_round_trip(&heartbeat)?;
    }

    #[test]
    fn consume_stats_encode_then_decode_is_identity(stats in consume_stats()) {
        check_round_trip(&stats)?;
    }

    #[test]
    fn topic_config_wrapper_encode_then_decode_is_identity(wrapper in topic_config_wrapper()) {
        check_round_trip(&wrapper)?;
        let mut out = Vec::new();
        wrapper.write_pretty(&mut out);
        prop_assert_eq!(TopicConfigSerializeWrapper::from_json(&out).unwrap(), wrapper);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..256)) {
        json::fuzz_json(&data);
    }

    #[test]
    fn json_like_text_never_panics(data in "[\\[\\]{}:,\"'0-9a-z\\\\ .eE+-]{0,96}") {
        json::fuzz_json(data.as_bytes());
    }

    #[test]
    fn mutated_bodies_never_panic(
        heartbeat in heartbeat(),
        route in route_data(),
        stats in consume_stats(),
        position in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut bodies = [Vec::new(), Vec::new(), Vec::new()];
        heartbeat.to_json(&mut bodies[0], JsonStyle::Java);
        route.to_json(&mut bodies[1], JsonStyle::Java);
        stats.to_json(&mut bodies[2], JsonStyle::Java);
        for mut body in bodies {
            json::fuzz_json(&body);
            let index = position.index(body.len());
            body[index] = byte;
            json::fuzz_json(&body);
            body.truncate(index);
            json::fuzz_json(&body);
        }
    }

    #[test]
    fn written_values_pass_the_fuzz_checks(value in value()) {
        json::fuzz_json(&write(&value, JsonStyle::Java, false));
    }
}

#[test]
fn typed_route_decoder_accepts_written_legacy_keys() {
    let route = TopicRouteData {
        broker_datas: vec![BrokerData {
            broker_addrs: BTreeMap::from([(0, "a:1".to_owned()), (-1, "b:2".to_owned())]),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut out = Vec::new();
    route.to_json(&mut out, JsonStyle::Java);
    let text = String::from_utf8(out.clone()).unwrap();
    assert!(text.contains(r#"{-1:"b:2",0:"a:1"}"#), "{text}");
    assert_eq!(TopicRouteData::from_json(&out).unwrap(), route);
}
