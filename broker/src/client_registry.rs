//! The clients connected to this broker (Java's `ConsumerManager` and
//! `ProducerManager`): consumer groups with their channels and
//! subscriptions, producer groups with their channels, and the commands that
//! read and change them — HEART_BEAT (34), UNREGISTER_CLIENT (35),
//! GET_CONSUMER_LIST_BY_GROUP (38), GET_CONSUMER_CONNECTION_LIST (203),
//! GET_PRODUCER_CONNECTION_LIST (204) — plus channel close and expiry.
//!
//! ```text
//! consumers: group → ConsumerGroup { consume type, message model, consume-from-where,
//!                                    channels:      ChannelId → ClientChannel,
//!                                    subscriptions: topic → SubscriptionData }
//! producers: group → ChannelId → ClientChannel
//! ```
//!
//! A channel is one client connection, named by the [`ChannelId`] the
//! network layer gives it. Side effects come back as values:
//!
//! - [`ControlAction`]s: a heartbeat of an unknown group asks to create the
//!   subscription group and its `%RETRY%` topic. The registry only reads the
//!   control plane (a [`ControlView`] of the snapshots); the owner of the
//!   tables applies the actions ([`ControlAction::apply`]) and registers new
//!   topics with the name servers.
//! - [`Notification`]s: when a group's membership or subscriptions change,
//!   a one-way NOTIFY_CONSUMER_IDS_CHANGED (40) for every channel of the
//!   group, so that the members rebalance at once instead of within 20 s.
//! - Expired channels from [`ClientRegistry::scan`], for the caller to close.
//!
//! # Invariants
//!
//! - A consumer or producer group in the registry has at least one channel;
//!   a group whose last channel goes is removed.
//! - A stored subscription is replaced only by one with a higher
//!   `subVersion` (or removed when the client stops subscribing).
//! - Time is a parameter; nothing here reads a clock.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use ringmq_protocol::code::{LanguageCode, request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{
    CustomHeader, GetConsumerConnectionListRequestHeader, GetConsumerListByGroupRequestHeader,
    GetProducerConnectionListRequestHeader, IS_SUB_CHANGE, IS_SUPPORT_HEART_BEAT_V2,
    NotifyConsumerIdsChangedRequestHeader, UnregisterClientRequestHeader,
};
use ringmq_protocol::json::{
    Connection, ConsumeFromWhere, ConsumeType, ConsumerConnection, ConsumerData,
    GetConsumerListByGroupResponseBody, HeartbeatData, JsonStyle, MessageModel, ProducerConnection,
    ProducerInfo, ProducerTableInfo, SubscriptionData, SubscriptionGroupConfig,
};

use crate::subscription_group::{
    GroupTableChange, SubscriptionGroupSnapshot, SubscriptionGroupTable,
};
use crate::topic_config::{TopicConfigSnapshot, TopicConfigTable, TopicTableChange, retry_topic};

/// A channel silent for longer than this is dropped (`channelExpiredTimeout`).
pub const CHANNEL_EXPIRED_TIMEOUT_MS: i64 = 120_000;

/// How often the caller should run [`ClientRegistry::scan`] (Java: 10 s).
pub const CHANNEL_SCAN_INTERVAL_MS: i64 = 10_000;

/// The network layer's name for one client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChannelId(pub u64);

/// The connection a request arrived on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The connection.
    pub channel: ChannelId,
    /// The client's socket address, `ip:port` (shown by admin commands).
    pub addr: String,
}

/// One client channel registered under a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientChannel {
    /// The connection.
    pub channel: ChannelId,
    /// The client's `clientID` (`ip@instance`).
    pub client_id: String,
    /// The client socket address.
    pub client_addr: String,
    /// The client's language (from the request header).
    pub language: LanguageCode,
    /// The client's version ordinal (from the request header).
    pub version: i32,
    /// Last heartbeat, ms.
    pub last_update_ms: i64,
    /// The heartbeat V2 fingerprint of the last full heartbeat (0 for V1).
    pub heartbeat_fingerprint: i32,
}

impl ClientChannel {
    fn connection(&self) -> Connection {
        Connection {
            client_id: self.client_id.clone(),
            client_addr: self.client_addr.clone(),
            language: self.language.name().to_owned(),
            version: self.version,
        }
    }
}

/// A consumer group's members and subscriptions (Java's `ConsumerGroupInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroup {
    /// How the group consumes, as its last heartbeat said.
    pub consume_type: ConsumeType,
    /// Clustering or broadcasting.
    pub message_model: MessageModel,
    /// Where a new queue starts.
    pub consume_from_where: ConsumeFromWhere,
    channels: BTreeMap<ChannelId, ClientChannel>,
    subscriptions: BTreeMap<String, SubscriptionData>,
    notify_enabled: bool,
    last_update_ms: i64,
}

impl ConsumerGroup {
    fn new(data: &ConsumerData, notify_enabled: bool, now_ms: i64) -> Self {
        Self {
            consume_type: data.consume_type.clone(),
            message_model: data.message_model.clone(),
            consume_from_where: data.consume_from_where.clone(),
            channels: BTreeMap::new(),
            subscriptions: BTreeMap::new(),
            notify_enabled,
            last_update_ms: now_ms,
        }
    }

    /// The client ids of the group's channels.
    pub fn client_ids(&self) -> Vec<String> {
        self.channels
            .values()
            .map(|c| c.client_id.clone())
            .collect()
    }

    /// The group's channels.
    pub fn channels(&self) -> impl Iterator<Item = &ClientChannel> {
        self.channels.values()
    }

    /// The subscription to `topic`.
    pub fn subscription(&self, topic: &str) -> Option<&SubscriptionData> {
        self.subscriptions.get(topic)
    }

    /// All subscriptions, by topic.
    pub fn subscriptions(&self) -> &BTreeMap<String, SubscriptionData> {
        &self.subscriptions
    }

    /// Java's `updateChannel`: adds or refreshes `info`; true when the
    /// channel is new to the group.
    fn update_channel(&mut self, info: ClientChannel, data: &ConsumerData, now_ms: i64) -> bool {
        self.consume_type = data.consume_type.clone();
        self.message_model = data.message_model.clone();
        self.consume_from_where = data.consume_from_where.clone();
        self.last_update_ms = now_ms;
        match self.channels.get_mut(&info.channel) {
            None => {
                self.channels.insert(info.channel, info);
                true
            }
            Some(old) if old.client_id != info.client_id => {
                // Java logs this and takes the new identity.
                *old = info;
                false
            }
            Some(old) => {
                old.last_update_ms = now_ms;
                old.language = info.language;
                old.version = info.version;
                false
            }
        }
    }

