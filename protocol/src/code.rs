//! Request codes, response codes, `LanguageCode`, version ordinals, serialize
//! types and flag bits of the remoting protocol.
//!
//! Codes are plain `i32` constants, not enums: a broker must pass unknown codes
//! through (answering `REQUEST_CODE_NOT_SUPPORTED`), and a response code a
//! client sends back may be anything. [`request_code_name`] and
//! [`response_code_name`] name the known ones for logs.
//!
//! # Invariants
//!
//! - No two constants in [`request_code`] (or in [`response_code`]) share a
//!   value; the name lookups are `match`es over the same lists, so the
//!   compiler rejects a duplicate as an unreachable pattern.
//! - [`LanguageCode::from_byte`] and [`LanguageCode::from_name`] never fail:
//!   unknown input maps to [`LanguageCode::Other`].

/// Defines a module of `i32` code constants and a name lookup over them.
macro_rules! code_table {
    ($lookup:ident; $($(#[$meta:meta])* $name:ident = $value:expr,)*) => {
        $( $(#[$meta])* pub const $name: i32 = $value; )*

        /// The constant's name for a known code, `None` for unknown codes.
        pub(crate) fn $lookup(code: i32) -> Option<&'static str> {
            match code {
                $( $value => Some(stringify!($name)), )*
                _ => None,
            }
        }
    };
}

/// Request codes (`RequestCode`), section 2.2 of the protocol reference.
///
/// Codes above `i16::MAX` (the POP family) only work with JSON headers.
pub mod request_code {
    code_table! { name;
        /// Producer send with long header names (Go client, Java with `sendSmartMsg=false`).
        SEND_MESSAGE = 10,
        /// Consumer pull, long-polled.
        PULL_MESSAGE = 11,
        /// Message lookup by key.
        QUERY_MESSAGE = 12,
        /// Unused.
        QUERY_BROKER_OFFSET = 13,
        /// A consumer group's stored offset of one queue.
        QUERY_CONSUMER_OFFSET = 14,
        /// Store a consumer group's offset (usually one-way).
        UPDATE_CONSUMER_OFFSET = 15,
        /// Create or update a topic.
        UPDATE_AND_CREATE_TOPIC = 17,
        /// Create or update several topics.
        UPDATE_AND_CREATE_TOPIC_LIST = 18,
        /// All topic configs of a broker.
        GET_ALL_TOPIC_CONFIG = 21,
        /// Unused.
        GET_TOPIC_CONFIG_LIST = 22,
        /// Unused.
        GET_TOPIC_NAME_LIST = 23,
        /// Update broker config from a properties body.
        UPDATE_BROKER_CONFIG = 25,
        /// Broker config as properties text.
        GET_BROKER_CONFIG = 26,
        /// Unused.
        TRIGGER_DELETE_FILES = 27,
        /// Broker runtime statistics (KVTable).
        GET_BROKER_RUNTIME_INFO = 28,
        /// Queue offset for a store timestamp.
        SEARCH_OFFSET_BY_TIMESTAMP = 29,
        /// Next offset to be written in a queue.
        GET_MAX_OFFSET = 30,
        /// Smallest offset still present in a queue.
        GET_MIN_OFFSET = 31,
        /// Store time of the earliest message of a queue.
        GET_EARLIEST_MSG_STORETIME = 32,
        /// One record by CommitLog offset.
        VIEW_MESSAGE_BY_ID = 33,
        /// Client heartbeat with producer and consumer data.
        HEART_BEAT = 34,
        /// Client shutdown.
        UNREGISTER_CLIENT = 35,
        /// Consumer returns a failed message for retry.
        CONSUMER_SEND_MSG_BACK = 36,
        /// Commit or roll back a transactional half message (one-way).
        END_TRANSACTION = 37,
        /// Client ids of a consumer group.
        GET_CONSUMER_LIST_BY_GROUP = 38,
        /// Broker asks a producer for a transaction's state (one-way).
        CHECK_TRANSACTION_STATE = 39,
        /// Broker tells consumers the group changed (one-way).
        NOTIFY_CONSUMER_IDS_CHANGED = 40,
        /// Lock queues for an orderly consumer.
        LOCK_BATCH_MQ = 41,
        /// Unlock queues of an orderly consumer.
        UNLOCK_BATCH_MQ = 42,
        /// Slave sync of all consumer offsets.
        GET_ALL_CONSUMER_OFFSET = 43,
        /// Slave sync of delay offsets.
        GET_ALL_DELAY_OFFSET = 45,
        /// Validate a client's subscription config (SQL92).
        CHECK_CLIENT_CONFIG = 46,
        /// Unused.
        GET_CLIENT_CONFIG = 47,
        /// Timer checkpoint (broker to broker).
        GET_TIMER_CHECK_POINT = 60,
        /// Timer metrics.
        GET_TIMER_METRICS = 61,
        /// Name server: put a KV config entry.
        PUT_KV_CONFIG = 100,
        /// Name server: get a KV config entry.
        GET_KV_CONFIG = 101,
        /// Name server: delete a KV config entry.
        DELETE_KV_CONFIG = 102,
        /// Name server: broker registration.
        REGISTER_BROKER = 103,
        /// Name server: broker deregistration.
        UNREGISTER_BROKER = 104,
        /// Name server: route of a topic.
        GET_ROUTEINFO_BY_TOPIC = 105,
        /// Name server: cluster and broker tables.
        GET_BROKER_CLUSTER_INFO = 106,
        /// Create or update a subscription group.
        UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200,
        /// All subscription group configs.
        GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201,
        /// Per-queue offsets of a topic.
        GET_TOPIC_STATS_INFO = 202,
        /// Live connections of a consumer group.
        GET_CONSUMER_CONNECTION_LIST = 203,
        /// Live connections of a producer group.
        GET_PRODUCER_CONNECTION_LIST = 204,
        /// Name server: remove write permission of a broker.
        WIPE_WRITE_PERM_OF_BROKER = 205,
        /// Name server: all topic names.
        GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206,
        /// Delete a subscription group.
        DELETE_SUBSCRIPTIONGROUP = 207,
        /// Consume progress of a group.
        GET_CONSUME_STATS = 208,
        /// Unused.
        SUSPEND_CONSUMER = 209,
        /// Unused.
        RESUME_CONSUMER = 210,
        /// Unused.
        RESET_CONSUMER_OFFSET_IN_CONSUMER = 211,
        /// Unused.
        RESET_CONSUMER_OFFSET_IN_BROKER = 212,
        /// Unused.
        ADJUST_CONSUMER_THREAD_POOL = 213,
        /// Unused.
        WHO_CONSUME_THE_MESSAGE = 214,
        /// Delete a topic from a broker.
        DELETE_TOPIC_IN_BROKER = 215,
        /// Name server: delete a topic's route.
        DELETE_TOPIC_IN_NAMESRV = 216,
        /// Name server: register a topic's queue data.
        REGISTER_TOPIC_IN_NAMESRV = 217,
        /// Name server: all KV entries of a namespace.
        GET_KVLIST_BY_NAMESPACE = 219,
        /// Broker tells a consumer to reset offsets (one-way).
        RESET_CONSUMER_CLIENT_OFFSET = 220,
        /// Broker asks a consumer for its offsets.
        GET_CONSUMER_STATUS_FROM_CLIENT = 221,
        /// Admin resets a group's offsets by time.
        INVOKE_BROKER_TO_RESET_OFFSET = 222,
        /// Admin asks consumers' offsets through the broker.
        INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223,
        /// Name server: topics of a cluster.
        GET_TOPICS_BY_CLUSTER = 224,
        /// Create or update several subscription groups.
        UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST = 225,
        /// Groups consuming a topic.
        QUERY_TOPIC_CONSUME_BY_WHO = 300,
        /// Legacy filter server.
        REGISTER_FILTER_SERVER = 301,
        /// Legacy filter class.
        REGISTER_MESSAGE_FILTER_CLASS = 302,
        /// Time span of a group's consumption.
        QUERY_CONSUME_TIME_SPAN = 303,
        /// Name server: system topics.
        GET_SYSTEM_TOPIC_LIST_FROM_NS = 304,
        /// Broker's system topics.
        GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305,
        /// Admin: clean expired consume queues.
        CLEAN_EXPIRED_CONSUMEQUEUE = 306,
        /// Running info of a consumer (forwarded to the client).
        GET_CONSUMER_RUNNING_INFO = 307,
        /// Correction offsets.
        QUERY_CORRECTION_OFFSET = 308,
        /// Consume one message directly (forwarded to the client).
        CONSUME_MESSAGE_DIRECTLY = 309,
        /// Producer send with one-letter header names.
        SEND_MESSAGE_V2 = 310,
        /// Name server: unit topics.
        GET_UNIT_TOPIC_LIST = 311,
        /// Name server: topics with unit subscriptions.
        GET_HAS_UNIT_SUB_TOPIC_LIST = 312,
        /// Name server: non-unit topics with unit subscriptions.
        GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313,
        /// Copy a group's offsets to another group.
        CLONE_GROUP_OFFSET = 314,
        /// Broker statistics.
        VIEW_BROKER_STATS_DATA = 315,
        /// Admin: remove unused topics.
        CLEAN_UNUSED_TOPIC = 316,
        /// Consume statistics of all groups.
        GET_BROKER_CONSUME_STATS = 317,
        /// Name server: update config.
        UPDATE_NAMESRV_CONFIG = 318,
        /// Name server: get config.
        GET_NAMESRV_CONFIG = 319,
        /// Producer batch send (V2 header keys).
        SEND_BATCH_MESSAGE = 320,
        /// Consume queue entries.
        QUERY_CONSUME_QUEUE = 321,
        /// Name server: has a broker's data version changed.
        QUERY_DATA_VERSION = 322,
        /// Resume transaction checks of half messages.
        RESUME_CHECK_HALF_MESSAGE = 323,
        /// Request-reply: replier send (long names).
        SEND_REPLY_MESSAGE = 324,
        /// Request-reply: replier send (V2 names).
        SEND_REPLY_MESSAGE_V2 = 325,
        /// Request-reply: broker pushes the reply to the requester.
        PUSH_REPLY_MESSAGE_TO_CLIENT = 326,
        /// Name server: restore write permission of a broker.
        ADD_WRITE_PERM_OF_BROKER = 327,
        /// All producers of a broker.
        GET_ALL_PRODUCER_INFO = 328,
        /// Admin: delete expired CommitLog files.
        DELETE_EXPIRED_COMMITLOG = 329,
        /// Topics a group consumes.
        QUERY_TOPICS_BY_CONSUMER = 343,
        /// Subscription of a group for a topic.
        QUERY_SUBSCRIPTION_BY_CONSUMER = 345,
        /// One topic config (5.x).
        GET_TOPIC_CONFIG = 351,
        /// One subscription group config (5.x).
        GET_SUBSCRIPTIONGROUP_CONFIG = 352,
        /// Group forbidden flags (5.x).
        UPDATE_AND_GET_GROUP_FORBIDDEN = 353,
        /// RocksDB consume queue progress (5.x).
        CHECK_ROCKSDB_CQ_WRITE_PROGRESS = 354,
        /// Export RocksDB config (5.x).
        EXPORT_ROCKSDB_CONFIG_TO_JSON = 355,
        /// Lite pull consumer pull; same as `PULL_MESSAGE`.
        LITE_PULL_MESSAGE = 361,
        /// Recall a timer message (5.x).
        RECALL_MESSAGE = 370,
        /// Pop-mode queue assignment.
        QUERY_ASSIGNMENT = 400,
        /// Pop-mode request mode.
        SET_MESSAGE_REQUEST_MODE = 401,
        /// Pop-mode request modes.
        GET_ALL_MESSAGE_REQUEST_MODE = 402,
        /// Static topic creation.
        UPDATE_AND_CREATE_STATIC_TOPIC = 513,
        /// Name server: broker member group.
        GET_BROKER_MEMBER_GROUP = 901,
        /// Add a broker (container mode).
        ADD_BROKER = 902,
        /// Remove a broker (container mode).
        REMOVE_BROKER = 903,
        /// Name server: broker heartbeat (5.x).
        BROKER_HEARTBEAT = 904,
        /// Min broker id change notification.
        NOTIFY_MIN_BROKER_ID_CHANGE = 905,
        /// HA info exchange.
        EXCHANGE_BROKER_HA_INFO = 906,
        /// HA status.
        GET_BROKER_HA_STATUS = 907,
        /// Reset master flush offset.
        RESET_MASTER_FLUSH_OFFSET = 908,
        /// Controller: alter sync state set.
        CONTROLLER_ALTER_SYNC_STATE_SET = 1001,
        /// Controller: elect master.
        CONTROLLER_ELECT_MASTER = 1002,
        /// Controller: register broker.
        CONTROLLER_REGISTER_BROKER = 1003,
        /// Controller: replica info.
        CONTROLLER_GET_REPLICA_INFO = 1004,
        /// Controller: metadata.
        CONTROLLER_GET_METADATA_INFO = 1005,
        /// Controller: sync state data.
        CONTROLLER_GET_SYNC_STATE_DATA = 1006,
        /// Controller: broker epoch cache.
        GET_BROKER_EPOCH_CACHE = 1007,
        /// Controller: broker role changed.
        NOTIFY_BROKER_ROLE_CHANGED = 1008,
        /// Controller: update config.
        UPDATE_CONTROLLER_CONFIG = 1009,
        /// Controller: get config.
        GET_CONTROLLER_CONFIG = 1010,
        /// Controller: clean broker data.
        CLEAN_BROKER_DATA = 1011,
        /// Controller: next broker id.
        CONTROLLER_GET_NEXT_BROKER_ID = 1012,
        /// Controller: apply broker id.
        CONTROLLER_APPLY_BROKER_ID = 1013,
        /// Controller: close channel.
        BROKER_CLOSE_CHANNEL_REQUEST = 1014,
        /// Controller: check inactive broker.
        CHECK_NOT_ACTIVE_BROKER_REQUEST = 1015,
        /// Controller: broker live info.
        GET_BROKER_LIVE_INFO_REQUEST = 1016,
        /// Controller: sync state data.
        GET_SYNC_STATE_DATA_REQUEST = 1017,
        /// Controller: raft heartbeat event.
        RAFT_BROKER_HEART_BEAT_EVENT_REQUEST = 1018,
        /// Cold data flow control: update.
        UPDATE_COLD_DATA_FLOW_CTR_CONFIG = 2001,
        /// Cold data flow control: remove.
        REMOVE_COLD_DATA_FLOW_CTR_CONFIG = 2002,
        /// Cold data flow control: info.
        GET_COLD_DATA_FLOW_CTR_INFO = 2003,
        /// CommitLog read mode.
        SET_COMMITLOG_READ_MODE = 2004,
        /// ACL 2.0: create user.
        AUTH_CREATE_USER = 3001,
        /// ACL 2.0: update user.
        AUTH_UPDATE_USER = 3002,
        /// ACL 2.0: delete user.
        AUTH_DELETE_USER = 3003,
        /// ACL 2.0: get user.
        AUTH_GET_USER = 3004,
        /// ACL 2.0: list users.
        AUTH_LIST_USER = 3005,
        /// ACL 2.0: create ACL.
        AUTH_CREATE_ACL = 3006,
        /// ACL 2.0: update ACL.
        AUTH_UPDATE_ACL = 3007,
        /// ACL 2.0: delete ACL.
        AUTH_DELETE_ACL = 3008,
        /// ACL 2.0: get ACL.
        AUTH_GET_ACL = 3009,
        /// ACL 2.0: list ACLs.
        AUTH_LIST_ACL = 3010,
        /// ringmq's own: a slave shard pulls its master shard's CommitLog
        /// bytes (header [`crate::header::ReplicaPullRequestHeader`]); not a
        /// RocketMQ code.
        RINGMQ_REPLICA_PULL = 9101,
        /// ringmq's own: a slave shard fetches its master shard's consumer
        /// offsets (header [`crate::header::ReplicaOffsetsRequestHeader`],
        /// body as GET_ALL_CONSUMER_OFFSET's); not a RocketMQ code.
        RINGMQ_REPLICA_OFFSETS = 9102,
        /// ringmq's own: a slave fetches its master's delivery progress of
        /// delayed and timer messages and a master shard's log end (header
        /// [`crate::header::ReplicaOffsetsRequestHeader`], answer
        /// [`crate::header::ScheduleProgressResponseHeader`]); not a
        /// RocketMQ code.
        RINGMQ_SCHEDULE_PROGRESS = 9103,
        /// Pop consumption (JSON headers only).
        POP_MESSAGE = 200050,
        /// Pop ack.
        ACK_MESSAGE = 200051,
        /// Pop peek.
        PEEK_MESSAGE = 200052,
        /// Pop invisible-time change.
        CHANGE_MESSAGE_INVISIBLETIME = 200053,
        /// Pop notification.
        NOTIFICATION = 200054,
        /// Pop polling info.
        POLLING_INFO = 200055,
        /// Pop rollback.
        POP_ROLLBACK = 200056,
        /// Pop batch ack.
        BATCH_ACK_MESSAGE = 200151,
    }
}

/// Response codes (`RemotingSysResponseCode` + `ResponseCode`), section 2.1.
pub mod response_code {
    code_table! { name;
        /// Success.
        SUCCESS = 0,
        /// Generic failure.
        SYSTEM_ERROR = 1,
        /// Flow control; clients back off and retry.
        SYSTEM_BUSY = 2,
        /// Unknown request code.
        REQUEST_CODE_NOT_SUPPORTED = 3,
        /// Transaction failed.
        TRANSACTION_FAILED = 4,
        /// Stored, but the SYNC_FLUSH timed out.
        FLUSH_DISK_TIMEOUT = 10,
        /// Stored, but no usable slave.
        SLAVE_NOT_AVAILABLE = 11,
        /// Stored, but the slave did not acknowledge in time.
        FLUSH_SLAVE_TIMEOUT = 12,
        /// Bad topic length, properties length or body size.
        MESSAGE_ILLEGAL = 13,
        /// Store not writable.
        SERVICE_NOT_AVAILABLE = 14,
        /// Version not supported.
        VERSION_NOT_SUPPORTED = 15,
        /// Broker, topic or group not readable or writable.
        NO_PERMISSION = 16,
        /// Unknown topic.
        TOPIC_NOT_EXIST = 17,
        /// Topic exists already.
        TOPIC_EXIST_ALREADY = 18,
        /// No new message.
        PULL_NOT_FOUND = 19,
        /// Messages exist but none matched.
        PULL_RETRY_IMMEDIATELY = 20,
        /// Requested offset illegal.
        PULL_OFFSET_MOVED = 21,
        /// Nothing found for the query.
        QUERY_NOT_FOUND = 22,
        /// Subscription expression unparsable.
        SUBSCRIPTION_PARSE_FAILED = 23,
        /// No heartbeat subscription for (group, topic).
        SUBSCRIPTION_NOT_EXIST = 24,
        /// Broker's subscription older than the request's.
        SUBSCRIPTION_NOT_LATEST = 25,
        /// Unknown group and auto-create disabled.
        SUBSCRIPTION_GROUP_NOT_EXIST = 26,
        /// Filter data missing.
        FILTER_DATA_NOT_EXIST = 27,
        /// Filter data outdated.
        FILTER_DATA_NOT_LATEST = 28,
        /// Bad parameter (topic name, queue id, ...).
        INVALID_PARAMETER = 29,
        /// Transaction check answer: commit.
        TRANSACTION_SHOULD_COMMIT = 200,
        /// Transaction check answer: roll back.
        TRANSACTION_SHOULD_ROLLBACK = 201,
        /// Transaction check answer: unknown (sic).
        TRANSACTION_STATE_UNKNOW = 202,
        /// Transaction producer group wrong.
        TRANSACTION_STATE_GROUP_WRONG = 203,
        /// No buyer id.
        NO_BUYER_ID = 204,
        /// Not in current unit.
        NOT_IN_CURRENT_UNIT = 205,
        /// Consumer group has no live connection.
        CONSUMER_NOT_ONLINE = 206,
        /// Broker-to-client call timed out.
        CONSUME_MSG_TIMEOUT = 207,
        /// No message.
        NO_MESSAGE = 208,
        /// Pop polling full.
        POLLING_FULL = 209,
        /// Pop polling timeout.
        POLLING_TIMEOUT = 210,
        /// Broker does not exist.
        BROKER_NOT_EXIST = 211,
        /// Dispatch not complete.
        BROKER_DISPATCH_NOT_COMPLETE = 212,
        /// Broadcast consumption.
        BROADCAST_CONSUMPTION = 213,
        /// Flow control; push consumer waits 20 ms.
        FLOW_CONTROL = 215,
        /// Static topics: not the leader.
        NOT_LEADER_FOR_QUEUE = 501,
        /// Illegal operation.
        ILLEGAL_OPERATION = 604,
        /// Server shutting down (5.x, clients with version > 475).
        GO_AWAY = 1500,
        /// Controller: fenced master epoch.
        CONTROLLER_FENCED_MASTER_EPOCH = 2000,
        /// Controller: fenced sync state set epoch.
        CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001,
        /// Controller: invalid master.
        CONTROLLER_INVALID_MASTER = 2002,
        /// Controller: invalid replicas.
        CONTROLLER_INVALID_REPLICAS = 2003,
        /// Controller: master not available.
        CONTROLLER_MASTER_NOT_AVAILABLE = 2004,
        /// Controller: invalid request.
        CONTROLLER_INVALID_REQUEST = 2005,
        /// Controller: broker not alive.
        CONTROLLER_BROKER_NOT_ALIVE = 2006,
        /// Controller: not leader.
        CONTROLLER_NOT_LEADER = 2007,
        /// Controller: broker metadata missing.
        CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008,
        /// Controller: invalid clean of broker metadata.
        CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009,
        /// Controller: broker must register.
        CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010,
        /// Controller: master still exists.
        CONTROLLER_MASTER_STILL_EXIST = 2011,
        /// Controller: election failed.
        CONTROLLER_ELECT_MASTER_FAILED = 2012,
        /// Controller: alter sync state set failed.
        CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013,
        /// Controller: invalid broker id.
        CONTROLLER_BROKER_ID_INVALID = 2014,
        /// Controller: raft internal error.
        CONTROLLER_JRAFT_INTERNAL_ERROR = 2015,
        /// Controller: broker live info missing.
        CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016,
        /// ACL 2.0: user does not exist.
        USER_NOT_EXIST = 3001,
        /// ACL 2.0: policy does not exist.
        POLICY_NOT_EXIST = 3002,
        /// Client-internal, never on the wire.
        RPC_UNKNOWN = -1000,
        /// Client-internal, never on the wire.
        RPC_ADDR_IS_NULL = -1002,
        /// Client-internal, never on the wire.
        RPC_SEND_TO_CHANNEL_FAILED = -1004,
        /// Client-internal, never on the wire.
        RPC_TIME_OUT = -1006,
    }
}

/// The name of a known request code, for logs; `None` for unknown codes.
pub fn request_code_name(code: i32) -> Option<&'static str> {
    request_code::name(code)
}

/// The name of a known response code, for logs; `None` for unknown codes.
pub fn response_code_name(code: i32) -> Option<&'static str> {
    response_code::name(code)
}

/// `MQVersion.Version` ordinals that change behaviour (section 1.7).
pub mod version {
    /// Name server expects `RegisterBrokerBody` from brokers at or above this.
    pub const V3_0_11: i32 = 37;
    /// Broker refuses to forward admin calls to older consumers.
    pub const V3_1_8_SNAPSHOT: i32 = 62;
    /// Broker honours `maxReconsumeTimes` in headers from clients at or above this.
    pub const V3_4_9: i32 = 121;
    /// 4.0.0.
    pub const V4_0_0: i32 = 213;
    /// Java client refuses SQL92 filtering against older brokers.
    pub const V4_1_0_SNAPSHOT: i32 = 232;
    /// What the Go client sends.
    pub const V4_5_2: i32 = 317;
    /// What the C++ client sends.
    pub const V4_6_0: i32 = 333;
    /// Name server returns standard JSON route data to clients at or above this.
    pub const V4_9_4: i32 = 401;
    /// Last 4.x release.
    pub const V4_9_8: i32 = 409;
    /// 5.0.0.
    pub const V5_0_0: i32 = 413;
    /// What `rocketmq-client-rust` sends.
    pub const V5_3_1_SNAPSHOT: i32 = 474;
    /// A shutting-down 5.x server answers `GO_AWAY` only to versions above this.
    pub const V5_3_1: i32 = 475;
    /// Current Java `CURRENT_VERSION`.
    pub const V5_3_3: i32 = 479;
    /// The version this implementation stamps on what it sends.
    pub const CURRENT: i32 = V5_3_3;

    const _: () = assert!(CURRENT >= V4_9_4);
}

/// `RemotingCommand.flag` bits.
pub mod flag {
    /// Bit 0: the command is a response.
    pub const RESPONSE: i32 = 0x1;
    /// Bit 1: the request is one-way; it must not be answered.
    pub const ONEWAY: i32 = 0x2;
}

/// Header serialization, the high byte of the header-length word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SerializeType {
    /// fastjson-style JSON object.
    Json = 0,
    /// `RocketMQSerializable` binary form.
    RocketMq = 1,
}

