//! The consumer subscriptions the pull path needs, as an immutable snapshot
//! that shard 0 (owner of the client registry) publishes to every shard
//! whenever they change.
//!
//! SQL92 subscriptions are compiled when the snapshot is taken (reusing the
//! previous snapshot's compiled filter for an unchanged expression), so the
//! pull path evaluates a ready [`Filter`].
//!
//! # Invariants
//! - A snapshot equals the registry's groups at the moment it was taken
//!   ([`SubscriptionSnapshot::of`]); shard 0 publishes a new one only when
//!   it differs from the last.
//! - Every subscription whose expression type is not a tag type has an
//!   entry in its group's `filters`: the compiled filter, or the compile
//!   error.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ringmq_protocol::json::{MessageModel, SubscriptionData};

use crate::client_registry::{ClientRegistry, PullSubscriptionError};
use crate::features::sql92::{Filter, compile, is_tag_type};

/// A compiled SQL92 filter of a subscription, or why it does not compile;
/// equal when the expressions are.
#[derive(Debug, Clone)]
pub struct CompiledFilter {
    expression: String,
    filter: Result<Arc<Filter>, String>,
}

impl CompiledFilter {
    /// Compiles `expression`.
    pub fn new(expression: &str) -> Self {
        CompiledFilter {
            expression: expression.to_owned(),
            filter: compile(expression)
                .map(Arc::new)
                .map_err(|error| error.to_string()),
        }
    }

    /// The filter, or the compile error.
    pub fn filter(&self) -> Result<&Arc<Filter>, &str> {
        self.filter.as_ref().map_err(String::as_str)
    }
}

impl PartialEq for CompiledFilter {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression
    }
}

impl Eq for CompiledFilter {}

/// One consumer group's model and subscriptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSubscriptions {
    /// Clustering or broadcasting.
    pub message_model: MessageModel,
    /// Topic → subscription.
    pub topics: BTreeMap<String, SubscriptionData>,
    /// Topic → compiled filter, for the subscriptions that are not by tag.
    pub filters: BTreeMap<String, CompiledFilter>,
}

/// Every online consumer group's subscriptions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscriptionSnapshot {
    groups: BTreeMap<String, GroupSubscriptions>,
}

impl SubscriptionSnapshot {
    /// The registry's current subscriptions.
    pub fn of(registry: &ClientRegistry) -> Self {
        Self::of_reusing(registry, None)
    }

    /// The registry's current subscriptions, taking compiled filters from
    /// `previous` where the expression did not change.
    pub fn of_reusing(registry: &ClientRegistry, previous: Option<&SubscriptionSnapshot>) -> Self {
        SubscriptionSnapshot {
            groups: registry
                .consumer_groups()
                .map(|(name, group)| {
                    let topics = group.subscriptions().clone();
                    let filters = topics
                        .iter()
                        .filter(|(_, data)| !is_tag_type(Some(data.expression_type.as_str())))
                        .map(|(topic, data)| {
                            let reused = previous
                                .and_then(|p| p.groups.get(name))
                                .and_then(|g| g.filters.get(topic))
                                .filter(|f| f.expression == data.sub_string)
                                .cloned();
                            let compiled =
                                reused.unwrap_or_else(|| CompiledFilter::new(&data.sub_string));
                            (topic.clone(), compiled)
                        })
                        .collect();
                    (
                        name.to_owned(),
                        GroupSubscriptions {
                            message_model: group.message_model.clone(),
                            topics,
                            filters,
                        },
                    )
                })
                .collect(),
        }
    }

    /// The compiled filter of (group, topic) when its subscription is not by
    /// tag.
    pub fn filter(&self, group: &str, topic: &str) -> Option<&CompiledFilter> {
        self.groups.get(group)?.filters.get(topic)
    }

    /// The subscription a pull of (group, topic) uses, with the checks of
    /// [`ClientRegistry::pull_subscription`].
    ///
    /// # Errors
    /// The [`PullSubscriptionError`] to answer.
    pub fn pull_subscription(
        &self,
        group: &str,
        topic: &str,
        sub_version: i64,
        consume_broadcast_enable: bool,
    ) -> Result<&SubscriptionData, PullSubscriptionError> {
        let info = self
            .groups
            .get(group)
            .ok_or(PullSubscriptionError::GroupNotOnline)?;
        if !consume_broadcast_enable && info.message_model == MessageModel::Broadcasting {
            return Err(PullSubscriptionError::BroadcastNotAllowed);
        }
        let subscription = info
            .topics
            .get(topic)
            .ok_or(PullSubscriptionError::NotExist)?;
        if subscription.sub_version < sub_version {
            return Err(PullSubscriptionError::NotLatest);
        }
        Ok(subscription)
    }

    /// The topics an online `group` subscribes to; `None` when it is not
    /// online.
    pub fn topics_of(&self, group: &str) -> Option<BTreeSet<&str>> {
        let info = self.groups.get(group)?;
        Some(info.topics.keys().map(String::as_str).collect())
    }

    /// An online `group`'s subscription of `topic`.
    pub fn subscription(&self, group: &str, topic: &str) -> Option<&SubscriptionData> {
        self.groups.get(group)?.topics.get(topic)
    }

    /// The online groups subscribed to `topic`.
    pub fn groups_of_topic<'a>(&'a self, topic: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.groups
            .iter()
            .filter(move |(_, info)| info.topics.contains_key(topic))
            .map(|(group, _)| group.as_str())
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether no group is online.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiled_filters_are_equal_when_their_expressions_are() {
        let good = CompiledFilter::new("a > 1 AND b = 'x'");
        assert!(good.filter().is_ok());
        assert_eq!(good, CompiledFilter::new("a > 1 AND b = 'x'"));
        assert_ne!(good, CompiledFilter::new("a > 2"));
        let bad = CompiledFilter::new("a > AND");
        assert!(bad.filter().is_err_and(|remark| !remark.is_empty()));
    }

    #[test]
    fn the_snapshot_gives_the_filter_of_a_group_and_topic() {
        let mut filters = BTreeMap::new();
        filters.insert("t".to_owned(), CompiledFilter::new("a = 1"));
        let mut snapshot = SubscriptionSnapshot::default();
        snapshot.groups.insert(
            "g".to_owned(),
            GroupSubscriptions {
                message_model: MessageModel::Clustering,
                topics: BTreeMap::new(),
                filters,
            },
        );
        let filter = snapshot.filter("g", "t").unwrap().filter().unwrap();
        assert!(filter.matches(|key| (key == "a").then_some("1")));
        assert!(!filter.matches(|key| (key == "a").then_some("2")));
        assert!(snapshot.filter("g", "other").is_none());
        assert!(snapshot.filter("other", "t").is_none());
    }

    #[test]
    fn an_empty_snapshot_says_the_group_is_not_online() {
        let snapshot = SubscriptionSnapshot::of(&ClientRegistry::new(true));
        assert!(snapshot.is_empty());
        assert_eq!(
            snapshot.pull_subscription("g", "t", 0, true),
            Err(PullSubscriptionError::GroupNotOnline)
        );
    }
}
