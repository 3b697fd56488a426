//! Broker admin headers used by `mqadmin` and clients (protocol reference
//! 2.3.19): UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215),
//! GET_ALL_TOPIC_CONFIG (21), GET_TOPIC_CONFIG (351),
//! GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204),
//! GET_CONSUME_STATS (208), GET_TOPIC_STATS_INFO (202),
//! QUERY_TOPIC_CONSUME_BY_WHO (300), QUERY_TOPICS_BY_CONSUMER (343),
//! DELETE_SUBSCRIPTIONGROUP (207), GET_SUBSCRIPTIONGROUP_CONFIG (352),
//! GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), GET_BROKER_CONFIG (26) response,
//! GET_CONSUMER_RUNNING_INFO (307), INVOKE_BROKER_TO_RESET_OFFSET (222),
//! QUERY_SUBSCRIPTION_BY_CONSUMER (345), CLONE_GROUP_OFFSET (314),
//! GET_BROKER_CONSUME_STATS (317), QUERY_CONSUME_TIME_SPAN (303),
//! VIEW_BROKER_STATS_DATA (315), QUERY_CONSUME_QUEUE (321),
//! INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) and
//! GET_CONSUMER_STATUS_FROM_CLIENT (221).
//! GET_BROKER_RUNTIME_INFO (28) and
//! UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) have no header.
//!
//! # Invariants
//!
//! - Key names are Java's field names exactly; required fields are checked by `from_ext`.

use super::custom_header;

custom_header! {
    /// `CreateTopicRequestHeader` (UPDATE_AND_CREATE_TOPIC).
    pub struct CreateTopicRequestHeader {
        /// `topic`.
        topic: required String = "topic",
        /// `defaultTopic` (mqadmin sends `TBW102`).
        default_topic: required String = "defaultTopic",
        /// `readQueueNums`.
        read_queue_nums: required i32 = "readQueueNums",
        /// `writeQueueNums`.
        write_queue_nums: required i32 = "writeQueueNums",
        /// `perm`: permission bits.
        perm: required i32 = "perm",
        /// `topicFilterType`: `SINGLE_TAG` or `MULTI_TAG`.
        topic_filter_type: required String = "topicFilterType",
        /// `topicSysFlag`.
        topic_sys_flag: optional i32 = "topicSysFlag",
        /// `order`.
        order: required bool = "order",
        /// `attributes`: `+key=value,+k2=v2,-k3`.
        attributes: optional String = "attributes",
        /// `force`.
        force: optional bool = "force",
    }
}

custom_header! {
    /// `DeleteTopicRequestHeader` (DELETE_TOPIC_IN_BROKER).
    pub struct DeleteTopicRequestHeader {
        /// `topic`.
        topic: required String = "topic",
    }
}

custom_header! {
    /// `GetAllTopicConfigRequestHeader` (5.x paging fields, all optional).
    pub struct GetAllTopicConfigRequestHeader {
        /// `topicSeq`.
        topic_seq: optional i32 = "topicSeq",
        /// `dataVersion`.
        data_version: optional String = "dataVersion",
        /// `maxTopicNum`.
        max_topic_num: optional i32 = "maxTopicNum",
    }
}

custom_header! {
    /// `GetAllTopicConfigResponseHeader` (5.x).
    pub struct GetAllTopicConfigResponseHeader {
        /// `totalTopicNum`.
        total_topic_num: optional i32 = "totalTopicNum",
    }
}

custom_header! {
    /// `GetTopicConfigRequestHeader` (GET_TOPIC_CONFIG, 5.x).
    pub struct GetTopicConfigRequestHeader {
        /// `topic`.
        topic: required String = "topic",
    }
}

custom_header! {
    /// `GetConsumerConnectionListRequestHeader`.
    pub struct GetConsumerConnectionListRequestHeader {
        /// `consumerGroup`.
        consumer_group: required String = "consumerGroup",
    }
}

custom_header! {
    /// `GetProducerConnectionListRequestHeader`.
    pub struct GetProducerConnectionListRequestHeader {
        /// `producerGroup`.
        producer_group: required String = "producerGroup",
    }
}

custom_header! {
    /// `GetConsumeStatsRequestHeader`.
    pub struct GetConsumeStatsRequestHeader {
        /// `consumerGroup`.
        consumer_group: required String = "consumerGroup",
        /// `topic`.
        topic: optional String = "topic",
        /// `topicList`: `;`-separated (5.x).
        topic_list: optional String = "topicList",
    }
}

impl GetConsumeStatsRequestHeader {
    /// The topics of `topicList`, empty entries skipped.
    pub fn topics(&self) -> impl Iterator<Item = &str> {
        self.topic_list
            .as_deref()
            .unwrap_or("")
            .split(';')
            .filter(|topic| !topic.is_empty())
    }
}

