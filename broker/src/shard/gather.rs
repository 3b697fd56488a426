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
//! | QUERY_MESSAGE (12) | the records by key in each shard's index | records, up to the query's maximum (`super::query`) |
//! | GET_TOPIC_STATS_INFO (202) | min and max offset of each owned queue, and the store time of its last message | `TopicStatsTable`; TOPIC_NOT_EXIST for an unknown topic |
//! | GET_CONSUME_STATS (208) | without a topic, first the topics the group has offsets for; then per owned queue the max offset, the group's offset and the store time of the last message it consumed | `ConsumeStats` |
//! | QUERY_TOPIC_CONSUME_BY_WHO (300) | groups with offsets on the topic | `GroupList`, with the online groups subscribed to it |
//! | QUERY_TOPICS_BY_CONSUMER (343) | topics the group has offsets for | `TopicList` with this broker's address |
//! | GET_BROKER_CONSUME_STATS (317) | first every `topic@group` key of the offset tables; then the queues of each pair, as for GET_CONSUME_STATS | `ConsumeStatsList`: every subscription group, each with one `ConsumeStats` per topic it has offsets for |
//! | QUERY_CONSUME_TIME_SPAN (303) | per owned queue the store times of its oldest and newest message, of the last one the group consumed and of the first it did not | `QueryConsumeTimeSpanBody`; TOPIC_NOT_EXIST for an unknown topic |
//! | DELETE_EXPIRED_COMMITLOG (329) | remove the expired CommitLog segments at the next retention run, whatever the hour (`Store::delete_expired_now`) | SUCCESS |
//! | CLONE_GROUP_OFFSET (314) | without a topic, first the topics the source group has offsets for; then copy its offsets of each owned queue to the destination group | SUCCESS |
//! | INVOKE_BROKER_TO_RESET_OFFSET (222) | reset the group's offsets of each owned queue (to the first message stored at or after the time, or to the offset given for one queue) | `ResetOffsetBody` |
//!
//! As in Java, GET_TOPIC_STATS_INFO covers `max(readQueueNums,
//! writeQueueNums)` queues and GET_CONSUME_STATS `readQueueNums`; a topic the
//! group has offsets for but which is no longer configured is left out, and
//! so is one the group, online with subscriptions, does not subscribe to.
//! `consumeTps` and `topicPutTps` are 0 (no per-topic or per-group rates
//! are kept), and `pullOffset` is the committed offset (no pull offsets are
//! kept). Store times are read on the shard's thread, from memory or from
//! the disk, as GET_EARLIEST_MSG_STORETIME's are.
//!
//! A reset is Java 5.x's server-side reset (`useServerSideResetOffset`, its
//! default): each queue's offset is stored at once and handed to the
//! group's next pull of the queue, which is answered PULL_OFFSET_MOVED with
//! it (`super::pull`); the consumer moves there and commits it. A slave
//! refuses, as Java's does.
//!
//! # Invariants
//! - A gathering is answered exactly once: when its last part arrived, or at
//!   once on a single shard.
//! - Each shard reports only the queues it owns, so a merged table holds
//!   every queue once.

use std::collections::{BTreeMap, BTreeSet};

use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{
    BoundaryType, CloneGroupOffsetRequestHeader, GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader, GetTopicStatsInfoRequestHeader,
    QueryConsumeTimeSpanRequestHeader, QueryMessageRequestHeader,
    QueryTopicConsumeByWhoRequestHeader, QueryTopicsByConsumerRequestHeader,
    ResetOffsetRequestHeader,
};
use ringmq_protocol::json::{
    ConsumeStats, ConsumeStatsList, GroupList, JsonStyle, MessageQueue, OffsetWrapper,
    QueryConsumeTimeSpanBody, QueueTimeSpan, ResetOffsetBody, TopicList, TopicOffset,
    TopicStatsTable,
};

use super::link::{ReplyTo, Request, ShardMsg};
use super::query::{QueryPart, merge_records, query_limit};
use super::{ShardHandler, json_success, response, success};
use crate::consumer_offset::split_offset_key;

