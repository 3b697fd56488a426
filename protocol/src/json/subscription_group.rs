//! Subscription group bodies: `SubscriptionGroupConfig`
//! (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, GET_SUBSCRIPTIONGROUP_CONFIG) and
//! `SubscriptionGroupWrapper` (GET_ALL_SUBSCRIPTIONGROUP_CONFIG and
//! `config/subscriptionGroup.json`).
//!
//! ```text
//! {"attributes":{},"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,
//!  "consumeFromMinEnable":true,"consumeMessageOrderly":false,"consumeTimeoutMinute":15,
//!  "groupName":"g","groupRetryPolicy":{"type":"CUSTOMIZED"},"groupSysFlag":0,
//!  "notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,"retryQueueNums":1,
//!  "whichBrokerWhenConsumeSlowly":1}
//! wrapper {"dataVersion":..,"forbiddenTable":{group:{topic:int}}?,"subscriptionGroupTable":{group:config}}
//! ```
//!
//! `groupRetryPolicy` and `subscriptionDataSet` (5.x) are carried as opaque
//! values.
//!
//! # Invariants
//!
//! - Members are written in alphabetical order; defaults are Java's.

use std::collections::BTreeMap;

use super::bean::{
    JsonBean, field_list, field_str_map, json_body, read_list, read_map, value_i64, write_value,
};
use super::error::JsonError;
use super::register::DataVersion;
use super::value::{JsonObject, JsonValue, Members, key_text};
use super::write::{ArrayKind, JsonWriter};

/// A consumer group's configuration on a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionGroupConfig {
    /// `groupName`.
    pub group_name: String,
    /// `consumeEnable` (default true).
    pub consume_enable: bool,
    /// `consumeFromMinEnable` (default true).
    pub consume_from_min_enable: bool,
    /// `consumeBroadcastEnable` (default true).
    pub consume_broadcast_enable: bool,
    /// `consumeMessageOrderly` (5.x, default false).
    pub consume_message_orderly: bool,
    /// `retryQueueNums` (default 1).
    pub retry_queue_nums: i32,
    /// `retryMaxTimes` (default 16).
    pub retry_max_times: i32,
    /// `brokerId` (default 0): which broker to pull from normally.
    pub broker_id: i64,
    /// `whichBrokerWhenConsumeSlowly` (default 1).
    pub which_broker_when_consume_slowly: i64,
    /// `notifyConsumerIdsChangedEnable` (default true).
    pub notify_consumer_ids_changed_enable: bool,
    /// `groupSysFlag` (5.x, default 0).
    pub group_sys_flag: i32,
    /// `consumeTimeoutMinute` (5.x, default 15).
    pub consume_timeout_minute: i32,
    /// `groupRetryPolicy` (5.x, default `{"type":"CUSTOMIZED"}`), opaque.
    pub group_retry_policy: Option<JsonValue>,
    /// `subscriptionDataSet` (5.x static subscriptions), opaque, omitted when `None`.
    pub subscription_data_set: Option<JsonValue>,
    /// `attributes` (5.x).
    pub attributes: BTreeMap<String, String>,
}

/// Java's default `groupRetryPolicy`.
fn default_retry_policy() -> JsonValue {
    let mut policy = JsonObject::new();
    policy.push("type", JsonValue::String("CUSTOMIZED".to_owned()));
    JsonValue::Object(policy)
}

impl SubscriptionGroupConfig {
    /// A group with Java's defaults, as a broker auto-creates it.
    pub fn new(group_name: &str) -> Self {
        Self {
            group_name: group_name.to_owned(),
            ..Self::default()
        }
    }
}

impl Default for SubscriptionGroupConfig {
    fn default() -> Self {
        Self {
            group_name: String::new(),
            consume_enable: true,
            consume_from_min_enable: true,
            consume_broadcast_enable: true,
            consume_message_orderly: false,
            retry_queue_nums: 1,
            retry_max_times: 16,
            broker_id: 0,
            which_broker_when_consume_slowly: 1,
            notify_consumer_ids_changed_enable: true,
            group_sys_flag: 0,
            consume_timeout_minute: 15,
            group_retry_policy: Some(default_retry_policy()),
            subscription_data_set: None,
            attributes: BTreeMap::new(),
        }
    }
}

