//! PULL_MESSAGE (11) on the queue's owner shard, as Java's
//! `PullMessageProcessor`: topic, queue and group checks, the subscription
//! (the header's, or the registered one from the published snapshot), the
//! tag filter by tags hash (clients re-check tag strings) or the SQL92 filter
//! on each record's properties (compiled in the snapshot, or from the header;
//! needs `enablePropertyFilter`; records that do not match are skipped and
//! stay consumed, as in Java's `getMessage` with a `MessageFilter`), the commit offset
//! piggybacked on the first processing, and long polling. Each answer
//! suggests the broker to pull from next ([`pull_route`]: `slaveReadEnable`,
//! a consumer that fell behind, a slave sending a consumer back to its
//! online master), and a slave leaves an out-of-range offset where it is
//! (`offsetCheckInSlave`).
//!
//! A pull that finds nothing new and may be suspended is held, keyed by
//! (topic, queue), until an append to that queue is acknowledged or its
//! `suspendTimeoutMillis` passes; it is then executed again without the
//! right to be held (and without storing its commit offset again), which
//! answers it. A pull whose group has no registered subscription yet (its
//! heartbeat may still be on the way to shard 0) is held likewise and
//! retried when a new snapshot arrives, up to [`SUBSCRIPTION_WAIT_MS`].
//!
//! A pull whose first records are older than the store's tail cache is
//! parked while the store reads them through the ring
//! ([`ReadingPull`]), and executed again when the read is done; records
//! further on that are not in memory end its answer, and the consumer's
//! next pull starts there. The shard never waits for the disk for a pull.
//!
//! # Invariants
//! - A held pull is answered exactly once: on wake, at its deadline, or at
//!   stop.
//! - A parked (reading) pull is executed again exactly once, when the
//!   store gives its ticket back (every ticket comes back, a failed read's
//!   too; the second execution reads synchronously what it then lacks).

use bytes::Bytes;
use ringmq_protocol::code::response_code;
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{PullMessageRequestHeader, PullMessageResponseHeader};
use ringmq_protocol::json::SubscriptionData;
/// `ExpressionType.TAG`.
const EXPRESSION_TYPE_TAG: &str = "TAG";
use std::sync::Arc;

use ringmq_protocol::message::{CrcCheck, decode_record, java_string_hash_code};
use ringmq_storage::consume_queue::CqEntry;
use ringmq_storage::disk::uring::UringDisk;
use ringmq_storage::limits::GET_MESSAGES_BYTES_MAX;
use ringmq_storage::store::{
    FoundRecord, GetMessageStatus, GetMessagesResult, PullRead, Pulled, RecordRead, Store,
};

use crate::features::sql92::{EXPRESSION_TYPE_SQL92, Filter, compile, is_tag_type};

use super::link::Request;
use super::{ShardHandler, response};
use crate::client_registry::PullSubscriptionError;
use crate::stats_table::StatsName;
use crate::topic_config::perm;

/// Longest a pull waits for its group's subscription to reach this shard.
pub const SUBSCRIPTION_WAIT_MS: i64 = 1_000;
/// Bytes one pull returns at most when the client names no limit.
pub const PULL_BYTES_MAX_DEFAULT: usize = 256 * 1024 * 1024;

/// A pull waiting for messages (or for its subscription).
#[derive(Debug)]
pub(crate) struct HeldPull {
    request: Request,
    topic: String,
    queue_id: u32,
    /// When it is answered at the latest (ms since the epoch).
    pub(crate) deadline_ms: i64,
    /// Held for want of a subscription rather than of messages.
    awaiting_subscription: bool,
}

/// A request whose records the store is reading in the background (older
/// than its tail cache): the shard goes on meanwhile, and executes the
/// request again, with the same `first`, once the read is done.
#[derive(Debug)]
pub(crate) struct ReadingPull {
    request: Request,
    ticket: u64,
    first: bool,
    kind: Parked,
}

/// What a [`ReadingPull`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parked {
    /// A consumer's PULL_MESSAGE.
    Pull,
    /// A slave's replica pull.
    ReplicaPull,
    /// CONSUMER_SEND_MSG_BACK, reading the original record.
    SendBack,
    /// VIEW_MESSAGE_BY_ID.
    View,
    /// CONSUME_MESSAGE_DIRECTLY, reading the record it hands the consumer.
    ConsumeDirectly,
    /// END_TRANSACTION, reading the half message it ends.
    EndTransaction,
    /// GET_EARLIEST_MSG_STORETIME or SEARCH_OFFSET_BY_TIMESTAMP, reading a
    /// record's store time.
    TimeQuery,
}