custom_header! {
    /// `ResetOffsetRequestHeader` (INVOKE_BROKER_TO_RESET_OFFSET): the
    /// group's offsets on the topic to `offset`, or to the first message
    /// stored at or after `timestamp` (a negative timestamp: the max offset).
    pub struct ResetOffsetRequestHeader {
        /// `topic`.
        topic: required String = "topic",
        /// `group`.
        group: required String = "group",
        /// `queueId`: one queue, or -1 (the Java default) for all.
        queue_id: optional i32 = "queueId",
        /// `offset`: the target offset of that one queue; -1 or absent: by
        /// timestamp.
        offset: optional i64 = "offset",
        /// `timestamp` in ms.
        timestamp: required i64 = "timestamp",
        /// `isForce` (what 4.x brokers used; a 5.x broker resets either way).
        is_force: optional bool = "isForce",
    }
}

impl ResetOffsetRequestHeader {
    /// The one queue asked for, if any.
    pub fn queue(&self) -> Option<i32> {
        self.queue_id.filter(|queue| *queue >= 0)
    }

    /// The explicit target offset, if any.
    pub fn target_offset(&self) -> Option<i64> {
        self.offset.filter(|offset| *offset != -1)
    }
}

custom_header! {
    /// `QuerySubscriptionByConsumerRequestHeader`.
    pub struct QuerySubscriptionByConsumerRequestHeader {
        /// `group`.
        group: required String = "group",
        /// `topic`.
        topic: required String = "topic",
    }
}

custom_header! {
    /// `CloneGroupOffsetRequestHeader`: copy `srcGroup`'s offsets of the
    /// topic (every topic it has offsets for when absent) to `destGroup`.
    pub struct CloneGroupOffsetRequestHeader {
        /// `srcGroup`.
        src_group: required String = "srcGroup",
        /// `destGroup`.
        dest_group: required String = "destGroup",
        /// `topic`.
        topic: optional String = "topic",
        /// `offline`: skip the check that an online source group subscribes
        /// to the topic.
        offline: optional bool = "offline",
    }
}

custom_header! {
    /// `GetConsumeStatsInBrokerHeader` (GET_BROKER_CONSUME_STATS).
    pub struct GetConsumeStatsInBrokerHeader {
        /// `isOrder`: only the topics configured as ordered.
        is_order: optional bool = "isOrder",
    }
}

custom_header! {
    /// `QueryConsumeTimeSpanRequestHeader`.
    pub struct QueryConsumeTimeSpanRequestHeader {
        /// `topic`.
        topic: required String = "topic",
        /// `group`.
        group: required String = "group",
    }
}

custom_header! {
    /// `GetTopicStatsInfoRequestHeader`.
    pub struct GetTopicStatsInfoRequestHeader {
        /// `topic`.
        topic: required String = "topic",
    }
}

custom_header! {
    /// `QueryTopicConsumeByWhoRequestHeader`.
    pub struct QueryTopicConsumeByWhoRequestHeader {
        /// `topic`.
        topic: required String = "topic",
    }
}

custom_header! {
    /// `QueryTopicsByConsumerRequestHeader`.
    pub struct QueryTopicsByConsumerRequestHeader {
        /// `group`.
        group: required String = "group",
    }
}

custom_header! {
    /// `DeleteSubscriptionGroupRequestHeader`.
    pub struct DeleteSubscriptionGroupRequestHeader {
        /// `groupName`.
        group_name: required String = "groupName",
        /// `cleanOffset` (Java primitive, default false).
        clean_offset: primitive bool = "cleanOffset" => false,
    }
}

custom_header! {
    /// `GetSubscriptionGroupConfigRequestHeader` (5.x).
    pub struct GetSubscriptionGroupConfigRequestHeader {
        /// `group`.
        group: required String = "group",
    }
}

custom_header! {
    /// `GetAllSubscriptionGroupRequestHeader` (5.x paging fields).
    pub struct GetAllSubscriptionGroupRequestHeader {
        /// `groupSeq`.
        group_seq: optional i32 = "groupSeq",
        /// `dataVersion`.
        data_version: optional String = "dataVersion",
        /// `maxGroupNum`.
        max_group_num: optional i32 = "maxGroupNum",
    }
}

custom_header! {
    /// `GetBrokerConfigResponseHeader`.
    pub struct GetBrokerConfigResponseHeader {
        /// `version`: the DataVersion as JSON text.
        version: required String = "version",
    }
}

custom_header! {
    /// `GetConsumerRunningInfoRequestHeader` (forwarded to the client).
    pub struct GetConsumerRunningInfoRequestHeader {
        /// `consumerGroup`.
        consumer_group: required String = "consumerGroup",
        /// `clientId`.
        client_id: required String = "clientId",
        /// `jstackEnable` (Java primitive, default false).
        jstack_enable: primitive bool = "jstackEnable" => false,
    }
}

