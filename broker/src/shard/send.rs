//! SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
//! CONSUMER_SEND_MSG_BACK (36) on the queue's owner shard: checks as
//! Java's `SendMessageProcessor` makes them, the append, and the answer
//! when the store acknowledges it.
//!
//! The put path ([`crate::features::route_put`]) runs before the owner
//! check: a message with `DELAY` (or a half message) is rebuilt as an
//! internal SEND_MESSAGE to its system queue carrying [`DIRECT_MARK`] (the
//! real queue id, which the answer reports, as Java's `SendMessageProcessor`
//! answers `queueId` of the request and `queueOffset` of the stored record)
//! and routed to that queue's owner, which appends it without further
//! checks. Internal deliveries of due messages ([`super::schedule`]) use the
//! same mark.
//!
//! A send-back reads the original record on the shard in the top byte of
//! its offset and turns it into an internal SEND_MESSAGE to `%RETRY%<group>`
//! with `DELAY = 3 + reconsumeTimes` (or the client's level), or to
//! `%DLQ%<group>` past `maxReconsumeTimes` ([`crate::features::retry`]),
//! routed like any send, so the retry goes through the schedule topic.
//!
//! # Invariants
//! - Every accepted append has exactly one [`PendingSend`], answered and
//!   removed when its ack arrives.
//! - A client request never carries an internal mark: the server's handler
//!   blanks them ([`neutralize_internal_marks`]) before routing.

use bytes::Bytes;
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::header::{
    ConsumerSendMsgBackRequestHeader, CustomHeader, DEFAULT_REGION, SendMessageRequestHeader,
    SendMessageRequestHeaderV2, SendMessageResponseHeader, ViewMessageRequestHeader,
};
use ringmq_protocol::json::SubscriptionGroupConfig;
use ringmq_protocol::message::properties::rewrite_properties;
use ringmq_protocol::message::property_key::{
    CLUSTER, DELAY, START_DELIVER_TIME, TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS,
    TRAN_MSG, UNIQ_KEY,
};
use ringmq_protocol::message::{
    CrcCheck, OFFSET_MSG_ID_LEN_MAX, Properties, decode_record, iter_batch, offset_msg_id,
    push_offset_msg_id,
};
use ringmq_storage::error::StorageError;
use ringmq_storage::store::{AckStatus, AppendAck, AppendMessage, PullRead};

use super::control::AfterPersist;
use super::link::{ReplyTo, Request};
use super::pull::Parked;
use super::{ShardHandler, response};
use crate::features::timer::TimerConfig;
use crate::features::{PutError, PutRoute, Redirect, retry, route_put};
use crate::stats_table::StatsName;
use crate::topic_config::{
    AUTO_CREATE_TOPIC_KEY_TOPIC, DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, dlq_topic, perm,
    retry_topic,
};

/// Largest properties string of one message (Java: `Short.MAX_VALUE`).
pub const PROPERTIES_SIZE_MAX: usize = i16::MAX as usize;
/// Internal ext field of a send built by a send-back: the retry-to-DLQ
/// decision is already made. Never sent to a client.
const SEND_BACK_MARK: &str = "ringmqSendBack";
/// Internal ext field of a send to store as is (no topic checks, no put
/// path): its value is the queue id the answer reports.
pub(crate) const DIRECT_MARK: &str = "ringmqDirect";

/// Blanks the internal marks of a command that came from a client.
pub(crate) fn neutralize_internal_marks(cmd: &mut RemotingCommand) {
    for mark in [SEND_BACK_MARK, DIRECT_MARK] {
        if cmd.ext_fields.contains_key(mark) {
            cmd.ext_fields.insert(mark, "");
        }
    }
}

fn has_mark(cmd: &RemotingCommand, mark: &str) -> bool {
    cmd.ext_fields
        .get(mark)
        .is_some_and(|value| !value.is_empty())
}

