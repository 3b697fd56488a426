//! The broker's topic configurations (`TopicConfigManager` in Java): the
//! topics created at startup, auto-creation from a template topic, retry and
//! dead-letter topics, the admin commands that change them, and
//! `config/topics.json`.
//!
//! One shard (shard 0) owns the [`TopicConfigTable`] and applies every change;
//! the other shards read an immutable [`TopicConfigSnapshot`] behind an
//! `Arc` that the table replaces (never mutates) on each change
//! (design.md, Control plane). A change is rare (admin commands, the first
//! send to a new topic, the first heartbeat of a group), so rebuilding the
//! snapshot by cloning the table is cheap next to what it saves: readers need
//! no lock and never see a half-applied change. Handing the new `Arc` to the
//! other shards is the caller's job; [`TopicConfigTable::snapshot`] gives it.
//!
//! Every change bumps the [`DataVersion`] (`counter + 1`, `timestamp =
//! now_ms`), as Java's `DataVersion.nextVersion` does, and is reported as a
//! [`TopicTableChange`]: the topics to register with the name servers at once
//! and the topics deleted (whose consume queues and consumer offsets the
//! caller removes). A non-empty change also means "persist `topics.json`".
//!
//! `topics.json` is fastjson's pretty form of `TopicConfigSerializeWrapper` (one TAB per
//! level in the file, shown as four spaces here):
//!
//! ```text
//! {
//!     "dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000},
//!     "topicConfigTable":{
//!         "TopicTest":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,...}
//!     }
//! }
//! ```
//!
//! # Invariants
//!
//! - The snapshot always equals the table: every mutation ends in
//!   `publish`, which rebuilds it.
//! - The data version's counter never decreases, and grows by exactly one per
//!   applied change.
//! - Every topic in the table passed [`validate_topic_name`], except those
//!   loaded from `topics.json` (a file Java may have written is taken as is).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{
    CreateTopicRequestHeader, DeleteTopicRequestHeader, GetAllTopicConfigResponseHeader,
    GetTopicConfigRequestHeader,
};
use ringmq_protocol::json::{
    DataVersion, JsonError, JsonStyle, TopicConfig, TopicConfigAndQueueMapping, TopicConfigList,
    TopicConfigSerializeWrapper, TopicFilterType,
};

/// Path of the topic config file under the store root.
pub const TOPICS_FILE_PATH: &str = "config/topics.json";

/// Permission bits of a topic (`PermName`).
pub mod perm {
    /// `PERM_PRIORITY`.
    pub const PRIORITY: i32 = 8;
    /// `PERM_READ`: consumers may pull.
    pub const READ: i32 = 4;
    /// `PERM_WRITE`: producers may send.
    pub const WRITE: i32 = 2;
    /// `PERM_INHERIT`: the topic is a template for auto-created topics.
    pub const INHERIT: i32 = 1;
    /// Read and write, the permission of ordinary topics.
    pub const READ_WRITE: i32 = READ | WRITE;
    /// Valid permissions are `0 <= perm < PERM_LIMIT`.
    pub const PERM_LIMIT: i32 = 8;

    /// Whether `perm` has the read bit.
    pub fn is_readable(perm: i32) -> bool {
        perm & READ != 0
    }

    /// Whether `perm` has the write bit.
    pub fn is_writeable(perm: i32) -> bool {
        perm & WRITE != 0
    }

    /// Whether `perm` has the inherit bit.
    pub fn is_inherited(perm: i32) -> bool {
        perm & INHERIT != 0
    }
}

/// `TopicSysFlag` bits.
pub mod topic_sys_flag {
    /// The topic is a unit topic.
    pub const UNIT: i32 = 0x1;
    /// The topic has a unit subscription.
    pub const UNIT_SUB: i32 = 0x2;

    /// Java's `TopicSysFlag.buildSysFlag(unit, hasUnitSub)`.
    pub fn build(unit: bool, has_unit_sub: bool) -> i32 {
        let mut flag = 0;
        if unit {
            flag |= UNIT;
        }
        if has_unit_sub {
            flag |= UNIT_SUB;
        }
        flag
    }
}

/// Template topic for auto-creation (`TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC`).
pub const AUTO_CREATE_TOPIC_KEY_TOPIC: &str = "TBW102";
/// One queue per delay level.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// 5.x second schedule topic name (system, not sendable).
pub const SCHEDULE_TOPIC_V2: &str = "SCHEDULE_TOPIC_XXXX_V2";
/// Benchmark topic.
pub const BENCHMARK_TOPIC: &str = "BenchmarkTest";
/// Transaction half messages.
pub const TRANS_HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// Transaction op (remove) messages.
pub const TRANS_OP_HALF_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// Half messages that exceeded their check limit.
pub const TRANS_CHECK_MAX_TIME_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
/// Self-test topic.
pub const SELF_TEST_TOPIC: &str = "SELF_TEST_TOPIC";
/// Offset-moved events.
pub const OFFSET_MOVED_EVENT: &str = "OFFSET_MOVED_EVENT";
/// Default message trace topic (`msgTraceTopicName`).
pub const TRACE_TOPIC_DEFAULT: &str = "RMQ_SYS_TRACE_TOPIC";
/// 5.x timer wheel topic.
pub const WHEEL_TIMER_TOPIC: &str = "rmq_sys_wheel_timer";
/// Prefix of 5.x system topics.
pub const SYSTEM_TOPIC_PREFIX: &str = "rmq_sys_";
/// Prefix of a group's retry topic.
pub const RETRY_GROUP_TOPIC_PREFIX: &str = "%RETRY%";
/// Prefix of a group's dead-letter topic.
pub const DLQ_GROUP_TOPIC_PREFIX: &str = "%DLQ%";
/// Suffix of the request-reply topic after the cluster name.
pub const REPLY_TOPIC_SUFFIX: &str = "_REPLY_TOPIC";

/// Longest ordinary topic name (`TopicValidator.TOPIC_MAX_LENGTH`).
pub const TOPIC_NAME_LEN_MAX: usize = 127;
/// Longest `%RETRY%` / `%DLQ%` topic name (reference 5.1).
pub const RETRY_DLQ_TOPIC_NAME_LEN_MAX: usize = 255;
/// Queues of the schedule topic: one per delay level.
pub const SCHEDULE_TOPIC_QUEUE_NUMS: i32 = 18;
/// Queues of `BenchmarkTest`.
pub const BENCHMARK_TOPIC_QUEUE_NUMS: i32 = 1024;
/// Most queues UPDATE_AND_CREATE_TOPIC may ask for. Java has no limit; ours
/// keeps a typo from creating millions of consume queues.
pub const TOPIC_QUEUE_NUMS_MAX: i32 = 4096;

const _: () = assert!(BENCHMARK_TOPIC_QUEUE_NUMS <= TOPIC_QUEUE_NUMS_MAX);
const _: () = assert!(TOPIC_NAME_LEN_MAX < RETRY_DLQ_TOPIC_NAME_LEN_MAX);

/// Topics clients may not send to (`TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET`).
pub const NOT_ALLOWED_SEND_TOPICS: [&str; 7] = [
    SCHEDULE_TOPIC,
    SCHEDULE_TOPIC_V2,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    SELF_TEST_TOPIC,
    OFFSET_MOVED_EVENT,
];

/// The fixed part of `TopicValidator.SYSTEM_TOPIC_SET`; the table adds the
/// cluster-name, broker-name, trace and reply topics it creates.
pub const SYSTEM_TOPICS: [&str; 10] = [
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    SCHEDULE_TOPIC,
    SCHEDULE_TOPIC_V2,
    BENCHMARK_TOPIC,
    TRANS_HALF_TOPIC,
    TRACE_TOPIC_DEFAULT,
    TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    SELF_TEST_TOPIC,
    OFFSET_MOVED_EVENT,
];

/// Remark for a blank topic name.
pub const REMARK_TOPIC_BLANK: &str = "The specified topic is blank.";
/// Remark for a topic name with characters outside `[%|a-zA-Z0-9_-]`.
pub const REMARK_TOPIC_ILLEGAL_CHARS: &str =
    "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$";
/// Remark for a topic name over the length limit.
pub const REMARK_TOPIC_TOO_LONG: &str = "The specified topic is longer than topic max length.";

/// `%RETRY%<group>`.
pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_GROUP_TOPIC_PREFIX}{group}")
}