impl SerializeType {
    /// The type for a serialize-type byte, `None` for unknown bytes.
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(SerializeType::Json),
            1 => Some(SerializeType::RocketMq),
            _ => None,
        }
    }

    /// The wire byte.
    pub fn to_byte(self) -> u8 {
        self as u8
    }
}

/// The sender's implementation language (`LanguageCode`, table 1.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum LanguageCode {
    /// Java.
    #[default]
    Java = 0,
    /// C++.
    Cpp = 1,
    /// .NET.
    Dotnet = 2,
    /// Python.
    Python = 3,
    /// Delphi.
    Delphi = 4,
    /// Erlang.
    Erlang = 5,
    /// Ruby.
    Ruby = 6,
    /// Other, and anything unknown.
    Other = 7,
    /// HTTP.
    Http = 8,
    /// Go.
    Go = 9,
    /// PHP.
    Php = 10,
    /// OMS.
    Oms = 11,
    /// Rust (5.x only).
    Rust = 12,
    /// Node.js (5.x only).
    NodeJs = 13,
}

impl LanguageCode {
    /// Every language, in byte order.
    pub const ALL: [LanguageCode; 14] = [
        LanguageCode::Java,
        LanguageCode::Cpp,
        LanguageCode::Dotnet,
        LanguageCode::Python,
        LanguageCode::Delphi,
        LanguageCode::Erlang,
        LanguageCode::Ruby,
        LanguageCode::Other,
        LanguageCode::Http,
        LanguageCode::Go,
        LanguageCode::Php,
        LanguageCode::Oms,
        LanguageCode::Rust,
        LanguageCode::NodeJs,
    ];

