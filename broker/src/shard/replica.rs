//! Master/slave replication on the shards (docs/architecture.md,
//! "Replication").
//!
//! Master: RINGMQ_REPLICA_PULL goes to the shard it names, which checks
//! the slave's position once per connection ([`Store::check_replica_position`]
//! with the slave's last record), then answers whole records from the
//! slave's end ([`Store::replica_chunk`]: from the tail cache at once,
//! older ones read in the background, the pull parked with the consumers'
//! parked pulls and executed again once the read completes, so a slave far
//! behind never holds the shard on the disk); a pull that finds nothing new is
//! held until the store acknowledges more or its `suspendMillis` passes. A
//! slave that says `raw` gets older records spliced instead: the bytes
//! from its end on, cut anywhere, go from the segment into pipes, up to
//! [`REPLICA_SHIP_BYTES_MAX`] each ([`Store::start_ship`], side by side,
//! the pull parked until they are all in), and from the pipes to the socket
//! on the connection's shard ([`crate::server::SplicedBody`]); the slave
//! appends their whole records and asks again from there. Records in memory are
//! copied as before. A slave that holds no record below this log's start is
//! told where it starts (`startOffset`), and its shard moves its empty log
//! there ([`ReplicaCall::StartAt`]).
//!
//! Slave: the replicator thread of each shard ([`crate::replication`])
//! asks its shard for the log's position and hands it the master's chunks
//! ([`ReplicaCall`]); the shard appends them ([`Store::append_replicated`])
//! and answers once they are acknowledgeable under its own flush mode, so
//! the `durableOffset` the thread reports next never runs ahead of the log.
//!
//! [`Store::check_replica_position`]: ringmq_storage::store::Store::check_replica_position
//! [`Store::replica_chunk`]: ringmq_storage::store::Store::replica_chunk
//! [`Store::append_replicated`]: ringmq_storage::store::Store::append_replicated
//! [`Store::start_ship`]: ringmq_storage::store::Store::start_ship
//!
//! SYNC_MASTER: a send the store acknowledged is answered once a slave's
//! reported `durableOffset` covers the master's ack position at that
//! moment (which covers the record), FLUSH_SLAVE_TIMEOUT after
//! `syncFlushTimeout`, or SLAVE_NOT_AVAILABLE at once when no slave pulled
//! within [`REPLICA_PEER_ALIVE_MS`] or the closest one is more than
//! [`REPLICA_IN_SYNC_GAP_MAX`] behind (Java's `haMaxGapNotInSync`). The
//! message is stored in every case, as in Java.
//!
//! ```text
//!  slave thread ──Position──▶ slave shard ──(end, last record)──▶ thread
//!  thread ──REPLICA_PULL(offset, durable, last record, raw)──▶ master shard k
//!        ◀── body: whole records from offset (held while none), or, raw and
//!            not in memory: the bytes from offset, spliced (segment ─▶ pipe ─▶ socket) ──
//!  thread ──Append(from, body)──▶ slave shard ── ack position ≥ end ──▶ thread
//! ```
//!
//! # Invariants
//! - A master serves a connection from an offset only after checking the
//!   slave's last record there, or from the end of what it served that
//!   connection last, or from within the last raw chunk it served it (the
//!   slave ends at the last whole record it found there).
//! - A ship pipe is handed out only when no one else holds it and it is
//!   empty (a connection closed in the middle of a body leaves bytes in its
//!   pipe, which is then dropped).
//! - A held replica pull is answered exactly once: when the store
//!   acknowledges past its offset, at its deadline, or at stop.
//! - A slave answers an append only once the ack position passes its end.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::mpsc::Sender;

use bytes::Bytes;
use ringmq_protocol::code::response_code;
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{
    ReplicaPullRequestHeader, ReplicaPullResponseHeader, ScheduleProgressResponseHeader,
};
use ringmq_protocol::json::{
    ConsumerOffsetFile, DelayOffsetFile, HaClientRuntimeInfo, HaConnectionRuntimeInfo,
    HaRuntimeInfo, SubscriptionGroupWrapper, TopicConfigSerializeWrapper,
};
use ringmq_storage::aligned::BLOCK_SIZE;
use ringmq_storage::commit_log::{
    RecordMark, ReplicaChunk, ReplicaPosition, ShipPipe, Shipment, shard_offset,
};
use ringmq_storage::error::StorageError;
use ringmq_storage::store::PullRead;

use super::link::{ReplyTo, Request};
use super::timer::TimerProgressFile;
use super::{ShardHandler, response};
use crate::config::BrokerRole;
use crate::consumer_offset::split_offset_key;
use crate::features::transaction::{HALF_QUEUE_ID, TRANSACTION_CHECK_GROUP};
use crate::replication::{ReplicaStatus, ReplicaStatusSnapshot};
use crate::server::{ConnectionId, SplicedBody};
use crate::topic_config::{TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC};
use crate::tps::BytesPerSecond;

