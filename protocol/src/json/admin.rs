//! Admin and statistics bodies used by `mqadmin` and clients.
//!
//! ```text
//! Connection          {"clientAddr":"ip:port","clientId":..,"language":"JAVA","version":479}
//! ConsumerConnection  {"connectionSet":[..],"consumeFromWhere":..,"consumeType":..,"messageModel":..,
//!                      "subscriptionTable":{topic:SubscriptionData}}
//! ProducerConnection  {"connectionSet":[..]}
//! ConsumeStats        {"consumeTps":0.0,"offsetTable":{{MessageQueue}:{"brokerOffset":..,
//!                      "consumerOffset":..,"lastTimestamp":..,"pullOffset":..}}}
//! TopicStatsTable     {"offsetTable":{{MessageQueue}:{"lastUpdateTimestamp":..,"maxOffset":..,
//!                      "minOffset":..}},"topicPutTps":0.0}
//! TopicList           {"brokerAddr":..?,"topicList":[..]}     GroupList {"groupList":[..]}
//! KVTable             {"table":{k:v}}                          ResetOffsetBody {"offsetTable":{{MessageQueue}:5}}
//! QuerySubscriptionResponseBody {"group":..,"subscriptionData":SubscriptionData?,"topic":..}
//! ProducerTableInfo   {"data":{group:[{"clientId":..,"language":"JAVA","lastUpdateTimestamp":..,
//!                      "remoteIP":"ip:port","version":..}]}}
//! QueryConsumeTimeSpanBody {"consumeTimeSpanSet":[{"consumeTimeStamp":..,"delayTime":..,
//!                      "maxTimeStamp":..,"messageQueue":{MessageQueue},"minTimeStamp":..}]}
//! ```
//!
//! `MessageQueue`-keyed maps are written in fastjson's native object-key
//! form and read from it or from stringified-JSON keys.
//!
//! # Invariants
//!
//! - Members are written in alphabetical order; maps in key order.

use std::collections::BTreeMap;

use super::bean::{
    JsonBean, field_list, field_opt_bean, field_str_map, field_strings, json_body, read_list,
    read_map, read_opt, value_i64, value_list,
};
use super::error::JsonError;
use super::heartbeat::{ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData};
use super::queue::MessageQueue;
use super::value::{JsonValue, Members, key_text};
use super::write::{ArrayKind, JsonWriter};

/// One client connection as the broker saw it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Connection {
    /// `clientId`.
    pub client_id: String,
    /// `clientAddr`: `ip:port` of the client socket.
    pub client_addr: String,
    /// `language`: `LanguageCode` name, e.g. `JAVA`.
    pub language: String,
    /// `version`: the client's version ordinal.
    pub version: i32,
}

impl JsonBean for Connection {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_str("clientAddr", &self.client_addr);
        w.field_str("clientId", &self.client_id);
        w.field_str("language", &self.language);
        w.field_i64("version", i64::from(self.version));
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            client_id: m.string_or_empty("clientId")?,
            client_addr: m.string_or_empty("clientAddr")?,
            language: m.string_or_empty("language")?,
            version: m.i32("version")?.unwrap_or(0),
        })
    }
}
json_body!(Connection);

/// GET_CONSUMER_CONNECTION_LIST response body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerConnection {
    /// `connectionSet`.
    pub connection_set: Vec<Connection>,
    /// `subscriptionTable`: topic → subscription.
    pub subscription_table: BTreeMap<String, SubscriptionData>,
    /// `consumeType`.
    pub consume_type: ConsumeType,
    /// `messageModel`.
    pub message_model: MessageModel,
    /// `consumeFromWhere`.
    pub consume_from_where: ConsumeFromWhere,
}

impl JsonBean for ConsumerConnection {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_list(w, "connectionSet", ArrayKind::Set, &self.connection_set);
        w.field_str("consumeFromWhere", self.consume_from_where.name());
        w.field_str("consumeType", self.consume_type.name());
        w.field_str("messageModel", self.message_model.name());
        field_str_map(w, "subscriptionTable", &self.subscription_table, |w, s| {
            s.write_json(w)
        });
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            connection_set: read_list(&m, "connectionSet")?,
            subscription_table: read_map(
                &m,
                "subscriptionTable",
                key_text,
                SubscriptionData::read_json,
            )?,
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
        })
    }
}
json_body!(ConsumerConnection);

/// GET_PRODUCER_CONNECTION_LIST response body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerConnection {
    /// `connectionSet`.
    pub connection_set: Vec<Connection>,
}

impl JsonBean for ProducerConnection {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_list(w, "connectionSet", ArrayKind::Set, &self.connection_set);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            connection_set: read_list(&m, "connectionSet")?,
        })
    }
}
json_body!(ProducerConnection);

/// Writes a `Map<MessageQueue,V>` member in fastjson's object-key form.
fn field_queue_map<V>(
    w: &mut JsonWriter<'_>,
    name: &'static str,
    map: &BTreeMap<MessageQueue, V>,
    mut write: impl FnMut(&mut JsonWriter<'_>, &V),
) {
    w.member(name);
    w.begin_map();
    for (queue, value) in map {
        w.map_key_with(|w| queue.write_json(w));
        write(w, value);
    }
    w.end_map();
}

/// One queue's offsets for one consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffsetWrapper {
    /// `brokerOffset`: the queue's max offset.
    pub broker_offset: i64,
    /// `consumerOffset`: the committed offset.
    pub consumer_offset: i64,
    /// `pullOffset`: max(committed, last pulled).
    pub pull_offset: i64,
    /// `lastTimestamp`: store time of message `consumerOffset - 1`, 0 if none.
    pub last_timestamp: i64,
}

