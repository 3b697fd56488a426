//! The broker configuration: RocketMQ's `broker.conf` keys with RocketMQ's
//! defaults, plus ringmq's own keys.
//!
//! Sources, later ones winning (as `mqbroker -c FILE` does):
//!
//! ```text
//! defaults ─▶ properties file (-c FILE) ─▶ --KEY=VALUE overrides ─▶ -n ADDR
//! ```
//!
//! Keys are spelled as in RocketMQ (`brokerClusterName`, `listenPort`, ...);
//! `mappedFileSizeCommitLog` is accepted as well as RocketMQ's historical
//! `mapedFileSizeCommitLog`, which is the name [`BrokerConfig::print_config`]
//! shows. Defaults that depend on the machine (`brokerIP1`,
//! `storePathRootDir`, `shards`) come from a [`ConfigEnvironment`] the caller
//! fills in, so nothing here touches the network, the environment or the
//! file system.
//!
//! Choices where RocketMQ has none that fits:
//!
//! - `brokerName` defaults to `broker-a` (RocketMQ uses the host name): a
//!   stable name keeps a single-node setup's routes and store layout the same
//!   across hosts.
//! - An unset `namesrvAddr` means "run the embedded name server on
//!   `namesrvListenPort` (9876) and register with it".
//! - Booleans must be `true` or `false` (any case). Java's
//!   `Boolean.parseBoolean` reads any other text as false; here it is an
//!   error.
//! - Out-of-range values are errors, where Java silently clamps some of them
//!   (`diskMaxUsedSpaceRatio` to 10..95, `registerNameServerPeriod` to
//!   10..60 s) and ignores others.
//! - A master's `brokerId` must be 0 (RocketMQ's `BrokerStartup` overwrites
//!   it with 0); a slave's must be positive, as RocketMQ requires.
//!
//! # Invariants
//!
//! - A [`BrokerConfig`] returned by [`BrokerConfig::load`] has passed
//!   [`BrokerConfig::validate`].
//! - [`BrokerConfig::print_config`] lists every key of [`KEYS`] once, sorted,
//!   and its output loads back into a configuration that prints the same
//!   (implicit defaults such as `haListenPort` become explicit).

mod error;
mod properties;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

pub use error::{ConfigError, ConfigSource, ERROR_VALUE_SIZE_MAX};
pub use properties::{Property, parse_properties};

use ringmq_protocol::limits::FRAME_SIZE_MAX;
use ringmq_storage::limits::{
    COMMIT_LOG_RECYCLE_SEGMENTS_DEFAULT, COMMIT_LOG_REMOVE_STEP_BYTES_DEFAULT,
    CONSUME_QUEUE_FLUSH_INTERVAL_MS_DEFAULT, GROUP_SYNC_MIN_PER_S_DEFAULT,
};

/// Block size the CommitLog is written in (O_DIRECT alignment).
pub const BLOCK_SIZE: u64 = 4096;
/// RocketMQ's default CommitLog segment size, 1 GiB.
pub const COMMIT_LOG_SEGMENT_SIZE_DEFAULT: u64 = 1 << 30;
/// Smallest CommitLog segment accepted (tests use small segments).
pub const COMMIT_LOG_SEGMENT_SIZE_MIN: u64 = 64 * 1024;
/// Largest CommitLog segment: Java stores the size in an `int`.
pub const COMMIT_LOG_SEGMENT_SIZE_MAX: u64 = (i32::MAX as u64 / BLOCK_SIZE) * BLOCK_SIZE;
/// Bytes a record needs beyond its body: fixed fields, topic (≤ 255 bytes)
/// and properties (≤ 32767 bytes), rounded up. A segment must hold one
/// largest record plus the 8-byte end-of-file blank record.
pub const RECORD_OVERHEAD_MAX: u64 = 64 * 1024;
/// RocketMQ's default `maxMessageSize`, 4 MiB.
pub const MESSAGE_SIZE_MAX_DEFAULT: u32 = 4 * 1024 * 1024;
/// Largest `maxMessageSize`: the store's limit on a body (RocketMQ's
/// default), which its write buffers are sized for; it also fits a frame
/// with its request header.
pub const MESSAGE_SIZE_MAX_LIMIT: u32 = ringmq_storage::limits::MESSAGE_SIZE_MAX_BYTES as u32;
const _: () = assert!(MESSAGE_SIZE_MAX_LIMIT <= FRAME_SIZE_MAX - 64 * 1024);
/// Most shards: the shard id lives in the top 8 bits of public offsets.
pub const SHARD_COUNT_MAX: u32 = 256;
/// Most queues a topic is created with by default.
pub const DEFAULT_TOPIC_QUEUE_NUMS_MAX: u32 = 1024;
/// Ring entries bounds (io_uring accepts powers of two up to 32768).
pub const RING_ENTRIES_MIN: u32 = 8;
/// See [`RING_ENTRIES_MIN`].
pub const RING_ENTRIES_MAX: u32 = ringmq_storage::ring::RING_ENTRIES_MAX;
/// Most connections one shard accepts.
pub const CONNECTIONS_PER_SHARD_LIMIT: u32 = 65536;
/// Default tail cache per shard, 64 MiB.
pub const TAIL_CACHE_SIZE_DEFAULT: u64 = 64 * 1024 * 1024;
/// Java's default listen port of the name server.
pub const NAMESRV_LISTEN_PORT_DEFAULT: u16 = 9876;
/// The directory of the name server's `kvConfig.json`: under `$HOME` for
/// `ringmq namesrv` (Java's `${user.home}/namesrv`), under the store root
/// for a broker's embedded name server.
pub const NAMESRV_DIR_NAME: &str = "namesrv";
/// Java's default broker listen port.
pub const LISTEN_PORT_DEFAULT: u16 = 10911;

const _: () = assert!(COMMIT_LOG_SEGMENT_SIZE_DEFAULT.is_multiple_of(BLOCK_SIZE));
const _: () = assert!(COMMIT_LOG_SEGMENT_SIZE_MIN.is_multiple_of(BLOCK_SIZE));
const _: () = assert!(
    COMMIT_LOG_SEGMENT_SIZE_DEFAULT >= 2 * (MESSAGE_SIZE_MAX_DEFAULT as u64 + RECORD_OVERHEAD_MAX)
);
const _: () = assert!(MESSAGE_SIZE_MAX_DEFAULT <= MESSAGE_SIZE_MAX_LIMIT);

/// When a send is acknowledged relative to the disk (`flushDiskType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushDiskType {
    /// `ASYNC_FLUSH`: after the write completed; fdatasync on an interval.
    AsyncFlush,
    /// `SYNC_FLUSH`: after an fdatasync covering the message.
    SyncFlush,
}

impl FlushDiskType {
    /// RocketMQ's name.
    pub fn name(self) -> &'static str {
        match self {
            FlushDiskType::AsyncFlush => "ASYNC_FLUSH",
            FlushDiskType::SyncFlush => "SYNC_FLUSH",
        }
    }
}

/// The broker's replication role (`brokerRole`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerRole {
    /// `ASYNC_MASTER`: sends acknowledged without waiting for a slave.
    AsyncMaster,
    /// `SYNC_MASTER`: sends acknowledged once a slave has them.
    SyncMaster,
    /// `SLAVE`: replicates a master, refuses sends.
    Slave,
}

impl BrokerRole {
    /// RocketMQ's name.
    pub fn name(self) -> &'static str {
        match self {
            BrokerRole::AsyncMaster => "ASYNC_MASTER",
            BrokerRole::SyncMaster => "SYNC_MASTER",
            BrokerRole::Slave => "SLAVE",
        }
    }

    /// Whether this role is a master role.
    pub fn is_master(self) -> bool {
        self != BrokerRole::Slave
    }
}

/// Facts about the machine that defaults depend on, gathered by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEnvironment {
    /// `$HOME` (RocketMQ's `user.home`); the store defaults to `$HOME/store`.
    pub home_dir: PathBuf,
    /// CPUs in the process's affinity mask: the default shard count.
    pub cpu_count: u32,
    /// The default `brokerIP1`; see [`pick_broker_ip1`].
    pub broker_ip1: IpAddr,
}

