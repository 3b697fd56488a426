//! Heartbeat bodies (HEART_BEAT) and GET_CONSUMER_LIST_BY_GROUP's response.
//!
//! ```text
//! HeartbeatData    {"clientID":..,"consumerDataSet":[ConsumerData..],"heartbeatFingerprint":0,
//!                   "producerDataSet":[{"groupName":..}..],"withoutSub":false}
//! ConsumerData     {"consumeFromWhere":..,"consumeType":..,"groupName":..,"messageModel":..,
//!                   "subscriptionDataSet":[SubscriptionData..],"unitMode":false}
//! SubscriptionData {"classFilterMode":false,"codeSet":[..],"expressionType":"TAG",
//!                   "subString":"TagA || TagB","subVersion":1700000000000,"tagsSet":[..],"topic":..}
//! ```
//!
//! Enum members are written by name; names this crate does not know are kept
//! (`Other`) rather than refused, and absent enums read as the Java client's
//! defaults (`CONSUME_PASSIVELY`, `CLUSTERING`, `CONSUME_FROM_LAST_OFFSET`).
//!
//! # Invariants
//!
//! - Members are written in alphabetical order; sets are written inline.

use super::bean::{
    JsonBean, field_list, field_strings, java_enum, json_body, read_list, value_i64,
};
use super::error::JsonError;
use super::value::{JsonValue, Members};
use super::write::{ArrayKind, JsonWriter};

java_enum! {
    /// `ConsumeType`.
    pub enum ConsumeType default ConsumePassively {
        /// `CONSUME_ACTIVELY`: pull and lite-pull consumers.
        ConsumeActively = "CONSUME_ACTIVELY",
        /// `CONSUME_PASSIVELY`: push consumers.
        ConsumePassively = "CONSUME_PASSIVELY",
        /// `CONSUME_POP` (5.x).
        ConsumePop = "CONSUME_POP",
    }
}

java_enum! {
    /// `MessageModel`.
    pub enum MessageModel default Clustering {
        /// `BROADCASTING`.
        Broadcasting = "BROADCASTING",
        /// `CLUSTERING`.
        Clustering = "CLUSTERING",
    }
}

java_enum! {
    /// `ConsumeFromWhere`.
    pub enum ConsumeFromWhere default ConsumeFromLastOffset {
        /// `CONSUME_FROM_LAST_OFFSET`.
        ConsumeFromLastOffset = "CONSUME_FROM_LAST_OFFSET",
        /// `CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST` (deprecated).
        ConsumeFromLastOffsetAndFromMinWhenBootFirst =
            "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        /// `CONSUME_FROM_MIN_OFFSET` (deprecated).
        ConsumeFromMinOffset = "CONSUME_FROM_MIN_OFFSET",
        /// `CONSUME_FROM_MAX_OFFSET` (deprecated).
        ConsumeFromMaxOffset = "CONSUME_FROM_MAX_OFFSET",
        /// `CONSUME_FROM_FIRST_OFFSET`.
        ConsumeFromFirstOffset = "CONSUME_FROM_FIRST_OFFSET",
        /// `CONSUME_FROM_TIMESTAMP`.
        ConsumeFromTimestamp = "CONSUME_FROM_TIMESTAMP",
    }
}

/// One subscription of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionData {
    /// `topic`.
    pub topic: String,
    /// `subString`: the expression, `*` for everything.
    pub sub_string: String,
    /// `tagsSet`: the parsed tags (empty for `*`).
    pub tags_set: Vec<String>,
    /// `codeSet`: Java `String.hashCode()` of each tag.
    pub code_set: Vec<i32>,
    /// `subVersion`: creation time in ms; a higher one replaces the stored one.
    pub sub_version: i64,
    /// `expressionType`: `TAG` or `SQL92`.
    pub expression_type: String,
    /// `classFilterMode` (legacy).
    pub class_filter_mode: bool,
}

/// `ExpressionType.TAG`, the default expression type.
pub const EXPRESSION_TYPE_TAG: &str = "TAG";

impl Default for SubscriptionData {
    fn default() -> Self {
        Self {
            topic: String::new(),
            sub_string: String::new(),
            tags_set: Vec::new(),
            code_set: Vec::new(),
            sub_version: 0,
            expression_type: EXPRESSION_TYPE_TAG.to_owned(),
            class_filter_mode: false,
        }
    }
}