    /// Java's `updateSubscription`: new topics are added, a higher
    /// `subVersion` replaces, topics no longer listed are removed. True
    /// when a topic was added or removed (a version bump alone is no change
    /// of membership, as in Java).
    fn update_subscriptions(&mut self, subscriptions: &[SubscriptionData], now_ms: i64) -> bool {
        let mut changed = false;
        for sub in subscriptions {
            match self.subscriptions.get_mut(&sub.topic) {
                None => {
                    self.subscriptions.insert(sub.topic.clone(), sub.clone());
                    changed = true;
                }
                Some(old) if sub.sub_version > old.sub_version => *old = sub.clone(),
                Some(_) => {}
            }
        }
        let listed: BTreeSet<&str> = subscriptions.iter().map(|s| s.topic.as_str()).collect();
        let before = self.subscriptions.len();
        self.subscriptions
            .retain(|topic, _| listed.contains(topic.as_str()));
        changed |= self.subscriptions.len() != before;
        self.last_update_ms = now_ms;
        changed
    }
}

/// Read access to the control plane a heartbeat needs.
#[derive(Debug, Clone, Copy)]
pub struct ControlView<'a> {
    /// The topic snapshot.
    pub topics: &'a TopicConfigSnapshot,
    /// The subscription group snapshot.
    pub groups: &'a SubscriptionGroupSnapshot,
}

/// A control-plane change a heartbeat asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlAction {
    /// Create the subscription group with default settings.
    CreateSubscriptionGroup {
        /// The group.
        group: String,
    },
    /// Create `%RETRY%<group>` with the group's `retryQueueNums`, perm RW.
    CreateRetryTopic {
        /// The group.
        group: String,
        /// The group's `retryQueueNums`.
        retry_queue_nums: i32,
        /// The consumer's `unitMode` (sets the unit-subscription sys flag).
        unit_mode: bool,
    },
}

/// What applying [`ControlAction`]s changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ControlChange {
    /// Topic table change (persist `topics.json`, register the topics).
    pub topics: TopicTableChange,
    /// Group table change (persist `subscriptionGroup.json`).
    pub groups: GroupTableChange,
}

impl ControlAction {
    /// Applies the action on the tables' owner; creating what already exists
    /// changes nothing.
    pub fn apply(
        &self,
        topics: &mut TopicConfigTable,
        groups: &mut SubscriptionGroupTable,
        now_ms: i64,
    ) -> ControlChange {
        match self {
            ControlAction::CreateSubscriptionGroup { group } => ControlChange {
                topics: TopicTableChange::default(),
                groups: groups.find_or_create(group, now_ms).1,
            },
            ControlAction::CreateRetryTopic {
                group,
                retry_queue_nums,
                unit_mode,
            } => ControlChange {
                topics: topics
                    .ensure_retry_topic(group, *retry_queue_nums, *unit_mode, now_ms)
                    .1,
                groups: GroupTableChange::default(),
            },
        }
    }
}

/// A request for the network layer to send to a client channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Where to send it.
    pub channel: ChannelId,
    /// The one-way request (the sender assigns the opaque).
    pub command: RemotingCommand,
}

/// The response to a client command plus its side effects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryOutcome {
    /// The response to write back (dropped by the caller for one-way requests).
    pub response: RemotingCommand,
    /// Control-plane changes to apply.
    pub actions: Vec<ControlAction>,
    /// Requests to send to clients.
    pub notifications: Vec<Notification>,
}

impl RegistryOutcome {
    fn response_only(response: RemotingCommand) -> Self {
        Self {
            response,
            actions: Vec::new(),
            notifications: Vec::new(),
        }
    }
}

/// Channels dropped by [`ClientRegistry::scan`] and the notifications due.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScanOutcome {
    /// Silent channels: close them.
    pub expired_channels: Vec<ChannelId>,
    /// NOTIFY_CONSUMER_IDS_CHANGED to the remaining members of groups that lost one.
    pub notifications: Vec<Notification>,
}

/// Why a pull cannot use the group's registered subscription (reference
/// 2.3.4, when the pull does not carry its own subscription).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullSubscriptionError {
    /// No live consumer of the group has sent a heartbeat.
    GroupNotOnline,
    /// A broadcasting group whose config forbids broadcasting.
    BroadcastNotAllowed,
    /// The group does not subscribe the topic.
    NotExist,
    /// The client knows a newer subscription than the broker.
    NotLatest,
}

impl PullSubscriptionError {
    /// The response code.
    pub fn code(self) -> i32 {
        match self {
            PullSubscriptionError::GroupNotOnline | PullSubscriptionError::NotExist => {
                response_code::SUBSCRIPTION_NOT_EXIST
            }
            PullSubscriptionError::BroadcastNotAllowed => response_code::NO_PERMISSION,
            PullSubscriptionError::NotLatest => response_code::SUBSCRIPTION_NOT_LATEST,
        }
    }

    /// Java's remark.
    pub fn remark(self, group: &str) -> String {
        match self {
            PullSubscriptionError::GroupNotOnline => {
                "the consumer's group info not exist".to_owned()
            }
            PullSubscriptionError::BroadcastNotAllowed => {
                format!("the consumer group[{group}] can not consume by broadcast way")
            }
            PullSubscriptionError::NotExist => "the consumer's subscription not exist".to_owned(),
            PullSubscriptionError::NotLatest => "the consumer's subscription not latest".to_owned(),
        }
    }
}

/// Every consumer and producer this broker knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRegistry {
    consumers: BTreeMap<String, ConsumerGroup>,
    producers: BTreeMap<String, BTreeMap<ChannelId, ClientChannel>>,
    notify_consumer_ids_changed_enable: bool,
    producer_pick: usize,
}

fn notify_command(group: &str) -> RemotingCommand {
    let header = NotifyConsumerIdsChangedRequestHeader {
        consumer_group: group.to_owned(),
    };
    let mut command = RemotingCommand::new_request(
        request_code::NOTIFY_CONSUMER_IDS_CHANGED,
        header.to_ext_fields(),
    );
    command.mark_oneway();
    command
}

fn system_error(opaque: i32, remark: String) -> RemotingCommand {
    RemotingCommand::new_response(response_code::SYSTEM_ERROR, opaque, Some(remark))
}

impl ClientRegistry {
    /// An empty registry; `notify_consumer_ids_changed_enable` is the
    /// broker's switch (default true), each group's config has its own.
    pub fn new(notify_consumer_ids_changed_enable: bool) -> Self {
        Self {
            consumers: BTreeMap::new(),
            producers: BTreeMap::new(),
            notify_consumer_ids_changed_enable,
            producer_pick: 0,
        }
    }

    /// The consumer group `group`, if any channel of it is registered.
    pub fn consumer_group(&self, group: &str) -> Option<&ConsumerGroup> {
        self.consumers.get(group)
    }

    /// Every consumer group with at least one channel, by name.
    pub fn consumer_groups(&self) -> impl Iterator<Item = (&str, &ConsumerGroup)> {
        self.consumers
            .iter()
            .map(|(name, group)| (name.as_str(), group))
    }

    /// Consumer groups subscribing `topic`, sorted.
    pub fn groups_subscribing(&self, topic: &str) -> Vec<&str> {
        self.consumers
            .iter()
            .filter(|(_, info)| info.subscriptions.contains_key(topic))
            .map(|(group, _)| group.as_str())
            .collect()
    }

    /// Whether `group` has producer channels.
    pub fn has_producer_group(&self, group: &str) -> bool {
        self.producers.contains_key(group)
    }