/// `%DLQ%<group>`.
pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_GROUP_TOPIC_PREFIX}{group}")
}

/// Whether `text` has only the characters of `^[%|a-zA-Z0-9_-]+$`
/// (`TopicValidator.isTopicOrGroupIllegal`, negated). Empty text passes.
pub fn has_only_name_chars(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
}

/// Checks a topic name as Java's `TopicValidator.validateTopic` does; the
/// error is the remark Java answers with (code INVALID_PARAMETER).
///
/// # Errors
///
/// The remark for a blank name, an illegal character, or a name longer than
/// [`TOPIC_NAME_LEN_MAX`] ([`RETRY_DLQ_TOPIC_NAME_LEN_MAX`] for `%RETRY%` and
/// `%DLQ%` topics).
pub fn validate_topic_name(topic: &str) -> Result<(), &'static str> {
    if topic.trim().is_empty() {
        return Err(REMARK_TOPIC_BLANK);
    }
    if !has_only_name_chars(topic) {
        return Err(REMARK_TOPIC_ILLEGAL_CHARS);
    }
    let len_max = if topic.starts_with(RETRY_GROUP_TOPIC_PREFIX)
        || topic.starts_with(DLQ_GROUP_TOPIC_PREFIX)
    {
        RETRY_DLQ_TOPIC_NAME_LEN_MAX
    } else {
        TOPIC_NAME_LEN_MAX
    };
    if topic.len() > len_max {
        return Err(REMARK_TOPIC_TOO_LONG);
    }
    Ok(())
}

/// Whether clients are refused when sending to `topic` (NO_PERMISSION).
pub fn is_not_allowed_send_topic(topic: &str) -> bool {
    NOT_ALLOWED_SEND_TOPICS.contains(&topic)
}

/// The remark Java answers a send to a not-allowed topic with.
pub fn not_allowed_send_remark(topic: &str) -> String {
    format!("Sending message to topic[{topic}] is forbidden.")
}

/// The settings the table needs, as plain values (the broker config owns
/// their parsing). Defaults are Java's except where noted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfigSettings {
    /// `brokerClusterName` (`DefaultCluster`).
    pub broker_cluster_name: String,
    /// `brokerName` (Java defaults to the host name; `broker-a` here).
    pub broker_name: String,
    /// `autoCreateTopicEnable` (true): create `TBW102` and allow the
    /// auto-creation flow.
    pub auto_create_topic_enable: bool,
    /// `defaultTopicQueueNums` (8): queues of `TBW102`.
    pub default_topic_queue_nums: i32,
    /// `clusterTopicEnable` (true): the cluster-name topic is RW + inherit.
    pub cluster_topic_enable: bool,
    /// `brokerTopicEnable` (true): the broker-name topic is RW + inherit.
    pub broker_topic_enable: bool,
    /// `traceTopicEnable` (false).
    pub trace_topic_enable: bool,
    /// `msgTraceTopicName` (`RMQ_SYS_TRACE_TOPIC`).
    pub msg_trace_topic_name: String,
    /// `timerWheelEnable` (true): create `rmq_sys_wheel_timer`.
    pub timer_wheel_enable: bool,
    /// `reviveQueueNum` (8): queues of the pop revive topic.
    pub revive_queue_num: i32,
    /// `validateSystemTopicWhenUpdateTopic` (true): admin commands may not
    /// change or delete system topics.
    pub validate_system_topic_when_update_topic: bool,
}

impl Default for TopicConfigSettings {
    fn default() -> Self {
        Self {
            broker_cluster_name: "DefaultCluster".to_owned(),
            broker_name: "broker-a".to_owned(),
            auto_create_topic_enable: true,
            default_topic_queue_nums: 8,
            cluster_topic_enable: true,
            broker_topic_enable: true,
            trace_topic_enable: false,
            msg_trace_topic_name: TRACE_TOPIC_DEFAULT.to_owned(),
            timer_wheel_enable: true,
            revive_queue_num: 8,
            validate_system_topic_when_update_topic: true,
        }
    }
}

/// What a change to the table asks the caller to do. Empty means nothing
/// changed; anything else means "persist `topics.json`" too.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicTableChange {
    /// Topics created or updated: register them with the name servers now
    /// (Java's incremental `registerSingleTopicAll` / `registerBrokerAll`).
    pub registered: Vec<TopicConfig>,
    /// Topics removed: delete their consume queues and consumer offsets.
    pub deleted: Vec<String>,
}

impl TopicTableChange {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.registered.is_empty() && self.deleted.is_empty()
    }

    /// Whether `topics.json` must be written.
    pub fn needs_persist(&self) -> bool {
        !self.is_empty()
    }

    /// Appends `other`'s topics to this change.
    pub fn merge(&mut self, other: TopicTableChange) {
        self.registered.extend(other.registered);
        self.deleted.extend(other.deleted);
    }
}

/// The response to an admin command plus the change it made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicCommandOutcome {
    /// The response to write back.
    pub response: RemotingCommand,
    /// What changed.
    pub change: TopicTableChange,
}

impl TopicCommandOutcome {
    fn unchanged(response: RemotingCommand) -> Self {
        Self {
            response,
            change: TopicTableChange::default(),
        }
    }
}

/// An immutable view of the table that any shard may read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicConfigSnapshot {
    data_version: DataVersion,
    topics: BTreeMap<String, TopicConfig>,
}

impl TopicConfigSnapshot {
    /// The config of `topic`.
    pub fn get(&self, topic: &str) -> Option<&TopicConfig> {
        self.topics.get(topic)
    }

    /// Whether `topic` exists.
    pub fn contains(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }

    /// The data version this snapshot was taken at.
    pub fn data_version(&self) -> DataVersion {
        self.data_version
    }

    /// Number of topics.
    pub fn len(&self) -> usize {
        self.topics.len()
    }

    /// Whether there are no topics.
    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }

    /// All topics, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &TopicConfig)> {
        self.topics
            .iter()
            .map(|(name, config)| (name.as_str(), config))
    }
}

/// Why a send cannot have its topic (see [`TopicConfigTable::resolve_for_send`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendTopicRefusal {
    /// The response code.
    pub code: i32,
    /// The remark, Java's text.
    pub remark: String,
}

/// The topic a send goes to, and whether resolving it created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendTopic {
    /// The topic's config.
    pub config: TopicConfig,
    /// Non-empty when the topic was auto-created.
    pub change: TopicTableChange,
}

/// The owner's copy of every topic config.
#[derive(Debug)]
pub struct TopicConfigTable {
    settings: TopicConfigSettings,
    topics: BTreeMap<String, TopicConfig>,
    system_topics: BTreeSet<String>,
    data_version: DataVersion,
    snapshot: Arc<TopicConfigSnapshot>,
}

fn topic_with_queues(name: &str, queue_nums: i32, perm: i32) -> TopicConfig {
    TopicConfig {
        topic_name: name.to_owned(),
        read_queue_nums: queue_nums,
        write_queue_nums: queue_nums,
        perm,
        ..TopicConfig::default()
    }
}

impl TopicConfigTable {
    /// A table with the topics Java's `TopicConfigManager` creates at
    /// startup (reference 5.2); the data version starts at counter 0,
    /// timestamp `now_ms`.
    pub fn new(settings: TopicConfigSettings, now_ms: i64) -> Self {
        let mut table = Self {
            topics: BTreeMap::new(),
            system_topics: SYSTEM_TOPICS.iter().map(|&t| t.to_owned()).collect(),
            data_version: DataVersion {
                timestamp: now_ms,
                counter: 0,
                state_version: 0,
            },
            snapshot: Arc::new(TopicConfigSnapshot::default()),
            settings,
        };
        for config in table.startup_topics() {
            table.topics.insert(config.topic_name.clone(), config);
        }
        table.publish();
        table
    }