/// Whether `properties` has a key the put path reads (DELAY, TRAN_MSG,
/// timer keys): without one, a message is stored where it was sent.
fn has_feature_property(properties: &[u8]) -> bool {
    const KEYS: [&str; 6] = [
        DELAY,
        TRAN_MSG,
        TIMER_DELIVER_MS,
        TIMER_DELAY_SEC,
        TIMER_DELAY_MS,
        START_DELIVER_TIME,
    ];
    Properties::new(properties)
        .iter()
        .any(|(key, _)| KEYS.iter().any(|k| k.as_bytes() == key))
}

/// `header` as a SEND_MESSAGE (V1) command with `body`, for internal sends.
fn rebuilt_send(
    header: &SendMessageRequestHeader,
    body: Option<Bytes>,
    opaque: i32,
) -> RemotingCommand {
    let mut ext = ExtFields::new();
    header.to_ext(&mut ext);
    let mut cmd = RemotingCommand::new_request(request_code::SEND_MESSAGE, ext);
    cmd.body = body;
    cmd.opaque = opaque;
    cmd
}

/// An append waiting for its ack.
#[derive(Debug)]
pub(crate) struct PendingSend {
    reply: ReplyTo,
    topic: String,
    queue_id: u32,
    /// The queue id the answer reports (the real queue of a redirected send).
    answer_queue_id: u32,
    msg_ids: String,
    uniq_key: Option<String>,
    /// Body bytes and records appended, when (for the runtime counters).
    body_bytes: u64,
    /// Record bytes appended (Java's `wroteBytes`, TOPIC_PUT_SIZE).
    wrote_bytes: u64,
    records: u32,
    appended_ms: i64,
}

fn decode_send_header(cmd: &RemotingCommand) -> Result<SendMessageRequestHeader, String> {
    if cmd.code == request_code::SEND_MESSAGE {
        cmd.decode_custom_header::<SendMessageRequestHeader>()
            .map_err(|error| error.to_string())
    } else {
        cmd.decode_custom_header::<SendMessageRequestHeaderV2>()
            .map(SendMessageRequestHeader::from)
            .map_err(|error| error.to_string())
    }
}

fn illegal_message(max: usize) -> RemotingCommand {
    response(
        response_code::MESSAGE_ILLEGAL,
        format!(
            "the message is illegal, maybe msg body or properties length not matched. msg body \
             length limit {max}B, msg properties length limit 32KB."
        ),
    )
}

fn with_cluster(properties: &[u8], cluster: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(properties.len() + cluster.len() + 10);
    rewrite_properties(properties, &[], &[(CLUSTER, cluster)], &mut out)
        .map_err(|error| error.to_string())?;
    Ok(out)
}

/// What a slave answers a write (Java's store answers SERVICE_NOT_AVAILABLE
/// to a put on a slave).
fn slave_refuses_writes() -> RemotingCommand {
    response(
        response_code::SERVICE_NOT_AVAILABLE,
        "service not available now: this broker is a slave (brokerRole=SLAVE); send to its master",
    )
}

impl ShardHandler {
    /// NO_PERMISSION when `brokerPermission` lacks write (Java's answer to
    /// a send-back, or a send to an order topic, on such a broker).
    fn broker_refuses_writes(&self) -> Option<RemotingCommand> {
        let config = &self.settings.broker_config;
        (!perm::is_writeable(config.broker_permission as i32)).then(|| {
            let remark = format!(
                "the broker[{}] sending message is forbidden",
                config.broker_ip1
            );
            response(response_code::NO_PERMISSION, remark)
        })
    }

