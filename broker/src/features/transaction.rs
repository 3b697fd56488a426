//! Transactional messages: half messages, END_TRANSACTION and the check-back
//! loop (Java's `TransactionalMessageBridge`, `EndTransactionProcessor`,
//! `TransactionalMessageServiceImpl.check`, remoting-protocol.md 5.5).
//!
//! ```text
//! send with TRAN_MSG=true ──▶ RMQ_SYS_TRANS_HALF_TOPIC queue 0, + REAL_TOPIC, REAL_QID, sysFlag NOT_TYPE
//! END_TRANSACTION commit  ──▶ real message to REAL_TOPIC/REAL_QID (sysFlag COMMIT, preparedOffset)
//!                          + op record "d" in RMQ_SYS_TRANS_OP_HALF_TOPIC (same queue id, body = half offset)
//! END_TRANSACTION rollback ─▶ op record only
//! every transactionCheckInterval: TransactionChecker::plan_round(half records, now)
//!    unresolved and older than transactionTimeOut ──▶ put back (TRANSACTION_CHECK_TIMES + 1)
//!                                                   + CHECK_TRANSACTION_STATE to a producer of PGROUP
//!    checked transactionCheckMax times            ──▶ TRANS_CHECK_MAX_TIME_TOPIC
//! ```
//!
//! The checker's durable state is two offsets, stored as the consumer offsets
//! of group `CID_RMQ_SYS_TRANS` on the half and op queues, as Java stores
//! them: the next half offset to examine, and the first op offset still
//! needed. After a restart, [`TransactionChecker::new`] with those offsets and
//! [`TransactionChecker::apply_ops`] over the op queue from the op offset on
//! rebuild everything else.
//!
//! Op bodies: 4.x writes one decimal half offset per op record; 5.x's batching
//! writes several, each followed by `,`. [`op_body_offsets`] reads both;
//! [`OpRecord`] writes the 4.x form, which both read.
//!
//! Simplifications against Java, all on the safe side (a check may come
//! earlier than Java's, never a lost transaction): Java pulls more op records
//! when a half message is old but its op may not be read yet; here the caller
//! applies the op queue up to its end before each round, so that case cannot
//! arise. Java bounds a round by 60 s of wall time; here by
//! [`HALF_RECORDS_PER_ROUND_MAX`] records.
//!
//! # Invariants
//!
//! - The half progress moves only over half offsets resolved by an op, put
//!   back (re-appended and so examined again later), or discarded to
//!   `TRANS_CHECK_MAX_TIME_TOPIC`, and only after the caller reports those
//!   appends stored ([`TransactionChecker::advance`]).
//! - The op progress never passes an op record whose half offset the half
//!   progress has not passed: after a crash every unresolved half is
//!   examined again and every op that resolves it is read again.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use bytes::BytesMut;
use ringmq_protocol::code::response_code;
use ringmq_protocol::header::{
    CheckTransactionStateRequestHeader, EndTransactionRequestHeader, TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
};
use ringmq_protocol::json::TopicConfig;
use ringmq_protocol::message::layout::{SYS_FLAG_TRANSACTION_NOT_TYPE, with_transaction_type};
use ringmq_protocol::message::{
    Properties, RecordError, RecordSpec, RecordView, offset_msg_id, property_key,
    rewrite_properties, tags_code,
};

use super::{Redirect, Repost};
use crate::topic_config::{
    TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TopicConfigTable,
    TopicTableChange, perm,
};

/// `transactionTimeOut`'s default: a half message younger than this is not
/// checked.
pub const TRANSACTION_TIMEOUT_MS_DEFAULT: i64 = 6_000;
/// `transactionCheckInterval`'s default (4.x's; 5.x uses 30 s).
pub const TRANSACTION_CHECK_INTERVAL_MS_DEFAULT: i64 = 60_000;
/// `transactionCheckMax`'s default: checks before a half is discarded.
pub const TRANSACTION_CHECK_MAX_DEFAULT: i32 = 15;
/// `fileReservedTime`'s default (72 h): an older half is discarded unchecked.
pub const FILE_RESERVED_MS_DEFAULT: i64 = 72 * 3600 * 1000;
/// Queue of the half topic every half message goes to.
pub const HALF_QUEUE_ID: i32 = 0;
/// Tag of op records (Java's `TransactionalMessageUtil.REMOVE_TAG`).
pub const OP_REMOVE_TAG: &str = "d";
/// Separator of 5.x's batched op bodies.
pub const OP_OFFSET_SEPARATOR: u8 = b',';
/// The consumer group whose offsets on the half and op queues are the
/// checker's progress (`MixAll.CID_SYS_RMQ_TRANS`).
pub const TRANSACTION_CHECK_GROUP: &str = "CID_RMQ_SYS_TRANS";
/// Queues of `TRANS_CHECK_MAX_TIME_TOPIC` (Java's `TCMT_QUEUE_NUMS`).
pub const CHECK_MAX_TIME_TOPIC_QUEUE_NUMS: i32 = 1;
/// Most half records one [`TransactionChecker::plan_round`] examines.
pub const HALF_RECORDS_PER_ROUND_MAX: usize = 256;
/// Most half offsets one op body may name (5.x batches a few per record).
pub const OP_BODY_OFFSETS_MAX: usize = 4096;

/// The check-back settings of the broker config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionConfig {
    /// `transactionTimeOut` in ms.
    pub timeout_ms: i64,
    /// `transactionCheckInterval` in ms.
    pub check_interval_ms: i64,
    /// `transactionCheckMax`.
    pub check_max: i32,
    /// `fileReservedTime` in ms.
    pub file_reserved_ms: i64,
}

impl Default for TransactionConfig {
    fn default() -> Self {
        TransactionConfig {
            timeout_ms: TRANSACTION_TIMEOUT_MS_DEFAULT,
            check_interval_ms: TRANSACTION_CHECK_INTERVAL_MS_DEFAULT,
            check_max: TRANSACTION_CHECK_MAX_DEFAULT,
            file_reserved_ms: FILE_RESERVED_MS_DEFAULT,
        }
    }
}

