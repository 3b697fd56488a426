//! Send headers: SEND_MESSAGE (10, long names), SEND_MESSAGE_V2 (310) and
//! SEND_BATCH_MESSAGE (320) (one-letter names), and the send response
//! (protocol reference 2.3.1 and 2.3.2).
//!
//! # Invariants
//!
//! - [`SendMessageRequestHeaderV2`] and [`SendMessageRequestHeader`] convert
//!   into each other without loss: `n` (V2) is `bname` (V1).

use super::custom_header;

custom_header! {
    /// `SendMessageRequestHeader`: SEND_MESSAGE (10) and SEND_REPLY_MESSAGE
    /// (324) requests, long key names (Go client, Java with
    /// `sendSmartMsg=false`).
    pub struct SendMessageRequestHeader {
        /// `producerGroup`.
        producer_group: required String = "producerGroup",
        /// `topic`.
        topic: required String = "topic",
        /// `defaultTopic`: template topic for auto-creation, normally `TBW102`.
        default_topic: required String = "defaultTopic",
        /// `defaultTopicQueueNums`: queue count of an auto-created topic.
        default_topic_queue_nums: required i32 = "defaultTopicQueueNums",
        /// `queueId`; negative lets the broker pick.
        queue_id: required i32 = "queueId",
        /// `sysFlag`: message sysFlag bits set by the client.
        sys_flag: required i32 = "sysFlag",
        /// `bornTimestamp`, ms since the epoch at the producer.
        born_timestamp: required i64 = "bornTimestamp",
        /// `flag`: user flag, stored as is.
        flag: required i32 = "flag",
        /// `properties`: the message properties string.
        properties: optional String = "properties",
        /// `reconsumeTimes`, for `%RETRY%` topics.
        reconsume_times: optional i32 = "reconsumeTimes",
        /// `unitMode`.
        unit_mode: optional bool = "unitMode",
        /// `batch`: the body is a batch body.
        batch: optional bool = "batch",
        /// `maxReconsumeTimes`, honoured for `%RETRY%` topics.
        max_reconsume_times: optional i32 = "maxReconsumeTimes",
        /// `bname`: target broker name (5.x).
        broker_name: optional String = "bname",
    }
}

custom_header! {
    /// `SendMessageRequestHeaderV2`: SEND_MESSAGE_V2 (310),
    /// SEND_BATCH_MESSAGE (320) and SEND_REPLY_MESSAGE_V2 (325) requests, the
    /// one-letter keys `a`..`n`.
    pub struct SendMessageRequestHeaderV2 {
        /// `a`: producerGroup.
        producer_group: required String = "a",
        /// `b`: topic.
        topic: required String = "b",
        /// `c`: defaultTopic.
        default_topic: required String = "c",
        /// `d`: defaultTopicQueueNums.
        default_topic_queue_nums: required i32 = "d",
        /// `e`: queueId.
        queue_id: required i32 = "e",
        /// `f`: sysFlag.
        sys_flag: required i32 = "f",
        /// `g`: bornTimestamp.
        born_timestamp: required i64 = "g",
        /// `h`: flag.
        flag: required i32 = "h",
        /// `i`: properties.
        properties: optional String = "i",
        /// `j`: reconsumeTimes.
        reconsume_times: optional i32 = "j",
        /// `k`: unitMode.
        unit_mode: optional bool = "k",
        /// `l`: maxReconsumeTimes.
        max_reconsume_times: optional i32 = "l",
        /// `m`: batch.
        batch: optional bool = "m",
        /// `n`: brokerName (late 4.9.x and 5.x).
        broker_name: optional String = "n",
    }
}

/// SEND_BATCH_MESSAGE (320) uses the V2 keys, whatever the client.
pub type SendBatchMessageRequestHeader = SendMessageRequestHeaderV2;

impl From<SendMessageRequestHeaderV2> for SendMessageRequestHeader {
    fn from(v2: SendMessageRequestHeaderV2) -> Self {
        SendMessageRequestHeader {
            producer_group: v2.producer_group,
            topic: v2.topic,
            default_topic: v2.default_topic,
            default_topic_queue_nums: v2.default_topic_queue_nums,
            queue_id: v2.queue_id,
            sys_flag: v2.sys_flag,
            born_timestamp: v2.born_timestamp,
            flag: v2.flag,
            properties: v2.properties,
            reconsume_times: v2.reconsume_times,
            unit_mode: v2.unit_mode,
            batch: v2.batch,
            max_reconsume_times: v2.max_reconsume_times,
            broker_name: v2.broker_name,
        }
    }
}

impl From<SendMessageRequestHeader> for SendMessageRequestHeaderV2 {
    fn from(v1: SendMessageRequestHeader) -> Self {
        SendMessageRequestHeaderV2 {
            producer_group: v1.producer_group,
            topic: v1.topic,
            default_topic: v1.default_topic,
            default_topic_queue_nums: v1.default_topic_queue_nums,
            queue_id: v1.queue_id,
            sys_flag: v1.sys_flag,
            born_timestamp: v1.born_timestamp,
            flag: v1.flag,
            properties: v1.properties,
            reconsume_times: v1.reconsume_times,
            unit_mode: v1.unit_mode,
            batch: v1.batch,
            max_reconsume_times: v1.max_reconsume_times,
            broker_name: v1.broker_name,
        }
    }
}

/// The broker region a Java broker reports by default (`MSG_REGION`).
pub const DEFAULT_REGION: &str = "DefaultRegion";