/// What the arrival shard asks the others for.
#[derive(Debug, Clone)]
pub enum Ask {
    /// QUERY_MESSAGE's records in this shard's index.
    Messages(RemotingCommand),
    /// Topics the group has committed offsets for on this shard.
    TopicsOfGroup(String),
    /// Groups with committed offsets on the topic on this shard.
    GroupsOfTopic(String),
    /// Figures of the queues this shard owns, for each [`QueueAsk`].
    Queues(Vec<QueueAsk>),
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
    /// Queue figures.
    Queues(Vec<QueueFigures>),
    /// The new offsets by queue id, or why the reset was refused.
    Reset(Result<Vec<(u32, i64)>, String>),
    /// Queues' time spans.
    TimeSpans(Vec<QueueTimeSpan>),
    /// Done, nothing to report.
    Done,
}

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

    fn gather_start(&self, cmd: &RemotingCommand) -> Result<(Goal, Ask), Box<RemotingCommand>> {
        let bad = |error: ringmq_protocol::error::DecodeError| {
            Box::new(response(response_code::SYSTEM_ERROR, error.to_string()))
        };
        match cmd.code {
            request_code::QUERY_MESSAGE => {
                let header: QueryMessageRequestHeader = cmd.decode_custom_header().map_err(bad)?;
                let max = query_limit(&header);
                Ok((Goal::Messages { max }, Ask::Messages(cmd.clone())))
            }
            request_code::GET_TOPIC_STATS_INFO => {
                let header: GetTopicStatsInfoRequestHeader =
                    cmd.decode_custom_header().map_err(bad)?;
                let Some(config) = self.topics.get(&header.topic) else {
                    return Err(Box::new(response(
                        response_code::TOPIC_NOT_EXIST,
                        format!("topic[{}] not exist", header.topic),
                    )));
                };
                let queues = config.read_queue_nums.max(config.write_queue_nums).max(0) as u32;
                let ask = Ask::Queues(vec![QueueAsk {
                    group: None,
                    topic: header.topic,
                    queues,
                }]);
                Ok((Goal::TopicStats, ask))
            }
            request_code::GET_CONSUME_STATS => {
                let header: GetConsumeStatsRequestHeader =
                    cmd.decode_custom_header().map_err(bad)?;
                let named: Vec<String> = match header.topic.as_deref() {
                    Some(topic) if !topic.trim().is_empty() => vec![topic.to_owned()],
                    _ => header.topics().map(str::to_owned).collect(),
                };
                let group = header.consumer_group;
                if named.is_empty() {
                    let ask = Ask::TopicsOfGroup(group.clone());
                    return Ok((Goal::GroupTopicsForStats { group }, ask));
                }
                Ok(self.consume_stats_round(group, named))
            }
            request_code::QUERY_TOPIC_CONSUME_BY_WHO => {
                let header: QueryTopicConsumeByWhoRequestHeader =
                    cmd.decode_custom_header().map_err(bad)?;
                let online = self
                    .subs
                    .groups_of_topic(&header.topic)
                    .map(str::to_owned)
                    .collect();
                Ok((
                    Goal::ConsumeByWho { online },
                    Ask::GroupsOfTopic(header.topic),
                ))
            }
            request_code::QUERY_TOPICS_BY_CONSUMER => {
                let header: QueryTopicsByConsumerRequestHeader =
                    cmd.decode_custom_header().map_err(bad)?;
                Ok((Goal::TopicsByConsumer, Ask::TopicsOfGroup(header.group)))
            }
            request_code::DELETE_EXPIRED_COMMITLOG => {
                Ok((Goal::DeleteExpired, Ask::DeleteExpiredNow))
            }
            request_code::QUERY_CONSUME_TIME_SPAN => {
                let header: QueryConsumeTimeSpanRequestHeader =
                    cmd.decode_custom_header().map_err(bad)?;
                let Some(config) = self.topics.get(&header.topic) else {
                    return Err(Box::new(response(
                        response_code::TOPIC_NOT_EXIST,
                        format!("topic[{}] not exist", header.topic),
                    )));
                };
                let ask = Ask::TimeSpans {
                    queues: config.write_queue_nums.max(0) as u32,
                    topic: header.topic,
                    group: header.group,
                };
                Ok((Goal::TimeSpans, ask))
            }
            request_code::GET_BROKER_CONSUME_STATS => {
                let header: GetConsumeStatsInBrokerHeader =
                    cmd.decode_custom_header().map_err(bad)?;
                let goal = Goal::OffsetKeysForBrokerStats {
                    order_only: header.is_order.unwrap_or(false),
                };
                Ok((goal, Ask::OffsetKeys))
            }
            request_code::CLONE_GROUP_OFFSET => {
                let header: CloneGroupOffsetRequestHeader =
                    cmd.decode_custom_header().map_err(bad)?;
                let offline = header.offline.unwrap_or(false);
                match header.topic.filter(|topic| !topic.trim().is_empty()) {
                    Some(topic) => Ok(self.clone_round(
                        header.src_group,
                        header.dest_group,
                        offline,
                        vec![topic],
                    )),
                    None => {
                        let ask = Ask::TopicsOfGroup(header.src_group.clone());
                        let goal = Goal::GroupTopicsForClone {
                            src: header.src_group,
                            dest: header.dest_group,
                            offline,
                        };
                        Ok((goal, ask))
                    }
                }
            }
            request_code::INVOKE_BROKER_TO_RESET_OFFSET => {
                let header: ResetOffsetRequestHeader = cmd.decode_custom_header().map_err(bad)?;
                self.reset_start(header)
            }
            code => Err(Box::new(response(
                response_code::REQUEST_CODE_NOT_SUPPORTED,
                format!(" request type {code} not supported"),
            ))),
        }
    }

    /// INVOKE_BROKER_TO_RESET_OFFSET's checks, as Java's `resetOffsetInner`.
    fn reset_start(
        &self,
        header: ResetOffsetRequestHeader,
    ) -> Result<(Goal, Ask), Box<RemotingCommand>> {
        let refuse = |code: i32, remark: String| Box::new(response(code, remark));
        if !self.settings.is_master {
            return Err(refuse(
                response_code::SYSTEM_ERROR,
                "Can not reset offset in slave broker".to_owned(),
            ));
        }
        let Some(config) = self.topics.get(&header.topic) else {
            return Err(refuse(
                response_code::TOPIC_NOT_EXIST,
                format!("Topic {} does not exist", header.topic),
            ));
        };
        if !self.groups.contains(&header.group) {
            return Err(refuse(
                response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
                format!("Group {} does not exist", header.group),
            ));
        }
        let queues = config.read_queue_nums.max(0) as u32;
        let queue = header.queue().map(|queue| queue as u32);
        if queues == 0 || queue.is_some_and(|queue| queue >= queues) {
            return Err(refuse(
                response_code::SYSTEM_ERROR,
                format!(
                    "No queues to reset: queue {:?} of the {queues} read queues of {}",
                    header.queue(),
                    header.topic
                ),
            ));
        }
        let ask = ResetAsk {
            offset: queue.and(header.target_offset()),
            topic: header.topic.clone(),
            group: header.group,
            queues,
            queue,
            timestamp: header.timestamp,
        };
        Ok((
            Goal::Reset {
                topic: header.topic,
            },
            Ask::Reset(Box::new(ask)),
        ))
    }

    /// This shard's part of a reset: each owned queue's new offset, stored.
    fn reset_owned(&mut self, ask: &ResetAsk, now_ms: i64) -> Result<Vec<(u32, i64)>, String> {
        let mut reset = Vec::new();
        let owned: Vec<u32> = match ask.queue {
            Some(queue) => vec![queue],
            None => (0..ask.queues).collect(),
        };
        for queue_id in owned {
            if self.router.shard_of(queue_id).0 != self.id {
                continue;
            }
            let wire_id = queue_id as i32;
            let offset = match ask.offset {
                Some(offset) => {
                    let min = self.min_offset(&ask.topic, wire_id);
                    let max = self.max_offset(&ask.topic, wire_id);
                    if offset < min || offset > max {
                        return Err(format!(
                            "Target offset {offset} not in consume queue range [{min}-{max}]"
                        ));
                    }
                    offset
                }
                None if ask.timestamp < 0 => self.max_offset(&ask.topic, wire_id),
                None => self.search_offset(&ask.topic, wire_id, ask.timestamp, BoundaryType::Lower),
            };
            self.offsets
                .assign_reset(&ask.group, &ask.topic, wire_id, offset, now_ms);
            reset.push((queue_id, offset));
        }
        Ok(reset)
    }

    /// CLONE_GROUP_OFFSET's copy round over `topics`: the configured ones,
    /// less, unless `offline`, those the source group (online with
    /// subscriptions) does not subscribe to, as Java's `cloneGroupOffset`.
    fn clone_round(
        &self,
        src: String,
        dest: String,
        offline: bool,
        topics: Vec<String>,
    ) -> (Goal, Ask) {
        let topics = if offline {
            topics
                .into_iter()
                .filter(|topic| self.topics.contains(topic))
                .collect()
        } else {
            self.subscribed_topics(&src, topics)
                .into_iter()
                .map(|(topic, _)| topic)
                .collect()
        };
        (Goal::CloneOffsets, Ask::CloneOffsets { src, dest, topics })
    }

    /// The configured `topics` (with their read queue counts), less those
    /// an online `group` with subscriptions does not subscribe to.
    fn subscribed_topics(&self, group: &str, topics: Vec<String>) -> Vec<(String, u32)> {
        let subscribed = self.subs.topics_of(group);
        topics
            .into_iter()
            .filter(|topic| {
                subscribed.as_ref().is_none_or(|subscribed| {
                    subscribed.is_empty() || subscribed.contains(topic.as_str())
                })
            })
            .filter_map(|topic| {
                let queues = self.topics.get(&topic)?.read_queue_nums.max(0) as u32;
                Some((topic, queues))
            })
            .collect()
    }

    /// GET_BROKER_CONSUME_STATS's queue round, as Java's
    /// `fetchAllConsumeStatsInBroker`: each (topic, group) pair with
    /// offsets whose group is in the subscription group table, whose topic
    /// is configured (and ordered, for `order_only`)
    /// and which an online group with subscriptions subscribes to, over the
    /// topic's write queues.
    fn broker_stats_asks(&self, keys: &BTreeSet<String>, order_only: bool) -> Vec<QueueAsk> {
        let mut asks = Vec::new();
        for (topic, group) in keys.iter().filter_map(|key| split_offset_key(key)) {
            let Some(config) = self.topics.get(topic) else {
                continue;
            };
            if !self.groups.contains(group) {
                continue;
            }
            if order_only && !config.order {
                continue;
            }
            if self
                .subscribed_topics(group, vec![topic.to_owned()])
                .is_empty()
            {
                continue;
            }
            asks.push(QueueAsk {
                group: Some(group.to_owned()),
                topic: topic.to_owned(),
                queues: config.write_queue_nums.max(0) as u32,
            });
        }
        asks
    }

    /// The `ConsumeStatsList` of every subscription group from its queues'
    /// figures: one `ConsumeStats` per topic, a group without offsets with
    /// an empty list, as Java lists every group of its table.
    fn broker_consume_stats(&self, figures: Vec<QueueFigures>) -> RemotingCommand {
        let mut by_group: BTreeMap<String, BTreeMap<String, ConsumeStats>> = self
            .groups
            .names()
            .map(|group| (group.to_owned(), BTreeMap::new()))
            .collect();
        let mut total_diff = 0;
        for f in figures {
            let Some(group) = f.group.clone() else {
                continue;
            };
            let queue = self.message_queue(&f);
            let topic = f.topic.clone();
            let offsets = offset_wrapper(&f);
            total_diff += offsets.broker_offset - offsets.consumer_offset;
            by_group
                .entry(group)
                .or_default()
                .entry(topic)
                .or_default()
                .offset_table
                .insert(queue, offsets);
        }
        let list = ConsumeStatsList {
            consume_stats_list: by_group
                .into_iter()
                .map(|(group, topics)| BTreeMap::from([(group, topics.into_values().collect())]))
                .collect(),
            broker_addr: Some(self.broker_addr()),
            total_diff,
            total_inflight_diff: 0,
        };
        json_success(|body| list.to_json(body, JsonStyle::Java))
    }

    /// This broker's `ip:port`, as it registers it.
    fn broker_addr(&self) -> String {
        let config = &self.settings.broker_config;
        format!("{}:{}", config.broker_ip1, config.listen_port)
    }

    /// GET_CONSUME_STATS's queue round over `topics`: the configured ones,
    /// less those an online group with subscriptions does not subscribe to.
    fn consume_stats_round(&self, group: String, topics: Vec<String>) -> (Goal, Ask) {
        let ask = Ask::Queues(
            self.subscribed_topics(&group, topics)
                .into_iter()
                .map(|(topic, queues)| QueueAsk {
                    group: Some(group.clone()),
                    topic,
                    queues,
                })
                .collect(),
        );
        (Goal::ConsumeStats, ask)
    }

    /// Computes this shard's part and asks the other shards for theirs.
    fn gather(&mut self, reply: ReplyTo, goal: Goal, ask: Ask, now_ms: i64) {
        let merged = self.answer_ask(&ask, now_ms);
        let missing = self.settings.shard_count - 1;
        let gathering = Gathering {
            reply,
            goal,
            merged,
            missing,
        };
        if missing == 0 {
            return self.gathered(gathering, now_ms);
        }
        self.next_query += 1;
        let query = self.next_query;
        self.gatherings.insert(query, gathering);
        let me = self.id;
        if let Some(links) = &mut self.links {
            links.broadcast(|| ShardMsg::Ask {
                query,
                from: me,
                ask: Box::new(ask.clone()),
            });
        }
    }

    /// This shard's part of `ask`.
    pub(crate) fn answer_ask(&mut self, ask: &Ask, now_ms: i64) -> Part {
        match ask {
            Ask::Messages(cmd) => Part::Messages(self.query_part(cmd).unwrap_or_default()),
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
            Ask::Queues(asks) => {
                let mut figures = Vec::new();
                for ask in asks {
                    for queue_id in 0..ask.queues {
                        if self.router.shard_of(queue_id).0 != self.id {
                            continue;
                        }
                        figures.push(self.queue_figures(ask, queue_id));
                    }
                }
                Part::Queues(figures)
            }
            Ask::DeleteExpiredNow => {
                self.store_mut().delete_expired_now();
                Part::Done
            }
            Ask::OffsetKeys => Part::Names(self.offsets.keys().map(str::to_owned).collect()),
            Ask::TimeSpans {
                topic,
                group,
                queues,
            } => {
                let mut spans = Vec::new();
                for queue_id in 0..*queues {
                    if self.router.shard_of(queue_id).0 == self.id {
                        spans.push(self.time_span(topic, group, queue_id, now_ms));
                    }
                }
                Part::TimeSpans(spans)
            }
            Ask::Reset(reset) => Part::Reset(self.reset_owned(reset, now_ms)),
            Ask::CloneOffsets { src, dest, topics } => {
                for topic in topics {
                    self.offsets.clone_offsets(src, dest, topic, now_ms);
                }
                Part::Done
            }
        }
    }

    fn queue_figures(&mut self, ask: &QueueAsk, queue_id: u32) -> QueueFigures {
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
            self.store_time_at(topic, wire_id, before - 1)
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
    fn time_span(&mut self, topic: &str, group: &str, queue_id: u32, now_ms: i64) -> QueueTimeSpan {
        let wire_id = queue_id as i32;
        let time_at = |handler: &mut Self, offset: i64| {
            handler.store_time_at(topic, wire_id, offset).unwrap_or(-1)
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
            message_queue: MessageQueue::new(topic, &self.settings.broker_name, wire_id),
            min_time_stamp,
            max_time_stamp,
            consume_time_stamp,
            delay_time,
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

    /// Every part is in: answer, or start the next round.
    fn gathered(&mut self, done: Gathering, now_ms: i64) {
        let answer = match (done.goal, done.merged) {
            (Goal::Messages { .. }, Part::Messages(merged)) => super::query::answer(merged),
            (Goal::GroupTopicsForStats { group }, Part::Names(topics)) => {
                let (goal, ask) = self.consume_stats_round(group, topics.into_iter().collect());
                return self.gather(done.reply, goal, ask, now_ms);
            }
            (Goal::TopicStats, Part::Queues(figures)) => {
                let table = TopicStatsTable {
                    offset_table: figures
                        .into_iter()
                        .map(|f| {
                            let queue = self.message_queue(&f);
                            let offsets = TopicOffset {
                                min_offset: f.min.max(0),
                                max_offset: f.max.max(0),
                                last_update_timestamp: f.store_time_ms,
                            };
                            (queue, offsets)
                        })
                        .collect(),
                    topic_put_tps: 0.0,
                };
                json_success(|body| table.to_json(body, JsonStyle::Java))
            }
            (Goal::ConsumeStats, Part::Queues(figures)) => {
                let stats = ConsumeStats {
                    consume_tps: 0.0,
                    offset_table: figures
                        .into_iter()
                        .map(|f| (self.message_queue(&f), offset_wrapper(&f)))
                        .collect(),
                };
                json_success(|body| stats.to_json(body, JsonStyle::Java))
            }
            (Goal::ConsumeByWho { mut online }, Part::Names(groups)) => {
                online.extend(groups);
                let list = GroupList {
                    group_list: online.into_iter().collect(),
                };
                json_success(|body| list.to_json(body, JsonStyle::Java))
            }
            (Goal::TopicsByConsumer, Part::Names(topics)) => {
                let list = TopicList {
                    topic_list: topics.into_iter().collect(),
                    broker_addr: Some(self.broker_addr()),
                };
                json_success(|body| list.to_json(body, JsonStyle::Java))
            }
            (Goal::Reset { topic }, Part::Reset(Ok(offsets))) => {
                let body = ResetOffsetBody {
                    offset_table: offsets
                        .into_iter()
                        .map(|(queue_id, offset)| {
                            let queue = MessageQueue::new(
                                &topic,
                                &self.settings.broker_name,
                                queue_id as i32,
                            );
                            (queue, offset)
                        })
                        .collect(),
                };
                json_success(|out| body.to_json(out, JsonStyle::Java))
            }
            (Goal::GroupTopicsForClone { src, dest, offline }, Part::Names(topics)) => {
                let (goal, ask) =
                    self.clone_round(src, dest, offline, topics.into_iter().collect());
                return self.gather(done.reply, goal, ask, now_ms);
            }
            (Goal::CloneOffsets | Goal::DeleteExpired, Part::Done) => success(),
            (Goal::OffsetKeysForBrokerStats { order_only }, Part::Names(keys)) => {
                let asks = self.broker_stats_asks(&keys, order_only);
                return self.gather(
                    done.reply,
                    Goal::BrokerConsumeStats,
                    Ask::Queues(asks),
                    now_ms,
                );
            }
            (Goal::BrokerConsumeStats, Part::Queues(figures)) => self.broker_consume_stats(figures),
            (Goal::TimeSpans, Part::TimeSpans(mut spans)) => {
                spans.sort_by_key(|span| span.message_queue.queue_id);
                let body = QueryConsumeTimeSpanBody {
                    consume_time_span_set: spans,
                };
                json_success(|out| body.to_json(out, JsonStyle::Java))
            }
            (Goal::Reset { .. }, Part::Reset(Err(remark))) => {
                response(response_code::SYSTEM_ERROR, remark)
            }
            (goal, merged) => {
                unreachable!("a gathering's parts match its ask: {goal:?} got {merged:?}")
            }
        };
        self.reply(done.reply, answer);
    }

    fn message_queue(&self, figures: &QueueFigures) -> MessageQueue {
        MessageQueue::new(
            &figures.topic,
            &self.settings.broker_name,
            figures.queue_id as i32,
        )
    }
}

/// A queue's consume-stats entry: the committed offset (0 without one),
/// also as the pull offset, which ringmq does not keep.
fn offset_wrapper(f: &QueueFigures) -> OffsetWrapper {
    let consumer_offset = f.consumer_offset.unwrap_or(0).max(0);
    OffsetWrapper {
        broker_offset: f.max.max(0),
        consumer_offset,
        pull_offset: consumer_offset,
        last_timestamp: f.store_time_ms,
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
        (Part::Queues(merged), Part::Queues(part)) => merged.extend(part),
        (Part::Done, Part::Done) => {}
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
        let mut merged = Part::Queues(vec![figures("t", 0), figures("t", 2)]);
        merge(&goal, &mut merged, Part::Queues(vec![figures("t", 1)]));
        let Part::Queues(all) = merged else {
            panic!("queues stay queues");
        };
        let queues = by_queue(&all);
        assert_eq!(queues.len(), 3);
        assert_eq!(queues[&("t".to_owned(), 1)].max, 2);
    }

    #[test]
    fn gathered_codes_are_the_ten_of_the_table() {
        for code in [12, 202, 208, 222, 300, 303, 314, 317, 329, 343] {
            assert!(is_gathered(code), "{code}");
        }
        assert!(!is_gathered(request_code::PULL_MESSAGE));
    }
}
