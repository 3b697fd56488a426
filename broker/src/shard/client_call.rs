//! Requests the broker answers by asking a client (Java's
//! `AdminBrokerProcessor.callConsumer` over `Broker2Client.callClient`):
//! GET_CONSUMER_RUNNING_INFO (307), which `mqadmin consumerStatus` and the
//! dashboard send for each consumer of a group, CONSUME_MESSAGE_DIRECTLY
//! (309, `mqadmin consumeMessage`, the dashboard's resend to one consumer),
//! and INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223, `mqadmin
//! getConsumerStatus`), which the broker sends on as
//! GET_CONSUMER_STATUS_FROM_CLIENT (221) to every consumer of the group (or
//! the one named) at once, and answers with their tables merged once each
//! has answered, failed or timed out (one that did not answer is left out,
//! as in Java).
//! Shard 0 owns the client registry, so it finds the consumer's connection,
//! sends it the request (same code, header and body, a fresh opaque) and
//! keeps the admin's reply address; the client's answer, which arrives on
//! whichever shard holds the client's connection, is sent to shard 0 and
//! relayed as it is. CONSUME_MESSAGE_DIRECTLY first goes to the shard in
//! the top byte of its message id's offset, which reads the record (in the
//! background when it is not in memory) and hands the request, with the
//! record as its body and this broker's name added, to shard 0.
//!
//! ```text
//!  admin ─ 307 ─▶ shard 0: registry → client's connection ─ 307 ─▶ client
//!  admin ─ 309 ─▶ shard k (record) ─ (CallConsumer) ─▶ shard 0 ─ 309 + record ─▶ client
//!  admin ◀─ client's answer ─ shard 0 ◀─ (ClientAnswer) ─ shard c ◀─ answer ─┘
//! ```
//!
//! # Invariants
//! - A call is answered exactly once: with the client's answer, or with
//!   SYSTEM_ERROR when the client is not online, its connection closes, or
//!   [`CLIENT_CALL_TIMEOUT_MS`] pass (Java's `callClient` timeout). A
//!   status fan-out is answered once, when its last call ends.
//! - An answer nobody waits for (late, or a stray) is dropped.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use ringmq_protocol::code::{flag, request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{
    CustomHeader, GetConsumerRunningInfoRequestHeader, GetConsumerStatusRequestHeader,
};
use ringmq_protocol::json::{GetConsumerStatusBody, JsonStyle, MessageQueue};
use ringmq_protocol::message::decode_offset_msg_id;
use ringmq_storage::store::PullRead;

use super::link::{ReplyTo, Request, ShardMsg};
use super::pull::Parked;
use super::{ShardHandler, json_success, response};
use crate::client_registry::ChannelId;
use crate::server::ConnectionId;

/// How long the broker waits for a client's answer (Java: 10 s).
pub const CLIENT_CALL_TIMEOUT_MS: i64 = 10_000;

/// How long the broker waits for each consumer's status (Java: 5 s).
pub const CONSUMER_STATUS_TIMEOUT_MS: i64 = 5_000;

/// Where a client's answer goes.
#[derive(Debug)]
enum Waiter {
    /// Relayed to this admin as it is.
    Relay(ReplyTo),
    /// Merged into status fan-out `id`.
    Status(u64),
}

/// A call waiting for a client's answer.
#[derive(Debug)]
struct PendingCall {
    waiter: Waiter,
    client: String,
    deadline_ms: i64,
}

/// GET_CONSUMER_STATUS_FROM_CLIENT waiting for its consumers.
#[derive(Debug)]
struct StatusFanOut {
    reply: ReplyTo,
    /// Calls not ended yet.
    outstanding: usize,
    /// Client id → its queues' offsets, from the answers so far.
    table: BTreeMap<String, BTreeMap<MessageQueue, i64>>,
}

/// Shard 0's calls waiting for clients, by connection and opaque.
#[derive(Debug, Default)]
pub(crate) struct ClientCalls {
    pending: HashMap<(ConnectionId, i32), PendingCall>,
    fan_outs: HashMap<u64, StatusFanOut>,
    next_fan_out: u64,
}

impl ShardHandler {
    /// CONSUME_MESSAGE_DIRECTLY on the shard that holds the message (see
    /// the module doc).
    pub(crate) fn consume_directly(&mut self, request: Box<Request>, now_ms: i64) {
        self.consume_directly_reading(request, now_ms, PullRead::Background);
    }

