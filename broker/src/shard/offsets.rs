//! Offset requests on the queue's owner shard: QUERY_CONSUMER_OFFSET (14),
//! UPDATE_CONSUMER_OFFSET (15), SEARCH_OFFSET_BY_TIMESTAMP (29),
//! GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32),
//! QUERY_CONSUME_QUEUE (321, `mqadmin queryCq`).
//!
//! # Invariants
//! - Only this shard's queues are read: the router sent the request here.

use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{
    BoundaryType, GetEarliestMsgStoretimeRequestHeader, GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader, GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader, QueryConsumeQueueRequestHeader, SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
};
use ringmq_protocol::json::{ConsumeQueueData, JsonStyle, QueryConsumeQueueResponseBody};
use ringmq_protocol::message::{CrcCheck, decode_record};
use ringmq_storage::store::{PullRead, RecordRead};

use super::link::Request;
use super::pull::Parked;
use super::{ShardHandler, json_success, response, success};

/// Store timestamps a shard keeps for its time lookups; when full they are
/// all dropped (a binary search over a queue probes about 40 records).
pub const STORE_TIMES_KEPT_MAX: usize = 4_096;

/// Entries one QUERY_CONSUME_QUEUE answers at most (Java has no bound; a
/// `count` above this gets this many, about 1 MB of JSON).
pub const QUERY_CONSUME_QUEUE_ENTRIES_MAX: usize = 10_000;

impl ShardHandler {
    pub(crate) fn queue_query(&mut self, cmd: &RemotingCommand, now_ms: i64) -> RemotingCommand {
        match cmd.code {
            request_code::QUERY_CONSUMER_OFFSET => {
                let store = self.store.as_ref().expect("the store is open");
                self.offsets.query_consumer_offset(cmd, |topic, queue_id| {
                    queue_id >= 0
                        && store.queue_min_offset(topic, queue_id as u32) == 0
                        && store.queue_max_offset(topic, queue_id as u32) > 0
                })
            }
            request_code::UPDATE_CONSUMER_OFFSET => {
                let known = |handler: &Self| {
                    cmd.ext_fields
                        .get("consumerGroup")
                        .is_some_and(|group| handler.groups.contains(group))
                        && cmd
                            .ext_fields
                            .get("topic")
                            .is_some_and(|topic| handler.topics.contains(topic))
                };
                if !known(self) {
                    self.refresh_snapshots();
                }
                self.offsets
                    .update_consumer_offset(cmd, &self.topics, &self.groups, now_ms)
            }
            request_code::GET_MAX_OFFSET => {
                match cmd.decode_custom_header::<GetMaxOffsetRequestHeader>() {
                    Ok(header) => {
                        let offset = self.max_offset(&header.topic, header.queue_id);
                        success().with_custom_header(&GetMaxOffsetResponseHeader { offset })
                    }
                    Err(error) => response(response_code::SYSTEM_ERROR, error.to_string()),
                }
            }
            request_code::GET_MIN_OFFSET => {
                match cmd.decode_custom_header::<GetMinOffsetRequestHeader>() {
                    Ok(header) => {
                        let offset = self.min_offset(&header.topic, header.queue_id);
                        success().with_custom_header(&GetMinOffsetResponseHeader { offset })
                    }
                    Err(error) => response(response_code::SYSTEM_ERROR, error.to_string()),
                }
            }
            request_code::QUERY_CONSUME_QUEUE => {
                match cmd.decode_custom_header::<QueryConsumeQueueRequestHeader>() {
                    Ok(header) => self.query_consume_queue(&header),
                    Err(error) => response(response_code::SYSTEM_ERROR, error.to_string()),
                }
            }
            code => response(
                response_code::REQUEST_CODE_NOT_SUPPORTED,
                format!(" request type {code} not supported"),
            ),
        }
    }

