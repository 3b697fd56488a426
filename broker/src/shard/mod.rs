//! A broker shard: one thread, one io_uring ring shared by its remoting
//! [`Server`](crate::server::Server) and its [`Store`]'s disk (a lane
//! each), the queues whose
//! `queue_id % shard_count` is this shard's id, their consumer offsets and
//! their held pulls. Shard 0 also owns the control plane ([`control`]).
//!
//! ```text
//!  request on shard a ─ route ─▶ owner == a ─▶ execute ─▶ answer now | later (ack, held pull)
//!                              └▶ owner b   ─▶ link(b) ─▶ b executes ─▶ Outbound ─▶ a writes it
//!  every turn: inbox ─▶ store.poll ─▶ acks ─▶ answers + wake held pulls ─▶ expiries ─▶ links.flush
//! ```
//!
//! Routing (design: one owner per queue, control plane on shard 0):
//! SEND*/PULL/offset and queue-offset requests go to the owner of their
//! `queueId`; a send to a topic this shard's snapshot lacks goes to shard 0,
//! which creates it (TBW102 rules), publishes the snapshot and forwards the
//! send to the owner behind it; CONSUMER_SEND_MSG_BACK goes to the shard in
//! the top byte of its CommitLog offset (VIEW_MESSAGE_BY_ID too); client
//! and admin commands go to shard 0; QUERY_MESSAGE, GET_TOPIC_STATS_INFO,
//! GET_CONSUME_STATS, QUERY_TOPIC_CONSUME_BY_WHO, QUERY_TOPICS_BY_CONSUMER
//! INVOKE_BROKER_TO_RESET_OFFSET, CLONE_GROUP_OFFSET, GET_BROKER_CONSUME_STATS
//! and QUERY_CONSUME_TIME_SPAN gather a part from every shard where they
//! arrived ([`gather`]), GET_BROKER_RUNTIME_INFO on shard 0;
//! GET_CONSUMER_RUNNING_INFO goes to shard 0, which asks the client
//! (`client_call`); anything else is
//! answered where it arrived (REQUEST_CODE_NOT_SUPPORTED for unknown codes).
//!
//! # Invariants
//! - Every request that is not one-way gets exactly one answer, written by
//!   the shard whose server holds its connection (unless the connection
//!   closed first).
//! - A shard appends only to queues it owns: `queue_id % shard_count == id`.
//! - The data path takes no lock: snapshots are `Arc`s replaced by
//!   messages, never mutated; the only shared structures are the channels
//!   a request crosses to reach another shard.