/// The default `brokerIP1`: the first non-loopback IPv4 address of
/// `interface_addrs` (in the order the caller lists the interfaces), or
/// 127.0.0.1 when there is none.
pub fn pick_broker_ip1(interface_addrs: &[IpAddr]) -> IpAddr {
    interface_addrs
        .iter()
        .find(|addr| matches!(addr, IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_unspecified()))
        .copied()
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Every configuration key, in its canonical spelling, sorted.
pub const KEYS: &[&str] = &[
    "accessMessageInMemoryMaxRatio",
    "autoCreateSubscriptionGroup",
    "autoCreateTopicEnable",
    "brokerClusterName",
    "brokerIP1",
    "brokerIP2",
    "brokerId",
    "brokerName",
    "brokerPermission",
    "brokerRole",
    "commitLogRecycleSegments",
    "commitLogRemoveStepBytes",
    "connectionsPerShardMax",
    "defaultTopicQueueNums",
    "deleteCommitLogFilesInterval",
    "deleteWhen",
    "diskMaxUsedSpaceRatio",
    "enablePropertyFilter",
    "fdatasyncGroupMinPerSecond",
    "fileReservedTime",
    "flushDiskType",
    "flushIntervalCommitLog",
    "flushIntervalConsumeQueue",
    "haListenPort",
    "kvConfigPath",
    "listenPort",
    "mapedFileSizeCommitLog",
    "maxMessageSize",
    "messageDelayLevel",
    "namesrvAddr",
    "namesrvListenPort",
    "offsetCheckInSlave",
    "registerNameServerPeriod",
    "ringEntries",
    "shardCpuPinning",
    "shards",
    "slaveReadEnable",
    "storePathRootDir",
    "syncFlushTimeout",
    "tailCacheSize",
    "transactionCheckInterval",
    "transactionCheckMax",
    "transactionTimeOut",
];

/// The keys UPDATE_BROKER_CONFIG may change while the broker runs, sorted;
/// every other key needs a restart.
pub const RUNTIME_KEYS: &[&str] = &[
    "accessMessageInMemoryMaxRatio",
    "brokerPermission",
    "deleteCommitLogFilesInterval",
    "deleteWhen",
    "diskMaxUsedSpaceRatio",
    "fileReservedTime",
    "offsetCheckInSlave",
    "slaveReadEnable",
];

/// `PermName.PERM_READ`.
pub const PERM_READ: u32 = 4;
/// `PermName.PERM_WRITE`.
pub const PERM_WRITE: u32 = 2;

/// Other spellings accepted for a key: (alias, canonical key).
pub const KEY_ALIASES: &[(&str, &str)] = &[("mappedFileSizeCommitLog", "mapedFileSizeCommitLog")];

/// The effective broker configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    /// `brokerClusterName` (default `DefaultCluster`).
    pub broker_cluster_name: String,
    /// `brokerName` (default `broker-a`; RocketMQ uses the host name).
    pub broker_name: String,
    /// `brokerId`: 0 = master, > 0 = slave.
    pub broker_id: i64,
    /// `brokerPermission` (6: read and write): a broker without
    /// [`PERM_WRITE`] registers its topics without it, so producers move
    /// to other brokers (Java's way to drain a broker), and refuses
    /// send-backs and sends to order topics; one without [`PERM_READ`]
    /// refuses pulls.
    pub broker_permission: u32,
    /// `brokerIP1`: the address advertised to clients and stored in records.
    pub broker_ip1: IpAddr,
    /// `brokerIP2`: the address of the HA service; `None` = `brokerIP1`.
    pub broker_ip2: Option<IpAddr>,
    /// `listenPort` (10911). The fast port is `listenPort - 2`.
    pub listen_port: u16,
    /// `haListenPort`: `None` (or 0 in the file) = `listenPort + 1`. Registered
    /// with the name servers as `haServerAddr`; nothing listens on it (ringmq's
    /// replication uses the remoting port, docs/architecture.md "Replication").
    pub ha_listen_port: Option<u16>,
    /// `namesrvAddr`: `host:port` list; `None` = embedded name server.
    pub namesrv_addrs: Option<Vec<String>>,
    /// `namesrvListenPort` (ringmq): port of the embedded name server.
    pub namesrv_listen_port: u16,
    /// `kvConfigPath` (Java's name server key): the embedded name server's
    /// `kvConfig.json`; `None` = `<storePathRootDir>/namesrv/kvConfig.json`
    /// (see [`BrokerConfig::effective_kv_config_path`]).
    pub kv_config_path: Option<PathBuf>,
    /// `storePathRootDir` (default `$HOME/store`).
    pub store_path_root_dir: PathBuf,
    /// `flushDiskType`.
    pub flush_disk_type: FlushDiskType,
    /// `syncFlushTimeout`: SYNC_FLUSH answers FLUSH_DISK_TIMEOUT after this.
    pub sync_flush_timeout_ms: u64,
    /// `flushIntervalCommitLog`: ASYNC_FLUSH fdatasync interval.
    pub flush_interval_commit_log_ms: u64,
    /// `flushIntervalConsumeQueue`: ConsumeQueue and index write-behind
    /// interval (1 s, as RocketMQ's).
    pub flush_interval_consume_queue_ms: u64,
    /// `commitLogRecycleSegments` (ringmq): CommitLog segments retention
    /// retires that are kept as spares and renamed into later segments.
    pub commit_log_recycle_segments: u32,
    /// `commitLogRemoveStepBytes` (ringmq): an unlinked retired segment is
    /// first shrunk by this many bytes at a time (0: unlinked whole).
    pub commit_log_remove_step_bytes: u64,
    /// `fdatasyncGroupMinPerSecond` (ringmq): ConsumeQueue and index
    /// fdatasyncs per second from which a shard runs them as one `syncfs`
    /// per group (0: never; see `UringDiskConfig::group_sync_min_per_s`).
    pub fdatasync_group_min_per_s: u64,
    /// `autoCreateTopicEnable`.
    pub auto_create_topic_enable: bool,
    /// `autoCreateSubscriptionGroup`.
    pub auto_create_subscription_group: bool,
    /// `defaultTopicQueueNums`: queues of auto-created topics.
    pub default_topic_queue_nums: u32,
    /// `mapedFileSizeCommitLog`: CommitLog segment size.
    pub commit_log_segment_size_bytes: u64,
    /// `fileReservedTime`: hours a CommitLog segment is kept.
    pub file_reserved_time_hours: u32,
    /// `deleteWhen`: hours of the day (`;`-separated) when expired files go.
    pub delete_when_hours: Vec<u8>,
    /// `diskMaxUsedSpaceRatio`: percent of the disk the store may fill.
    pub disk_max_used_space_ratio_percent: u32,
    /// `deleteCommitLogFilesInterval`: milliseconds between two CommitLog
    /// segment removals of one retention run.
    pub delete_commit_log_files_interval_ms: u64,
    /// `maxMessageSize`: largest message body (and batch body).
    pub message_size_max_bytes: u32,
    /// `messageDelayLevel`: the delay of each level, `1s 5s ... 2h` by default
    /// (parsed by [`crate::features::delay::DelayLevels::parse`]).
    pub message_delay_level: String,
    /// `brokerRole`.
    pub broker_role: BrokerRole,
    /// `registerNameServerPeriod`: interval of REGISTER_BROKER.
    pub register_name_server_period_ms: u64,
    /// `shards` (ringmq): shard threads; default the CPUs of the affinity mask.
    pub shard_count: u32,
    /// `shardCpuPinning` (ringmq, default true): pin shard `i` to the `i`-th
    /// CPU of the affinity mask. False leaves the shards to the scheduler,
    /// for hosts where other busy processes share the CPUs (a pinned shard
    /// cannot move away from a CPU another process holds).
    pub shard_cpu_pinning: bool,
    /// `tailCacheSize` (ringmq): bytes of recent CommitLog kept in memory per shard.
    pub tail_cache_size_bytes: u64,
    /// `ringEntries` (ringmq): submission queue entries of each shard's one
    /// ring (sockets and disk); at least `2 * connectionsPerShardMax + 3` (a
    /// receive and a send per connection, the accept and a timer) plus
    /// `DISK_LANE_SLOTS_MIN` for the store and the ring's own two.
    pub ring_entries: u32,
    /// `connectionsPerShardMax` (ringmq): connections one shard serves at
    /// once; a shard closes one more at once.
    pub connections_per_shard_max: u32,
    /// `transactionTimeOut`: a half message younger than this is not checked.
    pub transaction_timeout_ms: u64,
    /// `transactionCheckInterval`: time between check-back rounds.
    pub transaction_check_interval_ms: u64,
    /// `transactionCheckMax`: check-backs before a half message is discarded.
    pub transaction_check_max: u32,
    /// `enablePropertyFilter`: whether SQL92 subscriptions are accepted.
    pub enable_property_filter: bool,
    /// `slaveReadEnable`: a master suggests its slave to consumers that
    /// fell behind, and a slave keeps serving the consumers it was
    /// suggested to (docs/architecture.md, "Pulls from a slave").
    pub slave_read_enable: bool,
    /// `accessMessageInMemoryMaxRatio` (percent of the machine's memory): a
    /// consumer is "behind" when the broker's logs hold more than this share
    /// of memory after the last message it pulled.
    pub access_message_in_memory_max_ratio_percent: u32,
    /// `offsetCheckInSlave`: a slave moves a consumer whose offset is out of
    /// its queue's range, as a master does; by default it answers
    /// PULL_OFFSET_MOVED with the consumer's own offset (its queues may
    /// trail the master's).
    pub offset_check_in_slave: bool,
}