    /// The language of a binary header byte; unknown bytes are `Other`.
    pub fn from_byte(byte: u8) -> Self {
        Self::ALL
            .get(usize::from(byte))
            .copied()
            .unwrap_or(LanguageCode::Other)
    }

    /// The binary header byte.
    pub fn to_byte(self) -> u8 {
        self as u8
    }

    /// The language of a Java enum name (exact case, as fastjson compares);
    /// unknown names are `Other`.
    pub fn from_name(name: &str) -> Self {
        match name {
            "JAVA" => LanguageCode::Java,
            "CPP" => LanguageCode::Cpp,
            "DOTNET" => LanguageCode::Dotnet,
            "PYTHON" => LanguageCode::Python,
            "DELPHI" => LanguageCode::Delphi,
            "ERLANG" => LanguageCode::Erlang,
            "RUBY" => LanguageCode::Ruby,
            "HTTP" => LanguageCode::Http,
            "GO" => LanguageCode::Go,
            "PHP" => LanguageCode::Php,
            "OMS" => LanguageCode::Oms,
            "RUST" => LanguageCode::Rust,
            "NODE_JS" => LanguageCode::NodeJs,
            _ => LanguageCode::Other,
        }
    }

    /// The Java enum name, as written in JSON headers.
    pub fn name(self) -> &'static str {
        match self {
            LanguageCode::Java => "JAVA",
            LanguageCode::Cpp => "CPP",
            LanguageCode::Dotnet => "DOTNET",
            LanguageCode::Python => "PYTHON",
            LanguageCode::Delphi => "DELPHI",
            LanguageCode::Erlang => "ERLANG",
            LanguageCode::Ruby => "RUBY",
            LanguageCode::Other => "OTHER",
            LanguageCode::Http => "HTTP",
            LanguageCode::Go => "GO",
            LanguageCode::Php => "PHP",
            LanguageCode::Oms => "OMS",
            LanguageCode::Rust => "RUST",
            LanguageCode::NodeJs => "NODE_JS",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_codes_have_names_and_unknown_codes_do_not() {
        assert_eq!(request_code_name(310), Some("SEND_MESSAGE_V2"));
        assert_eq!(
            request_code_name(request_code::POP_MESSAGE),
            Some("POP_MESSAGE")
        );
        assert_eq!(request_code_name(9999), None);
        assert_eq!(response_code_name(0), Some("SUCCESS"));
        assert_eq!(response_code_name(-1006), Some("RPC_TIME_OUT"));
        assert_eq!(response_code_name(77), None);
    }

    #[test]
    fn language_byte_and_name_round_trip() {
        for (index, language) in LanguageCode::ALL.iter().enumerate() {
            assert_eq!(usize::from(language.to_byte()), index);
            assert_eq!(LanguageCode::from_byte(language.to_byte()), *language);
            assert_eq!(LanguageCode::from_name(language.name()), *language);
        }
    }

    #[test]
    fn unknown_languages_map_to_other() {
        assert_eq!(LanguageCode::from_byte(14), LanguageCode::Other);
        assert_eq!(LanguageCode::from_byte(255), LanguageCode::Other);
        assert_eq!(LanguageCode::from_name("COBOL"), LanguageCode::Other);
        assert_eq!(LanguageCode::from_name("java"), LanguageCode::Other);
    }

    #[test]
    fn serialize_type_bytes_are_zero_and_one() {
        assert_eq!(SerializeType::from_byte(0), Some(SerializeType::Json));
        assert_eq!(SerializeType::from_byte(1), Some(SerializeType::RocketMq));
        assert_eq!(SerializeType::from_byte(2), None);
        assert_eq!(SerializeType::RocketMq.to_byte(), 1);
    }
}
