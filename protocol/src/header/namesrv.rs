//! Name server headers (protocol reference 2.3.18): GET_ROUTEINFO_BY_TOPIC
//! (105), REGISTER_BROKER (103), UNREGISTER_BROKER (104), the KV config
//! codes (100, 101, 102, 219), DELETE_TOPIC_IN_NAMESRV (216),
//! GET_TOPICS_BY_CLUSTER (224), WIPE/ADD_WRITE_PERM_OF_BROKER (205/327),
//! QUERY_DATA_VERSION (322). GET_BROKER_CLUSTER_INFO (106) and
//! GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) have no header.
//!
//! # Invariants
//!
//! - Primitives `compressed` and `bodyCrc32` are always written, as Java writes primitives.

use super::custom_header;

/// REGISTER_BROKER ext key carrying the broker's zone.
pub const ZONE_NAME: &str = "__ZONE_NAME";

custom_header! {
    /// `GetRouteInfoRequestHeader`.
    pub struct GetRouteInfoRequestHeader {
        /// `topic`.
        topic: required String = "topic",
        /// `acceptStandardJsonOnly`: quote numeric map keys whatever the version.
        accept_standard_json_only: optional bool = "acceptStandardJsonOnly",
    }
}

custom_header! {
    /// `RegisterBrokerRequestHeader`.
    pub struct RegisterBrokerRequestHeader {
        /// `brokerName`.
        broker_name: required String = "brokerName",
        /// `brokerAddr`: `ip:port`.
        broker_addr: required String = "brokerAddr",
        /// `clusterName`.
        cluster_name: required String = "clusterName",
        /// `haServerAddr`: `ip:haPort`.
        ha_server_addr: required String = "haServerAddr",
        /// `brokerId`: 0 = master.
        broker_id: required i64 = "brokerId",
        /// `heartbeatTimeoutMillis`.
        heartbeat_timeout_millis: optional i64 = "heartbeatTimeoutMillis",
        /// `enableActingMaster`.
        enable_acting_master: optional bool = "enableActingMaster",
        /// `compressed` (Java primitive): the body is compressed.
        compressed: primitive bool = "compressed" => false,
        /// `bodyCrc32`: 0 = do not check, else CRC32 & 0x7FFFFFFF of the body.
        body_crc32: primitive i32 = "bodyCrc32" => 0,
        /// `__ZONE_NAME` ext key.
        zone_name: optional String = "__ZONE_NAME",
    }
}

custom_header! {
    /// `RegisterBrokerResponseHeader`.
    pub struct RegisterBrokerResponseHeader {
        /// `haServerAddr`.
        ha_server_addr: optional String = "haServerAddr",
        /// `masterAddr`: filled for slaves when the master is alive.
        master_addr: optional String = "masterAddr",
    }
}

custom_header! {
    /// `UnRegisterBrokerRequestHeader`.
    pub struct UnregisterBrokerRequestHeader {
        /// `brokerName`.
        broker_name: required String = "brokerName",
        /// `brokerAddr`.
        broker_addr: required String = "brokerAddr",
        /// `clusterName`.
        cluster_name: required String = "clusterName",
        /// `brokerId`.
        broker_id: required i64 = "brokerId",
    }
}

custom_header! {
    /// `QueryDataVersionRequestHeader`.
    pub struct QueryDataVersionRequestHeader {
        /// `brokerName`.
        broker_name: required String = "brokerName",
        /// `brokerAddr`.
        broker_addr: required String = "brokerAddr",
        /// `clusterName`.
        cluster_name: required String = "clusterName",
        /// `brokerId`.
        broker_id: required i64 = "brokerId",
    }
}

custom_header! {
    /// `QueryDataVersionResponseHeader`.
    pub struct QueryDataVersionResponseHeader {
        /// `changed`.
        changed: required bool = "changed",
    }
}