/// Why transaction input is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransactionError {
    /// END_TRANSACTION's group is not the half message's `PGROUP`.
    #[error("The producer group wrong")]
    ProducerGroupMismatch,
    /// END_TRANSACTION's `tranStateTableOffset` is not the half's queue offset.
    #[error("The message input offset is wrong")]
    QueueOffsetMismatch,
    /// END_TRANSACTION's `commitLogOffset` is not the half's.
    #[error("The commitlog offset is wrong")]
    CommitLogOffsetMismatch,
    /// A half record lacks `REAL_TOPIC` or `REAL_QID`, or has a bad one.
    #[error("half message lacks a valid {0}")]
    MissingRealDestination(&'static str),
    /// Records given to the checker do not start where it reads, or skip one.
    #[error("{queue} queue: records start at offset {found}, expected {expected}")]
    Gap {
        /// `"half"` or `"op"`.
        queue: &'static str,
        /// The offset the checker reads from.
        expected: i64,
        /// The offset given.
        found: i64,
    },
    /// A property could not be written.
    #[error("rewriting properties: {0}")]
    Properties(#[from] RecordError),
}

impl TransactionError {
    /// The response code Java answers END_TRANSACTION with (SYSTEM_ERROR for
    /// every refusal).
    pub fn response_code(&self) -> i32 {
        response_code::SYSTEM_ERROR
    }
}

// ------------------------------------------------------------- put path

/// Whether a send is a half message: `TRAN_MSG` is `true` (Java's
/// `Boolean.parseBoolean`, any case), unless it is a consumer retry of one
/// (reconsume times > 0 and a delay level), which Java stores as a plain
/// message.
pub fn is_half_message(properties: Properties<'_>, reconsume_times: i32) -> bool {
    let prepared = properties
        .get(property_key::TRAN_MSG)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let delayed_retry = reconsume_times > 0
        && properties
            .get(property_key::DELAY)
            .and_then(|d| d.parse::<i32>().ok())
            .is_some_and(|level| level > 0);
    prepared && !delayed_retry
}

/// The put-path rewrite of a half message (Java's `parseHalfMessageInner`):
/// `REAL_TOPIC` and `REAL_QID` record the destination, the transaction type
/// is reset to NOT (so the half is dispatched to the half topic's
/// ConsumeQueue), and the message goes to the half topic's queue 0.
///
/// # Errors
///
/// A property that cannot be written.
pub fn redirect_to_half(
    topic: &str,
    queue_id: i32,
    sys_flag: i32,
    properties: &[u8],
) -> Result<Redirect, TransactionError> {
    let queue_text = queue_id.to_string();
    let mut out = BytesMut::with_capacity(properties.len() + topic.len() + 32);
    rewrite_properties(
        properties,
        &[],
        &[
            (property_key::REAL_TOPIC, topic),
            (property_key::REAL_QID, &queue_text),
        ],
        &mut out,
    )?;
    Ok(Redirect {
        topic: TRANS_HALF_TOPIC,
        queue_id: HALF_QUEUE_ID,
        properties: out.to_vec(),
        sys_flag: with_transaction_type(sys_flag, SYS_FLAG_TRANSACTION_NOT_TYPE),
    })
}

// ----------------------------------------------------------- op records

/// An op record for `RMQ_SYS_TRANS_OP_HALF_TOPIC`: tag `d`, body the half
/// queue offset in decimal, in the op queue with the half queue's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpRecord {
    /// Op queue id (= the half queue id).
    pub queue_id: i32,
    /// `TAGS=d`, `WAIT=true` (a Java `Message`'s defaults) and `UNIQ_KEY`
    /// when given.
    pub properties: Vec<u8>,
    /// The half queue offset in decimal.
    pub body: Vec<u8>,
    /// ConsumeQueue tags code of `d`.
    pub tags_code: i64,
}

impl OpRecord {
    /// The op record resolving the half at `half_queue_offset` of
    /// `half_queue_id`; `uniq_key` is the op record's own id (Java gives it
    /// one with `MessageClientIDSetter`).
    ///
    /// # Errors
    ///
    /// A `uniq_key` that cannot be a property value.
    pub fn new(
        half_queue_id: i32,
        half_queue_offset: i64,
        uniq_key: Option<&str>,
    ) -> Result<OpRecord, TransactionError> {
        let mut add = vec![
            (property_key::TAGS, OP_REMOVE_TAG),
            (property_key::WAIT, "true"),
        ];
        if let Some(key) = uniq_key {
            add.push((property_key::UNIQ_KEY, key));
        }
        let mut out = BytesMut::new();
        rewrite_properties(&[], &[], &add, &mut out)?;
        Ok(OpRecord {
            queue_id: half_queue_id,
            properties: out.to_vec(),
            body: half_queue_offset.to_string().into_bytes(),
            tags_code: tags_code(Some(OP_REMOVE_TAG)),
        })
    }

    /// The record to append, born and stored now by this broker.
    pub fn to_spec(&self, now_ms: i64, store_host: SocketAddr) -> RecordSpec<'_> {
        RecordSpec {
            topic: TRANS_OP_HALF_TOPIC,
            body: &self.body,
            properties: &self.properties,
            queue_id: self.queue_id,
            born_timestamp_ms: now_ms,
            born_host: store_host,
            store_timestamp_ms: now_ms,
            store_host,
            ..RecordSpec::default()
        }
    }
}

/// The half offsets an op body names: one decimal (4.x) or several each
/// followed by `,` (5.x). Items that are not integers are skipped, as Java's
/// `getLong` gives -1 for them and no half has that offset; at most
/// [`OP_BODY_OFFSETS_MAX`] are read.
pub fn op_body_offsets(body: &[u8]) -> Vec<i64> {
    body.split(|b| *b == OP_OFFSET_SEPARATOR)
        .filter_map(|item| std::str::from_utf8(item).ok()?.trim().parse::<i64>().ok())
        .filter(|offset| *offset >= 0)
        .take(OP_BODY_OFFSETS_MAX)
        .collect()
}

// ------------------------------------------------------ END_TRANSACTION

/// What one END_TRANSACTION does once its half message was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndTransaction {
    /// `commitOrRollback` is NOT (unknown) or unrecognised: nothing.
    Ignore,
    /// Append `real` (the restored message); once stored, append `op`.
    Commit {
        /// The message for the real topic.
        real: Repost,
        /// The op record resolving the half.
        op: OpRecord,
    },
    /// Append `op`.
    Rollback {
        /// The op record resolving the half.
        op: OpRecord,
    },
}

