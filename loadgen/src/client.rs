//! loadgen's own RocketMQ client: route lookup through the name server, one
//! connection per broker, requests pipelined and matched to responses by
//! `opaque`, queue selection (round robin or by key hash), and retries on
//! another broker as the Java producer does.
//!
//! Each [`Connection`] is a blocking `std::net` socket with one reader
//! thread; writers share the socket under a mutex. A thread per connection
//! was chosen over storage-uring's reactor because the load generator sends
//! large pipelined writes and reads responses in bulk: per request it pays a
//! share of one `write` and one `read` syscall, and on a 2-core machine the
//! extra threads are idle in `read` most of the time. It keeps the client a
//! few hundred lines with no runtime. Measured against `null-broker`, it
//! drives over 2 M 100-byte batched messages per second using well under
//! one core (numbers in `loadgen/README.md`); io_uring was not needed.
//!
//! ```text
//! sender thread(s) --encode--> [write mutex: TcpStream] ----> broker
//!        |  register(opaque, completion)                         |
//!        v                                                       v
//!   pending: HashMap<opaque, (deadline, completion)> <-- reader thread
//!                 (timeouts swept every READ_POLL_INTERVAL)
//! ```
//!
//! # Invariants
//!
//! - A completion is registered before its request's first byte is
//!   written, and runs exactly once: with the response, with
//!   [`RequestError::Timeout`] after its deadline, or with
//!   [`RequestError::Closed`] when the connection ends.
//! - Opaques are unique per connection among requests in flight (a wrapping
//!   counter; nowhere near `i32::MAX` requests are ever in flight).
//! - The read buffer never holds more than one incomplete frame (at most
//!   `FRAME_SIZE_MAX`, checked before it is buffered) plus one read.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ringmq_protocol::code::{SerializeType, request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::frame;
use ringmq_protocol::header::{CustomHeader, GetRouteInfoRequestHeader};
use ringmq_protocol::json::TopicRouteData;
use ringmq_protocol::limits::FRAME_SIZE_MAX;

/// How long a request waits for its response (Java's default
/// `sendMsgTimeout`, 3 s).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Connecting to a broker or name server gives up after this.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Retries of a failed synchronous send on another broker (Java's
/// `retryTimesWhenSendFailed`, 2).
pub const SEND_RETRY_MAX: usize = 2;
/// The reader wakes at least this often to expire timed-out requests.
pub const READ_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Bytes read per `read` call at most (the buffer grows to a whole frame).
pub const READ_CHUNK_SIZE: usize = 256 * 1024;
/// The topic whose route a producer borrows when its own topic does not
/// exist yet, so the broker auto-creates it (Java's `TBW102`).
pub const AUTO_CREATE_TOPIC: &str = "TBW102";
/// Queues of an auto-created topic (Java's `defaultTopicQueueNums`).
pub const DEFAULT_TOPIC_QUEUE_COUNT: i32 = 4;

/// Why a request got no response.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    /// No response within the deadline.
    #[error("no response within the timeout")]
    Timeout,
    /// The connection closed or failed before the response.
    #[error("the connection closed before the response")]
    Closed,
}

/// Client errors.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connecting, reading or writing failed.
    #[error("{operation} {addr}")]
    Io {
        /// What was being done.
        operation: &'static str,
        /// The peer.
        addr: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A request got no response.
    #[error("request {code} to {addr}")]
    Request {
        /// Request code.
        code: i32,
        /// The peer.
        addr: String,
        /// The cause.
        #[source]
        source: RequestError,
    },
    /// The peer answered with an error code.
    #[error("{addr} answered {code} ({name}): {remark}")]
    Response {
        /// The peer.
        addr: String,
        /// Response code.
        code: i32,
        /// Its RocketMQ name.
        name: &'static str,
        /// The response's remark.
        remark: String,
    },
    /// A request could not be encoded.
    #[error("encoding a request: {0}")]
    Encode(String),
    /// The route body could not be parsed or has no writable queue.
    #[error("route of topic {topic}: {message}")]
    Route {
        /// The topic.
        topic: String,
        /// What is wrong.
        message: String,
    },
}

/// A response, or why there is none, and when it arrived (nanoseconds on
/// the connection's clock).
pub type Completion = Box<dyn FnOnce(Result<RemotingCommand, RequestError>, u64) + Send>;

struct Pending {
    deadline_ns: u64,
    completion: Completion,
}

