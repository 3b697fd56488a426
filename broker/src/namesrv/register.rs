//! The broker side of registration: REGISTER_BROKER and UNREGISTER_BROKER
//! requests as a Java 5.x broker sends them (`BrokerOuterAPI`), so that a
//! ringmq broker registers with Apache RocketMQ's name server as well as
//! with its own, and the reading of the answer.
//!
//! ```text
//! REGISTER_BROKER (103)
//!   extFields: brokerAddr, brokerId, brokerName, clusterName, haServerAddr,
//!              compressed=false, bodyCrc32, [heartbeatTimeoutMillis],
//!              [enableActingMaster], [__ZONE_NAME]
//!   body:      {"filterServerList":[],"topicConfigSerializeWrapper":
//!               {"dataVersion":..,"mappingDataVersion":..,"topicConfigTable":{..},
//!                "topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{}}}
//! ```
//!
//! # Invariants
//!
//! - `bodyCrc32` is the masked CRC-32 of exactly the body bytes sent.

use std::collections::BTreeMap;

use bytes::Bytes;
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{
    CustomHeader, RegisterBrokerRequestHeader, RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
};
use ringmq_protocol::json::{
    DataVersion, JsonError, JsonStyle, RegisterBrokerBody, RegisterBrokerResult, TopicConfig,
    TopicConfigSerializeWrapper,
};

use super::handler::body_crc32;
use crate::config::BrokerConfig;

/// Who is registering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerIdentity {
    /// `brokerClusterName`.
    pub cluster_name: String,
    /// `brokerName`.
    pub broker_name: String,
    /// `brokerId` (0 = master).
    pub broker_id: i64,
    /// `brokerIP1:listenPort`.
    pub broker_addr: String,
    /// `brokerIP2:haListenPort`.
    pub ha_server_addr: String,
    /// Sent as `heartbeatTimeoutMillis` when set (Java sends it only in
    /// acting-master mode; name servers default to 120 s).
    pub heartbeat_timeout_ms: Option<i64>,
    /// Sent as `enableActingMaster`; a 5.x broker always sends it.
    pub enable_acting_master: bool,
    /// Sent as `__ZONE_NAME` when set.
    pub zone_name: Option<String>,
}

impl BrokerIdentity {
    /// The identity a broker with `config` registers under: its cluster,
    /// name and id, `brokerIP1:listenPort` and `brokerIP2:haListenPort`,
    /// the name server's default heartbeat timeout, no acting master.
    pub fn from_config(config: &BrokerConfig) -> Self {
        Self {
            cluster_name: config.broker_cluster_name.clone(),
            broker_name: config.broker_name.clone(),
            broker_id: config.broker_id,
            broker_addr: config.broker_addr(),
            ha_server_addr: config.ha_server_addr(),
            heartbeat_timeout_ms: None,
            enable_acting_master: false,
            zone_name: None,
        }
    }
}

/// The REGISTER_BROKER request for `topic_config_table` at `data_version`.
pub fn register_broker_request(
    identity: &BrokerIdentity,
    data_version: DataVersion,
    topic_config_table: &BTreeMap<String, TopicConfig>,
) -> RemotingCommand {
    let body = RegisterBrokerBody {
        topic_config_serialize_wrapper: TopicConfigSerializeWrapper::with_empty_mappings(
            data_version,
            topic_config_table.clone(),
        ),
        filter_server_list: Vec::new(),
    };
    let mut out = Vec::new();
    body.to_json(&mut out, JsonStyle::Java);
    let header = RegisterBrokerRequestHeader {
        broker_name: identity.broker_name.clone(),
        broker_addr: identity.broker_addr.clone(),
        cluster_name: identity.cluster_name.clone(),
        ha_server_addr: identity.ha_server_addr.clone(),
        broker_id: identity.broker_id,
        heartbeat_timeout_millis: identity.heartbeat_timeout_ms,
        enable_acting_master: Some(identity.enable_acting_master),
        compressed: false,
        body_crc32: body_crc32(&out),
        zone_name: identity.zone_name.clone(),
    };
    RemotingCommand::new_request(request_code::REGISTER_BROKER, header.to_ext_fields())
        .with_body(Bytes::from(out))
}