    /// The channel of consumer `client_id` in `group` (to forward
    /// GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY).
    pub fn consumer_channel(&self, group: &str, client_id: &str) -> Option<ChannelId> {
        self.consumers
            .get(group)?
            .channels
            .values()
            .find(|c| c.client_id == client_id)
            .map(|c| c.channel)
    }

    /// Every channel of consumer group `group`, with its client id (to fan
    /// GET_CONSUMER_STATUS_FROM_CLIENT out).
    pub fn consumer_channels(&self, group: &str) -> Vec<(ChannelId, String)> {
        self.consumers.get(group).map_or_else(Vec::new, |info| {
            info.channels
                .values()
                .map(|c| (c.channel, c.client_id.clone()))
                .collect()
        })
    }

    /// A channel of producer group `group`, rotating over its channels on
    /// each call (for transaction check-back).
    pub fn producer_channel(&mut self, group: &str) -> Option<ChannelId> {
        let channels = self.producers.get(group)?;
        let index = self.producer_pick % channels.len();
        self.producer_pick = self.producer_pick.wrapping_add(1);
        channels.keys().nth(index).copied()
    }

    /// A channel of the producer whose `clientID` is `client_id`, in any
    /// group (Java's `ProducerManager.findChannel`, for request-reply).
    pub fn producer_channel_by_client_id(&self, client_id: &str) -> Option<ChannelId> {
        self.producers
            .values()
            .flat_map(|channels| channels.values())
            .find(|channel| channel.client_id == client_id)
            .map(|channel| channel.channel)
    }

    /// The registered subscription a pull of (group, topic) must use, with
    /// Java's checks: the group is online, broadcasting is allowed when the
    /// group broadcasts (`consume_broadcast_enable` from its config), the
    /// topic is subscribed, and the broker's `subVersion` is not older than
    /// the client's.
    ///
    /// # Errors
    ///
    /// The [`PullSubscriptionError`] to answer.
    pub fn pull_subscription(
        &self,
        group: &str,
        topic: &str,
        sub_version: i64,
        consume_broadcast_enable: bool,
    ) -> Result<&SubscriptionData, PullSubscriptionError> {
        let info = self
            .consumers
            .get(group)
            .ok_or(PullSubscriptionError::GroupNotOnline)?;
        if !consume_broadcast_enable && info.message_model == MessageModel::Broadcasting {
            return Err(PullSubscriptionError::BroadcastNotAllowed);
        }
        let subscription = info
            .subscriptions
            .get(topic)
            .ok_or(PullSubscriptionError::NotExist)?;
        if subscription.sub_version < sub_version {
            return Err(PullSubscriptionError::NotLatest);
        }
        Ok(subscription)
    }

    /// Serves HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP,
    /// GET_CONSUMER_CONNECTION_LIST and GET_PRODUCER_CONNECTION_LIST;
    /// `None` for other codes.
    pub fn handle(
        &mut self,
        request: &RemotingCommand,
        peer: &Peer,
        view: ControlView<'_>,
        now_ms: i64,
    ) -> Option<RegistryOutcome> {
        let outcome = match request.code {
            request_code::HEART_BEAT => self.heartbeat(request, peer, view, now_ms),
            request_code::UNREGISTER_CLIENT => self.unregister_client(request, peer, view),
            request_code::GET_CONSUMER_LIST_BY_GROUP => {
                RegistryOutcome::response_only(self.consumer_list_by_group(request))
            }
            request_code::GET_CONSUMER_CONNECTION_LIST => {
                RegistryOutcome::response_only(self.consumer_connection_list(request))
            }
            request_code::GET_PRODUCER_CONNECTION_LIST => {
                RegistryOutcome::response_only(self.producer_connection_list(request))
            }
            _ => return None,
        };
        Some(outcome)
    }

    /// HEART_BEAT (34), reference 2.3.7: registers the consumers (groups
    /// auto-created per the snapshot, `%RETRY%` topics asked for) and the
    /// producers of the body on the request's channel. Answers
    /// `IS_SUPPORT_HEART_BEAT_V2=true` and `IS_SUB_CHANGE` (always true for
    /// V1; for V2 true when a subscription-less heartbeat's fingerprint is
    /// not the one this broker has).
    pub fn heartbeat(
        &mut self,
        request: &RemotingCommand,
        peer: &Peer,
        view: ControlView<'_>,
        now_ms: i64,
    ) -> RegistryOutcome {
        let heartbeat = match HeartbeatData::from_json(request.body_bytes()) {
            Ok(heartbeat) => heartbeat,
            Err(err) => {
                return RegistryOutcome::response_only(system_error(
                    request.opaque,
                    format!("bad HeartbeatData body: {err}"),
                ));
            }
        };
        let info = ClientChannel {
            channel: peer.channel,
            client_id: heartbeat.client_id.clone(),
            client_addr: peer.addr.clone(),
            language: request.language,
            version: request.version,
            last_update_ms: now_ms,
            heartbeat_fingerprint: heartbeat.heartbeat_fingerprint,
        };
        let v2 = heartbeat.heartbeat_fingerprint != 0;
        let mut sub_change = !v2;
        let mut outcome = RegistryOutcome::response_only(RemotingCommand::new_response(
            response_code::SUCCESS,
            request.opaque,
            None,
        ));
        for data in &heartbeat.consumer_data_set {
            // Without a group config (unknown, auto-creation off) Java still
            // registers the consumer, notifying by default; only the retry
            // topic is not created. Pulls then fail with
            // SUBSCRIPTION_GROUP_NOT_EXIST, but the member lists stay the same
            // on every broker, which rebalancing relies on.
            let mut notify = true;
            if let Some(config) = group_config(view, &data.group_name, &mut outcome.actions) {
                notify = config.notify_consumer_ids_changed_enable;
                if !view.topics.contains(&retry_topic(&data.group_name)) {
                    outcome.actions.push(ControlAction::CreateRetryTopic {
                        group: data.group_name.clone(),
                        retry_queue_nums: config.retry_queue_nums,
                        unit_mode: data.unit_mode,
                    });
                }
            }
            let changed = if v2 && heartbeat.without_sub {
                let (changed, fingerprint_known) = self.refresh_consumer(data, &info, now_ms);
                sub_change |= !fingerprint_known;
                changed
            } else {
                self.register_consumer(data, info.clone(), notify, now_ms)
            };
            if changed {
                self.notify_group(&data.group_name, &mut outcome.notifications);
            }
        }
        for producer in &heartbeat.producer_data_set {
            self.producers
                .entry(producer.group_name.clone())
                .or_default()
                .insert(info.channel, info.clone());
        }
        outcome
            .response
            .ext_fields
            .insert(IS_SUPPORT_HEART_BEAT_V2, "true");
        outcome
            .response
            .ext_fields
            .insert(IS_SUB_CHANGE, if sub_change { "true" } else { "false" });
        outcome
    }

    /// Java's `registerConsumer`: true when the membership or the set of
    /// subscribed topics changed.
    fn register_consumer(
        &mut self,
        data: &ConsumerData,
        info: ClientChannel,
        notify_enabled: bool,
        now_ms: i64,
    ) -> bool {
        let group = self
            .consumers
            .entry(data.group_name.clone())
            .or_insert_with(|| ConsumerGroup::new(data, notify_enabled, now_ms));
        group.notify_enabled = notify_enabled;
        let joined = group.update_channel(info, data, now_ms);
        let resubscribed = group.update_subscriptions(&data.subscription_data_set, now_ms);
        joined || resubscribed
    }