    fn startup_topics(&mut self) -> Vec<TopicConfig> {
        let s = &self.settings;
        let inherit_if = |enabled: bool| {
            if enabled {
                perm::INHERIT | perm::READ_WRITE
            } else {
                perm::INHERIT
            }
        };
        let cluster = s.broker_cluster_name.clone();
        let broker = s.broker_name.clone();
        let mut topics = vec![topic_with_queues(SELF_TEST_TOPIC, 1, perm::READ_WRITE)];
        if s.auto_create_topic_enable {
            topics.push(topic_with_queues(
                AUTO_CREATE_TOPIC_KEY_TOPIC,
                s.default_topic_queue_nums,
                perm::INHERIT | perm::READ_WRITE,
            ));
        }
        topics.push(topic_with_queues(
            BENCHMARK_TOPIC,
            BENCHMARK_TOPIC_QUEUE_NUMS,
            perm::READ_WRITE,
        ));
        // Java leaves the cluster topic at TopicConfig's class default of 16.
        topics.push(topic_with_queues(
            &cluster,
            TopicConfig::default().read_queue_nums,
            inherit_if(s.cluster_topic_enable),
        ));
        topics.push(topic_with_queues(
            &broker,
            1,
            inherit_if(s.broker_topic_enable),
        ));
        topics.push(topic_with_queues(OFFSET_MOVED_EVENT, 1, perm::READ_WRITE));
        topics.push(topic_with_queues(
            SCHEDULE_TOPIC,
            SCHEDULE_TOPIC_QUEUE_NUMS,
            perm::READ_WRITE,
        ));
        if s.trace_topic_enable {
            topics.push(topic_with_queues(
                &s.msg_trace_topic_name,
                1,
                perm::READ_WRITE,
            ));
        }
        let reply = format!("{cluster}{REPLY_TOPIC_SUFFIX}");
        topics.push(topic_with_queues(&reply, 1, perm::READ_WRITE));
        topics.push(topic_with_queues(
            &format!("{SYSTEM_TOPIC_PREFIX}REVIVE_LOG_{cluster}"),
            s.revive_queue_num,
            perm::READ_WRITE,
        ));
        topics.push(topic_with_queues(
            &format!("{SYSTEM_TOPIC_PREFIX}SYNC_BROKER_MEMBER_{broker}"),
            1,
            perm::INHERIT,
        ));
        topics.push(topic_with_queues(TRANS_HALF_TOPIC, 1, perm::READ_WRITE));
        topics.push(topic_with_queues(TRANS_OP_HALF_TOPIC, 1, perm::READ_WRITE));
        if s.timer_wheel_enable {
            topics.push(topic_with_queues(WHEEL_TIMER_TOPIC, 1, perm::READ_WRITE));
        }
        let trace = s.msg_trace_topic_name.clone();
        self.system_topics.extend([cluster, broker, reply, trace]);
        topics
    }

    /// Rebuilds the snapshot from the table.
    fn publish(&mut self) {
        self.snapshot = Arc::new(TopicConfigSnapshot {
            data_version: self.data_version,
            topics: self.topics.clone(),
        });
    }

    fn next_version(&mut self, now_ms: i64) {
        self.data_version.counter += 1;
        self.data_version.timestamp = now_ms;
    }

    /// Stores `config` (replacing one of the same name), bumps the version
    /// and republishes.
    fn put(&mut self, config: TopicConfig, now_ms: i64) -> TopicTableChange {
        self.topics
            .insert(config.topic_name.clone(), config.clone());
        self.next_version(now_ms);
        self.publish();
        TopicTableChange {
            registered: vec![config],
            deleted: Vec::new(),
        }
    }

    /// The settings the table was built with.
    pub fn settings(&self) -> &TopicConfigSettings {
        &self.settings
    }

    /// The current snapshot, to hand to the other shards.
    pub fn snapshot(&self) -> Arc<TopicConfigSnapshot> {
        Arc::clone(&self.snapshot)
    }

    /// The config of `topic`.
    pub fn get(&self, topic: &str) -> Option<&TopicConfig> {
        self.topics.get(topic)
    }

    /// The current data version.
    pub fn data_version(&self) -> DataVersion {
        self.data_version
    }

    /// Whether `topic` is a system topic (`TopicValidator.isSystemTopic`).
    pub fn is_system_topic(&self, topic: &str) -> bool {
        self.system_topics.contains(topic) || topic.starts_with(SYSTEM_TOPIC_PREFIX)
    }

    /// The whole table as REGISTER_BROKER and GET_ALL_TOPIC_CONFIG carry it
    /// (the 5.x wrapper with empty static-topic mappings).
    pub fn wrapper(&self) -> TopicConfigSerializeWrapper {
        TopicConfigSerializeWrapper::with_empty_mappings(self.data_version, self.topics.clone())
    }

    /// Merges the content of `topics.json` into the table, as Java's
    /// `TopicConfigManager.decode` does: file topics replace startup topics
    /// of the same name, and the file's data version is taken.
    ///
    /// # Errors
    ///
    /// The file does not parse; the table is unchanged then.
    pub fn load(&mut self, content: &[u8]) -> Result<(), JsonError> {
        let wrapper = TopicConfigSerializeWrapper::from_json(content)?;
        self.topics.extend(wrapper.topic_config_table);
        self.data_version = wrapper.data_version;
        self.publish();
        Ok(())
    }

    /// The bytes of `topics.json`, pretty-printed as Java writes it.
    pub fn encode_file(&self) -> Vec<u8> {
        let wrapper = TopicConfigSerializeWrapper {
            data_version: self.data_version,
            topic_config_table: self.topics.clone(),
            ..TopicConfigSerializeWrapper::default()
        };
        let mut out = Vec::new();
        wrapper.write_pretty(&mut out);
        out
    }

    /// Java's `createTopicInSendMessageMethod`: creates `topic` from the
    /// template `default_topic` when the template has the inherit bit.
    /// Queues: `min(client_default_topic_queue_nums, template write queues)`;
    /// perm: the template's without inherit. Returns the existing config if
    /// `topic` exists, `None` if it cannot be created.
    pub fn create_topic_in_send_message(
        &mut self,
        topic: &str,
        default_topic: &str,
        client_default_topic_queue_nums: i32,
        topic_sys_flag: i32,
        now_ms: i64,
    ) -> (Option<TopicConfig>, TopicTableChange) {
        if let Some(existing) = self.topics.get(topic) {
            return (Some(existing.clone()), TopicTableChange::default());
        }
        let Some(template) = self.topics.get(default_topic) else {
            return (None, TopicTableChange::default());
        };
        let mut template_perm = template.perm;
        // Java forces TBW102 to RW (no inherit) when auto-creation is off,
        // so a TBW102 left in an old topics.json cannot be used as template.
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC && !self.settings.auto_create_topic_enable {
            template_perm = perm::READ_WRITE;
        }
        if !perm::is_inherited(template_perm) {
            return (None, TopicTableChange::default());
        }
        let queue_nums = client_default_topic_queue_nums
            .min(template.write_queue_nums)
            .max(0);
        let config = TopicConfig {
            topic_name: topic.to_owned(),
            read_queue_nums: queue_nums,
            write_queue_nums: queue_nums,
            perm: template_perm & !perm::INHERIT,
            topic_filter_type: template.topic_filter_type.clone(),
            topic_sys_flag,
            ..TopicConfig::default()
        };
        let change = self.put(config.clone(), now_ms);
        (Some(config), change)
    }

    /// Java's `createTopicInSendMessageBackMethod`: returns `topic`'s config,
    /// creating it with `queue_nums` queues and `perm` if absent.
    pub fn create_topic_in_send_message_back(
        &mut self,
        topic: &str,
        queue_nums: i32,
        perm: i32,
        topic_sys_flag: i32,
        now_ms: i64,
    ) -> (TopicConfig, TopicTableChange) {
        if let Some(existing) = self.topics.get(topic) {
            return (existing.clone(), TopicTableChange::default());
        }
        let config = TopicConfig {
            topic_sys_flag,
            ..topic_with_queues(topic, queue_nums, perm)
        };
        let change = self.put(config.clone(), now_ms);
        (config, change)
    }

    /// `%RETRY%<group>` with the group's `retryQueueNums` queues (perm RW),
    /// created if absent, as HEART_BEAT and CONSUMER_SEND_MSG_BACK do.
    pub fn ensure_retry_topic(
        &mut self,
        group: &str,
        retry_queue_nums: i32,
        unit_mode: bool,
        now_ms: i64,
    ) -> (TopicConfig, TopicTableChange) {
        self.create_topic_in_send_message_back(
            &retry_topic(group),
            retry_queue_nums,
            perm::READ_WRITE,
            topic_sys_flag::build(false, unit_mode),
            now_ms,
        )
    }

