//! Request handlers of the name server, one per code (Java
//! `DefaultRequestProcessor` and `ClientRequestProcessor`). The parent keeps
//! the state; each handler decodes its header and body, updates the tables
//! and builds the response.
//!
//! Error answers follow Java's:
//!
//! | situation | code | remark |
//! | --- | --- | --- |
//! | missing / malformed required header field | 1 SYSTEM_ERROR | `org.apache.rocketmq.remoting.exception.RemotingCommandException: the custom field <topic> is null` |
//! | REGISTER_BROKER body CRC mismatch | 1 | `crc32 not match` |
//! | undecodable REGISTER_BROKER body | 1 | `...RemotingCommandException: Failed to decode RegisterBrokerBody, <cause>` |
//! | incremental registration of an unknown broker id | 1 | `register broker failed` |
//! | no route for a topic | 17 TOPIC_NOT_EXIST | `No topic route info in name server for the topic: T` + FAQ hint |
//! | unknown KV entry / namespace | 22 QUERY_NOT_FOUND | `No config item, Namespace: ns Key: k` |
//! | topic lists disabled | 1 | `disable` |
//! | any other code | 3 REQUEST_CODE_NOT_SUPPORTED | ` request type <code> not supported` |
//!
//! Java appends the top stack frame to exception remarks; ours stop before it.
//!
//! # Invariants
//!
//! - Every response is built by [`respond`], so it carries the request's
//!   opaque and the current version.

use bytes::Bytes;
use ringmq_protocol::code::{request_code as rc, response_code};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::error::DecodeError;
use ringmq_protocol::header::{
    AddWritePermOfBrokerResponseHeader, DeleteKvConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader, GetKvConfigRequestHeader, GetKvConfigResponseHeader,
    GetKvListByNamespaceRequestHeader, GetRouteInfoRequestHeader, GetTopicsByClusterRequestHeader,
    PutKvConfigRequestHeader, QueryDataVersionRequestHeader, QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader, RegisterBrokerResponseHeader, UnregisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader, WipeWritePermOfBrokerResponseHeader,
};
use ringmq_protocol::json::{
    BrokerMemberGroup, DataVersion, GetBrokerMemberGroupResponseBody, JsonStyle, KvTable,
    RegisterBrokerBody, RouteKeyStyle, TopicConfigSerializeWrapper, TopicList, TopicRouteData,
};

use super::kv_config::NAMESPACE_ORDER_TOPIC_CONFIG;
use super::route_table::{Registration, Unregistration, has_unit_flag, has_unit_sub_flag};
use super::{ChannelId, Effect, NameServer};

/// The class Java names in remarks of requests it could not decode.
const REMOTING_COMMAND_EXCEPTION: &str =
    "org.apache.rocketmq.remoting.exception.RemotingCommandException";

/// `FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL)` of RocketMQ 5.x.
const APPLY_TOPIC_HINT: &str =
    "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.";

/// A request answered with an error.
#[derive(Debug)]
struct Reject {
    code: i32,
    remark: String,
}

impl Reject {
    fn system_error(remark: impl Into<String>) -> Self {
        Reject {
            code: response_code::SYSTEM_ERROR,
            remark: remark.into(),
        }
    }
}

impl From<DecodeError> for Reject {
    fn from(error: DecodeError) -> Self {
        Reject::system_error(format!("{REMOTING_COMMAND_EXCEPTION}: {error}"))
    }
}

type Answer = Result<RemotingCommand, Reject>;

/// A response to `request` with `code` and `remark`.
fn respond(request: &RemotingCommand, code: i32, remark: Option<String>) -> RemotingCommand {
    RemotingCommand::new_response(code, request.opaque, remark)
}

fn success(request: &RemotingCommand) -> RemotingCommand {
    respond(request, response_code::SUCCESS, None)
}

fn json_body(encode: impl FnOnce(&mut Vec<u8>)) -> Bytes {
    let mut out = Vec::new();
    encode(&mut out);
    Bytes::from(out)
}

/// A required ext field, for headers the protocol crate has no type for.
fn required<'a>(ext: &'a ExtFields, name: &'static str) -> Result<&'a str, DecodeError> {
    ext.get(name).ok_or(DecodeError::MissingField { name })
}