impl JsonBean for OffsetWrapper {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_i64("brokerOffset", self.broker_offset);
        w.field_i64("consumerOffset", self.consumer_offset);
        w.field_i64("lastTimestamp", self.last_timestamp);
        w.field_i64("pullOffset", self.pull_offset);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            broker_offset: m.i64("brokerOffset")?.unwrap_or(0),
            consumer_offset: m.i64("consumerOffset")?.unwrap_or(0),
            pull_offset: m.i64("pullOffset")?.unwrap_or(0),
            last_timestamp: m.i64("lastTimestamp")?.unwrap_or(0),
        })
    }
}
json_body!(OffsetWrapper);

/// GET_CONSUME_STATS response body.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsumeStats {
    /// `consumeTps`.
    pub consume_tps: f64,
    /// `offsetTable`: queue → offsets.
    pub offset_table: BTreeMap<MessageQueue, OffsetWrapper>,
}

impl JsonBean for ConsumeStats {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_f64("consumeTps", self.consume_tps);
        field_queue_map(w, "offsetTable", &self.offset_table, |w, o| o.write_json(w));
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            consume_tps: m.f64("consumeTps")?.unwrap_or(0.0),
            offset_table: read_map(
                &m,
                "offsetTable",
                MessageQueue::from_key,
                OffsetWrapper::read_json,
            )?,
        })
    }
}
json_body!(ConsumeStats);

/// One queue's offset range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicOffset {
    /// `minOffset`.
    pub min_offset: i64,
    /// `maxOffset`.
    pub max_offset: i64,
    /// `lastUpdateTimestamp`: store time of message `maxOffset - 1`, 0 if empty.
    pub last_update_timestamp: i64,
}

impl JsonBean for TopicOffset {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_i64("lastUpdateTimestamp", self.last_update_timestamp);
        w.field_i64("maxOffset", self.max_offset);
        w.field_i64("minOffset", self.min_offset);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            min_offset: m.i64("minOffset")?.unwrap_or(0),
            max_offset: m.i64("maxOffset")?.unwrap_or(0),
            last_update_timestamp: m.i64("lastUpdateTimestamp")?.unwrap_or(0),
        })
    }
}
json_body!(TopicOffset);

/// GET_TOPIC_STATS_INFO response body.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopicStatsTable {
    /// `offsetTable`: queue → offset range.
    pub offset_table: BTreeMap<MessageQueue, TopicOffset>,
    /// `topicPutTps` (5.x).
    pub topic_put_tps: f64,
}

impl JsonBean for TopicStatsTable {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_queue_map(w, "offsetTable", &self.offset_table, |w, o| o.write_json(w));
        w.field_f64("topicPutTps", self.topic_put_tps);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            offset_table: read_map(
                &m,
                "offsetTable",
                MessageQueue::from_key,
                TopicOffset::read_json,
            )?,
            topic_put_tps: m.f64("topicPutTps")?.unwrap_or(0.0),
        })
    }
}
json_body!(TopicStatsTable);

/// QUERY_SUBSCRIPTION_BY_CONSUMER response body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuerySubscriptionResponseBody {
    /// `group`.
    pub group: String,
    /// `subscriptionData`: the online group's subscription of the topic;
    /// omitted (Java's null) when it has none.
    pub subscription_data: Option<SubscriptionData>,
    /// `topic`.
    pub topic: String,
}

impl JsonBean for QuerySubscriptionResponseBody {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_str("group", &self.group);
        field_opt_bean(w, "subscriptionData", self.subscription_data.as_ref());
        w.field_str("topic", &self.topic);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            group: m.string_or_empty("group")?,
            subscription_data: read_opt(&m, "subscriptionData")?,
            topic: m.string_or_empty("topic")?,
        })
    }
}
json_body!(QuerySubscriptionResponseBody);

/// One producer connection (GET_ALL_PRODUCER_INFO).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerInfo {
    /// `clientId`.
    pub client_id: String,
    /// `remoteIP`: `ip:port` of the client socket.
    pub remote_ip: String,
    /// `language`: `LanguageCode` name, e.g. `JAVA`.
    pub language: String,
    /// `version`: the client's version ordinal.
    pub version: i32,
    /// `lastUpdateTimestamp`: its last heartbeat, ms.
    pub last_update_timestamp: i64,
}

impl JsonBean for ProducerInfo {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_str("clientId", &self.client_id);
        w.field_str("language", &self.language);
        w.field_i64("lastUpdateTimestamp", self.last_update_timestamp);
        w.field_str("remoteIP", &self.remote_ip);
        w.field_i64("version", i64::from(self.version));
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            client_id: m.string_or_empty("clientId")?,
            remote_ip: m.string_or_empty("remoteIP")?,
            language: m.string_or_empty("language")?,
            version: m.i32("version")?.unwrap_or(0),
            last_update_timestamp: m.i64("lastUpdateTimestamp")?.unwrap_or(0),
        })
    }
}
json_body!(ProducerInfo);

