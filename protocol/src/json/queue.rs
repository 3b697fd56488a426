//! `MessageQueue` and the queue-lock bodies (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).
//!
//! ```text
//! MessageQueue           {"brokerName":"b","queueId":0,"topic":"T"}
//! LockBatchRequestBody   {"clientId":..,"consumerGroup":..,"mqSet":[MessageQueue..],"onlyThisBroker":false}
//! LockBatchResponseBody  {"lockOKMQSet":[MessageQueue..]}
//! ```
//!
//! As a map key (`Map<MessageQueue,_>`) a queue is written in fastjson's
//! native object-key form and read from that form or from a string key that
//! holds the queue's JSON (fastjson 1.2.83 `MapDeserializer` accepts both).
//!
//! # Invariants
//!
//! - `MessageQueue`'s order is topic, then broker name, then queue id (Java's
//!   `compareTo`); the derived `Ord` follows the field order below.

use super::bean::{JsonBean, field_list, json_body, read_list};
use super::error::JsonError;
use super::parse::parse;
use super::value::{JsonKey, JsonValue, Members};
use super::write::{ArrayKind, JsonWriter};

/// One queue of a topic on one broker group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MessageQueue {
    /// `topic`.
    pub topic: String,
    /// `brokerName`.
    pub broker_name: String,
    /// `queueId`.
    pub queue_id: i32,
}

impl MessageQueue {
    /// A queue.
    pub fn new(topic: &str, broker_name: &str, queue_id: i32) -> Self {
        Self {
            topic: topic.to_owned(),
            broker_name: broker_name.to_owned(),
            queue_id,
        }
    }

    /// Reads a queue from a map key: an object key, or a string key holding
    /// the queue's JSON.
    ///
    /// # Errors
    ///
    /// [`JsonError::InvalidKey`] for integer keys or strings that are not a
    /// queue's JSON; errors of the queue's members.
    pub fn from_key(key: &JsonKey, path: &str) -> Result<Self, JsonError> {
        let invalid = || JsonError::InvalidKey {
            member: path.to_owned(),
            key: key.shown(),
            expected: "a MessageQueue",
        };
        match key {
            JsonKey::Object(value) => Self::read_json(value, path),
            JsonKey::Str(text) => {
                let value = parse(text.as_bytes()).map_err(|_| invalid())?;
                Self::read_json(&value, path)
            }
            JsonKey::Int(_) => Err(invalid()),
        }
    }
}

impl JsonBean for MessageQueue {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_str("brokerName", &self.broker_name);
        w.field_i64("queueId", i64::from(self.queue_id));
        w.field_str("topic", &self.topic);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            topic: m.string_or_empty("topic")?,
            broker_name: m.string_or_empty("brokerName")?,
            queue_id: m.i32("queueId")?.unwrap_or(0),
        })
    }
}
json_body!(MessageQueue);

/// LOCK_BATCH_MQ request body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LockBatchRequestBody {
    /// `consumerGroup`.
    pub consumer_group: String,
    /// `clientId`.
    pub client_id: String,
    /// `onlyThisBroker`: only matters in quorum (multi-replica) mode.
    pub only_this_broker: bool,
    /// `mqSet` (a Java `HashSet`).
    pub mq_set: Vec<MessageQueue>,
}

/// UNLOCK_BATCH_MQ request body: the same members as the lock request.
pub type UnlockBatchRequestBody = LockBatchRequestBody;

impl JsonBean for LockBatchRequestBody {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        w.field_str("clientId", &self.client_id);
        w.field_str("consumerGroup", &self.consumer_group);
        field_list(w, "mqSet", ArrayKind::Set, &self.mq_set);
        w.field_bool("onlyThisBroker", self.only_this_broker);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            consumer_group: m.string_or_empty("consumerGroup")?,
            client_id: m.string_or_empty("clientId")?,
            only_this_broker: m.bool("onlyThisBroker")?.unwrap_or(false),
            mq_set: read_list(&m, "mqSet")?,
        })
    }
}
json_body!(LockBatchRequestBody);

/// LOCK_BATCH_MQ response body: the queues now locked by the client.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LockBatchResponseBody {
    /// `lockOKMQSet`.
    pub lock_ok_mq_set: Vec<MessageQueue>,
}

impl JsonBean for LockBatchResponseBody {
    fn write_json(&self, w: &mut JsonWriter<'_>) {
        w.begin_bean();
        field_list(w, "lockOKMQSet", ArrayKind::Set, &self.lock_ok_mq_set);
        w.end_bean();
    }

    fn read_json(value: &JsonValue, path: &str) -> Result<Self, JsonError> {
        let m = Members::of(value, path)?;
        Ok(Self {
            lock_ok_mq_set: read_list(&m, "lockOKMQSet")?,
        })
    }
}
json_body!(LockBatchResponseBody);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonStyle;

    #[test]
    fn message_queue_orders_by_topic_then_broker_then_queue_id() {
        let mut queues = vec![
            MessageQueue::new("B", "a", 0),
            MessageQueue::new("A", "b", 0),
            MessageQueue::new("A", "a", 2),
            MessageQueue::new("A", "a", 1),
        ];
        queues.sort();
        assert_eq!(
            queues,
            vec![
                MessageQueue::new("A", "a", 1),
                MessageQueue::new("A", "a", 2),
                MessageQueue::new("A", "b", 0),
                MessageQueue::new("B", "a", 0),
            ]
        );
    }

    #[test]
    fn lock_request_example_parses_and_reencodes_byte_for_byte() {
        let text = br#"{"clientId":"c1","consumerGroup":"g","mqSet":[{"brokerName":"b","queueId":0,"topic":"T"}],"onlyThisBroker":false}"#;
        let body = LockBatchRequestBody::from_json(text).unwrap();
        assert_eq!(body.mq_set, vec![MessageQueue::new("T", "b", 0)]);
        let mut out = Vec::new();
        body.to_json(&mut out, JsonStyle::Java);
        assert_eq!(out, text);
    }

    #[test]
    fn lock_response_writes_lock_ok_mq_set() {
        let body = LockBatchResponseBody {
            lock_ok_mq_set: vec![MessageQueue::new("T", "b", 3)],
        };
        let mut out = Vec::new();
        body.to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            out,
            br#"{"lockOKMQSet":[{"brokerName":"b","queueId":3,"topic":"T"}]}"#
        );
        assert_eq!(LockBatchResponseBody::from_json(&out).unwrap(), body);
    }

    #[test]
    fn message_queue_key_reads_object_and_stringified_forms() {
        let expected = MessageQueue::new("T", "b", 1);
        let object = parse(br#"{"topic":"T","brokerName":"b","queueId":1}"#).unwrap();
        assert_eq!(
            MessageQueue::from_key(&JsonKey::Object(Box::new(object)), "m").unwrap(),
            expected
        );
        let text = JsonKey::Str(r#"{"topic":"T","brokerName":"b","queueId":"1"}"#.into());
        assert_eq!(MessageQueue::from_key(&text, "m").unwrap(), expected);
        assert!(MessageQueue::from_key(&JsonKey::Int(1), "m").is_err());
    }
}
