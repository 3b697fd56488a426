//! Requests answered from every shard's part. Each shard owns its queues,
//! their consumer offsets and its IndexFile, so the shard a request arrived
//! on computes its own part, asks every other shard for theirs through the
//! links, and answers once the last part arrived:
//!
//! ```text
//!  request ─▶ arrival shard ─ own part ─────────────────────────┐
//!                 └─ Ask ─▶ every other shard ─ Part ─▶ merge ◀─┘
//!                                   (all parts in) ─▶ answer, or the next round
//! ```
//!
//! | request | ask | answer |
//! | --- | --- | --- |
//! | QUERY_MESSAGE (12) | the records by key in each shard's index (those not in memory read in the background first, the part sent afterwards) | records, up to the query's maximum (`super::query`) |
//! | GET_TOPIC_STATS_INFO (202) | min and max offset of each owned queue, and the store time of its last message | `TopicStatsTable`; TOPIC_NOT_EXIST for an unknown topic |
//! | GET_CONSUME_STATS (208) | without a topic, first the topics the group has offsets for; then per owned queue the max offset, the group's offset and the store time of the last message it consumed | `ConsumeStats` |
//! | QUERY_TOPIC_CONSUME_BY_WHO (300) | groups with offsets on the topic | `GroupList`, with the online groups subscribed to it |
//! | QUERY_TOPICS_BY_CONSUMER (343) | topics the group has offsets for | `TopicList` with this broker's address |
//! | GET_BROKER_CONSUME_STATS (317) | first every `topic@group` key of the offset tables; then the queues of each pair, as for GET_CONSUME_STATS | `ConsumeStatsList`: every subscription group, each with one `ConsumeStats` per topic it has offsets for |
//! | QUERY_CONSUME_TIME_SPAN (303) | per owned queue the store times of its oldest and newest message, of the last one the group consumed and of the first it did not | `QueryConsumeTimeSpanBody`; TOPIC_NOT_EXIST for an unknown topic |
//! | VIEW_BROKER_STATS_DATA (315) | the item's figures over the last minute, hour and day (`crate::stats_table`) | `BrokerStatsData`, the parts added; SYSTEM_ERROR when no shard holds the item |
//! | GET_BROKER_HA_STATUS (907) | the shard's log end, its slaves' positions (master), its replicator's status (slave) | `HARuntimeInfo` (`crate::shard::replica::ha_runtime_info`) |
//! | CLEAN_UNUSED_TOPIC (316) | remove the queues of topics neither configured nor system topics (`Store::delete_topics_not_kept`); refused on a slave | SUCCESS |
//! | DELETE_EXPIRED_COMMITLOG (329) | remove the expired CommitLog segments at the next retention run, whatever the hour (`Store::delete_expired_now`) | SUCCESS |
//! | CLEAN_EXPIRED_CONSUMEQUEUE (306) | clean the ConsumeQueue and index files below the log's start now (`Store::clean_expired_queues_now`; a queue whose every record is gone keeps its offsets, where Java removes it) | SUCCESS |
//! | CLONE_GROUP_OFFSET (314) | without a topic, first the topics the source group has offsets for; then copy its offsets of each owned queue to the destination group | SUCCESS |
//! | INVOKE_BROKER_TO_RESET_OFFSET (222) | reset the group's offsets of each owned queue (to the first message stored at or after the time, or to the offset given for one queue) | `ResetOffsetBody` |
//!
//! As in Java, GET_TOPIC_STATS_INFO covers `max(readQueueNums,
//! writeQueueNums)` queues and GET_CONSUME_STATS `readQueueNums`; a topic the
//! group has offsets for but which is no longer configured is left out, and
//! so is one the group, online with subscriptions, does not subscribe to.
//! `topicPutTps` and `consumeTps` are the shards' last-minute rates of
//! TOPIC_PUT_NUMS and GROUP_GET_NUMS added, as Java's; `pullOffset` is the
//! committed offset (no pull offsets are kept). Store times are read on the
//! shard's thread, from memory or from the disk, as
//! GET_EARLIEST_MSG_STORETIME's are.
//!
//! A reset is Java 5.x's server-side reset (`useServerSideResetOffset`, its
//! default): each queue's offset is stored at once and handed to the
//! group's next pull of the queue, which is answered PULL_OFFSET_MOVED with
//! it (`crate::shard::pull`); the consumer moves there and commits it. A slave
//! refuses, as Java's does.
//!
//! The mechanism (asks, parts, merging) is here; `start` checks a request
//! and picks its first ask, `part` computes a shard's part, `answer` turns
//! the merged parts into the answer or the next round.
//!
//! # Invariants
//! - A gathering is answered exactly once: when its last part arrived, or at
//!   once on a single shard.
//! - Each shard reports only the queues it owns, so a merged table holds
//!   every queue once.