/// Most bytes one replica pull answers (about: a larger record comes whole).
pub const REPLICA_CHUNK_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Capacity of a master's pipes for splicing older records to slaves: the
/// most a process without CAP_SYS_RESOURCE may ask by default
/// (`/proc/sys/fs/pipe-max-size`).
pub const REPLICA_SHIP_PIPE_BYTES: usize = 1024 * 1024;
/// Most bytes of one spliced chunk: a pipe less the partial blocks around
/// the range (a splice from an O_DIRECT segment moves whole blocks).
pub const REPLICA_SHIP_BYTES_MAX: usize = REPLICA_SHIP_PIPE_BYTES - 2 * BLOCK_SIZE;
/// Pipes one master shard keeps for splicing: a chunk of
/// [`REPLICA_CHUNK_BYTES_MAX`] takes five (spliced from the disk side by
/// side), and the pipes of the answer before may not all be back yet. A
/// chunk takes what is free; with none free it is copied.
pub const REPLICA_SHIP_PIPES_MAX: usize = 8;
/// Longest a master holds a replica pull that finds nothing new.
pub const REPLICA_SUSPEND_MS_MAX: i64 = 5_000;
/// A slave connection not heard from for this long is forgotten (its
/// next pull must prove its position again).
pub const REPLICA_PEER_IDLE_MS: i64 = 60_000;
/// A slave that pulled within this long counts as connected for
/// SYNC_MASTER (a caught-up slave's pull is held for at most
/// [`REPLICA_SUSPEND_MS_MAX`], then renewed).
pub const REPLICA_PEER_ALIVE_MS: i64 = 2 * REPLICA_SUSPEND_MS_MAX;
/// A slave further behind than this is not in sync: SYNC_MASTER sends are
/// answered SLAVE_NOT_AVAILABLE rather than waiting (Java's
/// `haMaxGapNotInSync` default).
pub const REPLICA_IN_SYNC_GAP_MAX: u64 = 256 * 1024 * 1024;

/// A slave's call to its own shard, from its replicator thread.
#[derive(Debug)]
pub enum ReplicaCall {
    /// Where the log ends, its last record, and the ack position.
    Position(Sender<Result<(ReplicaPosition, u64), String>>),
    /// Start the log, which holds no record, at segment `base` (where the
    /// master's now starts).
    StartAt {
        /// Shard-local segment base.
        base: u64,
        /// Where the answer goes.
        reply: Sender<Result<(), String>>,
    },
    /// Append a master's chunk at `from`; answered with the new end once
    /// acknowledgeable.
    Append {
        /// Shard-local offset: the log's end.
        from: u64,
        /// Whole records, as the master sent them.
        bytes: Bytes,
        /// Where the answer goes.
        reply: Sender<Result<u64, String>>,
    },
}

/// A replica pull's SUCCESS answer.
fn replica_pull_answer(
    master_offset: u64,
    start_offset: Option<u64>,
    body: Vec<u8>,
) -> RemotingCommand {
    RemotingCommand::new_response(response_code::SUCCESS, 0, None)
        .with_custom_header(&ReplicaPullResponseHeader {
            master_offset: master_offset as i64,
            start_offset: start_offset.map(|offset| offset as i64),
            raw: None,
        })
        .with_body(Bytes::from(body))
}

/// The master's topic and subscription group tables, as a slave fetches
/// them every [`crate::replication::MASTER_CONFIG_SYNC_PERIOD`] (Java's
/// `SlaveSynchronize`), so that it serves pulls of its master's topics.
#[derive(Debug)]
pub struct MasterConfig {
    /// GET_ALL_TOPIC_CONFIG's body.
    pub topics: TopicConfigSerializeWrapper,
    /// GET_ALL_SUBSCRIPTIONGROUP_CONFIG's body.
    pub groups: SubscriptionGroupWrapper,
}

/// The master's delivery progress of delayed and timer messages (and its
/// transaction checker's progress), as a slave takes it once its own log holds every delivery it counts
/// ([`crate::replication`]), so that the slave, restarted as a master,
/// resumes delivering where its master stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterSchedule {
    /// RINGMQ_SCHEDULE_PROGRESS's body: every level's progress.
    pub delay: DelayOffsetFile,
    /// Its `timerProgress`, if the master has a timer wheel.
    pub timer: Option<TimerProgressFile>,
    /// Its `transactionHalfOffset`: the transaction checker's progress in
    /// the half queue, if it has checked.
    pub transaction_half: Option<i64>,
    /// Its `transactionOpOffset`: the checker's progress in the op queue.
    pub transaction_op: Option<i64>,
}

/// A slave connection as its master's shard knows it.
#[derive(Debug, Clone)]
pub(crate) struct ReplicaPeer {
    /// Where its next pull starts if it took everything served.
    next: u64,
    /// What it reported durable last.
    durable: u64,
    /// When it pulled last (ms since the epoch).
    seen_ms: i64,
    /// The slave (its `slaveAddr`, or the connection's address).
    slave: String,
    /// Where the connection's first pull started.
    transfer_from: u64,
    /// The end of the raw chunk served last: the slave continues anywhere
    /// after `next` up to here.
    raw_end: Option<u64>,
    /// A chunk was spliced to it (logged once per connection).
    spliced: bool,
    /// Record bytes served to it, per second.
    transferred: BytesPerSecond,
}

impl ReplicaPeer {
    /// SYNC_MASTER's rule: pulled lately and not too far behind `end`.
    fn in_sync(&self, end: u64, now_ms: i64) -> bool {
        now_ms - self.seen_ms <= REPLICA_PEER_ALIVE_MS
            && end.saturating_sub(self.durable) < REPLICA_IN_SYNC_GAP_MAX
    }
}

/// One shard's part of GET_BROKER_HA_STATUS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaPart {
    /// The shard's log end (shard-local ack position).
    pub log_end: u64,
    /// A master's slave connections to this shard.
    pub slaves: Vec<SlaveFigures>,
    /// A slave's replicator of this shard, as it reports itself.
    pub replica: Option<ReplicaStatusSnapshot>,
}

/// One slave connection to a master's shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlaveFigures {
    /// The slave.
    pub slave: String,
    /// What it reported durable (shard-local).
    pub durable: u64,
    /// Where the connection's transfer started (shard-local).
    pub transfer_from: u64,
    /// Whether it counts as in sync for SYNC_MASTER.
    pub in_sync: bool,
    /// Record bytes served to it in the last whole second.
    pub transferred_per_s: u64,
}