impl NameServer {
    /// Routes a request to its handler and turns a rejection into its
    /// error response.
    pub(super) fn dispatch(
        &mut self,
        request: &RemotingCommand,
        channel: ChannelId,
        now_ms: i64,
        effects: &mut Vec<Effect>,
    ) -> RemotingCommand {
        let answer = match request.code {
            rc::PUT_KV_CONFIG => self.put_kv_config(request, effects),
            rc::GET_KV_CONFIG => self.get_kv_config(request),
            rc::DELETE_KV_CONFIG => self.delete_kv_config(request, effects),
            rc::QUERY_DATA_VERSION => self.query_data_version(request, now_ms),
            rc::REGISTER_BROKER => self.register_broker(request, channel, now_ms),
            rc::UNREGISTER_BROKER => self.unregister_broker(request),
            rc::BROKER_HEARTBEAT => self.broker_heartbeat(request, now_ms),
            rc::GET_BROKER_MEMBER_GROUP => self.broker_member_group(request),
            rc::GET_ROUTEINFO_BY_TOPIC => self.route_info_by_topic(request),
            rc::GET_BROKER_CLUSTER_INFO => self.broker_cluster_info(request),
            rc::WIPE_WRITE_PERM_OF_BROKER => self.wipe_write_perm(request),
            rc::ADD_WRITE_PERM_OF_BROKER => self.add_write_perm(request),
            rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => self.all_topic_list(request),
            rc::DELETE_TOPIC_IN_NAMESRV => self.delete_topic(request),
            rc::REGISTER_TOPIC_IN_NAMESRV => self.register_topic(request),
            rc::GET_KVLIST_BY_NAMESPACE => self.kv_list_by_namespace(request),
            rc::GET_TOPICS_BY_CLUSTER => self.topics_by_cluster(request),
            rc::GET_SYSTEM_TOPIC_LIST_FROM_NS => self.system_topic_list(request),
            rc::GET_UNIT_TOPIC_LIST => self.unit_topic_list(request, has_unit_flag),
            rc::GET_HAS_UNIT_SUB_TOPIC_LIST => self.unit_topic_list(request, has_unit_sub_flag),
            rc::GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST => self.unit_topic_list(request, |flag| {
                !has_unit_flag(flag) && has_unit_sub_flag(flag)
            }),
            code => Err(Reject {
                code: response_code::REQUEST_CODE_NOT_SUPPORTED,
                remark: format!(" request type {code} not supported"),
            }),
        };
        answer.unwrap_or_else(|reject| respond(request, reject.code, Some(reject.remark)))
    }

    fn put_kv_config(&mut self, request: &RemotingCommand, effects: &mut Vec<Effect>) -> Answer {
        let header: PutKvConfigRequestHeader = request.decode_custom_header()?;
        if self
            .kv_config
            .put(&header.namespace, &header.key, &header.value)
        {
            effects.push(Effect::PersistKvConfig);
        }
        Ok(success(request))
    }

    fn get_kv_config(&self, request: &RemotingCommand) -> Answer {
        let header: GetKvConfigRequestHeader = request.decode_custom_header()?;
        match self.kv_config.get(&header.namespace, &header.key) {
            Some(value) => Ok(
                success(request).with_custom_header(&GetKvConfigResponseHeader {
                    value: Some(value.to_owned()),
                }),
            ),
            None => Ok(respond(
                request,
                response_code::QUERY_NOT_FOUND,
                Some(format!(
                    "No config item, Namespace: {} Key: {}",
                    header.namespace, header.key
                )),
            )),
        }
    }

    fn delete_kv_config(&mut self, request: &RemotingCommand, effects: &mut Vec<Effect>) -> Answer {
        let header: DeleteKvConfigRequestHeader = request.decode_custom_header()?;
        if self.kv_config.delete(&header.namespace, &header.key) {
            effects.push(Effect::PersistKvConfig);
        }
        Ok(success(request))
    }

    fn kv_list_by_namespace(&self, request: &RemotingCommand) -> Answer {
        let header: GetKvListByNamespaceRequestHeader = request.decode_custom_header()?;
        match self.kv_config.namespace(&header.namespace) {
            Some(table) => {
                let table = KvTable {
                    table: table.clone(),
                };
                Ok(
                    success(request)
                        .with_body(json_body(|out| table.to_json(out, JsonStyle::Java))),
                )
            }
            None => Ok(respond(
                request,
                response_code::QUERY_NOT_FOUND,
                Some(format!("No config item, Namespace: {}", header.namespace)),
            )),
        }
    }

    fn register_broker(
        &mut self,
        request: &RemotingCommand,
        channel: ChannelId,
        now_ms: i64,
    ) -> Answer {
        let header: RegisterBrokerRequestHeader = request.decode_custom_header()?;
        if header.body_crc32 != 0 && body_crc32(request.body_bytes()) != header.body_crc32 {
            return Err(Reject::system_error("crc32 not match"));
        }
        let body = match &request.body {
            Some(body) => RegisterBrokerBody::decode(body, header.compressed).map_err(|error| {
                Reject::system_error(format!(
                    "{REMOTING_COMMAND_EXCEPTION}: Failed to decode RegisterBrokerBody, {error}"
                ))
            })?,
            // No body: an empty table at version {counter 0, timestamp 0}.
            None => RegisterBrokerBody {
                topic_config_serialize_wrapper: TopicConfigSerializeWrapper::default(),
                filter_server_list: Vec::new(),
            },
        };
        let registration = Registration {
            cluster_name: &header.cluster_name,
            broker_addr: &header.broker_addr,
            broker_name: &header.broker_name,
            broker_id: header.broker_id,
            ha_server_addr: &header.ha_server_addr,
            zone_name: header.zone_name.as_deref(),
            heartbeat_timeout_ms: header.heartbeat_timeout_millis,
            enable_acting_master: header.enable_acting_master,
            topic_config_wrapper: &body.topic_config_serialize_wrapper,
            filter_server_list: Some(&body.filter_server_list),
            channel,
        };
        let outcome = self
            .routes
            .register(&registration, now_ms)
            .ok_or_else(|| Reject::system_error("register broker failed"))?;
        let mut response = success(request).with_custom_header(&RegisterBrokerResponseHeader {
            ha_server_addr: outcome.ha_server_addr,
            master_addr: outcome.master_addr,
        });
        if self.settings.return_order_topic_config_to_broker
            && let Some(table) = self.kv_config.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        {
            let table = KvTable {
                table: table.clone(),
            };
            response = response.with_body(json_body(|out| table.to_json(out, JsonStyle::Java)));
        }
        Ok(response)
    }

