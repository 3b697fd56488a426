//! The retry ladder of CONSUMER_SEND_MSG_BACK (Java's
//! `SendMessageProcessor.consumerSendMsgBack`): a message a consumer failed
//! to consume is copied to `%RETRY%<group>` with a delay level, so the delay
//! scheduler ([`super::delay`]) brings it back later, or to `%DLQ%<group>`
//! once it was retried `maxReconsumeTimes` times.
//!
//! ```text
//! header.delayLevel < 0, or reconsumeTimes >= maxReconsumeTimes  ──▶ %DLQ%<group> queue 0, DELAY=0
//! header.delayLevel == 0                                         ──▶ %RETRY%<group>, DELAY = 3 + reconsumeTimes
//! header.delayLevel  > 0                                         ──▶ %RETRY%<group>, DELAY = delayLevel
//! ```
//!
//! The retry copy keeps body, flag, sysFlag, born time and hosts, and
//! properties, plus: `RETRY_TOPIC` (the first topic the message failed in,
//! set once), `ORIGIN_MESSAGE_ID` (the first offset message id, set once),
//! `DELAY`, `WAIT=false`; its `reconsumeTimes` is the stored one plus 1. A
//! dead-lettered copy also gets `DLQ_ORIGIN_TOPIC` and
//! `DLQ_ORIGIN_MESSAGE_ID`, which 5.x's proxy reads. The level is stored as
//! computed; the put path ([`super::delay::redirect_to_schedule`]) clamps it
//! to the highest level, as Java's does.
//!
//! This module decides the target and makes the copy; the shard
//! (`shard::send`) checks the group (SUBSCRIPTION_GROUP_NOT_EXIST; none
//! stored for a group without retry queues, as Java) and stores the copy as
//! an internal send, whose topic checks create the retry or DLQ topic and
//! refuse one without the write permission (NO_PERMISSION).
//!
//! # Invariants
//!
//! - A copy goes to the DLQ exactly when the stored `reconsumeTimes` reached
//!   the maximum or the client asked for it (`delayLevel < 0`); otherwise its
//!   `DELAY` is positive, so it is never redelivered without a delay.
//! - `RETRY_TOPIC` and `ORIGIN_MESSAGE_ID` are never overwritten once set.

use bytes::BytesMut;
use ringmq_protocol::code::response_code;
use ringmq_protocol::header::ConsumerSendMsgBackRequestHeader;
use ringmq_protocol::json::SubscriptionGroupConfig;
use ringmq_protocol::message::{
    RecordError, RecordView, offset_msg_id, property_key, rewrite_properties, tags_code,
};

use super::Repost;

/// The level of the first retry when the client lets the broker choose
/// (`delayLevel` 0): `3 + reconsumeTimes`, so 10 s, 30 s, 1 min... with the
/// default ladder.
pub const RETRY_DELAY_LEVEL_BASE: i32 = 3;
/// `SubscriptionGroupConfig.retryMaxTimes`'s default.
pub const MAX_RECONSUME_TIMES_DEFAULT: i32 = 16;
/// Queues of a `%DLQ%` topic (Java's `DLQ_NUMS_PER_GROUP`).
pub const DLQ_QUEUE_NUMS_PER_GROUP: i32 = 1;

/// Where a sent-back message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendBackTarget {
    /// `%RETRY%<group>`, delayed by this level.
    Retry {
        /// The `DELAY` level (not clamped).
        delay_level: i32,
    },
    /// `%DLQ%<group>`.
    DeadLetter,
}

/// The ladder: the target for a message stored with `reconsume_times`, the
/// header's `delay_level`, and the effective maximum.
pub fn send_back_target(
    reconsume_times: i32,
    delay_level: i32,
    max_reconsume_times: i32,
) -> SendBackTarget {
    if reconsume_times >= max_reconsume_times || delay_level < 0 {
        SendBackTarget::DeadLetter
    } else if delay_level == 0 {
        SendBackTarget::Retry {
            delay_level: RETRY_DELAY_LEVEL_BASE.saturating_add(reconsume_times.max(0)),
        }
    } else {
        SendBackTarget::Retry { delay_level }
    }
}

/// The effective `maxReconsumeTimes`: the header's when the client sends one
/// (Java honours it from client V3_4_9 on; older clients are not supported
/// here), else the group's `retryMaxTimes`.
pub fn max_reconsume_times(
    group: &SubscriptionGroupConfig,
    header: &ConsumerSendMsgBackRequestHeader,
) -> i32 {
    header.max_reconsume_times.unwrap_or(group.retry_max_times)
}

