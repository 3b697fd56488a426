//! One shard's part of a gathered request: computed from the queues,
//! offsets and index this shard owns, in the turn the ask arrives.

use std::collections::BTreeMap;
use std::sync::Arc;

use ringmq_protocol::header::BoundaryType;
use ringmq_protocol::json::QueueTimeSpan;

use ringmq_storage::store::PullRead;

use super::{Ask, Part, QueueAsk, QueueFigures, Rates, ResetAsk};
use crate::route::ShardId;
use crate::shard::ShardHandler;
use crate::shard::offsets::{OffsetSearch, TimeAt};
use crate::shard::query::PartTo;
use crate::stats_table::{StatsName, group_key};
use crate::topic_config::{SYSTEM_TOPIC_PREFIX, SYSTEM_TOPICS};

impl ShardHandler {
    /// The queue ids below `queues` this shard owns (`Router::queues_of`).
    fn owned_queues(&self, queues: u32) -> impl Iterator<Item = u32> + use<> {
        self.router.queues_of(ShardId(self.id), queues)
    }

    /// This shard's part of `ask` for `to`: at once, or `None` when it is
    /// sent later (QUERY_MESSAGE's records, or the records whose store
    /// times queue figures and time spans need, read in the background,
    /// `crate::shard::query`).
    pub(crate) fn answer_ask(&mut self, ask: &Ask, to: PartTo, now_ms: i64) -> Option<Part> {
        Some(match ask {
            Ask::Messages(cmd) => Part::Messages(self.message_part(cmd, to)?),
            Ask::TopicsOfGroup(group) => Part::Names(
                self.offsets
                    .topics_of_group(group)
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
            ),
            Ask::GroupsOfTopic(topic) => Part::Names(
                self.offsets
                    .groups_of_topic(topic)
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
            ),
            Ask::Queues(_) | Ask::TimeSpans { .. } => {
                let mut tickets = Vec::new();
                let part = self.timed_part(ask, PullRead::Background, &mut tickets, now_ms);
                if !tickets.is_empty() {
                    self.park_part(ask.clone(), to, tickets);
                    return None;
                }
                part
            }
            Ask::Stats { name, key } => Part::Stats(self.stats_table.figures(*name, key)),
            Ask::DeleteExpiredNow => {
                self.store_mut().delete_expired_now();
                Part::Done
            }
            Ask::CleanExpiredQueuesNow => {
                self.store_mut().clean_expired_queues_now();
                Part::Done
            }
            Ask::HaStatus => Part::Ha(vec![self.ha_part(now_ms)]),
            Ask::CleanUnusedTopics => {
                self.clean_unused_topics();
                Part::Done
            }
            Ask::OffsetKeys => Part::Names(self.offsets.keys().map(str::to_owned).collect()),
            Ask::Reset(reset) => {
                let (mut searches, mut tickets) = (BTreeMap::new(), Vec::new());
                match self.reset_part(
                    reset,
                    &mut searches,
                    PullRead::Background,
                    &mut tickets,
                    now_ms,
                ) {
                    Some(part) => part,
                    None => {
                        self.park_searching_part(ask.clone(), to, tickets, searches);
                        return None;
                    }
                }
            }
            Ask::CloneOffsets { src, dest, topics } => {
                for topic in topics {
                    self.offsets.clone_offsets(src, dest, topic, now_ms);
                }
                Part::Done
            }
        })
    }

    /// This shard's part of an ask whose figures read store times
    /// ([`Ask::Queues`], [`Ask::TimeSpans`]), records not in memory read
    /// as `read` says: in the background, each read's ticket goes into
    /// `tickets` (the part is then incomplete, and computed again with
    /// [`PullRead::AfterRead`] once they are all done, see
    /// [`ShardHandler::park_part`]).
    pub(crate) fn timed_part(
        &mut self,
        ask: &Ask,
        read: PullRead,
        tickets: &mut Vec<u64>,
        now_ms: i64,
    ) -> Part {
        match ask {
            Ask::TimeSpans {
                topic,
                group,
                queues,
            } => {
                let spans = self
                    .owned_queues(*queues)
                    .map(|queue_id| self.time_span(topic, group, queue_id, now_ms, read, tickets))
                    .collect();
                Part::TimeSpans(spans)
            }
            Ask::Queues(asks) => {
                let mut figures = Vec::new();
                let mut rates = Rates::new();
                for ask in asks {
                    for queue_id in self.owned_queues(ask.queues) {
                        figures.push(self.queue_figures(ask, queue_id, read, tickets));
                    }
                    let rate = match &ask.group {
                        None => self
                            .stats_table
                            .minute_tps(StatsName::TopicPutNums, &ask.topic),
                        Some(group) => self
                            .stats_table
                            .minute_tps(StatsName::GroupGetNums, &group_key(&ask.topic, group)),
                    };
                    *rates
                        .entry((ask.topic.clone(), ask.group.clone()))
                        .or_default() += rate;
                }
                Part::Queues(figures, rates)
            }
            other => unreachable!("{other:?} reads no store times"),
        }
    }

    /// The store time of the message at `offset` of `topic`/`queue_id`
    /// (None: no message there, or its record is being read, the read's
    /// ticket then in `tickets`).
    fn probe_store_time(
        &mut self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        read: PullRead,
        tickets: &mut Vec<u64>,
    ) -> Option<i64> {
        let mut read = read;
        match self.store_time_reading(topic, queue_id, offset, &mut read) {
            TimeAt::Known(time) => time,
            TimeAt::Reading(ticket) => {
                tickets.push(ticket);
                None
            }
        }
    }