/// Checks END_TRANSACTION's header against the half message at its
/// `commitLogOffset` (Java's `checkPrepareMessage`) and says what to append.
/// `op_uniq_key` is an id for the op record.
///
/// # Errors
///
/// The mismatches Java reports with SYSTEM_ERROR and the same remarks, and a
/// half record without its real destination.
pub fn end_transaction(
    header: &EndTransactionRequestHeader,
    half: &RecordView<'_>,
    op_uniq_key: Option<&str>,
) -> Result<EndTransaction, TransactionError> {
    let commit = match header.commit_or_rollback {
        TRANSACTION_COMMIT_TYPE => true,
        TRANSACTION_ROLLBACK_TYPE => false,
        _ => return Ok(EndTransaction::Ignore),
    };
    if half.property(property_key::PGROUP) != Some(header.producer_group.as_str()) {
        return Err(TransactionError::ProducerGroupMismatch);
    }
    if half.queue_offset() != header.tran_state_table_offset {
        return Err(TransactionError::QueueOffsetMismatch);
    }
    if half.commit_log_offset() != header.commit_log_offset {
        return Err(TransactionError::CommitLogOffsetMismatch);
    }
    let op = OpRecord::new(half.queue_id(), half.queue_offset(), op_uniq_key)?;
    if !commit {
        return Ok(EndTransaction::Rollback { op });
    }
    Ok(EndTransaction::Commit {
        real: restore_committed(half)?,
        op,
    })
}

/// The real message of a committed half (Java's `endMessageTransaction` and
/// the processor around it): topic and queue from `REAL_TOPIC` / `REAL_QID`,
/// those two and `TRAN_MSG` removed, `WAIT=false`, transaction type COMMIT,
/// `preparedTransactionOffset` = the half's CommitLog offset, and the half's
/// store timestamp. A `DELAY` property is kept: the put path then sends the
/// committed message through the delay levels.
///
/// # Errors
///
/// [`TransactionError::MissingRealDestination`], or a property that cannot be
/// written.
pub fn restore_committed(half: &RecordView<'_>) -> Result<Repost, TransactionError> {
    let properties = half.properties();
    let (topic, queue_id) = real_destination(half)?;
    let mut out = BytesMut::with_capacity(properties.as_bytes().len());
    rewrite_properties(
        properties.as_bytes(),
        &[
            property_key::REAL_TOPIC,
            property_key::REAL_QID,
            property_key::TRAN_MSG,
        ],
        &[(property_key::WAIT, "false")],
        &mut out,
    )?;
    Ok(Repost {
        topic: topic.to_owned(),
        queue_id,
        properties: out.to_vec(),
        sys_flag: with_transaction_type(half.sys_flag(), TRANSACTION_COMMIT_TYPE),
        reconsume_times: half.reconsume_times(),
        prepared_transaction_offset: half.commit_log_offset(),
        store_timestamp_ms: Some(half.store_timestamp_ms()),
        tags_code: tags_code(properties.get(property_key::TAGS)),
    })
}

fn real_destination<'a>(half: &RecordView<'a>) -> Result<(&'a str, i32), TransactionError> {
    let properties = half.properties();
    let topic = properties
        .get(property_key::REAL_TOPIC)
        .filter(|t| !t.is_empty())
        .ok_or(TransactionError::MissingRealDestination(
            property_key::REAL_TOPIC,
        ))?;
    let queue_id = properties
        .get(property_key::REAL_QID)
        .and_then(|q| q.parse().ok())
        .ok_or(TransactionError::MissingRealDestination(
            property_key::REAL_QID,
        ))?;
    Ok((topic, queue_id))
}

// ------------------------------------------------------------ check-back

/// The checker's durable progress on one half queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HalfQueueProgress {
    /// Next half queue offset to examine.
    pub half_offset: i64,
    /// First op queue offset still needed.
    pub op_offset: i64,
}

/// What a round decided for one half record, in queue order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HalfAction {
    /// An op resolved it: nothing to append.
    Resolved {
        /// Half queue offset.
        queue_offset: i64,
    },
    /// Checked too often or too old: append `repost` to
    /// `TRANS_CHECK_MAX_TIME_TOPIC` (see [`ensure_check_max_time_topic`]).
    Discard {
        /// Half queue offset.
        queue_offset: i64,
        /// The copy to append.
        repost: Repost,
    },
    /// Still within its check immunity: append `put_back` to the half queue
    /// (with `TRAN_PREPARED_QUEUE_OFFSET`), so it is examined again later.
    Renew {
        /// Half queue offset.
        queue_offset: i64,
        /// The copy to append.
        put_back: Repost,
    },
    /// Unresolved past its timeout: append `put_back` (check times + 1) to
    /// the half queue, then send CHECK_TRANSACTION_STATE built from the
    /// stored copy ([`check_request_header`], [`check_request_body`]) to a
    /// live producer channel of `producer_group`; with none, send nothing
    /// (the next round checks again, as Java does).
    CheckBack {
        /// Half queue offset.
        queue_offset: i64,
        /// The copy to append.
        put_back: Repost,
        /// `PGROUP` of the half.
        producer_group: String,
    },
}

impl HalfAction {
    /// The half queue offset the action is for.
    pub fn queue_offset(&self) -> i64 {
        match self {
            HalfAction::Resolved { queue_offset }
            | HalfAction::Discard { queue_offset, .. }
            | HalfAction::Renew { queue_offset, .. }
            | HalfAction::CheckBack { queue_offset, .. } => *queue_offset,
        }
    }
}

/// The plan of one check round of a half queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRound {
    /// One action per examined half record, in queue order. Carry them out
    /// in order; after each one stored, [`TransactionChecker::advance`] may
    /// move past it.
    pub actions: Vec<HalfAction>,
    /// Where the half progress is once every action is carried out.
    pub half_offset_after: i64,
}

/// Check-back state of one half queue: the progress and the ops read ahead
/// of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionChecker {
    config: TransactionConfig,
    half_queue_id: i32,
    half_offset: i64,
    op_read: i64,
    /// Half offset → op offset, for ops naming a half at or above `half_offset`.
    removed: BTreeMap<i64, i64>,
    /// Highest `half_offset_after` of a planned round.
    planned: i64,
}

