//! The channels between shards: one bounded inbox per shard, fed by every
//! other shard, and the target's [`Waker`] so that a message ends its sleep.
//!
//! ```text
//!  shard a ── try_send(ShardMsg) ──▶ inbox of shard b ── wake(b) once per turn
//!     │ full: a request  ─▶ SYSTEM_BUSY to the client at once
//!     │ full: any other  ─▶ a's backlog for b, retried every turn, in order
//! ```
//!
//! # Invariants
//! - Messages from one shard to another arrive in the order they were
//!   sent: once a backlog for a target is non-empty, everything else for
//!   that target joins the backlog (and requests are refused), so a
//!   snapshot sent before a request is always seen before it.
//! - Nothing but a forwarded request is ever dropped.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

use ringmq_protocol::command::RemotingCommand;
use ringmq_storage::ring::Waker;

use crate::server::{ConnectionId, SplicedBody};
use crate::subscription_group::SubscriptionGroupSnapshot;
use crate::topic_config::TopicConfigSnapshot;

use super::subs::SubscriptionSnapshot;

/// Capacity of one shard's inbox.
pub const INBOX_CAPACITY: usize = 8192;

/// Where the answer to a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyTo {
    /// The shard whose server holds the connection.
    pub shard: u16,
    /// The connection.
    pub conn: ConnectionId,
    /// The request's opaque.
    pub opaque: i32,
    /// One-way requests get no answer.
    pub oneway: bool,
}

/// A request with its reply address, as handled locally or forwarded.
#[derive(Debug, Clone)]
pub struct Request {
    /// The command.
    pub cmd: RemotingCommand,
    /// Where its answer goes.
    pub reply: ReplyTo,
    /// The client's address.
    pub peer: SocketAddr,
}

/// One message between shards.
#[derive(Debug)]
pub enum ShardMsg {
    /// A request for a queue (or control-plane state) the target owns.
    Request(Box<Request>),
    /// A finished command for a connection of the target's server.
    Outbound(ConnectionId, RemotingCommand),
    /// As `Outbound`, its body spliced from pipes, part by part.
    SplicedOutbound(ConnectionId, RemotingCommand, Vec<SplicedBody>),
    /// A new topic table.
    Topics(Arc<TopicConfigSnapshot>),
    /// A new subscription group table.
    Groups(Arc<SubscriptionGroupSnapshot>),
    /// New consumer subscriptions.
    Subscriptions(Arc<SubscriptionSnapshot>),
    /// A connection of the sender closed (to shard 0: the client registry).
    Closed(ConnectionId),
    /// Close this connection of the target (an expired client channel).
    Close(ConnectionId),
    /// A topic was deleted: drop its consumer offsets.
    TopicDeleted(String),
    /// A group was deleted with its offsets: drop them.
    GroupOffsetsDeleted(String),
    /// A pull saw a group that does not exist yet (to shard 0).
    EnsureGroup(String),
    /// Another shard asks for this shard's part of a request it gathers
    /// (`super::gather`).
    Ask {
        /// The asking shard's gathering id.
        query: u64,
        /// The asking shard.
        from: u16,
        /// What it asks.
        ask: Box<super::gather::Ask>,
    },
    /// This shard's part of a gathering, by the asking shard's id.
    Part(u64, Box<super::gather::Part>),
    /// A client's answer to a request the broker forwarded to it (to
    /// shard 0, which waits for it).
    ClientAnswer(ConnectionId, RemotingCommand),
    /// Shard 0 asks for this shard's runtime counters (query id).
    StatsRequest(u64),
    /// A shard's runtime counters for query `id` (to shard 0).
    Stats(u64, Box<crate::runtime_info::RuntimeStats>),
    /// A slave's replicator thread calls its shard.
    Replica(super::replica::ReplicaCall),
    /// A slave's copy of its master's topic and group tables (to shard 0).
    MasterConfig(Box<super::replica::MasterConfig>),
    /// A slave's copy of its master shard's consumer offsets.
    MasterOffsets(Box<ringmq_protocol::json::ConsumerOffsetFile>),
    /// Slave, shard 0: the master's delivery progress of delayed and timer
    /// messages, which this broker's log now covers.
    MasterSchedule(Box<super::replica::MasterSchedule>),
    /// CONSUME_MESSAGE_DIRECTLY with its record, for shard 0 to forward to
    /// the consumer.
    CallConsumer(Box<Request>),
    /// New settings (UPDATE_BROKER_CONFIG, from shard 0).
    Settings(Arc<super::ShardSettings>),
    /// A slave's replicator thread's status, for GET_BROKER_HA_STATUS.
    ReplicaStatus(std::sync::Arc<crate::replication::ReplicaStatus>),
}

/// This shard's ends of the channels.
#[derive(Debug)]
pub struct Links {
    me: u16,
    senders: Vec<SyncSender<ShardMsg>>,
    wakers: Vec<Waker>,
    inbox: Receiver<ShardMsg>,
    backlog: Vec<VecDeque<ShardMsg>>,
    wake_due: Vec<bool>,
}