/// GET_ALL_PRODUCER_INFO response body: producer group → its connections.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerTableInfo {
    /// `data`.
    pub data: BTreeMap<String, Vec<ProducerInfo>>,
}

impl JsonBean for ProducerTableInfo {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.member("data");
        w.begin_map();
        for (group, producers) in &self.data {
            w.map_key_str(group);
            w.begin_array(ArrayKind::List, producers.len());
            for producer in producers {
                producer.write_json(w);
            }
            w.end_array();
        }
        w.end_map();
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            data: read_map(&m, "data", key_text, value_list)?,
        })
    }
}
json_body!(ProducerTableInfo);

/// One queue's times for a consumer group (QUERY_CONSUME_TIME_SPAN).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueTimeSpan {
    /// `messageQueue`.
    pub message_queue: MessageQueue,
    /// `minTimeStamp`: store time of the queue's oldest message, -1 if none.
    pub min_time_stamp: i64,
    /// `maxTimeStamp`: store time of its newest message, -1 if none.
    pub max_time_stamp: i64,
    /// `consumeTimeStamp`: store time of the last message the group
    /// consumed (its oldest when it consumed none).
    pub consume_time_stamp: i64,
    /// `delayTime`: ms since the first message the group has not consumed
    /// was stored; 0 when it consumed everything.
    pub delay_time: i64,
}

impl JsonBean for QueueTimeSpan {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_i64("consumeTimeStamp", self.consume_time_stamp);
        w.field_i64("delayTime", self.delay_time);
        w.field_i64("maxTimeStamp", self.max_time_stamp);
        w.member("messageQueue");
        self.message_queue.write_json(w);
        w.field_i64("minTimeStamp", self.min_time_stamp);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            message_queue: read_opt(&m, "messageQueue")?.unwrap_or_default(),
            min_time_stamp: m.i64("minTimeStamp")?.unwrap_or(0),
            max_time_stamp: m.i64("maxTimeStamp")?.unwrap_or(0),
            consume_time_stamp: m.i64("consumeTimeStamp")?.unwrap_or(0),
            delay_time: m.i64("delayTime")?.unwrap_or(0),
        })
    }
}
json_body!(QueueTimeSpan);

/// QUERY_CONSUME_TIME_SPAN response body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryConsumeTimeSpanBody {
    /// `consumeTimeSpanSet` (a Java `List`).
    pub consume_time_span_set: Vec<QueueTimeSpan>,
}

impl JsonBean for QueryConsumeTimeSpanBody {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_list(
            w,
            "consumeTimeSpanSet",
            ArrayKind::List,
            &self.consume_time_span_set,
        );
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            consume_time_span_set: read_list(&m, "consumeTimeSpanSet")?,
        })
    }
}
json_body!(QueryConsumeTimeSpanBody);

/// A list of topic names (GET_ALL_TOPIC_LIST_FROM_NAMESERVER and others).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicList {
    /// `topicList` (a Java `Set`).
    pub topic_list: Vec<String>,
    /// `brokerAddr`, omitted when `None`.
    pub broker_addr: Option<String>,
}

impl JsonBean for TopicList {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_opt_str("brokerAddr", self.broker_addr.as_deref());
        field_strings(w, "topicList", ArrayKind::Set, &self.topic_list);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            topic_list: m.strings("topicList")?,
            broker_addr: m.string("brokerAddr")?,
        })
    }
}
json_body!(TopicList);

/// A list of consumer group names (QUERY_TOPIC_CONSUME_BY_WHO).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupList {
    /// `groupList` (a Java `HashSet`).
    pub group_list: Vec<String>,
}

impl JsonBean for GroupList {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_strings(w, "groupList", ArrayKind::Set, &self.group_list);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            group_list: m.strings("groupList")?,
        })
    }
}
json_body!(GroupList);

/// `KVTable`: a string map (runtime info, KV config namespaces).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KvTable {
    /// `table`.
    pub table: BTreeMap<String, String>,
}

impl JsonBean for KvTable {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_str_map(w, "table", &self.table, |w, v| w.string(v));
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            table: m.string_map("table")?,
        })
    }
}
json_body!(KvTable);

/// INVOKE_BROKER_TO_RESET_OFFSET response / RESET_CONSUMER_CLIENT_OFFSET body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResetOffsetBody {
    /// `offsetTable`: queue → new offset.
    pub offset_table: BTreeMap<MessageQueue, i64>,
}

impl JsonBean for ResetOffsetBody {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_queue_map(w, "offsetTable", &self.offset_table, |w, v| w.i64(*v));
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            offset_table: read_map(&m, "offsetTable", MessageQueue::from_key, value_i64)?,
        })
    }
}
json_body!(ResetOffsetBody);

/// GET_BROKER_CONSUME_STATS response body (`ConsumeStatsList`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsumeStatsList {
    /// `consumeStatsList`: a list of maps group → that group's stats per topic.
    pub consume_stats_list: Vec<BTreeMap<String, Vec<ConsumeStats>>>,
    /// `brokerAddr`, omitted when `None`.
    pub broker_addr: Option<String>,
    /// `totalDiff`: the sum of the groups' lag.
    pub total_diff: i64,
    /// `totalInflightDiff` (5.x).
    pub total_inflight_diff: i64,
}

