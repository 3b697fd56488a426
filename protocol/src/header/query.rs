//! QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33) headers (protocol
//! reference 2.3.5 and 2.3.6).
//!
//! # Invariants
//!
//! - Key names are Java's field names exactly; required fields are checked by `from_ext`.

use super::custom_header;

/// The ext key that marks a QUERY_MESSAGE as a unique-key (`UNIQ_KEY`) query.
pub const UNIQUE_KEY_QUERY: &str = "_UNIQUE_KEY_QUERY";

custom_header! {
    /// `QueryMessageRequestHeader`, plus the `_UNIQUE_KEY_QUERY` ext key the
    /// Java client always adds.
    pub struct QueryMessageRequestHeader {
        /// `topic`.
        topic: required String = "topic",
        /// `key`: message key (or unique key).
        key: required String = "key",
        /// `maxNum`: at most this many messages.
        max_num: required i32 = "maxNum",
        /// `beginTimestamp`, ms.
        begin_timestamp: required i64 = "beginTimestamp",
        /// `endTimestamp`, ms.
        end_timestamp: required i64 = "endTimestamp",
        /// `_UNIQUE_KEY_QUERY`: when true, `maxNum` is replaced by the
        /// broker's `defaultQueryMaxNum`.
        unique_key_query: optional bool = "_UNIQUE_KEY_QUERY",
    }
}

custom_header! {
    /// `QueryMessageResponseHeader`; send both fields on codes 0 and 22.
    pub struct QueryMessageResponseHeader {
        /// `indexLastUpdateTimestamp`.
        index_last_update_timestamp: required i64 = "indexLastUpdateTimestamp",
        /// `indexLastUpdatePhyoffset`.
        index_last_update_phyoffset: required i64 = "indexLastUpdatePhyoffset",
    }
}

custom_header! {
    /// `ViewMessageRequestHeader`.
    pub struct ViewMessageRequestHeader {
        /// `offset`: CommitLog offset of the record.
        offset: required i64 = "offset",
        /// `topic` (5.x).
        topic: optional String = "topic",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::ExtFields;
    use crate::header::CustomHeader;

    #[test]
    fn query_message_reads_the_unique_key_flag() {
        let ext: ExtFields = [
            ("topic", "T"),
            ("key", "K"),
            ("maxNum", "64"),
            ("beginTimestamp", "0"),
            ("endTimestamp", "9223372036854775807"),
            (UNIQUE_KEY_QUERY, "true"),
        ]
        .into_iter()
        .collect();
        let header = QueryMessageRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.unique_key_query, Some(true));
        assert_eq!(header.end_timestamp, i64::MAX);
        assert_eq!(
            QueryMessageRequestHeader::from_ext(&header.to_ext_fields()).unwrap(),
            header
        );
    }

    #[test]
    fn view_message_needs_only_the_offset() {
        let ext: ExtFields = [("offset", "1024")].into_iter().collect();
        let header = ViewMessageRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(
            header,
            ViewMessageRequestHeader {
                offset: 1024,
                topic: None
            }
        );
    }
}
