//! Broker registration bodies: `DataVersion`, `TopicConfig`,
//! `TopicConfigSerializeWrapper` (also `topics.json` and the
//! GET_ALL_TOPIC_CONFIG body), `RegisterBrokerBody` and the register result.
//!
//! ```text
//! DataVersion      {"counter":1,"stateVersion":0,"timestamp":1700000000000}
//! TopicConfig      {"attributes":{},"order":false,"perm":6,"readQueueNums":16,
//!                   "topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":16}
//! wrapper          {"dataVersion":..,"mappingDataVersion":..?,"topicConfigTable":{name:TopicConfig},
//!                   "topicQueueMappingDetailMap":{..}?,"topicQueueMappingInfoMap":{..}?}
//! RegisterBrokerBody {"filterServerList":[],"topicConfigSerializeWrapper":wrapper}
//! ```
//!
//! The compressed REGISTER_BROKER form (a zlib stream, `compressed=true`) is
//! recognised and refused with
//! [`JsonError::CompressedRegisterBodyUnsupported`]: decoding it needs an
//! inflater this crate does not have. Java brokers send it only with
//! `compressedRegister=true` (default false).
//!
//! # Invariants
//!
//! - Members are written in alphabetical order; the 5.x mapping members are
//!   written only when present.

use std::collections::BTreeMap;

use super::KvTable;
use super::bean::{
    JsonBean, field_list, field_str_map, field_strings, java_enum, json_body, read_list, read_map,
    value_string, write_object, write_value,
};
use super::error::JsonError;
use super::parse::parse;
use super::value::{JsonObject, JsonValue, Members, key_text};
use super::write::{ArrayKind, JsonWriter};

/// The version of a broker's topic configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataVersion {
    /// `timestamp`: milliseconds of the last change.
    pub timestamp: i64,
    /// `counter`: incremented on every change (Java `AtomicLong`).
    pub counter: i64,
    /// `stateVersion` (5.x; absent in 4.x, read as 0).
    pub state_version: i64,
}

impl JsonBean for DataVersion {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_i64("counter", self.counter);
        w.field_i64("stateVersion", self.state_version);
        w.field_i64("timestamp", self.timestamp);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            timestamp: m.i64("timestamp")?.unwrap_or(0),
            counter: m.i64("counter")?.unwrap_or(0),
            state_version: m.i64("stateVersion")?.unwrap_or(0),
        })
    }
}
json_body!(DataVersion);

java_enum! {
    /// `TopicFilterType`.
    pub enum TopicFilterType default SingleTag {
        /// `SINGLE_TAG`.
        SingleTag = "SINGLE_TAG",
        /// `MULTI_TAG`.
        MultiTag = "MULTI_TAG",
    }
}

/// One topic's configuration on a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    /// `topicName`.
    pub topic_name: String,
    /// `readQueueNums` (class default 16).
    pub read_queue_nums: i32,
    /// `writeQueueNums` (class default 16).
    pub write_queue_nums: i32,
    /// `perm` (default 6 = read + write).
    pub perm: i32,
    /// `topicFilterType` (default `SINGLE_TAG`).
    pub topic_filter_type: TopicFilterType,
    /// `topicSysFlag` (default 0).
    pub topic_sys_flag: i32,
    /// `order` (default false).
    pub order: bool,
    /// `attributes` (5.x), e.g. `message.type` → `NORMAL`.
    pub attributes: BTreeMap<String, String>,
}

/// Java's `TopicConfig` class defaults for queue counts.
pub const TOPIC_QUEUE_NUMS_DEFAULT: i32 = 16;
/// Java's `TopicConfig` default permission (read + write).
pub const TOPIC_PERM_DEFAULT: i32 = 6;

impl Default for TopicConfig {
    fn default() -> Self {
        Self {
            topic_name: String::new(),
            read_queue_nums: TOPIC_QUEUE_NUMS_DEFAULT,
            write_queue_nums: TOPIC_QUEUE_NUMS_DEFAULT,
            perm: TOPIC_PERM_DEFAULT,
            topic_filter_type: TopicFilterType::SingleTag,
            topic_sys_flag: 0,
            order: false,
            attributes: BTreeMap::new(),
        }
    }
}