impl JsonBean for ConsumeStatsList {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_opt_str("brokerAddr", self.broker_addr.as_deref());
        w.member("consumeStatsList");
        w.begin_array(ArrayKind::List, self.consume_stats_list.len());
        for groups in &self.consume_stats_list {
            w.begin_map();
            for (group, stats) in groups {
                w.map_key_str(group);
                w.begin_array(ArrayKind::List, stats.len());
                for item in stats {
                    item.write_json(w);
                }
                w.end_array();
            }
            w.end_map();
        }
        w.end_array();
        w.field_i64("totalDiff", self.total_diff);
        w.field_i64("totalInflightDiff", self.total_inflight_diff);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        let list_path = m.path_of("consumeStatsList");
        let mut consume_stats_list = Vec::new();
        for item in m.array("consumeStatsList")? {
            if matches!(item, JsonValue::Null) {
                continue;
            }
            let object = item.as_object().ok_or_else(|| JsonError::WrongType {
                member: list_path.clone(),
                expected: "an array of objects",
            })?;
            let mut groups = BTreeMap::new();
            for (key, stats) in &object.members {
                let stats = stats.as_array().ok_or_else(|| JsonError::WrongType {
                    member: list_path.clone(),
                    expected: "a map of arrays",
                })?;
                let stats = stats
                    .iter()
                    .map(|s| ConsumeStats::read_json(s, &list_path))
                    .collect::<Result<_, _>>()?;
                groups.insert(key_text(key, &list_path)?, stats);
            }
            consume_stats_list.push(groups);
        }
        Ok(Self {
            consume_stats_list,
            broker_addr: m.string("brokerAddr")?,
            total_diff: m.i64("totalDiff")?.unwrap_or(0),
            total_inflight_diff: m.i64("totalInflightDiff")?.unwrap_or(0),
        })
    }
}
json_body!(ConsumeStatsList);

/// One window of VIEW_BROKER_STATS_DATA's answer (`BrokerStatsItem`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BrokerStatsItem {
    /// `sum`: the figure's growth over the window.
    pub sum: i64,
    /// `tps`: that growth per second.
    pub tps: f64,
    /// `avgpt`: growth per increment.
    pub avgpt: f64,
}

impl JsonBean for BrokerStatsItem {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_f64("avgpt", self.avgpt);
        w.field_i64("sum", self.sum);
        w.field_f64("tps", self.tps);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            sum: m.i64("sum")?.unwrap_or(0),
            tps: m.f64("tps")?.unwrap_or(0.0),
            avgpt: m.f64("avgpt")?.unwrap_or(0.0),
        })
    }
}
json_body!(BrokerStatsItem);

/// VIEW_BROKER_STATS_DATA response body (`BrokerStatsData`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BrokerStatsData {
    /// `statsMinute`: the last minute.
    pub stats_minute: BrokerStatsItem,
    /// `statsHour`: the last hour.
    pub stats_hour: BrokerStatsItem,
    /// `statsDay`: the last day.
    pub stats_day: BrokerStatsItem,
}

impl JsonBean for BrokerStatsData {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_opt_bean(w, "statsDay", Some(&self.stats_day));
        field_opt_bean(w, "statsHour", Some(&self.stats_hour));
        field_opt_bean(w, "statsMinute", Some(&self.stats_minute));
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        let window = |name: &str| -> Result<BrokerStatsItem, JsonError> {
            Ok(read_opt(&m, name)?.unwrap_or_default())
        };
        Ok(Self {
            stats_minute: window("statsMinute")?,
            stats_hour: window("statsHour")?,
            stats_day: window("statsDay")?,
        })
    }
}
json_body!(BrokerStatsData);

/// One ConsumeQueue entry of QUERY_CONSUME_QUEUE's answer (`ConsumeQueueData`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumeQueueData {
    /// `physicOffset`: the record's CommitLog offset.
    pub physic_offset: i64,
    /// `physicSize`: the record's size.
    pub physic_size: i32,
    /// `tagsCode`: the tag hash (or a delay message's delivery time).
    pub tags_code: i64,
    /// `eval`: whether the group's filter matched (set by Java only for
    /// entries with extended data, which ringmq does not write).
    pub eval: bool,
}

impl JsonBean for ConsumeQueueData {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_bool("eval", self.eval);
        w.field_i64("physicOffset", self.physic_offset);
        w.field_i64("physicSize", i64::from(self.physic_size));
        w.field_i64("tagsCode", self.tags_code);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            physic_offset: m.i64("physicOffset")?.unwrap_or(0),
            physic_size: m.i32("physicSize")?.unwrap_or(0),
            tags_code: m.i64("tagsCode")?.unwrap_or(0),
            eval: m.bool("eval")?.unwrap_or(false),
        })
    }
}
json_body!(ConsumeQueueData);

/// QUERY_CONSUME_QUEUE response body (`QueryConsumeQueueResponseBody`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryConsumeQueueResponseBody {
    /// `subscriptionData`: the group's subscription of the topic, if asked
    /// for and online.
    pub subscription_data: Option<SubscriptionData>,
    /// `filterData`: Java's text about the group's filter, if a group was
    /// asked for.
    pub filter_data: Option<String>,
    /// `queueData`: the entries.
    pub queue_data: Vec<ConsumeQueueData>,
    /// `maxQueueIndex`: the queue's max offset.
    pub max_queue_index: i64,
    /// `minQueueIndex`: the queue's min offset.
    pub min_queue_index: i64,
}