custom_header! {
    /// `SendMessageResponseHeader` plus the two ext keys Java adds to send
    /// responses. Send every required field on codes 0, 10, 11 and 12.
    pub struct SendMessageResponseHeader {
        /// `msgId`: offset message id(s), `,`-joined for a batch.
        msg_id: required String = "msgId",
        /// `queueId`: queue actually used.
        queue_id: required i32 = "queueId",
        /// `queueOffset`: ConsumeQueue offset of the (first) message.
        queue_offset: required i64 = "queueOffset",
        /// `transactionId`: Java sets the message's `UNIQ_KEY`.
        transaction_id: optional String = "transactionId",
        /// `batchUniqId`: inner-batch topics only.
        batch_uniq_id: optional String = "batchUniqId",
        /// `recallHandle`: 5.x timer messages only.
        recall_handle: optional String = "recallHandle",
        /// `MSG_REGION`: the broker's region (Java reads it from extFields).
        msg_region: optional String = "MSG_REGION",
        /// `TRACE_ON`: `"true"` or `"false"`; see [`Self::is_trace_on`].
        trace_on: optional String = "TRACE_ON",
    }
}

impl SendMessageResponseHeader {
    /// Whether tracing is on as the Java client decides it: anything but
    /// `"false"` (absent included) is on.
    pub fn is_trace_on(&self) -> bool {
        self.trace_on.as_deref() != Some("false")
    }

    /// Sets `MSG_REGION` and `TRACE_ON` as a Java broker does.
    pub fn set_region(&mut self, region: &str, trace_on: bool) {
        self.msg_region = Some(region.to_owned());
        self.trace_on = Some(if trace_on { "true" } else { "false" }.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::ExtFields;
    use crate::error::DecodeError;
    use crate::header::CustomHeader;

    fn java_v2_ext() -> ExtFields {
        [
            ("a", "ProducerGroupA"),
            ("b", "TopicTest"),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", "1"),
            ("f", "0"),
            ("g", "1700000000000"),
            ("h", "0"),
            ("i", "KEYS\u{1}order-1\u{2}WAIT\u{1}true\u{2}"),
            ("j", "0"),
            ("k", "false"),
            ("m", "false"),
            ("n", "broker-a"),
            ("AccessKey", ""),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn v2_header_from_java_ext_fields() {
        let header = SendMessageRequestHeaderV2::from_ext(&java_v2_ext()).unwrap();
        assert_eq!(header.producer_group, "ProducerGroupA");
        assert_eq!(header.topic, "TopicTest");
        assert_eq!(header.default_topic_queue_nums, 4);
        assert_eq!(header.queue_id, 1);
        assert_eq!(header.born_timestamp, 1_700_000_000_000);
        assert_eq!(header.unit_mode, Some(false));
        assert_eq!(header.max_reconsume_times, None);
        assert_eq!(header.broker_name.as_deref(), Some("broker-a"));
    }

    #[test]
    fn v2_header_reports_missing_and_invalid_fields_by_key() {
        let mut ext = java_v2_ext();
        ext.remove("b");
        assert_eq!(
            SendMessageRequestHeaderV2::from_ext(&ext),
            Err(DecodeError::MissingField { name: "b" })
        );
        let mut ext = java_v2_ext();
        ext.insert("e", "one");
        assert_eq!(
            SendMessageRequestHeaderV2::from_ext(&ext),
            Err(DecodeError::invalid_field("e", "one"))
        );
    }

    #[test]
    fn v2_and_v1_convert_both_ways_and_use_their_own_keys() {
        let v2 = SendMessageRequestHeaderV2::from_ext(&java_v2_ext()).unwrap();
        let v1 = SendMessageRequestHeader::from(v2.clone());
        let ext = v1.to_ext_fields();
        assert_eq!(ext.get("producerGroup"), Some("ProducerGroupA"));
        assert_eq!(ext.get("bname"), Some("broker-a"));
        assert_eq!(ext.get("a"), None);
        assert_eq!(SendMessageRequestHeader::from_ext(&ext).unwrap(), v1);
        assert_eq!(SendMessageRequestHeaderV2::from(v1), v2);
    }

    #[test]
    fn v2_to_ext_omits_absent_optionals() {
        let header = SendMessageRequestHeaderV2::from_ext(&java_v2_ext()).unwrap();
        let ext = header.to_ext_fields();
        assert_eq!(ext.get("l"), None);
        assert_eq!(ext.get("AccessKey"), None);
        assert_eq!(ext.len(), 13);
        assert_eq!(SendMessageRequestHeaderV2::from_ext(&ext).unwrap(), header);
    }

    #[test]
    fn send_response_writes_region_and_trace_keys() {
        let mut header = SendMessageResponseHeader {
            msg_id: "C0A8000A00002A9F0000000000000400".into(),
            queue_id: 1,
            queue_offset: 42,
            transaction_id: Some("C0A80005303918B4AAC21D5C1A2B0001".into()),
            ..SendMessageResponseHeader::default()
        };
        assert!(header.is_trace_on());
        header.set_region(DEFAULT_REGION, false);
        assert!(!header.is_trace_on());
        let ext = header.to_ext_fields();
        assert_eq!(ext.get("MSG_REGION"), Some("DefaultRegion"));
        assert_eq!(ext.get("TRACE_ON"), Some("false"));
        assert_eq!(ext.get("queueOffset"), Some("42"));
        assert_eq!(SendMessageResponseHeader::from_ext(&ext).unwrap(), header);
    }
}