    pub(crate) fn send(&mut self, request: Box<Request>, now_ms: i64) {
        if !self.settings.is_master {
            return self.reply(request.reply, slave_refuses_writes());
        }
        let header = match decode_send_header(&request.cmd) {
            Ok(header) => header,
            Err(remark) => {
                return self.reply(request.reply, response(response_code::SYSTEM_ERROR, remark));
            }
        };
        if has_mark(&request.cmd, DIRECT_MARK) {
            return self.send_direct(&header, request, now_ms);
        }
        if !self.topics.contains(&header.topic) {
            self.refresh_snapshots();
        }
        let Some(config) = self.topics.get(&header.topic).cloned() else {
            if self.id != 0 {
                return self.forward(0, request);
            }
            match self.control_resolve_send_topic(&header, now_ms) {
                Ok(ticket) if self.topics.contains(&header.topic) => {
                    return match ticket {
                        Some(ticket) => {
                            self.await_persist(vec![ticket], AfterPersist::Dispatch(request));
                        }
                        None => self.dispatch(request, now_ms),
                    };
                }
                Ok(_) => {
                    let remark = format!("topic[{}] not exist, apply first please!", header.topic);
                    return self.reply(
                        request.reply,
                        response(response_code::TOPIC_NOT_EXIST, remark),
                    );
                }
                Err((code, remark)) => return self.reply(request.reply, response(code, remark)),
            }
        };
        if let Some(ticket) = self.unshown_topic(&header.topic) {
            // Shard 0: the topic's snapshot waits for topics.json (see
            // control.rs); so does its send.
            return self.await_persist(vec![ticket], AfterPersist::Dispatch(request));
        }
        if let Some(number) = self.unrouted_topic(&header.topic) {
            // Shard 0: the name servers may not route the topic yet.
            return self.await_registration(number, AfterPersist::Dispatch(request), now_ms);
        }
        // Java refuses only order topics here: producers of the others stop
        // choosing this broker once the name server routes it without write
        // permission, and the sends already on their way still land.
        if config.order
            && let Some(refused) = self.broker_refuses_writes()
        {
            return self.reply(request.reply, refused);
        }
        if !perm::is_writeable(config.perm) {
            let remark = format!("the topic[{}] sending message is forbidden", header.topic);
            return self.reply(
                request.reply,
                response(response_code::NO_PERMISSION, remark),
            );
        }
        let valid_ids = config.write_queue_nums.max(config.read_queue_nums);
        if header.queue_id >= valid_ids || (header.queue_id < 0 && config.write_queue_nums <= 0) {
            let remark = format!(
                "request queueId[{}] is illegal, topic:[{}] topicConfig.writeQueueNums:[{}] \
                 Producer:[{}]",
                header.queue_id, header.topic, config.write_queue_nums, request.peer
            );
            return self.reply(request.reply, response(response_code::SYSTEM_ERROR, remark));
        }
        let queue_id = if header.queue_id < 0 {
            self.pick_queue(config.write_queue_nums as u32)
        } else {
            header.queue_id as u32
        };
        let send_back = has_mark(&request.cmd, SEND_BACK_MARK);
        if header.topic.starts_with(RETRY_GROUP_TOPIC_PREFIX)
            && !send_back
            && let Some(redirected) = self.retry_to_dlq(&header, &request)
        {
            return match redirected {
                Ok(request) => self.dispatch(request, now_ms),
                Err(answer) => self.reply(request.reply, answer),
            };
        }
        let is_batch =
            request.cmd.code == request_code::SEND_BATCH_MESSAGE || header.batch == Some(true);
        if !is_batch {
            match self.put_redirect(&header, queue_id, send_back, now_ms) {
                Ok(None) => {}
                Ok(Some(redirect)) => {
                    let mut redirected = header.clone();
                    redirected.topic = redirect.topic.to_owned();
                    redirected.queue_id = redirect.queue_id;
                    redirected.sys_flag = redirect.sys_flag;
                    redirected.properties =
                        Some(String::from_utf8_lossy(&redirect.properties).into_owned());
                    let mut cmd =
                        rebuilt_send(&redirected, request.cmd.body.clone(), request.cmd.opaque);
                    cmd.ext_fields.insert(DIRECT_MARK, &queue_id.to_string());
                    let internal = Request {
                        cmd,
                        reply: request.reply,
                        peer: request.peer,
                    };
                    return self.dispatch(Box::new(internal), now_ms);
                }
                Err((code, remark)) => return self.reply(request.reply, response(code, remark)),
            }
        }
        let owner = self.router.shard_of(queue_id).0;
        if owner != self.id {
            let mut request = request;
            let key = if request.cmd.code == request_code::SEND_MESSAGE {
                "queueId"
            } else {
                "e"
            };
            request.cmd.ext_fields.insert(key, &queue_id.to_string());
            return self.forward(owner, request);
        }
        self.append(&header, queue_id, queue_id, is_batch, *request, now_ms);
    }

