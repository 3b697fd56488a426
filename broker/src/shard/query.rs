//! QUERY_MESSAGE (12): messages by key (or unique key) within a time range.
//! Every shard has its own IndexFile, so the shard the request arrived on
//! asks every other shard for its part and answers with the merge once all
//! have replied.
//!
//! # Invariants
//! - A query is answered exactly once, when its last part arrived; a body
//!   never holds more than the query's maximum number of records.

use bytes::Bytes;
use ringmq_protocol::code::response_code;
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{QueryMessageRequestHeader, QueryMessageResponseHeader};

use super::link::{ReplyTo, Request, ShardMsg};
use super::{ShardHandler, response};

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

/// A query waiting for the other shards' parts.
#[derive(Debug)]
pub(crate) struct PendingQuery {
    reply: ReplyTo,
    merged: QueryPart,
    max: usize,
    missing: u16,
}

fn limit(header: &QueryMessageRequestHeader) -> usize {
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
        let max = limit(&header);
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

    /// QUERY_MESSAGE where it arrived: the local part now, the others'
    /// through the links.
    pub(crate) fn query_message(&mut self, request: Box<Request>) {
        let max = match request
            .cmd
            .decode_custom_header::<QueryMessageRequestHeader>()
        {
            Ok(header) => limit(&header),
            Err(error) => {
                let answer = response(response_code::SYSTEM_ERROR, error.to_string());
                return self.reply(request.reply, answer);
            }
        };
        let part = match self.query_part(&request.cmd) {
            Ok(part) => part,
            Err(remark) => {
                return self.reply(request.reply, response(response_code::SYSTEM_ERROR, remark));
            }
        };
        let missing = self.settings.shard_count - 1;
        let mut pending = PendingQuery {
            reply: request.reply,
            merged: QueryPart::default(),
            max,
            missing,
        };
        merge(&mut pending, part);
        if missing == 0 {
            return self.answer_query(pending);
        }
        self.next_query += 1;
        let query = self.next_query;
        self.pending_queries.insert(query, pending);
        let (me, cmd) = (self.id, request.cmd);
        if let Some(links) = &mut self.links {
            links.broadcast(|| ShardMsg::QueryPart {
                query,
                from: me,
                cmd: cmd.clone(),
            });
        }
    }

    /// Another shard's part of a pending query.
    pub(crate) fn on_query_result(&mut self, query: u64, part: QueryPart) {
        let Some(pending) = self.pending_queries.get_mut(&query) else {
            return;
        };
        merge(pending, part);
        pending.missing -= 1;
        if pending.missing == 0
            && let Some(done) = self.pending_queries.remove(&query)
        {
            self.answer_query(done);
        }
    }

    fn answer_query(&mut self, done: PendingQuery) {
        let header = QueryMessageResponseHeader {
            index_last_update_timestamp: done.merged.last_update_timestamp,
            index_last_update_phyoffset: done.merged.last_update_phy_offset,
        };
        let answer = if done.merged.count == 0 {
            RemotingCommand::new_response(
                response_code::QUERY_NOT_FOUND,
                0,
                Some("can not find message, maybe time range not correct".to_owned()),
            )
            .with_custom_header(&header)
        } else {
            super::success()
                .with_custom_header(&header)
                .with_body(Bytes::from(done.merged.records))
        };
        self.reply(done.reply, answer);
    }
}

fn merge(pending: &mut PendingQuery, part: QueryPart) {
    let merged = &mut pending.merged;
    merged.last_update_timestamp = merged.last_update_timestamp.max(part.last_update_timestamp);
    merged.last_update_phy_offset = merged
        .last_update_phy_offset
        .max(part.last_update_phy_offset);
    if merged.count < pending.max {
        // Records are whole: take this shard's only while they fit the count.
        let take = (pending.max - merged.count).min(part.count);
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
    use crate::server::ConnectionId;

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
        let mut pending = PendingQuery {
            reply: ReplyTo {
                shard: 0,
                conn: ConnectionId(1),
                opaque: 1,
                oneway: false,
            },
            merged: QueryPart::default(),
            max: 3,
            missing: 2,
        };
        merge(&mut pending, part(&[8, 9]));
        merge(&mut pending, part(&[10, 11]));
        assert_eq!(pending.merged.count, 3);
        let mut expected = record(8);
        expected.extend(record(9));
        expected.extend(record(10));
        assert_eq!(
            pending.merged.records, expected,
            "the 11-byte record is left out whole"
        );
        assert_eq!(pending.merged.last_update_timestamp, 2);
    }
}