/// Why a send-back copy cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendBackError {
    /// The new properties could not be written (a property value too odd
    /// to copy).
    #[error("rewriting properties: {0}")]
    Properties(#[from] RecordError),
}

impl SendBackError {
    /// The response code Java answers with.
    pub fn response_code(&self) -> i32 {
        match self {
            SendBackError::Properties(_) => response_code::SYSTEM_ERROR,
        }
    }
}

/// The copy of `record` that goes to `topic` / `queue_id` for `target`.
///
/// # Errors
///
/// A property that cannot be written.
pub fn send_back_repost(
    record: &RecordView<'_>,
    target: SendBackTarget,
    topic: &str,
    queue_id: i32,
) -> Result<Repost, SendBackError> {
    let properties = record.properties();
    let offset_id = offset_msg_id(&record.store_host(), record.commit_log_offset());
    let retry_topic = properties
        .get(property_key::RETRY_TOPIC)
        .unwrap_or(record.topic());
    // Java's `UtilAll.isBlank`: an all-whitespace origin id counts as absent.
    let origin_id = properties
        .get(property_key::ORIGIN_MESSAGE_ID)
        .filter(|id| !id.trim().is_empty())
        .unwrap_or(&offset_id);
    let delay_text = match target {
        SendBackTarget::Retry { delay_level } => delay_level.to_string(),
        SendBackTarget::DeadLetter => "0".to_owned(),
    };
    let mut add = vec![
        (property_key::RETRY_TOPIC, retry_topic),
        (property_key::WAIT, "false"),
        (property_key::DELAY, delay_text.as_str()),
        (property_key::ORIGIN_MESSAGE_ID, origin_id),
    ];
    if target == SendBackTarget::DeadLetter {
        add.push((property_key::DLQ_ORIGIN_TOPIC, record.topic()));
        add.push((property_key::DLQ_ORIGIN_MESSAGE_ID, origin_id));
    }
    let mut out = BytesMut::with_capacity(properties.as_bytes().len() + 128);
    rewrite_properties(properties.as_bytes(), &[], &add, &mut out)?;
    Ok(Repost {
        topic: topic.to_owned(),
        queue_id,
        properties: out.to_vec(),
        sys_flag: record.sys_flag(),
        reconsume_times: record.reconsume_times().saturating_add(1),
        prepared_transaction_offset: record.prepared_transaction_offset(),
        store_timestamp_ms: None,
        tags_code: tags_code(properties.get(property_key::TAGS)),
    })
}

#[cfg(test)]
mod tests {
    use ringmq_protocol::message::{CrcCheck, RecordSpec, decode_record};

    use super::*;
    use crate::features::test_support::{pairs, record_bytes};
    use crate::topic_config::{dlq_topic, retry_topic};

    fn header(delay_level: i32) -> ConsumerSendMsgBackRequestHeader {
        ConsumerSendMsgBackRequestHeader {
            offset: 4096,
            group: "g".into(),
            delay_level,
            ..Default::default()
        }
    }

    fn with_reconsume_times(bytes: &[u8], times: i32) -> Vec<u8> {
        let record = decode_record(bytes, CrcCheck::Verify).unwrap();
        let spec = RecordSpec {
            reconsume_times: times,
            ..record.to_spec()
        };
        let mut out = vec![0; spec.encoded_len()];
        spec.encode_into(&mut out).unwrap();
        out
    }

    #[test]
    fn the_ladder_starts_at_level_three_and_ends_in_the_dlq() {
        assert_eq!(
            send_back_target(0, 0, 16),
            SendBackTarget::Retry { delay_level: 3 }
        );
        assert_eq!(
            send_back_target(5, 0, 16),
            SendBackTarget::Retry { delay_level: 8 }
        );
        assert_eq!(
            send_back_target(15, 0, 16),
            SendBackTarget::Retry { delay_level: 18 }
        );
        assert_eq!(send_back_target(16, 0, 16), SendBackTarget::DeadLetter);
        assert_eq!(
            send_back_target(2, 7, 16),
            SendBackTarget::Retry { delay_level: 7 }
        );
        assert_eq!(send_back_target(0, -1, 16), SendBackTarget::DeadLetter);
        assert_eq!(send_back_target(3, 0, 3), SendBackTarget::DeadLetter);
    }