    fn unregister_broker(&mut self, request: &RemotingCommand) -> Answer {
        let header: UnregisterBrokerRequestHeader = request.decode_custom_header()?;
        self.routes.unregister(&[Unregistration {
            cluster_name: header.cluster_name,
            broker_addr: header.broker_addr,
            broker_name: header.broker_name,
            broker_id: header.broker_id,
        }]);
        Ok(success(request))
    }

    fn query_data_version(&mut self, request: &RemotingCommand, now_ms: i64) -> Answer {
        let header: QueryDataVersionRequestHeader = request.decode_custom_header()?;
        let data_version = DataVersion::from_json(request.body_bytes()).map_err(|error| {
            Reject::system_error(format!("Failed to decode DataVersion: {error}"))
        })?;
        let changed = self.routes.is_broker_topic_config_changed(
            &header.cluster_name,
            &header.broker_addr,
            &data_version,
        );
        if !changed {
            self.routes
                .refresh(&header.cluster_name, &header.broker_addr, now_ms);
        }
        let mut response =
            success(request).with_custom_header(&QueryDataVersionResponseHeader { changed });
        if let Some(known) = self
            .routes
            .broker_data_version(&header.cluster_name, &header.broker_addr)
        {
            response = response.with_body(json_body(|out| known.to_json(out, JsonStyle::Java)));
        }
        Ok(response)
    }

    fn broker_heartbeat(&mut self, request: &RemotingCommand, now_ms: i64) -> Answer {
        let ext = &request.ext_fields;
        let cluster_name = required(ext, "clusterName")?;
        let broker_addr = required(ext, "brokerAddr")?;
        required(ext, "brokerName")?;
        self.routes.refresh(cluster_name, broker_addr, now_ms);
        Ok(success(request))
    }

    fn broker_member_group(&self, request: &RemotingCommand) -> Answer {
        let ext = &request.ext_fields;
        let cluster_name = required(ext, "clusterName")?;
        let broker_name = required(ext, "brokerName")?;
        let group = BrokerMemberGroup {
            cluster: cluster_name.to_owned(),
            broker_name: broker_name.to_owned(),
            broker_addrs: self
                .routes
                .broker_data(broker_name)
                .map(|data| data.broker_addrs.clone())
                .unwrap_or_default(),
        };
        let body = GetBrokerMemberGroupResponseBody {
            broker_member_group: Some(group),
        };
        Ok(success(request).with_body(json_body(|out| body.to_json(out, JsonStyle::Java))))
    }

    fn route_info_by_topic(&self, request: &RemotingCommand) -> Answer {
        let header: GetRouteInfoRequestHeader = request.decode_custom_header()?;
        let Some(mut route) = self.routes.pickup_topic_route_data(&header.topic) else {
            return Ok(respond(
                request,
                response_code::TOPIC_NOT_EXIST,
                Some(format!(
                    "No topic route info in name server for the topic: {}{APPLY_TOPIC_HINT}",
                    header.topic
                )),
            ));
        };
        if self.settings.order_message_enable {
            route.order_topic_conf = self
                .kv_config
                .get(NAMESPACE_ORDER_TOPIC_CONFIG, &header.topic)
                .map(str::to_owned);
        }
        let style = RouteKeyStyle::for_request(
            request.version,
            header.accept_standard_json_only.unwrap_or(false),
        );
        Ok(success(request).with_body(json_body(|out| route.to_json(out, style))))
    }

    fn broker_cluster_info(&self, request: &RemotingCommand) -> Answer {
        // Java writes ClusterInfo with unquoted integer keys to everyone; the
        // protocol reference recommends quoted keys, which every client
        // parses. Clients new enough for standard route JSON get it here too.
        let style = RouteKeyStyle::for_request(request.version, false);
        let info = self.routes.cluster_info();
        Ok(success(request).with_body(json_body(|out| info.to_json(out, style))))
    }

    fn wipe_write_perm(&mut self, request: &RemotingCommand) -> Answer {
        let header: WipeWritePermOfBrokerRequestHeader = request.decode_custom_header()?;
        let count = self.routes.wipe_write_perm(&header.broker_name);
        Ok(
            success(request).with_custom_header(&WipeWritePermOfBrokerResponseHeader {
                wipe_topic_count: count,
            }),
        )
    }

    fn add_write_perm(&mut self, request: &RemotingCommand) -> Answer {
        let header: WipeWritePermOfBrokerRequestHeader = request.decode_custom_header()?;
        let count = self.routes.add_write_perm(&header.broker_name);
        Ok(
            success(request).with_custom_header(&AddWritePermOfBrokerResponseHeader {
                add_topic_count: count,
            }),
        )
    }

    fn all_topic_list(&self, request: &RemotingCommand) -> Answer {
        if !self.settings.enable_all_topic_list {
            return Err(Reject::system_error("disable"));
        }
        Ok(topic_list_response(request, self.routes.all_topics(), None))
    }

    fn topics_by_cluster(&self, request: &RemotingCommand) -> Answer {
        if !self.settings.enable_topic_list {
            return Err(Reject::system_error("disable"));
        }
        let header: GetTopicsByClusterRequestHeader = request.decode_custom_header()?;
        Ok(topic_list_response(
            request,
            self.routes.topics_by_cluster(&header.cluster),
            None,
        ))
    }

