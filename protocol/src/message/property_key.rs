//! Property keys of RocketMQ messages (Java `MessageConst`, remoting-protocol.md 4.7).
//!
//! Names follow Java's string values where they are identifiers, and Java's
//! constant names where the value is not (`__transactionId__` is
//! [`TRANSACTION_ID`], `1ST_POP_TIME` is [`FIRST_POP_TIME`]).
//!
//! # Invariants
//!
//! - No key is empty or contains a separator byte (0x01, 0x02); checked at compile
//!   time over [`ALL`].

/// Business keys separated by single spaces; each is indexed as `topic#key`.
pub const KEYS: &str = "KEYS";
/// The tag; its Java `String.hashCode()` is the ConsumeQueue `tagsCode`.
pub const TAGS: &str = "TAGS";
/// `"true"`/`"false"`: wait for flush / replication before answering.
pub const WAIT: &str = "WAIT";
/// Delay level 1..18; `-1` on messages redirected to a DLQ.
pub const DELAY: &str = "DELAY";
/// Original topic of a message now in `%RETRY%`.
pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
/// Original topic of delayed, timer and transactional-half messages.
pub const REAL_TOPIC: &str = "REAL_TOPIC";
/// Original queue id of delayed, timer and transactional-half messages.
pub const REAL_QID: &str = "REAL_QID";
/// `"true"` marks a transactional half message.
pub const TRAN_MSG: &str = "TRAN_MSG";
/// Producer group of a transactional message.
pub const PGROUP: &str = "PGROUP";
/// Queue minimum offset, set locally by consumers; never stored.
pub const MIN_OFFSET: &str = "MIN_OFFSET";
/// Queue maximum offset, set locally by consumers; never stored.
pub const MAX_OFFSET: &str = "MAX_OFFSET";
/// Legacy.
pub const BUYER_ID: &str = "BUYER_ID";
/// Id of the first message of a retry chain.
pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
/// Legacy.
pub const TRANSFER_FLAG: &str = "TRANSFER_FLAG";
/// Legacy.
pub const CORRECTION_FLAG: &str = "CORRECTION_FLAG";
/// Legacy.
pub const MQ2_FLAG: &str = "MQ2_FLAG";
/// Client-side resend to `%RETRY%`; moved into the request header.
pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
/// Broker region id, default `DefaultRegion`.
pub const MSG_REGION: &str = "MSG_REGION";
/// `"true"`/`"false"`: message tracing switch.
pub const TRACE_ON: &str = "TRACE_ON";
/// Client-generated unique id (`SendResult.msgId`).
pub const UNIQ_KEY: &str = "UNIQ_KEY";
/// Legacy.
pub const EXTEND_UNIQ_INFO: &str = "EXTEND_UNIQ_INFO";
/// Client-side resend to `%RETRY%`; moved into the request header.
pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
/// Consume-timeout bookkeeping, client-local.
pub const CONSUME_START_TIME: &str = "CONSUME_START_TIME";
/// 5.x inner batch: message count.
pub const INNER_NUM: &str = "INNER_NUM";
/// 5.x inner batch: base queue offset.
pub const INNER_BASE: &str = "INNER_BASE";
/// Duplication mode (controller).
pub const DUP_INFO: &str = "DUP_INFO";
/// Minimum age in seconds before the first transaction check.
pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
/// Original half-queue offset of a re-put half message.
pub const TRAN_PREPARED_QUEUE_OFFSET: &str = "TRAN_PREPARED_QUEUE_OFFSET";
/// Transaction id of a half message (= its `UNIQ_KEY`). Java: `__transactionId__`.
pub const TRANSACTION_ID: &str = "__transactionId__";
/// Number of transaction check-backs done so far.
pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
/// Namespace instance id.
pub const INSTANCE_ID: &str = "INSTANCE_ID";
/// Request-reply: correlation id.
pub const CORRELATION_ID: &str = "CORRELATION_ID";
/// Request-reply: client id of the requester.
pub const REPLY_TO_CLIENT: &str = "REPLY_TO_CLIENT";
/// Request-reply: time to live in ms.
pub const TTL: &str = "TTL";
/// Request-reply: arrival time of the reply.
pub const ARRIVE_TIME: &str = "ARRIVE_TIME";
/// Request-reply: time the broker pushed the reply.
pub const PUSH_REPLY_TIME: &str = "PUSH_REPLY_TIME";
/// Broker cluster name; needed by request-reply to build the reply topic.
pub const CLUSTER: &str = "CLUSTER";
/// `reply` on reply messages.
pub const MSG_TYPE: &str = "MSG_TYPE";
/// Pop consumption checkpoint.
pub const POP_CK: &str = "POP_CK";
/// Pop consumption checkpoint offset.
pub const POP_CK_OFFSET: &str = "POP_CK_OFFSET";
/// Time of the first pop. Java value `1ST_POP_TIME`.
pub const FIRST_POP_TIME: &str = "1ST_POP_TIME";
/// Ordering key (5.x / proxy). Java value `__SHARDINGKEY`.
pub const SHARDING_KEY: &str = "__SHARDINGKEY";
/// Forward queue id (5.x). Java value `PROPERTY_FORWARD_QUEUE_ID`.
pub const FORWARD_QUEUE_ID: &str = "PROPERTY_FORWARD_QUEUE_ID";
/// Redirect marker (5.x).
pub const REDIRECT: &str = "REDIRECT";
/// LMQ multi-dispatch targets.
pub const INNER_MULTI_DISPATCH: &str = "INNER_MULTI_DISPATCH";
/// LMQ multi-dispatch queue offsets.
pub const INNER_MULTI_QUEUE_OFFSET: &str = "INNER_MULTI_QUEUE_OFFSET";
/// Trace context (5.x).
pub const TRACE_CONTEXT: &str = "TRACE_CONTEXT";
/// Timer: relative delay in seconds.
pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
/// Timer: relative delay in milliseconds.
pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
/// Timer: absolute deliver time in ms since the epoch.
pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
/// Timer wheel internal: enqueue time.
pub const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
/// Timer wheel internal: dequeue time.
pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
/// Timer wheel internal: roll count.
pub const TIMER_ROLL_TIMES: &str = "TIMER_ROLL_TIMES";
/// Timer wheel internal: due time.
pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
/// Timer wheel internal: deleted unique key.
pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
/// Timer wheel internal: delay level.
pub const TIMER_DELAY_LEVEL: &str = "TIMER_DELAY_LEVEL";
/// Legacy absolute start-deliver time; not acted upon by the broker.
pub const START_DELIVER_TIME: &str = "__STARTDELIVERTIME";
/// Born host as text (5.x). Java value `__BORNHOST`.
pub const BORN_HOST: &str = "__BORNHOST";
/// Born timestamp as text (5.x).
pub const BORN_TIMESTAMP: &str = "BORN_TIMESTAMP";
/// Original topic of a DLQ message (5.x).
pub const DLQ_ORIGIN_TOPIC: &str = "DLQ_ORIGIN_TOPIC";
/// Original message id of a DLQ message (5.x).
pub const DLQ_ORIGIN_MESSAGE_ID: &str = "DLQ_ORIGIN_MESSAGE_ID";
/// Optional trailing record CRC (4.1). Java value `__CRC32#`.
pub const CRC32: &str = "__CRC32#";
/// Prefix of client-local properties that are never stored.
pub const TRANSIENT_PREFIX: &str = "__RMQ.TRANSIENT.";