impl JsonBean for QueryConsumeQueueResponseBody {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_opt_str("filterData", self.filter_data.as_deref());
        w.field_i64("maxQueueIndex", self.max_queue_index);
        w.field_i64("minQueueIndex", self.min_queue_index);
        field_list(w, "queueData", ArrayKind::List, &self.queue_data);
        field_opt_bean(w, "subscriptionData", self.subscription_data.as_ref());
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            subscription_data: read_opt(&m, "subscriptionData")?,
            filter_data: m.string("filterData")?,
            queue_data: read_list(&m, "queueData")?,
            max_queue_index: m.i64("maxQueueIndex")?.unwrap_or(0),
            min_queue_index: m.i64("minQueueIndex")?.unwrap_or(0),
        })
    }
}
json_body!(QueryConsumeQueueResponseBody);

/// One slave in a master's GET_BROKER_HA_STATUS answer
/// (`HARuntimeInfo.HAConnectionRuntimeInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HaConnectionRuntimeInfo {
    /// `addr`: the slave.
    pub addr: String,
    /// `slaveAckOffset`: what the slave reported durable.
    pub slave_ack_offset: i64,
    /// `diff`: how far it is behind the master's log.
    pub diff: i64,
    /// `inSync`: whether it counts as in sync.
    pub in_sync: bool,
    /// `transferredByteInSecond`.
    pub transferred_byte_in_second: i64,
    /// `transferFromWhere`: where the transfer started.
    pub transfer_from_where: i64,
}

impl JsonBean for HaConnectionRuntimeInfo {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_str("addr", &self.addr);
        w.field_i64("diff", self.diff);
        w.field_bool("inSync", self.in_sync);
        w.field_i64("slaveAckOffset", self.slave_ack_offset);
        w.field_i64("transferFromWhere", self.transfer_from_where);
        w.field_i64("transferredByteInSecond", self.transferred_byte_in_second);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            addr: m.string_or_empty("addr")?,
            slave_ack_offset: m.i64("slaveAckOffset")?.unwrap_or(0),
            diff: m.i64("diff")?.unwrap_or(0),
            in_sync: m.bool("inSync")?.unwrap_or(false),
            transferred_byte_in_second: m.i64("transferredByteInSecond")?.unwrap_or(0),
            transfer_from_where: m.i64("transferFromWhere")?.unwrap_or(0),
        })
    }
}
json_body!(HaConnectionRuntimeInfo);

/// A slave's side of GET_BROKER_HA_STATUS (`HARuntimeInfo.HAClientRuntimeInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HaClientRuntimeInfo {
    /// `masterAddr`, omitted when none is known.
    pub master_addr: Option<String>,
    /// `transferredByteInSecond`.
    pub transferred_byte_in_second: i64,
    /// `maxOffset`: the slave's log end.
    pub max_offset: i64,
    /// `lastReadTimestamp`: when the master last answered (ms).
    pub last_read_timestamp: i64,
    /// `lastWriteTimestamp`: when the slave last asked (ms).
    pub last_write_timestamp: i64,
    /// `masterFlushOffset`: the master's position it last reported.
    pub master_flush_offset: i64,
    /// `activated`: replicating now (Java's field `isActivated`, which its
    /// 5.3 classes neither write nor read: only the JSON shows it).
    pub activated: bool,
}

impl JsonBean for HaClientRuntimeInfo {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_bool("activated", self.activated);
        w.field_i64("lastReadTimestamp", self.last_read_timestamp);
        w.field_i64("lastWriteTimestamp", self.last_write_timestamp);
        w.field_opt_str("masterAddr", self.master_addr.as_deref());
        w.field_i64("masterFlushOffset", self.master_flush_offset);
        w.field_i64("maxOffset", self.max_offset);
        w.field_i64("transferredByteInSecond", self.transferred_byte_in_second);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            master_addr: m.string("masterAddr")?,
            transferred_byte_in_second: m.i64("transferredByteInSecond")?.unwrap_or(0),
            max_offset: m.i64("maxOffset")?.unwrap_or(0),
            last_read_timestamp: m.i64("lastReadTimestamp")?.unwrap_or(0),
            last_write_timestamp: m.i64("lastWriteTimestamp")?.unwrap_or(0),
            master_flush_offset: m.i64("masterFlushOffset")?.unwrap_or(0),
            activated: m.bool("activated")?.unwrap_or(false),
        })
    }
}
json_body!(HaClientRuntimeInfo);

/// GET_BROKER_HA_STATUS response body (`HARuntimeInfo`, `mqadmin haStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HaRuntimeInfo {
    /// `master`: whether this broker is a master.
    pub master: bool,
    /// `masterCommitLogMaxOffset`: a master's log end.
    pub master_commit_log_max_offset: i64,
    /// `inSyncSlaveNums`: a master's slaves in sync.
    pub in_sync_slave_nums: i32,
    /// `haConnectionInfo`: a master's slaves.
    pub ha_connection_info: Vec<HaConnectionRuntimeInfo>,
    /// `haClientRuntimeInfo`: a slave's replication.
    pub ha_client_runtime_info: HaClientRuntimeInfo,
}

