//! Transactional messages on shard 0, which owns the half queue and the op
//! queue (both are queue 0 of their topics): END_TRANSACTION (37) and the
//! check-back loop, driving [`crate::features::transaction`].
//!
//! ```text
//!  END_TRANSACTION commit ─▶ read half ─▶ internal SEND_MESSAGE (real topic, any shard)
//!                                          └▶ answer to INTERNAL_CONN ─▶ SUCCESS ─▶ op record
//!  END_TRANSACTION rollback ─▶ read half ─▶ op record
//!  tick, every transactionCheckInterval (no round in flight):
//!    op queue from op_read ─▶ apply_ops ─▶ half queue from half_read ─▶ plan_round
//!      ─▶ appends (put back, discard) ─▶ acks ─▶ CHECK_TRANSACTION_STATE to a producer of PGROUP
//!      ─▶ every ack Ok ─▶ advance + progress as CID_RMQ_SYS_TRANS consumer offsets
//! ```
//!
//! The committed message goes through the ordinary send path (so a `DELAY`
//! it carries is scheduled, and a real queue of another shard is reached by
//! forwarding); its answer comes back to [`INTERNAL_CONN`], which
//! `ShardHandler::deliver` hands to `ShardHandler::txn_internal_answer`.
//! The op record is written only once the real message is stored, so a crash
//! in between leaves the half unresolved and it is checked back (at least
//! once, as RocketMQ).
//!
//! # Invariants
//! - The checker's progress moves only after every append of a round is
//!   acknowledged stored; a failed append abandons the round, which the next
//!   round plans again from the old progress.
//! - At most one check round is in flight.

use std::collections::HashMap;

use bytes::Bytes;
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::header::{
    CustomHeader, EndTransactionRequestHeader, SendMessageRequestHeader,
};
use ringmq_protocol::message::{CrcCheck, RecordView, decode_record, property_key};
use ringmq_storage::store::{
    AckStatus, AppendAck, AppendMessage, GetMessageStatus, GetMessagesResult, PullRead, Pulled,
};

use super::link::{ReplyTo, Request};
use super::pull::Parked;
use super::{ShardHandler, response};
use crate::features::Repost;
use crate::features::transaction::{
    CheckSchedule, EndTransaction, HALF_QUEUE_ID, HALF_RECORDS_PER_ROUND_MAX, HalfAction,
    HalfQueueProgress, OpRecord, TRANSACTION_CHECK_GROUP, TransactionChecker, TransactionConfig,
    check_request_body, check_request_header, end_transaction, ensure_check_max_time_topic,
};
use crate::persist::{TicketState, WriteTicket};
use crate::server::ConnectionId;
use crate::topic_config::{TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC};

/// The pseudo connection (tag 0: shard 0) internal sends answer to; never a
/// server's connection (its key is beyond any connection slab).
pub const INTERNAL_CONN: ConnectionId = ConnectionId(0x00FF_FFFF_FFFF_FFFF);
/// Op records read per store call while catching up with the op queue.
pub const OP_RECORDS_PER_READ_MAX: usize = 256;
/// Most store calls one round spends reading the op queue.
pub const OP_READS_PER_ROUND_MAX: usize = 64;
/// Bytes one read of a system queue returns at most.
pub const SYSTEM_QUEUE_READ_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Most commits waiting for their real message's answer.
pub const PENDING_COMMITS_MAX: usize = 65_536;
/// How soon a check round that waited for `topics.json` (a discard to a
/// topic not written yet) is tried again.
pub const CHECK_RETRY_AFTER_TOPIC_WRITE_MS: i64 = 100;

/// What an append of this module is for.
#[derive(Debug)]
enum TxnAppend {
    /// An op record (END_TRANSACTION).
    Op,
    /// A put-back or discard of the round in flight.
    Round,
    /// The put-back of a check: once stored, send the check for it.
    CheckPutBack {
        producer_group: String,
        commit_log_offset: u64,
    },
}

/// A commit waiting for its real message to be stored.
#[derive(Debug)]
struct PendingCommit {
    reply: ReplyTo,
    op: OpRecord,
}

