//! Route and cluster bodies: `TopicRouteData` (GET_ROUTEINFO_BY_TOPIC) and
//! `ClusterInfo` (GET_BROKER_CLUSTER_INFO).
//!
//! ```text
//! TopicRouteData {"brokerDatas":[BrokerData..],"filterServerTable":{addr:[..]},
//!                 "orderTopicConf":"b:4"?,"queueDatas":[QueueData..],"topicQueueMappingByBroker":{..}?}
//! BrokerData     {"brokerAddrs":{0:"ip:port"},"brokerName":..,"cluster":..,
//!                 "enableActingMaster":false,"zoneName":..?}
//! QueueData      {"brokerName":..,"perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}
//! ClusterInfo    {"brokerAddrTable":{name:BrokerData},"clusterAddrTable":{cluster:[name..]}}
//! ```
//!
//! `brokerAddrs` keys are unquoted in [`JsonStyle::Java`] and quoted in
//! [`JsonStyle::Standard`]; pick the route style with
//! [`RouteKeyStyle::for_request`](super::RouteKeyStyle). Both forms parse.
//! `ClusterInfo` is written with unquoted keys by Java (plain `encode()`).
//!
//! # Invariants
//!
//! - Members are written in alphabetical order; `None` members are omitted.
//! - `topicQueueMappingByBroker` (static topics) is carried opaquely.

use std::collections::BTreeMap;

use super::bean::{
    JsonBean, field_int_map, field_list, field_str_map, json_body, read_list, read_map,
    value_string, value_strings, write_object,
};
use super::error::JsonError;
use super::value::{JsonObject, JsonValue, Members, key_i64, key_text};
use super::write::{ArrayKind, JsonWriter};

#[cfg(doc)]
use super::write::JsonStyle;

/// Where a topic's queues live on one broker group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueData {
    /// `brokerName`.
    pub broker_name: String,
    /// `readQueueNums`.
    pub read_queue_nums: i32,
    /// `writeQueueNums`.
    pub write_queue_nums: i32,
    /// `perm` (`PermName` bits: 4 read, 2 write, 1 inherit).
    pub perm: i32,
    /// `topicSysFlag`.
    pub topic_sys_flag: i32,
}

impl JsonBean for QueueData {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_str("brokerName", &self.broker_name);
        w.field_i64("perm", i64::from(self.perm));
        w.field_i64("readQueueNums", i64::from(self.read_queue_nums));
        w.field_i64("topicSysFlag", i64::from(self.topic_sys_flag));
        w.field_i64("writeQueueNums", i64::from(self.write_queue_nums));
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            broker_name: m.string_or_empty("brokerName")?,
            read_queue_nums: m.i32("readQueueNums")?.unwrap_or(0),
            write_queue_nums: m.i32("writeQueueNums")?.unwrap_or(0),
            perm: m.i32("perm")?.unwrap_or(0),
            topic_sys_flag: m.i32("topicSysFlag")?.unwrap_or(0),
        })
    }
}
json_body!(QueueData);

/// The addresses of one broker group (a master and its slaves).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerData {
    /// `cluster`.
    pub cluster: String,
    /// `brokerName`.
    pub broker_name: String,
    /// `brokerAddrs`: broker id (0 = master) → `ip:port`.
    pub broker_addrs: BTreeMap<i64, String>,
    /// `zoneName` (5.x), omitted when `None`.
    pub zone_name: Option<String>,
    /// `enableActingMaster` (5.x).
    pub enable_acting_master: bool,
}

impl JsonBean for BrokerData {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_int_map(w, "brokerAddrs", &self.broker_addrs, |w, addr| {
            w.string(addr)
        });
        w.field_str("brokerName", &self.broker_name);
        w.field_str("cluster", &self.cluster);
        w.field_bool("enableActingMaster", self.enable_acting_master);
        w.field_opt_str("zoneName", self.zone_name.as_deref());
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            cluster: m.string_or_empty("cluster")?,
            broker_name: m.string_or_empty("brokerName")?,
            broker_addrs: read_map(&m, "brokerAddrs", key_i64, value_string)?,
            zone_name: m.string("zoneName")?,
            enable_acting_master: m.bool("enableActingMaster")?.unwrap_or(false),
        })
    }
}
json_body!(BrokerData);

/// GET_ROUTEINFO_BY_TOPIC response body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicRouteData {
    /// `orderTopicConf`: `brokerName:queueNum;...`, only for configured order topics.
    pub order_topic_conf: Option<String>,
    /// `queueDatas` (a Java `List`).
    pub queue_datas: Vec<QueueData>,
    /// `brokerDatas` (a Java `List`).
    pub broker_datas: Vec<BrokerData>,
    /// `filterServerTable`: broker address → filter server addresses; Java writes `{}`.
    pub filter_server_table: BTreeMap<String, Vec<String>>,
    /// `topicQueueMappingByBroker` (static topics), kept opaque.
    pub topic_queue_mapping_by_broker: Option<JsonObject>,
}