    /// A V2 heartbeat without subscriptions: refreshes the channel of a known
    /// group. Returns (membership changed, the channel's fingerprint matched).
    fn refresh_consumer(
        &mut self,
        data: &ConsumerData,
        info: &ClientChannel,
        now_ms: i64,
    ) -> (bool, bool) {
        let Some(group) = self.consumers.get_mut(&data.group_name) else {
            return (false, false);
        };
        let known = group
            .channels
            .get(&info.channel)
            .is_some_and(|c| c.heartbeat_fingerprint == info.heartbeat_fingerprint);
        let mut refreshed = info.clone();
        if let Some(old) = group.channels.get(&info.channel) {
            // Keep the fingerprint of the last full heartbeat.
            refreshed.heartbeat_fingerprint = old.heartbeat_fingerprint;
        }
        let joined = group.update_channel(refreshed, data, now_ms);
        (joined, known)
    }

    /// Appends a NOTIFY_CONSUMER_IDS_CHANGED for every channel of `group`,
    /// if the broker and the group allow it.
    fn notify_group(&self, group: &str, notifications: &mut Vec<Notification>) {
        if !self.notify_consumer_ids_changed_enable {
            return;
        }
        let Some(info) = self.consumers.get(group) else {
            return;
        };
        if !info.notify_enabled {
            return;
        }
        notifications.extend(info.channels.keys().map(|&channel| Notification {
            channel,
            command: notify_command(group),
        }));
    }

    /// Removes `channel` from consumer group `group`; notifies the rest.
    fn unregister_consumer(
        &mut self,
        group: &str,
        channel: ChannelId,
        notifications: &mut Vec<Notification>,
    ) {
        let Some(info) = self.consumers.get_mut(group) else {
            return;
        };
        if info.channels.remove(&channel).is_none() {
            return;
        }
        if info.channels.is_empty() {
            self.consumers.remove(group);
            return;
        }
        self.notify_group(group, notifications);
    }

    fn unregister_producer(&mut self, group: &str, channel: ChannelId) {
        if let Some(channels) = self.producers.get_mut(group) {
            channels.remove(&channel);
            if channels.is_empty() {
                self.producers.remove(group);
            }
        }
    }

    /// UNREGISTER_CLIENT (35), reference 2.3.8: removes the request's channel
    /// from the named producer and consumer groups; the remaining consumers
    /// of the group are notified.
    pub fn unregister_client(
        &mut self,
        request: &RemotingCommand,
        peer: &Peer,
        view: ControlView<'_>,
    ) -> RegistryOutcome {
        let header: UnregisterClientRequestHeader = match request.decode_custom_header() {
            Ok(header) => header,
            Err(err) => {
                return RegistryOutcome::response_only(system_error(
                    request.opaque,
                    err.to_string(),
                ));
            }
        };
        let mut outcome = RegistryOutcome::response_only(RemotingCommand::new_response(
            response_code::SUCCESS,
            request.opaque,
            None,
        ));
        if let Some(group) = &header.producer_group {
            self.unregister_producer(group, peer.channel);
        }
        if let Some(group) = &header.consumer_group {
            if let (Some(info), Some(config)) =
                (self.consumers.get_mut(group), view.groups.get(group))
            {
                info.notify_enabled = config.notify_consumer_ids_changed_enable;
            }
            self.unregister_consumer(group, peer.channel, &mut outcome.notifications);
        }
        outcome
    }

    /// The connection closed: the channel leaves every group; the remaining
    /// members of consumer groups it left are notified.
    pub fn channel_closed(&mut self, channel: ChannelId) -> Vec<Notification> {
        let mut notifications = Vec::new();
        let groups: Vec<String> = self
            .consumers
            .iter()
            .filter(|(_, info)| info.channels.contains_key(&channel))
            .map(|(group, _)| group.clone())
            .collect();
        for group in groups {
            self.unregister_consumer(&group, channel, &mut notifications);
        }
        let producer_groups: Vec<String> = self
            .producers
            .iter()
            .filter(|(_, channels)| channels.contains_key(&channel))
            .map(|(group, _)| group.clone())
            .collect();
        for group in producer_groups {
            self.unregister_producer(&group, channel);
        }
        notifications
    }

    /// Drops channels whose last heartbeat is more than
    /// [`CHANNEL_EXPIRED_TIMEOUT_MS`] before `now_ms` (Java's
    /// `scanNotActiveChannel`), returning them for the caller to close.
    pub fn scan(&mut self, now_ms: i64) -> ScanOutcome {
        let expired = |c: &ClientChannel| {
            now_ms.saturating_sub(c.last_update_ms) > CHANNEL_EXPIRED_TIMEOUT_MS
        };
        let mut stale: BTreeSet<ChannelId> = BTreeSet::new();
        let mut consumer_drops: Vec<(String, ChannelId)> = Vec::new();
        for (group, info) in &self.consumers {
            for channel in info.channels.values().filter(|c| expired(c)) {
                stale.insert(channel.channel);
                consumer_drops.push((group.clone(), channel.channel));
            }
        }
        let mut outcome = ScanOutcome::default();
        let mut notify_groups = BTreeSet::new();
        for (group, channel) in consumer_drops {
            let mut ignored = Vec::new();
            self.unregister_consumer(&group, channel, &mut ignored);
            if self.consumers.contains_key(&group) {
                notify_groups.insert(group);
            }
        }
        for group in notify_groups {
            self.notify_group(&group, &mut outcome.notifications);
        }
        self.producers.retain(|_, channels| {
            channels.retain(|_, c| {
                let dead = expired(c);
                if dead {
                    stale.insert(c.channel);
                }
                !dead
            });
            !channels.is_empty()
        });
        outcome.expired_channels = stale.into_iter().collect();
        outcome
    }

    /// GET_CONSUMER_LIST_BY_GROUP (38): the client ids of the group, or
    /// SYSTEM_ERROR `no consumer for this group, <group>`.
    pub fn consumer_list_by_group(&self, request: &RemotingCommand) -> RemotingCommand {
        let header: GetConsumerListByGroupRequestHeader = match request.decode_custom_header() {
            Ok(header) => header,
            Err(err) => return system_error(request.opaque, err.to_string()),
        };
        let group = header.consumer_group;
        let ids = self
            .consumers
            .get(&group)
            .map(ConsumerGroup::client_ids)
            .unwrap_or_default();
        if ids.is_empty() {
            return system_error(
                request.opaque,
                format!("no consumer for this group, {group}"),
            );
        }
        let mut body = Vec::new();
        GetConsumerListByGroupResponseBody {
            consumer_id_list: ids,
        }
        .to_json(&mut body, JsonStyle::Java);
        RemotingCommand::new_response(response_code::SUCCESS, request.opaque, None)
            .with_body(Bytes::from(body))
    }