mod client_call;
pub mod control;
pub mod gather;
pub mod link;
mod offsets;
mod pull;
pub mod query;
pub mod replica;
mod reply; // wired by txn
pub mod runtime;
pub mod schedule; // wired by schedule
mod send;
pub mod subs;
pub mod timer; // wired by schedule
pub mod transaction; // wired by txn

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ringmq_protocol::code::{flag, request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::message::decode_offset_msg_id;
use ringmq_storage::disk::uring::UringDisk;
use ringmq_storage::store::{AppendAck, PullRead, Store};

use crate::consumer_offset::ConsumerOffsetTable;
use crate::persist::PersisterHandle;
use crate::route::Router;
use crate::runtime_info::RuntimeStats;
use crate::server::{ConnectionId, RequestHandler, SplicedBody};
use crate::stats_table::StatsTable;
use crate::subscription_group::SubscriptionGroupSnapshot;
use crate::topic_config::TopicConfigSnapshot;
use crate::tps::TpsSampler;

use control::ControlPlane;
use link::{Links, ReplyTo, Request, ShardMsg};
use pull::HeldPull;
use send::PendingSend;
use subs::SubscriptionSnapshot;

/// Inbox messages handled per turn at most (the rest wait for the next).
pub const INBOX_MESSAGES_PER_TURN_MAX: usize = 4096;
/// Wait bound while appends await their acks (SYNC_FLUSH timeouts are
/// checked at this granularity).
pub const PENDING_ACK_POLL: Duration = Duration::from_millis(10);
/// Wait bound otherwise: the store's periodic work (flush interval,
/// ConsumeQueue write-behind, checkpoint) runs at least this often.
pub const STORE_IDLE_POLL: Duration = Duration::from_millis(100);
/// Wait bound while answers wait for the persister, in case its wake-up
/// (after each batch) is lost.
pub const PERSIST_ANSWER_POLL: Duration = Duration::from_millis(10);

/// Wait bound while messages for a full inbox wait in a backlog.
pub const BACKLOG_RETRY: Duration = Duration::from_millis(1);

/// Settings every shard shares.
#[derive(Debug, Clone)]
pub struct ShardSettings {
    /// Number of shards.
    pub shard_count: u16,
    /// `brokerClusterName` (the CLUSTER property of stored messages).
    pub cluster_name: String,
    /// `brokerName`.
    pub broker_name: String,
    /// `brokerId`.
    pub broker_id: i64,
    /// `brokerIP1:listenPort`, written into records and message ids.
    pub store_host: SocketAddr,
    /// `maxMessageSize`.
    pub max_message_size: usize,
    /// Master role (commits piggybacked on pulls are stored).
    pub is_master: bool,
    /// A pull whose last record lies further than this behind its shard's
    /// log end marks its consumer as slow (`accessMessageInMemoryMaxRatio`).
    pub slow_pull_lag_bytes: u64,
    /// The whole configuration (GET_BROKER_RUNTIME_INFO reports from it).
    pub broker_config: Arc<crate::config::BrokerConfig>,
}

/// One shard's request handler (see the module doc).
pub struct ShardHandler {
    id: u16,
    settings: Arc<ShardSettings>,
    router: Router,
    store: Option<Store<UringDisk>>,
    topics: Arc<TopicConfigSnapshot>,
    groups: Arc<SubscriptionGroupSnapshot>,
    subs: Arc<SubscriptionSnapshot>,
    control: Option<ControlPlane>,
    offsets: ConsumerOffsetTable,
    links: Option<Links>,
    persister: Option<PersisterHandle>,
    pending_sends: HashMap<u64, PendingSend>,
    held: Vec<HeldPull>,
    /// Pulls waiting for the store's background reads of their records.
    reading_pulls: Vec<pull::ReadingPull>,
    /// QUERY_MESSAGE parts waiting for the same.
    reading_queries: Vec<query::ReadingQuery>,
    /// Store timestamps of records read for time lookups, by outside-visible
    /// CommitLog offset (a record's store time never changes), so that a
    /// lookup executed again after a background read does not read its
    /// earlier probes again ([`offsets::STORE_TIMES_KEPT_MAX`] at most).
    store_times: HashMap<u64, i64>,
    outbound: Vec<(ConnectionId, RemotingCommand)>,
    /// Answers whose bodies the server splices from pipes (replica chunks).
    spliced_out: Vec<(ConnectionId, RemotingCommand, Vec<SplicedBody>)>,
    closes: Vec<ConnectionId>,
    /// Inbox messages a [`ShardHandler::refresh_snapshots`] took out but
    /// does not run (requests, parts, ...), in arrival order, for the
    /// turn's [`ShardHandler::drain_inbox`].
    deferred: VecDeque<ShardMsg>,
    /// A snapshot applied by a refresh may let held pulls go on: retried
    /// by the turn's drain.
    retry_held_due: bool,
    acks: Vec<AppendAck>,
    next_opaque: i32,
    queue_pick: u32,
    store_failed: bool,
    stopping: bool,
    stats: RuntimeStats,
    /// Samples of `stats`' counters, taken every tick, for the TPS figures.
    tps: TpsSampler,
    /// Per-topic and per-group figures (VIEW_BROKER_STATS_DATA), sampled
    /// every tick.
    stats_table: StatsTable,
    /// GET_BROKER_RUNTIME_INFO requests waiting for the other shards'
    /// counters (shard 0).
    runtime_queries: HashMap<u64, control::RuntimeQuery>,
    /// Requests forwarded to clients, waiting for their answers (shard 0).
    client_calls: client_call::ClientCalls,
    /// Requests waiting for the other shards' parts (`gather`).
    gatherings: HashMap<u64, gather::Gathering>,
    /// The last id given to a gathering or a GET_BROKER_RUNTIME_INFO.
    next_query: u64,
    /// Delay-level delivery of the levels this shard owns (wired by schedule).
    delay: schedule::DelayState,
    /// The timer wheel, on the owner of the timer queue (wired by schedule).
    timer: Option<timer::TimerState>,
    /// Master/slave replication (slave connections, held replica pulls,
    /// replicated appends waiting for their ack).
    replica: replica::ReplicaState,
}

impl std::fmt::Debug for ShardHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardHandler")
            .field("id", &self.id)
            .field("pending_sends", &self.pending_sends.len())
            .field("held", &self.held.len())
            .finish()
    }
}

/// A response with `code` and `remark` (opaque and flags are set on reply).
pub(crate) fn response(code: i32, remark: impl Into<String>) -> RemotingCommand {
    RemotingCommand::new_response(code, 0, Some(remark.into()))
}

/// A SUCCESS response without remark.
pub(crate) fn success() -> RemotingCommand {
    RemotingCommand::new_response(response_code::SUCCESS, 0, None)
}

/// SUCCESS with the JSON body `write` appends.
pub(crate) fn json_success(write: impl FnOnce(&mut Vec<u8>)) -> RemotingCommand {
    let mut body = Vec::new();
    write(&mut body);
    success().with_body(bytes::Bytes::from(body))
}

/// The `pick`-th choice of a queue among `write_queue_nums` for shard `id`
/// of `shard_count`: round-robin over the queues the shard owns, or over
/// all of them when it owns none.
fn pick_queue_for(id: u16, shard_count: u16, write_queue_nums: u32, pick: u32) -> u32 {
    assert!(write_queue_nums > 0, "a topic without write queues");
    let (id, count) = (u32::from(id), u32::from(shard_count));
    if id >= write_queue_nums {
        return pick % write_queue_nums;
    }
    let owned = (write_queue_nums - id).div_ceil(count);
    id + (pick % owned) * count
}