/// GET_BROKER_HA_STATUS's answer from every shard's part. A broker has one
/// CommitLog per shard, so offsets are the shards' own offsets added (bytes
/// of the logs): a master's `masterCommitLogMaxOffset` is its logs' ends
/// added; one entry per slave, its `slaveAckOffset` what it has durable on
/// every shard added, `diff` the rest, and `inSync` only when it is in sync
/// on every shard. A slave reports its logs' ends, the master's positions
/// its replicators last heard, and `activated` when every replicator's last
/// pull was answered. `transferredByteInSecond` is the record bytes of the
/// last whole second, served to that slave by every shard (master), or
/// received by every replicator (slave).
pub(crate) fn ha_runtime_info(
    is_master: bool,
    shard_count: u16,
    parts: &[HaPart],
) -> HaRuntimeInfo {
    let log_end: u64 = parts.iter().map(|part| part.log_end).sum();
    if !is_master {
        let replicas: Vec<&ReplicaStatusSnapshot> = parts
            .iter()
            .filter_map(|part| part.replica.as_ref())
            .collect();
        let client = HaClientRuntimeInfo {
            master_addr: replicas.iter().find_map(|r| r.master_addr.clone()),
            transferred_byte_in_second: replicas.iter().map(|r| r.transferred_per_s).sum::<u64>()
                as i64,
            max_offset: log_end as i64,
            last_read_timestamp: replicas.iter().map(|r| r.last_read_ms).max().unwrap_or(0),
            last_write_timestamp: replicas.iter().map(|r| r.last_write_ms).max().unwrap_or(0),
            master_flush_offset: replicas.iter().map(|r| r.master_ack).sum::<u64>() as i64,
            activated: replicas.len() == usize::from(shard_count)
                && replicas.iter().all(|r| r.connected),
        };
        return HaRuntimeInfo {
            master: false,
            ha_client_runtime_info: client,
            ..HaRuntimeInfo::default()
        };
    }
    let mut by_slave: BTreeMap<&str, Vec<&SlaveFigures>> = BTreeMap::new();
    for figures in parts.iter().flat_map(|part| &part.slaves) {
        by_slave.entry(&figures.slave).or_default().push(figures);
    }
    let connections: Vec<HaConnectionRuntimeInfo> = by_slave
        .into_iter()
        .map(|(slave, shards)| {
            let durable: u64 = shards.iter().map(|f| f.durable).sum();
            HaConnectionRuntimeInfo {
                addr: slave.to_owned(),
                slave_ack_offset: durable as i64,
                diff: log_end.saturating_sub(durable) as i64,
                in_sync: shards.len() == usize::from(shard_count)
                    && shards.iter().all(|f| f.in_sync),
                transferred_byte_in_second: shards.iter().map(|f| f.transferred_per_s).sum::<u64>()
                    as i64,
                transfer_from_where: shards.iter().map(|f| f.transfer_from).sum::<u64>() as i64,
            }
        })
        .collect();
    HaRuntimeInfo {
        master: true,
        master_commit_log_max_offset: log_end as i64,
        in_sync_slave_nums: connections.iter().filter(|c| c.in_sync).count() as i32,
        ha_connection_info: connections,
        ha_client_runtime_info: HaClientRuntimeInfo::default(),
    }
}

/// A replica pull waiting for the store to acknowledge past its offset.
#[derive(Debug)]
pub(crate) struct HeldReplicaPull {
    request: Request,
    from: u64,
    pub(crate) deadline_ms: i64,
}

/// A slave's append waiting to become acknowledgeable.
#[derive(Debug)]
pub(crate) struct ReplicaWait {
    end: u64,
    reply: Sender<Result<u64, String>>,
}

/// A SYNC_MASTER send waiting for a slave.
#[derive(Debug)]
pub(crate) struct SlaveWait {
    /// The master's ack position when the send was acknowledged locally.
    end: u64,
    deadline_ms: i64,
    reply: ReplyTo,
    /// The SUCCESS answer, sent as it is or with another code.
    answer: RemotingCommand,
}

/// The replication state of one shard.
#[derive(Debug, Default)]
pub(crate) struct ReplicaState {
    /// Master: slave connections.
    pub(crate) peers: HashMap<PeerKey, ReplicaPeer>,
    /// Master: pulls waiting for new records.
    pub(crate) held: Vec<HeldReplicaPull>,
    /// Slave: appends waiting for their ack.
    pub(crate) waits: Vec<ReplicaWait>,
    /// SYNC_MASTER: sends waiting for a slave, in ack order (so both
    /// their ends and their deadlines grow from front to back).
    pub(crate) slave_waits: VecDeque<SlaveWait>,
    /// Slave: what this shard's replicator thread reports.
    pub(crate) status: Option<Arc<ReplicaStatus>>,
    /// Master: pulls whose chunk is being spliced into a pipe.
    pub(crate) shipping: Vec<ShippingPull>,
    /// Master: pipes for splicing (see [`ShipPipes`]).
    pub(crate) pipes: ShipPipes,
}

/// A replica pull's chunk: copied (or read to be copied), or being
/// spliced into a pipe.
enum Chunk {
    Copied(ReplicaChunk),
    Shipping(Vec<ShipPart>),
}

/// A replica pull waiting for its chunk's splices into pipes.
#[derive(Debug)]
pub(crate) struct ShippingPull {
    request: Request,
    key: PeerKey,
    from: u64,
    /// The chunk's consecutive ranges, in order.
    parts: Vec<ShipPart>,
}

/// One range of a chunk, spliced into its own pipe.
#[derive(Debug)]
pub(crate) struct ShipPart {
    ticket: u64,
    pipe: Arc<ShipPipe>,
    /// Where its bytes are in the pipe, once they are all in.
    shipment: Option<Shipment>,
}

/// A master shard's pipes for splicing older records to slaves.
#[derive(Debug, Default)]
pub(crate) struct ShipPipes {
    pipes: Vec<Arc<ShipPipe>>,
    /// Creating a pipe failed once (logged): chunks are copied from then on.
    unavailable: bool,
}