    /// `%DLQ%<group>` with one queue, perm RW, created if absent.
    pub fn ensure_dlq_topic(
        &mut self,
        group: &str,
        now_ms: i64,
    ) -> (TopicConfig, TopicTableChange) {
        self.create_topic_in_send_message_back(&dlq_topic(group), 1, perm::READ_WRITE, 0, now_ms)
    }

    /// The topic checks of a send (reference 2.3.1 steps 2 and 3): the name
    /// is valid, clients may send to it, and it exists or can be created —
    /// from `default_topic` (the `TBW102` flow of 5.3), or, for a `%RETRY%`
    /// topic the template cannot create, with one queue (Java's `msgCheck`
    /// order: the template is tried first even for retry topics).
    ///
    /// # Errors
    ///
    /// INVALID_PARAMETER for a bad name, NO_PERMISSION for a topic clients
    /// may not send to, TOPIC_NOT_EXIST when it cannot be created; each with
    /// Java's remark.
    pub fn resolve_for_send(
        &mut self,
        topic: &str,
        default_topic: &str,
        default_topic_queue_nums: i32,
        unit_mode: bool,
        now_ms: i64,
    ) -> Result<SendTopic, SendTopicRefusal> {
        validate_topic_name(topic).map_err(|remark| SendTopicRefusal {
            code: response_code::INVALID_PARAMETER,
            remark: remark.to_owned(),
        })?;
        if is_not_allowed_send_topic(topic) {
            return Err(SendTopicRefusal {
                code: response_code::NO_PERMISSION,
                remark: not_allowed_send_remark(topic),
            });
        }
        // Java's msgCheck: a unit-mode send to a retry topic marks a unit
        // subscription, to any other topic a unit topic.
        let is_retry = topic.starts_with(RETRY_GROUP_TOPIC_PREFIX);
        let sys_flag = match (unit_mode, is_retry) {
            (false, _) => 0,
            (true, true) => topic_sys_flag::build(false, true),
            (true, false) => topic_sys_flag::build(true, false),
        };
        let (config, change) = self.create_topic_in_send_message(
            topic,
            default_topic,
            default_topic_queue_nums,
            sys_flag,
            now_ms,
        );
        if let Some(config) = config {
            return Ok(SendTopic { config, change });
        }
        if is_retry {
            let (config, change) = self.create_topic_in_send_message_back(
                topic,
                1,
                perm::READ_WRITE,
                sys_flag,
                now_ms,
            );
            return Ok(SendTopic { config, change });
        }
        Err(SendTopicRefusal {
            code: response_code::TOPIC_NOT_EXIST,
            remark: format!("topic[{topic}] not exist, apply first please!"),
        })
    }

    /// Serves the admin codes this table owns: UPDATE_AND_CREATE_TOPIC (17),
    /// UPDATE_AND_CREATE_TOPIC_LIST (18), DELETE_TOPIC_IN_BROKER (215),
    /// GET_ALL_TOPIC_CONFIG (21), GET_TOPIC_CONFIG (351). `None` for any
    /// other code.
    pub fn handle(
        &mut self,
        request: &RemotingCommand,
        now_ms: i64,
    ) -> Option<TopicCommandOutcome> {
        match request.code {
            request_code::UPDATE_AND_CREATE_TOPIC => {
                Some(self.update_and_create_topic(request, now_ms))
            }
            request_code::DELETE_TOPIC_IN_BROKER => {
                Some(self.delete_topic_in_broker(request, now_ms))
            }
            request_code::UPDATE_AND_CREATE_TOPIC_LIST => {
                Some(self.update_and_create_topic_list(request, now_ms))
            }
            request_code::GET_ALL_TOPIC_CONFIG => Some(TopicCommandOutcome::unchanged(
                self.get_all_topic_config(request),
            )),
            request_code::GET_TOPIC_CONFIG => Some(TopicCommandOutcome::unchanged(
                self.get_topic_config(request),
            )),
            _ => None,
        }
    }

    /// UPDATE_AND_CREATE_TOPIC (17), as Java 5.x's
    /// `AdminBrokerProcessor.updateAndCreateTopic`: validate the name, refuse
    /// system topics, apply the attributes, store, and report the topic for
    /// registration. An identical config is a success without a change.
    pub fn update_and_create_topic(
        &mut self,
        request: &RemotingCommand,
        now_ms: i64,
    ) -> TopicCommandOutcome {
        let opaque = request.opaque;
        let header: CreateTopicRequestHeader = match request.decode_custom_header() {
            Ok(header) => header,
            Err(err) => return TopicCommandOutcome::unchanged(header_error(opaque, &err)),
        };
        let topic = header.topic.as_str();
        if let Err(remark) = self.check_admin_topic(topic) {
            return TopicCommandOutcome::unchanged(invalid_parameter(opaque, remark));
        }
        if let Err(remark) =
            check_queue_nums_and_perm(header.read_queue_nums, header.write_queue_nums, header.perm)
        {
            return TopicCommandOutcome::unchanged(invalid_parameter(opaque, remark));
        }
        let existing = self.topics.get(topic);
        let attributes = match alter_attributes(
            existing.map(|config| &config.attributes),
            header.attributes.as_deref().unwrap_or(""),
        ) {
            Ok(attributes) => attributes,
            Err(remark) => {
                return TopicCommandOutcome::unchanged(RemotingCommand::new_response(
                    response_code::SYSTEM_ERROR,
                    opaque,
                    Some(remark),
                ));
            }
        };
        let config = TopicConfig {
            topic_name: topic.to_owned(),
            read_queue_nums: header.read_queue_nums,
            write_queue_nums: header.write_queue_nums,
            perm: header.perm,
            topic_filter_type: TopicFilterType::from_name(&header.topic_filter_type),
            topic_sys_flag: header.topic_sys_flag.unwrap_or(0),
            order: header.order,
            attributes,
        };
        let success = RemotingCommand::new_response(response_code::SUCCESS, opaque, None);
        if existing == Some(&config) {
            return TopicCommandOutcome::unchanged(success);
        }
        let change = self.put(config, now_ms);
        TopicCommandOutcome {
            response: success,
            change,
        }
    }

    /// UPDATE_AND_CREATE_TOPIC_LIST (18): body `{"topicConfigList":[...]}`.
    /// As Java 5.x, every topic is checked first (name, system topic, and
    /// ringmq's queue-count and perm limits) and the first bad one refuses
    /// the whole list with INVALID_PARAMETER; then all are stored with one
    /// data-version bump. Unchanged configs are not reported.
    pub fn update_and_create_topic_list(
        &mut self,
        request: &RemotingCommand,
        now_ms: i64,
    ) -> TopicCommandOutcome {
        let opaque = request.opaque;
        let list = match TopicConfigList::from_json(request.body_bytes()) {
            Ok(list) => list.topic_config_list,
            Err(err) => {
                return TopicCommandOutcome::unchanged(RemotingCommand::new_response(
                    response_code::SYSTEM_ERROR,
                    opaque,
                    Some(format!("bad CreateTopicListRequestBody: {err}")),
                ));
            }
        };
        for config in &list {
            let checked = self.check_admin_topic(&config.topic_name).and_then(|()| {
                check_queue_nums_and_perm(
                    config.read_queue_nums,
                    config.write_queue_nums,
                    config.perm,
                )
            });
            if let Err(remark) = checked {
                return TopicCommandOutcome::unchanged(invalid_parameter(opaque, remark));
            }
        }
        let mut change = TopicTableChange::default();
        for config in list {
            if self.topics.get(&config.topic_name) != Some(&config) {
                self.topics
                    .insert(config.topic_name.clone(), config.clone());
                change.registered.push(config);
            }
        }
        if !change.is_empty() {
            self.next_version(now_ms);
            self.publish();
        }
        TopicCommandOutcome {
            response: RemotingCommand::new_response(response_code::SUCCESS, opaque, None),
            change,
        }
    }

    /// The name checks of the admin commands: a valid name that is not a
    /// system topic (when `validateSystemTopicWhenUpdateTopic`).
    fn check_admin_topic(&self, topic: &str) -> Result<(), String> {
        validate_topic_name(topic).map_err(str::to_owned)?;
        if self.settings.validate_system_topic_when_update_topic && self.is_system_topic(topic) {
            return Err(format!("The topic[{topic}] is conflict with system topic."));
        }
        Ok(())
    }