/// The tags of an expression (`a || b`); None for everything (`*`, empty).
fn tag_codes(expression: &str) -> Option<Vec<i32>> {
    let expression = expression.trim();
    if expression.is_empty() || expression == "*" {
        return None;
    }
    let codes: Vec<i32> = expression
        .split("||")
        .map(str::trim)
        .filter(|tag| !tag.is_empty())
        .map(java_string_hash_code)
        .collect();
    if codes.is_empty() { None } else { Some(codes) }
}

enum Subscription {
    Codes(Option<Vec<i32>>),
    Sql(Arc<Filter>),
    Refused(RemotingCommand),
    Wait(PullSubscriptionError),
}

/// The refusal of a filter the broker does not accept.
fn unsupported_filter(expression_type: &str) -> RemotingCommand {
    response(
        response_code::SYSTEM_ERROR,
        format!("The broker does not support consumer to filter message by {expression_type}"),
    )
}

/// Keeps the records of `result` whose properties match `filter` (the
/// others are skipped: the next offset stays past them, as Java's
/// `MessageFilter.isMatchedByCommitLog` does).
fn retain_matching(result: &mut GetMessagesResult, filter: &Filter) {
    let mut body = Vec::with_capacity(result.body.len());
    let mut records = Vec::with_capacity(result.records.len());
    for record in &result.records {
        let bytes = &result.body[record.range.clone()];
        let matched = decode_record(bytes, CrcCheck::Skip)
            .is_ok_and(|view| filter.matches_properties(view.properties()));
        if matched {
            let start = body.len();
            body.extend_from_slice(bytes);
            records.push(FoundRecord {
                range: start..body.len(),
                ..record.clone()
            });
        }
    }
    if records.is_empty() && result.status == GetMessageStatus::Found {
        result.status = GetMessageStatus::NoMatchedMessage;
    }
    result.body = body;
    result.records = records;
}

impl ShardHandler {
    /// Executes a pull; `first` is Java's `brokerAllowSuspend` (false when a
    /// held pull is executed again).
    pub(crate) fn pull(&mut self, request: Request, now_ms: i64, first: bool) {
        self.pull_reading(request, now_ms, first, PullRead::Background);
    }

    /// After the store's poll: executes again the pulls whose records the
    /// store has now read (see [`ReadingPull`]), marks the delay levels
    /// whose reads are done, and delivers the timer entries whose are; every
    /// waiter of a ticket, since reads are shared.
    pub(crate) fn run_reading_pulls(&mut self, now_ms: i64) {
        let parked = !self.reading_pulls.is_empty()
            || !self.reading_queries.is_empty()
            || self.delay.is_reading()
            || self.timer_is_reading()
            || self.txn_is_reading();
        if !parked || self.store.is_none() {
            return;
        }
        let mut done = Vec::new();
        self.store_mut().take_span_reads(&mut done);
        for ticket in done {
            // Pulls share a read of the window that holds their records
            // (`Store::pull_messages`), so a ticket may be every waiter's:
            // parked requests, query parts, a transaction check round, delay
            // levels (polled again in `run_delay`), the timer wheel.
            while let Some(index) = self
                .reading_pulls
                .iter()
                .position(|pull| pull.ticket == ticket)
            {
                self.run_reading_pull(index, now_ms);
            }
            while self.on_query_read_done(ticket, now_ms) {}
            self.on_txn_read_done(ticket, now_ms);
            self.delay.on_read_done(ticket);
            self.on_timer_read_done(ticket, now_ms);
        }
    }

    /// Executes again parked request `index`, whose read is done.
    fn run_reading_pull(&mut self, index: usize, now_ms: i64) {
        let pull = self.reading_pulls.swap_remove(index);
        let (request, first, read) = (pull.request, pull.first, PullRead::AfterRead);
        match pull.kind {
            Parked::Pull => self.pull_reading(request, now_ms, first, read),
            Parked::ReplicaPull => self.replica_pull_reading(request, now_ms, first, read),
            Parked::SendBack => self.send_back_reading(Box::new(request), now_ms, read),
            Parked::View => self.view_message_reading(Box::new(request), read),
            Parked::ConsumeDirectly => {
                self.consume_directly_reading(Box::new(request), now_ms, read)
            }
            Parked::EndTransaction => self.end_transaction_reading(Box::new(request), now_ms, read),
            Parked::TimeQuery => self.time_query(Box::new(request), read),
        }
    }

    /// Parks a request until the store's background read `ticket` is done.
    pub(crate) fn park_reading_pull(
        &mut self,
        request: Request,
        ticket: u64,
        first: bool,
        kind: Parked,
    ) {
        self.reading_pulls.push(ReadingPull {
            request,
            ticket,
            first,
            kind,
        });
    }

