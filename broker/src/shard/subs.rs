//! The consumer subscriptions the pull path needs, as an immutable snapshot
//! that shard 0 (owner of the client registry) publishes to every shard
//! whenever they change.
//!
//! # Invariants
//! - A snapshot equals the registry's groups at the moment it was taken
//!   ([`SubscriptionSnapshot::of`]); shard 0 publishes a new one only when
//!   it differs from the last.

use std::collections::BTreeMap;

use ringmq_protocol::json::{MessageModel, SubscriptionData};

use crate::client_registry::{ClientRegistry, PullSubscriptionError};

/// One consumer group's model and subscriptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSubscriptions {
    /// Clustering or broadcasting.
    pub message_model: MessageModel,
    /// Topic → subscription.
    pub topics: BTreeMap<String, SubscriptionData>,
}

/// Every online consumer group's subscriptions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscriptionSnapshot {
    groups: BTreeMap<String, GroupSubscriptions>,
}

impl SubscriptionSnapshot {
    /// The registry's current subscriptions.
    pub fn of(registry: &ClientRegistry) -> Self {
        SubscriptionSnapshot {
            groups: registry
                .consumer_groups()
                .map(|(name, group)| {
                    (
                        name.to_owned(),
                        GroupSubscriptions {
                            message_model: group.message_model.clone(),
                            topics: group.subscriptions().clone(),
                        },
                    )
                })
                .collect(),
        }
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
    fn an_empty_snapshot_says_the_group_is_not_online() {
        let snapshot = SubscriptionSnapshot::of(&ClientRegistry::new(true));
        assert!(snapshot.is_empty());
        assert_eq!(
            snapshot.pull_subscription("g", "t", 0, true),
            Err(PullSubscriptionError::GroupNotOnline)
        );
    }
}