impl TransactionChecker {
    /// A checker resuming from `progress` (both 0, or the queues' minimum
    /// offsets, on a first start). Feed it the op queue from
    /// `progress.op_offset` on with [`Self::apply_ops`] before planning.
    pub fn new(
        config: TransactionConfig,
        half_queue_id: i32,
        progress: HalfQueueProgress,
    ) -> TransactionChecker {
        TransactionChecker {
            config,
            half_queue_id,
            half_offset: progress.half_offset,
            op_read: progress.op_offset,
            removed: BTreeMap::new(),
            planned: progress.half_offset,
        }
    }

    /// The half queue this checker serves.
    pub fn half_queue_id(&self) -> i32 {
        self.half_queue_id
    }

    /// The next op queue offset [`Self::apply_ops`] wants.
    pub fn op_read_from(&self) -> i64 {
        self.op_read
    }

    /// The next half queue offset [`Self::plan_round`] wants.
    pub fn half_read_from(&self) -> i64 {
        self.half_offset
    }

    /// The progress to persist: the op offset is the lowest op still naming
    /// an unpassed half, or the read position when there is none.
    pub fn progress(&self) -> HalfQueueProgress {
        let op_offset = self.removed.values().copied().min().unwrap_or(self.op_read);
        HalfQueueProgress {
            half_offset: self.half_offset,
            op_offset: op_offset.min(self.op_read),
        }
    }