/// A check round whose appends are not all acknowledged yet.
#[derive(Debug)]
struct RoundInFlight {
    half_offset_after: i64,
    outstanding: usize,
    failed: bool,
}

/// Shard 0's transaction state.
#[derive(Debug)]
pub(crate) struct TxnState {
    checker: TransactionChecker,
    schedule: CheckSchedule,
    appends: HashMap<u64, TxnAppend>,
    commits: HashMap<i32, PendingCommit>,
    next_token: i32,
    round: Option<RoundInFlight>,
    /// The `topics.json` write that created `TRANS_CHECK_MAX_TIME_TOPIC`,
    /// until it is on disk: no half is discarded into the topic before.
    check_max_topic_write: Option<WriteTicket>,
    /// The store's background read a check round waits for (its ticket and
    /// which queue it reads); the round runs again once it is done.
    reading: Option<(u64, CheckRead)>,
}

/// The queue a check round reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CheckRead {
    /// The op queue (`RMQ_SYS_TRANS_OP_HALF_TOPIC`).
    Op,
    /// The half queue (`RMQ_SYS_TRANS_HALF_TOPIC`).
    Half,
}

/// The check-back settings of `config`.
pub fn transaction_config(config: &crate::config::BrokerConfig) -> TransactionConfig {
    TransactionConfig {
        timeout_ms: config.transaction_timeout_ms as i64,
        check_interval_ms: config.transaction_check_interval_ms as i64,
        check_max: config.transaction_check_max.min(i32::MAX as u32) as i32,
        file_reserved_ms: i64::from(config.file_reserved_time_hours) * 3_600_000,
    }
}

fn append_of<'a>(repost: &'a Repost, source: &RecordView<'a>) -> AppendMessage<'a> {
    AppendMessage {
        topic: &repost.topic,
        queue_id: repost.queue_id.max(0) as u32,
        body: source.body(),
        properties: &repost.properties,
        flag: source.flag(),
        sys_flag: repost.sys_flag,
        born_timestamp_ms: source.born_timestamp_ms(),
        born_host: source.born_host(),
        reconsume_times: repost.reconsume_times,
        prepared_transaction_offset: repost.prepared_transaction_offset,
    }
}

/// The decoded records of `result` from queue offset `from` on, up to the
/// first one missing or unreadable; when the one at `from` is missing or
/// unreadable, `Err` of the offset to skip to (the first record's, or
/// `from + 1`).
fn contiguous_views(result: &GetMessagesResult, from: i64) -> Result<Vec<RecordView<'_>>, i64> {
    let mut views = Vec::with_capacity(result.records.len());
    let mut next = from;
    for record in &result.records {
        let offset = record.queue_offset as i64;
        let decoded = decode_record(&result.body[record.range.clone()], CrcCheck::Skip)
            .ok()
            .filter(|view| view.queue_offset() == offset);
        match decoded {
            Some(view) if offset == next => {
                views.push(view);
                next += 1;
            }
            // Nothing readable at `from`: skip to what follows.
            _ if views.is_empty() => return Err(offset.max(from + 1)),
            _ => break,
        }
    }
    Ok(views)
}

impl ShardHandler {
    /// The transaction state, created from the persisted progress on first use.
    fn txn_state(&mut self, now_ms: i64) -> Option<&mut TxnState> {
        self.control.as_ref()?;
        let needs = self.control.as_ref().is_some_and(|c| c.txn.is_none());
        if needs {
            let config = transaction_config(&self.settings.broker_config);
            let (half_min, op_min) = match &self.store {
                Some(store) => (
                    store.queue_min_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID as u32) as i64,
                    store.queue_min_offset(TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID as u32) as i64,
                ),
                None => (0, 0),
            };
            let half = self
                .offsets
                .query(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID)
                .unwrap_or(half_min)
                .max(half_min);
            let op = self
                .offsets
                .query(TRANSACTION_CHECK_GROUP, TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
                .unwrap_or(op_min)
                .max(op_min);
            let progress = HalfQueueProgress {
                half_offset: half,
                op_offset: op,
            };
            tracing::info!(half, op, "transaction check-back resumes");
            let state = TxnState {
                checker: TransactionChecker::new(config, HALF_QUEUE_ID, progress),
                schedule: CheckSchedule::new(config.check_interval_ms, now_ms),
                appends: HashMap::new(),
                commits: HashMap::new(),
                next_token: 0,
                round: None,
                check_max_topic_write: None,
                reading: None,
            };
            if let Some(control) = self.control.as_mut() {
                control.txn = Some(state);
            }
        }
        self.control.as_mut()?.txn.as_mut()
    }