impl JsonBean for HaRuntimeInfo {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_opt_bean(w, "haClientRuntimeInfo", Some(&self.ha_client_runtime_info));
        field_list(
            w,
            "haConnectionInfo",
            ArrayKind::List,
            &self.ha_connection_info,
        );
        w.field_i64("inSyncSlaveNums", i64::from(self.in_sync_slave_nums));
        w.field_bool("master", self.master);
        w.field_i64(
            "masterCommitLogMaxOffset",
            self.master_commit_log_max_offset,
        );
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            master: m.bool("master")?.unwrap_or(false),
            master_commit_log_max_offset: m.i64("masterCommitLogMaxOffset")?.unwrap_or(0),
            in_sync_slave_nums: m.i32("inSyncSlaveNums")?.unwrap_or(0),
            ha_connection_info: read_list(&m, "haConnectionInfo")?,
            ha_client_runtime_info: read_opt(&m, "haClientRuntimeInfo")?.unwrap_or_default(),
        })
    }
}
json_body!(HaRuntimeInfo);

/// Reads a JSON object keyed by message queues with long values.
fn queue_offsets_of(
    value: &JsonValue,
    path: &str,
) -> Result<BTreeMap<MessageQueue, i64>, JsonError> {
    let object = value.as_object().ok_or_else(|| JsonError::WrongType {
        member: path.to_owned(),
        expected: "an object keyed by message queues",
    })?;
    let mut map = BTreeMap::new();
    for (key, value) in &object.members {
        if !matches!(value, JsonValue::Null) {
            map.insert(MessageQueue::from_key(key, path)?, value_i64(value, path)?);
        }
    }
    Ok(map)
}

/// GET_CONSUMER_STATUS_FROM_CLIENT body (`GetConsumerStatusBody`): a
/// consumer's answer fills `messageQueueTable`, the broker's answer
/// `consumerTable` (client id → that table).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetConsumerStatusBody {
    /// `messageQueueTable`: queue → the consumer's offset.
    pub message_queue_table: BTreeMap<MessageQueue, i64>,
    /// `consumerTable`: client id → its queues' offsets.
    pub consumer_table: BTreeMap<String, BTreeMap<MessageQueue, i64>>,
}