    /// Reads op records (in queue order from [`Self::op_read_from`]; records
    /// below it are ignored). Records without tag `d` are skipped, as Java
    /// does.
    ///
    /// # Errors
    ///
    /// [`TransactionError::Gap`] when a record is missing.
    pub fn apply_ops(&mut self, ops: &[RecordView<'_>]) -> Result<(), TransactionError> {
        let start = self.op_read;
        for op in ops.iter().filter(|op| op.queue_offset() >= start) {
            if op.queue_offset() != self.op_read {
                return Err(TransactionError::Gap {
                    queue: "op",
                    expected: self.op_read,
                    found: op.queue_offset(),
                });
            }
            if op.property(property_key::TAGS) == Some(OP_REMOVE_TAG) {
                for half_offset in op_body_offsets(op.body()) {
                    if half_offset >= self.half_offset {
                        self.removed.entry(half_offset).or_insert(op.queue_offset());
                    }
                }
            }
            self.op_read += 1;
        }
        Ok(())
    }

    /// Whether an op for the half at `queue_offset` was read.
    pub fn is_resolved(&self, queue_offset: i64) -> bool {
        self.removed.contains_key(&queue_offset)
    }

    /// Plans one round over `halves` (the half queue's records from
    /// [`Self::half_read_from`] on, in order, at most
    /// [`HALF_RECORDS_PER_ROUND_MAX`] are examined) at `now_ms`;
    /// `round_start_ms` is when the round began (records stored since are
    /// left for the next round). Apply the op queue up to its end first.
    ///
    /// # Errors
    ///
    /// [`TransactionError::Gap`], or a property that cannot be written.
    pub fn plan_round(
        &mut self,
        halves: &[RecordView<'_>],
        round_start_ms: i64,
        now_ms: i64,
    ) -> Result<CheckRound, TransactionError> {
        let mut actions = Vec::new();
        let start = self.half_offset;
        let mut next = start;
        for half in halves.iter().filter(|h| h.queue_offset() >= start) {
            if half.queue_offset() != next {
                return Err(TransactionError::Gap {
                    queue: "half",
                    expected: next,
                    found: half.queue_offset(),
                });
            }
            if actions.len() == HALF_RECORDS_PER_ROUND_MAX {
                break;
            }
            let Some(action) = self.decide(half, round_start_ms, now_ms)? else {
                break;
            };
            actions.push(action);
            next += 1;
        }
        self.planned = self.planned.max(next);
        Ok(CheckRound {
            actions,
            half_offset_after: next,
        })
    }

    /// One half record's action, `None` to end the round there.
    fn decide(
        &self,
        half: &RecordView<'_>,
        round_start_ms: i64,
        now_ms: i64,
    ) -> Result<Option<HalfAction>, TransactionError> {
        let queue_offset = half.queue_offset();
        if self.removed.contains_key(&queue_offset) {
            return Ok(Some(HalfAction::Resolved { queue_offset }));
        }
        let properties = half.properties();
        // Java's getInt: a bad count reads as -1, then counts up from there.
        let check_times: Option<i32> = properties
            .get(property_key::TRANSACTION_CHECK_TIMES)
            .map(|t| t.parse().unwrap_or(-1));
        let age_ms = now_ms.saturating_sub(half.born_timestamp_ms());
        let exhausted = check_times.is_some_and(|t| t >= self.config.check_max);
        if exhausted || age_ms > self.config.file_reserved_ms {
            return Ok(Some(HalfAction::Discard {
                queue_offset,
                repost: discard_repost(half),
            }));
        }
        if half.store_timestamp_ms() >= round_start_ms {
            return Ok(None);
        }
        let immunity_ms = properties
            .get(property_key::CHECK_IMMUNITY_TIME_IN_SECONDS)
            .map(|text| {
                text.parse::<i64>()
                    .ok()
                    .filter(|s| *s != -1)
                    .map_or(self.config.timeout_ms, |s| s.saturating_mul(1000))
            });
        match immunity_ms {
            Some(immunity_ms) if age_ms < immunity_ms => {
                let prepared = properties.get(property_key::TRAN_PREPARED_QUEUE_OFFSET);
                let prepared: Option<i64> = match prepared {
                    None => None,
                    Some(text) => match text.parse::<i64>() {
                        Ok(offset) if offset != -1 => Some(offset),
                        // Java stops at a bad prepared offset until the immunity ends.
                        _ => return Ok(None),
                    },
                };
                if prepared.is_some_and(|p| self.removed.contains_key(&p)) {
                    return Ok(Some(HalfAction::Resolved { queue_offset }));
                }
                let original = prepared.unwrap_or(queue_offset).to_string();
                return Ok(Some(HalfAction::Renew {
                    queue_offset,
                    put_back: put_back_repost(
                        half,
                        &[(property_key::TRAN_PREPARED_QUEUE_OFFSET, &original)],
                    )?,
                }));
            }
            None if (0..self.config.timeout_ms).contains(&age_ms) => return Ok(None),
            _ => {}
        }
        let times = check_times.map_or(1, |t| t.saturating_add(1)).to_string();
        Ok(Some(HalfAction::CheckBack {
            queue_offset,
            put_back: put_back_repost(half, &[(property_key::TRANSACTION_CHECK_TIMES, &times)])?,
            producer_group: properties
                .get(property_key::PGROUP)
                .unwrap_or("")
                .to_owned(),
        }))
    }

    /// Moves the half progress to `half_offset`: every action of the planned
    /// rounds below it was carried out and its appends are stored. Ops for
    /// halves below it are forgotten.
    ///
    /// # Panics
    ///
    /// If `half_offset` goes back or beyond what was planned: moving past an
    /// unexamined half would lose its transaction.
    pub fn advance(&mut self, half_offset: i64) {
        assert!(
            half_offset >= self.half_offset,
            "half progress {half_offset} < {}",
            self.half_offset
        );
        assert!(
            half_offset <= self.planned,
            "half progress {half_offset} beyond the planned {}",
            self.planned
        );
        self.half_offset = half_offset;
        self.removed = self.removed.split_off(&half_offset);
    }
}

/// Java's `renewHalfMessageInner`: the same message appended again to the
/// half queue (body, flag, sysFlag, born time and hosts, properties), with
/// `set` added.
fn put_back_repost(half: &RecordView<'_>, set: &[(&str, &str)]) -> Result<Repost, RecordError> {
    let properties = half.properties();
    let mut out = BytesMut::with_capacity(properties.as_bytes().len() + 48);
    rewrite_properties(properties.as_bytes(), &[], set, &mut out)?;
    Ok(Repost {
        topic: TRANS_HALF_TOPIC.to_owned(),
        queue_id: half.queue_id(),
        properties: out.to_vec(),
        sys_flag: half.sys_flag(),
        reconsume_times: half.reconsume_times(),
        prepared_transaction_offset: half.prepared_transaction_offset(),
        store_timestamp_ms: None,
        tags_code: tags_code(properties.get(property_key::TAGS)),
    })
}

/// The copy a discarded half becomes in `TRANS_CHECK_MAX_TIME_TOPIC` queue
/// 0 (Java's `toMessageExtBrokerInner`): same properties, sysFlag, hosts,
/// born time and reconsume times.
fn discard_repost(half: &RecordView<'_>) -> Repost {
    let properties = half.properties();
    Repost {
        topic: TRANS_CHECK_MAX_TIME_TOPIC.to_owned(),
        queue_id: 0,
        properties: properties.as_bytes().to_vec(),
        sys_flag: half.sys_flag(),
        reconsume_times: half.reconsume_times(),
        prepared_transaction_offset: half.prepared_transaction_offset(),
        store_timestamp_ms: None,
        tags_code: tags_code(properties.get(property_key::TAGS)),
    }
}

/// `TRANS_CHECK_MAX_TIME_TOPIC` with one queue, perm RW, created if absent
/// (Java's `createTopicOfTranCheckMaxTime`).
pub fn ensure_check_max_time_topic(
    topics: &mut TopicConfigTable,
    now_ms: i64,
) -> (TopicConfig, TopicTableChange) {
    topics.create_topic_in_send_message_back(
        TRANS_CHECK_MAX_TIME_TOPIC,
        CHECK_MAX_TIME_TOPIC_QUEUE_NUMS,
        perm::READ_WRITE,
        0,
        now_ms,
    )
}

/// The CHECK_TRANSACTION_STATE header for a stored put-back half `record`
/// (Java's `sendCheckMessage`): its queue and CommitLog offsets, its offset
/// id, `UNIQ_KEY` as message and transaction id, the real topic.
pub fn check_request_header(
    record: &RecordView<'_>,
    broker_name: &str,
) -> CheckTransactionStateRequestHeader {
    let uniq_key = record.property(property_key::UNIQ_KEY).map(str::to_owned);
    CheckTransactionStateRequestHeader {
        topic: record.property(property_key::REAL_TOPIC).map(str::to_owned),
        tran_state_table_offset: record.queue_offset(),
        commit_log_offset: record.commit_log_offset(),
        msg_id: uniq_key.clone(),
        transaction_id: uniq_key,
        offset_msg_id: Some(offset_msg_id(
            &record.store_host(),
            record.commit_log_offset(),
        )),
        broker_name: Some(broker_name.to_owned()),
    }
}

/// The CHECK_TRANSACTION_STATE body: the stored put-back half encoded as a
/// record, with topic and queue id set back to the real ones (Java encodes
/// the `MessageExt` after `setTopic(REAL_TOPIC)`); offsets and timestamps
/// are the stored copy's.
///
/// # Errors
///
/// [`TransactionError::MissingRealDestination`].
pub fn check_request_body<'a>(record: &RecordView<'a>) -> Result<RecordSpec<'a>, TransactionError> {
    let (topic, queue_id) = real_destination(record)?;
    Ok(RecordSpec {
        topic,
        queue_id,
        ..record.to_spec()
    })
}

/// When check rounds run: every `transactionCheckInterval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckSchedule {
    interval_ms: i64,
    next_ms: i64,
}

impl CheckSchedule {
    /// A schedule whose first round is one interval after `now_ms`.
    pub fn new(interval_ms: i64, now_ms: i64) -> CheckSchedule {
        let interval_ms = interval_ms.max(1);
        CheckSchedule {
            interval_ms,
            next_ms: now_ms.saturating_add(interval_ms),
        }
    }

    /// When the next round is due.
    pub fn next_ms(&self) -> i64 {
        self.next_ms
    }

    /// Brings the next round forward to `delay_ms` after `now_ms` if it is
    /// due later (a round that could not run yet).
    pub fn retry_after(&mut self, now_ms: i64, delay_ms: i64) {
        self.next_ms = self.next_ms.min(now_ms.saturating_add(delay_ms));
    }

    /// Whether a round is due at `now_ms`; if so, the next is scheduled one
    /// interval later.
    pub fn poll(&mut self, now_ms: i64) -> bool {
        if now_ms < self.next_ms {
            return false;
        }
        self.next_ms = now_ms.saturating_add(self.interval_ms);
        true
    }
}