impl Links {
    /// Links of shard `me`, given every shard's sender and waker (index =
    /// shard id) and its own inbox.
    pub fn new(
        me: u16,
        senders: Vec<SyncSender<ShardMsg>>,
        wakers: Vec<Waker>,
        inbox: Receiver<ShardMsg>,
    ) -> Self {
        assert_eq!(senders.len(), wakers.len(), "one waker per shard");
        assert!(usize::from(me) < senders.len(), "shard {me} out of range");
        let count = senders.len();
        Links {
            me,
            senders,
            wakers,
            inbox,
            backlog: (0..count).map(|_| VecDeque::new()).collect(),
            wake_due: vec![false; count],
        }
    }

    /// Sends a forwarded request; gives it back when the target's inbox is
    /// full (the caller answers SYSTEM_BUSY).
    pub fn try_request(&mut self, to: u16, request: Box<Request>) -> Result<(), Box<Request>> {
        let index = usize::from(to);
        assert_ne!(to, self.me, "a shard does not forward to itself");
        if !self.backlog[index].is_empty() {
            return Err(request);
        }
        match self.senders[index].try_send(ShardMsg::Request(request)) {
            Ok(()) => {
                self.wake_due[index] = true;
                Ok(())
            }
            Err(TrySendError::Full(ShardMsg::Request(request)))
            | Err(TrySendError::Disconnected(ShardMsg::Request(request))) => Err(request),
            Err(_) => unreachable!("try_send gives back the message it was given"),
        }
    }

    /// Sends a message that must arrive (answers, snapshots, notices).
    pub fn send(&mut self, to: u16, msg: ShardMsg) {
        let index = usize::from(to);
        assert_ne!(to, self.me, "a shard does not send to itself");
        if !self.backlog[index].is_empty() {
            self.backlog[index].push_back(msg);
            return;
        }
        match self.senders[index].try_send(msg) {
            Ok(()) => self.wake_due[index] = true,
            Err(TrySendError::Full(msg)) => self.backlog[index].push_back(msg),
            Err(TrySendError::Disconnected(_)) => {
                tracing::debug!(to, "shard inbox gone (stopping): message dropped");
            }
        }
    }

    /// Sends `msg` (built per target) to every other shard.
    pub fn broadcast(&mut self, msg: impl Fn() -> ShardMsg) {
        for to in 0..self.senders.len() as u16 {
            if to != self.me {
                self.send(to, msg());
            }
        }
    }

    /// Retries the backlogs and wakes every shard sent to since the last
    /// call. Call once per turn.
    pub fn flush(&mut self) {
        for index in 0..self.senders.len() {
            while let Some(msg) = self.backlog[index].pop_front() {
                match self.senders[index].try_send(msg) {
                    Ok(()) => self.wake_due[index] = true,
                    Err(TrySendError::Full(msg)) => {
                        self.backlog[index].push_front(msg);
                        break;
                    }
                    Err(TrySendError::Disconnected(_)) => {
                        self.backlog[index].clear();
                        break;
                    }
                }
            }
            if std::mem::take(&mut self.wake_due[index])
                && let Err(error) = self.wakers[index].wake()
            {
                tracing::error!(%error, shard = index, "waking a shard failed");
            }
        }
    }

    /// Whether messages wait in a backlog.
    pub fn has_backlog(&self) -> bool {
        self.backlog.iter().any(|queue| !queue.is_empty())
    }

    /// The next message of this shard's inbox, if any.
    pub fn receive(&mut self) -> Option<ShardMsg> {
        self.inbox.try_recv().ok()
    }

    /// Number of shards.
    pub fn shard_count(&self) -> u16 {
        self.senders.len() as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;

    fn waker() -> Option<Waker> {
        ringmq_storage::ring::Ring::new(ringmq_storage::ring::RingConfig::default())
            .ok()
            .map(|ring| ring.waker())
    }

    fn request(opaque: i32) -> Box<Request> {
        Box::new(Request {
            cmd: RemotingCommand::new_request(10, Default::default()),
            reply: ReplyTo {
                shard: 0,
                conn: ConnectionId(1),
                opaque,
                oneway: false,
            },
            peer: "127.0.0.1:1".parse().unwrap(),
        })
    }

    #[test]
    fn a_full_inbox_refuses_requests_but_keeps_answers_in_order() {
        let (Some(w0), Some(w1)) = (waker(), waker()) else {
            return;
        };
        let (tx0, rx0) = sync_channel(1);
        let (tx1, rx1) = sync_channel(1);
        let mut zero = Links::new(
            0,
            vec![tx0.clone(), tx1.clone()],
            vec![w0.clone(), w1.clone()],
            rx0,
        );
        let mut one = Links::new(1, vec![tx0, tx1], vec![w0, w1], rx1);
        assert!(zero.try_request(1, request(1)).is_ok());
        assert!(zero.try_request(1, request(2)).is_err(), "inbox full");
        zero.send(1, ShardMsg::TopicDeleted("a".into()));
        zero.send(1, ShardMsg::TopicDeleted("b".into()));
        assert!(zero.has_backlog());
        assert!(zero.try_request(1, request(3)).is_err(), "behind a backlog");
        let mut seen = Vec::new();
        for _ in 0..3 {
            zero.flush();
            while let Some(msg) = one.receive() {
                seen.push(match msg {
                    ShardMsg::Request(r) => format!("r{}", r.reply.opaque),
                    ShardMsg::TopicDeleted(t) => t,
                    other => panic!("unexpected {other:?}"),
                });
            }
        }
        assert_eq!(seen, vec!["r1", "a", "b"]);
        assert!(!zero.has_backlog());
    }
}