    /// The put path's decision for a single message (Java's order, see
    /// [`route_put`]): `Some` system queue to store it in instead. A
    /// send-back copy is never a half message (Java puts it directly).
    fn put_redirect(
        &self,
        header: &SendMessageRequestHeader,
        queue_id: u32,
        send_back: bool,
        now_ms: i64,
    ) -> Result<Option<Redirect>, (i32, String)> {
        let properties = header.properties.as_deref().unwrap_or("").as_bytes();
        if !has_feature_property(properties) {
            // The common case, in one pass over the properties.
            return Ok(None);
        }
        let route = route_put(
            self.delay.levels(),
            &TimerConfig::default(),
            &header.topic,
            queue_id as i32,
            header.sys_flag,
            properties,
            header.reconsume_times.unwrap_or(0),
            now_ms,
        );
        match route {
            Ok(PutRoute::Direct) => Ok(None),
            Ok(PutRoute::Half(_)) if send_back => Ok(None),
            Ok(PutRoute::Schedule(redirect)) | Ok(PutRoute::Half(redirect)) => Ok(Some(redirect)),
            Ok(PutRoute::Timer(redirect)) => match self.timer_admits() {
                Ok(()) => Ok(Some(redirect)),
                Err(error) => Err((
                    PutError::from(error.clone()).response_code(),
                    error.to_string(),
                )),
            },
            Err(error) => Err((error.response_code(), error.to_string())),
        }
    }

    /// A send with [`DIRECT_MARK`]: stored as is on its queue's owner.
    fn send_direct(
        &mut self,
        header: &SendMessageRequestHeader,
        request: Box<Request>,
        now_ms: i64,
    ) {
        let answer_queue_id = request
            .cmd
            .ext_fields
            .get(DIRECT_MARK)
            .and_then(|text| text.parse::<u32>().ok());
        let (Ok(queue_id), Some(answer_queue_id)) =
            (u32::try_from(header.queue_id), answer_queue_id)
        else {
            let remark = format!("internal send to a bad queue {}", header.queue_id);
            return self.reply(request.reply, response(response_code::SYSTEM_ERROR, remark));
        };
        let owner = self.router.shard_of(queue_id).0;
        if owner != self.id {
            return self.forward(owner, request);
        }
        self.append(header, queue_id, answer_queue_id, false, *request, now_ms);
    }

    /// For a `%RETRY%` send past its group's max reconsume times: the same
    /// request aimed at the group's DLQ (Java's `handleRetryAndDLQ`).
    fn retry_to_dlq(
        &self,
        header: &SendMessageRequestHeader,
        request: &Request,
    ) -> Option<Result<Box<Request>, RemotingCommand>> {
        let group = header.topic.strip_prefix(RETRY_GROUP_TOPIC_PREFIX)?;
        let Some(config) = self.groups.get(group) else {
            return Some(Err(response(
                response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
                format!("subscription group not exist, {group}"),
            )));
        };
        let max = header.max_reconsume_times.unwrap_or(config.retry_max_times);
        let times = header.reconsume_times.unwrap_or(0);
        if times < max {
            return None;
        }
        let mut request = Box::new(request.clone());
        let (topic_key, queue_key) = if request.cmd.code == request_code::SEND_MESSAGE {
            ("topic", "queueId")
        } else {
            ("b", "e")
        };
        request.cmd.ext_fields.insert(topic_key, &dlq_topic(group));
        request.cmd.ext_fields.insert(queue_key, "0");
        // A dead letter is stored at once: its DELAY goes.
        let properties_key = if request.cmd.code == request_code::SEND_MESSAGE {
            "properties"
        } else {
            "i"
        };
        if let Some(properties) = header.properties.as_deref() {
            let mut out = Vec::with_capacity(properties.len());
            if rewrite_properties(properties.as_bytes(), &[DELAY], &[], &mut out).is_ok() {
                request
                    .cmd
                    .ext_fields
                    .insert(properties_key, &String::from_utf8_lossy(&out));
            }
        }
        Some(Ok(request))
    }