custom_header! {
    /// `ViewBrokerStatsDataRequestHeader` (VIEW_BROKER_STATS_DATA).
    pub struct ViewBrokerStatsDataRequestHeader {
        /// `statsName`: `TOPIC_PUT_NUMS`, `GROUP_GET_NUMS`, ...
        stats_name: required String = "statsName",
        /// `statsKey`: a topic, `topic@group`, or the cluster name.
        stats_key: required String = "statsKey",
    }
}

custom_header! {
    /// `QueryConsumeQueueRequestHeader` (QUERY_CONSUME_QUEUE, `mqadmin
    /// queryCq`). Java marks no field required; the numbers default to 0.
    pub struct QueryConsumeQueueRequestHeader {
        /// `topic`.
        topic: required String = "topic",
        /// `queueId`.
        queue_id: primitive i32 = "queueId" => 0,
        /// `index`: the first queue offset.
        index: primitive i64 = "index" => 0,
        /// `count`: how many entries.
        count: primitive i32 = "count" => 0,
        /// `consumerGroup`: evaluate its subscription, if online.
        consumer_group: optional String = "consumerGroup",
    }
}

custom_header! {
    /// `GetConsumerStatusRequestHeader` (INVOKE_BROKER_TO_GET_CONSUMER_STATUS
    /// to the broker; GET_CONSUMER_STATUS_FROM_CLIENT, without `clientAddr`,
    /// from it to each consumer).
    pub struct GetConsumerStatusRequestHeader {
        /// `topic`.
        topic: required String = "topic",
        /// `group`.
        group: required String = "group",
        /// `clientAddr`: the one consumer (its client id) to ask, or all.
        client_addr: optional String = "clientAddr",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::ExtFields;
    use crate::error::DecodeError;
    use crate::header::CustomHeader;

    #[test]
    fn create_topic_from_cpp_style_numbers() {
        // The C++ client sends numbers; the JSON decoder already made them text.
        let ext: ExtFields = [
            ("topic", "T"),
            ("defaultTopic", "TBW102"),
            ("readQueueNums", "8"),
            ("writeQueueNums", "8"),
            ("perm", "6"),
            ("topicFilterType", "SINGLE_TAG"),
            ("order", "false"),
        ]
        .into_iter()
        .collect();
        let header = CreateTopicRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.perm, 6);
        assert!(!header.order);
        assert_eq!(header.force, None);
        let mut without_order = ext.clone();
        without_order.remove("order");
        assert_eq!(
            CreateTopicRequestHeader::from_ext(&without_order),
            Err(DecodeError::MissingField { name: "order" })
        );
    }

    #[test]
    fn consume_stats_splits_the_topic_list() {
        let header = GetConsumeStatsRequestHeader {
            consumer_group: "g".into(),
            topic: None,
            topic_list: Some("a;;b".into()),
        };
        assert_eq!(header.topics().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(
            GetConsumeStatsRequestHeader::from_ext(&header.to_ext_fields()).unwrap(),
            header
        );
    }

    #[test]
    fn reset_offset_reads_what_the_java_admin_sends() {
        // MQClientAPIImpl.invokeBrokerToResetOffset: every queue, by time.
        let ext: ExtFields = [
            ("topic", "T"),
            ("group", "G"),
            ("queueId", "-1"),
            ("offset", "-1"),
            ("timestamp", "1700000000000"),
            ("isForce", "true"),
            ("lo", "false"),
        ]
        .into_iter()
        .collect();
        let header = ResetOffsetRequestHeader::from_ext(&ext).unwrap();
        assert_eq!((header.queue(), header.target_offset()), (None, None));
        assert_eq!(header.timestamp, 1_700_000_000_000);
        // The variant with one queue and an explicit offset.
        let one = ResetOffsetRequestHeader {
            queue_id: Some(3),
            offset: Some(42),
            is_force: None,
            ..header
        };
        let back = ResetOffsetRequestHeader::from_ext(&one.to_ext_fields()).unwrap();
        assert_eq!((back.queue(), back.target_offset()), (Some(3), Some(42)));
        let mut without_timestamp = ext.clone();
        without_timestamp.remove("timestamp");
        assert_eq!(
            ResetOffsetRequestHeader::from_ext(&without_timestamp),
            Err(DecodeError::MissingField { name: "timestamp" })
        );
    }

    #[test]
    fn all_topic_config_accepts_no_fields() {
        let header = GetAllTopicConfigRequestHeader::from_ext(&ExtFields::new()).unwrap();
        assert_eq!(header, GetAllTopicConfigRequestHeader::default());
        assert!(header.to_ext_fields().is_empty());
    }
}