/// The UNREGISTER_BROKER request a broker sends when it shuts down.
pub fn unregister_broker_request(identity: &BrokerIdentity) -> RemotingCommand {
    let header = UnregisterBrokerRequestHeader {
        broker_name: identity.broker_name.clone(),
        broker_addr: identity.broker_addr.clone(),
        cluster_name: identity.cluster_name.clone(),
        broker_id: identity.broker_id,
    };
    RemotingCommand::new_request(request_code::UNREGISTER_BROKER, header.to_ext_fields())
}

/// Why a REGISTER_BROKER answer is not a success.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterResponseError {
    /// The name server answered with an error code.
    #[error("name server refused the registration: code {code}, {remark}")]
    Refused {
        /// The response code.
        code: i32,
        /// The response remark (empty when there was none).
        remark: String,
    },
    /// The response header or body does not decode.
    #[error("malformed REGISTER_BROKER response: {0}")]
    Malformed(String),
}

impl From<JsonError> for RegisterResponseError {
    fn from(error: JsonError) -> Self {
        RegisterResponseError::Malformed(error.to_string())
    }
}

/// Reads a REGISTER_BROKER response: the master's addresses (for a slave)
/// and the `ORDER_TOPIC_CONFIG` table.
///
/// # Errors
///
/// [`RegisterResponseError::Refused`] for a non-success code,
/// [`RegisterResponseError::Malformed`] for an undecodable answer.
pub fn read_register_broker_response(
    response: &RemotingCommand,
) -> Result<RegisterBrokerResult, RegisterResponseError> {
    if response.code != response_code::SUCCESS {
        return Err(RegisterResponseError::Refused {
            code: response.code,
            remark: response.remark.clone().unwrap_or_default(),
        });
    }
    let header: RegisterBrokerResponseHeader = response
        .decode_custom_header()
        .map_err(|error| RegisterResponseError::Malformed(error.to_string()))?;
    Ok(RegisterBrokerResult::from_parts(
        header.ha_server_addr,
        header.master_addr,
        response.body_bytes(),
    )?)
}

#[cfg(test)]
mod tests {
    use ringmq_protocol::code::version;

    use super::*;

    fn identity() -> BrokerIdentity {
        BrokerIdentity {
            cluster_name: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            broker_id: 0,
            broker_addr: "10.0.0.1:10911".into(),
            ha_server_addr: "10.0.0.1:10912".into(),
            heartbeat_timeout_ms: None,
            enable_acting_master: false,
            zone_name: None,
        }
    }

    #[test]
    fn register_request_carries_java_header_fields_and_a_matching_crc() {
        let topic = TopicConfig {
            topic_name: "T".into(),
            read_queue_nums: 8,
            write_queue_nums: 8,
            ..TopicConfig::default()
        };
        let table = BTreeMap::from([("T".to_owned(), topic)]);
        let version = DataVersion {
            timestamp: 7,
            counter: 3,
            state_version: 0,
        };
        let request = register_broker_request(&identity(), version, &table);
        assert_eq!(request.code, request_code::REGISTER_BROKER);
        assert_eq!(request.version, version::CURRENT);
        assert!(!request.is_response());
        let ext = &request.ext_fields;
        for (key, value) in [
            ("brokerName", "broker-a"),
            ("brokerAddr", "10.0.0.1:10911"),
            ("clusterName", "DefaultCluster"),
            ("haServerAddr", "10.0.0.1:10912"),
            ("brokerId", "0"),
            ("compressed", "false"),
            ("enableActingMaster", "false"),
        ] {
            assert_eq!(ext.get(key), Some(value), "{key}");
        }
        assert_eq!(ext.get("heartbeatTimeoutMillis"), None);
        assert_eq!(ext.get("__ZONE_NAME"), None);
        let crc: i32 = ext.get("bodyCrc32").unwrap().parse().unwrap();
        assert_eq!(crc, body_crc32(request.body_bytes()));
        assert!(request.body_bytes().starts_with(
            br#"{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":7},"mappingDataVersion""#
        ));
        let body = RegisterBrokerBody::decode(request.body_bytes(), false).unwrap();
        assert_eq!(body.topic_config_serialize_wrapper.data_version, version);
        assert_eq!(
            body.topic_config_serialize_wrapper.topic_config_table,
            table
        );
    }