#[cfg(test)]
mod tests {
    use ringmq_protocol::message::layout::{
        SYS_FLAG_TRANSACTION_COMMIT_TYPE, SYS_FLAG_TRANSACTION_PREPARED_TYPE, transaction_type,
    };
    use ringmq_protocol::message::{CrcCheck, decode_record};

    use super::*;
    use crate::features::test_support::pairs;
    use crate::topic_config::TopicConfigSettings;

    const HOST: &str = "127.0.0.1:10911";

    /// An encoded half (or op) record.
    struct Rec {
        topic: &'static str,
        queue_offset: i64,
        commit_log_offset: i64,
        born_ms: i64,
        store_ms: i64,
        properties: Vec<(&'static str, String)>,
        body: Vec<u8>,
    }

    impl Rec {
        fn half(queue_offset: i64, born_ms: i64, extra: &[(&'static str, &str)]) -> Rec {
            let mut properties = vec![
                ("REAL_TOPIC", "T".to_owned()),
                ("REAL_QID", "2".to_owned()),
                ("PGROUP", "pg".to_owned()),
                ("TRAN_MSG", "true".to_owned()),
                ("UNIQ_KEY", format!("U{queue_offset}")),
            ];
            properties.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
            Rec {
                topic: TRANS_HALF_TOPIC,
                queue_offset,
                commit_log_offset: 1000 + queue_offset * 100,
                born_ms,
                store_ms: born_ms + 1,
                properties,
                body: b"payload".to_vec(),
            }
        }

        fn op(queue_offset: i64, body: &str) -> Rec {
            Rec {
                topic: TRANS_OP_HALF_TOPIC,
                queue_offset,
                commit_log_offset: 90_000 + queue_offset * 100,
                born_ms: 0,
                store_ms: 0,
                properties: vec![("TAGS", OP_REMOVE_TAG.to_owned())],
                body: body.as_bytes().to_vec(),
            }
        }

        fn bytes(&self) -> Vec<u8> {
            let mut properties = BytesMut::new();
            let pairs: Vec<(&str, &str)> = self
                .properties
                .iter()
                .map(|(k, v)| (*k, v.as_str()))
                .collect();
            rewrite_properties(&[], &[], &pairs, &mut properties).unwrap();
            let host: SocketAddr = HOST.parse().unwrap();
            let spec = RecordSpec {
                topic: self.topic,
                body: &self.body,
                properties: &properties,
                queue_offset: self.queue_offset,
                commit_log_offset: self.commit_log_offset,
                born_timestamp_ms: self.born_ms,
                born_host: host,
                store_timestamp_ms: self.store_ms,
                store_host: host,
                ..RecordSpec::default()
            };
            let mut out = vec![0; spec.encoded_len()];
            spec.encode_into(&mut out).unwrap();
            out
        }
    }

    fn views(encoded: &[Vec<u8>]) -> Vec<RecordView<'_>> {
        encoded
            .iter()
            .map(|b| decode_record(b, CrcCheck::Verify).unwrap())
            .collect()
    }

    fn start() -> HalfQueueProgress {
        HalfQueueProgress {
            half_offset: 0,
            op_offset: 0,
        }
    }

    fn end_header(half: &RecordView<'_>, commit_or_rollback: i32) -> EndTransactionRequestHeader {
        EndTransactionRequestHeader {
            producer_group: "pg".into(),
            tran_state_table_offset: half.queue_offset(),
            commit_log_offset: half.commit_log_offset(),
            commit_or_rollback,
            msg_id: "m".into(),
            ..Default::default()
        }
    }

    #[test]
    fn half_messages_go_to_the_half_queue_with_their_destination() {
        let props = b"TRAN_MSG\x01true\x02PGROUP\x01pg\x02";
        assert!(is_half_message(Properties::new(props), 0));
        assert!(is_half_message(Properties::new(b"TRAN_MSG\x01TRUE\x02"), 0));
        assert!(!is_half_message(
            Properties::new(b"TRAN_MSG\x01false\x02"),
            0
        ));
        assert!(!is_half_message(
            Properties::new(b"TRAN_MSG\x01true\x02DELAY\x013\x02"),
            1
        ));
        let redirect =
            redirect_to_half("T", 5, SYS_FLAG_TRANSACTION_PREPARED_TYPE | 0x1, props).unwrap();
        assert_eq!(redirect.topic, TRANS_HALF_TOPIC);
        assert_eq!(redirect.queue_id, 0);
        assert_eq!(redirect.sys_flag, 0x1);
        assert_eq!(
            pairs(&redirect.properties),
            vec![
                ("PGROUP".into(), "pg".into()),
                ("REAL_QID".into(), "5".into()),
                ("REAL_TOPIC".into(), "T".into()),
                ("TRAN_MSG".into(), "true".into()),
            ]
        );
    }

    #[test]
    fn commit_restores_the_real_message_and_writes_an_op() {
        let encoded = Rec::half(7, 100, &[("TAGS", "tg"), ("DELAY", "2")]).bytes();
        let half = decode_record(&encoded, CrcCheck::Verify).unwrap();
        let outcome = end_transaction(
            &end_header(&half, TRANSACTION_COMMIT_TYPE),
            &half,
            Some("OP1"),
        )
        .unwrap();
        let EndTransaction::Commit { real, op } = outcome else {
            panic!("expected a commit");
        };
        assert_eq!(real.topic, "T");
        assert_eq!(real.queue_id, 2);
        assert_eq!(
            transaction_type(real.sys_flag),
            SYS_FLAG_TRANSACTION_COMMIT_TYPE
        );
        assert_eq!(real.prepared_transaction_offset, half.commit_log_offset());
        assert_eq!(real.store_timestamp_ms, Some(101));
        assert_eq!(real.tags_code, tags_code(Some("tg")));
        let props = pairs(&real.properties);
        assert!(
            props
                .iter()
                .all(|(k, _)| k != "REAL_TOPIC" && k != "REAL_QID" && k != "TRAN_MSG")
        );
        assert!(props.contains(&("DELAY".into(), "2".into())));
        assert!(props.contains(&("WAIT".into(), "false".into())));
        assert_eq!(op.body, b"7");
        assert_eq!(op.queue_id, 0);
        assert_eq!(
            pairs(&op.properties),
            vec![
                ("TAGS".into(), "d".into()),
                ("UNIQ_KEY".into(), "OP1".into()),
                ("WAIT".into(), "true".into()),
            ]
        );
        let host: SocketAddr = HOST.parse().unwrap();
        let spec = op.to_spec(5, host);
        assert_eq!(spec.topic, TRANS_OP_HALF_TOPIC);
        let mut bytes = vec![0; spec.encoded_len()];
        spec.encode_into(&mut bytes).unwrap();
        let stored = decode_record(&bytes, CrcCheck::Verify).unwrap();
        assert_eq!(op_body_offsets(stored.body()), vec![7]);
    }

