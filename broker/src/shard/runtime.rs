//! The broker process: `ringmq broker` from a loaded [`BrokerConfig`] to
//! exit.
//!
//! ```text
//!  lock <root>/lock ─▶ load config/*.json ─▶ persister thread
//!   ─▶ embedded name server thread (no namesrvAddr) ─▶ shard 0 (store recovery, listen)
//!   ─▶ shards 1..N on shard 0's port ─▶ links to every shard ─▶ first REGISTER_BROKER
//!   ─▶ boot line on stdout ─▶ registrar thread (every registerNameServerPeriod, and on
//!      topic changes) ─▶ SIGTERM/SIGINT: every shard stops (answers owed requests, store
//!      shutdown, final offsets) ─▶ UNREGISTER_BROKER ─▶ persister flush ─▶ exit 0
//! ```
//!
//! The first registration happens before the boot line (a deviation from
//! Java, which prints first), so that a client started on the boot line
//! finds the broker's routes.
//!
//! # Invariants
//! - The lock file stays locked (flock) until the process exits, so two
//!   brokers never share a store.
//! - Shard `i` runs on the `i`-th CPU of the process's affinity mask
//!   (modulo its size).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ringmq_protocol::code::SerializeType;
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::frame;
use ringmq_protocol::json::TopicConfig;
use ringmq_protocol::limits::FRAME_SIZE_MAX;
use ringmq_storage::disk::uring::{UringDisk, UringDiskConfig};
use ringmq_storage::limits::{DISK_LANE_SLOTS_MIN, write_buffers_in_use_max};
use ringmq_storage::ring::{RING_INTERNAL_SLOTS, Ring, RingConfig, SharedRing, Waker};
use ringmq_storage::store::{Store, StoreConfig, StoreFlushMode};

use super::control::ControlPlane;
use super::link::{INBOX_CAPACITY, Links, ShardMsg};
use super::{ShardHandler, ShardSettings};
use crate::client_registry::ClientRegistry;
use crate::config::{BrokerConfig, FlushDiskType, PERM_READ, PERM_WRITE};
use crate::consumer_offset::ConsumerOffsetTable;
use crate::namesrv::register::{
    BrokerIdentity, register_broker_request, unregister_broker_request,
};
use crate::namesrv::{NameServer, NameServerSettings};
use crate::persist::{ConfigDir, ConfigFile, PersistError, Persister, PersisterHandle};
use crate::replication::{MasterAddress, ReplicaStatus, Replicator};
use crate::route::Router;
use crate::server::{
    NameServerHandler, SERVER_OWNER, Server, ServerConfig, ShutdownHandle, open_kv_config,
    ring_slots_needed, signal,
};
use crate::subscription_group::{SubscriptionGroupSnapshot, SubscriptionGroupTable};
use crate::topic_config::{TopicConfigSettings, TopicConfigSnapshot, TopicConfigTable};

/// Name of the lock file under the store root.
pub const LOCK_FILE_NAME: &str = "lock";
/// How long a name server may take to answer one registration.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(3);
/// Stall threshold of a shard's ring while the store recovers (its turns
/// come between long stretches of scanning; see `run_shard`).
pub const RECOVERY_STALL_THRESHOLD: Duration = Duration::from_secs(3600);
/// Default `ringEntries`: room for the default connections and the store.
pub const SHARD_RING_ENTRIES_DEFAULT: u32 = 8192;

/// Entries a shard's ring needs for `connections_max` connections beside
/// the store's lane ([`DISK_LANE_SLOTS_MIN`] at least).
pub fn shard_ring_entries_needed(connections_max: usize) -> usize {
    ring_slots_needed(connections_max) + DISK_LANE_SLOTS_MIN + RING_INTERNAL_SLOTS
}

const _: () = assert!(SHARD_RING_ENTRIES_DEFAULT <= ringmq_storage::ring::RING_ENTRIES_MAX);
/// How long startup waits for one shard to recover its store and listen.
pub const SHARD_START_TIMEOUT: Duration = Duration::from_secs(600);

/// Why the broker could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The store root or its lock file could not be created.
    #[error("creating {}", path.display())]
    Create {
        /// The path.
        path: PathBuf,
        /// The errno.
        #[source]
        source: std::io::Error,
    },
    /// Another broker holds the store's lock.
    #[error(
        "another broker is already running on the store {} (its lock file {} is locked)",
        root.display(),
        lock.display()
    )]
    AlreadyRunning {
        /// The store root.
        root: PathBuf,
        /// The lock file.
        lock: PathBuf,
    },
    /// A config file could not be read or decoded.
    #[error("loading {file}: {reason}")]
    ConfigFile {
        /// The file name.
        file: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The persister failed.
    #[error("persisting the config files")]
    Persist(#[from] PersistError),
    /// The embedded name server could not start.
    #[error("starting the embedded name server: {0}")]
    NameServer(String),
    /// A shard could not start.
    #[error("starting shard {shard}: {reason}")]
    Shard {
        /// The shard.
        shard: u16,
        /// What went wrong.
        reason: String,
    },
    /// A thread could not be spawned or died.
    #[error("thread {name}: {reason}")]
    Thread {
        /// The thread's name.
        name: String,
        /// What went wrong.
        reason: String,
    },
    /// Writing the boot line failed.
    #[error("writing the boot line")]
    BootLine(#[source] std::io::Error),
}

/// Milliseconds since the Unix epoch (Java's `System.currentTimeMillis`).
pub fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

/// Takes the store's lock file (flock, exclusive, non-blocking).
///
/// # Errors
/// [`BrokerError::AlreadyRunning`] when another process holds it.
pub fn lock_store(root: &Path) -> Result<File, BrokerError> {
    std::fs::create_dir_all(root).map_err(|source| BrokerError::Create {
        path: root.to_path_buf(),
        source,
    })?;
    let path = root.join(LOCK_FILE_NAME);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| BrokerError::Create {
            path: path.clone(),
            source,
        })?;
    // SAFETY: flock on a descriptor we own; no pointers.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if locked != 0 {
        return Err(BrokerError::AlreadyRunning {
            root: root.to_path_buf(),
            lock: path,
        });
    }
    Ok(file)
}

