//! The control plane, owned by shard 0: topic configs, subscription groups,
//! the client registry and queue locks. Every change is published to the
//! other shards as a new `Arc` snapshot (through their inboxes, ahead of any
//! request forwarded after it), handed to the registrar (topics) and to the
//! persister (`topics.json`, `subscriptionGroup.json`).
//!
//! ```text
//!  HEART_BEAT ─▶ registry ─▶ actions (create group, %RETRY% topic) ─▶ tables ─▶ publish
//!                         └▶ notifications (NOTIFY_CONSUMER_IDS_CHANGED) ─▶ the members' shards
//!  connection closed (any shard) ─▶ Closed ─▶ registry ─▶ notifications, new subscriptions
//!  END_TRANSACTION, check-back tick ─▶ super::transaction (half and op queues are shard 0's)
//!  SEND_REPLY_MESSAGE(_V2) ─▶ super::reply (the requester's channel is in the registry)
//!  CHECK_CLIENT_CONFIG ─▶ features::sql92::check_subscription (enablePropertyFilter)
//! ```
//!
//! # Invariants
//! - Shard 0's own snapshots are replaced in the same call that changes a
//!   table, so a request shard 0 executes next sees the change.
//! - A request that changed `topics.json` or `subscriptionGroup.json` is
//!   answered only once the persister has written the change (or failed to:
//!   then with SYSTEM_ERROR naming the error), as Java's managers persist
//!   before they answer; an acknowledged topic survives a kill -9 that
//!   follows the answer. File I/O stays off the shard: the answer waits in
//!   [`ControlPlane`]'s list, and the persister wakes the ring after each
//!   batch.
//! - The other shards and the name servers see a topic change only once
//!   `topics.json` holds it (or its write failed: then the topic exists and
//!   the write is retried). Until then they do not know a new topic and
//!   forward its sends to shard 0, which holds every send of a topic not
//!   yet shown (the one that created it too) and goes on with them after
//!   the snapshot went out, so no message is acknowledged in a topic a crash
//!   would forget, and the snapshot still reaches a queue's owner ahead of
//!   the sends forwarded to it.
//! - A request that created or updated a topic (a send that auto-created
//!   it, UPDATE_AND_CREATE_TOPIC, UPDATE_AND_CREATE_TOPIC_LIST) is answered
//!   only once the registrar has offered the snapshot holding it to every
//!   name server, as Java's broker registers before it answers: a client
//!   that asks a name server for the route right after the answer finds
//!   it. So are shard 0's further sends of that topic until then (they
//!   keep their order). A name server that does not answer holds them for
//!   at most its timeout; [`REGISTRATION_HOLD_MAX_MS`] bounds the wait if
//!   the registrar itself is stuck.
//! - A subscription snapshot is published only when it differs from the
//!   last one published.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{
    GetBrokerConfigResponseHeader, QuerySubscriptionByConsumerRequestHeader,
    SendMessageRequestHeader,
};
use ringmq_protocol::json::{DataVersion, JsonStyle, QuerySubscriptionResponseBody, TopicList};

use super::link::{Request, ShardMsg};
use super::runtime::RegistrarLink;
use super::subs::SubscriptionSnapshot;
use super::{ShardHandler, json_success, response, success};
use crate::client_registry::{
    CHANNEL_SCAN_INTERVAL_MS, ChannelId, ClientRegistry, ControlView, Notification, Peer,
};
use crate::persist::{ConfigFile, PersisterHandle, TicketState, WriteTicket};
use crate::queue_lock::QueueLockTable;
use crate::runtime_info::{RuntimeStats, runtime_info_body};
use crate::server::ConnectionId;
use crate::subscription_group::{GroupTableChange, SubscriptionGroupTable};
use crate::topic_config::{TopicConfigSnapshot, TopicConfigTable, TopicTableChange};

/// A GET_BROKER_RUNTIME_INFO waiting for the other shards.
#[derive(Debug)]
pub(crate) struct RuntimeQuery {
    reply: super::link::ReplyTo,
    merged: RuntimeStats,
    missing: u16,
}

/// Work held until the config files a request changed are on disk.
#[derive(Debug)]
pub(crate) struct AwaitingPersist {
    tickets: Vec<WriteTicket>,
    then: AfterPersist,
}

/// What is done once an [`AwaitingPersist`]'s tickets are settled.
#[derive(Debug)]
pub(crate) enum AfterPersist {
    /// Answer a control request.
    Answer {
        reply: super::link::ReplyTo,
        answer: RemotingCommand,
    },
    /// Answer a request that created or updated topics, once the name
    /// servers have been offered them (see the module invariants).
    AnswerOnceRouted {
        reply: super::link::ReplyTo,
        answer: RemotingCommand,
    },
    /// Go on with a send whose topic was just created.
    Dispatch(Box<Request>),
    /// Show a topic change to the other shards and the registrar.
    ShowTopics {
        snapshot: Arc<TopicConfigSnapshot>,
        deleted: Vec<String>,
        registered: Vec<String>,
    },
}