    /// GET_CONSUMER_CONNECTION_LIST (203): the group's connections and
    /// subscriptions, or CONSUMER_NOT_ONLINE.
    pub fn consumer_connection_list(&self, request: &RemotingCommand) -> RemotingCommand {
        let header: GetConsumerConnectionListRequestHeader = match request.decode_custom_header() {
            Ok(header) => header,
            Err(err) => return system_error(request.opaque, err.to_string()),
        };
        let group = header.consumer_group;
        let Some(info) = self.consumers.get(&group) else {
            return RemotingCommand::new_response(
                response_code::CONSUMER_NOT_ONLINE,
                request.opaque,
                Some(format!("the consumer group[{group}] not online")),
            );
        };
        let connection = ConsumerConnection {
            connection_set: info
                .channels
                .values()
                .map(ClientChannel::connection)
                .collect(),
            subscription_table: info.subscriptions.clone(),
            consume_type: info.consume_type.clone(),
            message_model: info.message_model.clone(),
            consume_from_where: info.consume_from_where.clone(),
        };
        let mut body = Vec::new();
        connection.to_json(&mut body, JsonStyle::Java);
        RemotingCommand::new_response(response_code::SUCCESS, request.opaque, None)
            .with_body(Bytes::from(body))
    }

    /// GET_PRODUCER_CONNECTION_LIST (204): the group's connections, or
    /// SYSTEM_ERROR `the producer group[g] not exist`.
    pub fn producer_connection_list(&self, request: &RemotingCommand) -> RemotingCommand {
        let header: GetProducerConnectionListRequestHeader = match request.decode_custom_header() {
            Ok(header) => header,
            Err(err) => return system_error(request.opaque, err.to_string()),
        };
        let group = header.producer_group;
        let Some(channels) = self.producers.get(&group) else {
            return system_error(
                request.opaque,
                format!("the producer group[{group}] not exist"),
            );
        };
        let mut body = Vec::new();
        ProducerConnection {
            connection_set: channels.values().map(ClientChannel::connection).collect(),
        }
        .to_json(&mut body, JsonStyle::Java);
        RemotingCommand::new_response(response_code::SUCCESS, request.opaque, None)
            .with_body(Bytes::from(body))
    }

    /// Every producer group's connections (GET_ALL_PRODUCER_INFO, `mqadmin
    /// producer`).
    pub fn producer_table(&self) -> ProducerTableInfo {
        ProducerTableInfo {
            data: self
                .producers
                .iter()
                .map(|(group, channels)| {
                    let producers = channels
                        .values()
                        .map(|c| ProducerInfo {
                            client_id: c.client_id.clone(),
                            remote_ip: c.client_addr.clone(),
                            language: c.language.name().to_owned(),
                            version: c.version,
                            last_update_timestamp: c.last_update_ms,
                        })
                        .collect();
                    (group.clone(), producers)
                })
                .collect(),
        }
    }
}

