//! Request-reply on shard 0 (owner of the client registry), as Java's
//! `ReplyMessageProcessor`: SEND_REPLY_MESSAGE (324) and
//! SEND_REPLY_MESSAGE_V2 (325) push the reply to the requesting producer
//! with PUSH_REPLY_MESSAGE_TO_CLIENT (326) and store it in its topic
//! (`<cluster>_REPLY_TOPIC`, created with the broker's system topics).
//!
//! ```text
//!  SEND_REPLY_MESSAGE ─▶ REPLY_TO_CLIENT ─▶ producer channel (any shard) ─▶ PUSH_REPLY_MESSAGE_TO_CLIENT
//!                     └▶ internal SEND_MESSAGE of the same message ─▶ send path ─▶ answer
//! ```
//!
//! The push is one-way here (Java waits for the client's answer; the Java
//! client's handler answers SUCCESS unless it throws), so "pushed" means a
//! channel of the requester was found. When none is, the reply is still
//! stored and the sender gets SYSTEM_ERROR, as from Java.
//!
//! # Invariants
//! - Every reply request gets exactly one answer: the send path's when the
//!   push went out, SYSTEM_ERROR (or a header error) otherwise.

use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::header::{CustomHeader, SendMessageRequestHeader, SendMessageRequestHeaderV2};
use ringmq_protocol::message::properties::rewrite_properties;
use ringmq_protocol::message::{Properties, property_key};

use super::link::{ReplyTo, Request};
use super::{ShardHandler, response};
use crate::server::ConnectionId;

fn decode_reply_header(cmd: &RemotingCommand) -> Result<SendMessageRequestHeader, String> {
    if cmd.code == request_code::SEND_REPLY_MESSAGE_V2 {
        cmd.decode_custom_header::<SendMessageRequestHeaderV2>()
            .map(SendMessageRequestHeader::from)
            .map_err(|error| error.to_string())
    } else {
        cmd.decode_custom_header::<SendMessageRequestHeader>()
            .map_err(|error| error.to_string())
    }
}

/// The PUSH_REPLY_MESSAGE_TO_CLIENT header (Java's `ReplyMessageRequestHeader`).
fn push_header(
    header: &SendMessageRequestHeader,
    properties: &str,
    born_host: &str,
    store_host: &str,
    store_timestamp_ms: i64,
) -> ExtFields {
    let mut ext = ExtFields::new();
    ext.insert("producerGroup", &header.producer_group);
    ext.insert("topic", &header.topic);
    ext.insert("defaultTopic", &header.default_topic);
    ext.insert(
        "defaultTopicQueueNums",
        &header.default_topic_queue_nums.to_string(),
    );
    ext.insert("queueId", &header.queue_id.to_string());
    ext.insert("sysFlag", &header.sys_flag.to_string());
    ext.insert("bornTimestamp", &header.born_timestamp.to_string());
    ext.insert("flag", &header.flag.to_string());
    ext.insert("properties", properties);
    if let Some(times) = header.reconsume_times {
        ext.insert("reconsumeTimes", &times.to_string());
    }
    ext.insert("unitMode", &header.unit_mode.unwrap_or(false).to_string());
    ext.insert("bornHost", born_host);
    ext.insert("storeHost", store_host);
    ext.insert("storeTimestamp", &store_timestamp_ms.to_string());
    ext
}

impl ShardHandler {
    /// SEND_REPLY_MESSAGE(_V2) on shard 0.
    pub(crate) fn reply_message(&mut self, request: Box<Request>, now_ms: i64) {
        let header = match decode_reply_header(&request.cmd) {
            Ok(header) => header,
            Err(remark) => {
                return self.reply(request.reply, response(response_code::SYSTEM_ERROR, remark));
            }
        };
        let properties = header.properties.clone().unwrap_or_default();
        let sender = Properties::new(properties.as_bytes())
            .get(property_key::REPLY_TO_CLIENT)
            .map(str::to_owned);
        let channel = sender.as_deref().and_then(|client_id| {
            self.control
                .as_ref()
                .and_then(|c| c.clients.producer_channel_by_client_id(client_id))
        });
        let refusal = match (&sender, channel) {
            (None, _) => Some(format!(
                "reply message properties[{}] is null",
                property_key::REPLY_TO_CLIENT
            )),
            (Some(sender), None) => Some(format!(
                "push reply message fail, channel of <{sender}> not found."
            )),
            (Some(_), Some(channel)) => {
                let mut pushed = Vec::with_capacity(properties.len() + 32);
                let now_text = now_ms.to_string();
                if let Err(error) = rewrite_properties(
                    properties.as_bytes(),
                    &[],
                    &[(property_key::PUSH_REPLY_TIME, &now_text)],
                    &mut pushed,
                ) {
                    return self.reply(
                        request.reply,
                        response(response_code::MESSAGE_ILLEGAL, error.to_string()),
                    );
                }
                let ext = push_header(
                    &header,
                    &String::from_utf8_lossy(&pushed),
                    &request.peer.to_string(),
                    &self.settings.store_host.to_string(),
                    now_ms,
                );
                let mut push =
                    RemotingCommand::new_request(request_code::PUSH_REPLY_MESSAGE_TO_CLIENT, ext);
                push.body = request.cmd.body.clone();
                self.push_to_client(ConnectionId(channel.0), push);
                None
            }
        };
        if let Some(remark) = &refusal {
            tracing::warn!(%remark, "request-reply");
        }
        // Store the reply through the send path (Java's storeReplyMessageEnable,
        // default true).
        let mut ext = ExtFields::new();
        header.to_ext(&mut ext);
        let mut cmd = RemotingCommand::new_request(request_code::SEND_MESSAGE, ext);
        cmd.body = request.cmd.body.clone();
        cmd.opaque = request.reply.opaque;
        let reply = match refusal {
            None => request.reply,
            Some(remark) => {
                self.reply(request.reply, response(response_code::SYSTEM_ERROR, remark));
                ReplyTo {
                    oneway: true,
                    ..request.reply
                }
            }
        };
        let store = Request {
            cmd,
            reply,
            peer: request.peer,
        };
        self.dispatch(Box::new(store), now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_push_header_carries_what_the_java_client_reads() {
        let header = SendMessageRequestHeader {
            producer_group: "pg".into(),
            topic: "DefaultCluster_REPLY_TOPIC".into(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: 4,
            queue_id: 1,
            sys_flag: 0,
            born_timestamp: 42,
            flag: 3,
            reconsume_times: Some(0),
            ..SendMessageRequestHeader::default()
        };
        let ext = push_header(
            &header,
            "a\u{1}b\u{2}",
            "127.0.0.1:5",
            "127.0.0.1:10911",
            99,
        );
        for (key, value) in [
            ("producerGroup", "pg"),
            ("topic", "DefaultCluster_REPLY_TOPIC"),
            ("defaultTopic", "TBW102"),
            ("defaultTopicQueueNums", "4"),
            ("queueId", "1"),
            ("sysFlag", "0"),
            ("bornTimestamp", "42"),
            ("flag", "3"),
            ("properties", "a\u{1}b\u{2}"),
            ("reconsumeTimes", "0"),
            ("unitMode", "false"),
            ("bornHost", "127.0.0.1:5"),
            ("storeHost", "127.0.0.1:10911"),
            ("storeTimestamp", "99"),
        ] {
            assert_eq!(ext.get(key), Some(value), "{key}");
        }
    }
}