impl ShipPipes {
    /// A pipe no one else holds, empty; a new one while fewer than
    /// [`REPLICA_SHIP_PIPES_MAX`] exist; None otherwise.
    fn free(&mut self, shard: u16) -> Option<Arc<ShipPipe>> {
        // A pipe given back with bytes in it (its connection closed in the
        // middle of a body) is dropped.
        self.pipes
            .retain(|pipe| Arc::strong_count(pipe) > 1 || pipe.held().is_ok_and(|held| held == 0));
        if let Some(pipe) = self.pipes.iter().find(|pipe| Arc::strong_count(pipe) == 1) {
            return Some(Arc::clone(pipe));
        }
        if self.unavailable || self.pipes.len() >= REPLICA_SHIP_PIPES_MAX {
            return None;
        }
        match ShipPipe::new(REPLICA_SHIP_PIPE_BYTES) {
            Ok(pipe) => {
                let pipe = Arc::new(pipe);
                self.pipes.push(Arc::clone(&pipe));
                Some(pipe)
            }
            Err(error) => {
                tracing::warn!(shard, %error, "no pipe for splicing to slaves: their chunks are copied");
                self.unavailable = true;
                None
            }
        }
    }
}

/// What a replica pull gets now.
enum Served {
    Answer(RemotingCommand),
    Hold {
        from: u64,
        suspend_ms: i64,
    },
    /// Its records are being read from the segment: executed again once
    /// the read with this ticket is done (as a consumer's pull).
    Reading(u64),
    /// Its chunk from `from` is being spliced into pipes: answered once
    /// every part's ship is done.
    Shipping {
        from: u64,
        parts: Vec<ShipPart>,
    },
}

/// A slave connection: (server shard, connection).
type PeerKey = (u16, ConnectionId);

impl ShardHandler {
    /// Slave: whether its master counts as online, for a pull's redirect
    /// (Java's `minBrokerIdInGroup == 0`): this shard's replicator thread
    /// is connected and the master answered it within
    /// [`REPLICA_PEER_ALIVE_MS`] (a caught-up slave's pull is answered at
    /// least every [`REPLICA_SUSPEND_MS_MAX`]). False on a master.
    pub(crate) fn master_online(&self, now_ms: i64) -> bool {
        self.replica.status.as_ref().is_some_and(|status| {
            let seen = status.snapshot();
            seen.connected && now_ms - seen.last_read_ms <= REPLICA_PEER_ALIVE_MS
        })
    }

    /// Executes RINGMQ_REPLICA_PULL on the shard it names; `first` is
    /// false when a held pull is executed again (it is answered, not held).
    pub(crate) fn replica_pull(&mut self, request: Request, now_ms: i64, first: bool) {
        self.replica_pull_reading(request, now_ms, first, PullRead::Background);
    }

    /// Executes a replica pull whose records not in memory are read as
    /// `read` says: in the background the first time (the pull is parked
    /// with the consumers' pulls, see `run_reading_pulls`), synchronously
    /// if still missing when it is executed again after that read.
    pub(crate) fn replica_pull_reading(
        &mut self,
        request: Request,
        now_ms: i64,
        first: bool,
        read: PullRead,
    ) {
        match self.serve_replica_pull(&request, now_ms, first, read) {
            Served::Answer(answer) => self.reply(request.reply, answer),
            Served::Hold { from, suspend_ms } => self.replica.held.push(HeldReplicaPull {
                request,
                from,
                deadline_ms: now_ms + suspend_ms.clamp(0, REPLICA_SUSPEND_MS_MAX),
            }),
            Served::Reading(ticket) => {
                self.park_reading_pull(request, ticket, first, super::pull::Parked::ReplicaPull);
            }
            Served::Shipping { from, parts } => {
                let key = (request.reply.shard, request.reply.conn);
                self.replica.shipping.push(ShippingPull {
                    request,
                    key,
                    from,
                    parts,
                });
            }
        }
    }

    /// Starts splicing the chunk of a slave at local `from`, up to
    /// `max_bytes`, into free pipes, one range each, when its bytes are
    /// not in memory; None to copy it instead. On an error, ships already
    /// started complete with no one waiting (their pipes, left holding
    /// bytes, are dropped).
    fn start_replica_ship(
        &mut self,
        from: u64,
        max_bytes: usize,
    ) -> Result<Option<Vec<ShipPart>>, StorageError> {
        let Some(mut left) = self.store().replica_ship_len(from, max_bytes)? else {
            return Ok(None);
        };
        let shard_id = self.store().config().shard_id;
        let mut parts = Vec::new();
        let mut at = from;
        while left > 0 {
            let Some(pipe) = self.replica.pipes.free(self.id) else {
                break;
            };
            let len = left.min(REPLICA_SHIP_BYTES_MAX);
            let Some(ticket) =
                self.store_mut()
                    .start_ship(shard_offset(shard_id, at), len, &pipe)?
            else {
                break;
            };
            parts.push(ShipPart {
                ticket,
                pipe,
                shipment: None,
            });
            at += len as u64;
            left -= len;
        }
        Ok((!parts.is_empty()).then_some(parts))
    }

    /// After the store's poll: answers the replica pulls whose chunks are
    /// now all in their pipes, with the pipes as the body, spliced on by
    /// the connection's shard.
    pub(crate) fn run_replica_ships(&mut self, now_ms: i64) {
        if self.replica.shipping.is_empty() || self.store.is_none() {
            return;
        }
        let mut done = Vec::new();
        self.store_mut().take_shipped(&mut done);
        for shipped in done {
            let ticket = match &shipped {
                Ok(shipment) => shipment.ticket,
                Err((ticket, _)) => *ticket,
            };
            let Some(index) = self
                .replica
                .shipping
                .iter()
                .position(|pull| pull.parts.iter().any(|part| part.ticket == ticket))
            else {
                continue;
            };
            match shipped {
                Ok(shipment) => {
                    let pull = &mut self.replica.shipping[index];
                    if let Some(part) = pull.parts.iter_mut().find(|part| part.ticket == ticket) {
                        part.shipment = Some(shipment);
                    }
                    if pull.parts.iter().all(|part| part.shipment.is_some()) {
                        let pull = self.replica.shipping.swap_remove(index);
                        self.replica_shipped(pull, now_ms);
                    }
                }
                Err((_, error)) => {
                    let pull = self.replica.shipping.swap_remove(index);
                    let answer = self.replica_pull_failed(pull.key, pull.request.peer, &error);
                    self.reply(pull.request.reply, answer);
                }
            }
        }
    }