    fn append(
        &mut self,
        header: &SendMessageRequestHeader,
        queue_id: u32,
        answer_queue_id: u32,
        is_batch: bool,
        request: Request,
        now_ms: i64,
    ) {
        let max = self.settings.max_message_size;
        let body = request.cmd.body_bytes();
        if body.is_empty() || body.len() > max {
            return self.reply(request.reply, illegal_message(max));
        }
        let base_properties = header.properties.as_deref().unwrap_or("").as_bytes();
        let cluster = self.settings.cluster_name.clone();
        let reconsume_times = header.reconsume_times.unwrap_or(0);
        // The store timestamp is read now, not taken from the loop turn's
        // clock: a request forwarded from another shard can arrive after
        // this turn read it, and a delay level's delivery time (store time
        // plus the delay) must never come before the client's send.
        let now = crate::shard::runtime::wall_clock_ms().max(now_ms).max(0) as u64;
        let result = if is_batch {
            let mut entries = Vec::new();
            for entry in iter_batch(body) {
                match entry {
                    Ok(entry) => match with_cluster(entry.properties, &cluster) {
                        Ok(properties) => entries.push((entry.flag, entry.body, properties)),
                        Err(remark) => {
                            return self.reply(
                                request.reply,
                                response(response_code::MESSAGE_ILLEGAL, remark),
                            );
                        }
                    },
                    Err(fault) => {
                        let remark = format!("the batch body is malformed: {fault}");
                        return self.reply(
                            request.reply,
                            response(response_code::MESSAGE_ILLEGAL, remark),
                        );
                    }
                }
            }
            if entries.is_empty()
                || entries
                    .iter()
                    .any(|(_, _, p)| p.len() > PROPERTIES_SIZE_MAX)
            {
                return self.reply(request.reply, illegal_message(max));
            }
            let messages: Vec<AppendMessage<'_>> = entries
                .iter()
                .map(|(flag, body, properties)| AppendMessage {
                    topic: &header.topic,
                    queue_id,
                    body,
                    properties,
                    flag: *flag,
                    sys_flag: header.sys_flag,
                    born_timestamp_ms: header.born_timestamp,
                    born_host: request.peer,
                    reconsume_times,
                    prepared_transaction_offset: 0,
                })
                .collect();
            self.store_mut().append_batch(&messages, now)
        } else {
            let properties = match with_cluster(base_properties, &cluster) {
                Ok(properties) if properties.len() <= PROPERTIES_SIZE_MAX => properties,
                Ok(_) => return self.reply(request.reply, illegal_message(max)),
                Err(remark) => {
                    return self.reply(
                        request.reply,
                        response(response_code::MESSAGE_ILLEGAL, remark),
                    );
                }
            };
            let message = AppendMessage {
                topic: &header.topic,
                queue_id,
                body,
                properties: &properties,
                flag: header.flag,
                sys_flag: header.sys_flag,
                born_timestamp_ms: header.born_timestamp,
                born_host: request.peer,
                reconsume_times,
                prepared_transaction_offset: 0,
            };
            self.store_mut().append(&message, now)
        };
        match result {
            Ok(ticket) => {
                let host = self.settings.store_host;
                let msg_ids = if ticket.batch_commit_log_offsets.is_empty() {
                    offset_msg_id(&host, ticket.commit_log_offset as i64)
                } else {
                    let offsets = &ticket.batch_commit_log_offsets;
                    let mut ids =
                        String::with_capacity(offsets.len() * (OFFSET_MSG_ID_LEN_MAX + 1));
                    for (index, offset) in offsets.iter().enumerate() {
                        if index > 0 {
                            ids.push(',');
                        }
                        push_offset_msg_id(&mut ids, &host, *offset as i64);
                    }
                    ids
                };
                let uniq_key = if is_batch {
                    None
                } else {
                    Properties::new(base_properties)
                        .get(UNIQ_KEY)
                        .map(str::to_owned)
                };
                self.pending_sends.insert(
                    ticket.id,
                    PendingSend {
                        reply: request.reply,
                        topic: header.topic.clone(),
                        queue_id,
                        answer_queue_id,
                        msg_ids,
                        uniq_key,
                        body_bytes: body.len() as u64,
                        wrote_bytes: u64::from(ticket.wrote_bytes),
                        records: ticket.message_count,
                        appended_ms: now_ms,
                    },
                );
            }
            Err(error) => {
                let answer = match &error {
                    StorageError::DiskFull { .. } | StorageError::NotWritable { .. } => response(
                        response_code::SERVICE_NOT_AVAILABLE,
                        format!("service not available now: {error}"),
                    ),
                    StorageError::Busy { .. } => response(
                        response_code::SYSTEM_BUSY,
                        format!("[PC_SYNCHRONIZED]broker busy: {error}"),
                    ),
                    StorageError::MessageTooLarge { .. }
                    | StorageError::InvalidArgument(_)
                    | StorageError::Record { .. } => {
                        response(response_code::MESSAGE_ILLEGAL, error.to_string())
                    }
                    _ => response(response_code::SYSTEM_ERROR, error.to_string()),
                };
                self.reply(request.reply, answer);
            }
        }
    }