impl JsonBean for TopicConfig {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        self.write_members(w, None);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        let defaults = Self::default();
        Ok(Self {
            topic_name: m.string_or_empty("topicName")?,
            read_queue_nums: m.i32("readQueueNums")?.unwrap_or(defaults.read_queue_nums),
            write_queue_nums: m
                .i32("writeQueueNums")?
                .unwrap_or(defaults.write_queue_nums),
            perm: m.i32("perm")?.unwrap_or(defaults.perm),
            topic_filter_type: m
                .string("topicFilterType")?
                .map(|name| TopicFilterType::from_name(&name))
                .unwrap_or_default(),
            topic_sys_flag: m.i32("topicSysFlag")?.unwrap_or(0),
            order: m.bool("order")?.unwrap_or(false),
            attributes: m.string_map("attributes")?,
        })
    }
}
json_body!(TopicConfig);

impl TopicConfig {
    /// Writes the members of `TopicConfig`, with `mappingDetail` in its
    /// alphabetical place when given (for [`TopicConfigAndQueueMapping`]).
    fn write_members(&self, w: &mut JsonWriter<'_>, mapping_detail: Option<&JsonValue>) {
        field_str_map(w, "attributes", &self.attributes, |w, v| w.string(v));
        if let Some(detail) = mapping_detail {
            w.member("mappingDetail");
            write_value(w, detail);
        }
        w.field_bool("order", self.order);
        w.field_i64("perm", i64::from(self.perm));
        w.field_i64("readQueueNums", i64::from(self.read_queue_nums));
        w.field_str("topicFilterType", self.topic_filter_type.name());
        w.field_str("topicName", &self.topic_name);
        w.field_i64("topicSysFlag", i64::from(self.topic_sys_flag));
        w.field_i64("writeQueueNums", i64::from(self.write_queue_nums));
    }
}

/// UPDATE_AND_CREATE_TOPIC_LIST request body (`CreateTopicListRequestBody`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicConfigList {
    /// `topicConfigList` (a Java `List`).
    pub topic_config_list: Vec<TopicConfig>,
}

impl JsonBean for TopicConfigList {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_list(
            w,
            "topicConfigList",
            ArrayKind::List,
            &self.topic_config_list,
        );
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            topic_config_list: read_list(&m, "topicConfigList")?,
        })
    }
}
json_body!(TopicConfigList);

/// GET_TOPIC_CONFIG (5.x) response body: a `TopicConfig` plus the static
/// topic's `mappingDetail` (kept opaque, omitted when `None`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicConfigAndQueueMapping {
    /// The topic's configuration.
    pub topic_config: TopicConfig,
    /// `mappingDetail` (`TopicQueueMappingDetail`), static topics only.
    pub mapping_detail: Option<JsonValue>,
}

impl JsonBean for TopicConfigAndQueueMapping {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        self.topic_config
            .write_members(w, self.mapping_detail.as_ref());
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            topic_config: TopicConfig::read_json(value, path)?,
            mapping_detail: m.value("mappingDetail").cloned(),
        })
    }
}
json_body!(TopicConfigAndQueueMapping);

/// `TopicConfigSerializeWrapper` / 5.x `TopicConfigAndMappingSerializeWrapper`:
/// the content of `topics.json` and of GET_ALL_TOPIC_CONFIG.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicConfigSerializeWrapper {
    /// `dataVersion`.
    pub data_version: DataVersion,
    /// `topicConfigTable`: topic name → config.
    pub topic_config_table: BTreeMap<String, TopicConfig>,
    /// `mappingDataVersion` (5.x), omitted when `None`.
    pub mapping_data_version: Option<DataVersion>,
    /// `topicQueueMappingInfoMap` (5.x, static topics), kept opaque.
    pub topic_queue_mapping_info_map: Option<JsonObject>,
    /// `topicQueueMappingDetailMap` (5.x, static topics), kept opaque.
    pub topic_queue_mapping_detail_map: Option<JsonObject>,
}

impl TopicConfigSerializeWrapper {
    /// A 5.x wrapper: the mapping members present and empty, as a 5.x broker
    /// without static topics writes them.
    pub fn with_empty_mappings(
        data_version: DataVersion,
        topic_config_table: BTreeMap<String, TopicConfig>,
    ) -> Self {
        Self {
            data_version,
            topic_config_table,
            mapping_data_version: Some(DataVersion::default()),
            topic_queue_mapping_info_map: Some(JsonObject::new()),
            topic_queue_mapping_detail_map: Some(JsonObject::new()),
        }
    }
}