    /// DELETE_TOPIC_IN_BROKER (215): refuses blank names and system topics
    /// (INVALID_PARAMETER), removes the topic. Deleting an absent topic
    /// succeeds without a change. The change's `deleted` tells the caller to
    /// drop the topic's consume queues and consumer offsets.
    pub fn delete_topic_in_broker(
        &mut self,
        request: &RemotingCommand,
        now_ms: i64,
    ) -> TopicCommandOutcome {
        let opaque = request.opaque;
        let header: DeleteTopicRequestHeader = match request.decode_custom_header() {
            Ok(header) => header,
            Err(err) => return TopicCommandOutcome::unchanged(header_error(opaque, &err)),
        };
        let topic = header.topic.as_str();
        if topic.trim().is_empty() {
            return TopicCommandOutcome::unchanged(invalid_parameter(
                opaque,
                REMARK_TOPIC_BLANK.to_owned(),
            ));
        }
        if self.settings.validate_system_topic_when_update_topic && self.is_system_topic(topic) {
            return TopicCommandOutcome::unchanged(invalid_parameter(
                opaque,
                format!("The topic[{topic}] is conflict with system topic."),
            ));
        }
        let success = RemotingCommand::new_response(response_code::SUCCESS, opaque, None);
        let change = self.delete_topic(topic, now_ms);
        TopicCommandOutcome {
            response: success,
            change,
        }
    }

    /// A slave takes its master's table whole, with its data version
    /// (Java's `SlaveSynchronize.syncTopicConfig`); empty change when the
    /// master's topics are what the table holds.
    pub fn replace_from_master(
        &mut self,
        master: &TopicConfigSerializeWrapper,
    ) -> TopicTableChange {
        if master.topic_config_table == self.topics {
            return TopicTableChange::default();
        }
        let registered = master
            .topic_config_table
            .iter()
            .filter(|(name, config)| self.topics.get(*name) != Some(*config))
            .map(|(_, config)| config.clone())
            .collect();
        let deleted = self
            .topics
            .keys()
            .filter(|name| !master.topic_config_table.contains_key(*name))
            .cloned()
            .collect();
        self.topics = master.topic_config_table.clone();
        self.data_version = master.data_version;
        self.publish();
        TopicTableChange {
            registered,
            deleted,
        }
    }

    /// Removes `topic` (Java's `deleteTopicConfig`); empty change if absent.
    pub fn delete_topic(&mut self, topic: &str, now_ms: i64) -> TopicTableChange {
        if self.topics.remove(topic).is_none() {
            return TopicTableChange::default();
        }
        self.next_version(now_ms);
        self.publish();
        TopicTableChange {
            registered: Vec::new(),
            deleted: vec![topic.to_owned()],
        }
    }

    /// GET_ALL_TOPIC_CONFIG (21): the 5.x wrapper of every topic, compact,
    /// with `totalTopicNum`. The 5.x paging fields are ignored (absent in
    /// practice): the whole table is returned.
    pub fn get_all_topic_config(&self, request: &RemotingCommand) -> RemotingCommand {
        let mut body = Vec::new();
        self.wrapper().to_json(&mut body, JsonStyle::Java);
        let total = i32::try_from(self.topics.len()).unwrap_or(i32::MAX);
        RemotingCommand::new_response(response_code::SUCCESS, request.opaque, None)
            .with_custom_header(&GetAllTopicConfigResponseHeader {
                total_topic_num: Some(total),
            })
            .with_body(Bytes::from(body))
    }

    /// GET_TOPIC_CONFIG (351), which `DefaultMQAdminExt` asks before it
    /// reports topic status or consumer progress: one topic's config as
    /// `TopicConfigAndQueueMappingDetail`, without a mapping (ringmq has no
    /// static topics); TOPIC_NOT_EXIST for a topic it does not hold.
    pub fn get_topic_config(&self, request: &RemotingCommand) -> RemotingCommand {
        let opaque = request.opaque;
        let header: GetTopicConfigRequestHeader = match request.decode_custom_header() {
            Ok(header) => header,
            Err(err) => return header_error(opaque, &err),
        };
        let Some(config) = self.topics.get(&header.topic) else {
            return RemotingCommand::new_response(
                response_code::TOPIC_NOT_EXIST,
                opaque,
                Some(format!("No topic in this broker. topic: {}", header.topic)),
            );
        };
        let detail = TopicConfigAndQueueMapping {
            topic_config: config.clone(),
            mapping_detail: None,
        };
        let mut body = Vec::new();
        detail.to_json(&mut body, JsonStyle::Java);
        RemotingCommand::new_response(response_code::SUCCESS, opaque, None)
            .with_body(Bytes::from(body))
    }
}

fn header_error(opaque: i32, err: &ringmq_protocol::error::DecodeError) -> RemotingCommand {
    RemotingCommand::new_response(response_code::SYSTEM_ERROR, opaque, Some(err.to_string()))
}

fn invalid_parameter(opaque: i32, remark: String) -> RemotingCommand {
    RemotingCommand::new_response(response_code::INVALID_PARAMETER, opaque, Some(remark))
}

/// ringmq's checks of an UPDATE_AND_CREATE_TOPIC request (Java has none):
/// queue counts in `0..=TOPIC_QUEUE_NUMS_MAX`, perm in `0..PERM_LIMIT`.
fn check_queue_nums_and_perm(read: i32, write: i32, perm: i32) -> Result<(), String> {
    for (name, nums) in [("readQueueNums", read), ("writeQueueNums", write)] {
        if !(0..=TOPIC_QUEUE_NUMS_MAX).contains(&nums) {
            return Err(format!(
                "{name} {nums} is outside 0..={TOPIC_QUEUE_NUMS_MAX}"
            ));
        }
    }
    if !(0..perm::PERM_LIMIT).contains(&perm) {
        return Err(format!("perm {perm} is outside 0..{}", perm::PERM_LIMIT));
    }
    Ok(())
}

/// Topic attributes Java 5.x supports, with their allowed values.
const TOPIC_ATTRIBUTES: [(&str, &[&str]); 3] = [
    ("queue.type", &["SimpleCQ", "BatchCQ"]),
    ("cleanup.policy", &["DELETE", "COMPACTION"]),
    (
        "message.type",
        &[
            "UNSPECIFIED",
            "NORMAL",
            "FIFO",
            "DELAY",
            "TRANSACTION",
            "MIXED",
        ],
    ),
];