    fn system_topic_list(&self, request: &RemotingCommand) -> Answer {
        let (topics, broker_addr) = self.routes.system_topics();
        Ok(topic_list_response(request, topics, broker_addr))
    }

    fn unit_topic_list(&self, request: &RemotingCommand, filter: impl Fn(i32) -> bool) -> Answer {
        if !self.settings.enable_topic_list {
            return Err(Reject::system_error("disable"));
        }
        Ok(topic_list_response(
            request,
            self.routes.topics_by_sys_flag(filter),
            None,
        ))
    }

    fn delete_topic(&mut self, request: &RemotingCommand) -> Answer {
        let header: DeleteTopicFromNamesrvRequestHeader = request.decode_custom_header()?;
        let cluster = header.cluster_name.as_deref().filter(|c| !c.is_empty());
        self.routes.delete_topic(&header.topic, cluster);
        Ok(success(request))
    }

    fn register_topic(&mut self, request: &RemotingCommand) -> Answer {
        let topic = required(&request.ext_fields, "topic")?;
        if let Some(body) = &request.body {
            let route = TopicRouteData::from_json(body).map_err(|error| {
                Reject::system_error(format!("Failed to decode TopicRouteData: {error}"))
            })?;
            self.routes.register_topic(topic, &route.queue_datas);
        }
        Ok(success(request))
    }
}

fn topic_list_response(
    request: &RemotingCommand,
    topic_list: Vec<String>,
    broker_addr: Option<String>,
) -> RemotingCommand {
    let list = TopicList {
        topic_list,
        broker_addr,
    };
    success(request).with_body(json_body(|out| list.to_json(out, JsonStyle::Java)))
}