    /// The record at `offset` for a request that needs it (send-back, view
    /// by id, direct consumption), read as `read` says: the request back with
    /// the record; or `None` when the request was parked as `kind` until the
    /// store's background read is done, or answered SYSTEM_ERROR with the
    /// remark `missing` gives when the record is not there.
    pub(crate) fn record_for(
        &mut self,
        request: Box<Request>,
        offset: u64,
        read: PullRead,
        kind: Parked,
        missing: impl FnOnce() -> String,
    ) -> Option<(Box<Request>, Vec<u8>)> {
        match self.store_mut().record_at(offset, read) {
            Ok(RecordRead::Ready(Some(record))) => Some((request, record)),
            Ok(RecordRead::Reading(ticket)) => {
                self.park_reading_pull(*request, ticket, false, kind);
                None
            }
            Ok(RecordRead::Ready(None)) | Err(_) => {
                let answer = response(response_code::SYSTEM_ERROR, missing());
                self.reply(request.reply, answer);
                None
            }
        }
    }

    /// Executes a pull whose records not in memory are read as `read` says.
    fn pull_reading(&mut self, request: Request, now_ms: i64, first: bool, read: PullRead) {
        let header: PullMessageRequestHeader = match request.cmd.decode_custom_header() {
            Ok(header) => header,
            Err(error) => {
                return self.reply(
                    request.reply,
                    response(response_code::SYSTEM_ERROR, error.to_string()),
                );
            }
        };
        if !perm::is_readable(self.settings.broker_config.broker_permission as i32) {
            let remark = format!(
                "the broker[{}] pulling message is forbidden",
                self.settings.broker_config.broker_ip1
            );
            return self.reply(
                request.reply,
                response(response_code::NO_PERMISSION, remark),
            );
        }
        if !self.topics.contains(&header.topic) {
            self.refresh_snapshots();
        }
        let Some(topic) = self.topics.get(&header.topic) else {
            let remark = format!("topic[{}] not exist, apply first please!", header.topic);
            return self.reply(
                request.reply,
                response(response_code::TOPIC_NOT_EXIST, remark),
            );
        };
        if !perm::is_readable(topic.perm) {
            let remark = format!("the topic[{}] pulling message is forbidden", header.topic);
            return self.reply(
                request.reply,
                response(response_code::NO_PERMISSION, remark),
            );
        }
        let topic_sys_flag = topic.topic_sys_flag;
        if header.queue_id < 0 || header.queue_id >= topic.read_queue_nums {
            let remark = format!(
                "queueId[{}] is illegal, topic:[{}] topicConfig.readQueueNums:[{}] consumer:[{}]",
                header.queue_id, header.topic, topic.read_queue_nums, request.peer
            );
            return self.reply(request.reply, response(response_code::SYSTEM_ERROR, remark));
        }
        // The group's flags, and the brokers it pulls from normally and when
        // slow (`pull_route`); a group created on this pull has Java's
        // defaults.
        let (consume_enable, broadcast_enable, group_sys_flag, group_brokers) =
            match self.groups.get(&header.consumer_group) {
                Some(group) => (
                    group.consume_enable,
                    group.consume_broadcast_enable,
                    group.group_sys_flag,
                    (group.broker_id, group.which_broker_when_consume_slowly),
                ),
                None if self.groups.would_auto_create(&header.consumer_group) => {
                    self.ensure_group(&header.consumer_group, now_ms);
                    (true, true, 0, (MASTER_ID, 1))
                }
                None => {
                    let remark = format!(
                        "subscription group [{}] does not exist, apply first please!",
                        header.consumer_group
                    );
                    return self.reply(
                        request.reply,
                        response(response_code::SUBSCRIPTION_GROUP_NOT_EXIST, remark),
                    );
                }
            };
        if !consume_enable {
            let remark = format!(
                "subscription group no permission, {}",
                header.consumer_group
            );
            return self.reply(
                request.reply,
                response(response_code::NO_PERMISSION, remark),
            );
        }
        let flags = header.pull_sys_flag();
        let subscription = if flags.has_subscription() {
            let expression_type = header
                .expression_type
                .as_deref()
                .unwrap_or(EXPRESSION_TYPE_TAG);
            let expression = header.subscription.as_deref().unwrap_or("*");
            if expression_type.eq_ignore_ascii_case(EXPRESSION_TYPE_TAG) {
                Subscription::Codes(tag_codes(expression))
            } else if expression_type == EXPRESSION_TYPE_SQL92 && self.property_filter_enabled() {
                match compile(expression) {
                    Ok(filter) => Subscription::Sql(Arc::new(filter)),
                    Err(error) => Subscription::Refused(response(
                        response_code::SUBSCRIPTION_PARSE_FAILED,
                        error.to_string(),
                    )),
                }
            } else {
                Subscription::Refused(unsupported_filter(expression_type))
            }
        } else {
            match self.subs.pull_subscription(
                &header.consumer_group,
                &header.topic,
                header.sub_version,
                broadcast_enable,
            ) {
                Ok(data) if is_tag_type(Some(data.expression_type.as_str())) => {
                    Subscription::Codes(codes_of(data))
                }
                Ok(data) if !self.property_filter_enabled() => {
                    Subscription::Refused(unsupported_filter(&data.expression_type))
                }
                Ok(data) => match self
                    .subs
                    .filter(&header.consumer_group, &header.topic)
                    .map(|compiled| compiled.filter())
                {
                    Some(Ok(filter)) => Subscription::Sql(filter.clone()),
                    Some(Err(remark)) => Subscription::Refused(response(
                        response_code::SUBSCRIPTION_PARSE_FAILED,
                        remark.to_owned(),
                    )),
                    None => Subscription::Refused(response(
                        response_code::SUBSCRIPTION_PARSE_FAILED,
                        format!("no compiled filter for {}", data.sub_string),
                    )),
                },
                Err(error) => Subscription::Wait(error),
            }
        };
        let (codes, filter) = match subscription {
            Subscription::Codes(codes) => (codes, None),
            Subscription::Sql(filter) => (None, Some(filter)),
            Subscription::Refused(answer) => return self.reply(request.reply, answer),
            Subscription::Wait(error) => {
                let waitable = !matches!(error, PullSubscriptionError::BroadcastNotAllowed);
                let deadline = request
                    .cmd
                    .ext_fields
                    .get(WAIT_SINCE)
                    .and_then(|t| t.parse::<i64>().ok());
                let since = deadline.unwrap_or(now_ms);
                // Only a first processing waits: a held pull executed again
                // must neither wait again nor, later, store its (by now stale)
                // commit offset.
                if first && waitable && now_ms - since < SUBSCRIPTION_WAIT_MS && !self.stopping() {
                    let mut request = request;
                    request
                        .cmd
                        .ext_fields
                        .insert(WAIT_SINCE, &since.to_string());
                    let queue_id = header.queue_id as u32;
                    self.held.push(HeldPull {
                        request,
                        topic: header.topic,
                        queue_id,
                        deadline_ms: since + SUBSCRIPTION_WAIT_MS,
                        awaiting_subscription: true,
                    });
                    return;
                }
                let answer = response(error.code(), error.remark(&header.consumer_group));
                return self.reply(request.reply, answer);
            }
        };
        // A reset waiting for this group's pull of the queue (server-side
        // reset, `super::gather`) is handed over as PULL_OFFSET_MOVED with
        // the new offset; the consumer moves there. A pull already at that
        // offset just goes on. Either way the pull's commit offset, from
        // before the reset, is not stored.
        let reset = self
            .offsets
            .take_reset(&header.consumer_group, &header.topic, header.queue_id);
        if let Some(reset) = reset
            && reset != header.queue_offset
        {
            let queue_id = header.queue_id as u32;
            let store = self.store();
            let moved = offsets_header(
                reset,
                store.queue_min_offset(&header.topic, queue_id),
                store.queue_max_offset(&header.topic, queue_id),
                (topic_sys_flag, group_sys_flag),
            );
            let remark = format!(
                "the offset of group {} on queue {} was reset to {reset}",
                header.consumer_group, header.queue_id
            );
            let answer =
                RemotingCommand::new_response(response_code::PULL_OFFSET_MOVED, 0, Some(remark))
                    .with_custom_header(&moved);
            return self.reply(request.reply, answer);
        }
        let max_bytes = header
            .max_msg_bytes
            .filter(|bytes| *bytes > 0)
            .map_or(PULL_BYTES_MAX_DEFAULT, |bytes| bytes as usize);
        let offset = header.queue_offset.max(0) as u64;
        let queue_id = header.queue_id as u32;
        let max_count = header.max_msg_nums.max(1) as usize;
        let mut result = match self.store_mut().pull_messages(
            &header.topic,
            queue_id,
            offset,
            max_count,
            max_bytes,
            codes.as_deref(),
            read,
        ) {
            Ok(Pulled::Ready(result)) => result,
            Ok(Pulled::Reading(ticket)) => {
                // Executed again, as it is, once the store read its records.
                self.park_reading_pull(request, ticket, first, Parked::Pull);
                return;
            }
            Err(error) => {
                return self.reply(
                    request.reply,
                    response(response_code::SYSTEM_ERROR, error.to_string()),
                );
            }
        };
        if let Some(filter) = &filter {
            retain_matching(&mut result, filter);
        }
        // Java counts in the store's read: every read, found or not
        // (`getFoundTps`, `getMissTps`); found messages are answered below.
        self.stats.record_get(
            result.status == GetMessageStatus::Found,
            result.records.len() as u64,
        );
        if result.status == GetMessageStatus::Found {
            let (group, topic) = (&header.consumer_group, &header.topic);
            let count = result.records.len() as u64;
            let cluster = &self.settings.broker_config.broker_cluster_name;
            let table = &mut self.stats_table;
            table.add_for_group(StatsName::GroupGetNums, topic, group, count, now_ms);
            let size = result.body.len() as u64;
            table.add_for_group(StatsName::GroupGetSize, topic, group, size, now_ms);
            table.add(StatsName::BrokerGetNums, cluster, count, now_ms);
        }
        let (code, remark) = match result.status {
            GetMessageStatus::Found => (response_code::SUCCESS, None),
            GetMessageStatus::MessageWasRemoving | GetMessageStatus::NoMatchedMessage => {
                (response_code::PULL_RETRY_IMMEDIATELY, None)
            }
            GetMessageStatus::NoMatchedLogicQueue | GetMessageStatus::NoMessageInQueue => {
                if header.queue_offset != 0 {
                    (response_code::PULL_OFFSET_MOVED, None)
                } else {
                    (response_code::PULL_NOT_FOUND, None)
                }
            }
            GetMessageStatus::OffsetOverflowOne => (response_code::PULL_NOT_FOUND, None),
            GetMessageStatus::OffsetOverflowBadly | GetMessageStatus::OffsetTooSmall => (
                response_code::PULL_OFFSET_MOVED,
                Some(format!(
                    "the request offset {} is out of [{}, {}]",
                    header.queue_offset, result.min_offset, result.max_offset
                )),
            ),
        };
        // Java's `nextOffsetCorrection`: a slave's queues may trail its
        // master's, so it does not move a consumer's offset unless
        // `offsetCheckInSlave` says so.
        let next_begin_offset = if code == response_code::PULL_OFFSET_MOVED
            && !self.settings.is_master
            && !self.settings.broker_config.offset_check_in_slave
        {
            header.queue_offset
        } else {
            result.next_begin_offset as i64
        };
        let slow = result.records.last().is_some_and(|last| {
            let end = self.store().commit_log_max_offset();
            end.saturating_sub(last.commit_log_offset) > self.settings.slow_pull_lag_bytes
        });
        let route = pull_route(PullRouteInputs {
            slave_read_enable: self.settings.broker_config.slave_read_enable,
            slow,
            group_broker_id: group_brokers.0,
            group_slow_broker_id: group_brokers.1,
            on_slave: self.settings.broker_id != MASTER_ID,
            master_online: self.master_online(now_ms),
        });
        let (code, remark) = if route.redirect && code != response_code::SUCCESS {
            let remark = "the master is online: pull from it".to_owned();
            (response_code::PULL_RETRY_IMMEDIATELY, Some(remark))
        } else {
            (code, remark)
        };
        if first && flags.has_commit_offset() && self.settings.is_master && reset.is_none() {
            self.offsets.commit_from_pull(
                &header.consumer_group,
                &header.topic,
                header.queue_id,
                header.commit_offset,
                now_ms,
            );
        }
        if code == response_code::PULL_NOT_FOUND && first && flags.has_suspend() && !self.stopping()
        {
            let hold_ms = header.suspend_timeout_millis.max(0);
            self.held.push(HeldPull {
                request,
                topic: header.topic,
                queue_id,
                deadline_ms: now_ms.saturating_add(hold_ms),
                awaiting_subscription: false,
            });
            return;
        }
        let mut response_header = offsets_header(
            next_begin_offset,
            result.min_offset,
            result.max_offset,
            (topic_sys_flag, group_sys_flag),
        );
        response_header.suggest_which_broker_id = route.suggest;
        let mut answer =
            RemotingCommand::new_response(code, 0, remark).with_custom_header(&response_header);
        if code == response_code::SUCCESS {
            answer = answer.with_body(Bytes::from(result.body));
        }
        self.reply(request.reply, answer);
    }

