//! Config files with integer-keyed maps: `config/consumerOffset.json`,
//! `config/delayOffset.json`, and the name server's `kvConfig.json`.
//!
//! ```text
//! consumerOffset.json {"dataVersion":..?,"offsetTable":{"<topic>@<group>":{0:250,1:250}}}
//! delayOffset.json    {"dataVersion":..?,"offsetTable":{1:12,2:0}}
//! kvConfig.json       {"configTable":{namespace:{key:value}}}
//! ```
//!
//! Integer keys are unquoted, as Java writes them; quoted keys are read too.
//! `consumerOffset.json`'s derived `groupTopicMap` member (from a getter of
//! Java's `ConsumerOffsetManager`) is ignored on read and not written.
//!
//! # Invariants
//!
//! - Members are written in alphabetical order; `write_pretty` gives the
//!   bytes Java's `ConfigManager.persist` writes (fastjson `PrettyFormat`).

use std::collections::BTreeMap;

use super::bean::{JsonBean, field_int_map, field_str_map, json_body, read_map, value_i64};
use super::error::JsonError;
use super::register::DataVersion;
use super::value::{JsonValue, Members, key_i32, key_text, string_map_of};
use super::write::JsonWriter;

fn read_data_version(m: &Members<'_>) -> Result<Option<DataVersion>, JsonError> {
    match m.value("dataVersion") {
        Some(v) => Ok(Some(DataVersion::read_json(v, &m.path_of("dataVersion"))?)),
        None => Ok(None),
    }
}

fn write_data_version(w: &mut JsonWriter<'_>, version: Option<&DataVersion>) {
    if let Some(version) = version {
        w.member("dataVersion");
        version.write_json(w);
    }
}

fn read_queue_offsets(value: &JsonValue, path: &str) -> Result<BTreeMap<i32, i64>, JsonError> {
    let object = value.as_object().ok_or_else(|| JsonError::WrongType {
        member: path.to_owned(),
        expected: "an object",
    })?;
    let mut map = BTreeMap::new();
    for (key, offset) in &object.members {
        if matches!(offset, JsonValue::Null) {
            continue;
        }
        map.insert(key_i32(key, path)?, value_i64(offset, path)?);
    }
    Ok(map)
}

/// `consumerOffset.json`, also the GET_ALL_CONSUMER_OFFSET body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerOffsetFile {
    /// `offsetTable`: `topic@group` → queue id → committed offset.
    pub offset_table: BTreeMap<String, BTreeMap<i32, i64>>,
    /// `dataVersion` (5.x), omitted when `None`.
    pub data_version: Option<DataVersion>,
}

impl JsonBean for ConsumerOffsetFile {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        write_data_version(w, self.data_version.as_ref());
        field_str_map(w, "offsetTable", &self.offset_table, |w, queues| {
            w.begin_map();
            for (queue_id, offset) in queues {
                w.map_key_i64(i64::from(*queue_id));
                w.i64(*offset);
            }
            w.end_map();
        });
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            offset_table: read_map(&m, "offsetTable", key_text, read_queue_offsets)?,
            data_version: read_data_version(&m)?,
        })
    }
}
json_body!(ConsumerOffsetFile, pretty);

/// `delayOffset.json`, also the GET_ALL_DELAY_OFFSET body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DelayOffsetFile {
    /// `offsetTable`: delay level → consume queue offset.
    pub offset_table: BTreeMap<i32, i64>,
    /// `dataVersion` (5.x), omitted when `None`.
    pub data_version: Option<DataVersion>,
}

impl JsonBean for DelayOffsetFile {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        write_data_version(w, self.data_version.as_ref());
        field_int_map(w, "offsetTable", &self.offset_table, |w, offset| {
            w.i64(*offset)
        });
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        let offset_table = match m.value("offsetTable") {
            Some(v) => read_queue_offsets(v, &m.path_of("offsetTable"))?,
            None => BTreeMap::new(),
        };
        Ok(Self {
            offset_table,
            data_version: read_data_version(&m)?,
        })
    }
}
json_body!(DelayOffsetFile, pretty);

/// The name server's `kvConfig.json`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KvConfigFile {
    /// `configTable`: namespace → key → value.
    pub config_table: BTreeMap<String, BTreeMap<String, String>>,
}

impl JsonBean for KvConfigFile {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_str_map(w, "configTable", &self.config_table, |w, table| {
            w.begin_map();
            for (key, value) in table {
                w.map_key_str(key);
                w.string(value);
            }
            w.end_map();
        });
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        let config_table = read_map(&m, "configTable", key_text, string_map_of)?;
        Ok(Self { config_table })
    }
}
json_body!(KvConfigFile, pretty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonStyle;

    #[test]
    fn consumer_offset_json_with_unquoted_integer_keys_parses_and_reencodes() {
        let text = concat!(
            "{\n\t\"offsetTable\":{\n",
            "\t\t\"%RETRY%g@g\":{0:0\n\t\t},\n",
            "\t\t\"TopicTest@g\":{0:250,1:250,2:250,3:249\n\t\t}\n",
            "\t}\n}"
        );
        let file = ConsumerOffsetFile::from_json(text.as_bytes()).unwrap();
        assert_eq!(file.offset_table["TopicTest@g"][&3], 249);
        let mut out = Vec::new();
        file.write_pretty(&mut out);
        assert_eq!(String::from_utf8(out).unwrap(), text);
        let mut compact = Vec::new();
        file.to_json(&mut compact, JsonStyle::Java);
        assert_eq!(
            String::from_utf8(compact).unwrap(),
            r#"{"offsetTable":{"%RETRY%g@g":{0:0},"TopicTest@g":{0:250,1:250,2:250,3:249}}}"#
        );
    }

    #[test]
    fn consumer_offset_json_ignores_group_topic_map_and_reads_quoted_keys() {
        let text = br#"{"dataVersion":{"counter":1,"timestamp":2},"groupTopicMap":{"g":["T"]},
            "offsetTable":{"T@g":{"0":5}}}"#;
        let file = ConsumerOffsetFile::from_json(text).unwrap();
        assert_eq!(file.offset_table["T@g"][&0], 5);
        assert_eq!(file.data_version.map(|v| v.counter), Some(1));
    }

    #[test]
    fn delay_offset_json_round_trips_pretty() {
        let file = DelayOffsetFile {
            offset_table: BTreeMap::from([(1, 12), (2, 0)]),
            data_version: None,
        };
        let mut out = Vec::new();
        file.write_pretty(&mut out);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "{\n\t\"offsetTable\":{1:12,2:0\n\t}\n}"
        );
        assert_eq!(DelayOffsetFile::from_json(&out).unwrap(), file);
    }

    #[test]
    fn kv_config_json_round_trips_pretty() {
        let file = KvConfigFile {
            config_table: BTreeMap::from([(
                "ORDER_TOPIC_CONFIG".to_owned(),
                BTreeMap::from([("T".to_owned(), "b:4".to_owned())]),
            )]),
        };
        let mut out = Vec::new();
        file.write_pretty(&mut out);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "{\n\t\"configTable\":{\n\t\t\"ORDER_TOPIC_CONFIG\":{\n\t\t\t\"T\":\"b:4\"\n\t\t}\n\t}\n}"
        );
        assert_eq!(KvConfigFile::from_json(&out).unwrap(), file);
    }
}