    pub(crate) fn on_ack(&mut self, ack: AppendAck, now_ms: i64) {
        let Some(pending) = self.pending_sends.remove(&ack.id) else {
            tracing::error!(id = ack.id, "an ack without a pending send");
            return;
        };
        let code = match &ack.status {
            AckStatus::Ok => response_code::SUCCESS,
            AckStatus::FlushTimeout => response_code::FLUSH_DISK_TIMEOUT,
            AckStatus::Failed(reason) => {
                let answer = response(
                    response_code::SYSTEM_ERROR,
                    format!("storing the message failed: {reason}"),
                );
                self.reply(pending.reply, answer);
                return;
            }
        };
        let latency_ms = now_ms.saturating_sub(pending.appended_ms);
        let records = u64::from(pending.records.max(1));
        for _ in 0..records {
            self.stats
                .record_put(pending.body_bytes / records, latency_ms);
        }
        let cluster = &self.settings.broker_config.broker_cluster_name;
        let table = &mut self.stats_table;
        table.add(StatsName::TopicPutNums, &pending.topic, records, now_ms);
        table.add(
            StatsName::TopicPutSize,
            &pending.topic,
            pending.wrote_bytes,
            now_ms,
        );
        table.add(StatsName::BrokerPutNums, cluster, records, now_ms);
        let mut header = SendMessageResponseHeader {
            msg_id: pending.msg_ids,
            queue_id: pending.answer_queue_id as i32,
            queue_offset: ack.queue_offset as i64,
            transaction_id: pending.uniq_key,
            ..SendMessageResponseHeader::default()
        };
        header.set_region(DEFAULT_REGION, true);
        let answer = RemotingCommand::new_response(code, 0, None).with_custom_header(&header);
        if code == response_code::SUCCESS && self.waits_for_slave(pending.reply) {
            self.await_slave(pending.reply, answer, now_ms);
        } else {
            self.reply(pending.reply, answer);
        }
        self.wake_held(&pending.topic, pending.queue_id, now_ms);
    }

    /// CONSUMER_SEND_MSG_BACK on the shard holding the original record.
    pub(crate) fn send_back(&mut self, request: Box<Request>, now_ms: i64) {
        self.send_back_reading(request, now_ms, PullRead::Background);
    }