/// Work held until the registrar has offered topic snapshot `number` to
/// the name servers (or `deadline_ms` passed).
#[derive(Debug)]
struct AwaitingRegistration {
    number: u64,
    deadline_ms: i64,
    /// An [`AfterPersist::Answer`] or [`AfterPersist::Dispatch`].
    then: AfterPersist,
}

/// The longest an answer waits for the registrar: one name server's connect
/// and answer timeouts (the registrar offers a snapshot to the name servers
/// one after the other, so with several that are all down, answers go out
/// before the last was tried). Only a stuck registrar makes it matter.
pub const REGISTRATION_HOLD_MAX_MS: i64 = 6_000;

/// How often expired queue locks are dropped.
pub const LOCK_SCAN_INTERVAL_MS: i64 = 10_000;

/// Shard 0's tables.
#[derive(Debug)]
pub struct ControlPlane {
    /// Topic configs.
    pub topics: TopicConfigTable,
    /// Subscription groups.
    pub groups: SubscriptionGroupTable,
    /// Producers and consumers.
    pub clients: ClientRegistry,
    /// Orderly consumers' queue locks.
    pub locks: QueueLockTable,
    registrar: Option<RegistrarLink>,
    /// The keys UPDATE_BROKER_CONFIG changed (since the store was created),
    /// as `brokerConfigUpdates.properties` keeps them.
    config_updates: BTreeMap<String, String>,
    /// Transaction check-back state, created on first use.
    pub(crate) txn: Option<super::transaction::TxnState>,
    last_client_scan_ms: i64,
    last_lock_scan_ms: i64,
    /// Answers, sends and topic snapshots waiting for the persister, in
    /// the order they came (see the module invariants).
    awaiting_persist: Vec<AwaitingPersist>,
    /// Topics created or updated whose snapshot is not shown yet, with the
    /// ticket it waits for.
    unshown_topics: HashMap<String, WriteTicket>,
    /// Topics created or updated whose snapshot the registrar has not
    /// offered to the name servers yet, with the snapshot's number.
    unrouted_topics: HashMap<String, u64>,
    /// Answers and sends waiting for the registrar, in the order they came.
    awaiting_registration: Vec<AwaitingRegistration>,
    /// The tables' versions as loaded at the start: a table still at its
    /// version is what its file holds (or, with no file, what the next
    /// start builds again), so the shutdown need not write it.
    loaded_versions: (DataVersion, DataVersion),
}

impl ControlPlane {
    /// The control plane over loaded tables; `registrar` receives every new
    /// topic snapshot and `brokerPermission` change (to register with the
    /// name servers at once); `config_updates` are the keys
    /// UPDATE_BROKER_CONFIG changed before this start.
    pub fn new(
        topics: TopicConfigTable,
        groups: SubscriptionGroupTable,
        clients: ClientRegistry,
        registrar: Option<RegistrarLink>,
        config_updates: BTreeMap<String, String>,
        now_ms: i64,
    ) -> Self {
        let loaded_versions = (topics.data_version(), groups.data_version());
        ControlPlane {
            topics,
            groups,
            clients,
            locks: QueueLockTable::new(),
            registrar,
            config_updates,
            txn: None,
            last_client_scan_ms: now_ms,
            last_lock_scan_ms: now_ms,
            awaiting_persist: Vec::new(),
            unshown_topics: HashMap::new(),
            unrouted_topics: HashMap::new(),
            awaiting_registration: Vec::new(),
            loaded_versions,
        }
    }

    /// Hands the config files of the tables changed since the start to the
    /// persister (the shutdown: a stop on a full disk with nothing changed
    /// writes nothing).
    pub fn persist_all(&self, persister: &PersisterHandle) {
        if self.topics.data_version() != self.loaded_versions.0 {
            persister.write(ConfigFile::Topics, self.topics.encode_file());
        }
        if self.groups.data_version() != self.loaded_versions.1 {
            persister.write(ConfigFile::SubscriptionGroups, self.groups.encode_file());
        }
    }
}

