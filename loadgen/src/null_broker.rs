//! `null-broker`: a broker that stores nothing and answers every send at
//! once with SEND_OK, so the load generator can be measured alone. It is its
//! own name server: GET_ROUTEINFO_BY_TOPIC answers with a route to itself for
//! any topic.
//!
//! | request | answer |
//! | --- | --- |
//! | SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) | SUCCESS with msgId, queueId, queueOffset |
//! | GET_ROUTEINFO_BY_TOPIC (105) | SUCCESS, one broker (`null-broker`) at the listen address, `queue_count` queues |
//! | PULL_MESSAGE (11) | the retained records from the offset (SUCCESS), or PULL_NOT_FOUND / PULL_OFFSET_MOVED at once (no long polling) |
//! | GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) | the queue's offsets |
//! | anything else | SUCCESS, empty |
//! | a one-way request | nothing |
//!
//! One thread per connection; the responses to all frames of one read go out
//! in one write. With `retain` > 0 the last `retain` messages of every queue
//! are kept as encoded records ([`crate::null_store`]) so `consume` and
//! `e2e` can be tested; with 0 (the benchmark setting) nothing is encoded.
//!
//! # Invariants
//!
//! - Every request that is not one-way gets exactly one response, with its
//!   opaque, in request order.
//! - `queueOffset` per queue increases by the messages of each send, as a
//!   broker's would.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::BytesMut;
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::frame::{self, RawFrame};
use ringmq_protocol::header::{
    CustomHeader, GetMaxOffsetRequestHeader, GetRouteInfoRequestHeader, PullMessageRequestHeader,
    PullMessageResponseHeader, SendMessageResponseHeader,
};
use ringmq_protocol::json::{BrokerData, JsonStyle, QueueData, TopicRouteData};
use ringmq_protocol::limits::FRAME_SIZE_MAX;
use ringmq_protocol::message::{iter_batch, offset_msg_id};

use crate::null_store::{IncomingMessage, Store};

/// Queues per topic in the routes the null broker hands out.
pub const QUEUE_COUNT_DEFAULT: i32 = 8;
/// The most records one pull returns (Java's default `maxMsgNums` is 32).
pub const PULL_BATCH_MAX: usize = 256;
/// The broker name in routes.
pub const BROKER_NAME: &str = "null-broker";
const CLUSTER_NAME: &str = "NullCluster";
const POLL_INTERVAL: Duration = Duration::from_millis(50);
const READ_CHUNK_SIZE: usize = 256 * 1024;
/// `PermName.PERM_READ | PERM_WRITE`.
const PERM_READ_WRITE: i32 = 6;

/// How a null broker behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NullBrokerConfig {
    /// Queues per topic in the routes it hands out.
    pub queue_count: i32,
    /// Messages kept per queue for pulls (0: none, nothing is encoded).
    pub retain: usize,
    /// The code every send is answered with: SUCCESS normally; another code
    /// makes a failing broker, to test error accounting and retries.
    pub send_response_code: i32,
}

impl Default for NullBrokerConfig {
    fn default() -> Self {
        Self {
            queue_count: QUEUE_COUNT_DEFAULT,
            retain: 0,
            send_response_code: response_code::SUCCESS,
        }
    }
}

/// Counters shared by the null broker's threads.
#[derive(Debug, Default)]
pub struct NullBrokerCounters {
    /// Messages received in sends (each message of a batch counts).
    pub messages: AtomicU64,
    /// Requests received.
    pub requests: AtomicU64,
}

/// A running null broker; stops when [`NullBroker::stop`] is called or it is
/// dropped.
pub struct NullBroker {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    counters: Arc<NullBrokerCounters>,
    acceptor: Option<JoinHandle<()>>,
}

