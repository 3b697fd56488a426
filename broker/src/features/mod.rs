//! Message features beyond plain sends, as deterministic logic the shards
//! drive: SQL92 property filters ([`sql92`]), delay levels and their
//! scheduler ([`delay`]), RocketMQ 5 timer messages on a timing wheel
//! ([`timer`]), transactional half messages and their check-back
//! ([`transaction`]), and the consumer retry ladder ([`retry`]).
//!
//! Nothing here does I/O, reads a clock or spawns a thread: time is a
//! parameter, store reads are inputs (decoded records, consume-queue entries)
//! and store writes are outputs (the records to append, the offsets to
//! persist), so the shard code stays a thin shell and everything here is unit
//! tested. Two shapes recur:
//!
//! - [`Redirect`]: the put path of a send rewrites where a message is stored
//!   (delay → `SCHEDULE_TOPIC_XXXX`, timer → `rmq_sys_wheel_timer`, half →
//!   `RMQ_SYS_TRANS_HALF_TOPIC`) and its properties, before it is appended;
//!   [`route_put`] makes that decision in Java's order.
//! - [`Repost`]: a new record made from a stored one (a due delayed message, a
//!   committed half message, a retry copy); [`Repost::to_spec`] gives the
//!   [`RecordSpec`] to append, whose offsets the appender assigns.
//!
//! # Invariants
//!
//! - Every function is a pure function of its arguments and the state it owns;
//!   no module keeps a reference to store or network state.
//! - A progress offset handed out for persistence never passes a message whose
//!   re-delivery has not been acknowledged as stored.

use ringmq_protocol::code::response_code;
use ringmq_protocol::message::{Properties, RecordSpec, RecordView};

pub mod delay;
pub mod retry;
pub mod sql92;
pub mod timer;
pub mod transaction;

/// Where the put path stores a message instead of where the producer sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// The system topic.
    pub topic: &'static str,
    /// The queue within it.
    pub queue_id: i32,
    /// The properties string to store (with `REAL_TOPIC`, `REAL_QID`...).
    pub properties: Vec<u8>,
    /// The `sysFlag` to store.
    pub sys_flag: i32,
}

/// A record to append that is derived from a stored record: the fields that
/// change; body, flag, born timestamp and hosts come from the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repost {
    /// Topic to append to.
    pub topic: String,
    /// Queue to append to.
    pub queue_id: i32,
    /// Properties string of the new record.
    pub properties: Vec<u8>,
    /// `sysFlag` of the new record.
    pub sys_flag: i32,
    /// `reconsumeTimes` of the new record.
    pub reconsume_times: i32,
    /// `preparedTransactionOffset` of the new record.
    pub prepared_transaction_offset: i64,
    /// A store timestamp to keep instead of the append time (a committed
    /// half message keeps the half's), `None` for the append time.
    pub store_timestamp_ms: Option<i64>,
    /// The ConsumeQueue `tagsCode` of the new record.
    pub tags_code: i64,
}

impl Repost {
    /// The record to append: `source`'s body, flag, born timestamp, born and
    /// store hosts with this repost's fields; offsets are zero until the
    /// appender assigns them, and the store timestamp is `append_time_ms`
    /// unless the repost keeps one.
    pub fn to_spec<'a>(&'a self, source: &RecordView<'a>, append_time_ms: i64) -> RecordSpec<'a> {
        RecordSpec {
            topic: &self.topic,
            body: source.body(),
            properties: &self.properties,
            queue_id: self.queue_id,
            flag: source.flag(),
            queue_offset: 0,
            commit_log_offset: 0,
            sys_flag: self.sys_flag,
            born_timestamp_ms: source.born_timestamp_ms(),
            born_host: source.born_host(),
            store_timestamp_ms: self.store_timestamp_ms.unwrap_or(append_time_ms),
            store_host: source.store_host(),
            reconsume_times: self.reconsume_times,
            prepared_transaction_offset: self.prepared_transaction_offset,
            body_crc: None,
            version: None,
        }
    }
}

/// Why the put path refuses a message for its feature properties.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PutError {
    /// A bad `DELAY` property.
    #[error(transparent)]
    Delay(#[from] delay::DelayError),
    /// A bad or unacceptable timer message.
    #[error(transparent)]
    Timer(#[from] timer::TimerError),
    /// A half message whose properties cannot be rewritten.
    #[error(transparent)]
    Transaction(#[from] transaction::TransactionError),
}

impl PutError {
    /// The response code of the send, as Java's `handlePutMessageResult`
    /// maps `WHEEL_TIMER_MSG_ILLEGAL` (MESSAGE_ILLEGAL) and
    /// `WHEEL_TIMER_FLOW_CONTROL` (SYSTEM_ERROR); a `DELAY` Java cannot parse
    /// fails the send with SYSTEM_ERROR.
    pub fn response_code(&self) -> i32 {
        match self {
            PutError::Timer(timer::TimerError::FlowControl { .. }) => response_code::SYSTEM_ERROR,
            PutError::Timer(_) => response_code::MESSAGE_ILLEGAL,
            PutError::Delay(_) | PutError::Transaction(_) => response_code::SYSTEM_ERROR,
        }
    }
}

/// Where the put path stores a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutRoute {
    /// Where the producer sent it, unchanged.
    Direct,
    /// A half message, to `RMQ_SYS_TRANS_HALF_TOPIC`.
    Half(Redirect),
    /// A delay level, to `SCHEDULE_TOPIC_XXXX`.
    Schedule(Redirect),
    /// A timer message, to `rmq_sys_wheel_timer` (check
    /// [`timer::TimerWheel::admits`] before appending).
    Timer(Redirect),
}

/// The put path's decision for one message, in Java's order: a half
/// message (`TRAN_MSG`) goes to the half topic and keeps its `DELAY` for its
/// commit (Java's client clears `DELAY` on transactional sends; were one
/// left, Java would schedule the half and later drop it); otherwise a `DELAY`
/// level wins over timer properties; otherwise a timer message goes to the
/// wheel. Rejected transaction messages (`rejectTransactionMessage`) are the
/// caller's check, before this.
///
/// # Errors
///
/// [`PutError`], with [`PutError::response_code`] to answer.
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one send, each needed"
)]
pub fn route_put(
    levels: &delay::DelayLevels,
    timer_config: &timer::TimerConfig,
    topic: &str,
    queue_id: i32,
    sys_flag: i32,
    properties: &[u8],
    reconsume_times: i32,
    now_ms: i64,
) -> Result<PutRoute, PutError> {
    if transaction::is_half_message(Properties::new(properties), reconsume_times) {
        let redirect = transaction::redirect_to_half(topic, queue_id, sys_flag, properties)?;
        return Ok(PutRoute::Half(redirect));
    }
    if let Some(redirect) =
        delay::redirect_to_schedule(levels, topic, queue_id, sys_flag, properties)?
    {
        return Ok(PutRoute::Schedule(redirect));
    }
    if let Some(redirect) =
        timer::redirect_to_timer(timer_config, topic, queue_id, sys_flag, properties, now_ms)?
    {
        return Ok(PutRoute::Timer(redirect));
    }
    Ok(PutRoute::Direct)
}