impl BrokerConfig {
    /// The defaults for `env`.
    pub fn defaults(env: &ConfigEnvironment) -> Self {
        BrokerConfig {
            broker_cluster_name: "DefaultCluster".to_owned(),
            broker_name: "broker-a".to_owned(),
            broker_id: 0,
            broker_permission: PERM_READ | PERM_WRITE,
            broker_ip1: env.broker_ip1,
            broker_ip2: None,
            listen_port: LISTEN_PORT_DEFAULT,
            ha_listen_port: None,
            namesrv_addrs: None,
            namesrv_listen_port: NAMESRV_LISTEN_PORT_DEFAULT,
            kv_config_path: None,
            store_path_root_dir: env.home_dir.join("store"),
            flush_disk_type: FlushDiskType::AsyncFlush,
            sync_flush_timeout_ms: 5000,
            flush_interval_commit_log_ms: 500,
            flush_interval_consume_queue_ms: CONSUME_QUEUE_FLUSH_INTERVAL_MS_DEFAULT,
            commit_log_recycle_segments: COMMIT_LOG_RECYCLE_SEGMENTS_DEFAULT as u32,
            fdatasync_group_min_per_s: GROUP_SYNC_MIN_PER_S_DEFAULT,
            commit_log_remove_step_bytes: COMMIT_LOG_REMOVE_STEP_BYTES_DEFAULT,
            auto_create_topic_enable: true,
            auto_create_subscription_group: true,
            default_topic_queue_nums: 8,
            commit_log_segment_size_bytes: COMMIT_LOG_SEGMENT_SIZE_DEFAULT,
            file_reserved_time_hours: 72,
            delete_when_hours: vec![4],
            disk_max_used_space_ratio_percent: 75,
            delete_commit_log_files_interval_ms:
                ringmq_storage::retention::DELETE_COMMIT_LOG_FILES_INTERVAL_MS_DEFAULT,
            message_size_max_bytes: MESSAGE_SIZE_MAX_DEFAULT,
            message_delay_level: crate::features::delay::DELAY_LEVELS_DEFAULT.to_owned(),
            broker_role: BrokerRole::AsyncMaster,
            register_name_server_period_ms: 30_000,
            shard_count: env.cpu_count.clamp(1, SHARD_COUNT_MAX),
            shard_cpu_pinning: true,
            tail_cache_size_bytes: TAIL_CACHE_SIZE_DEFAULT,
            ring_entries: crate::shard::runtime::SHARD_RING_ENTRIES_DEFAULT,
            connections_per_shard_max: crate::server::CONNECTION_COUNT_MAX as u32,
            transaction_timeout_ms: 6_000,
            transaction_check_interval_ms: 60_000,
            transaction_check_max: 15,
            enable_property_filter: false,
            slave_read_enable: false,
            access_message_in_memory_max_ratio_percent: 40,
            offset_check_in_slave: false,
        }
    }