impl JsonBean for SubscriptionGroupConfig {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_str_map(w, "attributes", &self.attributes, |w, v| w.string(v));
        w.field_i64("brokerId", self.broker_id);
        w.field_bool("consumeBroadcastEnable", self.consume_broadcast_enable);
        w.field_bool("consumeEnable", self.consume_enable);
        w.field_bool("consumeFromMinEnable", self.consume_from_min_enable);
        w.field_bool("consumeMessageOrderly", self.consume_message_orderly);
        w.field_i64(
            "consumeTimeoutMinute",
            i64::from(self.consume_timeout_minute),
        );
        w.field_str("groupName", &self.group_name);
        if let Some(policy) = &self.group_retry_policy {
            w.member("groupRetryPolicy");
            write_value(w, policy);
        }
        w.field_i64("groupSysFlag", i64::from(self.group_sys_flag));
        w.field_bool(
            "notifyConsumerIdsChangedEnable",
            self.notify_consumer_ids_changed_enable,
        );
        w.field_i64("retryMaxTimes", i64::from(self.retry_max_times));
        w.field_i64("retryQueueNums", i64::from(self.retry_queue_nums));
        if let Some(set) = &self.subscription_data_set {
            w.member("subscriptionDataSet");
            write_value(w, set);
        }
        w.field_i64(
            "whichBrokerWhenConsumeSlowly",
            self.which_broker_when_consume_slowly,
        );
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        let d = Self::default();
        Ok(Self {
            group_name: m.string_or_empty("groupName")?,
            consume_enable: m.bool("consumeEnable")?.unwrap_or(d.consume_enable),
            consume_from_min_enable: m
                .bool("consumeFromMinEnable")?
                .unwrap_or(d.consume_from_min_enable),
            consume_broadcast_enable: m
                .bool("consumeBroadcastEnable")?
                .unwrap_or(d.consume_broadcast_enable),
            consume_message_orderly: m
                .bool("consumeMessageOrderly")?
                .unwrap_or(d.consume_message_orderly),
            retry_queue_nums: m.i32("retryQueueNums")?.unwrap_or(d.retry_queue_nums),
            retry_max_times: m.i32("retryMaxTimes")?.unwrap_or(d.retry_max_times),
            broker_id: m.i64("brokerId")?.unwrap_or(d.broker_id),
            which_broker_when_consume_slowly: m
                .i64("whichBrokerWhenConsumeSlowly")?
                .unwrap_or(d.which_broker_when_consume_slowly),
            notify_consumer_ids_changed_enable: m
                .bool("notifyConsumerIdsChangedEnable")?
                .unwrap_or(d.notify_consumer_ids_changed_enable),
            group_sys_flag: m.i32("groupSysFlag")?.unwrap_or(d.group_sys_flag),
            consume_timeout_minute: m
                .i32("consumeTimeoutMinute")?
                .unwrap_or(d.consume_timeout_minute),
            group_retry_policy: m
                .value("groupRetryPolicy")
                .cloned()
                .or(d.group_retry_policy),
            subscription_data_set: m.value("subscriptionDataSet").cloned(),
            attributes: m.string_map("attributes")?,
        })
    }
}
json_body!(SubscriptionGroupConfig);

/// `SubscriptionGroupWrapper`: all groups of a broker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscriptionGroupWrapper {
    /// `dataVersion`.
    pub data_version: DataVersion,
    /// `subscriptionGroupTable`: group → config.
    pub subscription_group_table: BTreeMap<String, SubscriptionGroupConfig>,
    /// `forbiddenTable` (5.x): group → topic → forbidden bits; omitted when `None`.
    pub forbidden_table: Option<BTreeMap<String, BTreeMap<String, i32>>>,
}

fn read_forbidden(value: &JsonValue, path: &str) -> Result<BTreeMap<String, i32>, JsonError> {
    let object = value.as_object().ok_or_else(|| JsonError::WrongType {
        member: path.to_owned(),
        expected: "an object",
    })?;
    let mut map = BTreeMap::new();
    for (key, value) in &object.members {
        let bits = value_i64(value, path)?;
        let bits = i32::try_from(bits).map_err(|_| JsonError::WrongType {
            member: path.to_owned(),
            expected: "a 32-bit integer",
        })?;
        map.insert(key_text(key, path)?, bits);
    }
    Ok(map)
}