/// Where a request is executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Here,
    Shard(u16),
}

impl ShardHandler {
    /// A shard handler over an opened store; `control` is `Some` on shard
    /// 0 only. The links come later ([`ShardHandler::install_links`]), once
    /// every shard listens.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: u16,
        settings: Arc<ShardSettings>,
        store: Store<UringDisk>,
        topics: Arc<TopicConfigSnapshot>,
        groups: Arc<SubscriptionGroupSnapshot>,
        control: Option<ControlPlane>,
        offsets: ConsumerOffsetTable,
        persister: Option<PersisterHandle>,
    ) -> Self {
        let router = Router::new(u32::from(settings.shard_count))
            .expect("the shard count was validated with the configuration");
        assert!(id < settings.shard_count, "shard {id} out of range");
        assert_eq!(
            control.is_some(),
            id == 0,
            "the control plane lives on shard 0"
        );
        let shard_count = settings.shard_count;
        ShardHandler {
            id,
            settings,
            router,
            store: Some(store),
            topics,
            groups,
            subs: Arc::new(SubscriptionSnapshot::default()),
            control,
            offsets,
            links: None,
            persister,
            pending_sends: HashMap::new(),
            held: Vec::new(),
            reading_pulls: Vec::new(),
            reading_queries: Vec::new(),
            store_times: HashMap::new(),
            outbound: Vec::new(),
            spliced_out: Vec::new(),
            closes: Vec::new(),
            deferred: VecDeque::new(),
            retry_held_due: false,
            acks: Vec::new(),
            next_opaque: 0,
            queue_pick: u32::from(id),
            store_failed: false,
            stopping: false,
            stats: RuntimeStats::new(crate::shard::runtime::wall_clock_ms()),
            tps: TpsSampler::new(),
            stats_table: StatsTable::new(crate::shard::runtime::wall_clock_ms()),
            runtime_queries: HashMap::new(),
            client_calls: client_call::ClientCalls::default(),
            gatherings: HashMap::new(),
            next_query: 0,
            delay: schedule::DelayState::new(
                id,
                shard_count,
                crate::features::delay::DelayLevels::default(),
                &ringmq_protocol::json::DelayOffsetFile::default(),
                None,
            ),
            timer: None,
            replica: replica::ReplicaState::default(),
        }
    }

    /// Connects the shard to the others (before [`Server::run`](crate::server::Server::run)).
    pub fn install_links(&mut self, links: Links) {
        assert_eq!(links.shard_count(), self.settings.shard_count);
        self.links = Some(links);
    }

    /// The store (for set-up: registering the server's eventfd with its ring).
    pub fn store(&self) -> &Store<UringDisk> {
        self.store.as_ref().expect("the store is open until finish")
    }

    fn store_mut(&mut self) -> &mut Store<UringDisk> {
        self.store.as_mut().expect("the store is open until finish")
    }

    /// This shard's id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// After the server stopped: answers what is still owed, shuts the store
    /// down (flush, checkpoint, abort file removed) and hands the final
    /// consumer offsets (and, on shard 0, configs) to the persister.
    ///
    /// # Errors
    /// The store's shutdown failed (the abort file then stays, and the next
    /// start recovers as after a crash).
    pub fn finish(&mut self, now_ms: i64) -> Result<(), ringmq_storage::error::StorageError> {
        let mut acks = Vec::new();
        let result = match self.store.take() {
            Some(store) => store.shutdown(now_ms.max(0) as u64, &mut acks).map(drop),
            None => Ok(()),
        };
        self.publish_delay_offsets(now_ms, true); // wired by schedule
        if let Some(persister) = &self.persister {
            // The persister holds every shard's latest offsets (seeded at
            // the start): only a change needs handing in.
            if self.offsets.is_dirty() {
                persister.offsets(self.id, self.offsets.to_file());
            }
            if let Some(control) = &self.control {
                control.persist_all(persister);
            }
        }
        result
    }

    // ----- replying -----

    pub(crate) fn reply(&mut self, to: ReplyTo, mut cmd: RemotingCommand) {
        tracing::trace!(shard = self.id, opaque = to.opaque, code = cmd.code, remark = ?cmd.remark, "answer");
        if to.oneway {
            return;
        }
        cmd.opaque = to.opaque;
        cmd.flag = (cmd.flag | flag::RESPONSE) & !flag::ONEWAY;
        self.deliver(to.shard, to.conn, cmd);
    }

    /// As [`ShardHandler::reply`], with `parts` spliced from their pipes by
    /// the connection's shard instead of the command's own body.
    pub(crate) fn reply_spliced(
        &mut self,
        to: ReplyTo,
        mut cmd: RemotingCommand,
        parts: Vec<SplicedBody>,
    ) {
        tracing::trace!(
            shard = self.id,
            opaque = to.opaque,
            code = cmd.code,
            parts = parts.len(),
            "spliced answer"
        );
        if to.oneway {
            return;
        }
        cmd.opaque = to.opaque;
        cmd.flag = (cmd.flag | flag::RESPONSE) & !flag::ONEWAY;
        if to.shard == self.id {
            self.spliced_out.push((to.conn, cmd, parts));
        } else if let Some(links) = &mut self.links {
            links.send(to.shard, ShardMsg::SplicedOutbound(to.conn, cmd, parts));
        }
    }

    /// Sends a finished command to a connection of any shard.
    pub(crate) fn deliver(&mut self, shard: u16, conn: ConnectionId, cmd: RemotingCommand) {
        if shard == self.id {
            if conn == schedule::INTERNAL_CONN {
                // wired by schedule: the answer to a delayed delivery.
                let now_ms = crate::shard::runtime::wall_clock_ms();
                return self.on_internal_answer(cmd, now_ms);
            }
            if conn == transaction::INTERNAL_CONN {
                // wired by txn: the answer to an internal send.
                return self.txn_internal_answer(cmd);
            }
            self.outbound.push((conn, cmd));
        } else if let Some(links) = &mut self.links {
            links.send(shard, ShardMsg::Outbound(conn, cmd));
        }
    }

    /// A one-way request to a client connection (NOTIFY_CONSUMER_IDS_CHANGED).
    pub(crate) fn push_to_client(&mut self, conn: ConnectionId, cmd: RemotingCommand) {
        self.request_client(conn, cmd, flag::ONEWAY);
    }

    /// Sends request `cmd` to a client connection with a fresh opaque and
    /// `flags` (0 for a request the client answers); returns the opaque.
    pub(crate) fn request_client(
        &mut self,
        conn: ConnectionId,
        mut cmd: RemotingCommand,
        flags: i32,
    ) -> i32 {
        self.next_opaque = self.next_opaque.wrapping_add(1);
        cmd.opaque = self.next_opaque;
        cmd.flag = flags;
        self.deliver(conn.tag().into(), conn, cmd);
        self.next_opaque
    }

    /// Closes a connection of any shard.
    pub(crate) fn close_connection(&mut self, conn: ConnectionId) {
        let shard = u16::from(conn.tag());
        if shard == self.id {
            self.closes.push(conn);
        } else if let Some(links) = &mut self.links {
            links.send(shard, ShardMsg::Close(conn));
        }
    }

    // ----- routing -----

    fn owner_of_wire_queue(&self, queue_id: Option<&str>) -> Route {
        match queue_id.and_then(|text| text.parse::<i32>().ok()) {
            Some(queue_id) if queue_id >= 0 => {
                self.shard_route(self.router.shard_of(queue_id as u32).0)
            }
            _ => Route::Here,
        }
    }

    /// The shard in the top byte of an outside-visible CommitLog offset;
    /// here for none, or one naming no shard (the handler answers the error).
    fn owner_of_commit_log_offset(&self, offset: Option<i64>) -> Route {
        match offset {
            Some(offset) if offset >= 0 => {
                let shard = (offset as u64 >> 56) as u16;
                if shard < self.settings.shard_count {
                    self.shard_route(shard)
                } else {
                    Route::Here
                }
            }
            _ => Route::Here,
        }
    }

    fn shard_route(&self, shard: u16) -> Route {
        if shard == self.id {
            Route::Here
        } else {
            Route::Shard(shard)
        }
    }

    fn route(&mut self, cmd: &mut RemotingCommand) -> Route {
        match cmd.code {
            request_code::SEND_MESSAGE
            | request_code::SEND_MESSAGE_V2
            | request_code::SEND_BATCH_MESSAGE => self.route_send(cmd),
            request_code::PULL_MESSAGE
            | request_code::LITE_PULL_MESSAGE
            | request_code::QUERY_CONSUMER_OFFSET
            | request_code::UPDATE_CONSUMER_OFFSET
            | request_code::GET_MAX_OFFSET
            | request_code::GET_MIN_OFFSET
            | request_code::GET_EARLIEST_MSG_STORETIME
            | request_code::SEARCH_OFFSET_BY_TIMESTAMP => {
                self.owner_of_wire_queue(cmd.ext_fields.get("queueId"))
            }
            // Java's header has a primitive queueId: 0 when absent.
            request_code::QUERY_CONSUME_QUEUE => {
                self.owner_of_wire_queue(Some(cmd.ext_fields.get("queueId").unwrap_or("0")))
            }
            request_code::CONSUME_MESSAGE_DIRECTLY => {
                let msg_id = cmd.ext_fields.get("msgId");
                let offset = msg_id.and_then(|id| decode_offset_msg_id(id).ok());
                self.owner_of_commit_log_offset(offset.map(|(_, offset)| offset))
            }
            request_code::CONSUMER_SEND_MSG_BACK | request_code::VIEW_MESSAGE_BY_ID => {
                let offset = cmd.ext_fields.get("offset");
                self.owner_of_commit_log_offset(offset.and_then(|t| t.parse::<i64>().ok()))
            }
            request_code::HEART_BEAT
            | request_code::UNREGISTER_CLIENT
            | request_code::GET_CONSUMER_LIST_BY_GROUP
            | request_code::GET_CONSUMER_CONNECTION_LIST
            | request_code::GET_PRODUCER_CONNECTION_LIST
            | request_code::LOCK_BATCH_MQ
            | request_code::UNLOCK_BATCH_MQ
            | request_code::UPDATE_AND_CREATE_TOPIC
            | request_code::UPDATE_AND_CREATE_TOPIC_LIST
            | request_code::DELETE_TOPIC_IN_BROKER
            | request_code::GET_ALL_TOPIC_CONFIG
            | request_code::GET_TOPIC_CONFIG
            | request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
            | request_code::GET_ALL_SUBSCRIPTIONGROUP_CONFIG
            | request_code::DELETE_SUBSCRIPTIONGROUP
            | request_code::GET_BROKER_RUNTIME_INFO
            | request_code::GET_BROKER_CONFIG
            | request_code::UPDATE_BROKER_CONFIG
            | request_code::GET_SYSTEM_TOPIC_LIST_FROM_BROKER
            | request_code::QUERY_SUBSCRIPTION_BY_CONSUMER
            | request_code::GET_CONSUMER_RUNNING_INFO
            | request_code::INVOKE_BROKER_TO_GET_CONSUMER_STATUS
            | request_code::GET_ALL_PRODUCER_INFO
            | request_code::END_TRANSACTION
            | request_code::CHECK_CLIENT_CONFIG
            | request_code::SEND_REPLY_MESSAGE
            | request_code::SEND_REPLY_MESSAGE_V2 => self.shard_route(0),
            request_code::RINGMQ_REPLICA_PULL
            | request_code::RINGMQ_REPLICA_OFFSETS
            | request_code::RINGMQ_SCHEDULE_PROGRESS => {
                match cmd
                    .ext_fields
                    .get("shard")
                    .and_then(|t| t.parse::<u16>().ok())
                {
                    Some(shard) if shard < self.settings.shard_count => self.shard_route(shard),
                    _ => Route::Here,
                }
            }
            _ => Route::Here,
        }
    }

    /// Routes a send by its queue, picking a queue when the client left it
    /// to the broker (one this shard owns, when the topic has one).
    fn route_send(&mut self, cmd: &mut RemotingCommand) -> Route {
        let (topic_key, queue_key) = if cmd.code == request_code::SEND_MESSAGE {
            ("topic", "queueId")
        } else {
            ("b", "e")
        };
        let Some(topic) = cmd.ext_fields.get(topic_key) else {
            return Route::Here;
        };
        let Some(config) = self.topics.get(topic) else {
            return self.shard_route(0);
        };
        let write_queue_nums = config.write_queue_nums.max(0) as u32;
        let Some(queue_id) = cmd
            .ext_fields
            .get(queue_key)
            .and_then(|t| t.parse::<i32>().ok())
        else {
            return Route::Here;
        };
        if queue_id >= 0 {
            return self.owner_of_wire_queue(Some(&queue_id.to_string()));
        }
        if write_queue_nums == 0 {
            return Route::Here;
        }
        let picked = self.pick_queue(write_queue_nums);
        cmd.ext_fields.insert(queue_key, &picked.to_string());
        self.shard_route(self.router.shard_of(picked).0)
    }

    /// A queue of `write_queue_nums`, preferring the ones this shard owns.
    pub(crate) fn pick_queue(&mut self, write_queue_nums: u32) -> u32 {
        self.queue_pick = self.queue_pick.wrapping_add(1);
        pick_queue_for(
            self.id,
            self.settings.shard_count,
            write_queue_nums,
            self.queue_pick,
        )
    }

    /// Routes and executes (or forwards) a request.
    pub(crate) fn dispatch(&mut self, mut request: Box<Request>, now_ms: i64) {
        let route = self.route(&mut request.cmd);
        tracing::trace!(
            shard = self.id,
            code = request.cmd.code,
            opaque = request.reply.opaque,
            ?route,
            "request"
        );
        match route {
            Route::Here => self.execute(request, now_ms),
            Route::Shard(to) => self.forward(to, request),
        }
    }

    pub(crate) fn forward(&mut self, to: u16, request: Box<Request>) {
        let Some(links) = &mut self.links else {
            unreachable!("a single shard never forwards");
        };
        if let Err(request) = links.try_request(to, request) {
            let reply = request.reply;
            self.reply(
                reply,
                response(
                    response_code::SYSTEM_BUSY,
                    format!("[REJECTREQUEST]system busy: shard {to} is overloaded, retry later"),
                ),
            );
        }
    }

    fn execute(&mut self, request: Box<Request>, now_ms: i64) {
        match request.cmd.code {
            request_code::SEND_MESSAGE
            | request_code::SEND_MESSAGE_V2
            | request_code::SEND_BATCH_MESSAGE => self.send(request, now_ms),
            request_code::PULL_MESSAGE | request_code::LITE_PULL_MESSAGE => {
                self.pull(*request, now_ms, true)
            }
            request_code::QUERY_CONSUMER_OFFSET
            | request_code::UPDATE_CONSUMER_OFFSET
            | request_code::GET_MAX_OFFSET
            | request_code::GET_MIN_OFFSET
            | request_code::QUERY_CONSUME_QUEUE => {
                let answer = self.queue_query(&request.cmd, now_ms);
                self.reply(request.reply, answer);
            }
            request_code::GET_EARLIEST_MSG_STORETIME | request_code::SEARCH_OFFSET_BY_TIMESTAMP => {
                self.time_query(request, PullRead::Background)
            }
            request_code::CONSUMER_SEND_MSG_BACK => self.send_back(request, now_ms),
            request_code::VIEW_MESSAGE_BY_ID => self.view_message(request),
            request_code::CONSUME_MESSAGE_DIRECTLY => self.consume_directly(request, now_ms),
            code if gather::is_gathered(code) => self.gather_request(request, now_ms),
            request_code::RINGMQ_REPLICA_PULL
            | request_code::RINGMQ_REPLICA_OFFSETS
            | request_code::RINGMQ_SCHEDULE_PROGRESS
                if !self.settings.is_master =>
            {
                self.refuse_replication_on_slave(&request)
            }
            request_code::RINGMQ_REPLICA_PULL => self.replica_pull(*request, now_ms, true),
            request_code::RINGMQ_REPLICA_OFFSETS => self.replica_offsets(&request),
            request_code::RINGMQ_SCHEDULE_PROGRESS => self.schedule_progress(&request),
            request_code::GET_ALL_DELAY_OFFSET => self.all_delay_offsets(&request),
            _ if self.id == 0 => self.control_request(request, now_ms),
            code => {
                let answer = response(
                    response_code::REQUEST_CODE_NOT_SUPPORTED,
                    format!(" request type {code} not supported"),
                );
                self.reply(request.reply, answer);
            }
        }
    }

    // ----- inbox -----

    /// Applies the snapshots waiting in the inbox now. A request that finds
    /// a topic or group missing calls this before refusing: shard 0 sent
    /// the snapshot creating it before answering the client's previous
    /// request (its heartbeat, say), so it is in the inbox by the time the
    /// client's next request arrives, though maybe not yet applied. The
    /// common path reads no channel. Everything else taken out meanwhile
    /// (requests above all) waits, in order, for the turn's drain: run from
    /// here, a request that refreshed in turn nested another, one frame
    /// chain per waiting request, until a stream of sends to a missing
    /// topic overflowed the shard's stack (thirty-seventh session).
    ///
    /// Set-aside messages are bounded by [`INBOX_MESSAGES_PER_TURN_MAX`]:
    /// past it the inbox is left as it is (a snapshot behind a full backlog
    /// is then not seen, and the request refused), so the bounded channel
    /// still pushes back on the shards that fill it.
    pub(crate) fn refresh_snapshots(&mut self) {
        while self.deferred.len() < INBOX_MESSAGES_PER_TURN_MAX {
            let Some(msg) = self.links.as_mut().and_then(Links::receive) else {
                return;
            };
            if let Some(other) = self.apply_snapshot(msg) {
                self.deferred.push_back(other);
            }
        }
    }

    /// Applies `msg` if it is a snapshot (topics, groups, settings,
    /// subscriptions), noting when held pulls may wait for it
    /// (`retry_held_due`); any other message is given back.
    fn apply_snapshot(&mut self, msg: ShardMsg) -> Option<ShardMsg> {
        match msg {
            ShardMsg::Topics(topics) => {
                self.topics = topics;
                self.retry_held_due = true;
            }
            ShardMsg::Groups(groups) => self.groups = groups,
            ShardMsg::Settings(settings) => self.apply_settings(settings),
            ShardMsg::Subscriptions(subs) => {
                self.subs = subs;
                self.retry_held_due = true;
            }
            other => return Some(other),
        }
        None
    }

    fn drain_inbox(&mut self, now_ms: i64) {
        for _ in 0..INBOX_MESSAGES_PER_TURN_MAX {
            let msg = match self.deferred.pop_front() {
                Some(msg) => msg,
                None => match self.links.as_mut().and_then(Links::receive) {
                    Some(msg) => msg,
                    None => break,
                },
            };
            self.apply_inbox_message(msg, now_ms);
        }
        if std::mem::take(&mut self.retry_held_due) {
            self.retry_held_after_snapshot(now_ms);
        }
    }

    /// Runs or applies one inbox message; held pulls a snapshot may let go
    /// on are retried at once.
    fn apply_inbox_message(&mut self, msg: ShardMsg, now_ms: i64) {
        let Some(msg) = self.apply_snapshot(msg) else {
            if std::mem::take(&mut self.retry_held_due) {
                self.retry_held_after_snapshot(now_ms);
            }
            return;
        };
        match msg {
            ShardMsg::Request(request) => self.execute(request, now_ms),
            ShardMsg::Outbound(conn, cmd) => self.deliver(self.id, conn, cmd), // wired by txn
            ShardMsg::SplicedOutbound(conn, cmd, body) => self.spliced_out.push((conn, cmd, body)),
            ShardMsg::Topics(_)
            | ShardMsg::Groups(_)
            | ShardMsg::Settings(_)
            | ShardMsg::Subscriptions(_) => unreachable!("snapshots are applied above"),
            ShardMsg::Closed(conn) => self.control_connection_closed(conn, now_ms),
            ShardMsg::Close(conn) => self.closes.push(conn),
            ShardMsg::TopicDeleted(topic) => self.forget_deleted_topic(&topic),
            ShardMsg::GroupOffsetsDeleted(group) => {
                self.offsets.remove_group(&group);
            }
            ShardMsg::EnsureGroup(group) => self.control_ensure_group(&group, now_ms),
            ShardMsg::StatsRequest(query) => {
                let stats = Box::new(self.current_stats());
                if let Some(links) = &mut self.links {
                    links.send(0, ShardMsg::Stats(query, stats));
                }
            }
            ShardMsg::Stats(query, stats) => self.on_shard_stats(query, &stats, now_ms),
            ShardMsg::Ask { query, from, ask } => {
                let to = query::PartTo::Shard { shard: from, query };
                if let Some(part) = self.answer_ask(&ask, to, now_ms)
                    && let Some(links) = &mut self.links
                {
                    links.send(from, ShardMsg::Part(query, Box::new(part)));
                }
            }
            ShardMsg::Part(query, part) => self.on_part(query, *part, now_ms),
            ShardMsg::ClientAnswer(conn, answer) => self.on_client_answer(conn, answer),
            ShardMsg::Replica(call) => self.on_replica_call(call, now_ms),
            ShardMsg::MasterConfig(config) => self.apply_master_config(&config),
            ShardMsg::MasterOffsets(offsets) => self.take_master_offsets(&offsets),
            ShardMsg::MasterSchedule(schedule) => self.take_master_schedule(*schedule, now_ms),
            ShardMsg::ReplicaStatus(status) => self.replica.status = Some(status),
            ShardMsg::CallConsumer(request) => self.call_consumer(request, now_ms),
        }
    }

    // ----- the store -----

    fn poll_store(&mut self, now_ms: i64) {
        if self.store.is_none() {
            return;
        }
        let mut acks = std::mem::take(&mut self.acks);
        let now = now_ms.max(0) as u64;
        if let Err(error) = self.store_mut().poll(now, &mut acks)
            && !self.store_failed
        {
            tracing::error!(%error, shard = self.id, "the store's disk submission failed");
            self.store_failed = true;
        }
        for ack in acks.drain(..) {
            // wired by txn: transaction appends are acknowledged there.
            if let Some(ack) = self.txn_on_ack(ack, now_ms) {
                self.on_ack(ack, now_ms);
            }
        }
        self.acks = acks;
    }

    /// This shard's counters with the store's current figures.
    pub(crate) fn current_stats(&self) -> RuntimeStats {
        let mut stats = self.stats.clone();
        if let Some(store) = &self.store {
            stats.commit_log_min_offset = store.commit_log_min_offset() as i64;
            stats.commit_log_max_offset = store.commit_log_max_offset() as i64;
            let appender = store.commit_log().appender();
            stats.flush_behind_bytes = appender.encoded().saturating_sub(appender.durable());
            stats.commit_log_sync_reads = store.commit_log().sync_reads();
        }
        stats.send_queue_size = self.pending_sends.len() as u64;
        stats.pull_queue_size = self.held.len() as u64;
        stats.set_tps(&self.tps.rates());
        stats
    }

    fn persist_offsets(&mut self, now_ms: i64) {
        if let Some(persister) = &self.persister
            && self.offsets.persist_due(now_ms)
        {
            persister.offsets(self.id, self.offsets.to_file());
            self.offsets.mark_persisted(now_ms);
        }
    }
}