    /// END_TRANSACTION (37) on shard 0.
    pub(crate) fn end_transaction(&mut self, request: Box<Request>, now_ms: i64) {
        self.end_transaction_reading(request, now_ms, PullRead::Background);
    }

    /// END_TRANSACTION, the half message read as `read` says: a half no
    /// longer in memory (one a check-back asked about is at least
    /// `transactionTimeOut` old) is read in the background the first time,
    /// the request parked with the pulls (`run_reading_pulls`), and
    /// synchronously if still missing when it runs again after that read.
    pub(crate) fn end_transaction_reading(
        &mut self,
        request: Box<Request>,
        now_ms: i64,
        read: PullRead,
    ) {
        let header: EndTransactionRequestHeader = match request.cmd.decode_custom_header() {
            Ok(header) => header,
            Err(error) => {
                return self.reply(
                    request.reply,
                    response(response_code::SYSTEM_ERROR, error.to_string()),
                );
            }
        };
        if !self.settings.is_master {
            let remark = "Once again, the broker is a slave, can not end transaction";
            return self.reply(
                request.reply,
                response(response_code::SLAVE_NOT_AVAILABLE, remark),
            );
        }
        tracing::debug!(
            offset = header.commit_log_offset,
            kind = header.commit_or_rollback,
            from_check = ?header.from_transaction_check,
            "END_TRANSACTION"
        );
        let offset = header.commit_log_offset.max(0) as u64;
        let missing = || "Find prepared transaction message failed".to_owned();
        let Some((request, record)) =
            self.record_for(request, offset, read, Parked::EndTransaction, missing)
        else {
            return;
        };
        let half = match decode_record(&record, CrcCheck::Skip) {
            Ok(view) => view,
            Err(error) => {
                return self.reply(
                    request.reply,
                    response(response_code::SYSTEM_ERROR, error.to_string()),
                );
            }
        };
        let op_key = half
            .property(property_key::UNIQ_KEY)
            .map(|k| format!("{k}OP"));
        let decision = match end_transaction(&header, &half, op_key.as_deref()) {
            Ok(decision) => decision,
            Err(error) => {
                return self.reply(
                    request.reply,
                    response(error.response_code(), error.to_string()),
                );
            }
        };
        match decision {
            EndTransaction::Ignore => self.reply(request.reply, super::success()),
            EndTransaction::Rollback { op } => {
                self.append_op(&op, now_ms);
                self.reply(request.reply, super::success());
            }
            EndTransaction::Commit { real, op } => {
                self.commit_real(&real, &half, op, request.reply, now_ms)
            }
        }
    }