    /// The answer to a shipped pull: its chunk, cut anywhere, in its pipes.
    fn replica_shipped(&mut self, pull: ShippingPull, now_ms: i64) {
        let parts: Vec<SplicedBody> = pull
            .parts
            .into_iter()
            .filter_map(|part| {
                let shipment = part.shipment?;
                Some(SplicedBody {
                    pipe: part.pipe,
                    head: shipment.head,
                    len: shipment.len,
                    tail: shipment.tail,
                })
            })
            .collect();
        let len: usize = parts.iter().map(|part| part.len).sum();
        if let Some(peer) = self.replica.peers.get_mut(&pull.key) {
            if !peer.spliced {
                peer.spliced = true;
                tracing::info!(shard = self.id, slave = %peer.slave, from = pull.from, "splicing older records to a slave");
            }
            peer.raw_end = Some(pull.from + len as u64);
            peer.transferred.add(now_ms, len as u64);
        }
        let master_offset = self.store().commit_log().appender().ack_position();
        let answer = RemotingCommand::new_response(response_code::SUCCESS, 0, None)
            .with_custom_header(&ReplicaPullResponseHeader {
                master_offset: master_offset as i64,
                start_offset: None,
                raw: Some(true),
            });
        self.reply_spliced(pull.request.reply, answer, parts);
    }