impl NullBroker {
    /// Listens on `listen` (port 0 picks one) and serves in background
    /// threads as `config` says.
    ///
    /// # Errors
    ///
    /// The address cannot be bound.
    pub fn start(listen: &str, config: &NullBrokerConfig) -> io::Result<Self> {
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let local_addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(NullBrokerCounters::default());
        let context = Arc::new(Context {
            local_addr,
            queue_count: config.queue_count,
            send_response_code: config.send_response_code,
            counters: Arc::clone(&counters),
            store: Mutex::new(Store::new(config.retain, local_addr)),
        });
        let acceptor_stop = Arc::clone(&stop);
        let acceptor = std::thread::Builder::new()
            .name("null-broker accept".into())
            .spawn(move || accept_loop(&listener, &acceptor_stop, &context))?;
        Ok(Self {
            local_addr,
            stop,
            counters,
            acceptor: Some(acceptor),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The counters.
    pub fn counters(&self) -> &NullBrokerCounters {
        &self.counters
    }

    /// Blocks until the broker stops (it never does by itself).
    pub fn wait(mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }

    /// Stops accepting and closes every connection.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

impl Drop for NullBroker {
    fn drop(&mut self) {
        self.shut_down();
    }
}

struct Context {
    local_addr: SocketAddr,
    queue_count: i32,
    send_response_code: i32,
    counters: Arc<NullBrokerCounters>,
    store: Mutex<Store>,
}

impl Context {
    fn store(&self) -> MutexGuard<'_, Store> {
        // Every store update is completed or not started when a thread
        // panics (asserts run before anything is published), so go on.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn accept_loop(listener: &TcpListener, stop: &Arc<AtomicBool>, context: &Arc<Context>) {
    let mut connections = Vec::new();
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, _)) => {
                let stop = Arc::clone(stop);
                let context = Arc::clone(context);
                let spawned = std::thread::Builder::new()
                    .name("null-broker conn".into())
                    .spawn(move || serve(stream, &stop, &context));
                if let Ok(handle) = spawned {
                    connections.push(handle);
                }
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(POLL_INTERVAL / 5);
            }
            Err(_) => std::thread::sleep(POLL_INTERVAL),
        }
        connections.retain(|handle: &JoinHandle<()>| !handle.is_finished());
    }
    for handle in connections {
        let _ = handle.join();
    }
}