    pub(crate) fn ensure_group(&mut self, group: &str, now_ms: i64) {
        if self.id == 0 {
            self.control_ensure_group(group, now_ms);
        } else if let Some(links) = &mut self.links {
            links.send(0, super::link::ShardMsg::EnsureGroup(group.to_owned()));
        }
    }

    fn property_filter_enabled(&self) -> bool {
        self.settings.broker_config.enable_property_filter
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping
    }

    /// An append to (topic, queue) was acknowledged: answer its held pulls.
    pub(crate) fn wake_held(&mut self, topic: &str, queue_id: u32, now_ms: i64) {
        if self.held.is_empty() {
            return;
        }
        let mut woken = Vec::new();
        let mut index = 0;
        while index < self.held.len() {
            let held = &self.held[index];
            if !held.awaiting_subscription && held.queue_id == queue_id && held.topic == topic {
                woken.push(self.held.swap_remove(index));
            } else {
                index += 1;
            }
        }
        for held in woken {
            self.pull(held.request, now_ms, false);
        }
    }

    /// A new snapshot arrived: retry the pulls that waited for it.
    pub(crate) fn retry_held_after_snapshot(&mut self, now_ms: i64) {
        if !self.held.iter().any(|held| held.awaiting_subscription) {
            return;
        }
        let (waiting, rest): (Vec<HeldPull>, Vec<HeldPull>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|held| held.awaiting_subscription);
        self.held = rest;
        for held in waiting {
            self.pull(held.request, now_ms, true);
        }
    }

