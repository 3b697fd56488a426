//! The name server plugged into the remoting server: maps connections to the
//! name server's channels, runs its route scan on the server's tick, and
//! turns its side effects into connection closes.
//!
//! # Invariants
//! - A [`ConnectionId`] and the [`ChannelId`] of the same connection carry
//!   the same number, so a close the name server asks for names the
//!   connection it saw the request on.

use std::net::SocketAddr;
use std::time::Duration;

use ringmq_protocol::command::RemotingCommand;

use super::{ConnectionId, RequestHandler};
use crate::namesrv::{ChannelId, Effect, NameServer, ROUTE_SCAN_INTERVAL_MS};

/// [`NameServer`] as a [`RequestHandler`].
#[derive(Debug)]
pub struct NameServerHandler {
    name_server: NameServer,
    closes: Vec<ConnectionId>,
    kv_persist_warned: bool,
}

impl NameServerHandler {
    /// Serves `name_server`.
    pub fn new(name_server: NameServer) -> Self {
        NameServerHandler {
            name_server,
            closes: Vec::new(),
            kv_persist_warned: false,
        }
    }

    /// The name server's state.
    pub fn name_server(&self) -> &NameServer {
        &self.name_server
    }

    fn apply(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::CloseChannel(channel) => self.closes.push(ConnectionId(channel.0)),
                Effect::PersistKvConfig => {
                    // Writing kvConfig.json needs file I/O off the ring
                    // thread, which does not exist yet: the KV table lives
                    // in memory only. Said once, not per request.
                    if !self.kv_persist_warned {
                        self.kv_persist_warned = true;
                        tracing::warn!(
                            "the KV configuration changed; ringmq does not persist kvConfig.json \
                             yet, so the change is lost on restart"
                        );
                    }
                }
            }
        }
    }
}

impl RequestHandler for NameServerHandler {
    fn handle(
        &mut self,
        conn: ConnectionId,
        _peer: SocketAddr,
        cmd: RemotingCommand,
        now_ms: i64,
    ) -> Option<RemotingCommand> {
        let handled = self.name_server.handle(&cmd, ChannelId(conn.0), now_ms);
        self.apply(handled.effects);
        handled.response
    }

    fn on_closed(&mut self, conn: ConnectionId) {
        let removed = self.name_server.on_channel_closed(ChannelId(conn.0));
        if removed > 0 {
            tracing::info!(
                connection = conn.0,
                brokers = removed,
                "broker connection closed: its routes are removed"
            );
        }
    }

    fn on_tick(&mut self, now_ms: i64) {
        let effects = self.name_server.scan(now_ms);
        self.apply(effects);
    }

    fn tick_interval(&self) -> Duration {
        Duration::from_millis(ROUTE_SCAN_INTERVAL_MS as u64)
    }

    fn take_close_requests(&mut self, out: &mut Vec<ConnectionId>) {
        out.append(&mut self.closes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namesrv::register::{BrokerIdentity, register_broker_request};
    use crate::namesrv::{BROKER_CHANNEL_EXPIRED_TIME_MS, NameServerSettings};
    use ringmq_protocol::json::DataVersion;
    use std::collections::BTreeMap;

    fn identity() -> BrokerIdentity {
        BrokerIdentity {
            cluster_name: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            broker_id: 0,
            broker_addr: "127.0.0.1:10911".into(),
            ha_server_addr: "127.0.0.1:10912".into(),
            heartbeat_timeout_ms: None,
            enable_acting_master: false,
            zone_name: None,
        }
    }

    #[test]
    fn expired_broker_connection_is_asked_to_close_on_tick() {
        let mut handler = NameServerHandler::new(NameServer::new(NameServerSettings::default()));
        let peer: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        let conn = ConnectionId(7 << 32 | 3);
        let mut request =
            register_broker_request(&identity(), DataVersion::default(), &BTreeMap::new());
        request.opaque = 1;
        let response = handler.handle(conn, peer, request, 1_000).unwrap();
        assert_eq!(response.code, 0, "{:?}", response.remark);
        handler.on_tick(1_000 + BROKER_CHANNEL_EXPIRED_TIME_MS + 1);
        let mut closes = Vec::new();
        handler.take_close_requests(&mut closes);
        assert_eq!(closes, vec![conn]);
        handler.take_close_requests(&mut closes);
        assert_eq!(closes.len(), 1, "requests are handed out once");
    }
}