    #[test]
    fn identity_comes_from_the_broker_config() {
        let env = crate::config::ConfigEnvironment {
            home_dir: "/home/mq".into(),
            cpu_count: 2,
            broker_ip1: "10.0.0.1".parse().unwrap(),
        };
        let text = "brokerName=broker-b\nbrokerIP2=10.0.0.9\nhaListenPort=20000";
        let config = BrokerConfig::load(&env, Some(("broker.conf", text)), &[], None).unwrap();
        let identity = BrokerIdentity::from_config(&config);
        assert_eq!(identity.broker_name, "broker-b");
        assert_eq!(identity.cluster_name, "DefaultCluster");
        assert_eq!(identity.broker_addr, "10.0.0.1:10911");
        assert_eq!(identity.ha_server_addr, "10.0.0.9:20000");
        assert_eq!(identity.broker_id, 0);
    }

    #[test]
    fn optional_fields_are_sent_when_set() {
        let mut identity = identity();
        identity.heartbeat_timeout_ms = Some(10_000);
        identity.enable_acting_master = true;
        identity.zone_name = Some("z1".into());
        let request = register_broker_request(&identity, DataVersion::default(), &BTreeMap::new());
        assert_eq!(
            request.ext_fields.get("heartbeatTimeoutMillis"),
            Some("10000")
        );
        assert_eq!(request.ext_fields.get("enableActingMaster"), Some("true"));
        assert_eq!(request.ext_fields.get("__ZONE_NAME"), Some("z1"));
    }

    #[test]
    fn unregister_request_names_the_broker() {
        let request = unregister_broker_request(&identity());
        assert_eq!(request.code, request_code::UNREGISTER_BROKER);
        assert_eq!(request.ext_fields.get("brokerId"), Some("0"));
        assert_eq!(request.ext_fields.get("brokerAddr"), Some("10.0.0.1:10911"));
        assert_eq!(request.body, None);
    }

    #[test]
    fn register_responses_are_read_or_refused() {
        let response = RemotingCommand::new_response(0, 1, None)
            .with_custom_header(&RegisterBrokerResponseHeader {
                ha_server_addr: Some("10.0.0.1:10912".into()),
                master_addr: Some("10.0.0.1:10911".into()),
            })
            .with_body(Bytes::from_static(br#"{"table":{"T":"broker-a:8"}}"#));
        let result = read_register_broker_response(&response).unwrap();
        assert_eq!(result.master_addr.as_deref(), Some("10.0.0.1:10911"));
        assert_eq!(result.ha_server_addr.as_deref(), Some("10.0.0.1:10912"));
        assert_eq!(result.kv_table.table["T"], "broker-a:8");
        let refused = RemotingCommand::new_response(1, 1, Some("crc32 not match".into()));
        assert_eq!(
            read_register_broker_response(&refused),
            Err(RegisterResponseError::Refused {
                code: 1,
                remark: "crc32 not match".into()
            })
        );
        let garbage = RemotingCommand::new_response(0, 1, None).with_body(Bytes::from_static(b"{"));
        assert!(matches!(
            read_register_broker_response(&garbage),
            Err(RegisterResponseError::Malformed(_))
        ));
    }
}