/// One ConsumeQueue entry of a system queue, as the schedulers read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueEntry {
    /// Queue offset of the entry.
    pub queue_offset: i64,
    /// CommitLog offset of the record.
    pub commit_log_offset: i64,
    /// Record size.
    pub size: i32,
    /// `tagsCode`; for `SCHEDULE_TOPIC_XXXX`, the delivery time in ms.
    pub tags_code: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topic_config::{SCHEDULE_TOPIC, TRANS_HALF_TOPIC, WHEEL_TIMER_TOPIC};

    fn route(properties: &[u8], reconsume_times: i32) -> Result<PutRoute, PutError> {
        route_put(
            &delay::DelayLevels::default(),
            &timer::TimerConfig::default(),
            "T",
            1,
            0,
            properties,
            reconsume_times,
            10_000,
        )
    }

    fn topic(route: &PutRoute) -> &'static str {
        match route {
            PutRoute::Direct => "T",
            PutRoute::Half(r) | PutRoute::Schedule(r) | PutRoute::Timer(r) => r.topic,
        }
    }

    #[test]
    fn the_put_path_routes_in_java_order() {
        assert_eq!(route(b"TAGS\x01a\x02", 0), Ok(PutRoute::Direct));
        let half = route(b"TRAN_MSG\x01true\x02DELAY\x012\x02", 0).unwrap();
        assert_eq!(topic(&half), TRANS_HALF_TOPIC);
        // A consumer retry of a transactional message is a plain delayed one.
        let retry = route(b"TRAN_MSG\x01true\x02DELAY\x012\x02", 1).unwrap();
        assert_eq!(topic(&retry), SCHEDULE_TOPIC);
        let both = route(b"DELAY\x012\x02TIMER_DELAY_SEC\x013\x02", 0).unwrap();
        assert_eq!(topic(&both), SCHEDULE_TOPIC);
        let timed = route(b"TIMER_DELAY_SEC\x013\x02", 0).unwrap();
        assert_eq!(topic(&timed), WHEEL_TIMER_TOPIC);
    }

    #[test]
    fn refused_puts_carry_java_response_codes() {
        let bad_delay = route(b"DELAY\x01x\x02", 0).unwrap_err();
        assert_eq!(bad_delay.response_code(), response_code::SYSTEM_ERROR);
        let too_far = route(b"TIMER_DELAY_SEC\x0199999999\x02", 0).unwrap_err();
        assert_eq!(too_far.response_code(), response_code::MESSAGE_ILLEGAL);
        let full = PutError::Timer(timer::TimerError::FlowControl { count: 1 });
        assert_eq!(full.response_code(), response_code::SYSTEM_ERROR);
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Records for the feature tests.

    use std::net::SocketAddr;

    use bytes::BytesMut;
    use ringmq_protocol::message::{CrcCheck, PropertiesBuilder, RecordSpec, decode_record};

    /// Encodes a record with the given topic, queue and properties.
    pub fn record_bytes(
        topic: &str,
        queue_id: i32,
        pairs: &[(&str, &str)],
        sys_flag: i32,
    ) -> Vec<u8> {
        let mut properties = BytesMut::new();
        {
            let mut builder = PropertiesBuilder::new(&mut properties);
            for (key, value) in pairs {
                builder.push(key, value).unwrap();
            }
        }
        let host: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        let spec = RecordSpec {
            topic,
            body: b"hello",
            properties: &properties,
            queue_id,
            flag: 7,
            queue_offset: 42,
            commit_log_offset: 4096,
            sys_flag,
            born_timestamp_ms: 1_000,
            born_host: host,
            store_timestamp_ms: 2_000,
            store_host: host,
            reconsume_times: 0,
            ..RecordSpec::default()
        };
        let mut bytes = vec![0; spec.encoded_len()];
        spec.encode_into(&mut bytes).unwrap();
        decode_record(&bytes, CrcCheck::Verify).unwrap();
        bytes
    }

    /// The properties of a string as sorted pairs.
    pub fn pairs(properties: &[u8]) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> =
            ringmq_protocol::message::Properties::new(properties)
                .iter()
                .map(|(k, v)| {
                    (
                        String::from_utf8(k.to_vec()).unwrap(),
                        String::from_utf8(v.to_vec()).unwrap(),
                    )
                })
                .collect();
        pairs.sort();
        pairs
    }
}