mod answer;
mod part;
mod start;

use std::collections::{BTreeMap, BTreeSet};

use ringmq_protocol::code::request_code;
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::json::QueueTimeSpan;

use super::ShardHandler;
use super::link::{ReplyTo, Request, ShardMsg};
use super::query::{PartTo, QueryPart, merge_records};
use crate::shard::replica::HaPart;
use crate::stats_table::{ItemFigures, StatsName};

/// What the arrival shard asks the others for.
#[derive(Debug, Clone)]
pub enum Ask {
    /// QUERY_MESSAGE's records in this shard's index.
    Messages(RemotingCommand),
    /// Topics the group has committed offsets for on this shard.
    TopicsOfGroup(String),
    /// Groups with committed offsets on the topic on this shard.
    GroupsOfTopic(String),
    /// Figures of the queues this shard owns, for each [`QueueAsk`], and
    /// the ask's rate.
    Queues(Vec<QueueAsk>),
    /// One item of the shard's statistics.
    Stats {
        /// Its name.
        name: StatsName,
        /// Its key.
        key: String,
    },
    /// Every `topic@group` key of this shard's offset table.
    OffsetKeys,
    /// The time span of each owned queue among the topic's first `queues`
    /// for the group.
    TimeSpans {
        /// The topic.
        topic: String,
        /// The consumer group.
        group: String,
        /// How many of the topic's queues.
        queues: u32,
    },
    /// Reset the group's offsets of the queues this shard owns.
    Reset(Box<ResetAsk>),
    /// Remove the expired CommitLog segments at the next retention run.
    DeleteExpiredNow,
    /// Clean the ConsumeQueue and index files below the log's start now.
    CleanExpiredQueuesNow,
    /// The shard's replication figures.
    HaStatus,
    /// Remove the queues of topics that are neither configured nor
    /// system topics.
    CleanUnusedTopics,
    /// Copy `src`'s offsets of these topics to `dest`.
    CloneOffsets {
        /// The source group.
        src: String,
        /// The destination group.
        dest: String,
        /// The topics.
        topics: Vec<String>,
    },
}

/// The queues of one topic to report on: the first `queues` of it; with a
/// group, its committed offsets and the store time of the last message it
/// consumed, without one the store time of each queue's last message.
#[derive(Debug, Clone)]
pub struct QueueAsk {
    /// The consumer group (consume stats), or none (topic stats).
    pub group: Option<String>,
    /// The topic.
    pub topic: String,
    /// How many of its queues.
    pub queues: u32,
}

/// An INVOKE_BROKER_TO_RESET_OFFSET, checked.
#[derive(Debug, Clone)]
pub struct ResetAsk {
    /// The topic.
    pub topic: String,
    /// The group.
    pub group: String,
    /// The topic's read queues.
    pub queues: u32,
    /// The one queue to reset, or all of them.
    pub queue: Option<u32>,
    /// The one queue's target offset; `None`: by `timestamp`.
    pub offset: Option<i64>,
    /// First message stored at or after this (ms); negative: the max offset.
    pub timestamp: i64,
}