    /// CONSUMER_SEND_MSG_BACK, the original record read as `read` says: in
    /// the background the first time (the request is parked with the
    /// pulls, see `run_reading_pulls`), synchronously if still missing when
    /// it runs again after that read.
    pub(crate) fn send_back_reading(&mut self, request: Box<Request>, now_ms: i64, read: PullRead) {
        if !self.settings.is_master {
            return self.reply(request.reply, slave_refuses_writes());
        }
        let header: ConsumerSendMsgBackRequestHeader = match request.cmd.decode_custom_header() {
            Ok(header) => header,
            Err(error) => {
                return self.reply(
                    request.reply,
                    response(response_code::SYSTEM_ERROR, error.to_string()),
                );
            }
        };
        let group = match self.groups.get(&header.group) {
            Some(group) => group.clone(),
            // Java's findSubscriptionGroupConfig creates it here too.
            None if self.groups.would_auto_create(&header.group) => {
                self.ensure_group(&header.group, now_ms);
                SubscriptionGroupConfig::new(&header.group)
            }
            None => {
                let remark = format!("subscription group not exist, {}", header.group);
                return self.reply(
                    request.reply,
                    response(response_code::SUBSCRIPTION_GROUP_NOT_EXIST, remark),
                );
            }
        };
        if let Some(refused) = self.broker_refuses_writes() {
            return self.reply(request.reply, refused);
        }
        if group.retry_queue_nums <= 0 {
            return self.reply(request.reply, super::success());
        }
        let missing = || format!("look message by offset failed, {}", header.offset);
        let offset = header.offset as u64;
        let Some((request, record)) =
            self.record_for(request, offset, read, Parked::SendBack, missing)
        else {
            return;
        };
        let view = match decode_record(&record, CrcCheck::Skip) {
            Ok(view) => view,
            Err(error) => {
                return self.reply(
                    request.reply,
                    response(response_code::SYSTEM_ERROR, error.to_string()),
                );
            }
        };
        let max = retry::max_reconsume_times(&group, &header);
        let target = retry::send_back_target(view.reconsume_times(), header.delay_level, max);
        let (topic, queue_id) = match target {
            retry::SendBackTarget::DeadLetter => (dlq_topic(&header.group), 0),
            retry::SendBackTarget::Retry { .. } => {
                let queue_nums = group.retry_queue_nums.max(1) as u32;
                (retry_topic(&header.group), self.pick_any_queue(queue_nums))
            }
        };
        let repost = match retry::send_back_repost(&view, target, &topic, queue_id as i32) {
            Ok(repost) => repost,
            Err(error) => {
                return self.reply(
                    request.reply,
                    response(error.response_code(), error.to_string()),
                );
            }
        };
        let send = SendMessageRequestHeader {
            producer_group: header.group.clone(),
            topic,
            default_topic: AUTO_CREATE_TOPIC_KEY_TOPIC.to_owned(),
            default_topic_queue_nums: 1,
            queue_id: queue_id as i32,
            sys_flag: repost.sys_flag,
            born_timestamp: view.born_timestamp_ms(),
            flag: view.flag(),
            properties: Some(String::from_utf8_lossy(&repost.properties).into_owned()),
            reconsume_times: Some(repost.reconsume_times),
            unit_mode: Some(header.unit_mode),
            batch: None,
            max_reconsume_times: None,
            broker_name: None,
        };
        // Counted when the repost is sent on (Java counts once it is stored).
        self.stats_table.add_for_group(
            StatsName::SendBackPutNums,
            view.topic(),
            &header.group,
            1,
            now_ms,
        );
        let mut ext = ExtFields::new();
        send.to_ext(&mut ext);
        ext.insert(SEND_BACK_MARK, "true");
        let mut cmd = RemotingCommand::new_request(request_code::SEND_MESSAGE, ext);
        cmd.body = Some(Bytes::copy_from_slice(view.body()));
        cmd.opaque = request.reply.opaque;
        let synthetic = Request {
            cmd,
            reply: request.reply,
            peer: view.born_host(),
        };
        self.dispatch(Box::new(synthetic), now_ms);
    }