    /// Answers the held pulls whose deadline passed.
    pub(crate) fn expire_held(&mut self, now_ms: i64) {
        if !self.held.iter().any(|held| held.deadline_ms <= now_ms) {
            return;
        }
        let (due, rest): (Vec<HeldPull>, Vec<HeldPull>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|held| held.deadline_ms <= now_ms);
        self.held = rest;
        for held in due {
            // A subscription wait past its deadline is answered by `pull`
            // itself (SUBSCRIPTION_NOT_EXIST); a message wait, not held again.
            let first = held.awaiting_subscription;
            self.pull(held.request, now_ms, first);
        }
    }

    /// A stop began: answer every held pull now.
    pub(crate) fn answer_all_held(&mut self, now_ms: i64) {
        self.stopping = true;
        let held = std::mem::take(&mut self.held);
        for held in held {
            self.pull(held.request, now_ms, false);
        }
    }
}

/// `MixAll.MASTER_ID`.
const MASTER_ID: i64 = 0;

/// What decides where a consumer pulls next (Java's `PullMessageProcessor`).
#[derive(Clone, Copy, Debug)]
struct PullRouteInputs {
    /// `slaveReadEnable` of this broker.
    slave_read_enable: bool,
    /// The pull's last record lies more than `accessMessageInMemoryMaxRatio`
    /// allows behind the log end (Java's `suggestPullingFromSlave`).
    slow: bool,
    /// The group's `brokerId`.
    group_broker_id: i64,
    /// The group's `whichBrokerWhenConsumeSlowly`.
    group_slow_broker_id: i64,
    /// This broker is a slave (`brokerId` ≠ 0).
    on_slave: bool,
    /// A slave's master is online ([`ShardHandler::master_online`]).
    master_online: bool,
}