    /// QUERY_CONSUME_QUEUE as Java's `queryConsumeQueue`: the queue's
    /// entries from `index`, its min and max offsets and, with a group, the
    /// group's subscription. An index outside the queue is answered with
    /// Java's remark, and (unlike Java, whose answer then has no body that
    /// its own client could read) with the offsets and no entries.
    fn query_consume_queue(&self, header: &QueryConsumeQueueRequestHeader) -> RemotingCommand {
        let (topic, queue_id) = (header.topic.as_str(), header.queue_id);
        let entries = u32::try_from(queue_id).ok().and_then(|queue| {
            let count = usize::try_from(header.count)
                .unwrap_or(0)
                .min(QUERY_CONSUME_QUEUE_ENTRIES_MAX);
            let from = u64::try_from(header.index).unwrap_or(u64::MAX);
            self.store().queue_entries(topic, queue, from, count)
        });
        let Some(entries) = entries else {
            return response(
                response_code::SYSTEM_ERROR,
                format!("{queue_id}@{topic} is not exist!"),
            );
        };
        let (min, max) = (
            self.min_offset(topic, queue_id),
            self.max_offset(topic, queue_id),
        );
        let mut body = QueryConsumeQueueResponseBody {
            max_queue_index: max,
            min_queue_index: min,
            queue_data: entries
                .iter()
                .map(|entry| ConsumeQueueData {
                    physic_offset: entry.commit_log_offset as i64,
                    physic_size: entry.size as i32,
                    tags_code: entry.tags_code,
                    eval: false,
                })
                .collect(),
            ..QueryConsumeQueueResponseBody::default()
        };
        if let Some(group) = &header.consumer_group {
            body.subscription_data = self.subs.subscription(group, topic).cloned();
            // Java's text: the group's filter data as JSON (none here, as
            // ringmq keeps no ConsumerFilterData apart from the subscription).
            body.filter_data = Some(match body.subscription_data {
                Some(_) => "null".to_owned(),
                None => format!("{group}@{topic} is not online!"),
            });
        }
        let mut answer = json_success(|out| body.to_json(out, JsonStyle::Java));
        if header.index < min || header.index >= max {
            answer.remark = Some(format!(
                "Index {} of {queue_id}@{topic} is not exist!",
                header.index
            ));
        }
        answer
    }