    /// Builds the configuration from its sources: defaults for `env`, then
    /// `file` (its name for messages, and its text), then `overrides` (pairs
    /// from [`parse_override`]), then `namesrv_addr` (`-n`). Validates the
    /// result.
    ///
    /// # Errors
    ///
    /// The first unknown key, invalid value or inconsistency, naming the key,
    /// the value and its source.
    pub fn load(
        env: &ConfigEnvironment,
        file: Option<(&str, &str)>,
        overrides: &[(String, String)],
        namesrv_addr: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let mut config = Self::defaults(env);
        if let Some((path, text)) = file {
            for property in parse_properties(text)? {
                let origin = ConfigSource::File {
                    path: path.to_owned(),
                    line: property.line,
                };
                config.set(&property.key, &property.value, &origin)?;
            }
        }
        for (key, value) in overrides {
            config.set(key, value, &ConfigSource::Override)?;
        }
        if let Some(addr) = namesrv_addr {
            config.set("namesrvAddr", addr, &ConfigSource::NamesrvFlag)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// Sets one key (canonical spelling or alias) from its text.
    ///
    /// # Errors
    ///
    /// [`ConfigError::UnknownKey`] or [`ConfigError::InvalidValue`].
    pub fn set(
        &mut self,
        key: &str,
        value: &str,
        origin: &ConfigSource,
    ) -> Result<(), ConfigError> {
        let key = canonical_key(key).ok_or_else(|| unknown_key(key, value, origin))?;
        let v = Value {
            key,
            text: value,
            origin,
        };
        match key {
            "brokerClusterName" => self.broker_cluster_name = v.name()?,
            "brokerName" => self.broker_name = v.name()?,
            "brokerId" => self.broker_id = v.int(0, i64::from(i32::MAX))?,
            "brokerPermission" => self.broker_permission = v.int(0, 7)? as u32,
            "brokerIP1" => self.broker_ip1 = v.ip()?,
            "brokerIP2" => self.broker_ip2 = (!value.is_empty()).then(|| v.ip()).transpose()?,
            // 0: the kernel picks the port (tests); the boot line says which.
            "listenPort" => self.listen_port = v.int(0, 65535)? as u16,
            "haListenPort" => {
                self.ha_listen_port = match v.int(0, 65535)? {
                    0 => None,
                    port => Some(port as u16),
                }
            }
            "namesrvAddr" => self.namesrv_addrs = v.addr_list()?,
            "namesrvListenPort" => self.namesrv_listen_port = v.int(0, 65535)? as u16,
            "kvConfigPath" => self.kv_config_path = Some(v.kv_config_path()?),
            "storePathRootDir" => self.store_path_root_dir = PathBuf::from(v.name()?),
            "flushDiskType" => {
                self.flush_disk_type = v.choice(&[
                    ("ASYNC_FLUSH", FlushDiskType::AsyncFlush),
                    ("SYNC_FLUSH", FlushDiskType::SyncFlush),
                ])?
            }
            "syncFlushTimeout" => self.sync_flush_timeout_ms = v.int(1, 3_600_000)? as u64,
            "flushIntervalCommitLog" => {
                self.flush_interval_commit_log_ms = v.int(1, 60_000)? as u64
            }
            "flushIntervalConsumeQueue" => {
                self.flush_interval_consume_queue_ms = v.int(1, 60_000)? as u64
            }
            "commitLogRecycleSegments" => {
                self.commit_log_recycle_segments = v.int(0, 1_000)? as u32
            }
            "commitLogRemoveStepBytes" => {
                self.commit_log_remove_step_bytes = v.int(0, 1 << 40)? as u64
            }
            "fdatasyncGroupMinPerSecond" => {
                self.fdatasync_group_min_per_s = v.int(0, 100_000_000)? as u64
            }
            "autoCreateTopicEnable" => self.auto_create_topic_enable = v.bool()?,
            "autoCreateSubscriptionGroup" => self.auto_create_subscription_group = v.bool()?,
            "defaultTopicQueueNums" => {
                self.default_topic_queue_nums =
                    v.int(1, i64::from(DEFAULT_TOPIC_QUEUE_NUMS_MAX))? as u32
            }
            "mapedFileSizeCommitLog" => {
                self.commit_log_segment_size_bytes = v.int(
                    COMMIT_LOG_SEGMENT_SIZE_MIN as i64,
                    COMMIT_LOG_SEGMENT_SIZE_MAX as i64,
                )? as u64
            }
            "fileReservedTime" => self.file_reserved_time_hours = v.int(1, 87_600)? as u32,
            "deleteWhen" => self.delete_when_hours = v.hours()?,
            "diskMaxUsedSpaceRatio" => {
                self.disk_max_used_space_ratio_percent = v.int(10, 95)? as u32
            }
            "deleteCommitLogFilesInterval" => {
                self.delete_commit_log_files_interval_ms = v.int(
                    0,
                    ringmq_storage::retention::DELETE_COMMIT_LOG_FILES_INTERVAL_MS_MAX as i64,
                )? as u64
            }
            "maxMessageSize" => {
                self.message_size_max_bytes = v.int(1, i64::from(MESSAGE_SIZE_MAX_LIMIT))? as u32
            }
            "messageDelayLevel" => {
                crate::features::delay::DelayLevels::parse(value)
                    .map_err(|error| v.invalid(error.to_string()))?;
                self.message_delay_level = value.trim().to_owned();
            }
            "brokerRole" => {
                self.broker_role = v.choice(&[
                    ("ASYNC_MASTER", BrokerRole::AsyncMaster),
                    ("SYNC_MASTER", BrokerRole::SyncMaster),
                    ("SLAVE", BrokerRole::Slave),
                ])?
            }
            "registerNameServerPeriod" => {
                self.register_name_server_period_ms = v.int(10_000, 60_000)? as u64
            }
            "shards" => self.shard_count = v.int(1, i64::from(SHARD_COUNT_MAX))? as u32,
            "shardCpuPinning" => self.shard_cpu_pinning = v.bool()?,
            "tailCacheSize" => self.tail_cache_size_bytes = v.int(0, i64::MAX)? as u64,
            "ringEntries" => {
                self.ring_entries = v.power_of_two(RING_ENTRIES_MIN, RING_ENTRIES_MAX)?
            }
            "connectionsPerShardMax" => {
                self.connections_per_shard_max =
                    v.int(1, i64::from(CONNECTIONS_PER_SHARD_LIMIT))? as u32
            }
            "transactionTimeOut" => self.transaction_timeout_ms = v.int(0, 86_400_000)? as u64,
            "transactionCheckInterval" => {
                self.transaction_check_interval_ms = v.int(1, 86_400_000)? as u64
            }
            "transactionCheckMax" => {
                self.transaction_check_max = v.int(0, i64::from(i32::MAX))? as u32
            }
            "enablePropertyFilter" => self.enable_property_filter = v.bool()?,
            "slaveReadEnable" => self.slave_read_enable = v.bool()?,
            "offsetCheckInSlave" => self.offset_check_in_slave = v.bool()?,
            "accessMessageInMemoryMaxRatio" => {
                self.access_message_in_memory_max_ratio_percent = v.int(0, 100)? as u32
            }
            other => unreachable!("key {other} is in KEYS but has no setter"),
        }
        Ok(())
    }

    /// This configuration with UPDATE_BROKER_CONFIG's `text` (properties)
    /// applied, and the keys it set with their values as printed; only
    /// [`RUNTIME_KEYS`] may be set.
    ///
    /// # Errors
    ///
    /// [`ConfigError::NotChangeableAtRuntime`] for any other key, and the
    /// errors of [`BrokerConfig::set`] and [`BrokerConfig::validate`];
    /// nothing is applied then.
    pub fn updated(
        &self,
        text: &str,
    ) -> Result<(BrokerConfig, BTreeMap<&'static str, String>), ConfigError> {
        let mut config = self.clone();
        let mut keys = Vec::new();
        for property in parse_properties(text)? {
            let origin = ConfigSource::Update;
            let key = canonical_key(&property.key)
                .ok_or_else(|| unknown_key(&property.key, &property.value, &origin))?;
            if !RUNTIME_KEYS.contains(&key) {
                return Err(ConfigError::NotChangeableAtRuntime {
                    key,
                    changeable: RUNTIME_KEYS.join(", "),
                });
            }
            config.set(key, &property.value, &origin)?;
            keys.push(key);
        }
        config.validate()?;
        let entries = config.entries();
        let applied = keys
            .into_iter()
            .map(|key| (key, entries[key].clone()))
            .collect();
        Ok((config, applied))
    }

    /// Checks the relations between values.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Inconsistent`] naming the keys, values and rule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |message: String| Err(ConfigError::Inconsistent { message });
        // listenPort=0 (the kernel picks one at startup) has no fixed fast or
        // HA port to clash with.
        let picked = self.listen_port == 0;
        if !picked && self.listen_port <= 2 {
            return fail(format!(
                "listenPort={} must be above 2: the fast port is listenPort-2",
                self.listen_port
            ));
        }
        if self.ha_listen_port.is_none() && self.listen_port == u16::MAX {
            return fail(format!(
                "listenPort={} leaves no port for the HA service (listenPort+1); set haListenPort",
                self.listen_port
            ));
        }
        let ports = [
            ("listenPort", self.listen_port),
            ("fast port (listenPort-2)", self.fast_listen_port()),
            ("haListenPort", self.effective_ha_listen_port()),
        ];
        for (index, (name, port)) in ports.iter().enumerate() {
            if picked || (self.namesrv_addrs.is_none() && self.namesrv_listen_port == 0) {
                break;
            }
            for (other, other_port) in &ports[index + 1..] {
                if port == other_port {
                    return fail(format!("{name} and {other} are both {port}"));
                }
            }
            if self.namesrv_addrs.is_none() && *port == self.namesrv_listen_port {
                return fail(format!(
                    "{name}={port} is also the embedded name server's namesrvListenPort"
                ));
            }
        }
        if !self
            .commit_log_segment_size_bytes
            .is_multiple_of(BLOCK_SIZE)
        {
            return fail(format!(
                "mapedFileSizeCommitLog={} must be a multiple of {BLOCK_SIZE} (the block size)",
                self.commit_log_segment_size_bytes
            ));
        }
        // The store takes a record (or batch) of at most half a segment.
        let segment_size_min = 2 * (u64::from(self.message_size_max_bytes) + RECORD_OVERHEAD_MAX);
        if self.commit_log_segment_size_bytes < segment_size_min {
            return fail(format!(
                "mapedFileSizeCommitLog={} cannot hold one message of maxMessageSize={} \
                 (a record takes at most half a segment: needs at least {segment_size_min} bytes)",
                self.commit_log_segment_size_bytes, self.message_size_max_bytes
            ));
        }
        match (self.broker_role, self.broker_id) {
            (BrokerRole::Slave, id) if id <= 0 => {
                return fail(format!("brokerRole=SLAVE needs brokerId > 0, not {id}"));
            }
            (role, id) if role.is_master() && id != 0 => {
                return fail(format!(
                    "brokerRole={} is a master and needs brokerId=0, not {id}",
                    role.name()
                ));
            }
            _ => {}
        }
        if !self.ring_entries.is_power_of_two() {
            return fail(format!(
                "ringEntries={} must be a power of two",
                self.ring_entries
            ));
        }
        let ring_needs = crate::shard::runtime::shard_ring_entries_needed(
            self.connections_per_shard_max as usize,
        );
        if (self.ring_entries as usize) < ring_needs {
            return fail(format!(
                "connectionsPerShardMax={} needs ringEntries of at least {ring_needs} (a receive and a send per connection, the accept, a timer, {} for the store and 2 for the ring), not {}",
                self.connections_per_shard_max,
                ringmq_storage::limits::DISK_LANE_SLOTS_MIN,
                self.ring_entries
            ));
        }
        Ok(())
    }

    /// The fast ("VIP") port, `listenPort - 2`.
    pub fn fast_listen_port(&self) -> u16 {
        self.listen_port.saturating_sub(2)
    }

    /// The HA port: `haListenPort`, or `listenPort + 1`.
    pub fn effective_ha_listen_port(&self) -> u16 {
        self.ha_listen_port
            .unwrap_or_else(|| self.listen_port.saturating_add(1))
    }

    /// The embedded name server's `kvConfig.json`: `kvConfigPath`, or
    /// `<storePathRootDir>/namesrv/kvConfig.json`.
    pub fn effective_kv_config_path(&self) -> PathBuf {
        self.kv_config_path.clone().unwrap_or_else(|| {
            self.store_path_root_dir
                .join(NAMESRV_DIR_NAME)
                .join(crate::persist::ConfigFile::KvConfig.file_name())
        })
    }

    /// `brokerIP1:listenPort`, the address registered with name servers.
    pub fn broker_addr(&self) -> String {
        socket_text(self.broker_ip1, self.listen_port)
    }

    /// `brokerIP2:haListenPort`, the HA address registered with name servers.
    pub fn ha_server_addr(&self) -> String {
        socket_text(
            self.broker_ip2.unwrap_or(self.broker_ip1),
            self.effective_ha_listen_port(),
        )
    }

    /// Every key with its effective value, sorted by key.
    pub fn entries(&self) -> BTreeMap<&'static str, String> {
        let join_hours = self
            .delete_when_hours
            .iter()
            .map(|hour| format!("{hour:02}"))
            .collect::<Vec<_>>()
            .join(";");
        let entries: [(&'static str, String); 43] = [
            (
                "accessMessageInMemoryMaxRatio",
                self.access_message_in_memory_max_ratio_percent.to_string(),
            ),
            (
                "autoCreateSubscriptionGroup",
                self.auto_create_subscription_group.to_string(),
            ),
            (
                "autoCreateTopicEnable",
                self.auto_create_topic_enable.to_string(),
            ),
            ("brokerClusterName", self.broker_cluster_name.clone()),
            ("brokerIP1", self.broker_ip1.to_string()),
            (
                "brokerIP2",
                self.broker_ip2.unwrap_or(self.broker_ip1).to_string(),
            ),
            ("brokerId", self.broker_id.to_string()),
            ("brokerName", self.broker_name.clone()),
            ("brokerPermission", self.broker_permission.to_string()),
            ("brokerRole", self.broker_role.name().to_owned()),
            (
                "commitLogRecycleSegments",
                self.commit_log_recycle_segments.to_string(),
            ),
            (
                "commitLogRemoveStepBytes",
                self.commit_log_remove_step_bytes.to_string(),
            ),
            (
                "fdatasyncGroupMinPerSecond",
                self.fdatasync_group_min_per_s.to_string(),
            ),
            (
                "connectionsPerShardMax",
                self.connections_per_shard_max.to_string(),
            ),
            (
                "defaultTopicQueueNums",
                self.default_topic_queue_nums.to_string(),
            ),
            (
                "deleteCommitLogFilesInterval",
                self.delete_commit_log_files_interval_ms.to_string(),
            ),
            ("deleteWhen", join_hours),
            (
                "enablePropertyFilter",
                self.enable_property_filter.to_string(),
            ),
            (
                "diskMaxUsedSpaceRatio",
                self.disk_max_used_space_ratio_percent.to_string(),
            ),
            (
                "fileReservedTime",
                self.file_reserved_time_hours.to_string(),
            ),
            ("flushDiskType", self.flush_disk_type.name().to_owned()),
            (
                "flushIntervalCommitLog",
                self.flush_interval_commit_log_ms.to_string(),
            ),
            (
                "flushIntervalConsumeQueue",
                self.flush_interval_consume_queue_ms.to_string(),
            ),
            ("haListenPort", self.effective_ha_listen_port().to_string()),
            (
                "kvConfigPath",
                self.effective_kv_config_path().display().to_string(),
            ),
            ("listenPort", self.listen_port.to_string()),
            (
                "mapedFileSizeCommitLog",
                self.commit_log_segment_size_bytes.to_string(),
            ),
            ("maxMessageSize", self.message_size_max_bytes.to_string()),
            ("messageDelayLevel", self.message_delay_level.clone()),
            (
                "namesrvAddr",
                self.namesrv_addrs
                    .as_ref()
                    .map(|a| a.join(";"))
                    .unwrap_or_default(),
            ),
            ("namesrvListenPort", self.namesrv_listen_port.to_string()),
            ("offsetCheckInSlave", self.offset_check_in_slave.to_string()),
            (
                "registerNameServerPeriod",
                self.register_name_server_period_ms.to_string(),
            ),
            ("ringEntries", self.ring_entries.to_string()),
            ("shardCpuPinning", self.shard_cpu_pinning.to_string()),
            ("shards", self.shard_count.to_string()),
            ("slaveReadEnable", self.slave_read_enable.to_string()),
            (
                "storePathRootDir",
                self.store_path_root_dir.display().to_string(),
            ),
            ("syncFlushTimeout", self.sync_flush_timeout_ms.to_string()),
            ("tailCacheSize", self.tail_cache_size_bytes.to_string()),
            (
                "transactionCheckInterval",
                self.transaction_check_interval_ms.to_string(),
            ),
            (
                "transactionCheckMax",
                self.transaction_check_max.to_string(),
            ),
            (
                "transactionTimeOut",
                self.transaction_timeout_ms.to_string(),
            ),
        ];
        entries.into_iter().collect()
    }

    /// The effective configuration as `key=value` lines, sorted by key, each
    /// ending in `\n`: the output of `ringmq broker --print-config` and the
    /// body of GET_BROKER_CONFIG. A backslash in a value is written as `\\`,
    /// so that the text reads back through `Properties.load` (Java's and
    /// [`parse_properties`]); no other character a value may hold needs
    /// escaping (values have no control characters and no surrounding
    /// blanks).
    pub fn print_config(&self) -> String {
        let entries = self.entries();
        assert_eq!(entries.len(), KEYS.len(), "every key is printed once");
        let mut out = String::new();
        for (key, value) in entries {
            // Writing to a String cannot fail.
            let _ = writeln!(out, "{key}={}", value.replace('\\', "\\\\"));
        }
        out
    }
}

/// Splits a `--KEY=VALUE` argument into its key and value.
///
/// # Errors
///
/// [`ConfigError::MalformedOverride`] when the argument does not start with
/// `--`, has no `=`, or has an empty key.
pub fn parse_override(argument: &str) -> Result<(String, String), ConfigError> {
    let malformed = || ConfigError::MalformedOverride {
        argument: error::truncate(argument).to_owned(),
    };
    let body = argument.strip_prefix("--").ok_or_else(malformed)?;
    let (key, value) = body.split_once('=').ok_or_else(malformed)?;
    if key.is_empty() {
        return Err(malformed());
    }
    Ok((key.to_owned(), value.trim().to_owned()))
}

fn socket_text(ip: IpAddr, port: u16) -> String {
    // RocketMQ writes `ip:port` without brackets for IPv6 as well.
    format!("{ip}:{port}")
}

fn canonical_key(key: &str) -> Option<&'static str> {
    KEYS.iter()
        .copied()
        .find(|known| *known == key)
        .or_else(|| {
            KEY_ALIASES
                .iter()
                .find(|(alias, _)| *alias == key)
                .map(|(_, canonical)| *canonical)
        })
}

