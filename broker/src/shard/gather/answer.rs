//! The answers of gathered requests, from their merged parts, or the next
//! round when a request needs one.

use std::collections::BTreeMap;

use ringmq_protocol::code::response_code;
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::json::{
    BrokerStatsData, BrokerStatsItem, ConsumeStats, ConsumeStatsList, GroupList, JsonStyle,
    MessageQueue, OffsetWrapper, QueryConsumeTimeSpanBody, ResetOffsetBody, TopicList, TopicOffset,
    TopicStatsTable,
};

use super::{Ask, Gathering, Goal, Part, QueueFigures, Rates};
use crate::shard::{ShardHandler, json_success, response, success};
use crate::stats_table::WindowFigures;

impl ShardHandler {
    /// Every part is in: answer, or start the next round.
    pub(super) fn gathered(&mut self, done: Gathering, now_ms: i64) {
        let answer = match (done.goal, done.merged) {
            (Goal::Messages { .. }, Part::Messages(merged)) => crate::shard::query::answer(merged),
            (Goal::GroupTopicsForStats { group }, Part::Names(topics)) => {
                let (goal, ask) = self.consume_stats_round(group, topics.into_iter().collect());
                return self.gather(done.reply, goal, ask, now_ms);
            }
            (Goal::TopicStats, Part::Queues(figures, rates)) => {
                let table = TopicStatsTable {
                    offset_table: figures
                        .into_iter()
                        .map(|f| {
                            let queue = self.message_queue(&f.topic, f.queue_id);
                            let offsets = TopicOffset {
                                min_offset: f.min.max(0),
                                max_offset: f.max.max(0),
                                last_update_timestamp: f.store_time_ms,
                            };
                            (queue, offsets)
                        })
                        .collect(),
                    topic_put_tps: rates.values().sum(),
                };
                json_success(|body| table.to_json(body, JsonStyle::Java))
            }
            (Goal::ConsumeStats, Part::Queues(figures, rates)) => {
                let stats = ConsumeStats {
                    consume_tps: rates.values().sum(),
                    offset_table: figures
                        .into_iter()
                        .map(|f| (self.message_queue(&f.topic, f.queue_id), offset_wrapper(&f)))
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
                        .map(|(queue_id, offset)| (self.message_queue(&topic, queue_id), offset))
                        .collect(),
                };
                json_success(|out| body.to_json(out, JsonStyle::Java))
            }
            (Goal::GroupTopicsForClone { src, dest, offline }, Part::Names(topics)) => {
                let (goal, ask) =
                    self.clone_round(src, dest, offline, topics.into_iter().collect());
                return self.gather(done.reply, goal, ask, now_ms);
            }
            (Goal::CloneOffsets | Goal::DeleteExpired | Goal::CleanUnusedTopics, Part::Done) => {
                success()
            }
            (Goal::OffsetKeysForBrokerStats { order_only }, Part::Names(keys)) => {
                let asks = self.broker_stats_asks(&keys, order_only);
                return self.gather(
                    done.reply,
                    Goal::BrokerConsumeStats,
                    Ask::Queues(asks),
                    now_ms,
                );
            }
            (Goal::BrokerConsumeStats, Part::Queues(figures, rates)) => {
                self.broker_consume_stats(figures, &rates)
            }
            (Goal::Stats { name, key }, Part::Stats(figures)) => match figures {
                Some(figures) => {
                    let data = BrokerStatsData {
                        stats_minute: stats_item(&figures.minute),
                        stats_hour: stats_item(&figures.hour),
                        stats_day: stats_item(&figures.day),
                    };
                    json_success(|body| data.to_json(body, JsonStyle::Java))
                }
                None => stats_not_exist(&name, &key),
            },
            (Goal::HaStatus, Part::Ha(parts)) => {
                let info = crate::shard::replica::ha_runtime_info(
                    self.settings.is_master,
                    self.settings.shard_count,
                    &parts,
                );
                json_success(|body| info.to_json(body, JsonStyle::Java))
            }
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

    /// The `ConsumeStatsList` of every subscription group from its queues'
    /// figures: one `ConsumeStats` per topic, a group without offsets with
    /// an empty list, as Java lists every group of its table.
    fn broker_consume_stats(&self, figures: Vec<QueueFigures>, rates: &Rates) -> RemotingCommand {
        let mut by_group: BTreeMap<String, BTreeMap<String, ConsumeStats>> = self
            .groups
            .names()
            .map(|group| (group.to_owned(), BTreeMap::new()))
            .collect();
        let mut total_diff: i64 = 0;
        for f in figures {
            let Some(group) = f.group.clone() else {
                continue;
            };
            let queue = self.message_queue(&f.topic, f.queue_id);
            let topic = f.topic.clone();
            let offsets = offset_wrapper(&f);
            // Saturating: a client may commit any offset, i64::MAX too.
            total_diff = total_diff.saturating_add(offsets.broker_offset - offsets.consumer_offset);
            by_group
                .entry(group)
                .or_default()
                .entry(topic)
                .or_default()
                .offset_table
                .insert(queue, offsets);
        }
        for (group, topics) in &mut by_group {
            for (topic, stats) in topics {
                let key = (topic.clone(), Some(group.clone()));
                stats.consume_tps = rates.get(&key).copied().unwrap_or(0.0);
            }
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

    /// Queue `queue_id` of `topic` on this broker, as the answers name it.
    pub(super) fn message_queue(&self, topic: &str, queue_id: u32) -> MessageQueue {
        MessageQueue::new(topic, &self.settings.broker_name, queue_id as i32)
    }
}

/// VIEW_BROKER_STATS_DATA's answer for an item no shard holds (Java's words).
pub(super) fn stats_not_exist(name: &str, key: &str) -> RemotingCommand {
    response(
        response_code::SYSTEM_ERROR,
        format!("The stats <{name}> <{key}> not exist"),
    )
}

fn stats_item(window: &WindowFigures) -> BrokerStatsItem {
    BrokerStatsItem {
        sum: i64::try_from(window.sum).unwrap_or(i64::MAX),
        tps: window.tps,
        avgpt: window.avgpt(),
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