fn load_file(dir: &ConfigDir, file: ConfigFile) -> Result<Option<Vec<u8>>, BrokerError> {
    dir.load(file).map_err(|error| BrokerError::ConfigFile {
        file: file.file_name(),
        reason: error.to_string(),
    })
}

/// What a shard thread reports once it listens.
struct Ready {
    port: u16,
    waker: Waker,
    shutdown: ShutdownHandle,
}

/// Everything a shard thread needs.
struct ShardStart {
    id: u16,
    config: Arc<BrokerConfig>,
    settings: Arc<ShardSettings>,
    port: u16,
    /// The port is held already (by shard 0, or the placeholder of port 0).
    joins_port: bool,
    topics: Arc<TopicConfigSnapshot>,
    groups: Arc<SubscriptionGroupSnapshot>,
    control: Option<ControlPlane>,
    offsets_file: Option<Arc<Vec<u8>>>,
    persister: PersisterHandle,
    delay_levels: crate::features::delay::DelayLevels,
    delay_board: super::schedule::DelayOffsetBoard,
    timer_progress: super::timer::TimerProgressFile,
    inbox: Receiver<ShardMsg>,
    ready: Sender<Result<Ready, String>>,
    links: Receiver<(Vec<SyncSender<ShardMsg>>, Vec<Waker>)>,
}

/// Pins the calling thread to the `index`-th CPU of its affinity mask; a
/// failure is logged and the shard runs unpinned.
fn pin_to_cpu(index: usize) {
    if let Err(error) = ringmq_storage::ring::affinity::pin_to_cpu(index) {
        tracing::warn!(index, %error, "pinning a shard thread failed");
    }
}

fn store_config(config: &BrokerConfig, shard: u16, store_host: SocketAddr) -> StoreConfig {
    let mut store = StoreConfig::new(&config.store_path_root_dir, shard as u8, store_host);
    store.segment_size_bytes = config.commit_log_segment_size_bytes;
    store.flush_mode = match config.flush_disk_type {
        FlushDiskType::AsyncFlush => StoreFlushMode::Async,
        FlushDiskType::SyncFlush => StoreFlushMode::Sync,
    };
    store.flush_interval_ms = config.flush_interval_commit_log_ms;
    store.consume_queue_flush_interval_ms = config.flush_interval_consume_queue_ms;
    store.commit_log_recycle_segments = config.commit_log_recycle_segments as usize;
    store.commit_log_remove_step_bytes = config.commit_log_remove_step_bytes;
    store.sync_flush_timeout_ms = config.sync_flush_timeout_ms;
    store.tail_cache_bytes = config.tail_cache_size_bytes as usize;
    // A slave's log ends where its master's stream goes on (no fence at
    // recovery).
    store.replica = !config.broker_role.is_master();
    apply_retention(config, &mut store.retention);
    store
}

/// Expired-file deletion (fileReservedTime at deleteWhen, or early above
/// diskMaxUsedSpaceRatio) as `config` says; the refusal of writes stays at
/// the store's diskSpaceWarningLevelRatio default.
pub(crate) fn apply_retention(
    config: &BrokerConfig,
    retention: &mut ringmq_storage::retention::RetentionConfig,
) {
    retention.file_reserved_time_hours = config.file_reserved_time_hours;
    retention.delete_when_hours = config.delete_when_hours.clone();
    retention.disk_max_used_space_ratio = config.disk_max_used_space_ratio_percent as u8;
    retention.delete_commit_log_files_interval_ms = config.delete_commit_log_files_interval_ms;
}

/// Most write buffers a shard registers with its ring (8 MiB each): enough
/// for the default tail cache; a larger cache's further buffers are written
/// with plain `WRITE`.
const REGISTERED_WRITE_BUFFERS_MAX: usize = 16;

