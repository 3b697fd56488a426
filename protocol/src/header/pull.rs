//! PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361) headers and the
//! `PullSysFlag` bits (protocol reference 2.3.4).
//!
//! # Invariants
//!
//! - [`PullSysFlag`] keeps unknown bits: `from_bits(b).bits() == b`.

use super::custom_header;

custom_header! {
    /// `PullMessageRequestHeader`.
    pub struct PullMessageRequestHeader {
        /// `consumerGroup`.
        consumer_group: required String = "consumerGroup",
        /// `topic`.
        topic: required String = "topic",
        /// `queueId`.
        queue_id: required i32 = "queueId",
        /// `queueOffset`: logical offset to start from.
        queue_offset: required i64 = "queueOffset",
        /// `maxMsgNums`: at most this many messages.
        max_msg_nums: required i32 = "maxMsgNums",
        /// `sysFlag`: [`PullSysFlag`] bits.
        sys_flag: required i32 = "sysFlag",
        /// `commitOffset`: consumer offset to store when the commit bit is set.
        commit_offset: required i64 = "commitOffset",
        /// `suspendTimeoutMillis`: long-poll hold time.
        suspend_timeout_millis: required i64 = "suspendTimeoutMillis",
        /// `subscription`: tag expression (with the subscription bit).
        subscription: optional String = "subscription",
        /// `subVersion`: subscription version known to the client.
        sub_version: required i64 = "subVersion",
        /// `expressionType`: `TAG` or `SQL92`.
        expression_type: optional String = "expressionType",
        /// `maxMsgBytes` (5.x).
        max_msg_bytes: optional i32 = "maxMsgBytes",
        /// `requestSource` (proxy only).
        request_source: optional i32 = "requestSource",
        /// `proxyFrowardClientId` (proxy only; Java's spelling).
        proxy_forward_client_id: optional String = "proxyFrowardClientId",
        /// `bname`.
        broker_name: optional String = "bname",
    }
}

impl PullMessageRequestHeader {
    /// The `sysFlag` bits.
    pub fn pull_sys_flag(&self) -> PullSysFlag {
        PullSysFlag::from_bits(self.sys_flag)
    }
}

custom_header! {
    /// `PullMessageResponseHeader`. Send the four required fields for every
    /// pull response code: the Java client unboxes them.
    pub struct PullMessageResponseHeader {
        /// `suggestWhichBrokerId`: broker id to pull from next (0 = master).
        suggest_which_broker_id: required i64 = "suggestWhichBrokerId",
        /// `nextBeginOffset`.
        next_begin_offset: required i64 = "nextBeginOffset",
        /// `minOffset`.
        min_offset: required i64 = "minOffset",
        /// `maxOffset`: next offset to be written.
        max_offset: required i64 = "maxOffset",
        /// `offsetDelta` (static topics).
        offset_delta: optional i64 = "offsetDelta",
        /// `topicSysFlag` (5.x).
        topic_sys_flag: optional i32 = "topicSysFlag",
        /// `groupSysFlag` (5.x).
        group_sys_flag: optional i32 = "groupSysFlag",
        /// `forbiddenType`, with `NO_PERMISSION`.
        forbidden_type: optional i32 = "forbiddenType",
    }
}

/// The `sysFlag` of a pull request (`PullSysFlag`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PullSysFlag(i32);

impl PullSysFlag {
    /// Bit 0: also store `commitOffset`.
    pub const COMMIT_OFFSET: i32 = 0x1;
    /// Bit 1: the broker may hold the request (long polling).
    pub const SUSPEND: i32 = 0x2;
    /// Bit 2: use the header's subscription, not the heartbeat's.
    pub const SUBSCRIPTION: i32 = 0x4;
    /// Bit 3: legacy class filter.
    pub const CLASS_FILTER: i32 = 0x8;
    /// Bit 4: lite pull consumer.
    pub const LITE_PULL: i32 = 0x10;

    /// The flag with these bits, unknown ones kept.
    pub fn from_bits(bits: i32) -> Self {
        PullSysFlag(bits)
    }

    /// The raw bits.
    pub fn bits(self) -> i32 {
        self.0
    }

    /// Whether `commitOffset` should be stored.
    pub fn has_commit_offset(self) -> bool {
        self.0 & Self::COMMIT_OFFSET != 0
    }

    /// Whether the request may be held for long polling.
    pub fn has_suspend(self) -> bool {
        self.0 & Self::SUSPEND != 0
    }

    /// Whether the header's subscription replaces the registered one.
    pub fn has_subscription(self) -> bool {
        self.0 & Self::SUBSCRIPTION != 0
    }

    /// Whether the legacy class filter is requested.
    pub fn has_class_filter(self) -> bool {
        self.0 & Self::CLASS_FILTER != 0
    }

    /// Whether a lite pull consumer sent it.
    pub fn has_lite_pull(self) -> bool {
        self.0 & Self::LITE_PULL != 0
    }

    /// The flag without the commit bit (Java clears it when pulling from a
    /// slave or on re-processing).
    pub fn without_commit_offset(self) -> Self {
        PullSysFlag(self.0 & !Self::COMMIT_OFFSET)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::ExtFields;
    use crate::error::DecodeError;
    use crate::header::CustomHeader;

    #[test]
    fn java_push_consumer_pull_request_decodes() {
        let ext: ExtFields = [
            ("bname", "broker-a"),
            ("commitOffset", "40"),
            ("consumerGroup", "g1"),
            ("expressionType", "TAG"),
            ("maxMsgBytes", "262144"),
            ("maxMsgNums", "32"),
            ("queueId", "1"),
            ("queueOffset", "40"),
            ("subVersion", "1700000000000"),
            ("suspendTimeoutMillis", "15000"),
            ("sysFlag", "3"),
            ("topic", "TopicTest"),
        ]
        .into_iter()
        .collect();
        let header = PullMessageRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.queue_offset, 40);
        assert_eq!(header.suspend_timeout_millis, 15000);
        assert_eq!(header.subscription, None);
        assert_eq!(header.max_msg_bytes, Some(262144));
        let flag = header.pull_sys_flag();
        assert!(flag.has_commit_offset());
        assert!(flag.has_suspend());
        assert!(!flag.has_subscription());
        assert!(!flag.has_class_filter());
        assert!(!flag.has_lite_pull());
        assert_eq!(flag.without_commit_offset().bits(), 2);
        let mut without_group = ext.clone();
        without_group.remove("consumerGroup");
        assert_eq!(
            PullMessageRequestHeader::from_ext(&without_group),
            Err(DecodeError::MissingField {
                name: "consumerGroup"
            })
        );
    }

    #[test]
    fn pull_response_always_writes_the_four_offsets() {
        let header = PullMessageResponseHeader {
            max_offset: 43,
            next_begin_offset: 43,
            ..Default::default()
        };
        let ext = header.to_ext_fields();
        assert_eq!(ext.len(), 4);
        assert_eq!(ext.get("suggestWhichBrokerId"), Some("0"));
        assert_eq!(ext.get("minOffset"), Some("0"));
        assert_eq!(PullMessageResponseHeader::from_ext(&ext).unwrap(), header);
    }
}