fn write_opaque(w: &mut JsonWriter<'_>, name: &'static str, object: Option<&JsonObject>) {
    if let Some(object) = object {
        w.member(name);
        write_object(w, object);
    }
}

impl JsonBean for TopicConfigSerializeWrapper {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.member("dataVersion");
        self.data_version.write_json(w);
        if let Some(version) = &self.mapping_data_version {
            w.member("mappingDataVersion");
            version.write_json(w);
        }
        field_str_map(w, "topicConfigTable", &self.topic_config_table, |w, c| {
            c.write_json(w)
        });
        write_opaque(
            w,
            "topicQueueMappingDetailMap",
            self.topic_queue_mapping_detail_map.as_ref(),
        );
        write_opaque(
            w,
            "topicQueueMappingInfoMap",
            self.topic_queue_mapping_info_map.as_ref(),
        );
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        let data_version = match m.value("dataVersion") {
            Some(v) => DataVersion::read_json(v, &m.path_of("dataVersion"))?,
            None => DataVersion::default(),
        };
        let mapping_data_version = match m.value("mappingDataVersion") {
            Some(v) => Some(DataVersion::read_json(v, &m.path_of("mappingDataVersion"))?),
            None => None,
        };
        Ok(Self {
            data_version,
            topic_config_table: read_map(&m, "topicConfigTable", key_text, TopicConfig::read_json)?,
            mapping_data_version,
            topic_queue_mapping_info_map: m.object("topicQueueMappingInfoMap")?.cloned(),
            topic_queue_mapping_detail_map: m.object("topicQueueMappingDetailMap")?.cloned(),
        })
    }
}
json_body!(TopicConfigSerializeWrapper, pretty);

/// REGISTER_BROKER request body (uncompressed JSON form).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterBrokerBody {
    /// `topicConfigSerializeWrapper`.
    pub topic_config_serialize_wrapper: TopicConfigSerializeWrapper,
    /// `filterServerList`.
    pub filter_server_list: Vec<String>,
}

/// First byte of a zlib stream with a 32 KiB window (RFC 1950 `CMF`), the
/// only window Java's `Deflater` uses.
const ZLIB_CMF: u8 = 0x78;

impl RegisterBrokerBody {
    /// Decodes a REGISTER_BROKER body; `compressed` is the request header's
    /// flag. A body that starts like a zlib stream is recognised even when the
    /// flag is false (5.x brokers clear it even after compressing).
    ///
    /// Brokers older than V3_0_11 send a bare `TopicConfigSerializeWrapper`;
    /// it is accepted too.
    ///
    /// # Errors
    ///
    /// [`JsonError::CompressedRegisterBodyUnsupported`] for the compressed
    /// form; parse and member errors otherwise.
    pub fn decode(body: &[u8], compressed: bool) -> Result<Self, JsonError> {
        let first = body.iter().copied().find(|b| !b.is_ascii_whitespace());
        let looks_zlib = body.len() >= 2
            && body[0] == ZLIB_CMF
            && (u16::from(body[0]) << 8 | u16::from(body[1])) % 31 == 0;
        if compressed && first != Some(b'{') || looks_zlib {
            return Err(JsonError::CompressedRegisterBodyUnsupported { size: body.len() });
        }
        let value = parse(body)?;
        let m = Members::of(&value, "")?;
        if m.value("topicConfigSerializeWrapper").is_none() && m.value("topicConfigTable").is_some()
        {
            return Ok(Self {
                topic_config_serialize_wrapper: TopicConfigSerializeWrapper::read_json(&value, "")?,
                filter_server_list: Vec::new(),
            });
        }
        Self::read_json(&value, "")
    }

    /// Appends the uncompressed JSON form to `out`.
    pub fn to_json(&self, out: &mut Vec<u8>, style: super::JsonStyle) {
        super::encode(self, out, style);
    }

    /// [`RegisterBrokerBody::decode`] with the header flag unset: JSON, or a
    /// recognised zlib stream refused with a clear error.
    ///
    /// # Errors
    ///
    /// As [`RegisterBrokerBody::decode`].
    pub fn from_json(body: &[u8]) -> Result<Self, JsonError> {
        Self::decode(body, false)
    }
}

