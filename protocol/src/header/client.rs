//! Client-lifecycle and consumer-group headers: UNREGISTER_CLIENT (35),
//! CONSUMER_SEND_MSG_BACK (36), GET_CONSUMER_LIST_BY_GROUP (38),
//! NOTIFY_CONSUMER_IDS_CHANGED (40) (protocol reference 2.3.8, 2.3.9,
//! 2.3.12, 2.3.13). HEART_BEAT (34) and LOCK/UNLOCK_BATCH_MQ (41/42) have no
//! header fields; see the [module docs](super).
//!
//! # Invariants
//!
//! - Key names are Java's field names exactly (`clientID`, not `clientId`); primitives are always written.

use super::custom_header;

custom_header! {
    /// `UnregisterClientRequestHeader`.
    pub struct UnregisterClientRequestHeader {
        /// `clientID` (Java's spelling).
        client_id: required String = "clientID",
        /// `producerGroup`.
        producer_group: optional String = "producerGroup",
        /// `consumerGroup`.
        consumer_group: optional String = "consumerGroup",
    }
}

custom_header! {
    /// `ConsumerSendMsgBackRequestHeader`.
    pub struct ConsumerSendMsgBackRequestHeader {
        /// `offset`: CommitLog offset of the failed message.
        offset: required i64 = "offset",
        /// `group`: consumer group.
        group: required String = "group",
        /// `delayLevel`: 0 broker chooses, -1 straight to DLQ, n > 0 that level.
        delay_level: required i32 = "delayLevel",
        /// `originMsgId`.
        origin_msg_id: optional String = "originMsgId",
        /// `originTopic`.
        origin_topic: optional String = "originTopic",
        /// `unitMode` (Java primitive, default false).
        unit_mode: primitive bool = "unitMode" => false,
        /// `maxReconsumeTimes`.
        max_reconsume_times: optional i32 = "maxReconsumeTimes",
        /// `bname`.
        broker_name: optional String = "bname",
    }
}

custom_header! {
    /// `GetConsumerListByGroupRequestHeader`.
    pub struct GetConsumerListByGroupRequestHeader {
        /// `consumerGroup`.
        consumer_group: required String = "consumerGroup",
    }
}

custom_header! {
    /// `NotifyConsumerIdsChangedRequestHeader` (broker to consumer, one-way).
    pub struct NotifyConsumerIdsChangedRequestHeader {
        /// `consumerGroup`.
        consumer_group: required String = "consumerGroup",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::ExtFields;
    use crate::header::CustomHeader;

    #[test]
    fn send_back_primitive_defaults_when_absent_and_is_always_written() {
        let ext: ExtFields = [("offset", "77"), ("group", "g"), ("delayLevel", "-1")]
            .into_iter()
            .collect();
        let header = ConsumerSendMsgBackRequestHeader::from_ext(&ext).unwrap();
        assert!(!header.unit_mode);
        assert_eq!(header.delay_level, -1);
        let written = header.to_ext_fields();
        assert_eq!(written.get("unitMode"), Some("false"));
        assert_eq!(
            ConsumerSendMsgBackRequestHeader::from_ext(&written).unwrap(),
            header
        );
    }

    #[test]
    fn unregister_client_uses_java_client_id_spelling() {
        let ext: ExtFields = [("clientID", "10.0.0.1@123"), ("producerGroup", "p")]
            .into_iter()
            .collect();
        let header = UnregisterClientRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.client_id, "10.0.0.1@123");
        assert_eq!(header.consumer_group, None);
    }
}