impl RequestHandler for ShardHandler {
    fn handle(
        &mut self,
        conn: ConnectionId,
        peer: SocketAddr,
        cmd: RemotingCommand,
        now_ms: i64,
    ) -> Option<RemotingCommand> {
        if cmd.is_response() {
            // A client answering a request the broker forwarded to it.
            self.on_client_answer(conn, cmd);
            return None;
        }
        let mut cmd = cmd;
        send::neutralize_internal_marks(&mut cmd); // wired by schedule
        let reply = ReplyTo {
            shard: self.id,
            conn,
            opaque: cmd.opaque,
            oneway: cmd.is_oneway(),
        };
        self.dispatch(Box::new(Request { cmd, reply, peer }), now_ms);
        None
    }

    fn on_closed(&mut self, conn: ConnectionId) {
        if self.id == 0 {
            self.control_connection_closed(conn, crate::shard::runtime::wall_clock_ms());
        } else if let Some(links) = &mut self.links {
            links.send(0, ShardMsg::Closed(conn));
        }
    }

    fn on_tick(&mut self, now_ms: i64) {
        self.stats.roll_day_if_due(now_ms);
        self.tps.record(now_ms, self.stats.tps_counters());
        self.stats_table.sample(now_ms);
        self.control_tick(now_ms);
        self.persist_offsets(now_ms);
        self.expire_replica_peers(now_ms);
    }