struct Shared {
    addr: String,
    origin: Instant,
    pending: Mutex<HashMap<i32, Pending>>,
    closed: AtomicBool,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<i32, Pending>> {
        // Completions run outside the lock, so a poisoned map is consistent.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fails every request in flight; called once the stream is unusable.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let drained: Vec<Pending> = self.pending().drain().map(|(_, p)| p).collect();
        let now = self.now_ns();
        for pending in drained {
            (pending.completion)(Err(RequestError::Closed), now);
        }
    }
}

/// One TCP connection to a broker or name server.
pub struct Connection {
    shared: Arc<Shared>,
    writer: Mutex<TcpStream>,
    next_opaque: AtomicI32,
    reader: Option<JoinHandle<()>>,
}

impl Connection {
    /// Connects to `addr` (`host:port`) and starts the reader thread; times
    /// are measured from `origin`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Io`] when the address does not resolve or the
    /// connection fails.
    pub fn connect(addr: &str, origin: Instant) -> Result<Self, ClientError> {
        let io_error = |operation, source| ClientError::Io {
            operation,
            addr: addr.into(),
            source,
        };
        let socket_addr = addr
            .to_socket_addrs()
            .map_err(|e| io_error("resolving", e))?
            .next()
            .ok_or_else(|| io_error("resolving", io::ErrorKind::NotFound.into()))?;
        let stream = TcpStream::connect_timeout(&socket_addr, CONNECT_TIMEOUT)
            .map_err(|e| io_error("connecting to", e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| io_error("configuring", e))?;
        let read_stream = stream.try_clone().map_err(|e| io_error("configuring", e))?;
        read_stream
            .set_read_timeout(Some(READ_POLL_INTERVAL))
            .map_err(|e| io_error("configuring", e))?;
        let shared = Arc::new(Shared {
            addr: addr.to_string(),
            origin,
            pending: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        });
        let reader_shared = Arc::clone(&shared);
        let reader = std::thread::Builder::new()
            .name(format!("read {addr}"))
            .spawn(move || read_loop(read_stream, &reader_shared))
            .map_err(|e| io_error("spawning the reader for", e))?;
        Ok(Self {
            shared,
            writer: Mutex::new(stream),
            next_opaque: AtomicI32::new(1),
            reader: Some(reader),
        })
    }

    /// The peer's address as given.
    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// Nanoseconds since the origin given to [`Connection::connect`].
    pub fn now_ns(&self) -> u64 {
        self.shared.now_ns()
    }

    /// Whether the connection has failed or closed.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// A fresh opaque for a request on this connection.
    pub fn next_opaque(&self) -> i32 {
        self.next_opaque.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers `completion` for the response to `opaque`; it runs with
    /// [`RequestError::Timeout`] if nothing arrives within `timeout`, and at
    /// once with [`RequestError::Closed`] if the connection is closed.
    pub fn register(&self, opaque: i32, timeout: Duration, completion: Completion) {
        let deadline_ns = self.now_ns().saturating_add(duration_ns(timeout));
        if self.is_closed() {
            completion(Err(RequestError::Closed), self.now_ns());
            return;
        }
        self.shared.pending().insert(
            opaque,
            Pending {
                deadline_ns,
                completion,
            },
        );
        // The reader may have closed between the check and the insert; it
        // drains after setting `closed`, so check again.
        if self.is_closed() {
            self.shared.close();
        }
    }

    /// Writes encoded frames (one or many, already registered).
    ///
    /// # Errors
    ///
    /// [`ClientError::Io`]; the connection is closed then and every request
    /// in flight fails with [`RequestError::Closed`].
    pub fn write_frames(&self, bytes: &[u8]) -> Result<(), ClientError> {
        let result = {
            let mut stream = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
            stream.write_all(bytes)
        };
        result.map_err(|source| {
            self.shutdown();
            self.shared.close();
            ClientError::Io {
                operation: "writing to",
                addr: self.shared.addr.clone(),
                source,
            }
        })
    }

    /// Sends `command` (its opaque is assigned here) and waits for the
    /// response.
    ///
    /// # Errors
    ///
    /// [`ClientError::Encode`], [`ClientError::Io`] or
    /// [`ClientError::Request`] (timeout, closed).
    pub fn call(
        &self,
        mut command: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, ClientError> {
        let code = command.code;
        command.opaque = self.next_opaque();
        let mut bytes = Vec::new();
        command
            .encode(SerializeType::Json, &mut bytes)
            .map_err(|error| ClientError::Encode(error.to_string()))?;
        let (sender, receiver) = mpsc::sync_channel(1);
        self.register(
            command.opaque,
            timeout,
            Box::new(move |result, _| {
                let _ = sender.send(result);
            }),
        );
        self.write_frames(&bytes)?;
        let request_error = |source| ClientError::Request {
            code,
            addr: self.shared.addr.clone(),
            source,
        };
        match receiver.recv() {
            Ok(result) => result.map_err(request_error),
            Err(_) => Err(request_error(RequestError::Closed)),
        }
    }

    fn shutdown(&self) {
        let stream = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = stream.shutdown(Shutdown::Both);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shutdown();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.shared.close();
    }
}

fn duration_ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

fn read_loop(mut stream: TcpStream, shared: &Shared) {
    // Reads land in `chunk` and only the bytes read are appended to
    // `buffer`, so no read zero-fills or moves more than it received.
    let mut chunk = vec![0_u8; READ_CHUNK_SIZE];
    let mut buffer = BytesMut::with_capacity(READ_CHUNK_SIZE);
    let mut next_sweep_ns = 0;
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(count) => buffer.extend_from_slice(&chunk[..count]),
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        if dispatch_frames(&mut buffer, shared).is_err() {
            break;
        }
        let now = shared.now_ns();
        if now >= next_sweep_ns {
            expire(shared, now);
            next_sweep_ns = now + duration_ns(READ_POLL_INTERVAL);
        }
    }
    shared.close();
}

/// Completes every whole response at the front of `buffer`.
fn dispatch_frames(buffer: &mut BytesMut, shared: &Shared) -> Result<(), ()> {
    let mut completed = Vec::new();
    loop {
        let raw = match frame::decode_frame_mut(buffer, FRAME_SIZE_MAX) {
            Ok(Some(raw)) => raw,
            Ok(None) => break,
            Err(_) => return Err(()),
        };
        let command = RemotingCommand::from_frame(&raw).map_err(|_| ())?;
        // Requests from the broker (transaction checks, consumer-id change
        // notices) need no answer from a load generator.
        if command.is_response() {
            completed.push(command);
        }
    }
    if completed.is_empty() {
        return Ok(());
    }
    let mut ready = Vec::with_capacity(completed.len());
    {
        let mut pending = shared.pending();
        for command in completed {
            if let Some(entry) = pending.remove(&command.opaque) {
                ready.push((entry.completion, command));
            }
        }
    }
    let now = shared.now_ns();
    for (completion, command) in ready {
        completion(Ok(command), now);
    }
    Ok(())
}

fn expire(shared: &Shared, now_ns: u64) {
    let expired: Vec<Pending> = {
        let mut pending = shared.pending();
        let late: Vec<i32> = pending
            .iter()
            .filter(|(_, p)| p.deadline_ns <= now_ns)
            .map(|(&o, _)| o)
            .collect();
        late.iter()
            .filter_map(|opaque| pending.remove(opaque))
            .collect()
    };
    for entry in expired {
        (entry.completion)(Err(RequestError::Timeout), now_ns);
    }
}

/// A topic queue on a named broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageQueue {
    /// Broker group name.
    pub broker_name: String,
    /// Queue id on that broker.
    pub queue_id: i32,
}

/// The writable queues of a topic and the master address of each broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Writable queues, grouped by broker, in route order.
    pub queues: Vec<MessageQueue>,
    /// Broker name → master address.
    pub broker_addrs: BTreeMap<String, String>,
    /// Whether the route was borrowed from [`AUTO_CREATE_TOPIC`].
    pub auto_create: bool,
}