custom_header! {
    /// `PutKVConfigRequestHeader`.
    pub struct PutKvConfigRequestHeader {
        /// `namespace`.
        namespace: required String = "namespace",
        /// `key`.
        key: required String = "key",
        /// `value`.
        value: required String = "value",
    }
}

custom_header! {
    /// `GetKVConfigRequestHeader`; also the DELETE_KV_CONFIG header.
    pub struct GetKvConfigRequestHeader {
        /// `namespace`.
        namespace: required String = "namespace",
        /// `key`.
        key: required String = "key",
    }
}

/// DELETE_KV_CONFIG (102) has the same fields as GET_KV_CONFIG.
pub type DeleteKvConfigRequestHeader = GetKvConfigRequestHeader;

custom_header! {
    /// `GetKVConfigResponseHeader`.
    pub struct GetKvConfigResponseHeader {
        /// `value`.
        value: optional String = "value",
    }
}

custom_header! {
    /// `GetKVListByNamespaceRequestHeader`.
    pub struct GetKvListByNamespaceRequestHeader {
        /// `namespace`.
        namespace: required String = "namespace",
    }
}

custom_header! {
    /// `DeleteTopicFromNamesrvRequestHeader`.
    pub struct DeleteTopicFromNamesrvRequestHeader {
        /// `topic`.
        topic: required String = "topic",
        /// `clusterName`.
        cluster_name: optional String = "clusterName",
    }
}

custom_header! {
    /// `GetTopicsByClusterRequestHeader`.
    pub struct GetTopicsByClusterRequestHeader {
        /// `cluster`.
        cluster: required String = "cluster",
    }
}

custom_header! {
    /// `WipeWritePermOfBrokerRequestHeader`; also ADD_WRITE_PERM_OF_BROKER's.
    pub struct WipeWritePermOfBrokerRequestHeader {
        /// `brokerName`.
        broker_name: required String = "brokerName",
    }
}

/// ADD_WRITE_PERM_OF_BROKER (327) has the same request field.
pub type AddWritePermOfBrokerRequestHeader = WipeWritePermOfBrokerRequestHeader;

custom_header! {
    /// `WipeWritePermOfBrokerResponseHeader`.
    pub struct WipeWritePermOfBrokerResponseHeader {
        /// `wipeTopicCount`.
        wipe_topic_count: required i32 = "wipeTopicCount",
    }
}

custom_header! {
    /// `AddWritePermOfBrokerResponseHeader`.
    pub struct AddWritePermOfBrokerResponseHeader {
        /// `addTopicCount`.
        add_topic_count: required i32 = "addTopicCount",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::ExtFields;
    use crate::header::CustomHeader;

    #[test]
    fn register_broker_reads_primitives_and_zone() {
        let ext: ExtFields = [
            ("brokerName", "broker-a"),
            ("brokerAddr", "10.0.0.1:10911"),
            ("clusterName", "DefaultCluster"),
            ("haServerAddr", "10.0.0.1:10912"),
            ("brokerId", "0"),
            ("compressed", "true"),
            ("bodyCrc32", "12345"),
            (ZONE_NAME, "z1"),
        ]
        .into_iter()
        .collect();
        let header = RegisterBrokerRequestHeader::from_ext(&ext).unwrap();
        assert!(header.compressed);
        assert_eq!(header.body_crc32, 12345);
        assert_eq!(header.zone_name.as_deref(), Some("z1"));
        assert_eq!(
            RegisterBrokerRequestHeader::from_ext(&header.to_ext_fields()).unwrap(),
            header
        );
    }

    #[test]
    fn route_request_reads_topic() {
        let ext: ExtFields = [("topic", "TopicTest")].into_iter().collect();
        let header = GetRouteInfoRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.topic, "TopicTest");
        assert_eq!(header.accept_standard_json_only, None);
        assert!(GetRouteInfoRequestHeader::from_ext(&ExtFields::new()).is_err());
    }
}
