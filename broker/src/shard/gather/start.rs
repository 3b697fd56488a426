//! The checks of a gathered request and its first ask (or its error
//! answer), and the rounds that follow a first round of names.

use std::collections::BTreeSet;

use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{
    CloneGroupOffsetRequestHeader, GetConsumeStatsInBrokerHeader, GetConsumeStatsRequestHeader,
    GetTopicStatsInfoRequestHeader, QueryConsumeTimeSpanRequestHeader, QueryMessageRequestHeader,
    QueryTopicConsumeByWhoRequestHeader, QueryTopicsByConsumerRequestHeader,
    ResetOffsetRequestHeader, ViewBrokerStatsDataRequestHeader,
};

use super::{Ask, Goal, QueueAsk, ResetAsk};
use ringmq_protocol::json::TopicConfig;

use crate::consumer_offset::split_offset_key;
use crate::shard::query::query_limit;
use crate::shard::{ShardHandler, response};
use crate::stats_table::StatsName;

impl ShardHandler {
    pub(super) fn gather_start(
        &self,
        cmd: &RemotingCommand,
    ) -> Result<(Goal, Ask), Box<RemotingCommand>> {
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
                let config = self.known_topic(&header.topic)?;
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
            request_code::GET_BROKER_HA_STATUS => Ok((Goal::HaStatus, Ask::HaStatus)),
            // A slave's topic table follows its master's only every 10 s:
            // a topic new on the master may have queues here before it.
            request_code::CLEAN_UNUSED_TOPIC if !self.settings.is_master => {
                Err(Box::new(response(
                    response_code::SYSTEM_ERROR,
                    "cleaning unused topics is refused on a slave: its topic table trails \
                     its master's",
                )))
            }
            request_code::CLEAN_UNUSED_TOPIC => {
                Ok((Goal::CleanUnusedTopics, Ask::CleanUnusedTopics))
            }
            request_code::DELETE_EXPIRED_COMMITLOG => {
                Ok((Goal::DeleteExpired, Ask::DeleteExpiredNow))
            }
            request_code::CLEAN_EXPIRED_CONSUMEQUEUE => {
                Ok((Goal::DeleteExpired, Ask::CleanExpiredQueuesNow))
            }
            request_code::QUERY_CONSUME_TIME_SPAN => {
                let header: QueryConsumeTimeSpanRequestHeader =
                    cmd.decode_custom_header().map_err(bad)?;
                let config = self.known_topic(&header.topic)?;
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
            request_code::VIEW_BROKER_STATS_DATA => {
                let header: ViewBrokerStatsDataRequestHeader =
                    cmd.decode_custom_header().map_err(bad)?;
                let (wire_name, key) = (header.stats_name, header.stats_key);
                // A name ringmq does not keep has no item, as in Java.
                let Some(name) = StatsName::parse(&wire_name) else {
                    return Err(Box::new(super::answer::stats_not_exist(&wire_name, &key)));
                };
                let ask = Ask::Stats {
                    name,
                    key: key.clone(),
                };
                Ok((
                    Goal::Stats {
                        name: wire_name,
                        key,
                    },
                    ask,
                ))
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

    /// The config of `topic`, or Java's TOPIC_NOT_EXIST answer.
    fn known_topic(&self, topic: &str) -> Result<&TopicConfig, Box<RemotingCommand>> {
        self.topics.get(topic).ok_or_else(|| {
            Box::new(response(
                response_code::TOPIC_NOT_EXIST,
                format!("topic[{topic}] not exist"),
            ))
        })
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

    /// CLONE_GROUP_OFFSET's copy round over `topics`: the configured ones,
    /// less, unless `offline`, those the source group (online with
    /// subscriptions) does not subscribe to, as Java's `cloneGroupOffset`.
    pub(super) fn clone_round(
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
    pub(super) fn broker_stats_asks(
        &self,
        keys: &BTreeSet<String>,
        order_only: bool,
    ) -> Vec<QueueAsk> {
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

    /// GET_CONSUME_STATS's queue round over `topics`: the configured ones,
    /// less those an online group with subscriptions does not subscribe to.
    pub(super) fn consume_stats_round(&self, group: String, topics: Vec<String>) -> (Goal, Ask) {
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
}