impl JsonBean for RegisterBrokerBody {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_strings(
            w,
            "filterServerList",
            ArrayKind::List,
            &self.filter_server_list,
        );
        w.member("topicConfigSerializeWrapper");
        self.topic_config_serialize_wrapper.write_json(w);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        let wrapper = match m.value("topicConfigSerializeWrapper") {
            Some(v) => TopicConfigSerializeWrapper::read_json(
                v,
                &m.path_of("topicConfigSerializeWrapper"),
            )?,
            None => TopicConfigSerializeWrapper::default(),
        };
        let list_path = m.path_of("filterServerList");
        let filter_server_list = m
            .array("filterServerList")?
            .iter()
            .filter(|v| !matches!(v, JsonValue::Null))
            .map(|v| value_string(v, &list_path))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            topic_config_serialize_wrapper: wrapper,
            filter_server_list,
        })
    }
}

/// What REGISTER_BROKER answers: `haServerAddr` and `masterAddr` travel in
/// the response header, the body is the KV table of namespace
/// `ORDER_TOPIC_CONFIG` (absent when empty).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterBrokerResult {
    /// Header `haServerAddr` (for slaves: the master's HA address).
    pub ha_server_addr: Option<String>,
    /// Header `masterAddr` (for slaves: the live master's address).
    pub master_addr: Option<String>,
    /// The body: `ORDER_TOPIC_CONFIG` entries.
    pub kv_table: KvTable,
}

impl RegisterBrokerResult {
    /// Appends the response body (the KV table), as the name server writes it.
    pub fn body_to_json(&self, out: &mut Vec<u8>, style: super::JsonStyle) {
        self.kv_table.to_json(out, style);
    }