/// Where a consumer pulls next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PullRoute {
    /// `suggestWhichBrokerId` of the answer.
    suggest: i64,
    /// A slave sends the consumer back to its online master: an answer
    /// without messages becomes PULL_RETRY_IMMEDIATELY (not held), so the
    /// consumer's next pull goes there at once.
    redirect: bool,
}

/// Java's rule: with `slaveReadEnable`, a slow consumer is sent to the
/// group's `whichBrokerWhenConsumeSlowly` and one keeping up to the
/// group's `brokerId`; without it, to the master. A slave whose master is
/// online sends a consumer that keeps up back to the master.
fn pull_route(inputs: PullRouteInputs) -> PullRoute {
    if inputs.on_slave && !inputs.slow && inputs.master_online {
        return PullRoute {
            suggest: MASTER_ID,
            redirect: true,
        };
    }
    let suggest = match (inputs.slave_read_enable, inputs.slow) {
        (false, _) => MASTER_ID,
        (true, true) => inputs.group_slow_broker_id,
        (true, false) => inputs.group_broker_id,
    };
    PullRoute {
        suggest,
        redirect: false,
    }
}

/// Internal ext field: when a pull started waiting for its subscription.
const WAIT_SINCE: &str = "ringmqWaitSince";

/// A pull answer's header: where the client goes on, the queue's offsets,
/// and the (topic, group) sys flags.
fn offsets_header(
    next_begin_offset: i64,
    min_offset: u64,
    max_offset: u64,
    (topic_sys_flag, group_sys_flag): (i32, i32),
) -> PullMessageResponseHeader {
    PullMessageResponseHeader {
        suggest_which_broker_id: 0,
        next_begin_offset,
        min_offset: min_offset as i64,
        max_offset: max_offset as i64,
        offset_delta: None,
        topic_sys_flag: Some(topic_sys_flag),
        group_sys_flag: Some(group_sys_flag),
        forbidden_type: None,
    }
}

