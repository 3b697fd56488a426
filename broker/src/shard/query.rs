//! QUERY_MESSAGE (12): messages by key (or unique key) within a time range.
//! Every shard has its own IndexFile: this module finds one shard's records
//! and merges the shards' parts, which `super::gather` collects.
//!
//! # Invariants
//! - A body never holds more than the query's maximum number of records,
//!   and only whole records.

use bytes::Bytes;
use ringmq_protocol::code::response_code;
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{QueryMessageRequestHeader, QueryMessageResponseHeader};

use super::ShardHandler;

/// Records a unique-key query returns at most (Java's `defaultQueryMaxNum`).
pub const UNIQUE_KEY_QUERY_MAX: usize = 32;
/// Records any query returns at most (Java's `maxMsgsNumBatch`).
pub const QUERY_MAX: usize = 64;

/// One shard's part of a query.
#[derive(Debug, Clone, Default)]
pub struct QueryPart {
    /// The records, concatenated.
    pub records: Vec<u8>,
    /// How many records.
    pub count: usize,
    /// `indexLastUpdateTimestamp` of the shard's newest index file.
    pub last_update_timestamp: i64,
    /// `indexLastUpdatePhyoffset` of the shard's newest index file.
    pub last_update_phy_offset: i64,
}

/// The most records `header`'s query returns.
pub(crate) fn query_limit(header: &QueryMessageRequestHeader) -> usize {
    if header.unique_key_query == Some(true) {
        UNIQUE_KEY_QUERY_MAX
    } else {
        (header.max_num.max(1) as usize).min(QUERY_MAX)
    }
}

impl ShardHandler {
    /// This shard's records for the query in `cmd`.
    pub(crate) fn query_part(&mut self, cmd: &RemotingCommand) -> Result<QueryPart, String> {
        let header: QueryMessageRequestHeader = cmd
            .decode_custom_header()
            .map_err(|error| error.to_string())?;
        let max = query_limit(&header);
        let found = self.store().query_message(
            &header.topic,
            &header.key,
            max,
            header.begin_timestamp,
            header.end_timestamp,
        );
        let mut part = QueryPart {
            last_update_timestamp: found.index_last_update_timestamp,
            last_update_phy_offset: found.index_last_update_phy_offset,
            ..QueryPart::default()
        };
        for offset in found.phy_offsets.into_iter().take(max) {
            if let Ok(Some(record)) = self.store_mut().read_record(offset) {
                part.records.extend_from_slice(&record);
                part.count += 1;
            }
        }
        Ok(part)
    }
}

/// The answer to a query from every shard's merged part.
pub(crate) fn answer(merged: QueryPart) -> RemotingCommand {
    let header = QueryMessageResponseHeader {
        index_last_update_timestamp: merged.last_update_timestamp,
        index_last_update_phyoffset: merged.last_update_phy_offset,
    };
    if merged.count == 0 {
        RemotingCommand::new_response(
            response_code::QUERY_NOT_FOUND,
            0,
            Some("can not find message, maybe time range not correct".to_owned()),
        )
        .with_custom_header(&header)
    } else {
        super::success()
            .with_custom_header(&header)
            .with_body(Bytes::from(merged.records))
    }
}

/// Adds a shard's `part` to `merged`, keeping whole records up to `max`.
pub(crate) fn merge_records(merged: &mut QueryPart, part: QueryPart, max: usize) {
    merged.last_update_timestamp = merged.last_update_timestamp.max(part.last_update_timestamp);
    merged.last_update_phy_offset = merged
        .last_update_phy_offset
        .max(part.last_update_phy_offset);
    if merged.count < max {
        // Records are whole: take this shard's only while they fit the count.
        let take = (max - merged.count).min(part.count);
        if take == part.count {
            merged.records.extend_from_slice(&part.records);
        } else {
            let mut at = 0;
            for _ in 0..take {
                let size = ringmq_protocol::message::peek_total_size(&part.records[at..])
                    .map_or(0, |size| size as usize);
                if size == 0 {
                    break;
                }
                at += size;
            }
            merged.records.extend_from_slice(&part.records[..at]);
        }
        merged.count += take;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in record: its size word and filler.
    fn record(size: u8) -> Vec<u8> {
        let mut bytes = i32::from(size).to_be_bytes().to_vec();
        bytes.resize(usize::from(size), size);
        bytes
    }

    fn part(sizes: &[u8]) -> QueryPart {
        QueryPart {
            records: sizes.iter().flat_map(|size| record(*size)).collect(),
            count: sizes.len(),
            last_update_timestamp: i64::from(sizes.len() as u8),
            last_update_phy_offset: 0,
        }
    }

    #[test]
    fn merging_parts_keeps_whole_records_up_to_the_maximum() {
        let mut merged = QueryPart::default();
        merge_records(&mut merged, part(&[8, 9]), 3);
        merge_records(&mut merged, part(&[10, 11]), 3);
        assert_eq!(merged.count, 3);
        let mut expected = record(8);
        expected.extend(record(9));
        expected.extend(record(10));
        assert_eq!(
            merged.records, expected,
            "the 11-byte record is left out whole"
        );
        assert_eq!(merged.last_update_timestamp, 2);
    }
}