impl JsonBean for SubscriptionData {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_bool("classFilterMode", self.class_filter_mode);
        w.member("codeSet");
        w.begin_array(ArrayKind::Set, self.code_set.len());
        for code in &self.code_set {
            w.i64(i64::from(*code));
        }
        w.end_array();
        w.field_str("expressionType", &self.expression_type);
        w.field_str("subString", &self.sub_string);
        w.field_i64("subVersion", self.sub_version);
        field_strings(w, "tagsSet", ArrayKind::Set, &self.tags_set);
        w.field_str("topic", &self.topic);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        let code_path = m.path_of("codeSet");
        let code_set = m
            .array("codeSet")?
            .iter()
            .filter(|v| !matches!(v, JsonValue::Null))
            .map(|v| {
                let code = value_i64(v, &code_path)?;
                i32::try_from(code).map_err(|_| JsonError::WrongType {
                    member: code_path.clone(),
                    expected: "an array of 32-bit integers",
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            topic: m.string_or_empty("topic")?,
            sub_string: m.string_or_empty("subString")?,
            tags_set: m.strings("tagsSet")?,
            code_set,
            sub_version: m.i64("subVersion")?.unwrap_or(0),
            expression_type: m
                .string("expressionType")?
                .unwrap_or_else(|| EXPRESSION_TYPE_TAG.to_owned()),
            class_filter_mode: m.bool("classFilterMode")?.unwrap_or(false),
        })
    }
}
json_body!(SubscriptionData);

/// A consumer group's part of a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerData {
    /// `groupName`.
    pub group_name: String,
    /// `consumeType`.
    pub consume_type: ConsumeType,
    /// `messageModel`.
    pub message_model: MessageModel,
    /// `consumeFromWhere`.
    pub consume_from_where: ConsumeFromWhere,
    /// `subscriptionDataSet` (a Java `HashSet`).
    pub subscription_data_set: Vec<SubscriptionData>,
    /// `unitMode`.
    pub unit_mode: bool,
}

impl JsonBean for ConsumerData {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_str("consumeFromWhere", self.consume_from_where.name());
        w.field_str("consumeType", self.consume_type.name());
        w.field_str("groupName", &self.group_name);
        w.field_str("messageModel", self.message_model.name());
        field_list(
            w,
            "subscriptionDataSet",
            ArrayKind::Set,
            &self.subscription_data_set,
        );
        w.field_bool("unitMode", self.unit_mode);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            group_name: m.string_or_empty("groupName")?,
            consume_type: m
                .string("consumeType")?
                .map(|s| ConsumeType::from_name(&s))
                .unwrap_or_default(),
            message_model: m
                .string("messageModel")?
                .map(|s| MessageModel::from_name(&s))
                .unwrap_or_default(),
            consume_from_where: m
                .string("consumeFromWhere")?
                .map(|s| ConsumeFromWhere::from_name(&s))
                .unwrap_or_default(),
            subscription_data_set: read_list(&m, "subscriptionDataSet")?,
            unit_mode: m.bool("unitMode")?.unwrap_or(false),
        })
    }
}
json_body!(ConsumerData);

/// A producer group's part of a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerData {
    /// `groupName`.
    pub group_name: String,
}

impl JsonBean for ProducerData {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_str("groupName", &self.group_name);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            group_name: m.string_or_empty("groupName")?,
        })
    }
}
json_body!(ProducerData);

/// HEART_BEAT request body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeartbeatData {
    /// `clientID`, e.g. `192.168.0.5@12345#9876543210`.
    pub client_id: String,
    /// `producerDataSet`.
    pub producer_data_set: Vec<ProducerData>,
    /// `consumerDataSet`.
    pub consumer_data_set: Vec<ConsumerData>,
    /// `heartbeatFingerprint` (5.x heartbeat v2; 0 for v1).
    pub heartbeat_fingerprint: i32,
    /// `withoutSub` (5.x heartbeat v2): subscriptions omitted, keep the old ones.
    pub without_sub: bool,
}