impl JsonBean for TopicRouteData {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_list(w, "brokerDatas", ArrayKind::List, &self.broker_datas);
        field_str_map(
            w,
            "filterServerTable",
            &self.filter_server_table,
            |w, servers| {
                w.begin_array(ArrayKind::List, servers.len());
                for server in servers {
                    w.string(server);
                }
                w.end_array();
            },
        );
        w.field_opt_str("orderTopicConf", self.order_topic_conf.as_deref());
        field_list(w, "queueDatas", ArrayKind::List, &self.queue_datas);
        if let Some(mapping) = &self.topic_queue_mapping_by_broker {
            w.member("topicQueueMappingByBroker");
            write_object(w, mapping);
        }
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            order_topic_conf: m.string("orderTopicConf")?,
            queue_datas: read_list(&m, "queueDatas")?,
            broker_datas: read_list(&m, "brokerDatas")?,
            filter_server_table: read_map(&m, "filterServerTable", key_text, value_strings)?,
            topic_queue_mapping_by_broker: m.object("topicQueueMappingByBroker")?.cloned(),
        })
    }
}
json_body!(TopicRouteData);

/// GET_BROKER_CLUSTER_INFO response body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterInfo {
    /// `brokerAddrTable`: broker name → its addresses.
    pub broker_addr_table: BTreeMap<String, BrokerData>,
    /// `clusterAddrTable`: cluster name → broker names (a Java `Set`).
    pub cluster_addr_table: BTreeMap<String, Vec<String>>,
}

impl JsonBean for ClusterInfo {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_str_map(w, "brokerAddrTable", &self.broker_addr_table, |w, data| {
            data.write_json(w)
        });
        field_str_map(
            w,
            "clusterAddrTable",
            &self.cluster_addr_table,
            |w, names| {
                w.begin_array(ArrayKind::Set, names.len());
                for name in names {
                    w.string(name);
                }
                w.end_array();
            },
        );
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            broker_addr_table: read_map(&m, "brokerAddrTable", key_text, BrokerData::read_json)?,
            cluster_addr_table: read_map(&m, "clusterAddrTable", key_text, value_strings)?,
        })
    }
}
json_body!(ClusterInfo);

/// The members of one broker group (5.x `BrokerMemberGroup`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerMemberGroup {
    /// `cluster`.
    pub cluster: String,
    /// `brokerName`.
    pub broker_name: String,
    /// `brokerAddrs`: broker id → address.
    pub broker_addrs: BTreeMap<i64, String>,
}

impl JsonBean for BrokerMemberGroup {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_int_map(w, "brokerAddrs", &self.broker_addrs, |w, addr| {
            w.string(addr)
        });
        w.field_str("brokerName", &self.broker_name);
        w.field_str("cluster", &self.cluster);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            cluster: m.string_or_empty("cluster")?,
            broker_name: m.string_or_empty("brokerName")?,
            broker_addrs: read_map(&m, "brokerAddrs", key_i64, value_string)?,
        })
    }
}
json_body!(BrokerMemberGroup);

/// GET_BROKER_MEMBER_GROUP response body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetBrokerMemberGroupResponseBody {
    /// `brokerMemberGroup`, omitted when `None`.
    pub broker_member_group: Option<BrokerMemberGroup>,
}

