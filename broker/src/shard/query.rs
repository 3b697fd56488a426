//! QUERY_MESSAGE (12): messages by key (or unique key) within a time range.
//! Every shard has its own IndexFile: this module finds one shard's records
//! and merges the shards' parts, which `super::gather` collects. Records
//! not in memory are read through the ring in the background while the
//! shard goes on (`ReadingQuery`); the part is computed again, and sent,
//! once every read is done (until the thirty-fourth session they were read
//! synchronously, holding the shard on the disk for each). Gathered parts
//! that read store times (consume stats, time spans) park the same way
//! (thirty-fifth session).
//!
//! # Invariants
//! - A body never holds more than the query's maximum number of records,
//!   and only whole records.
//! - A parked part is computed again when its last read is done (every
//!   ticket comes back from the store, a failed read's too) and delivered
//!   exactly once: then, since that computation reads synchronously what it
//!   lacks; except a reset's, whose searches by time may need more reads
//!   and park it again, each round moving every search on by at least one
//!   probe, so it too is delivered, after at most a search's probes'
//!   rounds.

use std::collections::BTreeMap;

use bytes::Bytes;
use ringmq_protocol::code::response_code;
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{QueryMessageRequestHeader, QueryMessageResponseHeader};

use ringmq_storage::store::{PullRead, RecordRead};

use super::ShardHandler;
use super::gather::{Ask, Part};
use super::link::ShardMsg;
use super::offsets::OffsetSearch;

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

/// Where a shard's part of a query goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PartTo {
    /// This shard's own gathering `query`.
    Own(u64),
    /// Gathering `query` of shard `shard`.
    Shard {
        /// The gathering shard.
        shard: u16,
        /// Its gathering id.
        query: u64,
    },
}

/// A gathered part whose records the store is reading in the background:
/// a query's, or one that reads store times (queue figures, time spans).
#[derive(Debug)]
pub(crate) struct ReadingQuery {
    ask: Ask,
    to: PartTo,
    /// The reads not done yet.
    tickets: Vec<u64>,
    /// A reset's searches by time so far, by queue id (see
    /// [`ShardHandler::reset_part`]).
    searches: BTreeMap<u32, OffsetSearch>,
}

/// A query part, or the reads it waits for.
enum QueryRead {
    Ready(QueryPart),
    Reading(Vec<u64>),
}

impl ShardHandler {
    /// This shard's part of the query in `cmd` for `to`: at once, or `None`
    /// when records had to be read from the disk; the part is then sent
    /// once the reads are done ([`ShardHandler::on_query_read_done`]).
    pub(crate) fn message_part(&mut self, cmd: &RemotingCommand, to: PartTo) -> Option<QueryPart> {
        match self.query_part(cmd, PullRead::Background) {
            Ok(QueryRead::Ready(part)) => Some(part),
            Ok(QueryRead::Reading(tickets)) => {
                self.park_part(Ask::Messages(cmd.clone()), to, tickets);
                None
            }
            Err(_) => Some(QueryPart::default()),
        }
    }

    /// Parks this shard's part of `ask` for `to` until the store's
    /// background reads `tickets` are all done; it is then computed again
    /// and delivered ([`ShardHandler::on_query_read_done`]).
    pub(crate) fn park_part(&mut self, ask: Ask, to: PartTo, tickets: Vec<u64>) {
        self.park_searching_part(ask, to, tickets, BTreeMap::new());
    }

    /// [`ShardHandler::park_part`] for a reset, with its searches so far.
    pub(crate) fn park_searching_part(
        &mut self,
        ask: Ask,
        to: PartTo,
        tickets: Vec<u64>,
        searches: BTreeMap<u32, OffsetSearch>,
    ) {
        self.reading_queries.push(ReadingQuery {
            ask,
            to,
            tickets,
            searches,
        });
    }

    /// Whether a parked part waited for the background read `ticket`; the
    /// part whose last read it was is computed again and delivered.
    pub(crate) fn on_query_read_done(&mut self, ticket: u64, now_ms: i64) -> bool {
        let Some(index) = self
            .reading_queries
            .iter()
            .position(|query| query.tickets.contains(&ticket))
        else {
            return false;
        };
        let waiting = &mut self.reading_queries[index].tickets;
        waiting.retain(|waited| *waited != ticket);
        if waiting.is_empty() {
            let ReadingQuery {
                ask,
                to,
                mut searches,
                ..
            } = self.reading_queries.swap_remove(index);
            let part = match &ask {
                Ask::Messages(cmd) => {
                    Part::Messages(match self.query_part(cmd, PullRead::AfterRead) {
                        Ok(QueryRead::Ready(part)) => part,
                        Ok(QueryRead::Reading(_)) | Err(_) => QueryPart::default(),
                    })
                }
                // A search goes on after its read and may need others: the
                // part waits again, its searches kept.
                Ask::Reset(reset) => {
                    let mut tickets = Vec::new();
                    match self.reset_part(
                        reset,
                        &mut searches,
                        PullRead::AfterRead,
                        &mut tickets,
                        now_ms,
                    ) {
                        Some(part) => part,
                        None => {
                            self.park_searching_part(ask, to, tickets, searches);
                            return true;
                        }
                    }
                }
                // AfterRead reads what is still missing synchronously: no
                // ticket comes back.
                other => self.timed_part(other, PullRead::AfterRead, &mut Vec::new(), now_ms),
            };
            match to {
                PartTo::Own(id) => self.on_part(id, part, now_ms),
                PartTo::Shard { shard, query: id } => {
                    if let Some(links) = &mut self.links {
                        links.send(shard, ShardMsg::Part(id, Box::new(part)));
                    }
                }
            }
        }
        true
    }

    /// This shard's records for the query in `cmd`, those not in memory
    /// read as `read` says (in the background: the reads' tickets).
    fn query_part(&mut self, cmd: &RemotingCommand, read: PullRead) -> Result<QueryRead, String> {
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
        let mut tickets = Vec::new();
        for offset in found.phy_offsets.into_iter().take(max) {
            match self.store_mut().record_at(offset, read) {
                Ok(RecordRead::Ready(Some(record))) => {
                    part.records.extend_from_slice(&record);
                    part.count += 1;
                }
                Ok(RecordRead::Reading(ticket)) => tickets.push(ticket),
                Ok(RecordRead::Ready(None)) | Err(_) => {}
            }
        }
        Ok(if tickets.is_empty() {
            QueryRead::Ready(part)
        } else {
            QueryRead::Reading(tickets)
        })
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