/// `PermName.PERM_WRITE`.
const PERM_WRITE: i32 = 2;
/// `PermName.PERM_READ`.
const PERM_READ: i32 = 4;

/// Which queues of a route a client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueAccess {
    /// Writable queues (`writeQueueNums`, write permission): producers.
    Write,
    /// Readable queues (`readQueueNums`, read permission): consumers.
    Read,
}

impl Route {
    /// The writable (or readable) queues of `data`, at most
    /// `queue_count_max` per broker.
    ///
    /// # Errors
    ///
    /// [`ClientError::Route`] when no broker has a master and a usable
    /// queue.
    pub fn from_data(
        topic: &str,
        data: &TopicRouteData,
        queue_count_max: Option<i32>,
        access: QueueAccess,
    ) -> Result<Self, ClientError> {
        let (perm, name) = match access {
            QueueAccess::Write => (PERM_WRITE, "writable"),
            QueueAccess::Read => (PERM_READ, "readable"),
        };
        let mut broker_addrs = BTreeMap::new();
        for broker in &data.broker_datas {
            if let Some(master) = broker.broker_addrs.get(&0) {
                broker_addrs.insert(broker.broker_name.clone(), master.clone());
            }
        }
        let mut queues = Vec::new();
        for queue_data in &data.queue_datas {
            if queue_data.perm & perm == 0 || !broker_addrs.contains_key(&queue_data.broker_name) {
                continue;
            }
            let queue_nums = match access {
                QueueAccess::Write => queue_data.write_queue_nums,
                QueueAccess::Read => queue_data.read_queue_nums,
            };
            let count = queue_count_max.map_or(queue_nums, |max| max.min(queue_nums));
            for queue_id in 0..count {
                queues.push(MessageQueue {
                    broker_name: queue_data.broker_name.clone(),
                    queue_id,
                });
            }
        }
        if queues.is_empty() {
            return Err(ClientError::Route {
                topic: topic.into(),
                message: format!("no {name} queue on a broker with a master"),
            });
        }
        Ok(Self {
            queues,
            broker_addrs,
            auto_create: false,
        })
    }