    /// CONSUME_MESSAGE_DIRECTLY, the record read as `read` says (as
    /// [`ShardHandler::view_message_reading`]).
    pub(crate) fn consume_directly_reading(
        &mut self,
        request: Box<Request>,
        now_ms: i64,
        read: PullRead,
    ) {
        let msg_id = request.cmd.ext_fields.get("msgId").unwrap_or("");
        let offset = match decode_offset_msg_id(msg_id) {
            Ok((_, offset)) if offset >= 0 => offset as u64,
            Ok(_) | Err(_) => {
                let remark = format!("msgId {msg_id:?} is not an offset message id");
                return self.reply(request.reply, response(response_code::SYSTEM_ERROR, remark));
            }
        };
        let missing = || format!("can not find message by the offset, {offset}");
        let Some((mut request, record)) =
            self.record_for(request, offset, read, Parked::ConsumeDirectly, missing)
        else {
            return;
        };
        let broker_name = self.settings.broker_name.clone();
        request.cmd.ext_fields.insert("brokerName", &broker_name);
        request.cmd.body = Some(Bytes::from(record));
        if self.id == 0 {
            self.call_consumer(request, now_ms);
        } else if let Some(links) = &mut self.links {
            links.send(0, ShardMsg::CallConsumer(request));
        }
    }

    /// GET_CONSUMER_RUNNING_INFO, and CONSUME_MESSAGE_DIRECTLY with its
    /// record, on shard 0: forwards the request to the consumer.
    pub(crate) fn call_consumer(&mut self, request: Box<Request>, now_ms: i64) {
        let header: GetConsumerRunningInfoRequestHeader = match request.cmd.decode_custom_header() {
            Ok(header) => header,
            Err(error) => {
                let answer = response(response_code::SYSTEM_ERROR, error.to_string());
                return self.reply(request.reply, answer);
            }
        };
        let channel = self
            .control()
            .clients
            .consumer_channel(&header.consumer_group, &header.client_id);
        let Some(ChannelId(channel)) = channel else {
            let remark = format!(
                "The Consumer <{}> <{}> not online",
                header.consumer_group, header.client_id
            );
            return self.reply(request.reply, response(response_code::SYSTEM_ERROR, remark));
        };
        let conn = ConnectionId(channel);
        let mut call = RemotingCommand::new_request(request.cmd.code, request.cmd.ext_fields);
        if let Some(body) = request.cmd.body {
            call = call.with_body(body);
        }
        let waiter = Waiter::Relay(request.reply);
        let deadline_ms = now_ms.saturating_add(CLIENT_CALL_TIMEOUT_MS);
        self.call_client(conn, call, waiter, header.client_id, deadline_ms);
    }

    /// Sends `call` to client `client` on `conn` and keeps it until its
    /// answer goes to `waiter`, or `deadline_ms` passes.
    fn call_client(
        &mut self,
        conn: ConnectionId,
        call: RemotingCommand,
        waiter: Waiter,
        client: String,
        deadline_ms: i64,
    ) {
        let opaque = self.request_client(conn, call, 0);
        let pending = PendingCall {
            waiter,
            client,
            deadline_ms,
        };
        self.client_calls.pending.insert((conn, opaque), pending);
    }