fn unknown_key(key: &str, value: &str, origin: &ConfigSource) -> ConfigError {
    let suggestion = KEYS
        .iter()
        .copied()
        .chain(KEY_ALIASES.iter().map(|(alias, _)| *alias))
        .find(|known| known.eq_ignore_ascii_case(key));
    ConfigError::UnknownKey {
        key: error::truncate(key).to_owned(),
        value: error::truncate(value).to_owned(),
        origin: origin.clone(),
        suggestion,
        known: KEYS.join(", "),
    }
}

/// One value being parsed for `key`.
struct Value<'a> {
    key: &'static str,
    text: &'a str,
    origin: &'a ConfigSource,
}

impl Value<'_> {
    fn invalid(&self, allowed: impl Into<String>) -> ConfigError {
        ConfigError::invalid_value(self.key, self.text, self.origin, allowed)
    }

    /// A non-empty string without control characters or surrounding blanks.
    fn name(&self) -> Result<String, ConfigError> {
        if self.text.is_empty()
            || self.text.chars().any(char::is_control)
            || self.text.trim() != self.text
        {
            return Err(
                self.invalid("a non-empty text without control characters or surrounding blanks")
            );
        }
        Ok(self.text.to_owned())
    }

    /// A decimal integer in `min..=max` (Java `Long.parseLong` syntax).
    fn int(&self, min: i64, max: i64) -> Result<i64, ConfigError> {
        match self.text.parse::<i64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(self.invalid(format!("an integer from {min} to {max}"))),
        }
    }

    fn power_of_two(&self, min: u32, max: u32) -> Result<u32, ConfigError> {
        let allowed = || self.invalid(format!("a power of two from {min} to {max}"));
        let n = self
            .int(i64::from(min), i64::from(max))
            .map_err(|_| allowed())? as u32;
        if n.is_power_of_two() {
            Ok(n)
        } else {
            Err(allowed())
        }
    }

    fn bool(&self) -> Result<bool, ConfigError> {
        if self.text.eq_ignore_ascii_case("true") {
            Ok(true)
        } else if self.text.eq_ignore_ascii_case("false") {
            Ok(false)
        } else {
            Err(self.invalid("true or false"))
        }
    }

    fn choice<T: Copy>(&self, choices: &[(&str, T)]) -> Result<T, ConfigError> {
        choices
            .iter()
            .find(|(name, _)| *name == self.text)
            .map(|(_, value)| *value)
            .ok_or_else(|| {
                let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
                self.invalid(format!("one of {}", names.join(", ")))
            })
    }

    fn ip(&self) -> Result<IpAddr, ConfigError> {
        self.text
            .parse()
            .map_err(|_| self.invalid("an IPv4 or IPv6 address, e.g. 192.168.0.10"))
    }

    /// `deleteWhen`: hours 0..=23 separated by `;` (RocketMQ's
    /// `UtilAll.isItTimeToDo` parses each with `Integer.parseInt`).
    fn hours(&self) -> Result<Vec<u8>, ConfigError> {
        let allowed =
            || self.invalid("hours of the day 00 to 23 separated by ';', e.g. 04 or 04;16");
        let mut hours = Vec::new();
        for part in self.text.split(';') {
            let hour: u8 = part.trim().parse().map_err(|_| allowed())?;
            if hour > 23 {
                return Err(allowed());
            }
            if !hours.contains(&hour) {
                hours.push(hour);
            }
        }
        hours.sort_unstable();
        Ok(hours)
    }

    /// `kvConfigPath`: a path whose file name is `kvConfig.json`.
    fn kv_config_path(&self) -> Result<PathBuf, ConfigError> {
        let path = PathBuf::from(self.name()?);
        crate::server::kv_config_dir(&path)
            .map_err(|_| self.invalid("a path to a file called kvConfig.json"))?;
        Ok(path)
    }

    /// `namesrvAddr`: `host:port` items separated by `;`; empty = unset.
    fn addr_list(&self) -> Result<Option<Vec<String>>, ConfigError> {
        if self.text.is_empty() {
            return Ok(None);
        }
        let allowed = || self.invalid("host:port addresses separated by ';', e.g. 10.0.0.1:9876");
        let mut addrs = Vec::new();
        for part in self
            .text
            .split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let (host, port) = part.rsplit_once(':').ok_or_else(allowed)?;
            let port_ok = matches!(port.parse::<u16>(), Ok(p) if p > 0);
            if host.is_empty()
                || !port_ok
                || host.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(allowed());
            }
            addrs.push(part.to_owned());
        }
        if addrs.is_empty() {
            return Err(allowed());
        }
        Ok(Some(addrs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> ConfigEnvironment {
        ConfigEnvironment {
            home_dir: PathBuf::from("/home/mq"),
            cpu_count: 4,
            broker_ip1: "10.0.0.5".parse().unwrap(),
        }
    }

    fn load(file: &str) -> Result<BrokerConfig, ConfigError> {
        BrokerConfig::load(&env(), Some(("broker.conf", file)), &[], None)
    }

    #[test]
    fn an_update_sets_only_runtime_keys_and_reports_them_as_printed() {
        let config = load("").unwrap();
        let (updated, applied) = config
            .updated("brokerPermission=4\nslaveReadEnable = TRUE\n")
            .unwrap();
        assert_eq!(updated.broker_permission, PERM_READ);
        assert!(updated.slave_read_enable);
        let applied: Vec<(&str, &str)> = applied.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(
            applied,
            [("brokerPermission", "4"), ("slaveReadEnable", "true")]
        );
        assert_eq!(
            updated,
            BrokerConfig {
                broker_permission: PERM_READ,
                slave_read_enable: true,
                ..config.clone()
            },
            "nothing else changes"
        );
        let (same, none) = config.updated("").unwrap();
        assert_eq!((same, none.len()), (config.clone(), 0));
    }

    #[test]
    fn an_update_with_a_key_that_needs_a_restart_or_a_bad_value_is_refused_whole() {
        let config = load("").unwrap();
        let error = config
            .updated("slaveReadEnable=true\nflushDiskType=SYNC_FLUSH")
            .unwrap_err();
        assert_eq!(
            error,
            ConfigError::NotChangeableAtRuntime {
                key: "flushDiskType",
                changeable: RUNTIME_KEYS.join(", "),
            }
        );
        assert!(
            error
                .to_string()
                .starts_with("flushDiskType cannot be changed while the broker runs")
        );
        let error = config.updated("brokerPermission=8").unwrap_err();
        assert!(
            matches!(
                error,
                ConfigError::InvalidValue {
                    key: "brokerPermission",
                    origin: ConfigSource::Update,
                    ..
                }
            ),
            "{error}"
        );
        let error = config.updated("nope=1").unwrap_err();
        assert!(matches!(error, ConfigError::UnknownKey { .. }), "{error}");
        for key in RUNTIME_KEYS {
            assert!(KEYS.contains(key), "{key} is a key");
        }
        assert!(RUNTIME_KEYS.is_sorted());
    }

    fn overrides(args: &[&str]) -> Vec<(String, String)> {
        args.iter().map(|a| parse_override(a).unwrap()).collect()
    }

    #[test]
    fn defaults_are_rocketmq_defaults() {
        let config = BrokerConfig::load(&env(), None, &[], None).unwrap();
        assert_eq!(config.broker_cluster_name, "DefaultCluster");
        assert_eq!(config.broker_name, "broker-a");
        assert_eq!(config.broker_id, 0);
        assert_eq!(config.broker_addr(), "10.0.0.5:10911");
        assert_eq!(config.ha_server_addr(), "10.0.0.5:10912");
        assert_eq!(config.fast_listen_port(), 10909);
        assert_eq!(config.namesrv_addrs, None);
        assert_eq!(config.namesrv_listen_port, 9876);
        assert_eq!(config.store_path_root_dir, PathBuf::from("/home/mq/store"));
        assert_eq!(config.kv_config_path, None);
        assert_eq!(
            config.effective_kv_config_path(),
            PathBuf::from("/home/mq/store/namesrv/kvConfig.json")
        );
        let set = load("kvConfigPath=/etc/mq/kvConfig.json\n").unwrap();
        assert_eq!(
            set.effective_kv_config_path(),
            PathBuf::from("/etc/mq/kvConfig.json")
        );
        assert_eq!(config.flush_disk_type, FlushDiskType::AsyncFlush);
        assert_eq!(config.sync_flush_timeout_ms, 5000);
        assert_eq!(config.flush_interval_commit_log_ms, 500);
        assert!(config.auto_create_topic_enable);
        assert!(config.auto_create_subscription_group);
        assert_eq!(config.default_topic_queue_nums, 8);
        assert_eq!(config.commit_log_segment_size_bytes, 1 << 30);
        assert_eq!(config.file_reserved_time_hours, 72);
        assert_eq!(config.delete_when_hours, vec![4]);
        assert_eq!(config.disk_max_used_space_ratio_percent, 75);
        assert_eq!(config.message_size_max_bytes, 4 * 1024 * 1024);
        assert_eq!(config.broker_role, BrokerRole::AsyncMaster);
        assert_eq!(config.shard_count, 4);
    }

    #[test]
    fn broker_ip1_defaults_to_the_first_non_loopback_ipv4() {
        let addrs: Vec<IpAddr> = ["127.0.0.1", "::1", "fe80::1", "192.168.1.7", "10.1.1.1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(
            pick_broker_ip1(&addrs),
            "192.168.1.7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            pick_broker_ip1(&addrs[..3]),
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
        assert_eq!(pick_broker_ip1(&[]), IpAddr::V4(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn shard_count_defaults_to_the_cpu_count_within_limits() {
        let mut env = env();
        env.cpu_count = 0;
        assert_eq!(BrokerConfig::defaults(&env).shard_count, 1);
        env.cpu_count = 1000;
        assert_eq!(BrokerConfig::defaults(&env).shard_count, SHARD_COUNT_MAX);
    }

    #[test]
    fn the_rocketmq_distribution_broker_conf_loads() {
        let text = "brokerClusterName = DefaultCluster\nbrokerName = broker-b\nbrokerId = 0\n\
                    deleteWhen = 04\nfileReservedTime = 48\nbrokerRole = SYNC_MASTER\n\
                    flushDiskType = SYNC_FLUSH\n";
        let config = load(text).unwrap();
        assert_eq!(config.broker_name, "broker-b");
        assert_eq!(config.file_reserved_time_hours, 48);
        assert_eq!(config.broker_role, BrokerRole::SyncMaster);
        assert_eq!(config.flush_disk_type, FlushDiskType::SyncFlush);
    }

    #[test]
    fn both_spellings_of_the_segment_size_key_are_accepted() {
        let a = load("mapedFileSizeCommitLog=16777216").unwrap();
        let b = load("mappedFileSizeCommitLog=16777216").unwrap();
        assert_eq!(a.commit_log_segment_size_bytes, 16 << 20);
        assert_eq!(a, b);
    }

    #[test]
    fn overrides_apply_after_the_file_and_n_applies_last() {
        let file = "listenPort=20911\nbrokerName=from-file\nnamesrvAddr=10.0.0.1:9876\n";
        let args = overrides(&["--brokerName=from-flag", "--namesrvAddr=10.0.0.2:9876"]);
        let config = BrokerConfig::load(&env(), Some(("broker.conf", file)), &args, None).unwrap();
        assert_eq!(config.listen_port, 20911);
        assert_eq!(config.broker_name, "from-flag");
        assert_eq!(config.namesrv_addrs, Some(vec!["10.0.0.2:9876".to_owned()]));
        let config = BrokerConfig::load(
            &env(),
            Some(("broker.conf", file)),
            &args,
            Some("10.0.0.3:9876;10.0.0.4:9876"),
        )
        .unwrap();
        assert_eq!(
            config.namesrv_addrs,
            Some(vec!["10.0.0.3:9876".to_owned(), "10.0.0.4:9876".to_owned()])
        );
    }

    #[test]
    fn a_later_line_of_the_file_wins() {
        assert_eq!(load("shards=2\nshards=3").unwrap().shard_count, 3);
        assert!(BrokerConfig::defaults(&env()).shard_cpu_pinning);
        assert!(!load("shardCpuPinning=false").unwrap().shard_cpu_pinning);
    }

    #[test]
    fn an_unknown_key_names_the_key_the_line_and_the_known_keys() {
        let error = load("brokerName=b\nlistenport=1\n").unwrap_err();
        let ConfigError::UnknownKey {
            key,
            origin,
            suggestion,
            ..
        } = &error
        else {
            panic!("wrong error {error:?}");
        };
        assert_eq!(key, "listenport");
        assert_eq!(
            origin,
            &ConfigSource::File {
                path: "broker.conf".into(),
                line: 2
            }
        );
        assert_eq!(*suggestion, Some("listenPort"));
        let text = error.to_string();
        assert!(
            text.starts_with(
                "broker.conf:2: unknown configuration key `listenport` (set to `1`) (did you mean `listenPort`?)"
            ),
            "{text}"
        );
        assert!(text.contains("brokerClusterName, brokerIP1"), "{text}");
        let error = BrokerConfig::load(&env(), None, &overrides(&["--nope=1"]), None).unwrap_err();
        assert!(error.to_string().starts_with(
            "command-line override: unknown configuration key `nope` (set to `1`); known keys:"
        ));
    }

    #[test]
    fn store_flush_and_recycling_keys_are_read() {
        let defaults = load("").unwrap();
        assert_eq!(defaults.flush_interval_consume_queue_ms, 1000);
        assert_eq!(defaults.commit_log_recycle_segments, 2);
        assert_eq!(defaults.commit_log_remove_step_bytes, 0);
        assert_eq!(defaults.fdatasync_group_min_per_s, 2_000);
        let config = load(
            "flushIntervalConsumeQueue=100\ncommitLogRecycleSegments=0\n\
             commitLogRemoveStepBytes=67108864\nfdatasyncGroupMinPerSecond=0",
        )
        .unwrap();
        assert_eq!(config.flush_interval_consume_queue_ms, 100);
        assert_eq!(config.commit_log_recycle_segments, 0);
        assert_eq!(config.commit_log_remove_step_bytes, 64 << 20);
        assert_eq!(config.fdatasync_group_min_per_s, 0);
        assert!(load("commitLogRemoveStepBytes=-1").is_err());
        assert!(load("fdatasyncGroupMinPerSecond=-5").is_err());
    }

    #[test]
    fn invalid_values_name_the_key_the_value_and_what_is_allowed() {
        let cases = [
            (
                "kvConfigPath=/data/kv.json",
                "broker.conf:1: invalid value `/data/kv.json` for `kvConfigPath`: expected a path to a file called kvConfig.json",
            ),
            (
                "listenPort=abc",
                "broker.conf:1: invalid value `abc` for `listenPort`: expected an integer from 0 to 65535",
            ),
            (
                "flushDiskType=async_flush",
                "broker.conf:1: invalid value `async_flush` for `flushDiskType`: expected one of ASYNC_FLUSH, SYNC_FLUSH",
            ),
            (
                "brokerRole=MASTER",
                "broker.conf:1: invalid value `MASTER` for `brokerRole`: expected one of ASYNC_MASTER, SYNC_MASTER, SLAVE",
            ),
            (
                "autoCreateTopicEnable=yes",
                "broker.conf:1: invalid value `yes` for `autoCreateTopicEnable`: expected true or false",
            ),
            (
                "diskMaxUsedSpaceRatio=99",
                "broker.conf:1: invalid value `99` for `diskMaxUsedSpaceRatio`: expected an integer from 10 to 95",
            ),
            (
                "flushIntervalConsumeQueue=0",
                "broker.conf:1: invalid value `0` for `flushIntervalConsumeQueue`: expected an integer from 1 to 60000",
            ),
            (
                "commitLogRecycleSegments=-1",
                "broker.conf:1: invalid value `-1` for `commitLogRecycleSegments`: expected an integer from 0 to 1000",
            ),
            (
                "deleteWhen=04;25",
                "broker.conf:1: invalid value `04;25` for `deleteWhen`: expected hours of the day 00 to 23 separated by ';', e.g. 04 or 04;16",
            ),
            (
                "brokerIP1=localhost",
                "broker.conf:1: invalid value `localhost` for `brokerIP1`: expected an IPv4 or IPv6 address, e.g. 192.168.0.10",
            ),
            (
                "namesrvAddr=10.0.0.1",
                "broker.conf:1: invalid value `10.0.0.1` for `namesrvAddr`: expected host:port addresses separated by ';', e.g. 10.0.0.1:9876",
            ),
            (
                "brokerName=",
                "broker.conf:1: invalid value `` for `brokerName`: expected a non-empty text without control characters or surrounding blanks",
            ),
            (
                "ringEntries=1000",
                "broker.conf:1: invalid value `1000` for `ringEntries`: expected a power of two from 8 to 32768",
            ),
            (
                "shards=0",
                "broker.conf:1: invalid value `0` for `shards`: expected an integer from 1 to 256",
            ),
            (
                "maxMessageSize=-1",
                "broker.conf:1: invalid value `-1` for `maxMessageSize`: expected an integer from 1 to 4194304",
            ),
            (
                "maxMessageSize=4194305",
                "broker.conf:1: invalid value `4194305` for `maxMessageSize`: expected an integer from 1 to 4194304",
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(load(line).unwrap_err().to_string(), expected, "for {line}");
        }
        let error = BrokerConfig::load(&env(), None, &[], Some("nohost")).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("-n: invalid value `nohost` for `namesrvAddr`"),
            "{error}"
        );
    }

    #[test]
    fn relations_between_values_are_checked() {
        let cases = [
            ("listenPort=2", "listenPort=2 must be above 2"),
            (
                "mapedFileSizeCommitLog=1000000",
                "must be a multiple of 4096",
            ),
            (
                "mapedFileSizeCommitLog=1048576",
                "cannot hold one message of maxMessageSize=4194304",
            ),
            (
                "mapedFileSizeCommitLog=8388608",
                "a record takes at most half a segment: needs at least 8519680 bytes",
            ),
            (
                "brokerRole=SLAVE",
                "brokerRole=SLAVE needs brokerId > 0, not 0",
            ),
            (
                "brokerId=1",
                "brokerRole=ASYNC_MASTER is a master and needs brokerId=0, not 1",
            ),
            (
                "listenPort=9876",
                "listenPort=9876 is also the embedded name server's namesrvListenPort",
            ),
            (
                "haListenPort=10909",
                "fast port (listenPort-2) and haListenPort are both 10909",
            ),
            ("listenPort=65535", "leaves no port for the HA service"),
            (
                "connectionsPerShardMax=3584",
                "connectionsPerShardMax=3584 needs ringEntries of at least 8197",
            ),
            (
                "ringEntries=1024",
                "connectionsPerShardMax=2000 needs ringEntries of at least 5029",
            ),
        ];
        for (line, expected) in cases {
            let error = load(line).unwrap_err();
            assert!(
                matches!(error, ConfigError::Inconsistent { .. }),
                "{line}: {error:?}"
            );
            assert!(error.to_string().contains(expected), "{line}: {error}");
        }
        // The same ports are fine once the relation holds.
        load("brokerRole=SLAVE\nbrokerId=1").unwrap();
        load("listenPort=9876\nnamesrvAddr=10.0.0.1:9876").unwrap();
        load("mapedFileSizeCommitLog=1048576\nmaxMessageSize=65536").unwrap();
        let fits = load("connectionsPerShardMax=3581").unwrap();
        assert_eq!(fits.connections_per_shard_max, 3581);
        load("ringEntries=2048\nconnectionsPerShardMax=500").unwrap();
    }

    #[test]
    fn malformed_overrides_are_refused() {
        for argument in ["brokerName=x", "--brokerName", "--=x"] {
            assert_eq!(
                parse_override(argument),
                Err(ConfigError::MalformedOverride {
                    argument: argument.to_owned()
                })
            );
        }
        assert_eq!(
            parse_override("--deleteWhen= 04;05 ").unwrap(),
            ("deleteWhen".to_owned(), "04;05".to_owned())
        );
    }

    #[test]
    fn print_config_lists_every_key_sorted() {
        let config = load("deleteWhen=16;04\nbrokerIP2=10.0.0.6").unwrap();
        let printed = config.print_config();
        let keys: Vec<&str> = printed
            .lines()
            .map(|l| l.split_once('=').unwrap().0)
            .collect();
        assert_eq!(keys, KEYS);
        assert!(printed.contains("\ndeleteWhen=04;16\n"));
        assert!(printed.contains("\nbrokerIP2=10.0.0.6\n"));
        assert!(printed.contains("\nhaListenPort=10912\n"));
        assert!(printed.contains("\nmapedFileSizeCommitLog=1073741824\n"));
        assert!(printed.contains("\nnamesrvAddr=\n"));
        assert!(printed.contains("\nstorePathRootDir=/home/mq/store\n"));
        assert!(printed.starts_with("accessMessageInMemoryMaxRatio=40\nautoCreateSubscriptionGroup=true\nautoCreateTopicEnable=true\n"));
        assert!(printed.contains("\nslaveReadEnable=false\n"));
        assert!(printed.ends_with(
            "syncFlushTimeout=5000\ntailCacheSize=67108864\ntransactionCheckInterval=60000\n\
             transactionCheckMax=15\ntransactionTimeOut=6000\n"
        ));
    }

    #[test]
    fn printed_backslashes_are_escaped_so_they_read_back() {
        let config = load("storePathRootDir=/data/a\\\\b\nbrokerName=x\\\\").unwrap();
        assert_eq!(config.store_path_root_dir, PathBuf::from("/data/a\\b"));
        let printed = config.print_config();
        assert!(
            printed.contains("\nstorePathRootDir=/data/a\\\\b\n"),
            "{printed}"
        );
        assert_eq!(
            load(&printed).unwrap().store_path_root_dir,
            config.store_path_root_dir
        );
        assert_eq!(load(&printed).unwrap().broker_name, "x\\");
    }

    #[test]
    fn printed_config_loads_back_to_the_same_config() {
        let file = "brokerName=b\nbrokerId=2\nbrokerRole=SLAVE\nnamesrvAddr=10.0.0.1:9876;10.0.0.2:9876\n\
                    deleteWhen=01;13\nmappedFileSizeCommitLog=16777216\nshards=3\n";
        let config = load(file).unwrap();
        let printed = config.print_config();
        let again = load(&printed).unwrap();
        assert_eq!(again.print_config(), printed);
        assert_eq!(again.namesrv_addrs, config.namesrv_addrs);
        assert_eq!(again.delete_when_hours, vec![1, 13]);
        // Only the implicit defaults became explicit.
        assert_eq!(again.ha_listen_port, Some(10912));
        assert_eq!(again.broker_ip2, Some(config.broker_ip1));
    }

    proptest::proptest! {
        #[test]
        fn setting_any_value_of_any_key_never_panics(
            key_index in 0..KEYS.len(),
            value in "\\PC{0,40}|-?[0-9]{1,12}|true|false|[0-9.]{1,15}(:[0-9]{1,5})?",
        ) {
            let mut config = BrokerConfig::defaults(&env());
            let key = KEYS[key_index];
            match config.set(key, &value, &ConfigSource::Override) {
                Ok(()) => {
                    // Whatever was accepted prints and loads back.
                    if config.validate().is_ok() {
                        let printed = config.print_config();
                        proptest::prop_assert_eq!(load(&printed).unwrap().print_config(), printed);
                    }
                }
                Err(error) => {
                    let text = error.to_string();
                    proptest::prop_assert!(text.contains(key), "{}", text);
                }
            }
        }
    }
}