    /// Looks `topic` up on the name server at `namesrv`; if it does not
    /// exist, borrows [`AUTO_CREATE_TOPIC`]'s route with
    /// [`DEFAULT_TOPIC_QUEUE_COUNT`] (or `queue_count`) queues per broker,
    /// as the Java producer does. `queue_count` caps the queues per broker.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the name server cannot be reached or has no
    /// route for either topic.
    pub fn lookup(
        namesrv: &str,
        topic: &str,
        queue_count: Option<i32>,
        access: QueueAccess,
    ) -> Result<Self, ClientError> {
        let connection = Connection::connect(namesrv, Instant::now())?;
        match fetch_route_data(&connection, topic)? {
            Some(data) => Self::from_data(topic, &data, queue_count, access),
            None => {
                let data = fetch_route_data(&connection, AUTO_CREATE_TOPIC)?.ok_or_else(|| {
                    ClientError::Route {
                        topic: topic.into(),
                        message: format!("neither it nor {AUTO_CREATE_TOPIC} has a route"),
                    }
                })?;
                let count = queue_count.unwrap_or(DEFAULT_TOPIC_QUEUE_COUNT);
                let mut route = Self::from_data(topic, &data, Some(count), access)?;
                route.auto_create = true;
                Ok(route)
            }
        }
    }
}

/// GET_ROUTEINFO_BY_TOPIC; `None` when the topic does not exist.
fn fetch_route_data(
    connection: &Connection,
    topic: &str,
) -> Result<Option<TopicRouteData>, ClientError> {
    let header = GetRouteInfoRequestHeader {
        topic: topic.into(),
        accept_standard_json_only: Some(true),
    };
    let request =
        RemotingCommand::new_request(request_code::GET_ROUTEINFO_BY_TOPIC, header.to_ext_fields());
    let response = connection.call(request, REQUEST_TIMEOUT)?;
    match response.code {
        response_code::SUCCESS => TopicRouteData::from_json(response.body_bytes())
            .map(Some)
            .map_err(|error| ClientError::Route {
                topic: topic.into(),
                message: error.to_string(),
            }),
        response_code::TOPIC_NOT_EXIST => Ok(None),
        code => Err(response_error(connection.addr(), &response, code)),
    }
}

fn response_error(addr: &str, response: &RemotingCommand, code: i32) -> ClientError {
    ClientError::Response {
        addr: addr.into(),
        code,
        name: ringmq_protocol::code::response_code_name(code).unwrap_or("UNKNOWN"),
        remark: response.remark.clone().unwrap_or_default(),
    }
}

/// A route with one connection per broker, and the queue selector.
pub struct Brokers {
    route: Route,
    connections: BTreeMap<String, Arc<Connection>>,
    next_queue: AtomicUsize,
}

impl Brokers {
    /// Connects to every broker of `route`, measuring time from `origin`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Io`] when a broker cannot be reached.
    pub fn connect(route: Route, origin: Instant) -> Result<Self, ClientError> {
        let mut connections = BTreeMap::new();
        for (name, addr) in &route.broker_addrs {
            connections.insert(name.clone(), Arc::new(Connection::connect(addr, origin)?));
        }
        Ok(Self {
            route,
            connections,
            next_queue: AtomicUsize::new(0),
        })
    }