    #[test]
    fn the_header_maximum_overrides_the_group_one() {
        let group = SubscriptionGroupConfig::default();
        assert_eq!(
            max_reconsume_times(&group, &header(0)),
            MAX_RECONSUME_TIMES_DEFAULT
        );
        let mut h = header(0);
        h.max_reconsume_times = Some(2);
        assert_eq!(max_reconsume_times(&group, &h), 2);
    }

    /// The copy of `record` for `header`, as the shard makes it.
    fn repost_for(
        record: &RecordView<'_>,
        header: &ConsumerSendMsgBackRequestHeader,
        group: &SubscriptionGroupConfig,
        queue_id: i32,
    ) -> (SendBackTarget, Repost) {
        let max = max_reconsume_times(group, header);
        let target = send_back_target(record.reconsume_times(), header.delay_level, max);
        let topic = match target {
            SendBackTarget::Retry { .. } => retry_topic(&header.group),
            SendBackTarget::DeadLetter => dlq_topic(&header.group),
        };
        (
            target,
            send_back_repost(record, target, &topic, queue_id).unwrap(),
        )
    }

    #[test]
    fn a_first_retry_copy_records_its_origin_and_level() {
        let group = SubscriptionGroupConfig::default();
        let bytes = record_bytes("T", 2, &[("TAGS", "a"), ("UNIQ_KEY", "U1")], 0);
        let record = decode_record(&bytes, CrcCheck::Verify).unwrap();
        let (target, repost) = repost_for(&record, &header(0), &group, 3);
        assert_eq!(target, SendBackTarget::Retry { delay_level: 3 });
        assert_eq!(repost.topic, "%RETRY%g");
        assert_eq!(repost.queue_id, 3);
        assert_eq!(repost.reconsume_times, 1);
        assert_eq!(repost.tags_code, tags_code(Some("a")));
        let origin = offset_msg_id(&record.store_host(), record.commit_log_offset());
        assert_eq!(
            pairs(&repost.properties),
            vec![
                ("DELAY".into(), "3".into()),
                ("ORIGIN_MESSAGE_ID".into(), origin),
                ("RETRY_TOPIC".into(), "T".into()),
                ("TAGS".into(), "a".into()),
                ("UNIQ_KEY".into(), "U1".into()),
                ("WAIT".into(), "false".into()),
            ]
        );
    }

    #[test]
    fn a_later_retry_keeps_the_first_origin_and_retry_topic() {
        let group = SubscriptionGroupConfig::default();
        let bytes = record_bytes(
            "%RETRY%g",
            0,
            &[
                ("RETRY_TOPIC", "T"),
                ("ORIGIN_MESSAGE_ID", "FIRST"),
                ("DELAY", "4"),
            ],
            0,
        );
        let bytes = with_reconsume_times(&bytes, 2);
        let record = decode_record(&bytes, CrcCheck::Verify).unwrap();
        let (_, repost) = repost_for(&record, &header(0), &group, 0);
        assert_eq!(repost.reconsume_times, 3);
        let props = pairs(&repost.properties);
        assert!(props.contains(&("RETRY_TOPIC".into(), "T".into())));
        assert!(props.contains(&("ORIGIN_MESSAGE_ID".into(), "FIRST".into())));
        assert!(props.contains(&("DELAY".into(), "5".into())));
    }

    #[test]
    fn the_last_failure_goes_to_the_dead_letter_queue() {
        let group = SubscriptionGroupConfig::default();
        let bytes = record_bytes("%RETRY%g", 0, &[("RETRY_TOPIC", "T"), ("DELAY", "18")], 0);
        let bytes = with_reconsume_times(&bytes, 16);
        let record = decode_record(&bytes, CrcCheck::Verify).unwrap();
        let (target, repost) = repost_for(&record, &header(0), &group, 0);
        assert_eq!(target, SendBackTarget::DeadLetter);
        assert_eq!(repost.topic, "%DLQ%g");
        assert_eq!(repost.queue_id, 0);
        assert_eq!(repost.reconsume_times, 17);
        let props = pairs(&repost.properties);
        assert!(props.contains(&("DELAY".into(), "0".into())));
        assert!(props.contains(&("DLQ_ORIGIN_TOPIC".into(), "%RETRY%g".into())));
        assert!(props.contains(&("RETRY_TOPIC".into(), "T".into())));
    }
}