impl JsonBean for HeartbeatData {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_str("clientID", &self.client_id);
        field_list(
            w,
            "consumerDataSet",
            ArrayKind::Set,
            &self.consumer_data_set,
        );
        w.field_i64(
            "heartbeatFingerprint",
            i64::from(self.heartbeat_fingerprint),
        );
        field_list(
            w,
            "producerDataSet",
            ArrayKind::Set,
            &self.producer_data_set,
        );
        w.field_bool("withoutSub", self.without_sub);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            client_id: m.string_or_empty("clientID")?,
            producer_data_set: read_list(&m, "producerDataSet")?,
            consumer_data_set: read_list(&m, "consumerDataSet")?,
            heartbeat_fingerprint: m.i32("heartbeatFingerprint")?.unwrap_or(0),
            without_sub: m.bool("withoutSub")?.unwrap_or(false),
        })
    }
}
json_body!(HeartbeatData);

/// GET_CONSUMER_LIST_BY_GROUP response body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetConsumerListByGroupResponseBody {
    /// `consumerIdList`: the `clientID`s of the group's live consumers.
    pub consumer_id_list: Vec<String>,
}

impl JsonBean for GetConsumerListByGroupResponseBody {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_strings(w, "consumerIdList", ArrayKind::List, &self.consumer_id_list);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            consumer_id_list: m.strings("consumerIdList")?,
        })
    }
}
json_body!(GetConsumerListByGroupResponseBody);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonStyle;

    const EXAMPLE: &str = concat!(
        r#"{"clientID":"192.168.0.5@12345#1","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","#,
        r#""consumeType":"CONSUME_PASSIVELY","groupName":"g1","messageModel":"CLUSTERING","subscriptionDataSet":["#,
        r#"{"classFilterMode":false,"codeSet":[2598919,2598920],"expressionType":"TAG","subString":"TagA || TagB","#,
        r#""subVersion":1700000000000,"tagsSet":["TagA","TagB"],"topic":"TopicTest"},"#,
        r#"{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1700000000001,"#,
        r#""tagsSet":[],"topic":"%RETRY%g1"}],"unitMode":false}],"heartbeatFingerprint":0,"#,
        r#""producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}],"withoutSub":false}"#
    );

    #[test]
    fn heartbeat_example_parses_and_reencodes_byte_for_byte() {
        let heartbeat = HeartbeatData::from_json(EXAMPLE.as_bytes()).unwrap();
        assert_eq!(heartbeat.client_id, "192.168.0.5@12345#1");
        let consumer = &heartbeat.consumer_data_set[0];
        assert_eq!(consumer.consume_type, ConsumeType::ConsumePassively);
        assert_eq!(consumer.message_model, MessageModel::Clustering);
        assert_eq!(
            consumer.consume_from_where,
            ConsumeFromWhere::ConsumeFromLastOffset
        );
        assert_eq!(
            consumer.subscription_data_set[0].code_set,
            vec![2598919, 2598920]
        );
        assert_eq!(consumer.subscription_data_set[1].topic, "%RETRY%g1");
        assert_eq!(
            heartbeat.producer_data_set[0].group_name,
            "CLIENT_INNER_PRODUCER"
        );
        let mut out = Vec::new();
        heartbeat.to_json(&mut out, JsonStyle::Java);
        assert_eq!(String::from_utf8(out).unwrap(), EXAMPLE);
    }

    #[test]
    fn heartbeat_reads_rust_client_shape_with_nulls_and_declaration_order() {
        let text = br#"{"clientID":"c","producerDataSet":[],"consumerDataSet":[{"groupName":"g",
            "consumeType":"CONSUME_ACTIVELY","messageModel":"BROADCASTING",
            "consumeFromWhere":"CONSUME_FROM_TIMESTAMP","subscriptionDataSet":[{"classFilterMode":false,
            "topic":"T","subString":"*","tagsSet":[],"codeSet":[],"subVersion":"17","expressionType":null}],
            "unitMode":false}],"remark":null}"#;
        let heartbeat = HeartbeatData::from_json(text).unwrap();
        let consumer = &heartbeat.consumer_data_set[0];
        assert_eq!(consumer.consume_type, ConsumeType::ConsumeActively);
        assert_eq!(consumer.message_model, MessageModel::Broadcasting);
        assert_eq!(
            consumer.consume_from_where,
            ConsumeFromWhere::ConsumeFromTimestamp
        );
        assert_eq!(consumer.subscription_data_set[0].sub_version, 17);
        assert_eq!(consumer.subscription_data_set[0].expression_type, "TAG");
        assert_eq!(heartbeat.heartbeat_fingerprint, 0);
    }

    #[test]
    fn heartbeat_reads_go_client_shape_with_string_code_set() {
        // rocketmq-client-go writes its sets as arrays of strings and its
        // members in struct declaration order.
        let text = br#"{"clientID":"10.0.0.1@1","producerDataSet":[],"consumerDataSet":[{"groupName":"g",
            "consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"TagA","tagsSet":["TagA"],
            "codeSet":["2598919"],"subVersion":1,"expressionType":"TAG"}],"unitMode":false}]}"#;
        let heartbeat = HeartbeatData::from_json(text).unwrap();
        let subscription = &heartbeat.consumer_data_set[0].subscription_data_set[0];
        assert_eq!(subscription.code_set, vec![2598919]);
        assert_eq!(subscription.tags_set, vec!["TagA"]);
        assert_eq!(
            heartbeat.consumer_data_set[0].consume_from_where,
            ConsumeFromWhere::ConsumeFromFirstOffset
        );
    }

    #[test]
    fn unknown_enum_names_are_kept_as_text() {
        let text = br#"{"consumerDataSet":[{"consumeType":"CONSUME_LATER","messageModel":"X"}]}"#;
        let heartbeat = HeartbeatData::from_json(text).unwrap();
        let consumer = &heartbeat.consumer_data_set[0];
        assert_eq!(
            consumer.consume_type,
            ConsumeType::Other("CONSUME_LATER".into())
        );
        assert_eq!(consumer.message_model.name(), "X");
        assert_eq!(
            consumer.consume_from_where,
            ConsumeFromWhere::ConsumeFromLastOffset
        );
    }

    #[test]
    fn every_consume_from_where_name_maps_back_to_itself() {
        for name in [
            "CONSUME_FROM_LAST_OFFSET",
            "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
            "CONSUME_FROM_MIN_OFFSET",
            "CONSUME_FROM_MAX_OFFSET",
            "CONSUME_FROM_FIRST_OFFSET",
            "CONSUME_FROM_TIMESTAMP",
        ] {
            let value = ConsumeFromWhere::from_name(name);
            assert!(!matches!(value, ConsumeFromWhere::Other(_)), "{name}");
            assert_eq!(value.name(), name);
        }
        assert_eq!(
            ConsumeType::from_name("CONSUME_POP"),
            ConsumeType::ConsumePop
        );
    }

    #[test]
    fn heartbeat_coerces_numbers_and_booleans_given_as_strings() {
        let text = br#"{"clientID":12,"heartbeatFingerprint":"5","withoutSub":"true","consumerDataSet":[
            {"groupName":"g","unitMode":1,"subscriptionDataSet":[{"codeSet":["7"],"tagsSet":[1]}]}]}"#;
        let heartbeat = HeartbeatData::from_json(text).unwrap();
        assert_eq!(heartbeat.client_id, "12");
        assert_eq!(heartbeat.heartbeat_fingerprint, 5);
        assert!(heartbeat.without_sub);
        assert!(heartbeat.consumer_data_set[0].unit_mode);
        assert_eq!(
            heartbeat.consumer_data_set[0].subscription_data_set[0].code_set,
            vec![7]
        );
        assert_eq!(
            heartbeat.consumer_data_set[0].subscription_data_set[0].tags_set,
            vec!["1"]
        );
    }

    #[test]
    fn consumer_list_body_round_trips() {
        let body = GetConsumerListByGroupResponseBody {
            consumer_id_list: vec!["a".into(), "b".into()],
        };
        let mut out = Vec::new();
        body.to_json(&mut out, JsonStyle::Java);
        assert_eq!(out, br#"{"consumerIdList":["a","b"]}"#);
        assert_eq!(
            GetConsumerListByGroupResponseBody::from_json(&out).unwrap(),
            body
        );
    }
}