    /// INVOKE_BROKER_TO_GET_CONSUMER_STATUS on shard 0, as Java's
    /// `Broker2Client.getConsumeStatus`: asks every consumer of the group
    /// (or the one `clientAddr` names) for its offsets of the topic.
    pub(crate) fn consumer_status(&mut self, request: Box<Request>, now_ms: i64) {
        let header: GetConsumerStatusRequestHeader = match request.cmd.decode_custom_header() {
            Ok(header) => header,
            Err(error) => {
                let answer = response(response_code::SYSTEM_ERROR, error.to_string());
                return self.reply(request.reply, answer);
            }
        };
        let only = header.client_addr.filter(|id| !id.trim().is_empty());
        let channels: Vec<(ChannelId, String)> = self
            .control()
            .clients
            .consumer_channels(&header.group)
            .into_iter()
            .filter(|(_, client)| only.as_ref().is_none_or(|id| id == client))
            .collect();
        if channels.is_empty() {
            let remark = format!(
                "No Any Consumer online in the consumer group: [{}]",
                header.group
            );
            return self.reply(request.reply, response(response_code::SYSTEM_ERROR, remark));
        }
        let ask = GetConsumerStatusRequestHeader {
            topic: header.topic,
            group: header.group,
            client_addr: None,
        };
        self.client_calls.next_fan_out += 1;
        let id = self.client_calls.next_fan_out;
        self.client_calls.fan_outs.insert(
            id,
            StatusFanOut {
                reply: request.reply,
                outstanding: channels.len(),
                table: BTreeMap::new(),
            },
        );
        for (ChannelId(channel), client) in channels {
            let conn = ConnectionId(channel);
            let call = RemotingCommand::new_request(
                request_code::GET_CONSUMER_STATUS_FROM_CLIENT,
                ask.to_ext_fields(),
            );
            let deadline_ms = now_ms.saturating_add(CONSUMER_STATUS_TIMEOUT_MS);
            self.call_client(conn, call, Waiter::Status(id), client, deadline_ms);
        }
    }

    /// One call of status fan-out `id` ended, with the consumer's table or
    /// without one; the last answers the admin.
    fn status_call_ended(
        &mut self,
        id: u64,
        client: String,
        table: Option<BTreeMap<MessageQueue, i64>>,
    ) {
        let Some(fan_out) = self.client_calls.fan_outs.get_mut(&id) else {
            return;
        };
        if let Some(table) = table {
            fan_out.table.insert(client, table);
        }
        fan_out.outstanding -= 1;
        if fan_out.outstanding > 0 {
            return;
        }
        let Some(done) = self.client_calls.fan_outs.remove(&id) else {
            return;
        };
        let body = GetConsumerStatusBody {
            message_queue_table: BTreeMap::new(),
            consumer_table: done.table,
        };
        let answer = json_success(|out| body.to_json(out, JsonStyle::Java));
        self.reply(done.reply, answer);
    }

    /// A client's answer on one of this shard's connections.
    pub(crate) fn on_client_answer(&mut self, conn: ConnectionId, answer: RemotingCommand) {
        if self.id != 0 {
            if let Some(links) = &mut self.links {
                links.send(0, super::link::ShardMsg::ClientAnswer(conn, answer));
            }
            return;
        }
        let Some(call) = self.client_calls.pending.remove(&(conn, answer.opaque)) else {
            tracing::debug!(
                conn = conn.0,
                opaque = answer.opaque,
                "a client answer nobody waits for"
            );
            return;
        };
        match call.waiter {
            Waiter::Relay(reply) => {
                let mut answer = answer;
                answer.flag &= !flag::ONEWAY;
                self.reply(reply, answer);
            }
            Waiter::Status(id) => {
                let table = (answer.code == response_code::SUCCESS)
                    .then(|| GetConsumerStatusBody::from_json(answer.body_bytes()).ok())
                    .flatten()
                    .map(|body| body.message_queue_table);
                self.status_call_ended(id, call.client, table);
            }
        }
    }

    /// Calls whose client's connection closed, or whose time ran out,
    /// answered with SYSTEM_ERROR (shard 0's tick and closed connections).
    pub(crate) fn end_client_calls(&mut self, closed: Option<ConnectionId>, now_ms: i64) {
        let ended: Vec<(ConnectionId, i32)> = self
            .client_calls
            .pending
            .iter()
            .filter(|((conn, _), call)| Some(*conn) == closed || call.deadline_ms <= now_ms)
            .map(|(key, _)| *key)
            .collect();
        for key in ended {
            let Some(call) = self.client_calls.pending.remove(&key) else {
                continue;
            };
            let reply = match call.waiter {
                Waiter::Relay(reply) => reply,
                Waiter::Status(id) => {
                    self.status_call_ended(id, call.client, None);
                    continue;
                }
            };
            let remark = if Some(key.0) == closed {
                format!(
                    "invoke client {} failed: its connection closed",
                    call.client
                )
            } else {
                format!(
                    "invoke client {} timed out: no answer within {CLIENT_CALL_TIMEOUT_MS} ms",
                    call.client
                )
            };
            self.reply(reply, response(response_code::SYSTEM_ERROR, remark));
        }
    }
}