/// One shard's answer to an [`Ask`].
#[derive(Debug, Clone)]
pub enum Part {
    /// Records by key.
    Messages(QueryPart),
    /// Topic or group names.
    Names(BTreeSet<String>),
    /// Queue figures, and each asked (topic, group)'s rate.
    Queues(Vec<QueueFigures>, Rates),
    /// An item's figures, `None` when the shard does not hold it.
    Stats(Option<ItemFigures>),
    /// Replication figures, one per shard.
    Ha(Vec<HaPart>),
    /// The new offsets by queue id, or why the reset was refused.
    Reset(Result<Vec<(u32, i64)>, String>),
    /// Queues' time spans.
    TimeSpans(Vec<QueueTimeSpan>),
    /// Done, nothing to report.
    Done,
}

/// The last minute's rate of each asked (topic, group): TOPIC_PUT_NUMS of
/// the topic without a group, GROUP_GET_NUMS of `topic@group` with one.
pub type Rates = BTreeMap<(String, Option<String>), f64>;

/// One queue's figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueFigures {
    /// The group asked for, if any.
    pub group: Option<String>,
    /// The topic.
    pub topic: String,
    /// The queue id.
    pub queue_id: u32,
    /// The queue's min offset.
    pub min: i64,
    /// The queue's max offset (one past its last message).
    pub max: i64,
    /// The group's committed offset, when a group was asked for and has one.
    pub consumer_offset: Option<i64>,
    /// The store time of the message before `consumer_offset` when a group
    /// was asked for, of the one before `max` otherwise; 0 when there is
    /// none (or it could not be read).
    pub store_time_ms: i64,
}

/// What the merged parts answer.
#[derive(Debug)]
enum Goal {
    Messages {
        max: usize,
    },
    TopicStats,
    /// GET_CONSUME_STATS without topics: the group's topics first.
    GroupTopicsForStats {
        group: String,
    },
    ConsumeStats,
    ConsumeByWho {
        online: BTreeSet<String>,
    },
    TopicsByConsumer,
    Reset {
        topic: String,
    },
    /// CLONE_GROUP_OFFSET without a topic: the source group's topics first.
    GroupTopicsForClone {
        src: String,
        dest: String,
        offline: bool,
    },
    CloneOffsets,
    /// GET_BROKER_CONSUME_STATS: the (topic, group) pairs first.
    OffsetKeysForBrokerStats {
        order_only: bool,
    },
    BrokerConsumeStats,
    TimeSpans,
    DeleteExpired,
    Stats {
        name: String,
        key: String,
    },
    HaStatus,
    CleanUnusedTopics,
}

/// A request waiting for the other shards' parts.
#[derive(Debug)]
pub(crate) struct Gathering {
    reply: ReplyTo,
    goal: Goal,
    merged: Part,
    missing: u16,
}

/// Whether `code` is answered by a gathering.
pub(crate) fn is_gathered(code: i32) -> bool {
    matches!(
        code,
        request_code::QUERY_MESSAGE
            | request_code::GET_TOPIC_STATS_INFO
            | request_code::GET_CONSUME_STATS
            | request_code::QUERY_TOPIC_CONSUME_BY_WHO
            | request_code::QUERY_TOPICS_BY_CONSUMER
            | request_code::INVOKE_BROKER_TO_RESET_OFFSET
            | request_code::CLONE_GROUP_OFFSET
            | request_code::GET_BROKER_CONSUME_STATS
            | request_code::QUERY_CONSUME_TIME_SPAN
            | request_code::DELETE_EXPIRED_COMMITLOG
            | request_code::CLEAN_EXPIRED_CONSUMEQUEUE
            | request_code::VIEW_BROKER_STATS_DATA
            | request_code::GET_BROKER_HA_STATUS
            | request_code::CLEAN_UNUSED_TOPIC
    )
}

impl ShardHandler {
    /// Starts the gathering that answers `request` (a code of
    /// [`is_gathered`]), or answers a bad request at once.
    pub(crate) fn gather_request(&mut self, request: Box<Request>, now_ms: i64) {
        let start = self.gather_start(&request.cmd);
        match start {
            Ok((goal, ask)) => self.gather(request.reply, goal, ask, now_ms),
            Err(answer) => self.reply(request.reply, *answer),
        }
    }