    /// Sends the committed message through the send path; its answer comes
    /// to [`INTERNAL_CONN`] with a token as opaque.
    fn commit_real(
        &mut self,
        real: &Repost,
        half: &RecordView<'_>,
        op: OpRecord,
        reply: ReplyTo,
        now_ms: i64,
    ) {
        let Some(state) = self.txn_state(now_ms) else {
            return;
        };
        if state.commits.len() >= PENDING_COMMITS_MAX {
            let answer = response(response_code::SYSTEM_BUSY, "too many commits in flight");
            return self.reply(reply, answer);
        }
        state.next_token = state.next_token.wrapping_add(1);
        let token = state.next_token;
        state.commits.insert(token, PendingCommit { reply, op });
        let send = SendMessageRequestHeader {
            producer_group: half.property(property_key::PGROUP).unwrap_or("").to_owned(),
            topic: real.topic.clone(),
            default_topic: crate::topic_config::AUTO_CREATE_TOPIC_KEY_TOPIC.to_owned(),
            default_topic_queue_nums: 1,
            queue_id: real.queue_id,
            sys_flag: real.sys_flag,
            born_timestamp: half.born_timestamp_ms(),
            flag: half.flag(),
            properties: Some(String::from_utf8_lossy(&real.properties).into_owned()),
            reconsume_times: Some(real.reconsume_times),
            unit_mode: None,
            batch: None,
            max_reconsume_times: None,
            broker_name: None,
        };
        let mut ext = ExtFields::new();
        send.to_ext(&mut ext);
        let mut cmd = RemotingCommand::new_request(request_code::SEND_MESSAGE, ext);
        cmd.body = Some(Bytes::copy_from_slice(half.body()));
        cmd.opaque = token;
        let synthetic = Request {
            cmd,
            reply: ReplyTo {
                shard: 0,
                conn: INTERNAL_CONN,
                opaque: token,
                oneway: false,
            },
            peer: half.born_host(),
        };
        self.dispatch(Box::new(synthetic), now_ms);
    }

    /// The answer to an internal send (a commit's real message).
    pub(crate) fn txn_internal_answer(&mut self, cmd: RemotingCommand) {
        let now_ms = super::runtime::wall_clock_ms();
        let Some(state) = self.txn_state(now_ms) else {
            return;
        };
        let Some(pending) = state.commits.remove(&cmd.opaque) else {
            tracing::warn!(
                opaque = cmd.opaque,
                "an internal answer without a pending commit"
            );
            return;
        };
        let answer = if cmd.code == response_code::SUCCESS {
            self.append_op(&pending.op, now_ms);
            super::success()
        } else {
            tracing::warn!(code = cmd.code, remark = ?cmd.remark, "storing a committed message failed");
            response(
                cmd.code,
                cmd.remark
                    .unwrap_or_else(|| "storing the committed message failed".into()),
            )
        };
        self.reply(pending.reply, answer);
    }

    fn append_op(&mut self, op: &OpRecord, now_ms: i64) {
        let host = self.settings.store_host;
        let message = AppendMessage {
            topic: TRANS_OP_HALF_TOPIC,
            queue_id: op.queue_id.max(0) as u32,
            body: &op.body,
            properties: &op.properties,
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms: now_ms,
            born_host: host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        };
        let result = self.store_mut().append(&message, now_ms.max(0) as u64);
        match result {
            Ok(ticket) => {
                if let Some(state) = self.txn_state(now_ms) {
                    state.appends.insert(ticket.id, TxnAppend::Op);
                }
            }
            Err(error) => {
                tracing::error!(%error, "appending a transaction op record failed");
            }
        }
    }

    /// An ack of this module's append: handled (None), or given back.
    pub(crate) fn txn_on_ack(&mut self, ack: AppendAck, now_ms: i64) -> Option<AppendAck> {
        let Some(state) = self.control.as_mut().and_then(|c| c.txn.as_mut()) else {
            return Some(ack);
        };
        let Some(kind) = state.appends.remove(&ack.id) else {
            return Some(ack);
        };
        let ok = !matches!(ack.status, AckStatus::Failed(_));
        if !ok {
            tracing::error!(status = ?ack.status, "a transaction append failed");
        }
        match kind {
            TxnAppend::Op => {}
            TxnAppend::Round => self.round_append_done(ok, now_ms),
            TxnAppend::CheckPutBack {
                producer_group,
                commit_log_offset,
            } => {
                if ok {
                    self.send_check(&producer_group, commit_log_offset);
                }
                self.round_append_done(ok, now_ms);
            }
        }
        None
    }

    fn round_append_done(&mut self, ok: bool, now_ms: i64) {
        let Some(state) = self.txn_state(now_ms) else {
            return;
        };
        let Some(round) = state.round.as_mut() else {
            return;
        };
        round.outstanding = round.outstanding.saturating_sub(1);
        round.failed |= !ok;
        if round.outstanding == 0 {
            self.finish_round(now_ms);
        }
    }