    /// The route.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// Picks a queue: by `key_hash` if given, else round robin; when
    /// `avoid_broker` is given and another broker exists, a queue of
    /// another broker (Java's retry behaviour).
    pub fn select_queue(&self, key_hash: Option<u32>, avoid_broker: Option<&str>) -> &MessageQueue {
        let queues = &self.route.queues;
        let start = match key_hash {
            Some(hash) => hash as usize % queues.len(),
            None => self.next_queue.fetch_add(1, Ordering::Relaxed) % queues.len(),
        };
        if let Some(avoid) = avoid_broker {
            for step in 0..queues.len() {
                let queue = &queues[(start + step) % queues.len()];
                if queue.broker_name != avoid {
                    return queue;
                }
            }
        }
        &queues[start]
    }

    /// The connection to `broker_name`'s master.
    pub fn connection(&self, broker_name: &str) -> Option<&Arc<Connection>> {
        self.connections.get(broker_name)
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use ringmq_protocol::json::{BrokerData, QueueData};

    use super::*;

    fn route_data() -> TopicRouteData {
        let broker = |name: &str, addr: &str| BrokerData {
            cluster: "c".into(),
            broker_name: name.into(),
            broker_addrs: [(0, addr.to_string())].into_iter().collect(),
            ..BrokerData::default()
        };
        let queues = |name: &str, perm| QueueData {
            broker_name: name.into(),
            read_queue_nums: 4,
            write_queue_nums: 4,
            perm,
            topic_sys_flag: 0,
        };
        TopicRouteData {
            broker_datas: vec![broker("a", "127.0.0.1:1"), broker("b", "127.0.0.1:2")],
            queue_datas: vec![queues("a", 6), queues("b", 6), queues("c", 6)],
            ..TopicRouteData::default()
        }
    }

    #[test]
    fn route_keeps_writable_queues_of_brokers_with_a_master() {
        let route = Route::from_data("t", &route_data(), Some(2), QueueAccess::Write).unwrap();
        assert_eq!(route.queues.len(), 4);
        assert_eq!(
            route.queues[2],
            MessageQueue {
                broker_name: "b".into(),
                queue_id: 0
            }
        );
        assert_eq!(route.broker_addrs["a"], "127.0.0.1:1");
        let mut read_only = route_data();
        for queue in &mut read_only.queue_datas {
            queue.perm = 4;
        }
        assert!(matches!(
            Route::from_data("t", &read_only, None, QueueAccess::Write),
            Err(ClientError::Route { .. })
        ));
    }

    fn producer_without_connections() -> Brokers {
        let route = Route::from_data("t", &route_data(), None, QueueAccess::Write).unwrap();
        Brokers {
            route,
            connections: BTreeMap::new(),
            next_queue: AtomicUsize::new(0),
        }
    }

    #[test]
    fn select_queue_round_robins_and_hashes_keys() {
        let producer = producer_without_connections();
        let ids: Vec<i32> = (0..5)
            .map(|_| producer.select_queue(None, None).queue_id)
            .collect();
        assert_eq!(ids, [0, 1, 2, 3, 0]);
        let by_key = producer.select_queue(Some(6), None);
        assert_eq!((by_key.broker_name.as_str(), by_key.queue_id), ("b", 2));
        assert_eq!(
            producer.select_queue(Some(6), None),
            by_key,
            "same key, same queue"
        );
    }

    #[test]
    fn select_queue_avoids_the_broker_that_failed() {
        let producer = producer_without_connections();
        for _ in 0..8 {
            assert_eq!(producer.select_queue(None, Some("a")).broker_name, "b");
        }
    }

    #[test]
    fn pending_request_times_out_when_the_peer_is_silent() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let connection = Connection::connect(&addr, Instant::now()).unwrap();
        let _peer = listener.accept().unwrap();
        let request = RemotingCommand::new_request(request_code::HEART_BEAT, Default::default());
        let error = connection
            .call(request, Duration::from_millis(100))
            .unwrap_err();
        assert!(
            matches!(
                error,
                ClientError::Request {
                    source: RequestError::Timeout,
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn pending_request_fails_when_the_peer_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let connection = Connection::connect(&addr, Instant::now()).unwrap();
        let (peer, _) = listener.accept().unwrap();
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(peer);
        });
        let request = RemotingCommand::new_request(request_code::HEART_BEAT, Default::default());
        let error = connection
            .call(request, Duration::from_secs(5))
            .unwrap_err();
        closer.join().unwrap();
        assert!(
            matches!(
                error,
                ClientError::Request {
                    source: RequestError::Closed,
                    ..
                }
            ),
            "{error}"
        );
        assert!(connection.is_closed());
    }
}