    /// CLEAN_UNUSED_TOPIC on this shard: the queues of topics neither in
    /// the topic table nor system topics go (queues a crash's recovery
    /// brought back for a deleted topic, say), as Java's
    /// `cleanUnusedTopic`.
    fn clean_unused_topics(&mut self) {
        let topics = Arc::clone(&self.topics);
        let shard = self.id;
        let (removed, error) = self.store_mut().delete_topics_not_kept(|topic| {
            topics.contains(topic)
                || SYSTEM_TOPICS.contains(&topic)
                || topic.starts_with(SYSTEM_TOPIC_PREFIX)
        });
        if !removed.is_empty() {
            tracing::warn!(shard, ?removed, "unused topics' consume queues removed");
        }
        if let Some(error) = error {
            tracing::error!(shard, %error, "removing unused topics' consume queue files failed");
        }
    }

    fn queue_figures(
        &mut self,
        ask: &QueueAsk,
        queue_id: u32,
        read: PullRead,
        tickets: &mut Vec<u64>,
    ) -> QueueFigures {
        let (topic, group) = (ask.topic.as_str(), ask.group.as_deref());
        let wire_id = queue_id as i32;
        let min = self.min_offset(topic, wire_id);
        let max = self.max_offset(topic, wire_id);
        let consumer_offset = group.and_then(|group| self.offsets.query(group, topic, wire_id));
        let before = match group {
            Some(_) => consumer_offset.unwrap_or(0),
            None => max,
        };
        let store_time_ms = if before > 0 {
            self.probe_store_time(topic, wire_id, before - 1, read, tickets)
                .unwrap_or(0)
                .max(0)
        } else {
            0
        };
        QueueFigures {
            group: ask.group.clone(),
            topic: topic.to_owned(),
            queue_id,
            min,
            max,
            consumer_offset,
            store_time_ms,
        }
    }

    /// One queue's time span for `group`, as Java's `queryConsumeTimeSpan`
    /// computes it; a time that cannot be read is -1.
    fn time_span(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: u32,
        now_ms: i64,
        read: PullRead,
        tickets: &mut Vec<u64>,
    ) -> QueueTimeSpan {
        let wire_id = queue_id as i32;
        let mut time_at = |handler: &mut Self, offset: i64| {
            handler
                .probe_store_time(topic, wire_id, offset, read, tickets)
                .unwrap_or(-1)
        };
        let min = self.min_offset(topic, wire_id);
        let max = self.max_offset(topic, wire_id);
        let min_time_stamp = if max > min { time_at(self, min) } else { -1 };
        let max_time_stamp = if max > 0 { time_at(self, max - 1) } else { -1 };
        let consumed = self.offsets.query(group, topic, wire_id).unwrap_or(-1);
        let consume_time_stamp = if consumed > 0 {
            time_at(self, consumed - 1)
        } else {
            min_time_stamp
        };
        let next = consumed.max(min);
        let delay_time = if next < max {
            let stored = time_at(self, next);
            if stored >= 0 { now_ms - stored } else { 0 }
        } else {
            0
        };
        QueueTimeSpan {
            message_queue: self.message_queue(topic, queue_id),
            min_time_stamp,
            max_time_stamp,
            consume_time_stamp,
            delay_time,
        }
    }

    /// This shard's part of a reset: each owned queue's new offset, stored
    /// once all are known. By time, each queue's search goes on from
    /// `searches` (kept there), its records not in memory read as `read`
    /// says, each queue's on its own (`AfterRead`: one probe of each may
    /// read synchronously, which makes every round of reads move each
    /// search on); `None` while a probe's record is being read in the
    /// background (its ticket in `tickets`; nothing stored yet).
    pub(crate) fn reset_part(
        &mut self,
        ask: &ResetAsk,
        searches: &mut BTreeMap<u32, OffsetSearch>,
        read: PullRead,
        tickets: &mut Vec<u64>,
        now_ms: i64,
    ) -> Option<Part> {
        let owned: Vec<u32> = match ask.queue {
            Some(queue) => self
                .owned_queues(ask.queues)
                .filter(|id| *id == queue)
                .collect(),
            None => self.owned_queues(ask.queues).collect(),
        };
        let mut reset = Vec::new();
        for queue_id in owned {
            let wire_id = queue_id as i32;
            let offset = match ask.offset {
                Some(offset) => {
                    let min = self.min_offset(&ask.topic, wire_id);
                    let max = self.max_offset(&ask.topic, wire_id);
                    if offset < min || offset > max {
                        return Some(Part::Reset(Err(format!(
                            "Target offset {offset} not in consume queue range [{min}-{max}]"
                        ))));
                    }
                    offset
                }
                None if ask.timestamp < 0 => self.max_offset(&ask.topic, wire_id),
                None => {
                    let search = searches.entry(queue_id).or_insert_with(|| {
                        self.offset_search(&ask.topic, wire_id, ask.timestamp, BoundaryType::Lower)
                    });
                    let mut read = read;
                    match self.continue_search(&ask.topic, wire_id, search, &mut read) {
                        // Within the queue as it is now: retention may
                        // have moved its start since the search began.
                        Ok(offset) => offset
                            .max(self.min_offset(&ask.topic, wire_id))
                            .min(self.max_offset(&ask.topic, wire_id)),
                        Err(ticket) => {
                            tickets.push(ticket);
                            continue;
                        }
                    }
                }
            };
            reset.push((queue_id, offset));
        }
        if !tickets.is_empty() {
            return None;
        }
        for &(queue_id, offset) in &reset {
            self.offsets
                .assign_reset(&ask.group, &ask.topic, queue_id as i32, offset, now_ms);
        }
        Some(Part::Reset(Ok(reset)))
    }
}
