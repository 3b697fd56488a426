//! Consumer offset and queue offset headers: QUERY_CONSUMER_OFFSET (14),
//! UPDATE_CONSUMER_OFFSET (15), SEARCH_OFFSET_BY_TIMESTAMP (29),
//! GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32)
//! (protocol reference 2.3.14 to 2.3.16).
//!
//! # Invariants
//!
//! - Primitive `committed` defaults to `true` like Java's field initialiser, both when absent and in `Default`.

use super::{BoundaryType, custom_header};

custom_header! {
    /// `QueryConsumerOffsetRequestHeader`.
    pub struct QueryConsumerOffsetRequestHeader {
        /// `consumerGroup`.
        consumer_group: required String = "consumerGroup",
        /// `topic`.
        topic: required String = "topic",
        /// `queueId`.
        queue_id: required i32 = "queueId",
        /// `setZeroIfNotFound` (5.x).
        set_zero_if_not_found: optional bool = "setZeroIfNotFound",
        /// `bname`.
        broker_name: optional String = "bname",
    }
}

custom_header! {
    /// `QueryConsumerOffsetResponseHeader`.
    pub struct QueryConsumerOffsetResponseHeader {
        /// `offset`.
        offset: required i64 = "offset",
    }
}

custom_header! {
    /// `UpdateConsumerOffsetRequestHeader` (usually one-way).
    pub struct UpdateConsumerOffsetRequestHeader {
        /// `consumerGroup`.
        consumer_group: required String = "consumerGroup",
        /// `topic`.
        topic: required String = "topic",
        /// `queueId`.
        queue_id: required i32 = "queueId",
        /// `commitOffset`.
        commit_offset: required i64 = "commitOffset",
        /// `bname`.
        broker_name: optional String = "bname",
    }
}

custom_header! {
    /// `GetMaxOffsetRequestHeader`.
    pub struct GetMaxOffsetRequestHeader {
        /// `topic`.
        topic: required String = "topic",
        /// `queueId`.
        queue_id: required i32 = "queueId",
        /// `committed` (5.x Java primitive, default true).
        committed: primitive bool = "committed" => true,
        /// `bname`.
        broker_name: optional String = "bname",
    }
}

custom_header! {
    /// `GetMaxOffsetResponseHeader`: next offset to be written.
    pub struct GetMaxOffsetResponseHeader {
        /// `offset`.
        offset: required i64 = "offset",
    }
}

custom_header! {
    /// `GetMinOffsetRequestHeader`.
    pub struct GetMinOffsetRequestHeader {
        /// `topic`.
        topic: required String = "topic",
        /// `queueId`.
        queue_id: required i32 = "queueId",
        /// `bname`.
        broker_name: optional String = "bname",
    }
}

custom_header! {
    /// `GetMinOffsetResponseHeader`: smallest offset still present.
    pub struct GetMinOffsetResponseHeader {
        /// `offset`.
        offset: required i64 = "offset",
    }
}

custom_header! {
    /// `GetEarliestMsgStoretimeRequestHeader`.
    pub struct GetEarliestMsgStoretimeRequestHeader {
        /// `topic`.
        topic: required String = "topic",
        /// `queueId`.
        queue_id: required i32 = "queueId",
        /// `bname`.
        broker_name: optional String = "bname",
    }
}

custom_header! {
    /// `GetEarliestMsgStoretimeResponseHeader`.
    pub struct GetEarliestMsgStoretimeResponseHeader {
        /// `timestamp`: store time of the earliest message, -1 if none.
        timestamp: required i64 = "timestamp",
    }
}

custom_header! {
    /// `SearchOffsetRequestHeader`.
    pub struct SearchOffsetRequestHeader {
        /// `topic`.
        topic: required String = "topic",
        /// `queueId`.
        queue_id: required i32 = "queueId",
        /// `timestamp`, ms.
        timestamp: required i64 = "timestamp",
        /// `boundaryType`; absent means [`BoundaryType::Lower`].
        boundary_type: optional BoundaryType = "boundaryType",
        /// `bname`.
        broker_name: optional String = "bname",
    }
}

impl SearchOffsetRequestHeader {
    /// The boundary, Java's default when absent.
    pub fn boundary(&self) -> BoundaryType {
        self.boundary_type.unwrap_or_default()
    }
}

custom_header! {
    /// `SearchOffsetResponseHeader`.
    pub struct SearchOffsetResponseHeader {
        /// `offset`.
        offset: required i64 = "offset",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::ExtFields;
    use crate::header::CustomHeader;

    #[test]
    fn get_max_offset_committed_defaults_to_true() {
        let ext: ExtFields = [("topic", "T"), ("queueId", "0")].into_iter().collect();
        let header = GetMaxOffsetRequestHeader::from_ext(&ext).unwrap();
        assert!(header.committed);
        assert_eq!(header.to_ext_fields().get("committed"), Some("true"));
        assert!(GetMaxOffsetRequestHeader::default().committed);
    }

    #[test]
    fn search_offset_reads_boundary_type() {
        let ext: ExtFields = [
            ("topic", "T"),
            ("queueId", "3"),
            ("timestamp", "17"),
            ("boundaryType", "UPPER"),
        ]
        .into_iter()
        .collect();
        let header = SearchOffsetRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.boundary(), BoundaryType::Upper);
        assert_eq!(
            SearchOffsetRequestHeader::from_ext(&header.to_ext_fields()).unwrap(),
            header
        );
        let mut lower = ext.clone();
        lower.remove("boundaryType");
        assert_eq!(
            SearchOffsetRequestHeader::from_ext(&lower)
                .unwrap()
                .boundary(),
            BoundaryType::Lower
        );
    }

    #[test]
    fn consumer_offset_headers_round_trip() {
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: "g".into(),
            topic: "T".into(),
            queue_id: 2,
            commit_offset: 99,
            broker_name: None,
        };
        let ext = header.to_ext_fields();
        assert_eq!(
            UpdateConsumerOffsetRequestHeader::from_ext(&ext).unwrap(),
            header
        );
        let response = QueryConsumerOffsetResponseHeader { offset: -1 };
        assert_eq!(
            QueryConsumerOffsetResponseHeader::from_ext(&response.to_ext_fields()).unwrap(),
            response
        );
    }
}