impl JsonBean for GetConsumerStatusBody {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.member("consumerTable");
        w.begin_map();
        for (client, table) in &self.consumer_table {
            w.map_key_str(client);
            w.begin_map();
            for (queue, offset) in table {
                w.map_key_with(|w| queue.write_json(w));
                w.i64(*offset);
            }
            w.end_map();
        }
        w.end_map();
        field_queue_map(w, "messageQueueTable", &self.message_queue_table, |w, v| {
            w.i64(*v)
        });
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            message_queue_table: read_map(
                &m,
                "messageQueueTable",
                MessageQueue::from_key,
                value_i64,
            )?,
            consumer_table: read_map(&m, "consumerTable", key_text, queue_offsets_of)?,
        })
    }
}
json_body!(GetConsumerStatusBody);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonStyle;

    #[test]
    fn consume_stats_example_with_object_keys_parses_and_reencodes() {
        let text = concat!(
            r#"{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"TopicTest"}:"#,
            r#"{"brokerOffset":120,"consumerOffset":118,"lastTimestamp":1700000000123,"pullOffset":120}}}"#
        );
        let stats = ConsumeStats::from_json(text.as_bytes()).unwrap();
        let offsets = stats.offset_table[&MessageQueue::new("TopicTest", "broker-a", 0)];
        assert_eq!(offsets.consumer_offset, 118);
        assert_eq!(offsets.last_timestamp, 1_700_000_000_123);
        let mut out = Vec::new();
        stats.to_json(&mut out, JsonStyle::Java);
        assert_eq!(String::from_utf8(out.clone()).unwrap(), text);
        // The standard style keeps the native object-key form.
        let mut standard = Vec::new();
        stats.to_json(&mut standard, JsonStyle::Standard);
        assert_eq!(standard, out);
    }

    #[test]
    fn consume_stats_reads_stringified_queue_keys_of_the_rust_client() {
        let text = br#"{"consumeTps":"1.5","offsetTable":{"{\"topic\":\"T\",\"brokerName\":\"b\",\"queueId\":2}":{"brokerOffset":1}}}"#;
        let stats = ConsumeStats::from_json(text).unwrap();
        assert_eq!(stats.consume_tps, 1.5);
        assert_eq!(
            stats.offset_table[&MessageQueue::new("T", "b", 2)].broker_offset,
            1
        );
    }

    #[test]
    fn broker_stats_data_is_written_as_java_writes_it_and_read_back() {
        let data = BrokerStatsData {
            stats_minute: BrokerStatsItem {
                sum: 600,
                tps: 10.0,
                avgpt: 1.5,
            },
            stats_hour: BrokerStatsItem {
                sum: 7,
                tps: 0.25,
                avgpt: 1.0,
            },
            stats_day: BrokerStatsItem::default(),
        };
        let mut out = Vec::new();
        data.to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            concat!(
                r#"{"statsDay":{"avgpt":0.0,"sum":0,"tps":0.0},"#,
                r#""statsHour":{"avgpt":1.0,"sum":7,"tps":0.25},"#,
                r#""statsMinute":{"avgpt":1.5,"sum":600,"tps":10.0}}"#
            )
        );
        assert_eq!(BrokerStatsData::from_json(&out).unwrap(), data);
        assert_eq!(
            BrokerStatsData::from_json(b"{}").unwrap(),
            BrokerStatsData::default()
        );
        assert!(BrokerStatsData::from_json(br#"{"statsMinute":{"sum":"x"}}"#).is_err());
    }

    #[test]
    fn query_consume_queue_body_is_written_with_javas_names_and_read_back() {
        let body = QueryConsumeQueueResponseBody {
            subscription_data: None,
            filter_data: Some("g@t is not online!".to_owned()),
            queue_data: vec![ConsumeQueueData {
                physic_offset: 1_024,
                physic_size: 200,
                tags_code: -7,
                eval: false,
            }],
            max_queue_index: 5,
            min_queue_index: 1,
        };
        let mut out = Vec::new();
        body.to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            concat!(
                r#"{"filterData":"g@t is not online!","maxQueueIndex":5,"minQueueIndex":1,"#,
                r#""queueData":[{"eval":false,"physicOffset":1024,"physicSize":200,"tagsCode":-7}]}"#
            )
        );
        assert_eq!(
            QueryConsumeQueueResponseBody::from_json(&out).unwrap(),
            body
        );
        let empty = QueryConsumeQueueResponseBody::from_json(b"{}").unwrap();
        assert!(empty.queue_data.is_empty() && empty.filter_data.is_none());
    }

    #[test]
    fn ha_runtime_info_round_trips_with_javas_names() {
        let info = HaRuntimeInfo {
            master: true,
            master_commit_log_max_offset: 4_096,
            in_sync_slave_nums: 1,
            ha_connection_info: vec![HaConnectionRuntimeInfo {
                addr: "127.0.0.1:10921".to_owned(),
                slave_ack_offset: 4_000,
                diff: 96,
                in_sync: true,
                transferred_byte_in_second: 0,
                transfer_from_where: 0,
            }],
            ha_client_runtime_info: HaClientRuntimeInfo::default(),
        };
        let mut out = Vec::new();
        info.to_json(&mut out, JsonStyle::Java);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(
            text.starts_with(r#"{"haClientRuntimeInfo":{"activated":false,"lastReadTimestamp":0,"#),
            "{text}"
        );
        assert!(
            text.contains(r#""haConnectionInfo":[{"addr":"127.0.0.1:10921","diff":96,"inSync":true,"slaveAckOffset":4000,"#),
            "{text}"
        );
        assert!(
            text.ends_with(r#""inSyncSlaveNums":1,"master":true,"masterCommitLogMaxOffset":4096}"#),
            "{text}"
        );
        assert_eq!(HaRuntimeInfo::from_json(&out).unwrap(), info);
    }

    #[test]
    fn consumer_status_tables_round_trip_in_both_forms() {
        let queue = MessageQueue::new("T", "b", 1);
        let answer = GetConsumerStatusBody {
            message_queue_table: BTreeMap::from([(queue.clone(), 7)]),
            consumer_table: BTreeMap::new(),
        };
        let mut out = Vec::new();
        answer.to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            r#"{"consumerTable":{},"messageQueueTable":{{"brokerName":"b","queueId":1,"topic":"T"}:7}}"#
        );
        assert_eq!(GetConsumerStatusBody::from_json(&out).unwrap(), answer);
        let merged = GetConsumerStatusBody {
            message_queue_table: BTreeMap::new(),
            consumer_table: BTreeMap::from([("c@1".to_owned(), answer.message_queue_table)]),
        };
        let mut out = Vec::new();
        merged.to_json(&mut out, JsonStyle::Java);
        assert_eq!(GetConsumerStatusBody::from_json(&out).unwrap(), merged);
        assert!(GetConsumerStatusBody::from_json(br#"{"consumerTable":{"c":[]}}"#).is_err());
    }

    #[test]
    fn consume_stats_list_round_trips() {
        let stats = ConsumeStats {
            consume_tps: 2.5,
            offset_table: BTreeMap::from([(
                MessageQueue::new("T", "b", 0),
                OffsetWrapper::default(),
            )]),
        };
        let list = ConsumeStatsList {
            consume_stats_list: vec![BTreeMap::from([("g".to_owned(), vec![stats])])],
            broker_addr: Some("1.2.3.4:10911".into()),
            total_diff: 7,
            total_inflight_diff: 1,
        };
        let mut out = Vec::new();
        list.to_json(&mut out, JsonStyle::Java);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(
            text.starts_with(
                r#"{"brokerAddr":"1.2.3.4:10911","consumeStatsList":[{"g":[{"consumeTps":2.5,"#
            ),
            "{text}"
        );
        assert!(
            text.ends_with(r#"}]}],"totalDiff":7,"totalInflightDiff":1}"#),
            "{text}"
        );
        assert_eq!(ConsumeStatsList::from_json(&out).unwrap(), list);
    }

    #[test]
    fn topic_stats_table_writes_members_in_order() {
        let table = TopicStatsTable {
            offset_table: BTreeMap::from([(
                MessageQueue::new("T", "b", 0),
                TopicOffset {
                    min_offset: 0,
                    max_offset: 10,
                    last_update_timestamp: 99,
                },
            )]),
            topic_put_tps: 12.5,
        };
        let mut out = Vec::new();
        table.to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            r#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"lastUpdateTimestamp":99,"maxOffset":10,"minOffset":0}},"topicPutTps":12.5}"#
        );
        assert_eq!(TopicStatsTable::from_json(&out).unwrap(), table);
    }

    #[test]
    fn consumer_connection_round_trips() {
        let connection = ConsumerConnection {
            connection_set: vec![Connection {
                client_id: "c".into(),
                client_addr: "1.2.3.4:5".into(),
                language: "JAVA".into(),
                version: 479,
            }],
            subscription_table: BTreeMap::from([("T".to_owned(), SubscriptionData::default())]),
            ..Default::default()
        };
        let mut out = Vec::new();
        connection.to_json(&mut out, JsonStyle::Java);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.starts_with(r#"{"connectionSet":[{"clientAddr":"1.2.3.4:5","clientId":"c","language":"JAVA","version":479}],"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET""#), "{text}");
        assert_eq!(ConsumerConnection::from_json(&out).unwrap(), connection);
        let producer = ProducerConnection {
            connection_set: connection.connection_set.clone(),
        };
        let mut out = Vec::new();
        producer.to_json(&mut out, JsonStyle::Java);
        assert_eq!(ProducerConnection::from_json(&out).unwrap(), producer);
    }

    #[test]
    fn small_bodies_have_the_documented_shapes() {
        let mut out = Vec::new();
        TopicList {
            topic_list: vec!["A".into()],
            broker_addr: None,
        }
        .to_json(&mut out, JsonStyle::Java);
        assert_eq!(out, br#"{"topicList":["A"]}"#);
        out.clear();
        GroupList {
            group_list: vec!["g".into()],
        }
        .to_json(&mut out, JsonStyle::Java);
        assert_eq!(out, br#"{"groupList":["g"]}"#);
        out.clear();
        KvTable {
            table: BTreeMap::from([("k".into(), "v".into())]),
        }
        .to_json(&mut out, JsonStyle::Java);
        assert_eq!(out, br#"{"table":{"k":"v"}}"#);
        out.clear();
        let reset = ResetOffsetBody {
            offset_table: BTreeMap::from([(MessageQueue::new("T", "b", 1), 7)]),
        };
        reset.to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            out,
            br#"{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:7}}"#
        );
        assert_eq!(ResetOffsetBody::from_json(&out).unwrap(), reset);
        let list = TopicList::from_json(br#"{"brokerAddr":"a:1","topicList":["A","B"]}"#).unwrap();
        assert_eq!(list.broker_addr.as_deref(), Some("a:1"));
    }

    #[test]
    fn a_producer_table_is_written_in_fastjson_order_and_read_back() {
        let table = ProducerTableInfo {
            data: BTreeMap::from([(
                "pg".to_owned(),
                vec![ProducerInfo {
                    client_id: "10.0.0.1@1".into(),
                    remote_ip: "10.0.0.1:5000".into(),
                    language: "JAVA".into(),
                    version: 479,
                    last_update_timestamp: 42,
                }],
            )]),
        };
        let mut out = Vec::new();
        table.to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            r#"{"data":{"pg":[{"clientId":"10.0.0.1@1","language":"JAVA","lastUpdateTimestamp":42,"remoteIP":"10.0.0.1:5000","version":479}]}}"#
        );
        assert_eq!(ProducerTableInfo::from_json(&out).unwrap(), table);
    }

    #[test]
    fn a_time_span_body_is_written_in_fastjson_order_and_read_back() {
        let body = QueryConsumeTimeSpanBody {
            consume_time_span_set: vec![QueueTimeSpan {
                message_queue: MessageQueue::new("T", "b", 2),
                min_time_stamp: 10,
                max_time_stamp: 30,
                consume_time_stamp: 20,
                delay_time: 5,
            }],
        };
        let mut out = Vec::new();
        body.to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            r#"{"consumeTimeSpanSet":[{"consumeTimeStamp":20,"delayTime":5,"maxTimeStamp":30,"messageQueue":{"brokerName":"b","queueId":2,"topic":"T"},"minTimeStamp":10}]}"#
        );
        assert_eq!(QueryConsumeTimeSpanBody::from_json(&out).unwrap(), body);
    }

    #[test]
    fn a_subscription_query_omits_a_missing_subscription_and_round_trips() {
        let mut body = QuerySubscriptionResponseBody {
            group: "g".into(),
            subscription_data: None,
            topic: "T".into(),
        };
        let mut out = Vec::new();
        body.to_json(&mut out, JsonStyle::Java);
        assert_eq!(out, br#"{"group":"g","topic":"T"}"#);
        body.subscription_data = Some(SubscriptionData {
            topic: "T".into(),
            sub_string: "a || b".into(),
            tags_set: vec!["a".into(), "b".into()],
            code_set: vec![97, 98],
            sub_version: 5,
            ..SubscriptionData::default()
        });
        out.clear();
        body.to_json(&mut out, JsonStyle::Java);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(
            text.starts_with(r#"{"group":"g","subscriptionData":{"#),
            "{text}"
        );
        assert_eq!(
            QuerySubscriptionResponseBody::from_json(&out).unwrap(),
            body
        );
    }
}