/// Every key above, in declaration order (excluding [`TRANSIENT_PREFIX`]).
pub const ALL: &[&str] = &[
    KEYS,
    TAGS,
    WAIT,
    DELAY,
    RETRY_TOPIC,
    REAL_TOPIC,
    REAL_QID,
    TRAN_MSG,
    PGROUP,
    MIN_OFFSET,
    MAX_OFFSET,
    BUYER_ID,
    ORIGIN_MESSAGE_ID,
    TRANSFER_FLAG,
    CORRECTION_FLAG,
    MQ2_FLAG,
    RECONSUME_TIME,
    MSG_REGION,
    TRACE_ON,
    UNIQ_KEY,
    EXTEND_UNIQ_INFO,
    MAX_RECONSUME_TIMES,
    CONSUME_START_TIME,
    INNER_NUM,
    INNER_BASE,
    DUP_INFO,
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    TRAN_PREPARED_QUEUE_OFFSET,
    TRANSACTION_ID,
    TRANSACTION_CHECK_TIMES,
    INSTANCE_ID,
    CORRELATION_ID,
    REPLY_TO_CLIENT,
    TTL,
    ARRIVE_TIME,
    PUSH_REPLY_TIME,
    CLUSTER,
    MSG_TYPE,
    POP_CK,
    POP_CK_OFFSET,
    FIRST_POP_TIME,
    SHARDING_KEY,
    FORWARD_QUEUE_ID,
    REDIRECT,
    INNER_MULTI_DISPATCH,
    INNER_MULTI_QUEUE_OFFSET,
    TRACE_CONTEXT,
    TIMER_DELAY_SEC,
    TIMER_DELAY_MS,
    TIMER_DELIVER_MS,
    TIMER_ENQUEUE_MS,
    TIMER_DEQUEUE_MS,
    TIMER_ROLL_TIMES,
    TIMER_OUT_MS,
    TIMER_DEL_UNIQKEY,
    TIMER_DELAY_LEVEL,
    START_DELIVER_TIME,
    BORN_HOST,
    BORN_TIMESTAMP,
    DLQ_ORIGIN_TOPIC,
    DLQ_ORIGIN_MESSAGE_ID,
    CRC32,
];

const fn is_valid_key(key: &str) -> bool {
    let bytes = key.as_bytes();
    if bytes.is_empty() {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == 0x01 || bytes[i] == 0x02 {
            return false;
        }
        i += 1;
    }
    true
}

const _: () = {
    let mut i = 0;
    while i < ALL.len() {
        assert!(is_valid_key(ALL[i]));
        i += 1;
    }
};