impl JsonBean for SubscriptionGroupWrapper {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.member("dataVersion");
        self.data_version.write_json(w);
        if let Some(forbidden) = &self.forbidden_table {
            field_str_map(w, "forbiddenTable", forbidden, |w, topics| {
                w.begin_map();
                for (topic, bits) in topics {
                    w.map_key_str(topic);
                    w.i64(i64::from(*bits));
                }
                w.end_map();
            });
        }
        field_str_map(
            w,
            "subscriptionGroupTable",
            &self.subscription_group_table,
            |w, c| c.write_json(w),
        );
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        let data_version = match m.value("dataVersion") {
            Some(v) => DataVersion::read_json(v, &m.path_of("dataVersion"))?,
            None => DataVersion::default(),
        };
        let forbidden_table = match m.value("forbiddenTable") {
            Some(_) => Some(read_map(&m, "forbiddenTable", key_text, read_forbidden)?),
            None => None,
        };
        Ok(Self {
            data_version,
            subscription_group_table: read_map(
                &m,
                "subscriptionGroupTable",
                key_text,
                SubscriptionGroupConfig::read_json,
            )?,
            forbidden_table,
        })
    }
}
json_body!(SubscriptionGroupWrapper, pretty);

/// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST request body (`SubscriptionGroupList`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscriptionGroupList {
    /// `groupConfigList` (a Java `List`).
    pub group_config_list: Vec<SubscriptionGroupConfig>,
}

impl JsonBean for SubscriptionGroupList {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_list(
            w,
            "groupConfigList",
            ArrayKind::List,
            &self.group_config_list,
        );
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            group_config_list: read_list(&m, "groupConfigList")?,
        })
    }
}
json_body!(SubscriptionGroupList);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonStyle;

    #[test]
    fn default_group_config_has_java_defaults_in_member_order() {
        let mut out = Vec::new();
        SubscriptionGroupConfig::new("g").to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            concat!(
                r#"{"attributes":{},"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,"#,
                r#""consumeFromMinEnable":true,"consumeMessageOrderly":false,"consumeTimeoutMinute":15,"#,
                r#""groupName":"g","groupRetryPolicy":{"type":"CUSTOMIZED"},"groupSysFlag":0,"#,
                r#""notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,"retryQueueNums":1,"#,
                r#""whichBrokerWhenConsumeSlowly":1}"#
            )
        );
    }

    #[test]
    fn group_config_from_4x_mqadmin_gets_defaults_for_absent_members() {
        let config = SubscriptionGroupConfig::from_json(
            br#"{"groupName":"g","retryMaxTimes":"3","consumeEnable":"false","brokerId":1}"#,
        )
        .unwrap();
        assert_eq!(config.retry_max_times, 3);
        assert!(!config.consume_enable);
        assert_eq!(config.broker_id, 1);
        assert_eq!(config.retry_queue_nums, 1);
        assert_eq!(config.consume_timeout_minute, 15);
        assert_eq!(config.group_retry_policy, Some(default_retry_policy()));
    }

    #[test]
    fn group_list_round_trips() {
        let list = SubscriptionGroupList {
            group_config_list: vec![
                SubscriptionGroupConfig::new("a"),
                SubscriptionGroupConfig::new("b"),
            ],
        };
        let mut out = Vec::new();
        list.to_json(&mut out, JsonStyle::Java);
        assert!(out.starts_with(br#"{"groupConfigList":[{"attributes":{}"#));
        assert_eq!(SubscriptionGroupList::from_json(&out).unwrap(), list);
    }

    #[test]
    fn wrapper_round_trips_pretty_with_forbidden_table() {
        let wrapper = SubscriptionGroupWrapper {
            data_version: DataVersion {
                timestamp: 1,
                counter: 2,
                state_version: 0,
            },
            subscription_group_table: BTreeMap::from([(
                "g".to_owned(),
                SubscriptionGroupConfig::new("g"),
            )]),
            forbidden_table: Some(BTreeMap::from([(
                "g".to_owned(),
                BTreeMap::from([("T".to_owned(), 1)]),
            )])),
        };
        let mut out = Vec::new();
        wrapper.write_pretty(&mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(
            text.contains("\t\"forbiddenTable\":{\n\t\t\"g\":{\n\t\t\t\"T\":1\n\t\t}\n\t},"),
            "{text}"
        );
        assert_eq!(SubscriptionGroupWrapper::from_json(&out).unwrap(), wrapper);
    }
}
