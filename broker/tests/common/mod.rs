//! The broker process harness shared by the integration tests: a temporary
//! store root, and `ringmq broker` started on it with kernel-chosen ports,
//! stopped with SIGTERM or SIGKILL, and a remoting [`Client`] connection to
//! it, to which each test file adds its own request helpers.

#![allow(
    dead_code,
    reason = "each test file uses the part of the harness it needs"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use ringmq_protocol::code::{SerializeType, request_code, response_code};
use ringmq_protocol::command::ExtFields;
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::frame;
use ringmq_protocol::header::{
    CreateTopicRequestHeader, CustomHeader, PullMessageRequestHeader, PullMessageResponseHeader,
    PullSysFlag, QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
    SendMessageRequestHeaderV2, SendMessageResponseHeader, UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
};
use ringmq_protocol::json::{JsonStyle, SubscriptionGroupConfig};
use ringmq_protocol::limits::FRAME_SIZE_MAX;
use ringmq_protocol::message::{CrcCheck, iter_pull_body};

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

/// A temporary store root, removed when dropped.
pub struct StoreDir(PathBuf);

impl std::ops::Deref for StoreDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for StoreDir {
    fn drop(&mut self) {
        // The logs of the brokers that ran on this store, beside it: a
        // failing test shows them (the harness prints a test's output only
        // when it fails), so that what the broker did is on record, in CI
        // too.
        for (path, log) in broker_logs(&self.0) {
            if std::thread::panicking() {
                eprintln!("---- {} ----\n{log}", path.display());
            }
            let _ = std::fs::remove_file(path);
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The log file of the `n`th broker started on `store`.
fn broker_log_path(store: &Path, n: u32) -> PathBuf {
    let mut name = store.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".broker{n}.log"));
    store.with_file_name(name)
}

/// Each broker log of `store` with its text, in start order.
fn broker_logs(store: &Path) -> Vec<(PathBuf, String)> {
    (0..)
        .map(|n| broker_log_path(store, n))
        .map_while(|path| {
            let log = std::fs::read_to_string(&path).ok()?;
            Some((path, log))
        })
        .collect()
}

/// The logs of every broker started on `store`, in start order.
pub fn broker_logs_text(store: &Path) -> String {
    broker_logs(store).into_iter().map(|(_, log)| log).collect()
}

/// An empty store root named after `label` and this process.
pub fn fresh_store(label: &str) -> StoreDir {
    let dir = std::env::temp_dir().join(format!(
        "ringmq-broker-{label}-{}-{}",
        std::process::id(),
        NEXT_DIR.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    StoreDir(dir)
}

/// A running broker; killed when dropped.
pub struct Broker {
    child: Child,
    /// The broker's listening port.
    pub port: u16,
    /// The embedded name server's port.
    pub namesrv_port: u16,
}

/// The CommitLog offset in an offset message id (its last 8 bytes).
pub fn commit_log_offset(msg_id: &str) -> i64 {
    i64::from_str_radix(&msg_id[msg_id.len() - 16..], 16).unwrap()
}

/// Starts `ringmq broker` on `store` (kernel-chosen broker and name server
/// ports, 16 MiB segments) with `extra` options after the defaults, and
/// waits for its boot line; None (the test skips) when io_uring is
/// unavailable here.
pub fn start_broker(store: &Path, extra: &[String]) -> Option<Broker> {
    // Its log goes to a file beside the store (see `StoreDir`'s drop), not
    // to a pipe that nobody reads and that would stop the broker once full.
    let log_path = (0..)
        .map(|n| broker_log_path(store, n))
        .find(|path| !path.exists())
        .unwrap();
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringmq"))
        .arg("broker")
        .arg(format!("--storePathRootDir={}", store.display()))
        .arg("--listenPort=0")
        .arg("--namesrvListenPort=0")
        .arg("--brokerIP1=127.0.0.1")
        .arg("--mapedFileSizeCommitLog=16777216")
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    if line.is_empty() {
        let _ = child.wait();
        let stderr = std::fs::read_to_string(&log_path).unwrap_or_default();
        if stderr.contains("io_uring") && stderr.contains("navailable") {
            eprintln!("SKIPPED: io_uring is unavailable: {stderr}");
            return None;
        }
        panic!("the broker did not boot: {stderr}");
    }
    assert!(
        line.contains("boot success. serializeType=JSON and name server is 127.0.0.1:"),
        "boot line {line:?}"
    );
    let address = line
        .split(", ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_else(|| panic!("boot line {line:?}"));
    let port = address.rsplit(':').next().unwrap().parse().unwrap();
    let namesrv_port = line
        .trim_end()
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no name server port in the boot line {line:?}"));
    Some(Broker {
        child,
        port,
        namesrv_port,
    })
}

impl Broker {
    /// The broker's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then the exit status; panics (after SIGKILL) when the
    /// broker has not exited within [`STOP_TIMEOUT`].
    pub fn stop(mut self) -> ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the broker did not stop within {STOP_TIMEOUT:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: no shutdown work at all.
    pub fn kill_nine(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long [`Broker::stop`] waits for the broker to exit.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a test waits for one frame from the broker before failing.
const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// A remoting connection to the broker, JSON-serialized. Each test file adds
/// its own request helpers in an `impl Client` of its own.
pub struct Client {
    stream: TcpStream,
    opaque: i32,
    /// Requests from the broker read while waiting for a response.
    requests: Vec<RemotingCommand>,
}

impl Broker {
    /// A new connection to the broker.
    pub fn connect(&self) -> Client {
        Self::connect_to(self.port)
    }

    /// A new connection to the embedded name server.
    pub fn connect_namesrv(&self) -> Client {
        Self::connect_to(self.namesrv_port)
    }

    fn connect_to(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        Client {
            stream,
            opaque: 0,
            requests: Vec::new(),
        }
    }
}

impl Client {
    /// Writes `request` with the next opaque, without waiting; returns the
    /// opaque.
    pub fn send_request(&mut self, mut request: RemotingCommand) -> i32 {
        self.opaque += 1;
        request.opaque = self.opaque;
        let mut out = Vec::new();
        request.encode(SerializeType::Json, &mut out).unwrap();
        self.stream.write_all(&out).unwrap();
        self.opaque
    }

    /// Sends `request` and waits for its response; requests the broker sends
    /// meanwhile are kept for [`Client::next_request`], other responses
    /// dropped.
    pub fn call(&mut self, request: RemotingCommand) -> RemotingCommand {
        let opaque = self.send_request(request);
        self.response_to(opaque)
    }

    /// Waits for the response to the request sent with `opaque` (as
    /// [`Client::call`] does).
    pub fn response_to(&mut self, opaque: i32) -> RemotingCommand {
        loop {
            let command = self.read();
            if command.is_response() && command.opaque == opaque {
                return command;
            }
            if !command.is_response() {
                self.requests.push(command);
            }
        }
    }

    /// Answers a request the broker sent (as a client would): `response`
    /// goes out with that request's opaque.
    pub fn respond(&mut self, asked: &RemotingCommand, mut response: RemotingCommand) {
        response.opaque = asked.opaque;
        let mut out = Vec::new();
        response.encode(SerializeType::Json, &mut out).unwrap();
        self.stream.write_all(&out).unwrap();
    }

    /// [`Client::call`], asserting the response is SUCCESS (the remark
    /// shows otherwise).
    pub fn call_ok(&mut self, request: RemotingCommand) -> RemotingCommand {
        let response = self.call(request);
        assert_eq!(
            response.code,
            response_code::SUCCESS,
            "{:?}",
            response.remark
        );
        response
    }

    /// Sends `request` one-way (no response comes).
    pub fn oneway(&mut self, mut request: RemotingCommand) {
        request.mark_oneway();
        self.send_request(request);
    }

    /// The next frame from the broker.
    pub fn read(&mut self) -> RemotingCommand {
        let mut length = [0u8; 4];
        self.stream.read_exact(&mut length).unwrap();
        let mut bytes = length.to_vec();
        bytes.resize(4 + u32::from_be_bytes(length) as usize, 0);
        self.stream.read_exact(&mut bytes[4..]).unwrap();
        let raw = frame::decode_frame(&Bytes::from(bytes), FRAME_SIZE_MAX)
            .unwrap()
            .unwrap();
        RemotingCommand::from_frame(&raw).unwrap()
    }

    /// The next request the broker sends on this connection.
    pub fn next_request(&mut self) -> RemotingCommand {
        if !self.requests.is_empty() {
            return self.requests.remove(0);
        }
        loop {
            let command = self.read();
            if !command.is_response() {
                return command;
            }
        }
    }

    /// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with `group`; asserts success.
    pub fn put_group(&mut self, group: &SubscriptionGroupConfig) {
        let mut body = Vec::new();
        group.to_json(&mut body, JsonStyle::Java);
        self.call_ok(
            RemotingCommand::new_request(
                request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                ExtFields::new(),
            )
            .with_body(Bytes::from(body)),
        );
    }

    /// VIEW_MESSAGE_BY_ID: the stored record at a CommitLog offset.
    pub fn view(&mut self, offset: i64) -> RemotingCommand {
        let header = ViewMessageRequestHeader {
            offset,
            topic: None,
        };
        self.call(RemotingCommand::new_request(
            request_code::VIEW_MESSAGE_BY_ID,
            header.to_ext_fields(),
        ))
    }

    /// UPDATE_AND_CREATE_TOPIC with `queues` read and write queues; asserts
    /// success.
    pub fn create_topic(&mut self, topic: &str, queues: i32) {
        self.call_ok(create_topic_request(topic, queues));
    }

    /// SEND_MESSAGE_V2 of `body` with `properties` to `topic`/`queue_id`
    /// (auto-creation from TBW102 with 4 queues); asserts SUCCESS and returns
    /// the response header.
    pub fn send_message(
        &mut self,
        producer_group: &str,
        topic: &str,
        queue_id: i32,
        born_timestamp: i64,
        properties: String,
        body: &[u8],
    ) -> SendMessageResponseHeader {
        let request = send_message_request(
            producer_group,
            topic,
            queue_id,
            born_timestamp,
            properties,
            body,
        );
        self.call_ok(request).decode_custom_header().unwrap()
    }

    /// Every record of `topic`'s queue `queue_id` from `offset` on, pulled
    /// by `group` (not held), CRCs checked: (queue offset, body). The queue
    /// ends at PULL_NOT_FOUND, or PULL_RETRY_IMMEDIATELY (a slave whose
    /// master is online sends the consumer back to it there, as Java's).
    pub fn pull_records_from(
        &mut self,
        group: &str,
        topic: &str,
        queue_id: i32,
        mut offset: i64,
    ) -> Vec<(i64, Vec<u8>)> {
        let mut records = Vec::new();
        loop {
            let answer = self.call(pull_request(group, topic, queue_id, offset));
            if answer.code == response_code::PULL_NOT_FOUND
                || answer.code == response_code::PULL_RETRY_IMMEDIATELY
            {
                return records;
            }
            assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
            let pulled: PullMessageResponseHeader = answer.decode_custom_header().unwrap();
            for record in iter_pull_body(answer.body_bytes(), CrcCheck::Verify) {
                let record = record.unwrap();
                records.push((record.queue_offset(), record.body().to_vec()));
            }
            offset = pulled.next_begin_offset;
        }
    }

    /// UPDATE_CONSUMER_OFFSET of `group` on `topic`'s queue `queue_id`;
    /// asserts SUCCESS.
    pub fn commit_offset_of(&mut self, group: &str, topic: &str, queue_id: i32, offset: i64) {
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: group.to_owned(),
            topic: topic.to_owned(),
            queue_id,
            commit_offset: offset,
            ..UpdateConsumerOffsetRequestHeader::default()
        };
        self.call_ok(RemotingCommand::new_request(
            request_code::UPDATE_CONSUMER_OFFSET,
            header.to_ext_fields(),
        ));
    }

    /// QUERY_CONSUMER_OFFSET of `group` on `topic`'s queue `queue_id`:
    /// None when it has none.
    pub fn committed_offset_of(&mut self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        let header = QueryConsumerOffsetRequestHeader {
            consumer_group: group.to_owned(),
            topic: topic.to_owned(),
            queue_id,
            ..QueryConsumerOffsetRequestHeader::default()
        };
        let answer = self.call(RemotingCommand::new_request(
            request_code::QUERY_CONSUMER_OFFSET,
            header.to_ext_fields(),
        ));
        if answer.code == response_code::QUERY_NOT_FOUND {
            return None;
        }
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
        let header: QueryConsumerOffsetResponseHeader = answer.decode_custom_header().unwrap();
        Some(header.offset)
    }

    /// Sends 24 MiB (three write buffers' worth, in 60 KiB messages) to
    /// queue 0 of `topic`, so that on a broker started with
    /// `--tailCacheSize=0` every record before them has left memory.
    pub fn push_out_of_memory(&mut self, topic: &str) {
        self.push_out_of_memory_on(topic, 0);
    }

    /// [`Client::push_out_of_memory`] through queue `queue_id` (so into
    /// the log of the shard that owns it).
    pub fn push_out_of_memory_on(&mut self, topic: &str, queue_id: i32) {
        let filler = vec![b'f'; 60 * 1024];
        for _ in 0..420 {
            self.send_message(
                "pg",
                topic,
                queue_id,
                1_700_000_000_000,
                String::new(),
                &filler,
            );
        }
    }
}

/// PULL_MESSAGE for `group` of up to 32 messages of `topic`'s queue
/// `queue_id` from `offset`, every tag, not held.
pub fn pull_request(group: &str, topic: &str, queue_id: i32, offset: i64) -> RemotingCommand {
    let header = PullMessageRequestHeader {
        consumer_group: group.to_owned(),
        topic: topic.to_owned(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: 32,
        sys_flag: PullSysFlag::SUBSCRIPTION,
        suspend_timeout_millis: 0,
        subscription: Some("*".to_owned()),
        expression_type: Some("TAG".to_owned()),
        ..PullMessageRequestHeader::default()
    };
    RemotingCommand::new_request(request_code::PULL_MESSAGE, header.to_ext_fields())
}

/// The UPDATE_AND_CREATE_TOPIC request of [`Client::create_topic`], for
/// tests that look at a refused answer.
pub fn create_topic_request(topic: &str, queues: i32) -> RemotingCommand {
    let header = CreateTopicRequestHeader {
        topic: topic.to_owned(),
        default_topic: "TBW102".to_owned(),
        read_queue_nums: queues,
        write_queue_nums: queues,
        perm: 6,
        topic_filter_type: "SINGLE_TAG".to_owned(),
        order: false,
        ..CreateTopicRequestHeader::default()
    };
    RemotingCommand::new_request(
        request_code::UPDATE_AND_CREATE_TOPIC,
        header.to_ext_fields(),
    )
}

/// The SEND_MESSAGE_V2 request of [`Client::send_message`], for tests that
/// send several before reading the answers.
pub fn send_message_request(
    producer_group: &str,
    topic: &str,
    queue_id: i32,
    born_timestamp: i64,
    properties: String,
    body: &[u8],
) -> RemotingCommand {
    let header = SendMessageRequestHeaderV2 {
        producer_group: producer_group.to_owned(),
        topic: topic.to_owned(),
        default_topic: "TBW102".to_owned(),
        default_topic_queue_nums: 4,
        queue_id,
        born_timestamp,
        properties: Some(properties),
        ..SendMessageRequestHeaderV2::default()
    };
    RemotingCommand::new_request(request_code::SEND_MESSAGE_V2, header.to_ext_fields())
        .with_body(Bytes::copy_from_slice(body))
}