    fn finish_round(&mut self, now_ms: i64) {
        let Some(state) = self.txn_state(now_ms) else {
            return;
        };
        let Some(round) = state.round.take() else {
            return;
        };
        if round.failed {
            tracing::warn!("a check round's append failed: the round is planned again");
            return;
        }
        state.checker.advance(round.half_offset_after);
        let progress = state.checker.progress();
        self.offsets.commit(
            TRANSACTION_CHECK_GROUP,
            TRANS_HALF_TOPIC,
            HALF_QUEUE_ID,
            progress.half_offset,
            now_ms,
        );
        self.offsets.commit(
            TRANSACTION_CHECK_GROUP,
            TRANS_OP_HALF_TOPIC,
            HALF_QUEUE_ID,
            progress.op_offset,
            now_ms,
        );
    }

    /// CHECK_TRANSACTION_STATE for the stored put-back at `commit_log_offset`
    /// to a producer channel of its group (none: the next round checks again).
    fn send_check(&mut self, producer_group: &str, commit_log_offset: u64) {
        let Some(channel) = self
            .control
            .as_mut()
            .and_then(|c| c.clients.producer_channel(producer_group))
        else {
            tracing::debug!(
                group = producer_group,
                "no producer to check a transaction with"
            );
            return;
        };
        let record = match self.store_mut().read_record(commit_log_offset) {
            Ok(Some(record)) => record,
            Ok(None) | Err(_) => return,
        };
        let Ok(view) = decode_record(&record, CrcCheck::Skip) else {
            return;
        };
        let header = check_request_header(&view, &self.settings.broker_name);
        let spec = match check_request_body(&view) {
            Ok(spec) => spec,
            Err(error) => {
                tracing::warn!(%error, "a half message without its destination");
                return;
            }
        };
        let mut body = vec![0; spec.encoded_len()];
        if let Err(error) = spec.encode_into(&mut body) {
            tracing::warn!(%error, "encoding a check-back body failed");
            return;
        }
        let mut cmd = RemotingCommand::new_request(
            request_code::CHECK_TRANSACTION_STATE,
            header.to_ext_fields(),
        );
        cmd.body = Some(Bytes::from(body));
        tracing::debug!(
            group = producer_group,
            offset = commit_log_offset,
            "CHECK_TRANSACTION_STATE"
        );
        self.push_to_client(ConnectionId(channel.0), cmd);
    }

    /// Periodic check-back work (shard 0's tick).
    pub(crate) fn transaction_tick(&mut self, now_ms: i64) {
        if self.store.is_none() || !self.settings.is_master {
            return;
        }
        let Some(state) = self.txn_state(now_ms) else {
            return;
        };
        if state.round.is_some() || state.reading.is_some() || !state.schedule.poll(now_ms) {
            return;
        }
        if let Err(remark) = self.run_check_round(now_ms, None) {
            tracing::warn!(%remark, "transaction check round failed");
        }
    }

    /// Whether a check round waits for a background read.
    pub(crate) fn txn_is_reading(&self) -> bool {
        self.control
            .as_ref()
            .and_then(|control| control.txn.as_ref())
            .is_some_and(|state| state.reading.is_some())
    }

    /// The store's background read `ticket` is done: if a check round
    /// waited for it, the round runs now.
    pub(crate) fn on_txn_read_done(&mut self, ticket: u64, now_ms: i64) {
        let Some(state) = self
            .control
            .as_mut()
            .and_then(|control| control.txn.as_mut())
        else {
            return;
        };
        let Some((_, read)) = state.reading.take_if(|(waited, _)| *waited == ticket) else {
            return;
        };
        if let Err(remark) = self.run_check_round(now_ms, Some(read)) {
            tracing::warn!(%remark, "transaction check round failed");
        }
    }

