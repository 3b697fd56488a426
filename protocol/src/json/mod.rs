//! The fastjson dialect of JSON, and every JSON body RocketMQ exchanges.
//!
//! Java peers write bodies with fastjson 1.x (`JSON.toJSONString`) and read
//! them with its lenient parser. This module reads everything fastjson writes
//! (unquoted integer keys, object keys, quoted numbers where strings are
//! declared, ...) into a [`JsonValue`] tree with [`parse`], writes the bytes
//! fastjson writes with [`JsonWriter`] (members sorted, nulls omitted, Java
//! doubles, fastjson escaping, pretty layout for config files), and maps the
//! tree onto typed bodies, one file per family:
//!
//! | file | bodies |
//! | --- | --- |
//! | `route.rs` | [`TopicRouteData`], [`QueueData`], [`BrokerData`], [`ClusterInfo`], [`GetBrokerMemberGroupResponseBody`] |
//! | `register.rs` | [`DataVersion`], [`TopicConfig`], [`TopicConfigSerializeWrapper`], [`TopicConfigList`], [`TopicConfigAndQueueMapping`], [`RegisterBrokerBody`], [`RegisterBrokerResult`] |
//! | `heartbeat.rs` | [`HeartbeatData`], [`ConsumerData`], [`ProducerData`], [`SubscriptionData`], [`GetConsumerListByGroupResponseBody`] |
//! | `queue.rs` | [`MessageQueue`], [`LockBatchRequestBody`], [`UnlockBatchRequestBody`], [`LockBatchResponseBody`] |
//! | `admin.rs` | [`Connection`], [`ConsumerConnection`], [`ProducerConnection`], [`ConsumeStats`], [`ConsumeStatsList`], [`TopicStatsTable`], [`TopicList`], [`GroupList`], [`KvTable`], [`ResetOffsetBody`], [`QuerySubscriptionResponseBody`], [`QueryConsumeTimeSpanBody`], [`ProducerTableInfo`] |
//! | `subscription_group.rs` | [`SubscriptionGroupConfig`], [`SubscriptionGroupWrapper`], [`SubscriptionGroupList`] |
//! | `config_file.rs` | [`ConsumerOffsetFile`], [`DelayOffsetFile`], [`KvConfigFile`] |
//!
//! Every body has `to_json(&self, &mut Vec<u8>, JsonStyle)` and
//! `from_json(&[u8]) -> Result<Self, JsonError>`; config files also have
//! `write_pretty(&self, &mut Vec<u8>)`. Rust fields are snake_case; the wire
//! names are Java's member names.
//!
//! # Invariants
//!
//! - Parsing never panics and is bounded by [`JSON_DEPTH_MAX`] and
//!   [`JSON_INPUT_SIZE_MAX`] ([`fuzz_json`] checks this).
//! - Whatever parses, writes (either style, compact or pretty) and parses
//!   back to an equal value, integer keys becoming string keys in the
//!   standard style.

mod admin;
mod bean;
mod config_file;
mod error;
mod fuzz;
mod heartbeat;
mod parse;
mod queue;
mod register;
mod route;
mod subscription_group;
mod value;
mod write;

pub use admin::{
    BrokerStatsData, BrokerStatsItem, Connection, ConsumeQueueData, ConsumeStats, ConsumeStatsList,
    ConsumerConnection, GetConsumerStatusBody, GroupList, HaClientRuntimeInfo,
    HaConnectionRuntimeInfo, HaRuntimeInfo, KvTable, OffsetWrapper, ProducerConnection,
    ProducerInfo, ProducerTableInfo, QueryConsumeQueueResponseBody, QueryConsumeTimeSpanBody,
    QuerySubscriptionResponseBody, QueueTimeSpan, ResetOffsetBody, TopicList, TopicOffset,
    TopicStatsTable,
};
pub use bean::{JsonBean, decode, encode, encode_pretty, write_object, write_value};
pub use config_file::{ConsumerOffsetFile, DelayOffsetFile, KvConfigFile};
pub use error::JsonError;
pub use fuzz::fuzz_json;
pub use heartbeat::{
    ConsumeFromWhere, ConsumeType, ConsumerData, GetConsumerListByGroupResponseBody, HeartbeatData,
    MessageModel, ProducerData, SubscriptionData,
};
pub use parse::{JSON_DEPTH_MAX, JSON_INPUT_SIZE_MAX, parse};
pub use queue::{
    LockBatchRequestBody, LockBatchResponseBody, MessageQueue, UnlockBatchRequestBody,
};
pub use register::{
    DataVersion, RegisterBrokerBody, RegisterBrokerResult, TopicConfig, TopicConfigAndQueueMapping,
    TopicConfigList, TopicConfigSerializeWrapper, TopicFilterType,
};
pub use route::{
    BrokerData, BrokerMemberGroup, ClusterInfo, GetBrokerMemberGroupResponseBody, QueueData,
    TopicRouteData,
};
pub use subscription_group::{
    SubscriptionGroupConfig, SubscriptionGroupList, SubscriptionGroupWrapper,
};
pub use value::{JsonKey, JsonNumber, JsonObject, JsonValue, KEY_TEXT_SHOWN_MAX};
pub use write::{
    ArrayKind, JsonStyle, JsonWriter, ROUTE_STANDARD_JSON_VERSION_MIN, RouteKeyStyle,
    write_java_double, write_string,
};
