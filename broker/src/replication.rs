//! A slave's replicator threads: one per shard, each pulling its master's
//! shard of the same id with RINGMQ_REPLICA_PULL over the master's remoting
//! port and handing the chunks to its own shard, which appends them
//! ([`crate::shard::replica`]).
//!
//! ```text
//!  registrar: REGISTER_BROKER answer ─ masterAddr ─▶ MasterAddress
//!  thread k: connect(masterAddr) ─▶ Position (shard k) ─▶ loop {
//!      REPLICA_PULL(offset, durableOffset, last record on the first, raw) ─▶ chunk
//!      ─▶ (raw: cut to its whole records; none: the next pull without raw)
//!      ─▶ Append(from, chunk) (shard k) ─▶ answered once acknowledgeable ─▶ offset = end
//!      or, for an empty log below the master's: startOffset ─▶ StartAt (shard k) ─▶ offset = startOffset }
//!  any error: log, drop the connection, wait, start again from Position
//!  at start and every 10 s (Java's SlaveSynchronize): thread k: RINGMQ_REPLICA_OFFSETS
//!      ─▶ MasterOffsets (shard k takes its queues' consumer offsets); thread 0 also
//!      GET_ALL_TOPIC_CONFIG + GET_ALL_SUBSCRIPTIONGROUP_CONFIG ─▶ MasterConfig (shard 0)
//!      and RINGMQ_SCHEDULE_PROGRESS (shard 0: delay and timer progress, then every
//!      shard's log end) ─▶ held until every shard's log here reaches those ends
//!      ─▶ MasterSchedule (shard 0)
//! ```
//!
//! The master counts a delayed or timer message delivered once the store
//! acknowledged its delivery, which the slave may not hold yet; taking the
//! progress at once would let a slave restarted as a master skip a
//! delivery that it never got. So the progress waits until every shard of
//! the slave has appended up to the ends the master's shards acknowledged
//! after the progress was read.
//!
//! The thread blocks on its socket and on its shard's answers; neither is
//! the data path of a shard, whose only contact with it is its inbox.
//!
//! # Invariants
//! - `durableOffset` is never past what the slave's store acknowledged
//!   (its flush mode's position).
//! - Each session starts from the store's own position, so a refused or
//!   failed chunk is never skipped.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::header::{
    CustomHeader, ReplicaOffsetsRequestHeader, ReplicaPullRequestHeader, ReplicaPullResponseHeader,
    ScheduleProgressResponseHeader,
};
use ringmq_protocol::json::{
    ConsumerOffsetFile, DelayOffsetFile, SubscriptionGroupWrapper, TopicConfigSerializeWrapper,
};
use ringmq_storage::commit_log::replica_whole_len;
use ringmq_storage::ring::Waker;

use crate::shard::link::ShardMsg;
use crate::shard::replica::{MasterConfig, MasterSchedule, REPLICA_CHUNK_BYTES_MAX, ReplicaCall};
use crate::shard::runtime::{call, connect, wall_clock_ms};
use crate::shard::timer::TimerProgressFile;
use crate::tps::BytesPerSecond;

/// How long a master may hold one replica pull that finds nothing new.
pub const REPLICA_SUSPEND_MS: i64 = 1_000;
/// Connect and write timeout, and how much longer than the suspension a
/// replica pull's answer may take.
pub const REPLICA_IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Wait before connecting again after a failed session.
pub const REPLICA_RETRY_DELAY: Duration = Duration::from_secs(1);
/// Wait before trying again after the master refused the slave's position.
pub const REPLICA_REFUSED_RETRY_DELAY: Duration = Duration::from_secs(5);
/// How often each thread fetches its master shard's consumer offsets, and
/// the thread of shard 0 the master's topic and group tables (Java's
/// `SlaveSynchronize` period); also at every session start.
pub const MASTER_CONFIG_SYNC_PERIOD: Duration = Duration::from_secs(10);
/// Longest a shard may take to answer its replicator (a SYNC_FLUSH ack
/// behind a slow disk included).
pub const REPLICA_SHARD_TIMEOUT: Duration = Duration::from_secs(60);

/// The master's remoting address as the name server last reported it
/// (`masterAddr` of the REGISTER_BROKER answer), shared by the registrar
/// and the replicator threads.
#[derive(Debug, Clone, Default)]
pub struct MasterAddress(Arc<Mutex<Option<String>>>);

impl MasterAddress {
    /// Records what a name server answered (None: no master registered).
    pub fn set(&self, addr: Option<&str>) {
        let mut slot = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if slot.as_deref() != addr {
            tracing::info!(master = ?addr, "the name server reports the master at");
            *slot = addr.map(str::to_owned);
        }
    }