/// `UtilAll.crc32`: CRC-32 (IEEE) of the body, masked to 31 bits.
pub(super) fn body_crc32(body: &[u8]) -> i32 {
    (crc32fast::hash(body) & 0x7FFF_FFFF) as i32
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ringmq_protocol::code::{SerializeType, version};
    use ringmq_protocol::frame::decode_frame;
    use ringmq_protocol::json::{ClusterInfo, TopicConfig};
    use ringmq_protocol::limits::FRAME_SIZE_MAX;

    use super::super::register::{BrokerIdentity, register_broker_request};
    use super::super::{Handled, KvConfig, NameServerSettings};
    use super::*;

    const MASTER: &str = "192.168.0.10:10911";
    const SLAVE: &str = "192.168.0.11:10911";

    /// The reference's example route (section 3.3), as sent to a 5.x client.
    const REFERENCE_ROUTE: &str = concat!(
        r#"{"brokerDatas":[{"brokerAddrs":{"0":"192.168.0.10:10911","1":"192.168.0.11:10911"},"#,
        r#""brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],"#,
        r#""filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"#,
        r#""readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#
    );

    fn identity(id: i64, addr: &str) -> BrokerIdentity {
        BrokerIdentity {
            cluster_name: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            broker_id: id,
            broker_addr: addr.into(),
            ha_server_addr: addr.replace(":10911", ":10912"),
            heartbeat_timeout_ms: None,
            enable_acting_master: false,
            zone_name: None,
        }
    }

    fn topics(names: &[&str]) -> BTreeMap<String, TopicConfig> {
        names
            .iter()
            .map(|name| {
                let config = TopicConfig {
                    topic_name: (*name).to_owned(),
                    read_queue_nums: 4,
                    write_queue_nums: 4,
                    ..TopicConfig::default()
                };
                ((*name).to_owned(), config)
            })
            .collect()
    }

    fn version_one() -> DataVersion {
        DataVersion {
            timestamp: 1_700_000_000_000,
            counter: 1,
            state_version: 0,
        }
    }

    fn request(code: i32, fields: &[(&str, &str)]) -> RemotingCommand {
        let mut command = RemotingCommand::new_request(code, fields.iter().copied().collect());
        command.opaque = 42;
        command
    }

    fn answer(server: &mut NameServer, request: &RemotingCommand) -> RemotingCommand {
        let handled = server.handle(request, ChannelId(9), 0);
        let response = handled.response.expect("a response");
        // Every response serializes as a JSON frame and decodes back.
        let mut out = Vec::new();
        response.encode(SerializeType::Json, &mut out).unwrap();
        let frame = decode_frame(&Bytes::from(out), FRAME_SIZE_MAX)
            .unwrap()
            .unwrap();
        assert_eq!(RemotingCommand::from_frame(&frame).unwrap(), response);
        assert_eq!(response.opaque, request.opaque);
        assert!(response.is_response());
        assert_eq!(response.version, version::CURRENT);
        response
    }

    fn body_text(response: &RemotingCommand) -> String {
        String::from_utf8(response.body_bytes().to_vec()).unwrap()
    }

    /// A name server with broker-a's master and slave registered, topic
    /// CaptureTopic and TBW102 (two topics, so no registration is incremental).
    fn server_with_group() -> NameServer {
        let mut server = NameServer::new(NameServerSettings::default());
        let table = topics(&["CaptureTopic", "TBW102"]);
        for (id, addr, channel) in [(0, MASTER, 1), (1, SLAVE, 2)] {
            let request = register_broker_request(&identity(id, addr), version_one(), &table);
            let handled = server.handle(&request, ChannelId(channel), 1000);
            assert_eq!(handled.response.unwrap().code, response_code::SUCCESS);
        }
        server
    }

    fn java_fixture_request() -> RemotingCommand {
        let hex =
            include_str!("../../../protocol/tests/fixtures/java-105-GET_ROUTEINFO_BY_TOPIC.hex");
        let digits: Vec<u8> = hex.bytes().filter(u8::is_ascii_hexdigit).collect();
        let bytes: Vec<u8> = digits
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect();
        let frame = decode_frame(&Bytes::from(bytes), FRAME_SIZE_MAX)
            .unwrap()
            .unwrap();
        RemotingCommand::from_frame(&frame).unwrap()
    }

    #[test]
    fn a_captured_java_route_request_gets_the_reference_route_bytes() {
        let mut server = server_with_group();
        let request = java_fixture_request();
        assert_eq!(request.version, 479);
        assert_eq!(request.ext_fields.get("topic"), Some("CaptureTopic"));
        let response = answer(&mut server, &request);
        assert_eq!(response.code, response_code::SUCCESS);
        assert_eq!(response.remark, None);
        assert_eq!(body_text(&response), REFERENCE_ROUTE);
        assert_eq!(response.flag, 1);
    }

    #[test]
    fn old_clients_get_unquoted_broker_ids_unless_they_ask_for_standard_json() {
        let mut server = server_with_group();
        let mut go = request(rc::GET_ROUTEINFO_BY_TOPIC, &[("topic", "CaptureTopic")]);
        go.version = version::V4_5_2;
        let legacy = REFERENCE_ROUTE
            .replace(r#"{"0":"#, "{0:")
            .replace(r#","1":"#, ",1:");
        assert_eq!(body_text(&answer(&mut server, &go)), legacy);
        go.ext_fields.insert("acceptStandardJsonOnly", "true");
        assert_eq!(body_text(&answer(&mut server, &go)), REFERENCE_ROUTE);
        // The parsed route is the same either way.
        let parsed = TopicRouteData::from_json(legacy.as_bytes()).unwrap();
        assert_eq!(
            parsed,
            TopicRouteData::from_json(REFERENCE_ROUTE.as_bytes()).unwrap()
        );
    }

    #[test]
    fn an_unknown_topic_answers_topic_not_exist_with_javas_remark() {
        let mut server = server_with_group();
        let response = answer(
            &mut server,
            &request(rc::GET_ROUTEINFO_BY_TOPIC, &[("topic", "Nope")]),
        );
        assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
        assert_eq!(
            response.remark.as_deref(),
            Some(
                "No topic route info in name server for the topic: Nope\n\
                 See https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details."
            )
        );
        assert_eq!(response.body, None);
    }

    #[test]
    fn missing_required_fields_answer_system_error_naming_the_field() {
        let mut server = server_with_group();
        let cases = [
            (rc::GET_ROUTEINFO_BY_TOPIC, "topic"),
            (rc::REGISTER_BROKER, "brokerName"),
            (rc::UNREGISTER_BROKER, "brokerName"),
            (rc::PUT_KV_CONFIG, "namespace"),
            (rc::GET_KVLIST_BY_NAMESPACE, "namespace"),
            (rc::BROKER_HEARTBEAT, "clusterName"),
            (rc::GET_TOPICS_BY_CLUSTER, "cluster"),
            (rc::WIPE_WRITE_PERM_OF_BROKER, "brokerName"),
        ];
        for (code, field) in cases {
            let response = answer(&mut server, &request(code, &[]));
            assert_eq!(response.code, response_code::SYSTEM_ERROR, "code {code}");
            assert_eq!(
                response.remark.as_deref(),
                Some(
                    format!(
                        "org.apache.rocketmq.remoting.exception.RemotingCommandException: \
                         the custom field <{field}> is null"
                    )
                    .as_str()
                ),
                "code {code}"
            );
        }
        let mut bad = request(rc::UNREGISTER_BROKER, &[]);
        for (key, value) in [
            ("brokerName", "b"),
            ("brokerAddr", "a:1"),
            ("clusterName", "c"),
            ("brokerId", "zero"),
        ] {
            bad.ext_fields.insert(key, value);
        }
        let response = answer(&mut server, &bad);
        assert_eq!(response.code, response_code::SYSTEM_ERROR);
        assert!(response.remark.unwrap().contains("<brokerId>"));
    }

    #[test]
    fn a_body_crc_mismatch_is_refused_and_zero_skips_the_check() {
        let mut server = NameServer::new(NameServerSettings::default());
        let mut request =
            register_broker_request(&identity(0, MASTER), version_one(), &topics(&["A", "B"]));
        let good = request.ext_fields.get("bodyCrc32").unwrap().to_owned();
        assert_ne!(good, "0");
        request.ext_fields.insert("bodyCrc32", "12345");
        let response = answer(&mut server, &request);
        assert_eq!(response.code, response_code::SYSTEM_ERROR);
        assert_eq!(response.remark.as_deref(), Some("crc32 not match"));
        assert!(server.routes().is_empty());
        request.ext_fields.insert("bodyCrc32", "0");
        assert_eq!(answer(&mut server, &request).code, response_code::SUCCESS);
        assert_eq!(server.routes().all_topics(), vec!["A", "B"]);
    }

    #[test]
    fn register_bodies_that_do_not_decode_are_refused() {
        let mut server = NameServer::new(NameServerSettings::default());
        let mut request =
            register_broker_request(&identity(0, MASTER), version_one(), &topics(&[]));
        request.body = Some(Bytes::from_static(b"{not json"));
        request.ext_fields.insert("bodyCrc32", "0");
        let response = answer(&mut server, &request);
        assert_eq!(response.code, response_code::SYSTEM_ERROR);
        let remark = response.remark.unwrap();
        assert!(
            remark.starts_with(
                "org.apache.rocketmq.remoting.exception.RemotingCommandException: \
                 Failed to decode RegisterBrokerBody, "
            ),
            "{remark}"
        );
        // No body at all registers the broker with no topics.
        request.body = None;
        assert_eq!(answer(&mut server, &request).code, response_code::SUCCESS);
        assert!(server.routes().broker_data("broker-a").is_some());
        assert!(server.routes().all_topics().is_empty());
    }

    #[test]
    fn an_incremental_registration_of_an_unknown_broker_fails_as_in_java() {
        let mut server = NameServer::new(NameServerSettings::default());
        let request = register_broker_request(&identity(0, MASTER), version_one(), &topics(&["A"]));
        let response = answer(&mut server, &request);
        assert_eq!(response.code, response_code::SYSTEM_ERROR);
        assert_eq!(response.remark.as_deref(), Some("register broker failed"));
    }

    #[test]
    fn a_slave_learns_the_master_and_its_ha_address() {
        let mut server = server_with_group();
        let request =
            register_broker_request(&identity(1, SLAVE), version_one(), &topics(&["A", "B"]));
        let response = answer(&mut server, &request);
        assert_eq!(response.ext_fields.get("masterAddr"), Some(MASTER));
        assert_eq!(
            response.ext_fields.get("haServerAddr"),
            Some("192.168.0.10:10912")
        );
        let request =
            register_broker_request(&identity(0, MASTER), version_one(), &topics(&["A", "B"]));
        let response = answer(&mut server, &request);
        assert_eq!(response.ext_fields.get("masterAddr"), None);
        assert_eq!(
            response.body, None,
            "no ORDER_TOPIC_CONFIG entries, no body"
        );
    }

    #[test]
    fn registration_answers_with_the_order_topic_config_table() {
        let mut server = server_with_group();
        let put = request(
            rc::PUT_KV_CONFIG,
            &[
                ("namespace", NAMESPACE_ORDER_TOPIC_CONFIG),
                ("key", "T"),
                ("value", "broker-a:4"),
            ],
        );
        let handled = server.handle(&put, ChannelId(3), 0);
        assert_eq!(handled.effects, vec![Effect::PersistKvConfig]);
        let request =
            register_broker_request(&identity(0, MASTER), version_one(), &topics(&["A", "B"]));
        let response = answer(&mut server, &request);
        assert_eq!(body_text(&response), r#"{"table":{"T":"broker-a:4"}}"#);
        let settings = NameServerSettings {
            return_order_topic_config_to_broker: false,
            ..NameServerSettings::default()
        };
        let mut quiet = NameServer::with_kv_config(settings, server.kv_config().clone());
        assert_eq!(answer(&mut quiet, &request).body, None);
    }

    #[test]
    fn order_topic_conf_fills_routes_when_enabled() {
        let settings = NameServerSettings {
            order_message_enable: true,
            ..NameServerSettings::default()
        };
        let mut kv = KvConfig::new();
        kv.put(NAMESPACE_ORDER_TOPIC_CONFIG, "CaptureTopic", "broker-a:4");
        let mut server = NameServer::with_kv_config(settings, kv);
        let request = register_broker_request(
            &identity(0, MASTER),
            version_one(),
            &topics(&["CaptureTopic", "B"]),
        );
        answer(&mut server, &request);
        let response = answer(&mut server, &java_fixture_request());
        let route = TopicRouteData::from_json(response.body_bytes()).unwrap();
        assert_eq!(route.order_topic_conf.as_deref(), Some("broker-a:4"));
    }

    #[test]
    fn unregister_removes_the_broker_and_its_routes() {
        let mut server = server_with_group();
        for (id, addr) in [("0", MASTER), ("1", SLAVE)] {
            let request = request(
                rc::UNREGISTER_BROKER,
                &[
                    ("brokerName", "broker-a"),
                    ("brokerAddr", addr),
                    ("clusterName", "DefaultCluster"),
                    ("brokerId", id),
                ],
            );
            assert_eq!(answer(&mut server, &request).code, response_code::SUCCESS);
        }
        assert!(server.routes().is_empty());
        let response = answer(&mut server, &java_fixture_request());
        assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
    }

    #[test]
    fn cluster_info_is_written_in_the_route_style_of_the_client() {
        let mut server = server_with_group();
        let expected_standard = concat!(
            r#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"192.168.0.10:10911","#,
            r#""1":"192.168.0.11:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","#,
            r#""enableActingMaster":false}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}"#
        );
        let mut request = request(rc::GET_BROKER_CLUSTER_INFO, &[]);
        assert_eq!(body_text(&answer(&mut server, &request)), expected_standard);
        request.version = version::V4_6_0;
        let legacy = body_text(&answer(&mut server, &request));
        assert_eq!(
            legacy,
            expected_standard
                .replace(r#"{"0":"#, "{0:")
                .replace(r#","1":"#, ",1:")
        );
        let info = ClusterInfo::from_json(legacy.as_bytes()).unwrap();
        assert_eq!(info, server.routes().cluster_info());
    }

    #[test]
    fn topic_lists_answer_and_can_be_disabled() {
        let mut server = server_with_group();
        let all = request(rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, &[]);
        assert_eq!(
            body_text(&answer(&mut server, &all)),
            r#"{"topicList":["CaptureTopic","TBW102"]}"#
        );
        let by_cluster = request(rc::GET_TOPICS_BY_CLUSTER, &[("cluster", "DefaultCluster")]);
        assert_eq!(
            body_text(&answer(&mut server, &by_cluster)),
            r#"{"topicList":["CaptureTopic","TBW102"]}"#
        );
        let system = request(rc::GET_SYSTEM_TOPIC_LIST_FROM_NS, &[]);
        assert_eq!(
            body_text(&answer(&mut server, &system)),
            r#"{"brokerAddr":"192.168.0.10:10911","topicList":["DefaultCluster","broker-a"]}"#
        );
        let unit = request(rc::GET_UNIT_TOPIC_LIST, &[]);
        assert_eq!(
            body_text(&answer(&mut server, &unit)),
            r#"{"topicList":[]}"#
        );
        server.settings.enable_all_topic_list = false;
        server.settings.enable_topic_list = false;
        for request in [&all, &by_cluster, &unit] {
            let response = answer(&mut server, request);
            assert_eq!(response.code, response_code::SYSTEM_ERROR);
            assert_eq!(response.remark.as_deref(), Some("disable"));
        }
    }

    #[test]
    fn kv_config_requests_put_get_list_and_delete() {
        let mut server = NameServer::new(NameServerSettings::default());
        let get = request(rc::GET_KV_CONFIG, &[("namespace", "ns"), ("key", "k")]);
        let response = answer(&mut server, &get);
        assert_eq!(response.code, response_code::QUERY_NOT_FOUND);
        assert_eq!(
            response.remark.as_deref(),
            Some("No config item, Namespace: ns Key: k")
        );
        let list = request(rc::GET_KVLIST_BY_NAMESPACE, &[("namespace", "ns")]);
        let response = answer(&mut server, &list);
        assert_eq!(response.code, response_code::QUERY_NOT_FOUND);
        assert_eq!(
            response.remark.as_deref(),
            Some("No config item, Namespace: ns")
        );

        let put = request(
            rc::PUT_KV_CONFIG,
            &[("namespace", "ns"), ("key", "k"), ("value", "v")],
        );
        assert_eq!(
            server.handle(&put, ChannelId(1), 0).effects,
            vec![Effect::PersistKvConfig]
        );
        assert!(
            server.handle(&put, ChannelId(1), 0).effects.is_empty(),
            "unchanged"
        );
        let response = answer(&mut server, &get);
        assert_eq!(response.code, response_code::SUCCESS);
        assert_eq!(response.ext_fields.get("value"), Some("v"));
        assert_eq!(
            body_text(&answer(&mut server, &list)),
            r#"{"table":{"k":"v"}}"#
        );

        let delete = request(rc::DELETE_KV_CONFIG, &[("namespace", "ns"), ("key", "k")]);
        let handled = server.handle(&delete, ChannelId(1), 0);
        assert_eq!(handled.response.unwrap().code, response_code::SUCCESS);
        assert_eq!(handled.effects, vec![Effect::PersistKvConfig]);
        assert!(server.handle(&delete, ChannelId(1), 0).effects.is_empty());
        assert_eq!(
            answer(&mut server, &get).code,
            response_code::QUERY_NOT_FOUND
        );
    }

    fn query_data_version(counter: i64) -> RemotingCommand {
        let version = DataVersion {
            counter,
            ..version_one()
        };
        request(
            rc::QUERY_DATA_VERSION,
            &[
                ("brokerName", "broker-a"),
                ("brokerAddr", MASTER),
                ("clusterName", "DefaultCluster"),
                ("brokerId", "0"),
            ],
        )
        .with_body(json_body(|out| version.to_json(out, JsonStyle::Java)))
    }

    #[test]
    fn query_data_version_reports_changes_and_refreshes_unchanged_brokers() {
        let mut server = server_with_group();
        let handled = server.handle(&query_data_version(1), ChannelId(1), 50_000);
        let response = handled.response.unwrap();
        assert_eq!(response.ext_fields.get("changed"), Some("false"));
        assert_eq!(
            DataVersion::from_json(response.body_bytes()).unwrap(),
            version_one()
        );
        let live = server.routes().live_info("DefaultCluster", MASTER).unwrap();
        assert_eq!(live.last_update_ms, 50_000);

        let handled = server.handle(&query_data_version(2), ChannelId(1), 60_000);
        assert_eq!(
            handled.response.unwrap().ext_fields.get("changed"),
            Some("true")
        );
        let live = server.routes().live_info("DefaultCluster", MASTER).unwrap();
        assert_eq!(
            live.last_update_ms, 50_000,
            "a changed broker is not refreshed"
        );

        let mut missing = query_data_version(1);
        missing.body = None;
        assert_eq!(
            answer(&mut server, &missing).code,
            response_code::SYSTEM_ERROR
        );
        let mut unknown = query_data_version(1);
        unknown.ext_fields.insert("brokerAddr", "10.9.9.9:1");
        let response = answer(&mut server, &unknown);
        assert_eq!(response.ext_fields.get("changed"), Some("true"));
        assert_eq!(response.body, None);
    }

    #[test]
    fn broker_heartbeat_refreshes_the_live_entry() {
        let mut server = server_with_group();
        let heartbeat = request(
            rc::BROKER_HEARTBEAT,
            &[
                ("clusterName", "DefaultCluster"),
                ("brokerAddr", MASTER),
                ("brokerName", "broker-a"),
            ],
        );
        let handled = server.handle(&heartbeat, ChannelId(1), 100_000);
        assert_eq!(handled.response.unwrap().code, response_code::SUCCESS);
        assert!(
            server
                .scan(121_001)
                .contains(&Effect::CloseChannel(ChannelId(2)))
        );
        assert!(
            server
                .routes()
                .live_info("DefaultCluster", MASTER)
                .is_some()
        );
        assert_eq!(
            server.scan(220_001),
            vec![Effect::CloseChannel(ChannelId(1))]
        );
        assert!(server.routes().is_empty());
    }

    #[test]
    fn write_perm_requests_answer_the_topic_count() {
        let mut server = server_with_group();
        let wipe = request(rc::WIPE_WRITE_PERM_OF_BROKER, &[("brokerName", "broker-a")]);
        assert_eq!(
            answer(&mut server, &wipe).ext_fields.get("wipeTopicCount"),
            Some("2")
        );
        let route = server.routes().pickup_topic_route_data("TBW102").unwrap();
        assert_eq!(route.queue_datas[0].perm, 4);
        let add = request(rc::ADD_WRITE_PERM_OF_BROKER, &[("brokerName", "broker-a")]);
        assert_eq!(
            answer(&mut server, &add).ext_fields.get("addTopicCount"),
            Some("2")
        );
        let route = server.routes().pickup_topic_route_data("TBW102").unwrap();
        assert_eq!(route.queue_datas[0].perm, 6);
    }

    #[test]
    fn delete_and_register_topic_requests_change_routes() {
        let mut server = server_with_group();
        let delete = request(
            rc::DELETE_TOPIC_IN_NAMESRV,
            &[("topic", "TBW102"), ("clusterName", "")],
        );
        assert_eq!(answer(&mut server, &delete).code, response_code::SUCCESS);
        assert_eq!(server.routes().all_topics(), vec!["CaptureTopic"]);
        let route = server
            .routes()
            .pickup_topic_route_data("CaptureTopic")
            .unwrap();
        let register = request(rc::REGISTER_TOPIC_IN_NAMESRV, &[("topic", "New")])
            .with_body(json_body(|out| route.to_json(out, JsonStyle::Java)));
        assert_eq!(answer(&mut server, &register).code, response_code::SUCCESS);
        assert_eq!(server.routes().all_topics(), vec!["CaptureTopic", "New"]);
        let garbage = request(rc::REGISTER_TOPIC_IN_NAMESRV, &[("topic", "X")])
            .with_body(Bytes::from_static(b"[1,"));
        assert_eq!(
            answer(&mut server, &garbage).code,
            response_code::SYSTEM_ERROR
        );
    }

    #[test]
    fn broker_member_group_lists_the_group_addresses() {
        let mut server = server_with_group();
        let request = request(
            rc::GET_BROKER_MEMBER_GROUP,
            &[
                ("clusterName", "DefaultCluster"),
                ("brokerName", "broker-a"),
            ],
        );
        assert_eq!(
            body_text(&answer(&mut server, &request)),
            r#"{"brokerMemberGroup":{"brokerAddrs":{0:"192.168.0.10:10911",1:"192.168.0.11:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}}"#
        );
    }

    #[test]
    fn unknown_codes_answer_request_code_not_supported() {
        let mut server = NameServer::new(NameServerSettings::default());
        for code in [rc::SEND_MESSAGE, rc::GET_NAMESRV_CONFIG, 31000] {
            let response = answer(&mut server, &request(code, &[]));
            assert_eq!(response.code, response_code::REQUEST_CODE_NOT_SUPPORTED);
            assert_eq!(
                response.remark.as_deref(),
                Some(format!(" request type {code} not supported").as_str())
            );
        }
    }

    #[test]
    fn oneway_requests_are_applied_without_a_response_and_responses_are_ignored() {
        let mut server = NameServer::new(NameServerSettings::default());
        let mut put = request(
            rc::PUT_KV_CONFIG,
            &[("namespace", "ns"), ("key", "k"), ("value", "v")],
        );
        put.mark_oneway();
        let handled = server.handle(&put, ChannelId(1), 0);
        assert_eq!(
            handled,
            Handled {
                response: None,
                effects: vec![Effect::PersistKvConfig]
            }
        );
        assert_eq!(server.kv_config().get("ns", "k"), Some("v"));
        let stray = RemotingCommand::new_response(0, 5, None);
        assert_eq!(server.handle(&stray, ChannelId(1), 0).response, None);
    }

    #[test]
    fn a_closed_channel_removes_the_brokers_registered_on_it() {
        let mut server = server_with_group();
        assert_eq!(server.on_channel_closed(ChannelId(1)), 1);
        assert_eq!(server.on_channel_closed(ChannelId(77)), 0);
        let route = server
            .routes()
            .pickup_topic_route_data("CaptureTopic")
            .unwrap();
        assert!(!route.broker_datas[0].broker_addrs.contains_key(&0));
    }

    #[test]
    fn body_crc_is_masked_crc32_ieee() {
        // CRC-32/IEEE of "123456789" is 0xCBF43926; masked to 31 bits.
        assert_eq!(body_crc32(b"123456789"), 0x4BF4_3926);
        assert_eq!(body_crc32(b""), 0);
    }
}