    #[test]
    fn rollback_writes_only_an_op_and_unknown_is_ignored() {
        let encoded = Rec::half(3, 100, &[]).bytes();
        let half = decode_record(&encoded, CrcCheck::Verify).unwrap();
        let rollback =
            end_transaction(&end_header(&half, TRANSACTION_ROLLBACK_TYPE), &half, None).unwrap();
        assert!(matches!(rollback, EndTransaction::Rollback { op } if op.body == b"3"));
        let unknown = end_transaction(&end_header(&half, 0), &half, None).unwrap();
        assert_eq!(unknown, EndTransaction::Ignore);
    }

    #[test]
    fn mismatched_end_transactions_are_refused_with_java_remarks() {
        let encoded = Rec::half(3, 100, &[]).bytes();
        let half = decode_record(&encoded, CrcCheck::Verify).unwrap();
        let mut header = end_header(&half, TRANSACTION_COMMIT_TYPE);
        header.producer_group = "other".into();
        let error = end_transaction(&header, &half, None).unwrap_err();
        assert_eq!(error.to_string(), "The producer group wrong");
        assert_eq!(error.response_code(), response_code::SYSTEM_ERROR);
        let mut header = end_header(&half, TRANSACTION_COMMIT_TYPE);
        header.tran_state_table_offset = 4;
        assert_eq!(
            end_transaction(&header, &half, None),
            Err(TransactionError::QueueOffsetMismatch)
        );
        let mut header = end_header(&half, TRANSACTION_ROLLBACK_TYPE);
        header.commit_log_offset = 1;
        assert_eq!(
            end_transaction(&header, &half, None),
            Err(TransactionError::CommitLogOffsetMismatch)
        );
    }

    #[test]
    fn op_bodies_of_both_versions_are_read() {
        assert_eq!(op_body_offsets(b"12"), vec![12]);
        assert_eq!(op_body_offsets(b"1,5,9,"), vec![1, 5, 9]);
        assert_eq!(op_body_offsets(b"x,-1,3"), vec![3]);
        assert!(op_body_offsets(b"").is_empty());
    }

    #[test]
    fn a_round_skips_resolved_halves_and_checks_old_ones() {
        let config = TransactionConfig::default();
        let mut checker = TransactionChecker::new(config, 0, start());
        let halves = [
            Rec::half(0, 1_000, &[]).bytes(),
            Rec::half(1, 1_000, &[]).bytes(),
            Rec::half(2, 20_000, &[]).bytes(),
        ];
        let ops = [Rec::op(0, "0").bytes()];
        checker.apply_ops(&views(&ops)).unwrap();
        let round = checker.plan_round(&views(&halves), 21_000, 21_000).unwrap();
        // Half 2 is 1 s old (< 6 s timeout): the round stops there.
        assert_eq!(round.half_offset_after, 2);
        assert_eq!(round.actions.len(), 2);
        assert_eq!(round.actions[0], HalfAction::Resolved { queue_offset: 0 });
        let HalfAction::CheckBack {
            queue_offset,
            put_back,
            producer_group,
        } = &round.actions[1]
        else {
            panic!("expected a check-back: {:?}", round.actions[1]);
        };
        assert_eq!(*queue_offset, 1);
        assert_eq!(producer_group, "pg");
        assert_eq!(put_back.topic, TRANS_HALF_TOPIC);
        assert!(
            pairs(&put_back.properties).contains(&("TRANSACTION_CHECK_TIMES".into(), "1".into()))
        );
        // Nothing moves until the caller says the put-back is stored.
        assert_eq!(checker.progress(), start());
        checker.advance(round.half_offset_after);
        assert_eq!(
            checker.progress(),
            HalfQueueProgress {
                half_offset: 2,
                op_offset: 1
            }
        );
    }

    #[test]
    fn halves_stored_after_the_round_began_wait_for_the_next() {
        let mut checker = TransactionChecker::new(TransactionConfig::default(), 0, start());
        let halves = [Rec::half(0, 1_000, &[]).bytes()];
        let round = checker.plan_round(&views(&halves), 1_000, 50_000).unwrap();
        assert!(round.actions.is_empty());
        assert_eq!(round.half_offset_after, 0);
    }

    #[test]
    fn a_half_checked_too_often_is_discarded() {
        let mut checker = TransactionChecker::new(TransactionConfig::default(), 0, start());
        let halves = [
            Rec::half(0, 1_000, &[("TRANSACTION_CHECK_TIMES", "15")]).bytes(),
            Rec::half(1, 1_000, &[("TRANSACTION_CHECK_TIMES", "14")]).bytes(),
        ];
        let round = checker.plan_round(&views(&halves), 30_000, 30_000).unwrap();
        let HalfAction::Discard { repost, .. } = &round.actions[0] else {
            panic!("expected a discard");
        };
        assert_eq!(repost.topic, TRANS_CHECK_MAX_TIME_TOPIC);
        assert_eq!(repost.queue_id, 0);
        let HalfAction::CheckBack { put_back, .. } = &round.actions[1] else {
            panic!("expected a check-back");
        };
        assert!(
            pairs(&put_back.properties).contains(&("TRANSACTION_CHECK_TIMES".into(), "15".into()))
        );
        let mut topics = TopicConfigTable::new(TopicConfigSettings::default(), 0);
        let (config, _) = ensure_check_max_time_topic(&mut topics, 0);
        assert_eq!(config.write_queue_nums, CHECK_MAX_TIME_TOPIC_QUEUE_NUMS);
        assert_eq!(config.perm, perm::READ_WRITE);
    }