    /// Up to `max_count` records of the half or op queue from `from`, read
    /// in the background when not in memory (synchronously, once, when
    /// `after_read` is this queue's: its background read is done; the
    /// round's later reads of it go to the background again): None when the
    /// round must wait for that read (then noted in the state).
    fn check_round_read(
        &mut self,
        queue: CheckRead,
        from: i64,
        max_count: usize,
        after_read: &mut Option<CheckRead>,
        now_ms: i64,
    ) -> Result<Option<GetMessagesResult>, String> {
        let topic = match queue {
            CheckRead::Op => TRANS_OP_HALF_TOPIC,
            CheckRead::Half => TRANS_HALF_TOPIC,
        };
        let read = if after_read.take_if(|waited| *waited == queue).is_some() {
            PullRead::AfterRead
        } else {
            PullRead::Background
        };
        let pulled = self
            .store_mut()
            .pull_messages(
                topic,
                HALF_QUEUE_ID as u32,
                from.max(0) as u64,
                max_count,
                SYSTEM_QUEUE_READ_BYTES_MAX,
                None,
                read,
            )
            .map_err(|e| e.to_string())?;
        match pulled {
            Pulled::Ready(result) => Ok(Some(result)),
            Pulled::Reading(ticket) => {
                if let Some(state) = self.txn_state(now_ms) {
                    state.reading = Some((ticket, queue));
                }
                Ok(None)
            }
        }
    }

    /// A check round; `after_read`: the queue whose background read the
    /// round waited for (None: a round the schedule started).
    fn run_check_round(
        &mut self,
        now_ms: i64,
        mut after_read: Option<CheckRead>,
    ) -> Result<(), String> {
        // Catch up with the op queue.
        for _ in 0..OP_READS_PER_ROUND_MAX {
            let from = match self.txn_state(now_ms) {
                Some(state) => state.checker.op_read_from(),
                None => return Ok(()),
            };
            let Some(result) = self.check_round_read(
                CheckRead::Op,
                from,
                OP_RECORDS_PER_READ_MAX,
                &mut after_read,
                now_ms,
            )?
            else {
                return Ok(());
            };
            if result.status == GetMessageStatus::OffsetTooSmall {
                // The op records below the queue's minimum are gone with their files.
                self.txn_skip(None, Some(result.min_offset as i64), now_ms);
                continue;
            }
            if result.status != GetMessageStatus::Found {
                break;
            }
            let views = match contiguous_views(&result, from) {
                Ok(views) => views,
                Err(next) => {
                    tracing::warn!(from, next, "op records missing: skipped");
                    self.txn_skip(None, Some(next), now_ms);
                    continue;
                }
            };
            let done =
                views.len() < result.records.len() || result.next_begin_offset >= result.max_offset;
            if let Some(state) = self.txn_state(now_ms) {
                state.checker.apply_ops(&views).map_err(|e| e.to_string())?;
            }
            if done {
                break;
            }
        }
        let from = match self.txn_state(now_ms) {
            Some(state) => state.checker.half_read_from(),
            None => return Ok(()),
        };
        let Some(result) = self.check_round_read(
            CheckRead::Half,
            from,
            HALF_RECORDS_PER_ROUND_MAX,
            &mut after_read,
            now_ms,
        )?
        else {
            return Ok(());
        };
        if result.status == GetMessageStatus::OffsetTooSmall {
            tracing::warn!(
                from,
                min = result.min_offset,
                "half messages gone with their files"
            );
            self.txn_skip(Some(result.min_offset as i64), None, now_ms);
            return Ok(());
        }
        if result.status != GetMessageStatus::Found {
            return Ok(());
        }
        let views = match contiguous_views(&result, from) {
            Ok(views) => views,
            Err(next) => {
                tracing::warn!(from, next, "half messages missing or unreadable: skipped");
                self.txn_skip(Some(next), None, now_ms);
                return Ok(());
            }
        };
        let Some(state) = self.txn_state(now_ms) else {
            return Ok(());
        };
        let round = state
            .checker
            .plan_round(&views, now_ms, now_ms)
            .map_err(|e| e.to_string())?;
        if round
            .actions
            .iter()
            .any(|a| matches!(a, HalfAction::Discard { .. }))
            && !self.check_max_topic_shown(now_ms)
        {
            // Nothing of the round is appended: it is planned again soon,
            // and carried out once the topic is on disk.
            if let Some(state) = self.txn_state(now_ms) {
                state
                    .schedule
                    .retry_after(now_ms, CHECK_RETRY_AFTER_TOPIC_WRITE_MS);
            }
            return Ok(());
        }
        let by_offset: HashMap<i64, &RecordView<'_>> =
            views.iter().map(|v| (v.queue_offset(), v)).collect();
        let mut outstanding = 0;
        let mut failed = false;
        for action in &round.actions {
            let Some(source) = by_offset.get(&action.queue_offset()) else {
                failed = true;
                break;
            };
            let (repost, kind) = match action {
                HalfAction::Resolved { .. } => continue,
                HalfAction::Discard { repost, .. } => {
                    tracing::info!(
                        offset = action.queue_offset(),
                        "half message checked too often: discarded"
                    );
                    (repost, None)
                }
                HalfAction::Renew { put_back, .. } => (put_back, None),
                HalfAction::CheckBack {
                    put_back,
                    producer_group,
                    ..
                } => (put_back, Some(producer_group.clone())),
            };
            let message = append_of(repost, source);
            match self.store_mut().append(&message, now_ms.max(0) as u64) {
                Ok(ticket) => {
                    let kind = match kind {
                        Some(producer_group) => TxnAppend::CheckPutBack {
                            producer_group,
                            commit_log_offset: ticket.commit_log_offset,
                        },
                        None => TxnAppend::Round,
                    };
                    if let Some(state) = self.txn_state(now_ms) {
                        state.appends.insert(ticket.id, kind);
                    }
                    outstanding += 1;
                }
                Err(error) => {
                    tracing::warn!(%error, "a check round's append was refused");
                    failed = true;
                    break;
                }
            }
        }
        if let Some(state) = self.txn_state(now_ms) {
            state.round = Some(RoundInFlight {
                half_offset_after: round.half_offset_after,
                outstanding,
                failed,
            });
        }
        if outstanding == 0 {
            self.finish_round(now_ms);
        }
        Ok(())
    }