impl JsonBean for GetBrokerMemberGroupResponseBody {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        if let Some(group) = &self.broker_member_group {
            w.member("brokerMemberGroup");
            group.write_json(w);
        }
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        let broker_member_group = match m.value("brokerMemberGroup") {
            Some(v) => Some(BrokerMemberGroup::read_json(
                v,
                &m.path_of("brokerMemberGroup"),
            )?),
            None => None,
        };
        Ok(Self {
            broker_member_group,
        })
    }
}
json_body!(GetBrokerMemberGroupResponseBody);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{JsonStyle, RouteKeyStyle};

    const STANDARD: &str = concat!(
        r#"{"brokerDatas":[{"brokerAddrs":{"0":"192.168.0.10:10911","1":"192.168.0.11:10911"},"brokerName":"broker-a","#,
        r#""cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"#,
        r#""queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#
    );

    fn example() -> TopicRouteData {
        TopicRouteData {
            queue_datas: vec![QueueData {
                broker_name: "broker-a".into(),
                read_queue_nums: 4,
                write_queue_nums: 4,
                perm: 6,
                topic_sys_flag: 0,
            }],
            broker_datas: vec![BrokerData {
                cluster: "DefaultCluster".into(),
                broker_name: "broker-a".into(),
                broker_addrs: BTreeMap::from([
                    (0, "192.168.0.10:10911".to_owned()),
                    (1, "192.168.0.11:10911".to_owned()),
                ]),
                zone_name: None,
                enable_acting_master: false,
            }],
            ..TopicRouteData::default()
        }
    }

    fn legacy() -> String {
        STANDARD
            .replace(r#"{"0":"#, "{0:")
            .replace(r#","1":"#, ",1:")
    }

    #[test]
    fn route_data_standard_example_parses_and_reencodes_byte_for_byte() {
        let route = TopicRouteData::from_json(STANDARD.as_bytes()).unwrap();
        assert_eq!(route, example());
        let mut out = Vec::new();
        route.to_json(&mut out, RouteKeyStyle::for_request(401, false));
        assert_eq!(String::from_utf8(out).unwrap(), STANDARD);
    }

    #[test]
    fn route_data_legacy_example_parses_and_reencodes_byte_for_byte() {
        let legacy = legacy();
        assert!(legacy.contains(r#"{0:"192.168.0.10:10911",1:"192.168.0.11:10911"}"#));
        let route = TopicRouteData::from_json(legacy.as_bytes()).unwrap();
        assert_eq!(route, example());
        let mut out = Vec::new();
        route.to_json(&mut out, RouteKeyStyle::for_request(400, false));
        assert_eq!(String::from_utf8(out).unwrap(), legacy);
    }

    #[test]
    fn route_data_keeps_optional_members() {
        let mut route = example();
        route.order_topic_conf = Some("broker-a:4".into());
        route.broker_datas[0].zone_name = Some("z1".into());
        route
            .filter_server_table
            .insert("10.0.0.1:10911".into(), vec!["10.0.0.1:30000".into()]);
        let mut out = Vec::new();
        route.to_json(&mut out, JsonStyle::Java);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(
            text.contains(r#""enableActingMaster":false,"zoneName":"z1"}"#),
            "{text}"
        );
        assert!(
            text.contains(r#""orderTopicConf":"broker-a:4","queueDatas""#),
            "{text}"
        );
        assert_eq!(TopicRouteData::from_json(&out).unwrap(), route);
    }

    #[test]
    fn route_data_reads_go_and_rust_client_shapes() {
        // Members in declaration order, explicit nulls, numbers as strings.
        let text = br#"{"orderTopicConf":null,"queueDatas":[{"brokerName":"broker-a","readQueueNums":"4",
            "writeQueueNums":4,"perm":6,"topicSynFlag":0}],"brokerDatas":[{"cluster":"DefaultCluster",
            "brokerName":"broker-a","brokerAddrs":{"0":"192.168.0.10:10911","1":"192.168.0.11:10911"}}],
            "filterServerTable":null}"#;
        let route = TopicRouteData::from_json(text).unwrap();
        assert_eq!(route, example());
    }

    #[test]
    fn route_data_reports_a_bad_broker_id_key() {
        let text = br#"{"brokerDatas":[{"brokerAddrs":{"master":"a:1"}}]}"#;
        assert_eq!(
            TopicRouteData::from_json(text),
            Err(JsonError::InvalidKey {
                member: "brokerDatas.brokerAddrs".into(),
                key: "master".into(),
                expected: "an integer"
            })
        );
    }

    #[test]
    fn broker_member_group_body_round_trips_with_unquoted_ids() {
        let body = GetBrokerMemberGroupResponseBody {
            broker_member_group: Some(BrokerMemberGroup {
                cluster: "c".into(),
                broker_name: "b".into(),
                broker_addrs: BTreeMap::from([(0, "a:1".to_owned())]),
            }),
        };
        let mut out = Vec::new();
        body.to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            out,
            br#"{"brokerMemberGroup":{"brokerAddrs":{0:"a:1"},"brokerName":"b","cluster":"c"}}"#
        );
        assert_eq!(
            GetBrokerMemberGroupResponseBody::from_json(&out).unwrap(),
            body
        );
    }

    #[test]
    fn cluster_info_example_parses_and_reencodes_with_unquoted_keys() {
        let text = concat!(
            r#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"192.168.0.10:10911"},"brokerName":"broker-a","#,
            r#""cluster":"DefaultCluster","enableActingMaster":false}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}"#
        );
        let info = ClusterInfo::from_json(text.as_bytes()).unwrap();
        assert_eq!(
            info.cluster_addr_table["DefaultCluster"],
            vec!["broker-a".to_owned()]
        );
        assert_eq!(
            info.broker_addr_table["broker-a"].broker_addrs[&0],
            "192.168.0.10:10911"
        );
        let mut out = Vec::new();
        info.to_json(&mut out, JsonStyle::Java);
        assert_eq!(String::from_utf8(out).unwrap(), text);
        let quoted = text.replace("{0:", r#"{"0":"#);
        assert_eq!(ClusterInfo::from_json(quoted.as_bytes()).unwrap(), info);
    }
}