    fn take_close_requests(&mut self, out: &mut Vec<ConnectionId>) {
        out.append(&mut self.closes);
    }

    fn take_outbound(&mut self, out: &mut Vec<(ConnectionId, RemotingCommand)>) {
        out.append(&mut self.outbound);
    }

    fn take_spliced(&mut self, out: &mut Vec<(ConnectionId, RemotingCommand, Vec<SplicedBody>)>) {
        out.append(&mut self.spliced_out);
    }

    fn on_turn(&mut self, now_ms: i64) {
        self.drain_inbox(now_ms);
        self.poll_store(now_ms);
        self.run_reading_pulls(now_ms);
        self.run_replica_ships(now_ms);
        self.run_replica_master(now_ms);
        self.run_replica_slave();
        self.run_delay(now_ms); // wired by schedule
        self.run_timer(now_ms); // wired by schedule
        self.expire_held(now_ms);
        self.release_persisted(now_ms);
        self.release_registered(now_ms);
        if let Some(links) = &mut self.links {
            links.flush();
        }
    }

    fn wait_bound(&self) -> Option<Duration> {
        let store = self.store.as_ref()?;
        let appender = store.commit_log().appender();
        if appender.unsubmitted_ready() {
            // The partial tail block goes out on the next poll. (Behind a
            // commit in flight it waits for that commit's completion, which
            // wakes the ring: polling meanwhile would only spin.)
            return Some(Duration::ZERO);
        }
        if !self.deferred.is_empty() || self.retry_held_due {
            // A refresh after this turn's drain set messages aside, or
            // applied a snapshot held pulls may wait for.
            return Some(Duration::ZERO);
        }
        if self.links.as_ref().is_some_and(Links::has_backlog) {
            // Another shard's inbox is full: retry soon, without spinning.
            return Some(BACKLOG_RETRY);
        }
        let mut bound = if self.pending_sends.is_empty() && self.replica.waits.is_empty() {
            STORE_IDLE_POLL
        } else {
            PENDING_ACK_POLL
        };
        if let Some(until) = self.delay_wait_bound(crate::shard::runtime::wall_clock_ms()) {
            bound = bound.min(until); // wired by schedule
        }
        if let Some(until) = self.timer_wait_bound(crate::shard::runtime::wall_clock_ms()) {
            bound = bound.min(until); // wired by schedule
        }
        if self.awaits_persist() || self.awaits_registration() {
            // The persister and the registrar wake the ring; this only
            // bounds a lost wake-up (and the registration's hold).
            bound = bound.min(PERSIST_ANSWER_POLL);
        }
        let replica_deadlines = self.replica.held.iter().map(|held| held.deadline_ms);
        let pull_deadlines = self.held.iter().map(|held| held.deadline_ms);
        let deadlines = pull_deadlines
            .chain(replica_deadlines)
            .chain(self.slave_wait_deadline());
        if let Some(deadline) = deadlines.min() {
            let now = crate::shard::runtime::wall_clock_ms();
            let until = Duration::from_millis(deadline.saturating_sub(now).max(0) as u64);
            bound = bound.min(until);
        }
        Some(bound)
    }

    fn has_pending(&self) -> bool {
        !self.deferred.is_empty()
            || !self.pending_sends.is_empty()
            || !self.held.is_empty()
            || !self.reading_pulls.is_empty()
            || !self.reading_queries.is_empty()
            || self.replica_pending()
            || self.links.as_ref().is_some_and(Links::has_backlog)
    }

    fn on_stop(&mut self, now_ms: i64) {
        self.answer_all_held(now_ms);
        self.answer_held_replica_pulls(now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::pick_queue_for;

    #[test]
    fn queue_picks_cycle_over_the_queues_the_shard_owns() {
        // Shard 1 of 3 with 8 queues owns 1, 4 and 7.
        let picks: Vec<u32> = (0..6).map(|pick| pick_queue_for(1, 3, 8, pick)).collect();
        assert_eq!(picks, vec![1, 4, 7, 1, 4, 7]);
    }

    #[test]
    fn a_shard_owning_no_queue_of_the_topic_picks_among_all() {
        // Shard 3 of 4, topic with 2 queues: none is shard 3's.
        let picks: Vec<u32> = (0..4).map(|pick| pick_queue_for(3, 4, 2, pick)).collect();
        assert_eq!(picks, vec![0, 1, 0, 1]);
    }
}