fn codes_of(data: &SubscriptionData) -> Option<Vec<i32>> {
    if data.sub_string.trim().is_empty() || data.sub_string.trim() == "*" {
        None
    } else if !data.code_set.is_empty() {
        Some(data.code_set.clone())
    } else {
        tag_codes(&data.sub_string)
    }
}

/// Where a system queue's reader (a delay level, the timer wheel) is with
/// the store's background read of its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SystemQueueRead {
    /// The next pull reads in the background what is not in memory.
    Idle,
    /// The reader waits for this read (and is not polled meanwhile).
    Waiting(u64),
    /// Its read is done: the next pull reads what is still missing
    /// synchronously (`PullRead::AfterRead`).
    Done,
}

impl SystemQueueRead {
    /// Whether the reader waits for a background read.
    pub(crate) fn is_waiting(self) -> bool {
        matches!(self, SystemQueueRead::Waiting(_))
    }

    /// The store's background read `ticket` is done: true (and now
    /// [`SystemQueueRead::Done`]) if this reader waited for it.
    pub(crate) fn on_read_done(&mut self, ticket: u64) -> bool {
        if *self != SystemQueueRead::Waiting(ticket) {
            return false;
        }
        *self = SystemQueueRead::Done;
        true
    }
}

/// Up to `count` records of system queue `topic`/`queue_id` (a delay
/// level's, the timer wheel's) from `read_from`, as a pull reads them (see
/// [`PullRead`]), `read` saying where the reader's background read is:
/// `Err(())` while the store reads the first ones in the background (`read`
/// then waits for it); `Ok(None)` when the read failed (logged; the entries
/// are then read one by one by [`system_queue_record`]).
pub(crate) fn pull_system_queue(
    store: &mut Store<UringDisk>,
    topic: &str,
    queue_id: u32,
    read_from: i64,
    count: usize,
    read: &mut SystemQueueRead,
) -> Result<Option<GetMessagesResult>, ()> {
    let mode = match std::mem::replace(read, SystemQueueRead::Idle) {
        SystemQueueRead::Done => PullRead::AfterRead,
        SystemQueueRead::Idle | SystemQueueRead::Waiting(_) => PullRead::Background,
    };
    let pulled = store.pull_messages(
        topic,
        queue_id,
        read_from as u64,
        count,
        GET_MESSAGES_BYTES_MAX,
        None,
        mode,
    );
    match pulled {
        Ok(Pulled::Ready(result)) => Ok(Some(result)),
        Ok(Pulled::Reading(ticket)) => {
            *read = SystemQueueRead::Waiting(ticket);
            Err(())
        }
        Err(error) => {
            tracing::warn!(%error, topic, queue_id, "reading a system queue's records failed");
            Ok(None)
        }
    }
}