    /// Computes this shard's part and asks the other shards for theirs.
    fn gather(&mut self, reply: ReplyTo, goal: Goal, ask: Ask, now_ms: i64) {
        self.next_query += 1;
        let query = self.next_query;
        let others = self.settings.shard_count - 1;
        // This shard's own part may come later, as another shard's would.
        let (merged, missing) = match self.answer_ask(&ask, PartTo::Own(query), now_ms) {
            Some(part) => (part, others),
            None => (empty_part(&ask), others + 1),
        };
        let gathering = Gathering {
            reply,
            goal,
            merged,
            missing,
        };
        if missing == 0 {
            return self.gathered(gathering, now_ms);
        }
        self.gatherings.insert(query, gathering);
        if others == 0 {
            return;
        }
        let me = self.id;
        if let Some(links) = &mut self.links {
            links.broadcast(|| ShardMsg::Ask {
                query,
                from: me,
                ask: Box::new(ask.clone()),
            });
        }
    }

    /// Another shard's part of gathering `query`.
    pub(crate) fn on_part(&mut self, query: u64, part: Part, now_ms: i64) {
        let Some(gathering) = self.gatherings.get_mut(&query) else {
            return;
        };
        merge(&gathering.goal, &mut gathering.merged, part);
        gathering.missing -= 1;
        if gathering.missing == 0
            && let Some(done) = self.gatherings.remove(&query)
        {
            self.gathered(done, now_ms);
        }
    }
}

/// A part with nothing in it, of the kind `ask`'s parts are: where a
/// gathering starts when its own part comes later (only asks that read
/// records park their parts).
fn empty_part(ask: &Ask) -> Part {
    match ask {
        Ask::Messages(_) => Part::Messages(QueryPart::default()),
        Ask::Queues(_) => Part::Queues(Vec::new(), Rates::new()),
        Ask::TimeSpans { .. } => Part::TimeSpans(Vec::new()),
        Ask::Reset(_) => Part::Reset(Ok(Vec::new())),
        other => unreachable!("{other:?} reads no records, so its part is never late"),
    }
}

