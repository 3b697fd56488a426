//! The name server (protocol reference sections 2.3.18, 3.3, 3.4 and 9), as a
//! deterministic state machine: [`NameServer::handle`] takes a decoded
//! request, the connection it came on and the current time, and returns the
//! response plus the side effects for the network layer to carry out. No
//! sockets, threads or clock reads here.
//!
//! ```text
//! network layer                         NameServer
//!   request frame ─ decode ─▶ handle(&RemotingCommand, ChannelId, now_ms)
//!                   ◀────────  Handled { response: Option<RemotingCommand>, effects }
//!   every ROUTE_SCAN_INTERVAL_MS ─▶ scan(now_ms) ─▶ effects (CloseChannel ...)
//!   connection closed ─▶ on_channel_closed(ChannelId)
//! ```
//!
//! The broker side of registration (building REGISTER_BROKER for any name
//! server, Apache RocketMQ's included) is in [`register`].
//!
//! # Invariants
//!
//! - Every response carries the request's opaque, the response flag and
//!   [`version::CURRENT`]; one-way requests and stray responses get none.
//! - Handling a request never panics on peer input: malformed headers and
//!   bodies become SYSTEM_ERROR responses, as in Java.

mod handler;
mod kv_config;
pub mod register;
mod route_table;

use ringmq_protocol::command::RemotingCommand;

#[cfg(doc)]
use ringmq_protocol::code::version;

pub use kv_config::{KvConfig, NAMESPACE_ORDER_TOPIC_CONFIG};
pub use route_table::{
    BROKER_CHANNEL_EXPIRED_TIME_MS, BrokerAddrInfo, BrokerLiveInfo, ExpiredBroker, MASTER_ID,
    PERM_READ, PERM_WRITE, RegisterOutcome, Registration, RouteTable, Unregistration,
};

/// How often the network layer should call [`NameServer::scan`] (Java 5.x
/// scans every 5 s).
pub const ROUTE_SCAN_INTERVAL_MS: i64 = 5_000;

/// An opaque id of one connection, chosen by the network layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChannelId(pub u64);

/// A side effect the network layer carries out after a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// The KV configuration changed: write `kvConfig.json` from
    /// [`NameServer::kv_config`].
    PersistKvConfig,
    /// Close this connection (an expired broker's).
    CloseChannel(ChannelId),
}

/// What [`NameServer::handle`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    /// The response to write; `None` for one-way requests and responses.
    pub response: Option<RemotingCommand>,
    /// Side effects, in order.
    pub effects: Vec<Effect>,
}

/// Name server options (Java `NamesrvConfig`), with Java's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameServerSettings {
    /// `orderMessageEnable` (false): fill `orderTopicConf` in routes from the
    /// `ORDER_TOPIC_CONFIG` KV namespace.
    pub order_message_enable: bool,
    /// `returnOrderTopicConfigToBroker` (true): REGISTER_BROKER answers with
    /// the `ORDER_TOPIC_CONFIG` table.
    pub return_order_topic_config_to_broker: bool,
    /// `enableAllTopicList` (true): serve GET_ALL_TOPIC_LIST_FROM_NAMESERVER.
    pub enable_all_topic_list: bool,
    /// `enableTopicList` (true): serve GET_TOPICS_BY_CLUSTER and the unit lists.
    pub enable_topic_list: bool,
}

impl Default for NameServerSettings {
    fn default() -> Self {
        Self {
            order_message_enable: false,
            return_order_topic_config_to_broker: true,
            enable_all_topic_list: true,
            enable_topic_list: true,
        }
    }
}

/// The name server: route tables, KV configuration and request handling.
#[derive(Debug, Clone, Default)]
pub struct NameServer {
    settings: NameServerSettings,
    routes: RouteTable,
    kv_config: KvConfig,
}

impl NameServer {
    /// An empty name server.
    pub fn new(settings: NameServerSettings) -> Self {
        Self {
            settings,
            routes: RouteTable::new(),
            kv_config: KvConfig::new(),
        }
    }

    /// A name server starting from a persisted KV configuration.
    pub fn with_kv_config(settings: NameServerSettings, kv_config: KvConfig) -> Self {
        Self {
            settings,
            routes: RouteTable::new(),
            kv_config,
        }
    }

    /// The route tables.
    pub fn routes(&self) -> &RouteTable {
        &self.routes
    }

    /// The KV configuration (to persist after [`Effect::PersistKvConfig`]).
    pub fn kv_config(&self) -> &KvConfig {
        &self.kv_config
    }

    /// The settings.
    pub fn settings(&self) -> &NameServerSettings {
        &self.settings
    }

    /// Handles one request that arrived on `channel` at `now_ms`.
    pub fn handle(
        &mut self,
        request: &RemotingCommand,
        channel: ChannelId,
        now_ms: i64,
    ) -> Handled {
        if request.is_response() {
            return Handled {
                response: None,
                effects: Vec::new(),
            };
        }
        let mut effects = Vec::new();
        let response = self.dispatch(request, channel, now_ms, &mut effects);
        let response = (!request.is_oneway()).then_some(response);
        if let Some(response) = &response {
            assert_eq!(response.opaque, request.opaque, "response opaque");
            assert!(response.is_response(), "response flag");
        }
        Handled { response, effects }
    }

    /// Removes brokers silent longer than their timeout; returns a
    /// [`Effect::CloseChannel`] for each.
    pub fn scan(&mut self, now_ms: i64) -> Vec<Effect> {
        self.routes
            .scan(now_ms)
            .into_iter()
            .map(|expired| Effect::CloseChannel(expired.channel))
            .collect()
    }

    /// Removes the brokers registered on a connection that closed; returns
    /// how many there were.
    pub fn on_channel_closed(&mut self, channel: ChannelId) -> usize {
        self.routes.on_channel_closed(channel)
    }
}