/// The record of the `i`-th entry `cq` of a system queue read from
/// `read_from` (the delay levels' and the timer wheel's): the one `pulled`
/// gave for it; the first entry's read directly when the pull did not give
/// it (a record the log no longer holds: `Some(None)`, dropped or fired by
/// the caller); `None` for a later one the pull left out (not in memory:
/// the caller stops there and reads it next time).
pub(crate) fn system_queue_record(
    store: &mut Store<UringDisk>,
    pulled: Option<&GetMessagesResult>,
    i: usize,
    read_from: i64,
    cq: &CqEntry,
) -> Option<Option<Vec<u8>>> {
    let queue_offset = read_from + i as i64;
    let found = pulled.and_then(|result| {
        let found = result.records.get(i)?;
        (found.queue_offset == queue_offset as u64)
            .then(|| result.body[found.range.clone()].to_vec())
    });
    match found {
        Some(record) => Some(Some(record)),
        None if i == 0 => Some(store.read_record(cq.commit_log_offset).ok().flatten()),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(records: &[Vec<u8>]) -> GetMessagesResult {
        let mut result = GetMessagesResult {
            status: GetMessageStatus::Found,
            next_begin_offset: records.len() as u64 + 10,
            min_offset: 0,
            max_offset: 20,
            body: Vec::new(),
            records: Vec::new(),
        };
        for (index, bytes) in records.iter().enumerate() {
            let start = result.body.len();
            result.body.extend_from_slice(bytes);
            result.records.push(FoundRecord {
                queue_offset: 10 + index as u64,
                commit_log_offset: 1000 * index as u64,
                range: start..result.body.len(),
            });
        }
        result
    }

    fn record(a: &str) -> Vec<u8> {
        crate::features::test_support::record_bytes("T", 0, &[("a", a)], 0)
    }

    fn route(
        slave_read_enable: bool,
        slow: bool,
        on_slave: bool,
        master_online: bool,
    ) -> PullRoute {
        pull_route(PullRouteInputs {
            slave_read_enable,
            slow,
            group_broker_id: 0,
            group_slow_broker_id: 3,
            on_slave,
            master_online,
        })
    }

    #[test]
    fn a_master_suggests_the_slow_brokers_id_only_with_slave_read_enabled() {
        let keep = PullRoute {
            suggest: MASTER_ID,
            redirect: false,
        };
        assert_eq!(route(false, false, false, false), keep);
        assert_eq!(route(false, true, false, false), keep);
        assert_eq!(route(true, false, false, false), keep);
        let slow = PullRoute {
            suggest: 3,
            redirect: false,
        };
        assert_eq!(route(true, true, false, false), slow);
        let group_broker = pull_route(PullRouteInputs {
            slave_read_enable: true,
            slow: false,
            group_broker_id: 2,
            group_slow_broker_id: 3,
            on_slave: false,
            master_online: false,
        });
        assert_eq!(
            group_broker.suggest, 2,
            "a consumer keeping up goes to the group's brokerId"
        );
    }

    #[test]
    fn a_slave_sends_a_consumer_that_keeps_up_back_to_its_online_master() {
        let back = PullRoute {
            suggest: MASTER_ID,
            redirect: true,
        };
        assert_eq!(route(true, false, true, true), back);
        assert_eq!(route(false, false, true, true), back);
        // A slow consumer stays where the rule puts it.
        assert_eq!(route(true, true, true, true).suggest, 3);
        assert!(!route(true, true, true, true).redirect);
        assert_eq!(route(false, true, true, true).suggest, MASTER_ID);
        assert!(!route(false, true, true, true).redirect);
        // Without its master the slave serves everyone.
        assert!(!route(true, false, true, false).redirect);
        assert!(!route(false, false, true, false).redirect);
    }

    #[test]
    fn the_slow_lag_is_the_memory_share_split_over_the_shards() {
        use crate::shard::runtime::slow_pull_lag_bytes;
        let gib = 1u64 << 30;
        assert_eq!(slow_pull_lag_bytes(24 * gib, 40, 1), 24 * gib * 40 / 100);
        assert_eq!(
            slow_pull_lag_bytes(24 * gib, 40, 2),
            24 * gib * 40 / 100 / 2
        );
        assert_eq!(slow_pull_lag_bytes(24 * gib, 0, 2), 0);
        assert_eq!(slow_pull_lag_bytes(24 * gib, 100, 0), 24 * gib);
    }

    #[test]
    fn a_sql_filter_keeps_only_matching_records_and_the_next_offset() {
        let filter = compile("a > 1").unwrap();
        let mut result = found(&[record("1"), record("2"), record("x"), record("3")]);
        retain_matching(&mut result, &filter);
        assert_eq!(result.status, GetMessageStatus::Found);
        assert_eq!(
            result.next_begin_offset, 14,
            "skipped records stay consumed"
        );
        let kept: Vec<u64> = result.records.iter().map(|r| r.queue_offset).collect();
        assert_eq!(kept, vec![11, 13]);
        for found in &result.records {
            let view = decode_record(&result.body[found.range.clone()], CrcCheck::Verify).unwrap();
            assert!(filter.matches_properties(view.properties()));
        }
    }

    #[test]
    fn a_sql_filter_matching_nothing_reports_no_matched_message() {
        let filter = compile("a = 100").unwrap();
        let mut result = found(&[record("1"), record("2")]);
        retain_matching(&mut result, &filter);
        assert_eq!(result.status, GetMessageStatus::NoMatchedMessage);
        assert!(result.records.is_empty() && result.body.is_empty());
        assert_eq!(result.next_begin_offset, 12);
    }

    #[test]
    fn tag_expressions_become_java_hash_codes() {
        assert_eq!(tag_codes("*"), None);
        assert_eq!(tag_codes(" "), None);
        assert_eq!(
            tag_codes("TagA || TagB"),
            Some(vec![
                java_string_hash_code("TagA"),
                java_string_hash_code("TagB")
            ])
        );
    }
}