/// Adds `part` to what a gathering holds.
fn merge(goal: &Goal, merged: &mut Part, part: Part) {
    match (merged, part) {
        (Part::Messages(merged), Part::Messages(part)) => {
            let max = match goal {
                Goal::Messages { max } => *max,
                _ => unreachable!("records are gathered for QUERY_MESSAGE only"),
            };
            merge_records(merged, part, max);
        }
        (Part::Names(merged), Part::Names(part)) => merged.extend(part),
        (Part::Queues(merged, rates), Part::Queues(part, part_rates)) => {
            merged.extend(part);
            for (key, rate) in part_rates {
                *rates.entry(key).or_default() += rate;
            }
        }
        (Part::Stats(merged), Part::Stats(part)) => match (merged.as_mut(), part) {
            (Some(merged), Some(part)) => merged.merge(&part),
            (None, part) => *merged = part,
            (Some(_), None) => {}
        },
        (Part::Done, Part::Done) => {}
        (Part::Ha(merged), Part::Ha(part)) => merged.extend(part),
        (Part::TimeSpans(merged), Part::TimeSpans(part)) => merged.extend(part),
        (Part::Reset(merged), Part::Reset(part)) => match (merged.as_mut(), part) {
            (Ok(merged), Ok(part)) => merged.extend(part),
            (Ok(_), Err(remark)) => *merged = Err(remark),
            (Err(_), _) => {}
        },
        (merged, part) => unreachable!("parts of one ask differ: {merged:?} and {part:?}"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The queues of a merged table, by topic then queue id.
    fn by_queue(figures: &[QueueFigures]) -> BTreeMap<(String, u32), &QueueFigures> {
        figures
            .iter()
            .map(|f| ((f.topic.clone(), f.queue_id), f))
            .collect()
    }

    fn figures(topic: &str, queue_id: u32) -> QueueFigures {
        QueueFigures {
            group: None,
            topic: topic.to_owned(),
            queue_id,
            min: 0,
            max: i64::from(queue_id) + 1,
            consumer_offset: None,
            store_time_ms: 0,
        }
    }

    #[test]
    fn names_are_merged_as_a_set_and_queues_side_by_side() {
        let goal = Goal::TopicsByConsumer;
        let mut merged = Part::Names(["a".to_owned(), "b".to_owned()].into());
        merge(
            &goal,
            &mut merged,
            Part::Names(["b".to_owned(), "c".to_owned()].into()),
        );
        let Part::Names(names) = merged else {
            panic!("names stay names");
        };
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["a", "b", "c"]);

        let goal = Goal::TopicStats;
        let rate = |tps: f64| Rates::from([(("t".to_owned(), None), tps)]);
        let mut merged = Part::Queues(vec![figures("t", 0), figures("t", 2)], rate(1.5));
        merge(
            &goal,
            &mut merged,
            Part::Queues(vec![figures("t", 1)], rate(2.0)),
        );
        let Part::Queues(all, rates) = merged else {
            panic!("queues stay queues");
        };
        let queues = by_queue(&all);
        assert_eq!(queues.len(), 3);
        assert_eq!(queues[&("t".to_owned(), 1)].max, 2);
        assert_eq!(rates, rate(3.5), "the shards' rates add");
    }

    #[test]
    fn a_parked_own_part_starts_its_gathering_with_an_empty_part_of_its_kind() {
        // The other shard's part may come first, then the parked own one.
        let goal = Goal::TopicStats;
        let ask = Ask::Queues(vec![QueueAsk {
            group: None,
            topic: "t".to_owned(),
            queues: 2,
        }]);
        let mut merged = empty_part(&ask);
        let rate = |tps: f64| Rates::from([(("t".to_owned(), None), tps)]);
        merge(
            &goal,
            &mut merged,
            Part::Queues(vec![figures("t", 1)], rate(2.0)),
        );
        merge(
            &goal,
            &mut merged,
            Part::Queues(vec![figures("t", 0)], rate(1.0)),
        );
        let Part::Queues(all, rates) = merged else {
            panic!("queues stay queues");
        };
        assert_eq!(by_queue(&all).len(), 2);
        assert_eq!(rates, rate(3.0));

        let ask = Ask::TimeSpans {
            topic: "t".to_owned(),
            group: "g".to_owned(),
            queues: 2,
        };
        let mut merged = empty_part(&ask);
        merge(
            &goal,
            &mut merged,
            Part::TimeSpans(vec![QueueTimeSpan::default()]),
        );
        let Part::TimeSpans(spans) = merged else {
            panic!("time spans stay time spans");
        };
        assert_eq!(spans.len(), 1);
        assert!(matches!(
            empty_part(&Ask::Messages(RemotingCommand::new_request(12, Default::default()))),
            Part::Messages(part) if part.count == 0
        ));
    }

    #[test]
    fn a_stats_item_held_by_some_shards_merges_what_they_hold() {
        let goal = Goal::Stats {
            name: "TOPIC_PUT_NUMS".to_owned(),
            key: "t".to_owned(),
        };
        let held = |sum: u64| {
            let mut figures = ItemFigures::default();
            figures.minute.sum = sum;
            figures.minute.times = 1;
            figures
        };
        let mut merged = Part::Stats(None);
        merge(&goal, &mut merged, Part::Stats(Some(held(4))));
        merge(&goal, &mut merged, Part::Stats(None));
        merge(&goal, &mut merged, Part::Stats(Some(held(6))));
        let Part::Stats(Some(figures)) = merged else {
            panic!("an item one shard holds is found");
        };
        assert_eq!((figures.minute.sum, figures.minute.times), (10, 2));
    }

    #[test]
    fn gathered_codes_are_the_fourteen_of_the_table() {
        for code in [
            12, 202, 208, 222, 300, 303, 306, 314, 315, 316, 317, 329, 343, 907,
        ] {
            assert!(is_gathered(code), "{code}");
        }
        assert!(!is_gathered(request_code::PULL_MESSAGE));
    }
}