/// The config of `group` as the snapshot has it, or the default config when
/// the group would be auto-created (then the creation is asked for); `None`
/// when the group is unknown and will not be created.
fn group_config(
    view: ControlView<'_>,
    group: &str,
    actions: &mut Vec<ControlAction>,
) -> Option<SubscriptionGroupConfig> {
    if let Some(config) = view.groups.get(group) {
        return Some(config.clone());
    }
    if !view.groups.would_auto_create(group) {
        return None;
    }
    actions.push(ControlAction::CreateSubscriptionGroup {
        group: group.to_owned(),
    });
    Some(SubscriptionGroupConfig::new(group))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topic_config::TopicConfigSettings;
    use ringmq_protocol::command::ExtFields;
    use ringmq_protocol::json::ProducerData;

    const NOW: i64 = 1_700_000_000_000;

    struct Control {
        topics: TopicConfigTable,
        groups: SubscriptionGroupTable,
    }

    impl Control {
        fn new(auto_create: bool) -> Self {
            Self {
                topics: TopicConfigTable::new(TopicConfigSettings::default(), NOW),
                groups: SubscriptionGroupTable::new(auto_create, NOW),
            }
        }
    }

    fn peer(channel: u64) -> Peer {
        Peer {
            channel: ChannelId(channel),
            addr: format!("10.0.0.{channel}:5000"),
        }
    }

    fn subscription(topic: &str, sub_version: i64) -> SubscriptionData {
        SubscriptionData {
            topic: topic.to_owned(),
            sub_string: "*".to_owned(),
            sub_version,
            ..SubscriptionData::default()
        }
    }

    fn consumer(group: &str, topics: &[(&str, i64)]) -> ConsumerData {
        ConsumerData {
            group_name: group.to_owned(),
            subscription_data_set: topics.iter().map(|&(t, v)| subscription(t, v)).collect(),
            ..ConsumerData::default()
        }
    }

    fn heartbeat_request(
        client_id: &str,
        consumers: Vec<ConsumerData>,
        producers: &[&str],
    ) -> RemotingCommand {
        heartbeat_request_v2(client_id, consumers, producers, 0, false)
    }

    fn heartbeat_request_v2(
        client_id: &str,
        consumers: Vec<ConsumerData>,
        producers: &[&str],
        fingerprint: i32,
        without_sub: bool,
    ) -> RemotingCommand {
        let data = HeartbeatData {
            client_id: client_id.to_owned(),
            producer_data_set: producers
                .iter()
                .map(|&g| ProducerData {
                    group_name: g.to_owned(),
                })
                .collect(),
            consumer_data_set: consumers,
            heartbeat_fingerprint: fingerprint,
            without_sub,
        };
        let mut body = Vec::new();
        data.to_json(&mut body, JsonStyle::Java);
        let mut request = RemotingCommand::new_request(request_code::HEART_BEAT, ExtFields::new())
            .with_body(Bytes::from(body));
        request.language = LanguageCode::Rust;
        request.version = 474;
        request.opaque = 9;
        request
    }

    fn beat(
        registry: &mut ClientRegistry,
        control: &mut Control,
        request: &RemotingCommand,
        channel: u64,
        now: i64,
    ) -> RegistryOutcome {
        let (topics, groups) = (control.topics.snapshot(), control.groups.snapshot());
        let view = ControlView {
            topics: &topics,
            groups: &groups,
        };
        let outcome = registry.handle(request, &peer(channel), view, now).unwrap();
        for action in &outcome.actions {
            action.apply(&mut control.topics, &mut control.groups, now);
        }
        outcome
    }

    fn simple_request(code: i32, key: &str, value: &str) -> RemotingCommand {
        RemotingCommand::new_request(code, [(key, value)].into_iter().collect())
    }

    fn notified(outcome: &[Notification]) -> Vec<u64> {
        outcome.iter().map(|n| n.channel.0).collect()
    }

    #[test]
    fn first_heartbeat_asks_for_group_and_retry_topic_and_answers_v2_keys() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        let request = heartbeat_request(
            "c1",
            vec![consumer("g1", &[("T", 1), ("%RETRY%g1", 1)])],
            &["p1"],
        );
        let outcome = beat(&mut registry, &mut control, &request, 1, NOW);
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert_eq!(outcome.response.opaque, 9);
        assert_eq!(
            outcome.response.ext_fields.get(IS_SUPPORT_HEART_BEAT_V2),
            Some("true")
        );
        assert_eq!(outcome.response.ext_fields.get(IS_SUB_CHANGE), Some("true"));
        assert_eq!(
            outcome.actions,
            vec![
                ControlAction::CreateSubscriptionGroup {
                    group: "g1".to_owned()
                },
                ControlAction::CreateRetryTopic {
                    group: "g1".to_owned(),
                    retry_queue_nums: 1,
                    unit_mode: false
                },
            ]
        );
        assert!(control.groups.get("g1").is_some());
        assert_eq!(control.topics.get("%RETRY%g1").unwrap().write_queue_nums, 1);
        // The first member joined: it is told to rebalance.
        assert_eq!(notified(&outcome.notifications), [1]);
        let command = &outcome.notifications[0].command;
        assert_eq!(command.code, request_code::NOTIFY_CONSUMER_IDS_CHANGED);
        assert!(command.is_oneway());
        assert_eq!(command.ext_fields.get("consumerGroup"), Some("g1"));
        assert!(registry.has_producer_group("p1"));
        // The same heartbeat again: nothing to create, nobody to notify.
        let outcome = beat(&mut registry, &mut control, &request, 1, NOW + 30_000);
        assert!(outcome.actions.is_empty());
        assert!(outcome.notifications.is_empty());
    }

    #[test]
    fn retry_topic_uses_the_group_retry_queue_nums() {
        let mut control = Control::new(true);
        let mut body = Vec::new();
        SubscriptionGroupConfig {
            retry_queue_nums: 3,
            ..SubscriptionGroupConfig::new("g3")
        }
        .to_json(&mut body, JsonStyle::Java);
        control.groups.update_and_create(
            &RemotingCommand::new_request(
                request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                ExtFields::new(),
            )
            .with_body(Bytes::from(body)),
            NOW,
        );
        let mut registry = ClientRegistry::new(true);
        let outcome = beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c", vec![consumer("g3", &[("T", 1)])], &[]),
            1,
            NOW,
        );
        assert_eq!(
            outcome.actions,
            vec![ControlAction::CreateRetryTopic {
                group: "g3".to_owned(),
                retry_queue_nums: 3,
                unit_mode: false
            }]
        );
        assert_eq!(control.topics.get("%RETRY%g3").unwrap().read_queue_nums, 3);
    }

    #[test]
    fn unknown_groups_register_without_creation_when_auto_creation_is_off() {
        let mut control = Control::new(false);
        let mut registry = ClientRegistry::new(true);
        let outcome = beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c", vec![consumer("g", &[("T", 1)])], &[]),
            1,
            NOW,
        );
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert!(outcome.actions.is_empty());
        assert!(control.groups.get("g").is_none());
        assert!(control.topics.get("%RETRY%g").is_none());
        assert_eq!(registry.consumer_group("g").unwrap().client_ids(), ["c"]);
        assert_eq!(notified(&outcome.notifications), [1]);
    }

    #[test]
    fn a_new_member_notifies_every_member_of_the_group() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![consumer("g", &[("T", 1)])], &[]),
            1,
            NOW,
        );
        let outcome = beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c2", vec![consumer("g", &[("T", 1)])], &[]),
            2,
            NOW,
        );
        assert_eq!(notified(&outcome.notifications), [1, 2]);
        let info = registry.consumer_group("g").unwrap();
        assert_eq!(info.client_ids(), ["c1", "c2"]);
        let channel = info.channels().next().unwrap();
        assert_eq!(channel.language, LanguageCode::Rust);
        assert_eq!(channel.version, 474);
        assert_eq!(channel.client_addr, "10.0.0.1:5000");
    }

    #[test]
    fn notifications_respect_the_broker_and_group_switches() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(false);
        let outcome = beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![consumer("g", &[("T", 1)])], &[]),
            1,
            NOW,
        );
        assert!(outcome.notifications.is_empty());
        let mut body = Vec::new();
        SubscriptionGroupConfig {
            notify_consumer_ids_changed_enable: false,
            ..SubscriptionGroupConfig::new("quiet")
        }
        .to_json(&mut body, JsonStyle::Java);
        control.groups.update_and_create(
            &RemotingCommand::new_request(
                request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                ExtFields::new(),
            )
            .with_body(Bytes::from(body)),
            NOW,
        );
        let mut registry = ClientRegistry::new(true);
        let outcome = beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![consumer("quiet", &[("T", 1)])], &[]),
            1,
            NOW,
        );
        assert!(outcome.notifications.is_empty());
    }

    #[test]
    fn subscriptions_follow_sub_version_rules_and_topic_changes_notify() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![consumer("g", &[("A", 10)])], &[]),
            1,
            NOW,
        );
        // An older subVersion does not replace; no notification.
        let mut old = consumer("g", &[("A", 5)]);
        old.subscription_data_set[0].sub_string = "old".to_owned();
        let outcome = beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![old], &[]),
            1,
            NOW,
        );
        assert!(outcome.notifications.is_empty());
        assert_eq!(
            registry
                .consumer_group("g")
                .unwrap()
                .subscription("A")
                .unwrap()
                .sub_version,
            10
        );
        // A newer one replaces, still without notification (Java).
        let outcome = beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![consumer("g", &[("A", 20)])], &[]),
            1,
            NOW,
        );
        assert!(outcome.notifications.is_empty());
        assert_eq!(
            registry
                .consumer_group("g")
                .unwrap()
                .subscription("A")
                .unwrap()
                .sub_version,
            20
        );
        // Adding B and dropping A are membership changes.
        let outcome = beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![consumer("g", &[("B", 1)])], &[]),
            1,
            NOW,
        );
        assert_eq!(notified(&outcome.notifications), [1]);
        let info = registry.consumer_group("g").unwrap();
        assert!(info.subscription("A").is_none());
        assert!(info.subscription("B").is_some());
        assert_eq!(registry.groups_subscribing("B"), ["g"]);
    }

    #[test]
    fn pull_subscription_decisions_match_java() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        assert_eq!(
            registry.pull_subscription("g", "T", 0, true).unwrap_err(),
            PullSubscriptionError::GroupNotOnline
        );
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![consumer("g", &[("T", 100)])], &[]),
            1,
            NOW,
        );
        assert_eq!(
            registry
                .pull_subscription("g", "T", 100, true)
                .unwrap()
                .sub_version,
            100
        );
        assert!(registry.pull_subscription("g", "T", 0, true).is_ok());
        let err = registry.pull_subscription("g", "T", 101, true).unwrap_err();
        assert_eq!(err, PullSubscriptionError::NotLatest);
        assert_eq!(err.code(), response_code::SUBSCRIPTION_NOT_LATEST);
        let err = registry
            .pull_subscription("g", "Other", 0, true)
            .unwrap_err();
        assert_eq!(err.code(), response_code::SUBSCRIPTION_NOT_EXIST);
        assert_eq!(err.remark("g"), "the consumer's subscription not exist");
        let mut broadcast = consumer("b", &[("T", 1)]);
        broadcast.message_model = MessageModel::Broadcasting;
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![broadcast], &[]),
            1,
            NOW,
        );
        let err = registry.pull_subscription("b", "T", 0, false).unwrap_err();
        assert_eq!(err.code(), response_code::NO_PERMISSION);
        assert_eq!(
            err.remark("b"),
            "the consumer group[b] can not consume by broadcast way"
        );
        assert!(registry.pull_subscription("b", "T", 0, true).is_ok());
    }

    #[test]
    fn heartbeat_v2_without_subscriptions_asks_for_a_full_one_when_the_fingerprint_is_new() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        // A full V2 heartbeat: no IS_SUB_CHANGE needed.
        let full = heartbeat_request_v2("c1", vec![consumer("g", &[("T", 1)])], &[], 77, false);
        let outcome = beat(&mut registry, &mut control, &full, 1, NOW);
        assert_eq!(
            outcome.response.ext_fields.get(IS_SUB_CHANGE),
            Some("false")
        );
        // Same fingerprint, no subscriptions: subscriptions are kept.
        let lite = heartbeat_request_v2("c1", vec![consumer("g", &[])], &[], 77, true);
        let outcome = beat(&mut registry, &mut control, &lite, 1, NOW + 30_000);
        assert_eq!(
            outcome.response.ext_fields.get(IS_SUB_CHANGE),
            Some("false")
        );
        assert!(
            registry
                .consumer_group("g")
                .unwrap()
                .subscription("T")
                .is_some()
        );
        // A new fingerprint: the client must send everything.
        let changed = heartbeat_request_v2("c1", vec![consumer("g", &[])], &[], 78, true);
        let outcome = beat(&mut registry, &mut control, &changed, 1, NOW + 60_000);
        assert_eq!(outcome.response.ext_fields.get(IS_SUB_CHANGE), Some("true"));
        assert!(
            registry
                .consumer_group("g")
                .unwrap()
                .subscription("T")
                .is_some()
        );
        // Unknown group: also a full heartbeat needed, nothing registered.
        let unknown = heartbeat_request_v2("c1", vec![consumer("h", &[])], &[], 5, true);
        let outcome = beat(&mut registry, &mut control, &unknown, 1, NOW);
        assert_eq!(outcome.response.ext_fields.get(IS_SUB_CHANGE), Some("true"));
        assert!(registry.consumer_group("h").is_none());
    }

    #[test]
    fn bad_heartbeat_bodies_are_system_errors() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        let request = RemotingCommand::new_request(request_code::HEART_BEAT, ExtFields::new())
            .with_body(Bytes::from_static(b"{\"clientID\":"));
        let outcome = beat(&mut registry, &mut control, &request, 1, NOW);
        assert_eq!(outcome.response.code, response_code::SYSTEM_ERROR);
    }

    #[test]
    fn unregister_client_removes_the_channel_and_notifies_the_rest() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![consumer("g", &[("T", 1)])], &["p"]),
            1,
            NOW,
        );
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c2", vec![consumer("g", &[("T", 1)])], &[]),
            2,
            NOW,
        );
        let request = RemotingCommand::new_request(
            request_code::UNREGISTER_CLIENT,
            UnregisterClientRequestHeader {
                client_id: "c1".to_owned(),
                producer_group: Some("p".to_owned()),
                consumer_group: Some("g".to_owned()),
            }
            .to_ext_fields(),
        );
        let outcome = beat(&mut registry, &mut control, &request, 1, NOW);
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert_eq!(notified(&outcome.notifications), [2]);
        assert_eq!(registry.consumer_group("g").unwrap().client_ids(), ["c2"]);
        assert!(!registry.has_producer_group("p"));
        // The last member leaving removes the group; nobody to notify.
        let last = RemotingCommand::new_request(
            request_code::UNREGISTER_CLIENT,
            UnregisterClientRequestHeader {
                client_id: "c2".to_owned(),
                producer_group: None,
                consumer_group: Some("g".to_owned()),
            }
            .to_ext_fields(),
        );
        let outcome = beat(&mut registry, &mut control, &last, 2, NOW);
        assert!(outcome.notifications.is_empty());
        assert!(registry.consumer_group("g").is_none());
    }

    #[test]
    fn closed_channels_leave_every_group() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        let both = vec![consumer("g", &[("T", 1)]), consumer("h", &[("T", 1)])];
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", both, &["p"]),
            1,
            NOW,
        );
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c2", vec![consumer("g", &[("T", 1)])], &[]),
            2,
            NOW,
        );
        let notifications = registry.channel_closed(ChannelId(1));
        assert_eq!(notified(&notifications), [2]);
        assert!(registry.consumer_group("h").is_none());
        assert!(!registry.has_producer_group("p"));
        assert_eq!(registry.consumer_group("g").unwrap().client_ids(), ["c2"]);
    }

    #[test]
    fn scan_expires_channels_silent_for_more_than_120_seconds() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![consumer("g", &[("T", 1)])], &["p"]),
            1,
            NOW,
        );
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c2", vec![consumer("g", &[("T", 1)])], &[]),
            2,
            NOW + 60_000,
        );
        let outcome = registry.scan(NOW + 120_000);
        assert!(outcome.expired_channels.is_empty());
        let outcome = registry.scan(NOW + 120_001);
        assert_eq!(outcome.expired_channels, vec![ChannelId(1)]);
        assert_eq!(notified(&outcome.notifications), [2]);
        assert!(!registry.has_producer_group("p"));
        let outcome = registry.scan(NOW + 180_001);
        assert_eq!(outcome.expired_channels, vec![ChannelId(2)]);
        assert!(outcome.notifications.is_empty());
        assert!(registry.consumer_group("g").is_none());
    }

    #[test]
    fn consumer_list_by_group_answers_ids_or_system_error() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        let request = simple_request(
            request_code::GET_CONSUMER_LIST_BY_GROUP,
            "consumerGroup",
            "g",
        );
        let response = registry.consumer_list_by_group(&request);
        assert_eq!(response.code, response_code::SYSTEM_ERROR);
        assert_eq!(
            response.remark.as_deref(),
            Some("no consumer for this group, g")
        );
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("10.0.0.1@1", vec![consumer("g", &[("T", 1)])], &[]),
            1,
            NOW,
        );
        let response = registry.consumer_list_by_group(&request);
        assert_eq!(response.code, response_code::SUCCESS);
        assert_eq!(
            String::from_utf8(response.body_bytes().to_vec()).unwrap(),
            r#"{"consumerIdList":["10.0.0.1@1"]}"#
        );
    }

    #[test]
    fn connection_lists_describe_consumers_and_producers() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        let request = simple_request(
            request_code::GET_CONSUMER_CONNECTION_LIST,
            "consumerGroup",
            "g",
        );
        let response = registry.consumer_connection_list(&request);
        assert_eq!(response.code, response_code::CONSUMER_NOT_ONLINE);
        assert_eq!(
            response.remark.as_deref(),
            Some("the consumer group[g] not online")
        );
        let producers = simple_request(
            request_code::GET_PRODUCER_CONNECTION_LIST,
            "producerGroup",
            "p",
        );
        let response = registry.producer_connection_list(&producers);
        assert_eq!(response.code, response_code::SYSTEM_ERROR);
        assert_eq!(
            response.remark.as_deref(),
            Some("the producer group[p] not exist")
        );
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![consumer("g", &[("T", 1)])], &["p"]),
            1,
            NOW,
        );
        let response = registry.consumer_connection_list(&request);
        assert_eq!(response.code, response_code::SUCCESS);
        let body = ConsumerConnection::from_json(response.body_bytes()).unwrap();
        assert_eq!(body.connection_set.len(), 1);
        assert_eq!(body.connection_set[0].client_id, "c1");
        assert_eq!(body.connection_set[0].client_addr, "10.0.0.1:5000");
        assert_eq!(body.connection_set[0].language, "RUST");
        assert_eq!(body.connection_set[0].version, 474);
        assert_eq!(body.subscription_table["T"].sub_version, 1);
        assert_eq!(body.consume_type, ConsumeType::ConsumePassively);
        let response = registry.producer_connection_list(&producers);
        assert_eq!(response.code, response_code::SUCCESS);
        let body = ProducerConnection::from_json(response.body_bytes()).unwrap();
        assert_eq!(body.connection_set[0].client_id, "c1");
        let table = registry.producer_table();
        assert_eq!(table.data.keys().collect::<Vec<_>>(), ["p"]);
        let producer = &table.data["p"][0];
        assert_eq!(
            (producer.client_id.as_str(), producer.remote_ip.as_str()),
            ("c1", "10.0.0.1:5000")
        );
        assert_eq!(
            (producer.language.as_str(), producer.version),
            ("RUST", 474)
        );
        assert_eq!(producer.last_update_timestamp, NOW);
    }

    #[test]
    fn producer_channels_rotate_and_consumer_channels_are_found_by_client_id() {
        let mut control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        assert_eq!(registry.producer_channel("p"), None);
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c1", vec![consumer("g", &[("T", 1)])], &["p"]),
            1,
            NOW,
        );
        beat(
            &mut registry,
            &mut control,
            &heartbeat_request("c2", vec![], &["p"]),
            2,
            NOW,
        );
        let picks: BTreeSet<u64> = (0..4)
            .filter_map(|_| registry.producer_channel("p"))
            .map(|c| c.0)
            .collect();
        assert_eq!(picks, BTreeSet::from([1, 2]));
        assert_eq!(registry.consumer_channel("g", "c1"), Some(ChannelId(1)));
        assert_eq!(registry.consumer_channel("g", "c9"), None);
    }

    #[test]
    fn handle_ignores_codes_it_does_not_own() {
        let control = Control::new(true);
        let mut registry = ClientRegistry::new(true);
        let (topics, groups) = (control.topics.snapshot(), control.groups.snapshot());
        let view = ControlView {
            topics: &topics,
            groups: &groups,
        };
        let request = RemotingCommand::new_request(request_code::PULL_MESSAGE, ExtFields::new());
        assert_eq!(registry.handle(&request, &peer(1), view, NOW), None);
    }

    /// xorshift64: a tiny seeded generator, so a failure replays exactly.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    fn seeds() -> Vec<u64> {
        match std::env::var("RINGMQ_TEST_SEED") {
            Ok(seed) => vec![seed.parse().expect("RINGMQ_TEST_SEED is a u64")],
            Err(_) => (1..=10).map(|i| 0x2545_F491_4F6C_DD1D ^ i).collect(),
        }
    }

    type Model = BTreeMap<String, BTreeMap<u64, i64>>;

    /// Checks the notifications of one step against the model's membership
    /// before and after: a group whose members changed and that still has
    /// members notifies exactly its members; any other group notifies nobody.
    fn check_notifications(
        before: &Model,
        after: &Model,
        notifications: &[Notification],
        context: &str,
    ) {
        let mut sent: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for n in notifications {
            let group = n
                .command
                .ext_fields
                .get("consumerGroup")
                .unwrap()
                .to_owned();
            assert!(
                sent.entry(group).or_default().insert(n.channel.0),
                "{context}: duplicate"
            );
        }
        let members = |model: &Model, g: &str| -> BTreeSet<u64> {
            model
                .get(g)
                .map(|m| m.keys().copied().collect())
                .unwrap_or_default()
        };
        for group in ["g0", "g1", "g2"] {
            let (old, new) = (members(before, group), members(after, group));
            let expected = if old != new { new } else { BTreeSet::new() };
            assert_eq!(
                sent.remove(group).unwrap_or_default(),
                expected,
                "{context}: {group}"
            );
        }
    }

    #[test]
    fn random_client_traffic_keeps_groups_equal_to_a_model() {
        for seed in seeds() {
            let mut rng = Rng(seed);
            let mut control = Control::new(true);
            let mut registry = ClientRegistry::new(true);
            let mut model: Model = BTreeMap::new();
            let mut now = NOW;
            for step in 0..600 {
                now += i64::try_from(rng.below(30_000)).unwrap();
                let channel = rng.below(4);
                let context = format!("seed {seed} step {step} (RINGMQ_TEST_SEED={seed} replays)");
                let before = model.clone();
                let notifications = match rng.below(6) {
                    0..=2 => {
                        let groups: Vec<String> = (0..3)
                            .filter(|_| rng.below(2) == 0)
                            .map(|g| format!("g{g}"))
                            .collect();
                        let data = groups.iter().map(|g| consumer(g, &[("T", 1)])).collect();
                        let request = heartbeat_request(&format!("c{channel}"), data, &[]);
                        for g in &groups {
                            model.entry(g.clone()).or_default().insert(channel, now);
                        }
                        beat(&mut registry, &mut control, &request, channel, now).notifications
                    }
                    3 => {
                        let group = format!("g{}", rng.below(3));
                        let request = RemotingCommand::new_request(
                            request_code::UNREGISTER_CLIENT,
                            UnregisterClientRequestHeader {
                                client_id: format!("c{channel}"),
                                producer_group: None,
                                consumer_group: Some(group.clone()),
                            }
                            .to_ext_fields(),
                        );
                        if let Some(members) = model.get_mut(&group) {
                            members.remove(&channel);
                        }
                        beat(&mut registry, &mut control, &request, channel, now).notifications
                    }
                    4 => {
                        for members in model.values_mut() {
                            members.remove(&channel);
                        }
                        registry.channel_closed(ChannelId(channel))
                    }
                    _ => {
                        for members in model.values_mut() {
                            members.retain(|_, last| now - *last <= CHANNEL_EXPIRED_TIMEOUT_MS);
                        }
                        registry.scan(now).notifications
                    }
                };
                model.retain(|_, members| !members.is_empty());
                check_notifications(&before, &model, &notifications, &context);
                for group in ["g0", "g1", "g2"] {
                    let actual: BTreeSet<String> = registry
                        .consumer_group(group)
                        .map(|info| info.client_ids().into_iter().collect())
                        .unwrap_or_default();
                    let expected: BTreeSet<String> = model
                        .get(group)
                        .map(|m| m.keys().map(|c| format!("c{c}")).collect())
                        .unwrap_or_default();
                    assert_eq!(actual, expected, "{context}: {group}");
                    if let Some(info) = registry.consumer_group(group) {
                        assert!(
                            info.channels().next().is_some(),
                            "{context}: empty group kept"
                        );
                    }
                }
            }
        }
    }
}