    #[test]
    fn check_immunity_renews_the_half_until_it_passes() {
        let config = TransactionConfig::default();
        let mut checker = TransactionChecker::new(config, 0, start());
        let halves = [Rec::half(0, 1_000, &[("CHECK_IMMUNITY_TIME_IN_SECONDS", "60")]).bytes()];
        let round = checker.plan_round(&views(&halves), 10_000, 10_000).unwrap();
        let HalfAction::Renew { put_back, .. } = &round.actions[0] else {
            panic!("expected a renewal: {:?}", round.actions);
        };
        assert!(
            pairs(&put_back.properties)
                .contains(&("TRAN_PREPARED_QUEUE_OFFSET".into(), "0".into()))
        );
        checker.advance(1);
        // The renewed copy at offset 1 is resolved by an op for the original offset 0.
        let renewed = [Rec::half(
            1,
            1_000,
            &[
                ("CHECK_IMMUNITY_TIME_IN_SECONDS", "60"),
                ("TRAN_PREPARED_QUEUE_OFFSET", "0"),
            ],
        )
        .bytes()];
        let mut with_op = TransactionChecker::new(
            config,
            0,
            HalfQueueProgress {
                half_offset: 0,
                op_offset: 0,
            },
        );
        with_op
            .apply_ops(&views(&[Rec::op(0, "0").bytes()]))
            .unwrap();
        with_op.advance(0);
        let mut all = vec![Rec::half(0, 1_000, &[]).bytes()];
        all.extend(renewed.iter().cloned());
        let round = with_op.plan_round(&views(&all), 20_000, 20_000).unwrap();
        assert_eq!(
            round.actions,
            vec![
                HalfAction::Resolved { queue_offset: 0 },
                HalfAction::Resolved { queue_offset: 1 }
            ]
        );
        // Past the immunity, an unresolved renewed copy is checked.
        let round = checker
            .plan_round(&views(&renewed), 70_000, 70_000)
            .unwrap();
        assert!(matches!(
            round.actions[0],
            HalfAction::CheckBack {
                queue_offset: 1,
                ..
            }
        ));
    }

    #[test]
    fn state_rebuilt_after_a_restart_makes_the_same_decisions() {
        let config = TransactionConfig::default();
        let halves: Vec<Vec<u8>> = (0..6).map(|i| Rec::half(i, 1_000, &[]).bytes()).collect();
        let ops = [Rec::op(0, "4"), Rec::op(1, "0,1,"), Rec::op(2, "5")].map(|r| r.bytes());
        let mut before = TransactionChecker::new(config, 0, start());
        before.apply_ops(&views(&ops)).unwrap();
        let first = before
            .plan_round(&views(&halves[..3]), 30_000, 30_000)
            .unwrap();
        assert_eq!(first.half_offset_after, 3);
        before.advance(3);
        let progress = before.progress();
        // Op 0 names half 4, not yet passed: the op progress stays at 0.
        assert_eq!(
            progress,
            HalfQueueProgress {
                half_offset: 3,
                op_offset: 0
            }
        );
        // Crash: rebuild from the persisted offsets and the op queue.
        let mut after = TransactionChecker::new(config, 0, progress);
        after.apply_ops(&views(&ops)).unwrap();
        let mut again = before.clone();
        let expected = again
            .plan_round(&views(&halves[3..]), 30_000, 30_000)
            .unwrap();
        let actual = after
            .plan_round(&views(&halves[3..]), 30_000, 30_000)
            .unwrap();
        assert_eq!(actual, expected);
        assert_eq!(
            actual
                .actions
                .iter()
                .map(|a| matches!(a, HalfAction::Resolved { .. }))
                .collect::<Vec<_>>(),
            vec![false, true, true]
        );
        after.advance(6);
        assert_eq!(
            after.progress(),
            HalfQueueProgress {
                half_offset: 6,
                op_offset: 3
            }
        );
    }

    #[test]
    fn gaps_in_either_queue_are_refused() {
        let mut checker = TransactionChecker::new(TransactionConfig::default(), 0, start());
        let ops = [Rec::op(1, "0").bytes()];
        assert!(matches!(
            checker.apply_ops(&views(&ops)),
            Err(TransactionError::Gap {
                queue: "op",
                expected: 0,
                found: 1
            })
        ));
        let halves = [Rec::half(2, 0, &[]).bytes()];
        assert!(matches!(
            checker.plan_round(&views(&halves), 1, 1),
            Err(TransactionError::Gap { queue: "half", .. })
        ));
    }

    #[test]
    #[should_panic(expected = "beyond the planned")]
    fn advancing_past_unexamined_halves_panics() {
        let mut checker = TransactionChecker::new(TransactionConfig::default(), 0, start());
        checker.advance(1);
    }

    #[test]
    fn check_request_names_the_stored_copy_and_the_real_topic() {
        let encoded = Rec::half(9, 1_000, &[("TRANSACTION_CHECK_TIMES", "1")]).bytes();
        let copy = decode_record(&encoded, CrcCheck::Verify).unwrap();
        let header = check_request_header(&copy, "broker-a");
        assert_eq!(header.tran_state_table_offset, 9);
        assert_eq!(header.commit_log_offset, copy.commit_log_offset());
        assert_eq!(header.msg_id.as_deref(), Some("U9"));
        assert_eq!(header.transaction_id.as_deref(), Some("U9"));
        assert_eq!(header.topic.as_deref(), Some("T"));
        assert_eq!(header.broker_name.as_deref(), Some("broker-a"));
        let body = check_request_body(&copy).unwrap();
        assert_eq!((body.topic, body.queue_id), ("T", 2));
        assert_eq!(body.queue_offset, 9);
    }

    #[test]
    fn check_rounds_run_every_interval() {
        let mut schedule = CheckSchedule::new(60_000, 0);
        assert!(!schedule.poll(59_999));
        assert!(schedule.poll(60_000));
        assert_eq!(schedule.next_ms(), 120_000);
        assert!(!schedule.poll(60_001));
    }

    #[test]
    fn a_retry_brings_the_next_round_forward_never_back() {
        let mut schedule = CheckSchedule::new(60_000, 0);
        schedule.retry_after(1_000, 100);
        assert_eq!(schedule.next_ms(), 1_100);
        schedule.retry_after(1_050, 100_000);
        assert_eq!(
            schedule.next_ms(),
            1_100,
            "a later retry keeps the sooner round"
        );
        assert!(schedule.poll(1_100));
        assert_eq!(schedule.next_ms(), 61_100);
    }
}