fn run_shard(start: ShardStart) -> Result<(), String> {
    if start.config.shard_cpu_pinning {
        pin_to_cpu(usize::from(start.id));
    }
    let id = start.id;
    let config = &start.config;
    // One ring for the shard's sockets and disk: the server's lane holds
    // what its connections need, the store's the rest.
    let mut ring = Ring::new(RingConfig {
        entries: config.ring_entries,
        ..RingConfig::default()
    })
    .map_err(|error| format!("creating the shard's ring: {error}"))?;
    let stall_threshold = ring.config().stall_threshold;
    ring.set_stall_threshold(RECOVERY_STALL_THRESHOLD);
    let shared = SharedRing::new(ring);
    let server_slots = ring_slots_needed(config.connections_per_shard_max as usize);
    let disk_slots = shared.capacity().saturating_sub(server_slots);
    let disk = UringDisk::on_shared_ring(
        &shared,
        disk_slots,
        UringDiskConfig {
            fixed_buffer_count: write_buffers_in_use_max(config.tail_cache_size_bytes as usize)
                .min(REGISTERED_WRITE_BUFFERS_MAX),
            group_sync_min_per_s: Some(config.fdatasync_group_min_per_s).filter(|&rate| rate > 0),
            ..UringDiskConfig::default()
        },
    )
    .map_err(|error| format!("opening the store's lane of the shard's ring: {error}"))?;
    let now = wall_clock_ms();
    let (store, report) = Store::open(
        disk,
        store_config(config, id, start.settings.store_host),
        now as u64,
    )
    .map_err(|error| format!("opening the store: {error:#}"))?;
    tracing::info!(
        shard = id,
        abnormal = report.abnormal,
        redispatched = report.redispatched,
        "store recovered"
    );
    let router = Router::new(u32::from(start.settings.shard_count)).map_err(|e| e.to_string())?;
    let mut offsets = ConsumerOffsetTable::new(now);
    if let Some(content) = &start.offsets_file {
        offsets
            .load(content, |queue_id| {
                queue_id >= 0 && router.shard_of(queue_id as u32).0 == id
            })
            .map_err(|error| format!("loading consumerOffset.json: {error}"))?;
    }
    // Before any shard serves (they wait for each other's links below).
    start.persister.seed_offsets(id, offsets.to_file());
    let mut handler = ShardHandler::new(
        id,
        start.settings.clone(),
        store,
        start.topics,
        start.groups,
        start.control,
        offsets,
        Some(start.persister.clone()),
    );
    handler.install_delay(
        start.delay_levels.clone(),
        &start.delay_board.snapshot(),
        Some(start.delay_board.clone()),
    );
    handler.install_timer(
        crate::features::timer::TimerConfig::default(),
        start.timer_progress.clone(),
        now,
    );
    let server_config = ServerConfig {
        connection_tag: id as u8,
        connections_max: start.config.connections_per_shard_max as usize,
        joins_port: start.joins_port,
        ..ServerConfig::new(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            start.port,
        ))
    };
    // Recovery is over: a long turn from now on is a stall.
    shared.with_ring(|ring| ring.set_stall_threshold(stall_threshold));
    let server_lane = shared
        .lane(SERVER_OWNER, server_slots)
        .map_err(|error| format!("opening the server's lane of the shard's ring: {error}"))?;
    let mut server = Server::bind_on(server_lane, server_config, handler)
        .map_err(|error| format!("{error:#}"))?;
    let waker = server.waker();
    if id == 0 {
        // Shard 0 holds control answers until their config files are written.
        let wake = waker.clone();
        start.persister.on_batch_done(move || {
            let _ = wake.wake();
        });
    }
    let ready = Ready {
        port: server.local_addr().port(),
        waker,
        shutdown: server.shutdown_handle(),
    };
    let _ = start.ready.send(Ok(ready));
    let Ok((senders, wakers)) = start.links.recv() else {
        return Err("startup was abandoned".to_owned());
    };
    server
        .handler_mut()
        .install_links(Links::new(id, senders, wakers, start.inbox));
    let mut handler = server.run().map_err(|error| format!("{error:#}"))?;
    handler
        .finish(wall_clock_ms())
        .map_err(|error| format!("shutting the store down: {error:#}"))?;
    tracing::info!(shard = id, "shard stopped");
    Ok(())
}

fn spawn_shard(start: ShardStart) -> Result<JoinHandle<Result<(), String>>, BrokerError> {
    let name = format!("ringmq-shard-{}", start.id);
    let ready = start.ready.clone();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let result = run_shard(start);
            if let Err(reason) = &result {
                let _ = ready.send(Err(reason.clone()));
            }
            result
        })
        .map_err(|error| BrokerError::Thread {
            name,
            reason: error.to_string(),
        })
}

/// Sends one request on `stream` and reads its answer (blocking, bounded by
/// the stream's timeouts, see [`connect`]).
pub(crate) fn call(
    stream: &mut TcpStream,
    request: &RemotingCommand,
) -> std::io::Result<RemotingCommand> {
    let mut out = Vec::new();
    request
        .encode(SerializeType::Json, &mut out)
        .map_err(|error| std::io::Error::other(error.to_string()))?;
    stream.write_all(&out)?;
    loop {
        let mut length = [0u8; 4];
        stream.read_exact(&mut length)?;
        let size = u32::from_be_bytes(length);
        if size > FRAME_SIZE_MAX {
            return Err(std::io::Error::other(format!("answer of {size} bytes")));
        }
        let mut bytes = length.to_vec();
        bytes.resize(4 + size as usize, 0);
        stream.read_exact(&mut bytes[4..])?;
        let raw = frame::decode_frame(&bytes::Bytes::from(bytes), FRAME_SIZE_MAX)
            .map_err(|error| std::io::Error::other(error.to_string()))?
            .ok_or_else(|| std::io::Error::other("truncated answer"))?;
        let answer = RemotingCommand::from_frame(&raw)
            .map_err(|error| std::io::Error::other(error.to_string()))?;
        if answer.is_response() && answer.opaque == request.opaque {
            return Ok(answer);
        }
    }
}