    /// Builds the result from the response header fields and body (an empty
    /// body is an empty table).
    ///
    /// # Errors
    ///
    /// Parse or member errors of a non-empty body.
    pub fn from_parts(
        ha_server_addr: Option<String>,
        master_addr: Option<String>,
        body: &[u8],
    ) -> Result<Self, JsonError> {
        let kv_table = if body.iter().all(u8::is_ascii_whitespace) {
            KvTable::default()
        } else {
            KvTable::from_json(body)?
        };
        Ok(Self {
            ha_server_addr,
            master_addr,
            kv_table,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonStyle;

    fn topic(name: &str) -> TopicConfig {
        TopicConfig {
            topic_name: name.into(),
            read_queue_nums: 4,
            write_queue_nums: 4,
            ..TopicConfig::default()
        }
    }

    #[test]
    fn topic_config_writes_all_members_in_order() {
        let mut config = topic("T");
        config
            .attributes
            .insert("+message.type".into(), "NORMAL".into());
        let mut out = Vec::new();
        config.to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            r#"{"attributes":{"+message.type":"NORMAL"},"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}"#
        );
        assert_eq!(TopicConfig::from_json(&out).unwrap(), config);
    }

    #[test]
    fn topic_config_defaults_absent_members_and_keeps_unknown_filter_types() {
        let config =
            TopicConfig::from_json(br#"{"topicName":"T","topicFilterType":"SQL","order":"true"}"#)
                .unwrap();
        assert_eq!(config.read_queue_nums, 16);
        assert_eq!(config.perm, 6);
        assert!(config.order);
        assert_eq!(
            config.topic_filter_type,
            TopicFilterType::Other("SQL".into())
        );
    }

    #[test]
    fn topic_config_list_and_queue_mapping_have_their_members_in_order() {
        let list = TopicConfigList {
            topic_config_list: vec![topic("A"), topic("B")],
        };
        let mut out = Vec::new();
        list.to_json(&mut out, JsonStyle::Java);
        assert!(out.starts_with(br#"{"topicConfigList":[{"attributes":{},"order":false"#));
        assert_eq!(TopicConfigList::from_json(&out).unwrap(), list);
        let mapping = TopicConfigAndQueueMapping {
            topic_config: topic("T"),
            mapping_detail: Some(
                crate::json::parse(br#"{"bname":"b","hostedQueues":{0:[]}}"#).unwrap(),
            ),
        };
        let mut out = Vec::new();
        mapping.to_json(&mut out, JsonStyle::Java);
        assert!(
            out.starts_with(br#"{"attributes":{},"mappingDetail":{"bname":"b","hostedQueues":{0:[]}},"order":false"#),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(
            TopicConfigAndQueueMapping::from_json(&out).unwrap(),
            mapping
        );
    }

    #[test]
    fn data_version_reads_4x_form_without_state_version() {
        let version =
            DataVersion::from_json(br#"{"counter":3,"timestamp":1700000000000}"#).unwrap();
        assert_eq!(
            version,
            DataVersion {
                timestamp: 1_700_000_000_000,
                counter: 3,
                state_version: 0
            }
        );
    }

    #[test]
    fn topics_json_is_pretty_printed_like_fastjson() {
        let wrapper = TopicConfigSerializeWrapper {
            data_version: DataVersion {
                timestamp: 5,
                counter: 1,
                state_version: 0,
            },
            topic_config_table: BTreeMap::from([("T".to_owned(), topic("T"))]),
            ..Default::default()
        };
        let mut out = Vec::new();
        wrapper.write_pretty(&mut out);
        let expected = "{\n\t\"dataVersion\":{\n\t\t\"counter\":1,\n\t\t\"stateVersion\":0,\n\t\t\"timestamp\":5\n\t},\n\
            \t\"topicConfigTable\":{\n\t\t\"T\":{\n\t\t\t\"attributes\":{},\n\t\t\t\"order\":false,\n\t\t\t\"perm\":6,\n\
            \t\t\t\"readQueueNums\":4,\n\t\t\t\"topicFilterType\":\"SINGLE_TAG\",\n\t\t\t\"topicName\":\"T\",\n\
            \t\t\t\"topicSysFlag\":0,\n\t\t\t\"writeQueueNums\":4\n\t\t}\n\t}\n}";
        assert_eq!(String::from_utf8(out.clone()).unwrap(), expected);
        assert_eq!(
            TopicConfigSerializeWrapper::from_json(&out).unwrap(),
            wrapper
        );
    }

    #[test]
    fn mapping_wrapper_writes_5x_members_in_order() {
        let wrapper = TopicConfigSerializeWrapper::with_empty_mappings(
            DataVersion::default(),
            BTreeMap::new(),
        );
        let mut out = Vec::new();
        wrapper.to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            concat!(
                r#"{"dataVersion":{"counter":0,"stateVersion":0,"timestamp":0},"#,
                r#""mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":0},"topicConfigTable":{},"#,
                r#""topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{}}"#
            )
        );
        assert_eq!(
            TopicConfigSerializeWrapper::from_json(&out).unwrap(),
            wrapper
        );
    }

    #[test]
    fn register_body_round_trips_and_accepts_the_bare_wrapper() {
        let body = RegisterBrokerBody {
            topic_config_serialize_wrapper: TopicConfigSerializeWrapper {
                topic_config_table: BTreeMap::from([("T".to_owned(), topic("T"))]),
                ..Default::default()
            },
            filter_server_list: vec![],
        };
        let mut out = Vec::new();
        body.to_json(&mut out, JsonStyle::Java);
        assert!(out.starts_with(
            br#"{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion""#
        ));
        assert_eq!(RegisterBrokerBody::decode(&out, false).unwrap(), body);
        let mut bare = Vec::new();
        body.topic_config_serialize_wrapper
            .to_json(&mut bare, JsonStyle::Java);
        assert_eq!(RegisterBrokerBody::decode(&bare, false).unwrap(), body);
    }

    #[test]
    fn register_body_refuses_the_compressed_form_clearly() {
        let zlib = [0x78, 0xDA, 0x01, 0x02, 0x03];
        assert_eq!(
            RegisterBrokerBody::decode(&zlib, false),
            Err(JsonError::CompressedRegisterBodyUnsupported { size: 5 })
        );
        assert_eq!(
            RegisterBrokerBody::decode(&zlib, true),
            Err(JsonError::CompressedRegisterBodyUnsupported { size: 5 })
        );
        assert_eq!(
            RegisterBrokerBody::from_json(&zlib),
            Err(JsonError::CompressedRegisterBodyUnsupported { size: 5 })
        );
    }

    #[test]
    fn register_result_reads_an_empty_or_kv_body() {
        let empty = RegisterBrokerResult::from_parts(None, Some("m:1".into()), b"").unwrap();
        assert!(empty.kv_table.table.is_empty());
        let result =
            RegisterBrokerResult::from_parts(None, None, br#"{"table":{"T":"b:4"}}"#).unwrap();
        let mut out = Vec::new();
        result.body_to_json(&mut out, JsonStyle::Java);
        assert_eq!(out, br#"{"table":{"T":"b:4"}}"#);
    }
}