    /// Restarts the checker past records that can no longer be read: at
    /// `half` (or the current half progress) and `op` (or the first op
    /// still needed, which is read again).
    fn txn_skip(&mut self, half: Option<i64>, op: Option<i64>, now_ms: i64) {
        let config = transaction_config(&self.settings.broker_config);
        let Some(state) = self.txn_state(now_ms) else {
            return;
        };
        let current = state.checker.progress();
        let progress = HalfQueueProgress {
            half_offset: half.unwrap_or(current.half_offset).max(current.half_offset),
            op_offset: op.unwrap_or(current.op_offset),
        };
        state.checker = TransactionChecker::new(config, HALF_QUEUE_ID, progress);
    }

    /// Creates `TRANS_CHECK_MAX_TIME_TOPIC` if it does not exist and says
    /// whether `topics.json` holds it yet. Discarded halves are appended to
    /// it only then, as Java persists the topic before it appends: records
    /// of a topic a crash left out of the file would sit in queues the
    /// restarted broker does not show. A failed write is retried by the
    /// persister; the discards wait for it.
    fn check_max_topic_shown(&mut self, now_ms: i64) -> bool {
        let Some(control) = self.control.as_mut() else {
            return false;
        };
        let change = ensure_check_max_time_topic(&mut control.topics, now_ms).1;
        let created = self.publish_topics(&change);
        let Some(state) = self.txn_state(now_ms) else {
            return false;
        };
        if created.is_some() {
            state.check_max_topic_write = created;
        }
        let Some(ticket) = state.check_max_topic_write else {
            return true;
        };
        let ticket_state = self
            .persister
            .as_ref()
            .map_or(TicketState::Written, |p| p.ticket_state(ticket));
        if ticket_state != TicketState::Written {
            tracing::debug!(
                ?ticket_state,
                "discarding half messages once topics.json holds their topic"
            );
            return false;
        }
        if let Some(state) = self.txn_state(now_ms) {
            state.check_max_topic_write = None;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_settings_come_from_the_broker_config() {
        let env = crate::config::ConfigEnvironment {
            home_dir: "/tmp".into(),
            cpu_count: 1,
            broker_ip1: std::net::Ipv4Addr::LOCALHOST.into(),
        };
        let mut config = crate::config::BrokerConfig::defaults(&env);
        let defaults = transaction_config(&config);
        assert_eq!(defaults, TransactionConfig::default());
        config.transaction_timeout_ms = 1_000;
        config.transaction_check_interval_ms = 2_000;
        config.transaction_check_max = 3;
        config.file_reserved_time_hours = 1;
        let custom = transaction_config(&config);
        assert_eq!(custom.timeout_ms, 1_000);
        assert_eq!(custom.check_interval_ms, 2_000);
        assert_eq!(custom.check_max, 3);
        assert_eq!(custom.file_reserved_ms, 3_600_000);
    }

    #[test]
    fn a_repost_is_appended_with_the_source_body_and_born_fields() {
        let bytes = crate::features::test_support::record_bytes(TRANS_HALF_TOPIC, 0, &[], 0);
        let source = decode_record(&bytes, CrcCheck::Verify).unwrap();
        let repost = Repost {
            topic: "T".into(),
            queue_id: 3,
            properties: b"k\x01v\x02".to_vec(),
            sys_flag: 8,
            reconsume_times: 2,
            prepared_transaction_offset: 77,
            store_timestamp_ms: None,
            tags_code: 0,
        };
        let message = append_of(&repost, &source);
        assert_eq!(message.topic, "T");
        assert_eq!(message.queue_id, 3);
        assert_eq!(message.body, source.body());
        assert_eq!(message.flag, source.flag());
        assert_eq!(message.born_timestamp_ms, source.born_timestamp_ms());
        assert_eq!(message.born_host, source.born_host());
        assert_eq!(message.sys_flag, 8);
        assert_eq!(message.reconsume_times, 2);
        assert_eq!(message.prepared_transaction_offset, 77);
    }

    fn result_of(records: &[(u64, Vec<u8>)]) -> GetMessagesResult {
        let mut result = GetMessagesResult {
            status: GetMessageStatus::Found,
            next_begin_offset: 0,
            min_offset: 0,
            max_offset: 100,
            body: Vec::new(),
            records: Vec::new(),
        };
        for (offset, bytes) in records {
            let start = result.body.len();
            result.body.extend_from_slice(bytes);
            result.records.push(ringmq_storage::store::FoundRecord {
                queue_offset: *offset,
                commit_log_offset: 0,
                range: start..result.body.len(),
            });
        }
        result
    }

    fn half_at(offset: i64) -> Vec<u8> {
        let mut bytes = crate::features::test_support::record_bytes(TRANS_HALF_TOPIC, 0, &[], 0);
        let at = ringmq_protocol::message::layout::QUEUE_OFFSET_POSITION;
        bytes[at..at + 8].copy_from_slice(&offset.to_be_bytes());
        bytes
    }

    #[test]
    fn contiguous_views_stop_at_the_first_gap() {
        let result = result_of(&[(5, half_at(5)), (6, half_at(6)), (8, half_at(8))]);
        let views = contiguous_views(&result, 5).unwrap();
        let offsets: Vec<i64> = views.iter().map(|v| v.queue_offset()).collect();
        assert_eq!(offsets, vec![5, 6]);
    }

    #[test]
    fn contiguous_views_skip_what_is_gone_or_unreadable_at_the_start() {
        let gone = result_of(&[(7, half_at(7))]);
        assert_eq!(contiguous_views(&gone, 5).err(), Some(7));
        let unreadable = result_of(&[(5, vec![0; 16]), (6, half_at(6))]);
        assert_eq!(contiguous_views(&unreadable, 5).err(), Some(6));
    }

    #[test]
    fn the_internal_connection_is_on_shard_zero() {
        assert_eq!(INTERNAL_CONN.tag(), 0);
    }
}