    pub(crate) fn max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        if queue_id < 0 {
            return 0;
        }
        self.store().queue_max_offset(topic, queue_id as u32) as i64
    }

    pub(crate) fn min_offset(&self, topic: &str, queue_id: i32) -> i64 {
        if queue_id < 0 {
            return 0;
        }
        self.store().queue_min_offset(topic, queue_id as u32) as i64
    }

    /// The store timestamp of the message at `offset`: known (None: no such
    /// message), or its record being read in the background (`read` says
    /// how a record not in memory is read, see [`Store::record_at`]; once
    /// the store was asked, `AfterRead` becomes `Background`, so that after
    /// a background read only the probe that waited for it may read
    /// synchronously).
    ///
    /// [`Store::record_at`]: ringmq_storage::store::Store::record_at
    pub(crate) fn store_time_reading(
        &mut self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        read: &mut PullRead,
    ) -> TimeAt {
        let (Ok(queue_id), Ok(offset)) = (u32::try_from(queue_id), u64::try_from(offset)) else {
            return TimeAt::Known(None);
        };
        let entry = self
            .store()
            .queue_entries(topic, queue_id, offset, 1)
            .and_then(|entries| entries.first().copied());
        let Some(entry) = entry.filter(|entry| !entry.is_filler()) else {
            return TimeAt::Known(None);
        };
        if let Some(&time) = self.store_times.get(&entry.commit_log_offset) {
            return TimeAt::Known(Some(time));
        }
        let asked = *read;
        if asked == PullRead::AfterRead {
            *read = PullRead::Background;
        }
        match self.store_mut().record_at(entry.commit_log_offset, asked) {
            Ok(RecordRead::Ready(Some(record))) => {
                let time = decode_record(&record, CrcCheck::Skip)
                    .ok()
                    .map(|view| view.store_timestamp_ms());
                if let Some(time) = time {
                    if self.store_times.len() >= STORE_TIMES_KEPT_MAX {
                        self.store_times.clear();
                    }
                    self.store_times.insert(entry.commit_log_offset, time);
                }
                TimeAt::Known(time)
            }
            Ok(RecordRead::Ready(None)) | Err(_) => TimeAt::Known(None),
            Ok(RecordRead::Reading(ticket)) => TimeAt::Reading(ticket),
        }
    }

    /// GET_EARLIEST_MSG_STORETIME and SEARCH_OFFSET_BY_TIMESTAMP, whose
    /// records not in memory are read as `read` says: in the background the
    /// first time (the request is parked with the pulls and executed again
    /// when the read is done, see `run_reading_pulls`), then synchronously
    /// only for the probe that waited.
    pub(crate) fn time_query(&mut self, request: Box<Request>, mut read: PullRead) {
        let answer = match request.cmd.code {
            request_code::GET_EARLIEST_MSG_STORETIME => {
                match request
                    .cmd
                    .decode_custom_header::<GetEarliestMsgStoretimeRequestHeader>()
                {
                    Ok(header) => {
                        let min = self.min_offset(&header.topic, header.queue_id);
                        match self.store_time_reading(
                            &header.topic,
                            header.queue_id,
                            min,
                            &mut read,
                        ) {
                            TimeAt::Known(time) => success().with_custom_header(
                                &GetEarliestMsgStoretimeResponseHeader {
                                    timestamp: time.unwrap_or(-1),
                                },
                            ),
                            TimeAt::Reading(ticket) => {
                                return self.park_reading_pull(
                                    *request,
                                    ticket,
                                    false,
                                    Parked::TimeQuery,
                                );
                            }
                        }
                    }
                    Err(error) => response(response_code::SYSTEM_ERROR, error.to_string()),
                }
            }
            _ => match request
                .cmd
                .decode_custom_header::<SearchOffsetRequestHeader>()
            {
                Ok(header) => match self.search_offset(
                    &header.topic,
                    header.queue_id,
                    header.timestamp,
                    header.boundary(),
                    &mut read,
                ) {
                    Ok(offset) => {
                        success().with_custom_header(&SearchOffsetResponseHeader { offset })
                    }
                    Err(ticket) => {
                        return self.park_reading_pull(*request, ticket, false, Parked::TimeQuery);
                    }
                },
                Err(error) => response(response_code::SYSTEM_ERROR, error.to_string()),
            },
        };
        self.reply(request.reply, answer);
    }

    /// SEARCH_OFFSET_BY_TIMESTAMP by binary search over the queue's store
    /// timestamps (see [`OffsetSearch`]). `Err(ticket)`: a probe's record
    /// is being read in the background (see [`ShardHandler::time_query`]).
    fn search_offset(
        &mut self,
        topic: &str,
        queue_id: i32,
        timestamp: i64,
        boundary: BoundaryType,
        read: &mut PullRead,
    ) -> Result<i64, u64> {
        let mut search = self.offset_search(topic, queue_id, timestamp, boundary);
        self.continue_search(topic, queue_id, &mut search, read)
    }

    /// A search by `timestamp` over the offsets `topic`/`queue_id` holds now.
    pub(crate) fn offset_search(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp: i64,
        boundary: BoundaryType,
    ) -> OffsetSearch {
        let min = self.min_offset(topic, queue_id);
        let max = self.max_offset(topic, queue_id).max(min);
        OffsetSearch {
            timestamp,
            boundary,
            min,
            low: min,
            high: max,
        }
    }

    /// Goes on with `search` until it ends (its offset) or a probe's record
    /// is being read (`Err(ticket)`; `search` keeps what the probes so far
    /// narrowed it to, so that going on after the read needs none of them
    /// again).
    pub(crate) fn continue_search(
        &mut self,
        topic: &str,
        queue_id: i32,
        search: &mut OffsetSearch,
        read: &mut PullRead,
    ) -> Result<i64, u64> {
        while search.low < search.high {
            let middle = search.low + (search.high - search.low) / 2;
            let time = match self.store_time_reading(topic, queue_id, middle, read) {
                TimeAt::Known(time) => time.unwrap_or(i64::MAX),
                TimeAt::Reading(ticket) => return Err(ticket),
            };
            let before = match search.boundary {
                BoundaryType::Lower => time < search.timestamp,
                BoundaryType::Upper => time <= search.timestamp,
            };
            if before {
                search.low = middle + 1;
            } else {
                search.high = middle;
            }
        }
        Ok(match search.boundary {
            BoundaryType::Lower => search.low,
            BoundaryType::Upper => (search.low - 1).max(search.min),
        })
    }
}

/// A binary search over a queue's store timestamps, as Java's
/// `getOffsetInQueueByTime`: Lower, the first offset stored at or after
/// `timestamp`; Upper, the last stored at or before it. Past the end: the
/// max offset (as it was when the search began); before the start: the min
/// offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OffsetSearch {
    timestamp: i64,
    boundary: BoundaryType,
    min: i64,
    /// The first offset in `[low, high)` whose store time is >= `timestamp`
    /// (Lower) or > it (Upper, then one back) is the answer; `high` when
    /// there is none.
    low: i64,
    high: i64,
}

/// What a store-time probe has ([`ShardHandler::store_time_reading`]).
pub(crate) enum TimeAt {
    /// The store time (None: no message there).
    Known(Option<i64>),
    /// The record is being read: the store's ticket.
    Reading(u64),
}