    /// The answer to a replica pull, or the word to hold it.
    fn serve_replica_pull(
        &mut self,
        request: &Request,
        now_ms: i64,
        first: bool,
        read: PullRead,
    ) -> Served {
        let header: ReplicaPullRequestHeader = match request.cmd.decode_custom_header() {
            Ok(header) => header,
            Err(error) => {
                return Served::Answer(response(response_code::SYSTEM_ERROR, error.to_string()));
            }
        };
        let shard_count = i32::from(self.settings.shard_count);
        if header.shard_count != shard_count || header.shard != i32::from(self.id) {
            return Served::Answer(response(
                response_code::SYSTEM_ERROR,
                format!(
                    "the slave has {} shards and asks for shard {}; this master has {shard_count} \
                     (a slave needs its master's shard count)",
                    header.shard_count, header.shard
                ),
            ));
        }
        let segment_size = self.store().config().segment_size_bytes;
        if u64::try_from(header.segment_size).ok() != Some(segment_size) {
            return Served::Answer(response(
                response_code::SYSTEM_ERROR,
                format!(
                    "the slave's CommitLog segments are {} bytes, this master's {segment_size} \
                     (mapedFileSizeCommitLog must be equal)",
                    header.segment_size
                ),
            ));
        }
        let (Ok(from), Ok(durable)) = (
            u64::try_from(header.offset),
            u64::try_from(header.durable_offset),
        ) else {
            return Served::Answer(response(
                response_code::SYSTEM_ERROR,
                format!(
                    "negative offset {} or durableOffset {}",
                    header.offset, header.durable_offset
                ),
            ));
        };
        let key: PeerKey = (request.reply.shard, request.reply.conn);
        // After a raw chunk the slave goes on at a record boundary within
        // it (or at the next segment, after a BLANK: a segment start needs
        // no proof, see `check_replica_position`).
        let known = self.replica.peers.get(&key).is_some_and(|peer| {
            peer.next == from
                || peer
                    .raw_end
                    .is_some_and(|end| from > peer.next && from <= end)
        });
        if first && !known {
            let last_record = match (header.last_offset, header.last_size, header.last_crc) {
                (Some(offset), Some(size), Some(crc)) => Some(RecordMark {
                    offset: offset.max(0) as u64,
                    size: size.max(0) as u32,
                    crc: crc.clamp(0, i64::from(u32::MAX)) as u32,
                }),
                (None, None, None) => None,
                _ => {
                    return Served::Answer(response(
                        response_code::SYSTEM_ERROR,
                        format!(
                            "a replica pull from {from} on a new connection must name the \
                             slave's last record (lastOffset, lastSize, lastCrc)"
                        ),
                    ));
                }
            };
            let position = ReplicaPosition {
                end: from,
                last_record,
            };
            let min_offset = self.store().commit_log().min_local_offset();
            if last_record.is_none() && from < min_offset {
                // A slave that holds no record below this log: it starts
                // its log where this one now starts.
                return Served::Answer(replica_pull_answer(
                    self.store().commit_log().appender().ack_position(),
                    Some(min_offset),
                    Vec::new(),
                ));
            }
            if let Err(error) = self.store_mut().check_replica_position(&position) {
                tracing::warn!(shard = self.id, peer = %request.peer, %error, "a slave's position is refused");
                return Served::Answer(response(response_code::SYSTEM_ERROR, error.to_string()));
            }
        }
        let max_bytes = REPLICA_CHUNK_BYTES_MAX.min(header.max_bytes.max(1) as usize);
        // A slave that takes chunks cut anywhere gets older records spliced
        // (not when the pull runs again after a read: it started copying).
        let shipped = if header.raw == Some(true) && read == PullRead::Background {
            self.start_replica_ship(from, max_bytes)
        } else {
            Ok(None)
        };
        let chunk = match shipped {
            Ok(Some(parts)) => Ok(Chunk::Shipping(parts)),
            Ok(None) => self
                .store_mut()
                .replica_chunk(from, max_bytes, read)
                .map(Chunk::Copied),
            Err(error) => Err(error),
        };
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(error) => {
                return Served::Answer(self.replica_pull_failed(key, request.peer, &error));
            }
        };
        // Never past the slave's own end, whatever it reports.
        let durable = durable.min(from);
        match self.replica.peers.entry(key) {
            Entry::Occupied(mut known) => {
                let peer = known.get_mut();
                (peer.next, peer.durable, peer.seen_ms) = (from, durable, now_ms);
            }
            Entry::Vacant(new) => {
                new.insert(ReplicaPeer {
                    next: from,
                    durable,
                    seen_ms: now_ms,
                    slave: header
                        .slave_addr
                        .clone()
                        .unwrap_or_else(|| request.peer.to_string()),
                    transfer_from: from,
                    raw_end: None,
                    spliced: false,
                    transferred: BytesPerSecond::default(),
                });
            }
        }
        self.release_slave_waits(now_ms);
        let bytes = match chunk {
            Chunk::Copied(ReplicaChunk::Bytes(bytes)) => bytes,
            Chunk::Copied(ReplicaChunk::Reading(ticket)) => return Served::Reading(ticket),
            Chunk::Shipping(parts) => return Served::Shipping { from, parts },
        };
        if bytes.is_empty() && first && header.suspend_millis > 0 && !self.stopping() {
            return Served::Hold {
                from,
                suspend_ms: header.suspend_millis,
            };
        }
        Served::Answer(self.replica_served(key, from, bytes, now_ms))
    }

    /// The answer with `bytes` from `from` to the slave connection `key`.
    fn replica_served(
        &mut self,
        key: PeerKey,
        from: u64,
        bytes: Vec<u8>,
        now_ms: i64,
    ) -> RemotingCommand {
        // Past a segment's BLANK the slave goes on at the next segment: its
        // next pull there needs no new proof of its position (a read).
        let next = self.store().replica_chunk_end(from, &bytes);
        if let Some(peer) = self.replica.peers.get_mut(&key) {
            peer.next = next;
            peer.raw_end = None;
            peer.transferred.add(now_ms, bytes.len() as u64);
        }
        let master_offset = self.store().commit_log().appender().ack_position();
        replica_pull_answer(master_offset, None, bytes)
    }

    /// The answer to a replica pull the store could not serve; the slave
    /// connection proves its position again.
    fn replica_pull_failed(
        &mut self,
        key: PeerKey,
        peer: std::net::SocketAddr,
        error: &StorageError,
    ) -> RemotingCommand {
        tracing::warn!(shard = self.id, %peer, %error, "a replica pull failed");
        self.replica.peers.remove(&key);
        response(response_code::SYSTEM_ERROR, error.to_string())
    }

    /// After the store's poll: answers the SYNC_MASTER sends a slave has
    /// now, the held replica pulls the store now has records for, and those
    /// whose deadline passed.
    pub(crate) fn run_replica_master(&mut self, now_ms: i64) {
        self.release_slave_waits(now_ms);
        if self.replica.held.is_empty() || self.store.is_none() {
            return;
        }
        let ack = self.store().commit_log().appender().ack_position();
        let due = |held: &HeldReplicaPull| held.from < ack || held.deadline_ms <= now_ms;
        // Called every turn while a caught-up slave waits: no allocation
        // unless one is due.
        if !self.replica.held.iter().any(due) {
            return;
        }
        let (due, rest): (Vec<HeldReplicaPull>, Vec<HeldReplicaPull>) =
            std::mem::take(&mut self.replica.held)
                .into_iter()
                .partition(due);
        self.replica.held = rest;
        for held in due {
            self.replica_pull(held.request, now_ms, false);
        }
    }

    /// This shard's part of GET_BROKER_HA_STATUS.
    pub(crate) fn ha_part(&self, now_ms: i64) -> HaPart {
        let log_end = self.store().commit_log().appender().ack_position();
        HaPart {
            log_end,
            slaves: self
                .replica
                .peers
                .values()
                .map(|peer| SlaveFigures {
                    slave: peer.slave.clone(),
                    durable: peer.durable,
                    transfer_from: peer.transfer_from,
                    in_sync: peer.in_sync(log_end, now_ms),
                    transferred_per_s: peer.transferred.per_second(now_ms),
                })
                .collect(),
            replica: self.replica.status.as_ref().map(|status| status.snapshot()),
        }
    }

    /// Every tick: forgets slave connections idle for [`REPLICA_PEER_IDLE_MS`].
    pub(crate) fn expire_replica_peers(&mut self, now_ms: i64) {
        self.replica
            .peers
            .retain(|_, peer| now_ms - peer.seen_ms < REPLICA_PEER_IDLE_MS);
    }

    /// A stop began: answer every held replica pull now.
    pub(crate) fn answer_held_replica_pulls(&mut self, now_ms: i64) {
        for held in std::mem::take(&mut self.replica.held) {
            self.replica_pull(held.request, now_ms, false);
        }
        self.release_slave_waits(now_ms);
    }

    /// Slave: a call from this shard's replicator thread.
    pub(crate) fn on_replica_call(&mut self, call: ReplicaCall, now_ms: i64) {
        if self.store.is_none() {
            return;
        }
        match call {
            ReplicaCall::Position(reply) => {
                let ack = self.store().commit_log().appender().ack_position();
                let position = self
                    .store_mut()
                    .replica_position()
                    .map(|position| (position, ack))
                    .map_err(|error| error.to_string());
                let _ = reply.send(position);
            }
            ReplicaCall::StartAt { base, reply } => {
                let result = self
                    .store_mut()
                    .restart_empty_replica_at(base)
                    .map_err(|error| error.to_string());
                if let Err(error) = &result {
                    tracing::warn!(shard = self.id, base, %error, "the empty log cannot start at the master's first segment");
                }
                let _ = reply.send(result);
            }
            ReplicaCall::Append { from, bytes, reply } => {
                match self
                    .store_mut()
                    .append_replicated(from, &bytes, now_ms.max(0) as u64)
                {
                    Ok(end) => self.replica.waits.push(ReplicaWait { end, reply }),
                    Err(error) => {
                        tracing::warn!(shard = self.id, from, %error, "a replicated chunk is refused");
                        let _ = reply.send(Err(error.to_string()));
                    }
                }
            }
        }
    }

    /// Slave, shard 0: takes the master's topic and group tables (persisted
    /// and shown to the other shards as any change is).
    pub(crate) fn apply_master_config(&mut self, config: &MasterConfig) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        let topics = control.topics.replace_from_master(&config.topics);
        let groups = control.groups.replace_from_master(&config.groups);
        if !topics.is_empty() || !groups.is_empty() {
            tracing::info!(
                topics = topics.registered.len(),
                topics_deleted = topics.deleted.len(),
                groups = groups.updated.len(),
                groups_deleted = groups.deleted.len(),
                "took the master's topic and group configs"
            );
        }
        self.publish_topics(&topics);
        self.publish_groups(&groups);
    }

    /// Master: RINGMQ_REPLICA_OFFSETS, this shard's consumer offsets.
    pub(crate) fn replica_offsets(&mut self, request: &Request) {
        let answer = self.offsets.get_all_consumer_offset(&request.cmd);
        self.reply(request.reply, answer);
    }

    /// Master: RINGMQ_SCHEDULE_PROGRESS, this shard's log end and, on
    /// shard 0, the delivery progress of delayed and timer messages and the
    /// transaction checker's progress.
    pub(crate) fn schedule_progress(&mut self, request: &Request) {
        let mut header = ScheduleProgressResponseHeader::default();
        let mut delay = Vec::new();
        if self.id == 0 {
            self.delay_offsets().write_pretty(&mut delay);
            header.timer_progress = self
                .timer_progress()
                .map(|progress| String::from_utf8_lossy(&progress.encode()).into_owned());
            let checked = |topic| {
                self.offsets
                    .query(TRANSACTION_CHECK_GROUP, topic, HALF_QUEUE_ID)
            };
            header.transaction_half_offset = checked(TRANS_HALF_TOPIC);
            header.transaction_op_offset = checked(TRANS_OP_HALF_TOPIC);
        }
        // Read after the progress: every delivery the progress counts was
        // acknowledged before, so it lies below this end (on the shard that
        // stored it, whose end the slave asks for after this answer).
        header.log_end = self.store.as_ref().map_or(0, |store| {
            store.commit_log().appender().ack_position() as i64
        });
        let answer = RemotingCommand::new_response(response_code::SUCCESS, 0, None)
            .with_custom_header(&header)
            .with_body(Bytes::from(delay));
        self.reply(request.reply, answer);
    }

    /// Slave, shard 0: takes the master's delivery progress.
    pub(crate) fn take_master_schedule(&mut self, schedule: MasterSchedule, now_ms: i64) {
        self.take_master_delay_offsets(&schedule.delay);
        if let Some(timer) = schedule.timer {
            self.take_master_timer_progress(timer, now_ms);
        }
        for (topic, offset) in [
            (TRANS_HALF_TOPIC, schedule.transaction_half),
            (TRANS_OP_HALF_TOPIC, schedule.transaction_op),
        ] {
            if let Some(offset) = offset
                && self
                    .offsets
                    .query(TRANSACTION_CHECK_GROUP, topic, HALF_QUEUE_ID)
                    != Some(offset)
            {
                self.offsets.commit(
                    TRANSACTION_CHECK_GROUP,
                    topic,
                    HALF_QUEUE_ID,
                    offset,
                    now_ms,
                );
            }
        }
    }

    /// What a slave answers the replication requests, which only a master
    /// serves.
    pub(crate) fn refuse_replication_on_slave(&mut self, request: &Request) {
        let answer = response(
            response_code::SERVICE_NOT_AVAILABLE,
            "this broker is a slave: replicate from its master",
        );
        self.reply(request.reply, answer);
    }

    /// Slave: takes the master shard's consumer offsets of this shard's
    /// queues but the transaction checker's (written with the next offset
    /// persist).
    pub(crate) fn take_master_offsets(&mut self, master: &ConsumerOffsetFile) {
        let (id, router) = (self.id, self.router);
        // The transaction checker's progress comes with the delivery
        // progress, once the log covers it (`take_master_schedule`).
        let changed = self.offsets.take_from_master(master, |key, queue_id| {
            queue_id >= 0
                && router.shard_of(queue_id as u32).0 == id
                && split_offset_key(key).is_none_or(|(_, group)| group != TRANSACTION_CHECK_GROUP)
        });
        if changed > 0 {
            tracing::debug!(shard = id, changed, "took the master's consumer offsets");
        }
    }

    /// Slave, after the store's poll: answers the appends now acknowledgeable
    /// (or failed with the appender).
    pub(crate) fn run_replica_slave(&mut self) {
        if self.replica.waits.is_empty() || self.store.is_none() {
            return;
        }
        let appender = self.store().commit_log().appender();
        let ack = appender.ack_position();
        let failure = appender.failure().map(str::to_owned);
        self.replica.waits.retain(|wait| {
            if wait.end <= ack {
                let _ = wait.reply.send(Ok(wait.end));
                false
            } else if let Some(failure) = &failure {
                let _ = wait.reply.send(Err(format!("the store failed: {failure}")));
                false
            } else {
                true
            }
        });
    }

    /// Whether replication holds answers (a stop waits for them).
    pub(crate) fn replica_pending(&self) -> bool {
        !self.replica.held.is_empty()
            || !self.replica.shipping.is_empty()
            || !self.replica.waits.is_empty()
            || !self.replica.slave_waits.is_empty()
    }

    /// Whether an acknowledged send to `reply` waits for a slave: on a
    /// SYNC_MASTER, for client connections (internal deliveries do not).
    pub(crate) fn waits_for_slave(&self, reply: ReplyTo) -> bool {
        self.settings.broker_config.broker_role == BrokerRole::SyncMaster
            && reply.conn != super::schedule::INTERNAL_CONN
            && reply.conn != super::transaction::INTERNAL_CONN
    }

    /// SYNC_MASTER: answers `answer` once a slave has the store's ack
    /// position durable, or at once with SLAVE_NOT_AVAILABLE when no slave
    /// is in sync (see the module doc).
    pub(crate) fn await_slave(&mut self, reply: ReplyTo, mut answer: RemotingCommand, now_ms: i64) {
        let end = self.store().commit_log().appender().ack_position();
        let in_sync = self
            .replica
            .peers
            .values()
            .any(|peer| peer.in_sync(end, now_ms));
        if !in_sync || self.stopping() {
            answer.code = response_code::SLAVE_NOT_AVAILABLE;
            return self.reply(reply, answer);
        }
        let timeout = self.settings.broker_config.sync_flush_timeout_ms;
        self.replica.slave_waits.push_back(SlaveWait {
            end,
            deadline_ms: now_ms.saturating_add(timeout as i64),
            reply,
            answer,
        });
    }

    /// Answers the sends a slave now has durable, and those past their
    /// deadline (FLUSH_SLAVE_TIMEOUT); at stop, all of them.
    pub(crate) fn release_slave_waits(&mut self, now_ms: i64) {
        if self.replica.slave_waits.is_empty() {
            return;
        }
        let durable = self
            .replica
            .peers
            .values()
            .map(|peer| peer.durable)
            .max()
            .unwrap_or(0);
        let stopping = self.stopping();
        while let Some(wait) = self.replica.slave_waits.front() {
            let covered = wait.end <= durable;
            if !covered && wait.deadline_ms > now_ms && !stopping {
                break;
            }
            let Some(mut wait) = self.replica.slave_waits.pop_front() else {
                break;
            };
            if !covered {
                wait.answer.code = response_code::FLUSH_SLAVE_TIMEOUT;
            }
            self.reply(wait.reply, wait.answer);
        }
    }

    /// The earliest SYNC_MASTER deadline, for the turn's wait bound.
    pub(crate) fn slave_wait_deadline(&self) -> Option<i64> {
        self.replica
            .slave_waits
            .front()
            .map(|wait| wait.deadline_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slave(name: &str, durable: u64, in_sync: bool) -> SlaveFigures {
        SlaveFigures {
            slave: name.to_owned(),
            durable,
            transfer_from: 10,
            in_sync,
            transferred_per_s: durable / 100,
        }
    }

    #[test]
    fn a_masters_slaves_add_their_shards_and_are_in_sync_only_on_every_one() {
        let parts = [
            HaPart {
                log_end: 1_000,
                slaves: vec![slave("a:1", 900, true), slave("b:2", 1_000, true)],
                replica: None,
            },
            HaPart {
                log_end: 500,
                slaves: vec![slave("a:1", 500, true)],
                replica: None,
            },
        ];
        let info = ha_runtime_info(true, 2, &parts);
        assert!(info.master);
        assert_eq!(info.master_commit_log_max_offset, 1_500);
        let by_addr: BTreeMap<&str, &HaConnectionRuntimeInfo> = info
            .ha_connection_info
            .iter()
            .map(|c| (c.addr.as_str(), c))
            .collect();
        let a = by_addr["a:1"];
        assert_eq!((a.slave_ack_offset, a.diff, a.in_sync), (1_400, 100, true));
        assert_eq!(a.transfer_from_where, 20);
        assert_eq!(a.transferred_byte_in_second, 9 + 5, "both shards' bytes");
        // b pulls from one shard only: what the other holds counts as behind.
        let b = by_addr["b:2"];
        assert_eq!((b.slave_ack_offset, b.diff, b.in_sync), (1_000, 500, false));
        assert_eq!(info.in_sync_slave_nums, 1);

        let mut lagging = parts.clone();
        lagging[1].slaves[0].in_sync = false;
        assert_eq!(ha_runtime_info(true, 2, &lagging).in_sync_slave_nums, 0);
        assert!(ha_runtime_info(true, 2, &[]).ha_connection_info.is_empty());
    }

    #[test]
    fn a_slave_reports_its_logs_and_what_its_replicators_heard() {
        let replica = |ack: u64, read: i64, connected: bool| ReplicaStatusSnapshot {
            master_addr: Some("127.0.0.1:10911".to_owned()),
            connected,
            master_ack: ack,
            last_read_ms: read,
            last_write_ms: read - 1,
            transferred_per_s: ack / 100,
        };
        let parts = [
            HaPart {
                log_end: 300,
                slaves: Vec::new(),
                replica: Some(replica(400, 7, true)),
            },
            HaPart {
                log_end: 200,
                slaves: Vec::new(),
                replica: Some(replica(200, 9, true)),
            },
        ];
        let info = ha_runtime_info(false, 2, &parts);
        assert!(!info.master);
        let client = &info.ha_client_runtime_info;
        assert_eq!(client.master_addr.as_deref(), Some("127.0.0.1:10911"));
        assert_eq!((client.max_offset, client.master_flush_offset), (500, 600));
        assert_eq!(
            (client.last_read_timestamp, client.last_write_timestamp),
            (9, 8)
        );
        assert_eq!(client.transferred_byte_in_second, 4 + 2);
        assert!(client.activated);
        // One replicator not connected, or not started: not activated.
        let mut down = parts.clone();
        down[0].replica = Some(replica(400, 7, false));
        assert!(
            !ha_runtime_info(false, 2, &down)
                .ha_client_runtime_info
                .activated
        );
        down[0].replica = None;
        assert!(
            !ha_runtime_info(false, 2, &down)
                .ha_client_runtime_info
                .activated
        );
    }
}