    /// The address, if known.
    pub fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// What a replicator thread reports of its sessions, read by its shard
/// for GET_BROKER_HA_STATUS (atomics: a status, not the data path).
#[derive(Debug, Default)]
pub struct ReplicaStatus {
    master: MasterAddress,
    connected: AtomicBool,
    master_ack: AtomicU64,
    last_read_ms: AtomicI64,
    last_write_ms: AtomicI64,
    /// [`BytesPerSecond`] of the records received, in parts (written by the
    /// replicator thread alone; a reader may see the parts of two updates).
    received_second: AtomicI64,
    received_this_second: AtomicU64,
    received_last_second: AtomicU64,
    /// The end of what the shard acknowledged of the master's chunks
    /// (shard-local).
    appended: AtomicU64,
}

/// A [`ReplicaStatus`] as read at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaStatusSnapshot {
    /// Where the master is, if known.
    pub master_addr: Option<String>,
    /// Whether the master answered the session's last pull.
    pub connected: bool,
    /// The master shard's ack position (shard-local) it last reported.
    pub master_ack: u64,
    /// When the master last answered (ms since the epoch, 0: never).
    pub last_read_ms: i64,
    /// When the thread last asked (ms since the epoch, 0: never).
    pub last_write_ms: i64,
    /// Record bytes received in the last whole second.
    pub transferred_per_s: u64,
}

impl ReplicaStatus {
    /// A status for the thread that follows `master`.
    pub fn new(master: MasterAddress) -> Self {
        ReplicaStatus {
            master,
            ..ReplicaStatus::default()
        }
    }

    /// The figures now.
    pub fn snapshot(&self) -> ReplicaStatusSnapshot {
        ReplicaStatusSnapshot {
            master_addr: self.master.get(),
            connected: self.connected.load(Ordering::Relaxed),
            master_ack: self.master_ack.load(Ordering::Relaxed),
            last_read_ms: self.last_read_ms.load(Ordering::Relaxed),
            last_write_ms: self.last_write_ms.load(Ordering::Relaxed),
            transferred_per_s: self.received().per_second(wall_clock_ms()),
        }
    }

    fn received(&self) -> BytesPerSecond {
        BytesPerSecond {
            second: self.received_second.load(Ordering::Relaxed),
            this_second: self.received_this_second.load(Ordering::Relaxed),
            last_second: self.received_last_second.load(Ordering::Relaxed),
        }
    }

    /// The replicator thread received `bytes` of records at `now_ms`.
    fn count_received(&self, now_ms: i64, bytes: u64) {
        let mut received = self.received();
        received.add(now_ms, bytes);
        self.received_second
            .store(received.second, Ordering::Relaxed);
        self.received_this_second
            .store(received.this_second, Ordering::Relaxed);
        self.received_last_second
            .store(received.last_second, Ordering::Relaxed);
    }
}

/// What one replicator thread needs.
#[derive(Debug)]
pub struct Replicator {
    /// The shard it feeds (and pulls from the master).
    pub shard: u16,
    /// Shards of this broker (the master's must be equal).
    pub shard_count: u16,
    /// This broker's CommitLog segment size (the master's must be equal).
    pub segment_size: u64,
    /// The shard's inbox and waker.
    pub inbox: SyncSender<ShardMsg>,
    /// Wakes the shard after a message.
    pub waker: Waker,
    /// Where the master is.
    pub master: MasterAddress,
    /// Set at stop.
    pub stop: Arc<AtomicBool>,
    /// This broker's `brokerIP1:listenPort`, which names it to the master.
    pub slave_addr: String,
    /// What the thread reports (its shard reads it).
    pub status: Arc<ReplicaStatus>,
    /// Every replicator thread's status, by shard (thread 0 holds the
    /// master's schedule progress until each shard has appended enough).
    pub peers: Arc<[Arc<ReplicaStatus>]>,
}

/// The master's schedule progress and the log ends of its shards read
/// after it: handed to shard 0 once every shard here has appended that far.
#[derive(Debug)]
struct PendingSchedule {
    schedule: MasterSchedule,
    ends: Vec<u64>,
}

/// Why a session ended.
#[derive(Debug)]
enum SessionEnd {
    /// Stop requested, or the shard is gone.
    Stop,
    /// The connection failed (or no master is known).
    Io(String),
    /// The master refused the slave, or the shard refused a chunk.
    Refused(String),
}