/// CHECK_CLIENT_CONFIG (46), as Java's `ClientManageProcessor.checkClientConfig`:
/// the body's `subscriptionData` must be a tag subscription, or a filter the
/// broker accepts ([`crate::features::sql92::check_subscription`]).
fn check_client_config(cmd: &RemotingCommand, enable_property_filter: bool) -> RemotingCommand {
    use ringmq_protocol::json::{JsonBean, JsonValue, SubscriptionData};
    let body = cmd.body_bytes();
    let subscription = match ringmq_protocol::json::parse(body) {
        Ok(JsonValue::Object(object)) => match object.get("subscriptionData") {
            Some(value @ JsonValue::Object(_)) => {
                match SubscriptionData::read_json(value, "subscriptionData") {
                    Ok(data) => Some(data),
                    Err(error) => return response(response_code::SYSTEM_ERROR, error.to_string()),
                }
            }
            _ => None,
        },
        Ok(_) | Err(_) if body.is_empty() => None,
        Ok(_) => None,
        Err(error) => return response(response_code::SYSTEM_ERROR, error.to_string()),
    };
    let Some(data) = subscription else {
        return super::success();
    };
    match crate::features::sql92::check_subscription(
        Some(data.expression_type.as_str()),
        &data.sub_string,
        enable_property_filter,
    ) {
        Ok(_) => super::success(),
        Err(refusal) => response(refusal.code, refusal.remark),
    }
}

/// The answer to a change whose config file could not be written.
fn persist_failed(failure: &str) -> RemotingCommand {
    response(
        response_code::SYSTEM_ERROR,
        format!(
            "the change is in effect but not on disk (it is retried; a restart before that \
             undoes it): {failure}"
        ),
    )
}

fn peer_of(request: &Request) -> Peer {
    Peer {
        channel: ChannelId(request.reply.conn.0),
        addr: request.peer.to_string(),
    }
}

impl ShardHandler {
    pub(crate) fn control(&mut self) -> &mut ControlPlane {
        self.control
            .as_mut()
            .expect("control requests are routed to shard 0")
    }

    /// Publishes the tables after a change: shard 0 uses the new snapshot
    /// at once, the other shards and the registrar once `topics.json` is
    /// written (see the module invariants). Returns the write's ticket
    /// (None when nothing changed or nothing persists).
    pub(crate) fn publish_topics(&mut self, change: &TopicTableChange) -> Option<WriteTicket> {
        if change.is_empty() {
            return None;
        }
        let snapshot = self.control().topics.snapshot();
        self.topics = snapshot.clone();
        for topic in &change.deleted {
            self.forget_deleted_topic(topic);
        }
        let registered: Vec<String> = change
            .registered
            .iter()
            .map(|config| config.topic_name.clone())
            .collect();
        let Some(persister) = self.persister.clone() else {
            self.show_topics(snapshot, &change.deleted, &registered);
            return None;
        };
        let ticket = persister.write(ConfigFile::Topics, self.control().topics.encode_file());
        let control = self.control();
        for config in &change.registered {
            control
                .unshown_topics
                .insert(config.topic_name.clone(), ticket);
        }
        control.awaiting_persist.push(AwaitingPersist {
            tickets: vec![ticket],
            then: AfterPersist::ShowTopics {
                snapshot,
                deleted: change.deleted.clone(),
                registered,
            },
        });
        Some(ticket)
    }

    /// Sends a topic snapshot (and the deletions) to the other shards and
    /// the registrar; the `registered` topics' sends on this shard wait for
    /// the registrar from here on.
    fn show_topics(
        &mut self,
        snapshot: Arc<TopicConfigSnapshot>,
        deleted: &[String],
        registered: &[String],
    ) {
        if let Some(links) = &mut self.links {
            links.broadcast(|| ShardMsg::Topics(snapshot.clone()));
            for topic in deleted {
                links.broadcast(|| ShardMsg::TopicDeleted(topic.clone()));
            }
        }
        let control = self.control();
        if let Some(registrar) = &mut control.registrar {
            let number = registrar.topics(snapshot);
            for topic in registered {
                control.unrouted_topics.insert(topic.clone(), number);
            }
        }
    }

    /// The number of the topic snapshot a send of `topic` on shard 0 waits
    /// for the registrar to offer (see the module invariants).
    pub(crate) fn unrouted_topic(&self, topic: &str) -> Option<u64> {
        let control = self.control.as_ref()?;
        if control.unrouted_topics.is_empty() {
            return None;
        }
        control.unrouted_topics.get(topic).copied()
    }

    /// Holds `then` (an answer or a send) until the registrar has offered
    /// topic snapshot `number` to the name servers.
    pub(crate) fn await_registration(&mut self, number: u64, then: AfterPersist, now_ms: i64) {
        self.control()
            .awaiting_registration
            .push(AwaitingRegistration {
                number,
                deadline_ms: now_ms + REGISTRATION_HOLD_MAX_MS,
                then,
            });
    }