/// Applies an `attributes` header (`+key=value,+k2=v2,-k3`) to a topic's
/// current attributes (`None` when the topic is being created), as Java's
/// `AttributeParser.parseToMap` + `AttributeUtil.alterCurrentAttributes`.
fn alter_attributes(
    current: Option<&BTreeMap<String, String>>,
    text: &str,
) -> Result<BTreeMap<String, String>, String> {
    let creating = current.is_none();
    let mut attributes = current.cloned().unwrap_or_default();
    for item in text
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
    {
        // By char, not byte: an item may start with any character.
        let mut chars = item.chars();
        let sign = chars.next();
        let rest = chars.as_str();
        match sign {
            Some('+') => {
                let Some((key, value)) = rest.split_once('=') else {
                    return Err(format!("add/alter attribute format is wrong: {item}"));
                };
                let Some((_, allowed)) = TOPIC_ATTRIBUTES.iter().find(|(name, _)| *name == key)
                else {
                    return Err(format!("unsupported key: {key}"));
                };
                if !allowed.contains(&value) {
                    return Err(format!("value is not in set: {allowed:?}"));
                }
                attributes.insert(key.to_owned(), value.to_owned());
            }
            Some('-') => {
                if creating {
                    return Err(format!(
                        "only add attribute is supported while creating topic. key: {rest}"
                    ));
                }
                if rest.contains('=') {
                    return Err(format!("delete attribute format is wrong: {item}"));
                }
                if attributes.remove(rest).is_none() {
                    return Err(format!("attempt to delete a nonexistent key: {rest}"));
                }
            }
            _ => return Err(format!("attribute format is wrong: {item}")),
        }
    }
    Ok(attributes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringmq_protocol::command::ExtFields;
    use ringmq_protocol::header::CustomHeader;

    const NOW: i64 = 1_700_000_000_000;

    fn table() -> TopicConfigTable {
        TopicConfigTable::new(TopicConfigSettings::default(), NOW)
    }

    fn create_request(topic: &str, queues: i32, perm: i32) -> RemotingCommand {
        let header = CreateTopicRequestHeader {
            topic: topic.to_owned(),
            default_topic: AUTO_CREATE_TOPIC_KEY_TOPIC.to_owned(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm,
            topic_filter_type: "SINGLE_TAG".to_owned(),
            topic_sys_flag: Some(0),
            order: false,
            attributes: None,
            force: None,
        };
        let mut request =
            RemotingCommand::new_request(request_code::UPDATE_AND_CREATE_TOPIC, ExtFields::new())
                .with_custom_header(&header);
        request.opaque = 41;
        request
    }

    fn delete_request(topic: &str) -> RemotingCommand {
        RemotingCommand::new_request(
            request_code::DELETE_TOPIC_IN_BROKER,
            DeleteTopicRequestHeader {
                topic: topic.to_owned(),
            }
            .to_ext_fields(),
        )
    }

    #[test]
    fn startup_creates_the_java_system_topics_with_their_queues_and_perms() {
        let table = table();
        let expect = |name: &str, queues: i32, perm: i32| {
            let config = table.get(name).unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(config.read_queue_nums, queues, "{name}");
            assert_eq!(config.write_queue_nums, queues, "{name}");
            assert_eq!(config.perm, perm, "{name}");
        };
        expect(SELF_TEST_TOPIC, 1, 6);
        expect(AUTO_CREATE_TOPIC_KEY_TOPIC, 8, 7);
        expect(BENCHMARK_TOPIC, 1024, 6);
        expect("DefaultCluster", 16, 7);
        expect("broker-a", 1, 7);
        expect(OFFSET_MOVED_EVENT, 1, 6);
        expect(SCHEDULE_TOPIC, 18, 6);
        expect("DefaultCluster_REPLY_TOPIC", 1, 6);
        expect("rmq_sys_REVIVE_LOG_DefaultCluster", 8, 6);
        expect("rmq_sys_SYNC_BROKER_MEMBER_broker-a", 1, 1);
        expect(TRANS_HALF_TOPIC, 1, 6);
        expect(TRANS_OP_HALF_TOPIC, 1, 6);
        expect(WHEEL_TIMER_TOPIC, 1, 6);
        assert!(table.get(TRACE_TOPIC_DEFAULT).is_none());
        assert_eq!(table.data_version().counter, 0);
        assert_eq!(table.data_version().timestamp, NOW);
        assert_eq!(table.snapshot().len(), table.topics.len());
    }

    #[test]
    fn tbw102_exists_only_with_auto_create_and_cluster_topic_perm_follows_its_flag() {
        let settings = TopicConfigSettings {
            auto_create_topic_enable: false,
            cluster_topic_enable: false,
            broker_topic_enable: false,
            trace_topic_enable: true,
            ..TopicConfigSettings::default()
        };
        let table = TopicConfigTable::new(settings, NOW);
        assert!(table.get(AUTO_CREATE_TOPIC_KEY_TOPIC).is_none());
        assert_eq!(table.get("DefaultCluster").unwrap().perm, perm::INHERIT);
        assert_eq!(table.get("broker-a").unwrap().perm, perm::INHERIT);
        assert_eq!(table.get(TRACE_TOPIC_DEFAULT).unwrap().read_queue_nums, 1);
    }

    #[test]
    fn topic_names_are_validated_with_java_remarks() {
        assert_eq!(validate_topic_name(""), Err(REMARK_TOPIC_BLANK));
        assert_eq!(validate_topic_name("  "), Err(REMARK_TOPIC_BLANK));
        assert_eq!(validate_topic_name("a b"), Err(REMARK_TOPIC_ILLEGAL_CHARS));
        assert_eq!(validate_topic_name("a@b"), Err(REMARK_TOPIC_ILLEGAL_CHARS));
        assert_eq!(
            validate_topic_name("tópico"),
            Err(REMARK_TOPIC_ILLEGAL_CHARS)
        );
        assert_eq!(validate_topic_name("Topic-1_%|x"), Ok(()));
        assert_eq!(validate_topic_name(&"a".repeat(127)), Ok(()));
        assert_eq!(
            validate_topic_name(&"a".repeat(128)),
            Err(REMARK_TOPIC_TOO_LONG)
        );
        let long_retry = format!("%RETRY%{}", "g".repeat(200));
        assert_eq!(validate_topic_name(&long_retry), Ok(()));
        let too_long_dlq = format!("%DLQ%{}", "g".repeat(251));
        assert_eq!(
            validate_topic_name(&too_long_dlq),
            Err(REMARK_TOPIC_TOO_LONG)
        );
    }

    #[test]
    fn not_allowed_send_topics_are_the_java_set() {
        for topic in [
            SCHEDULE_TOPIC,
            TRANS_HALF_TOPIC,
            TRANS_OP_HALF_TOPIC,
            TRANS_CHECK_MAX_TIME_TOPIC,
            SELF_TEST_TOPIC,
            OFFSET_MOVED_EVENT,
        ] {
            assert!(is_not_allowed_send_topic(topic), "{topic}");
        }
        assert!(!is_not_allowed_send_topic("TopicTest"));
        assert!(!is_not_allowed_send_topic(AUTO_CREATE_TOPIC_KEY_TOPIC));
    }

    #[test]
    fn auto_creation_from_tbw102_takes_min_queue_nums_and_drops_inherit() {
        let mut table = table();
        let (config, change) =
            table.create_topic_in_send_message("NewTopic", "TBW102", 4, 0, NOW + 5);
        let config = config.unwrap();
        assert_eq!(config.read_queue_nums, 4);
        assert_eq!(config.write_queue_nums, 4);
        assert_eq!(config.perm, 6);
        assert_eq!(change.registered, vec![config.clone()]);
        assert_eq!(table.data_version().counter, 1);
        assert_eq!(table.data_version().timestamp, NOW + 5);
        assert_eq!(table.snapshot().get("NewTopic"), Some(&config));
        // More queues than the template has: the template's count wins.
        let (wide, _) = table.create_topic_in_send_message("Wide", "TBW102", 64, 0, NOW);
        assert_eq!(wide.unwrap().write_queue_nums, 8);
        // An existing topic is returned unchanged, without a version bump.
        let (again, change) = table.create_topic_in_send_message("NewTopic", "TBW102", 2, 0, NOW);
        assert_eq!(again.unwrap().write_queue_nums, 4);
        assert!(change.is_empty());
        assert_eq!(table.data_version().counter, 2);
    }

    #[test]
    fn auto_creation_fails_without_inherit_bit_or_template() {
        let mut table = table();
        let (config, change) = table.create_topic_in_send_message("T", SELF_TEST_TOPIC, 4, 0, NOW);
        assert_eq!(config, None);
        assert!(change.is_empty());
        let (config, _) = table.create_topic_in_send_message("T", "NoSuchTemplate", 4, 0, NOW);
        assert_eq!(config, None);
        assert_eq!(table.data_version().counter, 0);
    }

    #[test]
    fn tbw102_loaded_from_file_is_no_template_when_auto_create_is_off() {
        let settings = TopicConfigSettings {
            auto_create_topic_enable: false,
            ..TopicConfigSettings::default()
        };
        let mut table = TopicConfigTable::new(settings, NOW);
        let old_file = TopicConfigTable::new(TopicConfigSettings::default(), NOW).encode_file();
        table.load(&old_file).unwrap();
        assert_eq!(table.get("TBW102").unwrap().perm, 7);
        let (config, _) = table.create_topic_in_send_message("T", "TBW102", 4, 0, NOW);
        assert_eq!(config, None);
    }

    #[test]
    fn resolve_for_send_refuses_bad_names_forbidden_topics_and_unknown_topics() {
        let mut table = TopicConfigTable::new(
            TopicConfigSettings {
                auto_create_topic_enable: false,
                ..TopicConfigSettings::default()
            },
            NOW,
        );
        let refusal = table
            .resolve_for_send("bad topic", "TBW102", 4, false, NOW)
            .unwrap_err();
        assert_eq!(refusal.code, response_code::INVALID_PARAMETER);
        assert_eq!(refusal.remark, REMARK_TOPIC_ILLEGAL_CHARS);
        let refusal = table
            .resolve_for_send(SCHEDULE_TOPIC, "TBW102", 4, false, NOW)
            .unwrap_err();
        assert_eq!(refusal.code, response_code::NO_PERMISSION);
        assert_eq!(
            refusal.remark,
            "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden."
        );
        let refusal = table
            .resolve_for_send("Unknown", "TBW102", 4, false, NOW)
            .unwrap_err();
        assert_eq!(refusal.code, response_code::TOPIC_NOT_EXIST);
        assert_eq!(
            refusal.remark,
            "topic[Unknown] not exist, apply first please!"
        );
        // %RETRY% topics are created with one queue even without a template.
        let retry = table
            .resolve_for_send("%RETRY%g", "TBW102", 4, false, NOW)
            .unwrap();
        assert_eq!(retry.config.write_queue_nums, 1);
        assert_eq!(retry.config.perm, 6);
        assert_eq!(retry.change.registered.len(), 1);
    }

    #[test]
    fn resolve_for_send_auto_creates_with_unit_flag() {
        let mut table = table();
        let sent = table
            .resolve_for_send("Fresh", "TBW102", 4, true, NOW)
            .unwrap();
        assert_eq!(sent.config.topic_sys_flag, topic_sys_flag::UNIT);
        assert_eq!(sent.change.registered[0].topic_name, "Fresh");
        let again = table
            .resolve_for_send("Fresh", "TBW102", 4, true, NOW)
            .unwrap();
        assert!(again.change.is_empty());
    }

    #[test]
    fn retry_topic_uses_group_retry_queue_nums_and_dlq_has_one_queue() {
        let mut table = table();
        let (retry, change) = table.ensure_retry_topic("g1", 3, false, NOW);
        assert_eq!(retry.topic_name, "%RETRY%g1");
        assert_eq!(retry.read_queue_nums, 3);
        assert_eq!(retry.perm, 6);
        assert!(change.needs_persist());
        let (_, again) = table.ensure_retry_topic("g1", 5, false, NOW);
        assert!(again.is_empty());
        let (dlq, change) = table.ensure_dlq_topic("g1", NOW);
        assert_eq!(dlq.topic_name, "%DLQ%g1");
        assert_eq!(dlq.write_queue_nums, 1);
        assert_eq!(dlq.perm, 6);
        assert_eq!(change.registered, vec![dlq]);
        let (unit, _) = table.ensure_retry_topic("g2", 1, true, NOW);
        assert_eq!(unit.topic_sys_flag, topic_sys_flag::UNIT_SUB);
    }

    #[test]
    fn update_and_create_topic_stores_bumps_version_and_reports_the_topic() {
        let mut table = table();
        let outcome = table.update_and_create_topic(&create_request("T1", 4, 6), NOW + 1);
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert_eq!(outcome.response.opaque, 41);
        assert!(outcome.response.is_response());
        assert_eq!(outcome.change.registered.len(), 1);
        assert_eq!(table.get("T1").unwrap().write_queue_nums, 4);
        assert_eq!(table.data_version().counter, 1);
        // The same config again: success, no change.
        let outcome = table.update_and_create_topic(&create_request("T1", 4, 6), NOW + 2);
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert!(outcome.change.is_empty());
        assert_eq!(table.data_version().counter, 1);
        // A different queue count is an update.
        let outcome = table.update_and_create_topic(&create_request("T1", 8, 6), NOW + 3);
        assert_eq!(outcome.change.registered[0].read_queue_nums, 8);
        assert_eq!(table.data_version().counter, 2);
        assert_eq!(table.snapshot().get("T1").unwrap().read_queue_nums, 8);
    }

    #[test]
    fn update_and_create_topic_refuses_invalid_names_system_topics_and_bad_numbers() {
        let mut table = table();
        let outcome = table.update_and_create_topic(&create_request("a/b", 4, 6), NOW);
        assert_eq!(outcome.response.code, response_code::INVALID_PARAMETER);
        assert_eq!(
            outcome.response.remark.as_deref(),
            Some(REMARK_TOPIC_ILLEGAL_CHARS)
        );
        let outcome = table.update_and_create_topic(&create_request("TBW102", 4, 7), NOW);
        assert_eq!(outcome.response.code, response_code::INVALID_PARAMETER);
        assert_eq!(
            outcome.response.remark.as_deref(),
            Some("The topic[TBW102] is conflict with system topic.")
        );
        let outcome = table.update_and_create_topic(&create_request("rmq_sys_x", 4, 6), NOW);
        assert_eq!(outcome.response.code, response_code::INVALID_PARAMETER);
        let outcome = table.update_and_create_topic(&create_request("T", 5000, 6), NOW);
        assert_eq!(outcome.response.code, response_code::INVALID_PARAMETER);
        let outcome = table.update_and_create_topic(&create_request("T", 4, 9), NOW);
        assert_eq!(outcome.response.code, response_code::INVALID_PARAMETER);
        assert_eq!(table.data_version().counter, 0);
        let mut missing = create_request("T", 4, 6);
        missing.ext_fields.remove("perm");
        let outcome = table.update_and_create_topic(&missing, NOW);
        assert_eq!(outcome.response.code, response_code::SYSTEM_ERROR);
        assert!(outcome.response.remark.unwrap().contains("perm"));
    }

    #[test]
    fn topic_attributes_are_added_altered_and_removed_like_java() {
        let mut table = table();
        let mut request = create_request("A", 4, 6);
        request
            .ext_fields
            .insert("attributes", "+message.type=FIFO");
        let outcome = table.update_and_create_topic(&request, NOW);
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert_eq!(table.get("A").unwrap().attributes["message.type"], "FIFO");
        let mut request = create_request("A", 4, 6);
        request.ext_fields.insert("attributes", "-message.type");
        table.update_and_create_topic(&request, NOW);
        assert!(table.get("A").unwrap().attributes.is_empty());
        for bad in [
            "+nope=1",
            "+message.type=WEIRD",
            "-message.type",
            "message.type",
            // A multi-byte first character (split by byte, it panicked).
            "é",
            "+é=1",
        ] {
            let mut request = create_request("A", 4, 6);
            request.ext_fields.insert("attributes", bad);
            let outcome = table.update_and_create_topic(&request, NOW);
            assert_eq!(outcome.response.code, response_code::SYSTEM_ERROR, "{bad}");
        }
        let mut request = create_request("B", 4, 6);
        request.ext_fields.insert("attributes", "-message.type");
        let outcome = table.update_and_create_topic(&request, NOW);
        assert_eq!(outcome.response.code, response_code::SYSTEM_ERROR);
        assert!(table.get("B").is_none());
    }

    #[test]
    fn delete_topic_removes_it_and_reports_it_for_offset_cleanup() {
        let mut table = table();
        table.update_and_create_topic(&create_request("Gone", 4, 6), NOW);
        let outcome = table.delete_topic_in_broker(&delete_request("Gone"), NOW + 9);
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert_eq!(outcome.change.deleted, vec!["Gone".to_owned()]);
        assert!(outcome.change.needs_persist());
        assert!(table.get("Gone").is_none());
        assert!(!table.snapshot().contains("Gone"));
        assert_eq!(table.data_version().counter, 2);
        assert_eq!(table.data_version().timestamp, NOW + 9);
        let outcome = table.delete_topic_in_broker(&delete_request("Gone"), NOW);
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert!(outcome.change.is_empty());
        let outcome = table.delete_topic_in_broker(&delete_request(SCHEDULE_TOPIC), NOW);
        assert_eq!(outcome.response.code, response_code::INVALID_PARAMETER);
        let outcome = table.delete_topic_in_broker(&delete_request(" "), NOW);
        assert_eq!(outcome.response.remark.as_deref(), Some(REMARK_TOPIC_BLANK));
    }

    #[test]
    fn get_all_topic_config_returns_every_topic_in_the_5x_wrapper() {
        let mut table = table();
        table.update_and_create_topic(&create_request("T1", 4, 6), NOW);
        let request =
            RemotingCommand::new_request(request_code::GET_ALL_TOPIC_CONFIG, ExtFields::new());
        let outcome = table.handle(&request, NOW).unwrap();
        assert!(outcome.change.is_empty());
        let response = outcome.response;
        assert_eq!(response.code, response_code::SUCCESS);
        let header: GetAllTopicConfigResponseHeader = response.decode_custom_header().unwrap();
        assert_eq!(
            header.total_topic_num,
            Some(i32::try_from(table.topics.len()).unwrap())
        );
        let body = TopicConfigSerializeWrapper::from_json(response.body_bytes()).unwrap();
        assert_eq!(body.topic_config_table, table.topics);
        assert_eq!(body.data_version, table.data_version());
        assert!(body.topic_queue_mapping_info_map.is_some());
        let text = String::from_utf8(response.body_bytes().to_vec()).unwrap();
        assert!(
            text.starts_with("{\"dataVersion\":{\"counter\":1,"),
            "{text}"
        );
    }

    #[test]
    fn get_topic_config_returns_one_topic_without_a_mapping_or_topic_not_exist() {
        let mut table = table();
        table.update_and_create_topic(&create_request("T1", 4, 6), NOW);
        let ask = |topic: &str| {
            let request = RemotingCommand::new_request(
                request_code::GET_TOPIC_CONFIG,
                GetTopicConfigRequestHeader {
                    topic: topic.to_owned(),
                }
                .to_ext_fields(),
            );
            table.get_topic_config(&request)
        };
        let found = ask("T1");
        assert_eq!(found.code, response_code::SUCCESS);
        let body = TopicConfigAndQueueMapping::from_json(found.body_bytes()).unwrap();
        assert_eq!(&body.topic_config, table.get("T1").unwrap());
        assert_eq!(body.topic_config.read_queue_nums, 4);
        assert!(body.mapping_detail.is_none());
        let missing = ask("T2");
        assert_eq!(missing.code, response_code::TOPIC_NOT_EXIST);
        assert_eq!(
            missing.remark.as_deref(),
            Some("No topic in this broker. topic: T2")
        );
        let request =
            RemotingCommand::new_request(request_code::GET_TOPIC_CONFIG, ExtFields::new());
        let outcome = table.handle(&request, NOW).unwrap();
        assert!(outcome.change.is_empty());
        assert_eq!(
            outcome.response.code,
            response_code::SYSTEM_ERROR,
            "no topic header"
        );
    }

    #[test]
    fn handle_ignores_codes_it_does_not_own() {
        let mut table = table();
        let request = RemotingCommand::new_request(request_code::SEND_MESSAGE, ExtFields::new());
        assert_eq!(table.handle(&request, NOW), None);
    }

    #[test]
    fn topics_file_round_trips_in_java_pretty_form() {
        let mut table = table();
        table.update_and_create_topic(&create_request("Kept", 3, 6), NOW + 7);
        let file = table.encode_file();
        let text = String::from_utf8(file.clone()).unwrap();
        assert!(text.starts_with("{\n\t\"dataVersion\":{"), "{text}");
        assert!(text.contains("\"Kept\":{"), "{text}");
        assert!(!text.contains("mappingDataVersion"), "{text}");
        let mut restarted = TopicConfigTable::new(TopicConfigSettings::default(), NOW + 100);
        restarted.load(&file).unwrap();
        assert_eq!(restarted.topics, table.topics);
        assert_eq!(restarted.data_version(), table.data_version());
        assert_eq!(
            restarted.snapshot().get("Kept").unwrap().write_queue_nums,
            3
        );
        assert!(restarted.load(b"{not json").is_err());
        assert_eq!(restarted.topics, table.topics);
    }

    #[test]
    fn snapshots_taken_before_a_change_do_not_see_it() {
        let mut table = table();
        let before = table.snapshot();
        table.update_and_create_topic(&create_request("Later", 2, 6), NOW);
        assert!(!before.contains("Later"));
        assert!(table.snapshot().contains("Later"));
        assert_eq!(table.snapshot().data_version().counter, 1);
        assert_eq!(before.data_version().counter, 0);
    }

    #[test]
    fn system_topics_include_the_ones_named_after_the_cluster_and_broker() {
        let table = table();
        for topic in [
            "DefaultCluster",
            "broker-a",
            "DefaultCluster_REPLY_TOPIC",
            "rmq_sys_any",
        ] {
            assert!(table.is_system_topic(topic), "{topic}");
        }
        assert!(!table.is_system_topic("TopicTest"));
        assert!(!table.is_system_topic("%RETRY%g"));
    }

    fn list_request(configs: Vec<TopicConfig>) -> RemotingCommand {
        let mut body = Vec::new();
        TopicConfigList {
            topic_config_list: configs,
        }
        .to_json(&mut body, JsonStyle::Java);
        RemotingCommand::new_request(request_code::UPDATE_AND_CREATE_TOPIC_LIST, ExtFields::new())
            .with_body(Bytes::from(body))
    }

    #[test]
    fn topic_list_is_checked_whole_then_stored_with_one_version_bump() {
        let mut table = table();
        let good = topic_with_queues("L1", 2, 6);
        let refused = table.handle(
            &list_request(vec![good.clone(), topic_with_queues(SCHEDULE_TOPIC, 1, 6)]),
            NOW,
        );
        let refused = refused.unwrap();
        assert_eq!(refused.response.code, response_code::INVALID_PARAMETER);
        assert!(table.get("L1").is_none());
        let outcome = table
            .handle(
                &list_request(vec![good.clone(), topic_with_queues("L2", 3, 6)]),
                NOW + 1,
            )
            .unwrap();
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert_eq!(outcome.change.registered.len(), 2);
        assert_eq!(table.data_version().counter, 1);
        assert_eq!(table.snapshot().get("L2").unwrap().read_queue_nums, 3);
        let outcome = table.handle(&list_request(vec![good]), NOW + 2).unwrap();
        assert!(outcome.change.is_empty());
        assert_eq!(table.data_version().counter, 1);
        let garbage = RemotingCommand::new_request(
            request_code::UPDATE_AND_CREATE_TOPIC_LIST,
            ExtFields::new(),
        )
        .with_body(Bytes::from_static(b"{"));
        assert_eq!(
            table.handle(&garbage, NOW).unwrap().response.code,
            response_code::SYSTEM_ERROR
        );
    }

    #[test]
    fn snapshots_cross_to_other_shard_threads() {
        let mut table = table();
        table.update_and_create_topic(&create_request("Shared", 2, 6), NOW);
        let snapshot = table.snapshot();
        let seen = std::thread::spawn(move || snapshot.get("Shared").map(|c| c.read_queue_nums))
            .join()
            .unwrap();
        assert_eq!(seen, Some(2));
    }

    #[test]
    fn unit_mode_sends_to_retry_topics_mark_a_unit_subscription() {
        let mut table = TopicConfigTable::new(
            TopicConfigSettings {
                auto_create_topic_enable: false,
                ..TopicConfigSettings::default()
            },
            NOW,
        );
        let sent = table
            .resolve_for_send("%RETRY%u", "TBW102", 4, true, NOW)
            .unwrap();
        assert_eq!(sent.config.topic_sys_flag, topic_sys_flag::UNIT_SUB);
    }

    #[test]
    fn retry_topics_are_created_from_tbw102_first_as_java_does() {
        let mut table = table();
        let sent = table
            .resolve_for_send("%RETRY%t", "TBW102", 4, false, NOW)
            .unwrap();
        assert_eq!(sent.config.write_queue_nums, 4);
    }

    #[test]
    fn a_slave_takes_its_masters_table_whole_and_reports_what_changed() {
        let mut master = table();
        master.handle(&create_request("Kept", 4, 6), NOW + 1);
        master.handle(&create_request("Changed", 4, 6), NOW + 2);
        let mut slave = TopicConfigTable::new(TopicConfigSettings::default(), NOW + 50);
        slave.handle(&create_request("Changed", 2, 6), NOW + 51);
        slave.handle(&create_request("OnlyOnSlave", 1, 6), NOW + 52);
        let change = slave.replace_from_master(&master.wrapper());
        let registered: Vec<&str> = change
            .registered
            .iter()
            .map(|config| config.topic_name.as_str())
            .collect();
        assert_eq!(registered, ["Changed", "Kept"]);
        assert_eq!(change.deleted, ["OnlyOnSlave"]);
        assert_eq!(
            slave.wrapper(),
            master.wrapper(),
            "same topics, same data version"
        );
        assert_eq!(slave.snapshot().get("Changed").unwrap().read_queue_nums, 4);
        // Nothing new on the master: nothing to do.
        assert!(slave.replace_from_master(&master.wrapper()).is_empty());
    }
}