impl Replicator {
    /// Starts the thread.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn spawn(self) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name(format!("ringmq-replica-{}", self.shard))
            .spawn(move || self.run())
    }

    fn run(self) {
        if self
            .tell_shard(ShardMsg::ReplicaStatus(Arc::clone(&self.status)))
            .is_err()
        {
            return;
        }
        let mut last_error = String::new();
        while !self.stop.load(Ordering::Relaxed) {
            let end = self.session(&mut last_error);
            self.status.connected.store(false, Ordering::Relaxed);
            let delay = match end {
                SessionEnd::Stop => return,
                SessionEnd::Io(error) => {
                    if error != last_error {
                        tracing::warn!(shard = self.shard, %error, "replication from the master stopped; retrying");
                        last_error = error;
                    }
                    REPLICA_RETRY_DELAY
                }
                SessionEnd::Refused(error) => {
                    // Said once per new reason (the operator acts on it).
                    if error != last_error {
                        tracing::error!(shard = self.shard, %error, "replication refused; retrying every 5 s");
                        last_error = error;
                    }
                    REPLICA_REFUSED_RETRY_DELAY
                }
            };
            std::thread::sleep(delay);
        }
    }

    /// Calls the shard and waits for its answer.
    fn call_shard<T>(
        &self,
        call: impl FnOnce(mpsc::Sender<Result<T, String>>) -> ReplicaCall,
    ) -> Result<T, SessionEnd> {
        let (tx, rx) = mpsc::channel();
        self.tell_shard(ShardMsg::Replica(call(tx)))?;
        match rx.recv_timeout(REPLICA_SHARD_TIMEOUT) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(SessionEnd::Refused(format!("the slave's store: {error}"))),
            Err(RecvTimeoutError::Disconnected) => Err(SessionEnd::Stop),
            Err(RecvTimeoutError::Timeout) => Err(SessionEnd::Refused(format!(
                "the shard did not answer in {REPLICA_SHARD_TIMEOUT:?}"
            ))),
        }
    }

    /// One session; `last_error` is cleared once the master serves it (so
    /// that the same failure is logged again when it comes back).
    fn session(&self, last_error: &mut String) -> SessionEnd {
        match self.try_session(last_error) {
            Ok(()) => SessionEnd::Stop,
            Err(end) => end,
        }
    }

    fn try_session(&self, last_error: &mut String) -> Result<(), SessionEnd> {
        let Some(addr) = self.master.get() else {
            return Err(SessionEnd::Io(
                "no master registered with the name server".into(),
            ));
        };
        let mut master = MasterConnection::open(addr)?;
        let (position, ack) = self.call_shard(ReplicaCall::Position)?;
        let mut from = position.end;
        let mut durable = ack.min(from);
        self.status.appended.store(durable, Ordering::Relaxed);
        let mut last_record = position.last_record;
        let mut schedule: Option<PendingSchedule> = None;
        let mut synced: Option<Instant> = None;
        let mut served = false;
        // Chunks cut anywhere are welcome, except once after one that held
        // no whole record (its first record is longer than a spliced chunk).
        let mut raw = true;
        while !self.stop.load(Ordering::Relaxed) {
            if synced.is_none_or(|at| at.elapsed() >= MASTER_CONFIG_SYNC_PERIOD) {
                if self.shard == 0 {
                    self.sync_master_config(&mut master)?;
                    schedule = self.fetch_master_schedule(&mut master)?.or(schedule);
                }
                self.sync_master_offsets(&mut master)?;
                synced = Some(Instant::now());
            }
            if let Some(pending) = schedule.take_if(|pending| covers(&self.peers, &pending.ends)) {
                self.tell_shard(ShardMsg::MasterSchedule(Box::new(pending.schedule)))?;
            }
            let header = ReplicaPullRequestHeader {
                shard: i32::from(self.shard),
                shard_count: i32::from(self.shard_count),
                segment_size: self.segment_size as i64,
                offset: from as i64,
                durable_offset: durable as i64,
                last_offset: last_record.map(|mark| mark.offset as i64),
                last_size: last_record.map(|mark| mark.size as i32),
                last_crc: last_record.map(|mark| i64::from(mark.crc)),
                max_bytes: REPLICA_CHUNK_BYTES_MAX as i32,
                suspend_millis: REPLICA_SUSPEND_MS,
                slave_addr: Some(self.slave_addr.clone()),
                raw: Some(raw),
            };
            let request = RemotingCommand::new_request(
                request_code::RINGMQ_REPLICA_PULL,
                header.to_ext_fields(),
            );
            let status = &self.status;
            status
                .last_write_ms
                .store(wall_clock_ms(), Ordering::Relaxed);
            let answer = master.call(request)?;
            let read_ms = wall_clock_ms();
            status.last_read_ms.store(read_ms, Ordering::Relaxed);
            status.count_received(read_ms, answer.body_bytes().len() as u64);
            status.connected.store(true, Ordering::Relaxed);
            if !served {
                served = true;
                tracing::info!(shard = self.shard, master = %master.addr, from, "replicating from the master");
                last_error.clear();
            }
            // Proven once per connection.
            last_record = None;
            let header: ReplicaPullResponseHeader = answer
                .decode_custom_header()
                .map_err(|error| master.undecodable("replica pull answer", &error))?;
            let master_ack = u64::try_from(header.master_offset).unwrap_or(0);
            status.master_ack.store(master_ack, Ordering::Relaxed);
            if let Some(start) = header.start_offset {
                // This log holds no record, and the master's starts later.
                let base = u64::try_from(start)
                    .map_err(|error| master.undecodable("startOffset", &error))?;
                self.call_shard(|reply| ReplicaCall::StartAt { base, reply })?;
                tracing::info!(
                    shard = self.shard,
                    from,
                    to = base,
                    "the master's log starts later: the empty log starts there too"
                );
                from = base;
                durable = base;
                continue;
            }
            let Some(mut bytes) = answer.body.filter(|body| !body.is_empty()) else {
                continue;
            };
            raw = true;
            if header.raw == Some(true) {
                // Cut anywhere: its whole records, the rest asked again.
                let whole = replica_whole_len(from, &bytes)
                    .map_err(|error| SessionEnd::Refused(format!("the master's chunk: {error}")))?;
                if whole == 0 {
                    tracing::debug!(
                        shard = self.shard,
                        from,
                        "no whole record in a spliced chunk: asking for whole records"
                    );
                    raw = false;
                    continue;
                }
                bytes.truncate(whole);
            }
            let end = self.call_shard(|reply| ReplicaCall::Append { from, bytes, reply })?;
            from = end;
            durable = end;
            self.status.appended.store(end, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Fetches the consumer offsets of the master's shard and hands them to
    /// this shard.
    fn sync_master_offsets(&self, master: &mut MasterConnection) -> Result<(), SessionEnd> {
        let header = ReplicaOffsetsRequestHeader {
            shard: i32::from(self.shard),
        };
        let request = RemotingCommand::new_request(
            request_code::RINGMQ_REPLICA_OFFSETS,
            header.to_ext_fields(),
        );
        let answer = master.call(request)?;
        let offsets = ConsumerOffsetFile::from_json(answer.body_bytes())
            .map_err(|error| master.undecodable("consumer offset table", &error))?;
        self.tell_shard(ShardMsg::MasterOffsets(Box::new(offsets)))
    }

    /// Fetches the master's schedule progress, then the log end of every
    /// master shard; None when the master does not serve it (a ringmq
    /// master older than the request).
    fn fetch_master_schedule(
        &self,
        master: &mut MasterConnection,
    ) -> Result<Option<PendingSchedule>, SessionEnd> {
        let mut ends = Vec::with_capacity(usize::from(self.shard_count));
        let mut schedule = None;
        for shard in 0..self.shard_count {
            let header = ReplicaOffsetsRequestHeader {
                shard: i32::from(shard),
            };
            let request = RemotingCommand::new_request(
                request_code::RINGMQ_SCHEDULE_PROGRESS,
                header.to_ext_fields(),
            );
            let answer = master.call_any(request)?;
            if answer.code == response_code::REQUEST_CODE_NOT_SUPPORTED {
                tracing::debug!(master = %master.addr, "the master does not say how far it delivered delayed and timer messages");
                return Ok(None);
            }
            let answer = master.successful(answer, request_code::RINGMQ_SCHEDULE_PROGRESS)?;
            let header: ScheduleProgressResponseHeader = answer
                .decode_custom_header()
                .map_err(|error| master.undecodable("schedule progress answer", &error))?;
            ends.push(u64::try_from(header.log_end).unwrap_or(0));
            if shard == 0 {
                let delay = DelayOffsetFile::from_json(answer.body_bytes())
                    .map_err(|error| master.undecodable("delay offset table", &error))?;
                let timer = match header.timer_progress {
                    Some(text) => {
                        Some(TimerProgressFile::decode(text.as_bytes()).ok_or_else(|| {
                            master.undecodable("timer progress", &"not {durableOffset, delivered}")
                        })?)
                    }
                    None => None,
                };
                schedule = Some(MasterSchedule {
                    delay,
                    timer,
                    transaction_half: header.transaction_half_offset,
                    transaction_op: header.transaction_op_offset,
                });
            }
        }
        Ok(schedule.map(|schedule| PendingSchedule { schedule, ends }))
    }

    /// Sends a message to this shard without waiting for an answer.
    fn tell_shard(&self, msg: ShardMsg) -> Result<(), SessionEnd> {
        if self.inbox.send(msg).is_err() {
            return Err(SessionEnd::Stop);
        }
        if let Err(error) = self.waker.wake() {
            tracing::warn!(shard = self.shard, %error, "waking the shard failed");
        }
        Ok(())
    }

    /// Fetches the master's topic and group tables and hands them to shard 0.
    fn sync_master_config(&self, master: &mut MasterConnection) -> Result<(), SessionEnd> {
        let fetch = |code| RemotingCommand::new_request(code, ExtFields::new());
        let topics = master.call(fetch(request_code::GET_ALL_TOPIC_CONFIG))?;
        let groups = master.call(fetch(request_code::GET_ALL_SUBSCRIPTIONGROUP_CONFIG))?;
        let config = MasterConfig {
            topics: TopicConfigSerializeWrapper::from_json(topics.body_bytes())
                .map_err(|error| master.undecodable("topic table", &error))?,
            groups: SubscriptionGroupWrapper::from_json(groups.body_bytes())
                .map_err(|error| master.undecodable("group table", &error))?,
        };
        self.tell_shard(ShardMsg::MasterConfig(Box::new(config)))
    }
}

/// Whether every shard has appended up to `ends` (the master shards' log
/// ends, by shard), as their threads' `peers` report it.
fn covers(peers: &[Arc<ReplicaStatus>], ends: &[u64]) -> bool {
    peers.len() == ends.len()
        && peers
            .iter()
            .zip(ends)
            .all(|(peer, end)| peer.appended.load(Ordering::Relaxed) >= *end)
}

/// A replicator's connection to its master.
struct MasterConnection {
    stream: TcpStream,
    addr: String,
    opaque: i32,
}

impl MasterConnection {
    fn open(addr: String) -> Result<Self, SessionEnd> {
        let suspend = Duration::from_millis(REPLICA_SUSPEND_MS as u64);
        let stream = connect(&addr, REPLICA_IO_TIMEOUT, suspend + REPLICA_IO_TIMEOUT)
            .map_err(|error| SessionEnd::Io(format!("{addr}: {error}")))?;
        Ok(MasterConnection {
            stream,
            addr,
            opaque: 0,
        })
    }

    /// One request and its answer, whatever its code.
    fn call_any(&mut self, mut request: RemotingCommand) -> Result<RemotingCommand, SessionEnd> {
        self.opaque = self.opaque.wrapping_add(1);
        request.opaque = self.opaque;
        call(&mut self.stream, &request)
            .map_err(|error| SessionEnd::Io(format!("{}: {error}", self.addr)))
    }

    /// One request and its SUCCESS answer.
    fn call(&mut self, request: RemotingCommand) -> Result<RemotingCommand, SessionEnd> {
        let code = request.code;
        let answer = self.call_any(request)?;
        self.successful(answer, code)
    }

    /// `answer`, to a request of `code`, if it is SUCCESS; the refusal
    /// naming both otherwise.
    fn successful(
        &self,
        answer: RemotingCommand,
        code: i32,
    ) -> Result<RemotingCommand, SessionEnd> {
        if answer.code != response_code::SUCCESS {
            return Err(SessionEnd::Refused(format!(
                "the master {} answered {} to {}: {}",
                self.addr,
                answer.code,
                code,
                answer.remark.as_deref().unwrap_or("")
            )));
        }
        Ok(answer)
    }

    /// A body from the master that does not decode as `what`.
    fn undecodable(&self, what: &str, error: &impl std::fmt::Display) -> SessionEnd {
        SessionEnd::Refused(format!(
            "the master {} sent a {what} that does not decode: {error}",
            self.addr
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_masters_progress_waits_until_every_shard_has_appended_to_its_ends() {
        let peers: Arc<[Arc<ReplicaStatus>]> = (0..2)
            .map(|_| Arc::new(ReplicaStatus::new(MasterAddress::default())))
            .collect();
        let ends = [100, 40];
        assert!(!covers(&peers, &ends));
        peers[0].appended.store(100, Ordering::Relaxed);
        assert!(!covers(&peers, &ends), "shard 1 has not appended yet");
        peers[1].appended.store(39, Ordering::Relaxed);
        assert!(!covers(&peers, &ends), "one byte short");
        peers[1].appended.store(64, Ordering::Relaxed);
        assert!(covers(&peers, &ends));
        assert!(!covers(&peers, &[0]), "ends of another shard count");
    }
}