    /// Answers a request that created or updated topics once the newest
    /// topic snapshot (which holds them) was offered to the name servers.
    fn answer_once_routed(
        &mut self,
        reply: super::link::ReplyTo,
        answer: RemotingCommand,
        now_ms: i64,
    ) {
        let control = self.control();
        match &control.registrar {
            Some(registrar) if !registrar.offered(registrar.handed()) => {
                let number = registrar.handed();
                self.await_registration(number, AfterPersist::Answer { reply, answer }, now_ms);
            }
            _ => self.reply(reply, answer),
        }
    }

    /// Whether answers or sends are waiting for the registrar.
    pub(crate) fn awaits_registration(&self) -> bool {
        self.control
            .as_ref()
            .is_some_and(|control| !control.awaiting_registration.is_empty())
    }

    /// Goes on with the answers and sends whose topics the registrar has
    /// offered to the name servers, or that waited
    /// [`REGISTRATION_HOLD_MAX_MS`] (their topics then stop holding sends).
    pub(crate) fn release_registered(&mut self, now_ms: i64) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        let Some(registrar) = &control.registrar else {
            return;
        };
        if control.unrouted_topics.is_empty() && control.awaiting_registration.is_empty() {
            return;
        }
        control
            .unrouted_topics
            .retain(|_, number| !registrar.offered(*number));
        let awaiting = std::mem::take(&mut control.awaiting_registration);
        let mut still = Vec::new();
        let mut released = Vec::new();
        for held in awaiting {
            if registrar.offered(held.number) {
                released.push(held.then);
            } else if now_ms >= held.deadline_ms {
                tracing::warn!(
                    snapshot = held.number,
                    "the registrar has not offered a new topic to the name servers in time; \
                     answering without it"
                );
                control
                    .unrouted_topics
                    .retain(|_, number| *number > held.number);
                released.push(held.then);
            } else {
                still.push(held);
            }
        }
        // Work held while these went on comes after what still waits.
        still.append(&mut control.awaiting_registration);
        control.awaiting_registration = still;
        for then in released {
            match then {
                AfterPersist::Answer { reply, answer } => self.reply(reply, answer),
                AfterPersist::Dispatch(request) => self.dispatch(request, now_ms),
                other => unreachable!("only answers and sends wait for the registrar: {other:?}"),
            }
        }
    }

    /// Takes settings changed by UPDATE_BROKER_CONFIG: requests read them
    /// from here on; the store's retention rules follow them at once.
    pub(crate) fn apply_settings(&mut self, settings: Arc<super::ShardSettings>) {
        if let Some(store) = &mut self.store {
            let mut retention = store.retention().clone();
            super::runtime::apply_retention(&settings.broker_config, &mut retention);
            store.set_retention(retention);
        }
        self.settings = settings;
    }

    /// UPDATE_BROKER_CONFIG: applies the body's keys ([`RUNTIME_KEYS`]
    /// only) to this shard's settings and sends them to the others, writes
    /// `brokerConfigUpdates.properties` (answered once it is durable) and,
    /// when `brokerPermission` changed, registers with the name servers at
    /// once. A key that cannot change while the broker runs, or a bad
    /// value, refuses the whole request and changes nothing.
    ///
    /// [`RUNTIME_KEYS`]: crate::config::RUNTIME_KEYS
    fn update_broker_config(&mut self, request: Box<Request>) {
        let text = String::from_utf8_lossy(request.cmd.body_bytes()).into_owned();
        let (config, applied) = match self.settings.broker_config.updated(&text) {
            Ok(updated) => updated,
            Err(error) => {
                let answer = response(response_code::INVALID_PARAMETER, error.to_string());
                return self.reply(request.reply, answer);
            }
        };
        if applied.is_empty() {
            return self.reply(request.reply, success());
        }
        let permission_before = self.settings.broker_config.broker_permission;
        tracing::info!(keys = ?applied, "UPDATE_BROKER_CONFIG");
        let settings = Arc::new(super::runtime::shard_settings(
            &config,
            self.settings.shard_count,
            self.settings.store_host.port(),
        ));
        self.apply_settings(settings.clone());
        if let Some(links) = &mut self.links {
            links.broadcast(|| ShardMsg::Settings(settings.clone()));
        }
        let control = self.control.as_mut().expect("shard 0");
        for (key, value) in applied {
            control.config_updates.insert(key.to_owned(), value);
        }
        let content: String = control
            .config_updates
            .iter()
            .map(|(key, value)| format!("{key}={value}\n"))
            .collect();
        if config.broker_permission != permission_before
            && let Some(registrar) = &control.registrar
        {
            registrar.permission(config.broker_permission);
        }
        let ticket = self.persister.as_ref().map(|persister| {
            persister.write(ConfigFile::BrokerConfigUpdates, content.into_bytes())
        });
        match ticket {
            Some(ticket) => self.await_persist(
                vec![ticket],
                AfterPersist::Answer {
                    reply: request.reply,
                    answer: success(),
                },
            ),
            None => self.reply(request.reply, success()),
        }
    }

    /// The ticket a send of `topic` waits for on shard 0: the topic's
    /// snapshot is not shown to the other shards yet.
    pub(crate) fn unshown_topic(&self, topic: &str) -> Option<WriteTicket> {
        let control = self.control.as_ref()?;
        if control.unshown_topics.is_empty() {
            return None;
        }
        control.unshown_topics.get(topic).copied()
    }

    /// A deleted topic's consumer offsets and ConsumeQueues on this shard
    /// go (RocketMQ's `deleteTopics`); a disk error is logged, the queues
    /// are gone from memory all the same.
    pub(crate) fn forget_deleted_topic(&mut self, topic: &str) {
        self.offsets.remove_topic(topic);
        let shard = self.id;
        let Some(store) = &mut self.store else {
            return;
        };
        match store.delete_topic(topic) {
            Ok(0) => {}
            Ok(queues) => tracing::info!(
                topic,
                queues,
                shard,
                "deleted topic's consume queues removed"
            ),
            Err(error) => tracing::error!(
                topic,
                %error,
                shard,
                "removing a deleted topic's consume queue files failed"
            ),
        }
    }

    /// As [`ShardHandler::publish_topics`], for `subscriptionGroup.json`.
    pub(crate) fn publish_groups(&mut self, change: &GroupTableChange) -> Option<WriteTicket> {
        if change.updated.is_empty()
            && change.deleted.is_empty()
            && change.clean_offsets_of.is_empty()
        {
            return None;
        }
        let snapshot = self.control().groups.snapshot();
        self.groups = snapshot.clone();
        if let Some(links) = &mut self.links {
            links.broadcast(|| ShardMsg::Groups(snapshot.clone()));
            for group in &change.clean_offsets_of {
                links.broadcast(|| ShardMsg::GroupOffsetsDeleted(group.clone()));
            }
        }
        for group in &change.clean_offsets_of {
            self.offsets.remove_group(group);
        }
        let control = self.control.as_ref().expect("shard 0");
        self.persister.as_ref().map(|persister| {
            persister.write(ConfigFile::SubscriptionGroups, control.groups.encode_file())
        })
    }

    fn publish_subscriptions(&mut self, now_ms: i64) {
        let previous = self.subs.clone();
        let snapshot = SubscriptionSnapshot::of_reusing(&self.control().clients, Some(&previous));
        if *self.subs == snapshot {
            return;
        }
        let snapshot = Arc::new(snapshot);
        self.subs = snapshot.clone();
        if let Some(links) = &mut self.links {
            links.broadcast(|| ShardMsg::Subscriptions(snapshot.clone()));
        }
        self.retry_held_after_snapshot(now_ms);
    }

    fn notify(&mut self, notifications: Vec<Notification>) {
        for notification in notifications {
            self.push_to_client(ConnectionId(notification.channel.0), notification.command);
        }
    }

    /// A client or admin command on shard 0.
    pub(crate) fn control_request(&mut self, request: Box<Request>, now_ms: i64) {
        let cmd = &request.cmd;
        let mut tickets = Vec::new();
        // Whether the answer waits for the name servers too.
        let mut routes = false;
        let answer = match cmd.code {
            request_code::HEART_BEAT
            | request_code::UNREGISTER_CLIENT
            | request_code::GET_CONSUMER_LIST_BY_GROUP
            | request_code::GET_CONSUMER_CONNECTION_LIST
            | request_code::GET_PRODUCER_CONNECTION_LIST => {
                let peer = peer_of(&request);
                let topics = self.topics.clone();
                let groups = self.groups.clone();
                let view = ControlView {
                    topics: &topics,
                    groups: &groups,
                };
                let control = self.control();
                let Some(outcome) = control.clients.handle(cmd, &peer, view, now_ms) else {
                    unreachable!("the registry serves the codes routed to it");
                };
                let mut topic_change = TopicTableChange::default();
                let mut group_change = GroupTableChange::default();
                for action in &outcome.actions {
                    let change = action.apply(&mut control.topics, &mut control.groups, now_ms);
                    topic_change.merge(change.topics);
                    group_change.updated.extend(change.groups.updated);
                    group_change.deleted.extend(change.groups.deleted);
                }
                tickets.extend(self.publish_topics(&topic_change));
                tickets.extend(self.publish_groups(&group_change));
                self.notify(outcome.notifications);
                self.publish_subscriptions(now_ms);
                outcome.response
            }
            request_code::LOCK_BATCH_MQ | request_code::UNLOCK_BATCH_MQ => {
                let control = self.control();
                control
                    .locks
                    .handle(cmd, now_ms)
                    .unwrap_or_else(|| response(response_code::SYSTEM_ERROR, "lock"))
            }
            request_code::UPDATE_AND_CREATE_TOPIC
            | request_code::UPDATE_AND_CREATE_TOPIC_LIST
            | request_code::DELETE_TOPIC_IN_BROKER
            | request_code::GET_ALL_TOPIC_CONFIG
            | request_code::GET_TOPIC_CONFIG => {
                let Some(outcome) = self.control().topics.handle(cmd, now_ms) else {
                    unreachable!("the topic table serves the codes routed to it");
                };
                routes = !outcome.change.registered.is_empty();
                tickets.extend(self.publish_topics(&outcome.change));
                outcome.response
            }
            request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
            | request_code::GET_ALL_SUBSCRIPTIONGROUP_CONFIG
            | request_code::DELETE_SUBSCRIPTIONGROUP => {
                let Some(outcome) = self.control().groups.handle(cmd, now_ms) else {
                    unreachable!("the group table serves the codes routed to it");
                };
                tickets.extend(self.publish_groups(&outcome.change));
                outcome.response
            }
            request_code::GET_BROKER_RUNTIME_INFO => return self.runtime_info(request, now_ms),
            request_code::END_TRANSACTION => return self.end_transaction(request, now_ms),
            request_code::SEND_REPLY_MESSAGE | request_code::SEND_REPLY_MESSAGE_V2 => {
                return self.reply_message(request, now_ms);
            }
            request_code::CHECK_CLIENT_CONFIG => {
                check_client_config(cmd, self.settings.broker_config.enable_property_filter)
            }
            request_code::GET_BROKER_CONFIG => self.broker_config_answer(),
            request_code::GET_ALL_PRODUCER_INFO => {
                let table = self.control().clients.producer_table();
                json_success(|body| table.to_json(body, JsonStyle::Java))
            }
            request_code::GET_CONSUMER_RUNNING_INFO => return self.call_consumer(request, now_ms),
            request_code::INVOKE_BROKER_TO_GET_CONSUMER_STATUS => {
                return self.consumer_status(request, now_ms);
            }
            request_code::UPDATE_BROKER_CONFIG => return self.update_broker_config(request),
            request_code::GET_SYSTEM_TOPIC_LIST_FROM_BROKER => {
                let topics = &self.control().topics;
                let list = TopicList {
                    topic_list: topics
                        .snapshot()
                        .iter()
                        .map(|(topic, _)| topic)
                        .filter(|topic| topics.is_system_topic(topic))
                        .map(str::to_owned)
                        .collect(),
                    broker_addr: None,
                };
                json_success(|body| list.to_json(body, JsonStyle::Java))
            }
            request_code::QUERY_SUBSCRIPTION_BY_CONSUMER => {
                match cmd.decode_custom_header::<QuerySubscriptionByConsumerRequestHeader>() {
                    Ok(header) => {
                        let answer = QuerySubscriptionResponseBody {
                            subscription_data: self
                                .subs
                                .subscription(&header.group, &header.topic)
                                .cloned(),
                            group: header.group,
                            topic: header.topic,
                        };
                        json_success(|body| answer.to_json(body, JsonStyle::Java))
                    }
                    Err(error) => response(response_code::SYSTEM_ERROR, error.to_string()),
                }
            }
            code => response(
                response_code::REQUEST_CODE_NOT_SUPPORTED,
                format!(" request type {code} not supported"),
            ),
        };
        let reply = request.reply;
        if answer.code != response_code::SUCCESS {
            return self.reply(reply, answer);
        }
        match (tickets.is_empty(), routes) {
            (true, false) => self.reply(reply, answer),
            (true, true) => self.answer_once_routed(reply, answer, now_ms),
            (false, false) => self.await_persist(tickets, AfterPersist::Answer { reply, answer }),
            (false, true) => {
                self.await_persist(tickets, AfterPersist::AnswerOnceRouted { reply, answer });
            }
        }
    }

    /// Holds `then` until `tickets` are settled; the ring's next turns
    /// check ([`ShardHandler::release_persisted`]).
    pub(crate) fn await_persist(&mut self, tickets: Vec<WriteTicket>, then: AfterPersist) {
        self.control()
            .awaiting_persist
            .push(AwaitingPersist { tickets, then });
    }

    /// Whether answers are waiting for the persister.
    pub(crate) fn awaits_persist(&self) -> bool {
        self.control
            .as_ref()
            .is_some_and(|control| !control.awaiting_persist.is_empty())
    }

    /// Goes on with the held work whose config files are now on disk. A
    /// failed write turns a held answer into SYSTEM_ERROR (the change is in
    /// effect in memory and its write is retried, but a crash would undo
    /// it); a held send goes on all the same.
    pub(crate) fn release_persisted(&mut self, now_ms: i64) {
        if !self.awaits_persist() {
            return;
        }
        let Some(persister) = self.persister.clone() else {
            return;
        };
        let awaiting = std::mem::take(&mut self.control().awaiting_persist);
        let mut still = Vec::new();
        for held in awaiting {
            let mut failure = None;
            let mut pending = false;
            for &ticket in &held.tickets {
                match persister.ticket_state(ticket) {
                    TicketState::Written => {}
                    TicketState::Pending => pending = true,
                    TicketState::Failed(error) => {
                        failure = Some(format!("{}: {error}", ticket.file().file_name()));
                    }
                }
            }
            if pending && failure.is_none() {
                still.push(held);
                continue;
            }
            match held.then {
                AfterPersist::Answer { reply, answer } => {
                    let answer = match failure {
                        Some(failure) => persist_failed(&failure),
                        None => answer,
                    };
                    self.reply(reply, answer);
                }
                AfterPersist::AnswerOnceRouted { reply, answer } => match failure {
                    Some(failure) => self.reply(reply, persist_failed(&failure)),
                    None => self.answer_once_routed(reply, answer, now_ms),
                },
                AfterPersist::Dispatch(request) => self.dispatch(request, now_ms),
                AfterPersist::ShowTopics {
                    snapshot,
                    deleted,
                    registered,
                } => {
                    // Topics a later change holds again wait for its ticket.
                    let ticket = held.tickets[0];
                    self.control()
                        .unshown_topics
                        .retain(|_, waits_for| *waits_for != ticket);
                    self.show_topics(snapshot, &deleted, &registered);
                }
            }
        }
        // Work held while these went on comes after what still waits.
        let control = self.control();
        still.append(&mut control.awaiting_persist);
        control.awaiting_persist = still;
    }

    /// GET_BROKER_RUNTIME_INFO: this shard's counters now, the others'
    /// when they answer (scatter-gather over the links).
    fn runtime_info(&mut self, request: Box<Request>, now_ms: i64) {
        let stats = self.current_stats();
        let missing = self.settings.shard_count - 1;
        if missing == 0 {
            let answer = self.runtime_answer(&stats, now_ms);
            return self.reply(request.reply, answer);
        }
        self.next_query += 1;
        let query = self.next_query;
        self.runtime_queries.insert(
            query,
            RuntimeQuery {
                reply: request.reply,
                merged: stats,
                missing,
            },
        );
        if let Some(links) = &mut self.links {
            links.broadcast(|| ShardMsg::StatsRequest(query));
        }
    }

    /// GET_BROKER_CONFIG (26): `--print-config`'s text, as Java's
    /// properties; the version never moves (nothing changes at run time).
    fn broker_config_answer(&self) -> RemotingCommand {
        let version = DataVersion {
            timestamp: self.stats.boot_timestamp_ms,
            counter: 0,
            state_version: 0,
        };
        let mut text = Vec::new();
        version.to_json(&mut text, JsonStyle::Java);
        let header = GetBrokerConfigResponseHeader {
            version: String::from_utf8_lossy(&text).into_owned(),
        };
        success()
            .with_custom_header(&header)
            .with_body(Bytes::from(self.settings.broker_config.print_config()))
    }

    fn runtime_answer(&self, stats: &RuntimeStats, now_ms: i64) -> RemotingCommand {
        let body = runtime_info_body(stats, &self.settings.broker_config, now_ms);
        super::success().with_body(Bytes::from(body))
    }

    /// Another shard's counters for a pending GET_BROKER_RUNTIME_INFO.
    pub(crate) fn on_shard_stats(&mut self, query: u64, stats: &RuntimeStats, now_ms: i64) {
        let Some(pending) = self.runtime_queries.get_mut(&query) else {
            return;
        };
        pending.merged.merge(stats);
        pending.missing -= 1;
        if pending.missing > 0 {
            return;
        }
        let Some(done) = self.runtime_queries.remove(&query) else {
            return;
        };
        let answer = self.runtime_answer(&done.merged, now_ms);
        self.reply(done.reply, answer);
    }

    /// A send's topic is missing from the snapshots: create it as Java's
    /// `msgCheck` does (TBW102 template, retry and DLQ topics).
    pub(crate) fn control_resolve_send_topic(
        &mut self,
        header: &SendMessageRequestHeader,
        now_ms: i64,
    ) -> Result<Option<WriteTicket>, (i32, String)> {
        let control = self.control();
        let change = if super::send::is_dlq_topic(&header.topic) {
            let group = &header.topic[crate::topic_config::DLQ_GROUP_TOPIC_PREFIX.len()..];
            control.topics.ensure_dlq_topic(group, now_ms).1
        } else {
            let default_topic = if header.default_topic.is_empty() {
                crate::topic_config::AUTO_CREATE_TOPIC_KEY_TOPIC
            } else {
                header.default_topic.as_str()
            };
            match control.topics.resolve_for_send(
                &header.topic,
                default_topic,
                header.default_topic_queue_nums,
                header.unit_mode.unwrap_or(false),
                now_ms,
            ) {
                Ok(resolved) => resolved.change,
                Err(refusal) => return Err((refusal.code, refusal.remark)),
            }
        };
        if !change.is_empty() {
            tracing::info!(topic = %header.topic, "topic created by a send");
        }
        Ok(self.publish_topics(&change))
    }

    /// A connection closed (on any shard).
    pub(crate) fn control_connection_closed(&mut self, conn: ConnectionId, now_ms: i64) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        let notifications = control.clients.channel_closed(ChannelId(conn.0));
        self.notify(notifications);
        self.publish_subscriptions(now_ms);
        self.end_client_calls(Some(conn), now_ms);
    }

    /// A pull named a group that does not exist: create it if allowed.
    pub(crate) fn control_ensure_group(&mut self, group: &str, now_ms: i64) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        let change = control.groups.find_or_create(group, now_ms).1;
        self.publish_groups(&change);
    }

    /// Periodic control-plane work (client expiry, lock expiry).
    pub(crate) fn control_tick(&mut self, now_ms: i64) {
        self.transaction_tick(now_ms);
        self.end_client_calls(None, now_ms);
        let Some(control) = self.control.as_mut() else {
            return;
        };
        if now_ms - control.last_lock_scan_ms >= LOCK_SCAN_INTERVAL_MS {
            control.last_lock_scan_ms = now_ms;
            control.locks.remove_expired(now_ms);
        }
        if now_ms - control.last_client_scan_ms < CHANNEL_SCAN_INTERVAL_MS {
            return;
        }
        control.last_client_scan_ms = now_ms;
        let outcome = control.clients.scan(now_ms);
        for channel in &outcome.expired_channels {
            tracing::info!(channel = channel.0, "client channel expired: closing it");
        }
        for channel in outcome.expired_channels {
            self.close_connection(ConnectionId(channel.0));
        }
        self.notify(outcome.notifications);
        self.publish_subscriptions(now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringmq_protocol::command::ExtFields;

    fn check(body: &str, enable_property_filter: bool) -> RemotingCommand {
        let mut cmd =
            RemotingCommand::new_request(request_code::CHECK_CLIENT_CONFIG, ExtFields::new());
        cmd.body = Some(Bytes::copy_from_slice(body.as_bytes()));
        check_client_config(&cmd, enable_property_filter)
    }

    fn body(expression_type: &str, expression: &str) -> String {
        format!(
            "{{\"clientId\":\"c\",\"group\":\"g\",\"subscriptionData\":{{\"classFilterMode\":false,\
             \"codeSet\":[],\"expressionType\":\"{expression_type}\",\"subString\":\"{expression}\",\
             \"subVersion\":1,\"tagsSet\":[],\"topic\":\"t\"}}}}"
        )
    }

    #[test]
    fn client_config_with_a_tag_subscription_is_accepted() {
        assert_eq!(
            check(&body("TAG", "a || b"), false).code,
            response_code::SUCCESS
        );
        assert_eq!(check("", false).code, response_code::SUCCESS);
    }

    #[test]
    fn client_config_with_sql92_needs_the_property_filter_enabled() {
        let refused = check(&body("SQL92", "a > 1"), false);
        assert_eq!(refused.code, response_code::SYSTEM_ERROR);
        assert!(refused.remark.unwrap().contains("SQL92"));
        assert_eq!(
            check(&body("SQL92", "a > 1"), true).code,
            response_code::SUCCESS
        );
    }

    #[test]
    fn client_config_with_a_malformed_sql92_expression_is_refused() {
        let refused = check(&body("SQL92", "a > AND b = 1"), true);
        assert_eq!(refused.code, response_code::SUBSCRIPTION_PARSE_FAILED);
        assert!(!refused.remark.unwrap_or_default().is_empty());
    }

    #[test]
    fn client_config_with_a_malformed_body_is_a_system_error() {
        assert_eq!(check("{not json", true).code, response_code::SYSTEM_ERROR);
    }
}