    /// VIEW_MESSAGE_BY_ID (33) on the shard in the top byte of the offset:
    /// the stored record as the body.
    pub(crate) fn view_message(&mut self, request: Box<Request>) {
        self.view_message_reading(request, PullRead::Background);
    }

    /// VIEW_MESSAGE_BY_ID, the record read as `read` says (as
    /// [`ShardHandler::send_back_reading`]).
    pub(crate) fn view_message_reading(&mut self, request: Box<Request>, read: PullRead) {
        let header: ViewMessageRequestHeader = match request.cmd.decode_custom_header() {
            Ok(header) => header,
            Err(error) => {
                return self.reply(
                    request.reply,
                    response(response_code::SYSTEM_ERROR, error.to_string()),
                );
            }
        };
        let missing = || format!("can not find message by the offset, {}", header.offset);
        let offset = header.offset as u64;
        if let Some((request, record)) =
            self.record_for(request, offset, read, Parked::View, missing)
        {
            let answer = super::success().with_body(Bytes::from(record));
            self.reply(request.reply, answer);
        }
    }

    fn pick_any_queue(&mut self, queue_nums: u32) -> u32 {
        self.queue_pick = self.queue_pick.wrapping_add(1);
        self.queue_pick % queue_nums
    }
}

/// Whether `topic` is a dead-letter topic.
pub(crate) fn is_dlq_topic(topic: &str) -> bool {
    topic.starts_with(DLQ_GROUP_TOPIC_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_marks_of_client_commands_are_blanked() {
        let mut ext = ExtFields::new();
        ext.insert(DIRECT_MARK, "3");
        ext.insert(SEND_BACK_MARK, "true");
        ext.insert("topic", "T");
        let mut cmd = RemotingCommand::new_request(request_code::SEND_MESSAGE, ext);
        assert!(has_mark(&cmd, DIRECT_MARK));
        neutralize_internal_marks(&mut cmd);
        assert!(!has_mark(&cmd, DIRECT_MARK));
        assert!(!has_mark(&cmd, SEND_BACK_MARK));
        assert_eq!(cmd.ext_fields.get("topic"), Some("T"));
    }

    #[test]
    fn only_feature_properties_send_a_message_through_the_put_path() {
        assert!(!has_feature_property(b""));
        assert!(!has_feature_property(b"TAGS\x01a\x02KEYS\x01DELAY\x02"));
        assert!(has_feature_property(b"TAGS\x01a\x02DELAY\x012\x02"));
        assert!(has_feature_property(b"TRAN_MSG\x01true\x02"));
        assert!(has_feature_property(b"TIMER_DELAY_SEC\x013"));
        assert!(has_feature_property(b"__STARTDELIVERTIME\x011\x02"));
    }

    #[test]
    fn a_rebuilt_send_carries_the_header_body_and_opaque() {
        let header = SendMessageRequestHeader {
            topic: "SCHEDULE_TOPIC_XXXX".to_owned(),
            queue_id: 1,
            properties: Some("DELAY\u{1}2\u{2}".to_owned()),
            ..SendMessageRequestHeader::default()
        };
        let cmd = rebuilt_send(&header, Some(Bytes::from_static(b"b")), 7);
        assert_eq!(cmd.code, request_code::SEND_MESSAGE);
        assert_eq!(cmd.opaque, 7);
        assert_eq!(cmd.body_bytes(), b"b");
        let decoded = decode_send_header(&cmd).unwrap();
        assert_eq!(decoded.topic, "SCHEDULE_TOPIC_XXXX");
        assert_eq!(decoded.queue_id, 1);
        assert_eq!(decoded.properties.as_deref(), Some("DELAY\u{1}2\u{2}"));
    }
}