fn serve(mut stream: TcpStream, stop: &AtomicBool, context: &Context) {
    if stream.set_nonblocking(false).is_err()
        || stream.set_read_timeout(Some(POLL_INTERVAL)).is_err()
        || stream.set_nodelay(true).is_err()
    {
        return;
    }
    let mut chunk = vec![0_u8; READ_CHUNK_SIZE];
    let mut buffer = BytesMut::with_capacity(READ_CHUNK_SIZE);
    let mut out = Vec::with_capacity(READ_CHUNK_SIZE);
    let Ok(peer) = stream.peer_addr() else {
        return;
    };
    while !stop.load(Ordering::Acquire) {
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(count) => buffer.extend_from_slice(&chunk[..count]),
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        out.clear();
        loop {
            match frame::decode_frame_mut(&mut buffer, FRAME_SIZE_MAX) {
                Ok(Some(raw)) => {
                    if answer(&raw, context, peer, &mut out).is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        if !out.is_empty() && stream.write_all(&out).is_err() {
            return;
        }
    }
}

/// Appends the response to `raw` (if any) to `out`.
fn answer(
    raw: &RawFrame,
    context: &Context,
    peer: SocketAddr,
    out: &mut Vec<u8>,
) -> Result<(), ()> {
    let request = RemotingCommand::from_frame(raw).map_err(|_| ())?;
    context.counters.requests.fetch_add(1, Ordering::Relaxed);
    let response = match request.code {
        request_code::SEND_MESSAGE | request_code::SEND_MESSAGE_V2 => {
            let message = IncomingMessage {
                body: request.body_bytes(),
                properties: send_field(&request, "i", "properties")
                    .unwrap_or("")
                    .as_bytes(),
                flag: send_field(&request, "h", "flag")
                    .and_then(|f| f.parse().ok())
                    .unwrap_or(0),
            };
            send_response(&request, context, peer, &[message])
        }
        request_code::SEND_BATCH_MESSAGE => {
            let messages: Vec<IncomingMessage<'_>> = iter_batch(request.body_bytes())
                .map_while(Result::ok)
                .map(|entry| IncomingMessage {
                    body: entry.body,
                    properties: entry.properties,
                    flag: entry.flag,
                })
                .collect();
            send_response(&request, context, peer, &messages)
        }
        request_code::GET_ROUTEINFO_BY_TOPIC => route_response(&request, context),
        request_code::PULL_MESSAGE => pull_response(&request, context),
        request_code::GET_MAX_OFFSET | request_code::GET_MIN_OFFSET => {
            offset_response(&request, context)
        }
        _ => RemotingCommand::new_response(response_code::SUCCESS, request.opaque, None),
    };
    if request.is_oneway() {
        return Ok(());
    }
    response
        .encode(raw.serialize_type, out)
        .map(|_| ())
        .map_err(|_| ())
}

/// A send header field by its V2 (one-letter) or V1 name.
fn send_field<'a>(request: &'a RemotingCommand, v2: &str, v1: &str) -> Option<&'a str> {
    let name = if request.code == request_code::SEND_MESSAGE {
        v1
    } else {
        v2
    };
    request.ext_fields.get(name)
}

fn error_response(request: &RemotingCommand, code: i32, remark: String) -> RemotingCommand {
    RemotingCommand::new_response(code, request.opaque, Some(remark))
}

fn send_response(
    request: &RemotingCommand,
    context: &Context,
    peer: SocketAddr,
    messages: &[IncomingMessage<'_>],
) -> RemotingCommand {
    context
        .counters
        .messages
        .fetch_add(messages.len() as u64, Ordering::Relaxed);
    if context.send_response_code != response_code::SUCCESS {
        let remark = "null-broker configured to fail sends".to_string();
        return error_response(request, context.send_response_code, remark);
    }
    let topic = send_field(request, "b", "topic").unwrap_or("");
    let queue_id: i32 = send_field(request, "e", "queueId")
        .and_then(|text| text.parse().ok())
        .unwrap_or(0)
        .max(0);
    let born_ms = send_field(request, "g", "bornTimestamp").and_then(|t| t.parse().ok());
    let appended = context
        .store()
        .append(topic, queue_id, born_ms.unwrap_or(0), peer, messages);
    let appended = match appended {
        Ok(appended) => appended,
        Err(error) => {
            return error_response(request, response_code::SYSTEM_ERROR, error.to_string());
        }
    };
    let header = SendMessageResponseHeader {
        msg_id: offset_msg_id(&context.local_addr, appended.commit_log_offset),
        queue_id,
        queue_offset: appended.queue_offset,
        ..SendMessageResponseHeader::default()
    };
    let mut response = RemotingCommand::new_response(response_code::SUCCESS, request.opaque, None);
    response.ext_fields = header.to_ext_fields();
    response
}

fn pull_response(request: &RemotingCommand, context: &Context) -> RemotingCommand {
    let header = match PullMessageRequestHeader::from_ext(&request.ext_fields) {
        Ok(header) => header,
        Err(error) => {
            return error_response(request, response_code::SYSTEM_ERROR, error.to_string());
        }
    };
    let max_count = usize::try_from(header.max_msg_nums)
        .unwrap_or(0)
        .min(PULL_BATCH_MAX);
    let pulled = context.store().pull(
        &header.topic,
        header.queue_id,
        header.queue_offset,
        max_count,
    );
    let pulled = match pulled {
        Ok(pulled) => pulled,
        Err(error) => {
            return error_response(request, response_code::SYSTEM_ERROR, error.to_string());
        }
    };
    let code = if pulled.offset_moved {
        response_code::PULL_OFFSET_MOVED
    } else if pulled.record_count == 0 {
        response_code::PULL_NOT_FOUND
    } else {
        response_code::SUCCESS
    };
    let response_header = PullMessageResponseHeader {
        suggest_which_broker_id: 0,
        next_begin_offset: pulled.next_begin_offset,
        min_offset: pulled.min_offset,
        max_offset: pulled.max_offset,
        ..PullMessageResponseHeader::default()
    };
    let mut response = RemotingCommand::new_response(code, request.opaque, None);
    response.ext_fields = response_header.to_ext_fields();
    response.with_body(pulled.body.into())
}

fn offset_response(request: &RemotingCommand, context: &Context) -> RemotingCommand {
    // GetMinOffsetRequestHeader has the same fields.
    let header = match GetMaxOffsetRequestHeader::from_ext(&request.ext_fields) {
        Ok(header) => header,
        Err(error) => {
            return error_response(request, response_code::SYSTEM_ERROR, error.to_string());
        }
    };
    let offset = if request.code == request_code::GET_MAX_OFFSET {
        context.store().max_offset(&header.topic, header.queue_id)
    } else {
        context.store().min_offset(&header.topic, header.queue_id)
    };
    match offset {
        Ok(offset) => {
            let mut response =
                RemotingCommand::new_response(response_code::SUCCESS, request.opaque, None);
            response.ext_fields.insert_display("offset", offset);
            response
        }
        Err(error) => error_response(request, response_code::SYSTEM_ERROR, error.to_string()),
    }
}

fn route_response(request: &RemotingCommand, context: &Context) -> RemotingCommand {
    let Ok(header) = GetRouteInfoRequestHeader::from_ext(&request.ext_fields) else {
        return RemotingCommand::new_response(
            response_code::SYSTEM_ERROR,
            request.opaque,
            Some("the topic field is missing".into()),
        );
    };
    let data = TopicRouteData {
        broker_datas: vec![BrokerData {
            cluster: CLUSTER_NAME.into(),
            broker_name: BROKER_NAME.into(),
            broker_addrs: [(0, context.local_addr.to_string())].into_iter().collect(),
            ..BrokerData::default()
        }],
        queue_datas: vec![QueueData {
            broker_name: BROKER_NAME.into(),
            read_queue_nums: context.queue_count,
            write_queue_nums: context.queue_count,
            perm: PERM_READ_WRITE,
            topic_sys_flag: 0,
        }],
        ..TopicRouteData::default()
    };
    let style = JsonStyle::for_request(
        request.version,
        header.accept_standard_json_only.unwrap_or(false),
    );
    let mut body = Vec::new();
    data.to_json(&mut body, style);
    RemotingCommand::new_response(response_code::SUCCESS, request.opaque, None)
        .with_body(body.into())
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use ringmq_protocol::header::SendMessageRequestHeaderV2;

    use super::*;
    use crate::client::{Connection, REQUEST_TIMEOUT, Route};

    #[test]
    fn route_lookup_points_at_the_null_broker_itself() {
        let broker = NullBroker::start(
            "127.0.0.1:0",
            &NullBrokerConfig {
                queue_count: 3,
                ..NullBrokerConfig::default()
            },
        )
        .unwrap();
        let addr = broker.local_addr().to_string();
        let route =
            Route::lookup(&addr, "AnyTopic", None, crate::client::QueueAccess::Read).unwrap();
        assert_eq!(route.queues.len(), 3);
        assert_eq!(route.broker_addrs[BROKER_NAME], addr);
        assert!(!route.auto_create);
        broker.stop();
    }

    #[test]
    fn send_is_answered_with_success_and_increasing_queue_offsets() {
        let broker = NullBroker::start("127.0.0.1:0", &NullBrokerConfig::default()).unwrap();
        let connection =
            Connection::connect(&broker.local_addr().to_string(), Instant::now()).unwrap();
        let header = SendMessageRequestHeaderV2 {
            producer_group: "g".into(),
            topic: "t".into(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: 4,
            queue_id: 2,
            ..SendMessageRequestHeaderV2::default()
        };
        let mut offsets = Vec::new();
        for _ in 0..3 {
            let request =
                RemotingCommand::new_request(request_code::SEND_MESSAGE_V2, header.to_ext_fields())
                    .with_body(bytes::Bytes::from_static(b"hello"));
            let response = connection.call(request, REQUEST_TIMEOUT).unwrap();
            assert_eq!(response.code, response_code::SUCCESS);
            let parsed = SendMessageResponseHeader::from_ext(&response.ext_fields).unwrap();
            assert_eq!(parsed.queue_id, 2);
            offsets.push(parsed.queue_offset);
        }
        assert_eq!(offsets, [0, 1, 2]);
        assert_eq!(broker.counters().messages.load(Ordering::Relaxed), 3);
    }
}