/// A blocking connection to `addr` (host:port) for [`call`]: connect and
/// write bounded by `timeout`, reads by `read_timeout`.
pub(crate) fn connect(
    addr: &str,
    timeout: Duration,
    read_timeout: Duration,
) -> std::io::Result<TcpStream> {
    let target = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("{addr} resolves to nothing")))?;
    let stream = TcpStream::connect_timeout(&target, timeout)?;
    stream.set_read_timeout(Some(read_timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// What shard 0 tells the registrar thread.
#[derive(Debug)]
pub enum RegistrarMsg {
    /// A new topic table, with its number in the order shard 0 handed them
    /// over: register it.
    Topics(u64, Arc<TopicConfigSnapshot>),
    /// `brokerPermission` changed (UPDATE_BROKER_CONFIG): register again.
    Permission(u32),
}

/// The broker's connections to its name servers. They stay open between
/// registrations: a name server drops a broker's routes when the
/// connection it registered on closes (Java's `BrokerHousekeepingService`).
struct Registrar {
    identity: BrokerIdentity,
    namesrvs: Vec<String>,
    streams: Vec<Option<TcpStream>>,
    /// Per name server, the topic table it accepted last on its current
    /// connection: a new table then goes to it as only the topics that
    /// changed (as Java's `registerIncrementBrokerData`), so a topic's
    /// creation, whose answer waits for it, does not cost a registration of
    /// every topic. None: it gets the whole table next.
    accepted: Vec<Option<Arc<TopicConfigSnapshot>>>,
    opaque: i32,
    /// A slave's: where the name servers say its master is.
    master: Option<MasterAddress>,
    /// `brokerPermission`: without read or write, every topic is
    /// registered with only what both allow (Java's `registerBrokerAll`).
    permission: u32,
    /// Changes of `permission` so far, added to the registered data
    /// version's counter: a name server takes a broker's topics again only
    /// when their data version changed.
    permission_changes: i64,
}

impl Registrar {
    fn new(
        identity: BrokerIdentity,
        namesrvs: Vec<String>,
        master: Option<MasterAddress>,
        permission: u32,
    ) -> Self {
        let streams = namesrvs.iter().map(|_| None).collect();
        let accepted = namesrvs.iter().map(|_| None).collect();
        Registrar {
            identity,
            namesrvs,
            streams,
            accepted,
            opaque: 0,
            master,
            permission,
            permission_changes: 0,
        }
    }

    fn set_permission(&mut self, permission: u32) {
        if permission != self.permission {
            self.permission = permission;
            self.permission_changes += 1;
            // Every topic is registered with the new permission.
            self.accepted
                .iter_mut()
                .for_each(|accepted| *accepted = None);
        }
    }

    fn call(
        &mut self,
        index: usize,
        mut request: RemotingCommand,
    ) -> std::io::Result<RemotingCommand> {
        self.opaque = self.opaque.wrapping_add(1);
        request.opaque = self.opaque;
        if self.streams[index].is_none() {
            self.streams[index] = Some(connect(
                &self.namesrvs[index],
                REGISTER_TIMEOUT,
                REGISTER_TIMEOUT,
            )?);
        }
        let stream = self.streams[index].as_mut().expect("connected above");
        let result = call(stream, &request);
        if result.is_err() {
            self.streams[index] = None;
        }
        result
    }

    /// `topics`' configs as registered: those `keep` selects, each with
    /// only the permission `brokerPermission` allows.
    fn table(
        &self,
        topics: &TopicConfigSnapshot,
        keep: impl Fn(&str, &TopicConfig) -> bool,
    ) -> BTreeMap<String, TopicConfig> {
        let full = PERM_READ | PERM_WRITE;
        let mask = (self.permission & full != full).then_some(self.permission as i32);
        topics
            .iter()
            .filter(|(name, config)| keep(name, config))
            .map(|(name, config)| {
                let mut config = config.clone();
                if let Some(mask) = mask {
                    config.perm &= mask;
                }
                (name.to_owned(), config)
            })
            .collect()
    }

    /// Registers with every name server (the whole table); returns how
    /// many accepted.
    fn register_all(&mut self, topics: &Arc<TopicConfigSnapshot>) -> usize {
        self.register(topics, false)
    }

    /// Registers with every name server: with `changes_only`, a name server
    /// that accepted an earlier table on its connection gets only the
    /// topics created or changed since (none: it is skipped), and the whole
    /// table if it refuses them; returns how many accepted.
    fn register(&mut self, topics: &Arc<TopicConfigSnapshot>, changes_only: bool) -> usize {
        let mut version = topics.data_version();
        version.counter += self.permission_changes;
        let mut whole = None;
        let mut accepted = 0;
        // Whether a name server answered (one skipped did not say where
        // the master is).
        let mut answered = false;
        let mut master = None;
        for index in 0..self.namesrvs.len() {
            let earlier = self.accepted[index].clone().filter(|_| changes_only);
            let changes = earlier.map(|earlier| {
                self.table(topics, |name, config| earlier.get(name) != Some(config))
            });
            if changes.as_ref().is_some_and(BTreeMap::is_empty) {
                self.accepted[index] = Some(topics.clone());
                accepted += 1;
                continue;
            }
            let mut answer = None;
            if let Some(changes) = &changes {
                answer = self.offer(
                    index,
                    register_broker_request(&self.identity, version, changes),
                );
            }
            if answer.is_none() {
                let table = whole.get_or_insert_with(|| self.table(topics, |_, _| true));
                answer = self.offer(
                    index,
                    register_broker_request(&self.identity, version, table),
                );
            }
            if let Some(answer) = answer {
                accepted += 1;
                answered = true;
                self.accepted[index] = Some(topics.clone());
                if let Some(addr) = answer.ext_fields.get("masterAddr") {
                    master.get_or_insert_with(|| addr.to_owned());
                }
            }
        }
        if let Some(slot) = &self.master
            && answered
        {
            slot.set(master.as_deref().filter(|addr| !addr.is_empty()));
        }
        accepted
    }

    /// Sends a registration to name server `index`: its answer when it
    /// accepted, None (logged) otherwise.
    fn offer(&mut self, index: usize, request: RemotingCommand) -> Option<RemotingCommand> {
        self.accepted[index] = None;
        let addr = self.namesrvs[index].clone();
        match self.call(index, request) {
            Ok(answer) if answer.code == 0 => Some(answer),
            Ok(answer) => {
                tracing::warn!(
                    namesrv = %addr,
                    code = answer.code,
                    remark = ?answer.remark,
                    "the name server refused the registration"
                );
                None
            }
            Err(error) => {
                tracing::warn!(namesrv = %addr, %error, "registering failed");
                None
            }
        }
    }

    fn unregister_all(&mut self) {
        for index in 0..self.namesrvs.len() {
            let request = unregister_broker_request(&self.identity);
            if let Err(error) = self.call(index, request) {
                tracing::warn!(namesrv = %self.namesrvs[index], %error, "unregistering failed");
            }
        }
    }
}

/// Shard 0's side of the registrar thread: new topic snapshots go to it
/// numbered, and it says which number it has registered, so that shard 0
/// can hold the answer to a request that created a topic until the name
/// servers route it (as Java's broker registers before it answers).
#[derive(Debug)]
pub struct RegistrarLink {
    updates: Sender<RegistrarMsg>,
    /// The number of the newest topic snapshot handed over.
    handed: u64,
    /// The number of the newest topic snapshot the registrar has offered
    /// every name server (accepted or not: a name server that is down
    /// does not hold answers longer than its timeout).
    offered: Arc<AtomicU64>,
}

impl RegistrarLink {
    /// A link and the registrar's ends of it: the updates and the board it
    /// writes the offered numbers on.
    pub fn new() -> (Self, Receiver<RegistrarMsg>, Arc<AtomicU64>) {
        let (updates, receiver) = mpsc::channel();
        let offered = Arc::new(AtomicU64::new(0));
        let link = RegistrarLink {
            updates,
            handed: 0,
            offered: offered.clone(),
        };
        (link, receiver, offered)
    }

    /// Hands `snapshot` over; returns its number.
    pub fn topics(&mut self, snapshot: Arc<TopicConfigSnapshot>) -> u64 {
        self.handed += 1;
        if self
            .updates
            .send(RegistrarMsg::Topics(self.handed, snapshot))
            .is_err()
        {
            // The registrar has stopped: nothing will be registered, and
            // nothing may wait for it.
            self.offered.fetch_max(self.handed, Ordering::Release);
        }
        self.handed
    }

    /// Hands a `brokerPermission` change over.
    pub fn permission(&self, permission: u32) {
        let _ = self.updates.send(RegistrarMsg::Permission(permission));
    }

    /// The number of the newest topic snapshot handed over.
    pub fn handed(&self) -> u64 {
        self.handed
    }

    /// Whether the topic snapshot numbered `number` has been offered to
    /// every name server.
    pub fn offered(&self, number: u64) -> bool {
        self.offered.load(Ordering::Acquire) >= number
    }
}

/// The registrar thread: registers every `period`, and at once when a new
/// topic snapshot arrives; writes the number of each snapshot it offered on
/// `offered` and wakes shard 0 (`wake`), which may hold answers for it;
/// unregisters when shard 0 drops its sender (stop).
fn run_registrar(
    mut registrar: Registrar,
    mut topics: Arc<TopicConfigSnapshot>,
    updates: Receiver<RegistrarMsg>,
    offered: Arc<AtomicU64>,
    wake: Waker,
    period: Duration,
) {
    loop {
        let mut number = None;
        match updates.recv_timeout(period) {
            Ok(first) => {
                // Coalesce a burst of changes into one registration.
                let mut next = Some(first);
                while let Some(message) = next.take().or_else(|| updates.try_recv().ok()) {
                    match message {
                        RegistrarMsg::Topics(handed, snapshot) => {
                            topics = snapshot;
                            number = Some(handed);
                        }
                        RegistrarMsg::Permission(permission) => {
                            registrar.set_permission(permission)
                        }
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // A new table goes out as its changes; the periodic one whole.
        registrar.register(&topics, number.is_some());
        if let Some(number) = number {
            offered.fetch_max(number, Ordering::Release);
            let _ = wake.wake();
        }
    }
    registrar.unregister_all();
}

struct EmbeddedNameServer {
    addr: SocketAddr,
    shutdown: ShutdownHandle,
    thread: JoinHandle<()>,
}

fn start_name_server(port: u16, kv_config_path: &Path) -> Result<EmbeddedNameServer, BrokerError> {
    let (kv_config, persister) = open_kv_config(kv_config_path).map_err(|error| {
        BrokerError::NameServer(format!("opening {}: {error}", kv_config_path.display()))
    })?;
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("ringmq-namesrv".into())
        .spawn(move || {
            let handler = NameServerHandler::with_kv_persister(
                NameServer::with_kv_config(NameServerSettings::default(), kv_config),
                persister,
            );
            let listen = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
            match Server::bind(ServerConfig::new(listen), handler) {
                Ok(server) => {
                    server.handler().wake_on_kv_written(server.waker());
                    let _ = tx.send(Ok((server.local_addr(), server.shutdown_handle())));
                    match server.run() {
                        Ok(handler) => {
                            if let Some(persister) = handler.into_kv_persister()
                                && let Err(error) = persister.flush_and_stop()
                            {
                                tracing::error!(
                                    %error,
                                    "writing the name server's kvConfig.json at shutdown failed"
                                );
                            }
                        }
                        Err(error) => {
                            tracing::error!(error = %error, "the embedded name server failed");
                        }
                    }
                }
                Err(error) => {
                    let _ = tx.send(Err(format!("{error:#}")));
                }
            }
        })
        .map_err(|error| BrokerError::Thread {
            name: "ringmq-namesrv".into(),
            reason: error.to_string(),
        })?;
    match rx.recv() {
        Ok(Ok((addr, shutdown))) => Ok(EmbeddedNameServer {
            addr,
            shutdown,
            thread,
        }),
        Ok(Err(reason)) => Err(BrokerError::NameServer(reason)),
        Err(_) => Err(BrokerError::NameServer("its thread died".into())),
    }
}

/// Runs the broker until SIGTERM/SIGINT (the signals must already be blocked
/// in every thread, see [`signal::block_termination_signals`]).
///
/// # Errors
/// A startup step failed (the message names it), or a shard failed.
pub fn run(config: BrokerConfig) -> Result<(), BrokerError> {
    let root = config.store_path_root_dir.clone();
    let _lock = lock_store(&root)?;
    let now = wall_clock_ms();
    let dir = ConfigDir::under_store_root(&root);
    let (config, config_updates) = apply_config_updates(config, &dir)?;
    let mut topic_table = TopicConfigTable::new(
        TopicConfigSettings {
            broker_cluster_name: config.broker_cluster_name.clone(),
            broker_name: config.broker_name.clone(),
            auto_create_topic_enable: config.auto_create_topic_enable,
            default_topic_queue_nums: config.default_topic_queue_nums as i32,
            ..TopicConfigSettings::default()
        },
        now,
    );
    if let Some(content) = load_file(&dir, ConfigFile::Topics)? {
        topic_table
            .load(&content)
            .map_err(|error| BrokerError::ConfigFile {
                file: ConfigFile::Topics.file_name(),
                reason: error.to_string(),
            })?;
    }
    let mut group_table = SubscriptionGroupTable::new(config.auto_create_subscription_group, now);
    if let Some(content) = load_file(&dir, ConfigFile::SubscriptionGroups)? {
        group_table
            .load(&content)
            .map_err(|error| BrokerError::ConfigFile {
                file: ConfigFile::SubscriptionGroups.file_name(),
                reason: error.to_string(),
            })?;
    }
    let offsets_file = load_file(&dir, ConfigFile::ConsumerOffsets)?.map(Arc::new);
    let delay_levels = crate::features::delay::DelayLevels::parse(&config.message_delay_level)
        .map_err(|error| BrokerError::ConfigFile {
            file: "messageDelayLevel",
            reason: error.to_string(),
        })?;
    let delay_file = match load_file(&dir, ConfigFile::DelayOffsets)? {
        Some(content) => {
            ringmq_protocol::json::DelayOffsetFile::from_json(&content).map_err(|error| {
                BrokerError::ConfigFile {
                    file: ConfigFile::DelayOffsets.file_name(),
                    reason: error.to_string(),
                }
            })?
        }
        None => ringmq_protocol::json::DelayOffsetFile::default(),
    };
    let delay_board = super::schedule::DelayOffsetBoard::new(delay_file);
    let timer_progress = match load_file(&dir, ConfigFile::TimerProgress)? {
        Some(content) => super::timer::TimerProgressFile::decode(&content).ok_or_else(|| {
            BrokerError::ConfigFile {
                file: ConfigFile::TimerProgress.file_name(),
                reason: "not {\"durableOffset\":N,\"delivered\":[...]}".to_owned(),
            }
        })?,
        None => super::timer::TimerProgressFile::default(),
    };
    let persister = Persister::spawn(dir)?;

    let name_server = match &config.namesrv_addrs {
        Some(_) => None,
        None => Some(start_name_server(
            config.namesrv_listen_port,
            &config.effective_kv_config_path(),
        )?),
    };
    let namesrvs: Vec<String> = match (&config.namesrv_addrs, &name_server) {
        (Some(addrs), _) => addrs.clone(),
        (None, Some(embedded)) => vec![format!("127.0.0.1:{}", embedded.addr.port())],
        (None, None) => unreachable!("an embedded name server runs without namesrvAddr"),
    };

    let shard_count = config.shard_count as u16;
    let mut config = config;
    // With listenPort=0 the kernel picks the port now, through a placeholder
    // listener in the same SO_REUSEPORT group, so that every shard (and the
    // STOREHOST of every record) knows it before the first shard binds. It
    // closes before the boot line, when nobody has connected yet.
    let placeholder = if config.listen_port == 0 {
        let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
        let listener = crate::server::socket::bind_listener(any)
            .and_then(|fd| crate::server::socket::local_addr(fd.as_raw_fd()).map(|addr| (fd, addr)))
            .map_err(|error| BrokerError::Shard {
                shard: 0,
                reason: format!("picking a listen port: {error}"),
            })?;
        config.listen_port = listener.1.port();
        Some(listener.0)
    } else {
        None
    };
    let port = config.listen_port;
    let (registrar_link, registrar_rx, registrar_offered) = RegistrarLink::new();
    let topics = topic_table.snapshot();
    let groups = group_table.snapshot();
    let mut control = Some(ControlPlane::new(
        topic_table,
        group_table,
        ClientRegistry::new(true),
        Some(registrar_link),
        config_updates,
        now,
    ));
    let mut inboxes = Vec::new();
    let mut senders = Vec::new();
    for _ in 0..shard_count {
        let (tx, rx) = mpsc::sync_channel(INBOX_CAPACITY);
        senders.push(tx);
        inboxes.push(Some(rx));
    }
    let settings = Arc::new(shard_settings(&config, shard_count, port));
    let shared_config = Arc::new(config.clone());
    let mut threads = Vec::new();
    let mut readies = Vec::new();
    let mut link_senders = Vec::new();
    for id in 0..shard_count {
        let (ready_tx, ready_rx) = mpsc::channel();
        let (links_tx, links_rx) = mpsc::channel();
        let start = ShardStart {
            id,
            config: shared_config.clone(),
            settings: settings.clone(),
            port,
            joins_port: id > 0 || placeholder.is_some(),
            topics: topics.clone(),
            groups: groups.clone(),
            control: if id == 0 { control.take() } else { None },
            offsets_file: offsets_file.clone(),
            persister: persister.clone(),
            delay_levels: delay_levels.clone(),
            delay_board: delay_board.clone(),
            timer_progress: timer_progress.clone(),
            inbox: inboxes[usize::from(id)]
                .take()
                .expect("one inbox per shard"),
            ready: ready_tx,
            links: links_rx,
        };
        threads.push(spawn_shard(start)?);
        link_senders.push(links_tx);
        let ready = match ready_rx.recv_timeout(SHARD_START_TIMEOUT) {
            Ok(Ok(ready)) => ready,
            Ok(Err(reason)) => return Err(BrokerError::Shard { shard: id, reason }),
            Err(_) => {
                return Err(BrokerError::Shard {
                    shard: id,
                    reason: "it did not start in time".into(),
                });
            }
        };
        assert_eq!(ready.port, port, "every shard listens on the same port");
        readies.push(ready);
    }
    drop(placeholder);
    let wakers: Vec<Waker> = readies.iter().map(|ready| ready.waker.clone()).collect();
    for links in &link_senders {
        let _ = links.send((senders.clone(), wakers.clone()));
    }
    let inbox_senders = senders;

    let master = (!config.broker_role.is_master()).then(MasterAddress::default);
    let mut registrar = Registrar::new(
        BrokerIdentity::from_config(&config),
        namesrvs.clone(),
        master.clone(),
        config.broker_permission,
    );
    if registrar.register_all(&topics) == 0 {
        tracing::warn!("no name server accepted the registration; retrying in the background");
    }
    let boot = format!(
        "The broker[{}, {}:{}] boot success. serializeType=JSON and name server is {}",
        config.broker_name,
        config.broker_ip1,
        port,
        namesrvs.join(";")
    );
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{boot}")
            .and_then(|()| stdout.flush())
            .map_err(BrokerError::BootLine)?;
    }
    tracing::info!("{boot}");
    let period = Duration::from_millis(config.register_name_server_period_ms.max(1_000));
    let registrar = {
        let topics = topics.clone();
        let wake = wakers[0].clone();
        std::thread::Builder::new()
            .name("ringmq-registrar".into())
            .spawn(move || {
                run_registrar(
                    registrar,
                    topics,
                    registrar_rx,
                    registrar_offered,
                    wake,
                    period,
                )
            })
            .map_err(|error| BrokerError::Thread {
                name: "ringmq-registrar".into(),
                reason: error.to_string(),
            })?
    };
    // A slave's replicator threads (not joined: each ends when its shard
    // has stopped, or within one socket timeout of the stop).
    let replicas_stop = Arc::new(AtomicBool::new(false));
    if let Some(master) = master {
        let statuses: Arc<[Arc<ReplicaStatus>]> = readies
            .iter()
            .map(|_| Arc::new(ReplicaStatus::new(master.clone())))
            .collect();
        for (id, ready) in readies.iter().enumerate() {
            Replicator {
                shard: id as u16,
                shard_count,
                segment_size: config.commit_log_segment_size_bytes,
                inbox: inbox_senders[id].clone(),
                waker: ready.waker.clone(),
                master: master.clone(),
                stop: replicas_stop.clone(),
                slave_addr: format!("{}:{port}", config.broker_ip1),
                status: Arc::clone(&statuses[id]),
                peers: Arc::clone(&statuses),
            }
            .spawn()
            .map_err(|error| BrokerError::Thread {
                name: format!("ringmq-replica-{id}"),
                reason: error.to_string(),
            })?;
        }
    }
    drop(inbox_senders);
    let stops: Vec<ShutdownHandle> = readies.iter().map(|ready| ready.shutdown.clone()).collect();
    signal::spawn_signal_thread_with(move || {
        replicas_stop.store(true, Ordering::Relaxed);
        for stop in &stops {
            stop.request();
        }
    })
    .map_err(|error| BrokerError::Thread {
        name: "ringmq-signals".into(),
        reason: error.to_string(),
    })?;

    let mut failure = None;
    for (id, thread) in threads.into_iter().enumerate() {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => {
                tracing::error!(shard = id, %reason, "shard failed");
                failure.get_or_insert(BrokerError::Shard {
                    shard: id as u16,
                    reason,
                });
            }
            Err(_) => {
                failure.get_or_insert(BrokerError::Thread {
                    name: format!("ringmq-shard-{id}"),
                    reason: "panicked".into(),
                });
            }
        }
        // A shard that stopped on its own (failure) stops the others too.
        for ready in &readies {
            ready.shutdown.request();
        }
    }
    let _ = registrar.join();
    persister.flush_and_stop()?;
    if let Some(embedded) = name_server {
        embedded.shutdown.request();
        let _ = embedded.thread.join();
    }
    tracing::info!("broker stopped");
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

pub(crate) fn shard_settings(config: &BrokerConfig, shard_count: u16, port: u16) -> ShardSettings {
    ShardSettings {
        shard_count,
        cluster_name: config.broker_cluster_name.clone(),
        broker_name: config.broker_name.clone(),
        broker_id: config.broker_id,
        store_host: SocketAddr::new(config.broker_ip1, port),
        max_message_size: config.message_size_max_bytes as usize,
        is_master: config.broker_role.is_master(),
        slow_pull_lag_bytes: slow_pull_lag_bytes(
            physical_memory_bytes(),
            config.access_message_in_memory_max_ratio_percent,
            shard_count,
        ),
        broker_config: Arc::new(config.clone()),
    }
}

/// `config` with what UPDATE_BROKER_CONFIG changed before this start
/// (`brokerConfigUpdates.properties` in `config`'s store) applied over it:
/// the configuration a broker started with `config` runs with, which
/// `ringmq broker --print-config` prints.
///
/// # Errors
/// The file cannot be read, or holds a key or value the broker refuses.
pub fn effective_config(config: BrokerConfig) -> Result<BrokerConfig, BrokerError> {
    let dir = ConfigDir::under_store_root(&config.store_path_root_dir);
    Ok(apply_config_updates(config, &dir)?.0)
}

/// `config` with what UPDATE_BROKER_CONFIG changed before this start
/// (`brokerConfigUpdates.properties`) applied over it, and those keys with
/// their values.
fn apply_config_updates(
    config: BrokerConfig,
    dir: &ConfigDir,
) -> Result<(BrokerConfig, BTreeMap<String, String>), BrokerError> {
    let file = ConfigFile::BrokerConfigUpdates;
    let Some(content) = load_file(dir, file)? else {
        return Ok((config, BTreeMap::new()));
    };
    let invalid = |reason: String| BrokerError::ConfigFile {
        file: file.file_name(),
        reason: format!(
            "{reason} (written by UPDATE_BROKER_CONFIG; remove the file to start without its changes)"
        ),
    };
    let text = String::from_utf8(content).map_err(|error| invalid(error.to_string()))?;
    let (config, applied) = config
        .updated(&text)
        .map_err(|error| invalid(error.to_string()))?;
    tracing::info!(file = file.file_name(), keys = ?applied, "applied the keys UPDATE_BROKER_CONFIG changed");
    let applied = applied
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect();
    Ok((config, applied))
}

/// The machine's memory (`sysconf`), 0 when it cannot be told.
fn physical_memory_bytes() -> u64 {
    // SAFETY: sysconf reads system values and touches no memory of ours.
    let (pages, page_size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    u64::try_from(pages)
        .unwrap_or(0)
        .saturating_mul(u64::try_from(page_size).unwrap_or(0))
}

/// How far behind its shard's log end a pull's last record may be before
/// the consumer counts as slow: Java's `accessMessageInMemoryMaxRatio` share
/// of `memory`, split over the shards, since each shard's log holds about
/// its share of what the broker wrote after that record.
pub(crate) fn slow_pull_lag_bytes(memory: u64, ratio_percent: u32, shard_count: u16) -> u64 {
    let share = u128::from(memory) * u128::from(ratio_percent) / 100;
    u64::try_from(share / u128::from(shard_count.max(1))).unwrap_or(u64::MAX)
}
