//! `ringmq namesrv` from outside: the real binary on a kernel-picked port,
//! driven over plain `std::net::TcpStream`s with frames built by the
//! protocol crate. Every read has a timeout, every address is 127.0.0.1.
//!
//! A machine without io_uring (old kernel, seccomp) makes the binary fail
//! with "io_uring is unavailable"; the tests then print a skip line instead
//! of passing silently.

#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failure is the test's answer"
)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{StoreDir, fresh_store};
use ringmq_broker::namesrv::register::{BrokerIdentity, register_broker_request};
use ringmq_protocol::code::{SerializeType, request_code, response_code};
use ringmq_protocol::command::{ExtFields, RemotingCommand};
use ringmq_protocol::frame;
use ringmq_protocol::header::{CustomHeader, GetKvConfigRequestHeader, PutKvConfigRequestHeader};
use ringmq_protocol::json::{ClusterInfo, DataVersion, TopicConfig, TopicRouteData};
use ringmq_protocol::limits::FRAME_SIZE_MAX;

const READ_TIMEOUT: Duration = Duration::from_secs(5);
const BOOT_TIMEOUT: Duration = Duration::from_secs(10);
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
const BOOT_PREFIX: &str = "The Name Server boot success. serializeType=JSON, address ";

/// The `--kv-config-path` given to a name server keeping its files in `dir`.
fn kv_config_path(dir: &Path) -> PathBuf {
    dir.join("namesrv").join("kvConfig.json")
}

/// A running `ringmq namesrv`, killed when dropped.
struct NameServerProcess {
    child: Child,
    addr: SocketAddr,
    /// The whole stderr (the log), once the process has exited.
    log: mpsc::Receiver<String>,
    /// Its own KV directory when the test gave none.
    _own_dir: Option<StoreDir>,
}

impl NameServerProcess {
    /// Starts the binary on port 0, its `kvConfig.json` in a directory of
    /// its own, and waits for its boot line; `None` (with a skip line
    /// printed) when io_uring is unavailable here.
    fn start() -> Option<Self> {
        let dir = fresh_store("namesrv-own");
        let mut server = Self::start_in(&dir)?;
        server._own_dir = Some(dir);
        Some(server)
    }

    /// As [`NameServerProcess::start`], keeping `kvConfig.json` in `dir`.
    fn start_in(dir: &Path) -> Option<Self> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ringmq"))
            .args(["namesrv", "--listen-port", "0", "--bind", "127.0.0.1"])
            .arg("--kv-config-path")
            .arg(kv_config_path(dir))
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning ringmq");
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, lines_rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if lines_tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = child.stderr.take().unwrap();
        let (log_tx, log_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut text);
            let _ = log_tx.send(text);
        });
        match lines_rx.recv_timeout(BOOT_TIMEOUT) {
            Ok(Ok(line)) => {
                let addr = line
                    .strip_prefix(BOOT_PREFIX)
                    .unwrap_or_else(|| panic!("unexpected boot line {line:?}"))
                    .parse()
                    .expect("an address in the boot line");
                Some(NameServerProcess {
                    child,
                    addr,
                    log: log_rx,
                    _own_dir: None,
                })
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let log = log_rx.recv_timeout(READ_TIMEOUT).unwrap_or_default();
                if log.contains("io_uring is unavailable") {
                    eprintln!("SKIPPED: io_uring is unavailable on this machine: {log}");
                    return None;
                }
                panic!("ringmq namesrv did not boot; its stderr:\n{log}");
            }
        }
    }

    fn connect(&self) -> Client {
        let stream = TcpStream::connect(self.addr).expect("connecting to the name server");
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            next_opaque: 1,
        }
    }

    /// Sends SIGTERM and waits (bounded) for the exit status and the log.
    fn terminate(mut self) -> (std::process::ExitStatus, String) {
        // SAFETY: kill(2) with the pid of our own child.
        let sent = unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert_eq!(sent, 0, "kill(SIGTERM)");
        let deadline = Instant::now() + EXIT_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = self.log.recv_timeout(READ_TIMEOUT).unwrap_or_default();
                return (status, log);
            }
            assert!(
                Instant::now() < deadline,
                "namesrv did not exit within {EXIT_TIMEOUT:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NameServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Client {
    stream: TcpStream,
    next_opaque: i32,
}

impl Client {
    fn encode(command: &RemotingCommand) -> Vec<u8> {
        let mut out = Vec::new();
        command.encode(SerializeType::Json, &mut out).unwrap();
        out
    }

    /// Sends `command` with a fresh opaque; returns the opaque.
    fn send(&mut self, mut command: RemotingCommand) -> i32 {
        command.opaque = self.next_opaque;
        self.next_opaque += 1;
        self.stream.write_all(&Self::encode(&command)).unwrap();
        command.opaque
    }

    fn read_response(&mut self) -> RemotingCommand {
        let mut length = [0u8; 4];
        self.stream.read_exact(&mut length).expect("a response");
        let size = u32::from_be_bytes(length) as usize;
        let mut frame_bytes = vec![0u8; 4 + size];
        frame_bytes[..4].copy_from_slice(&length);
        self.stream
            .read_exact(&mut frame_bytes[4..])
            .expect("the rest of the response");
        let raw = frame::decode_frame(&Bytes::from(frame_bytes), FRAME_SIZE_MAX)
            .unwrap()
            .expect("a whole frame");
        let response = RemotingCommand::from_frame(&raw).unwrap();
        assert!(response.is_response(), "response flag on {response:?}");
        response
    }

    fn call(&mut self, command: RemotingCommand) -> RemotingCommand {
        let opaque = self.send(command);
        let response = self.read_response();
        assert_eq!(response.opaque, opaque);
        response
    }

    /// True when the server closed the connection (EOF or reset) within
    /// the read timeout.
    fn is_closed_by_server(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(error) => matches!(
                error.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            ),
        }
    }
}

fn route_query(topic: &str) -> RemotingCommand {
    let mut fields = ExtFields::new();
    fields.insert("topic", topic);
    RemotingCommand::new_request(request_code::GET_ROUTEINFO_BY_TOPIC, fields)
}

fn identity() -> BrokerIdentity {
    BrokerIdentity {
        cluster_name: "TestCluster".into(),
        broker_name: "broker-t".into(),
        broker_id: 0,
        broker_addr: "127.0.0.1:10911".into(),
        ha_server_addr: "127.0.0.1:10912".into(),
        heartbeat_timeout_ms: None,
        enable_acting_master: false,
        zone_name: None,
    }
}

fn topic_config(name: &str, queue_count: i32) -> TopicConfig {
    TopicConfig {
        topic_name: name.into(),
        read_queue_nums: queue_count,
        write_queue_nums: queue_count,
        ..TopicConfig::default()
    }
}

/// The server still answers on a fresh connection.
fn assert_serving(server: &NameServerProcess) {
    let response = server.connect().call(route_query("StillThere"));
    assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
}

#[test]
fn route_query_for_an_unknown_topic_answers_17_with_javas_remark() {
    let Some(server) = NameServerProcess::start() else {
        return;
    };
    let response = server.connect().call(route_query("NoSuchTopic"));
    assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
    assert_eq!(
        response.remark.as_deref(),
        Some(
            "No topic route info in name server for the topic: NoSuchTopic\n\
             See https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details."
        )
    );
}

#[test]
fn registered_broker_is_served_in_routes_and_cluster_info() {
    let Some(server) = NameServerProcess::start() else {
        return;
    };
    let mut client = server.connect();
    // Two topics: Java's name server (and ours) takes a first registration
    // carrying exactly one topic for an incremental one and refuses it.
    let table = BTreeMap::from([
        ("OrdersTopic".to_owned(), topic_config("OrdersTopic", 4)),
        ("AuditTopic".to_owned(), topic_config("AuditTopic", 2)),
    ]);
    let register = register_broker_request(&identity(), DataVersion::default(), &table);
    let response = client.call(register);
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );

    let response = client.call(route_query("OrdersTopic"));
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    let route = TopicRouteData::from_json(response.body_bytes()).unwrap();
    assert_eq!(route.queue_datas.len(), 1);
    let queue_data = &route.queue_datas[0];
    assert_eq!(queue_data.broker_name, "broker-t");
    assert_eq!(queue_data.read_queue_nums, 4);
    assert_eq!(queue_data.write_queue_nums, 4);
    assert_eq!(route.broker_datas.len(), 1);
    assert_eq!(
        route.broker_datas[0]
            .broker_addrs
            .get(&0)
            .map(String::as_str),
        Some("127.0.0.1:10911")
    );

    let cluster_request =
        RemotingCommand::new_request(request_code::GET_BROKER_CLUSTER_INFO, ExtFields::new());
    let response = client.call(cluster_request);
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    let cluster = ClusterInfo::from_json(response.body_bytes()).unwrap();
    assert_eq!(
        cluster.cluster_addr_table.get("TestCluster"),
        Some(&vec!["broker-t".to_owned()])
    );
    assert_eq!(
        cluster.broker_addr_table["broker-t"]
            .broker_addrs
            .get(&0)
            .map(String::as_str),
        Some("127.0.0.1:10911")
    );
}

#[test]
fn unknown_code_answers_3_and_the_connection_stays_usable() {
    let Some(server) = NameServerProcess::start() else {
        return;
    };
    let mut client = server.connect();
    let response = client.call(RemotingCommand::new_request(4242, ExtFields::new()));
    assert_eq!(response.code, response_code::REQUEST_CODE_NOT_SUPPORTED);
    assert_eq!(
        response.remark.as_deref(),
        Some(" request type 4242 not supported")
    );
    let response = client.call(route_query("Again"));
    assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
}

#[test]
fn truncated_frame_then_close_leaves_the_server_serving_others() {
    let Some(server) = NameServerProcess::start() else {
        return;
    };
    let bystander = server.connect();
    let mut client = server.connect();
    let whole = Client::encode(&route_query("Cut"));
    client.stream.write_all(&whole[..whole.len() / 2]).unwrap();
    drop(client);
    let mut bystander = bystander;
    let response = bystander.call(route_query("Other"));
    assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
    assert_serving(&server);
}

#[test]
fn oversized_length_closes_only_that_connection() {
    let Some(server) = NameServerProcess::start() else {
        return;
    };
    let mut bystander = server.connect();
    let mut client = server.connect();
    client
        .stream
        .write_all(&(FRAME_SIZE_MAX + 1).to_be_bytes())
        .unwrap();
    assert!(client.is_closed_by_server(), "oversized frame must close");
    let response = bystander.call(route_query("Other"));
    assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
    assert_serving(&server);
    let peer = client.stream.local_addr().unwrap().to_string();
    let (_, log) = server.terminate();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("malformed frame"))
        .collect();
    assert_eq!(warnings.len(), 1, "logged once:\n{log}");
    assert!(warnings[0].contains("WARN"), "{}", warnings[0]);
    assert!(
        warnings[0].contains(&peer),
        "names the peer {peer}: {}",
        warnings[0]
    );
    assert!(
        warnings[0].contains("exceeds"),
        "names the error: {}",
        warnings[0]
    );
}

#[test]
fn garbage_json_header_closes_only_that_connection() {
    let Some(server) = NameServerProcess::start() else {
        return;
    };
    let mut bystander = server.connect();
    let mut client = server.connect();
    let mut bad = Vec::new();
    frame::write_frame(&mut bad, SerializeType::Json, b"{\"code\": oops", b"").unwrap();
    client.stream.write_all(&bad).unwrap();
    assert!(client.is_closed_by_server(), "garbage header must close");
    let response = bystander.call(route_query("Other"));
    assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
    assert_serving(&server);
}

#[test]
fn oneway_request_gets_no_response() {
    let Some(server) = NameServerProcess::start() else {
        return;
    };
    let mut client = server.connect();
    let mut oneway = route_query("Silent");
    oneway.mark_oneway();
    let silent = client.send(oneway);
    let response = client.call(route_query("Loud"));
    assert_ne!(response.opaque, silent);
    // Nothing else arrives: the next read times out.
    client
        .stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut byte = [0u8; 1];
    match client.stream.read(&mut byte) {
        Err(error) => assert!(
            matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{error}"
        ),
        Ok(count) => panic!("unexpected {count} bytes after a one-way request"),
    }
}

#[test]
fn pipelined_requests_on_one_connection_are_all_answered_in_order_by_a_slow_reader() {
    let Some(server) = NameServerProcess::start() else {
        return;
    };
    // ~2.5 MB of responses: past the server's output pause (1 MiB), so
    // reading stops and resumes while the client is slow to read.
    const COUNT: i32 = 10_000;
    let mut client = server.connect();
    let mut batch = Vec::new();
    for opaque in 1..=COUNT {
        let mut request = route_query(&format!("Topic{opaque}"));
        request.opaque = opaque;
        batch.extend_from_slice(&Client::encode(&request));
    }
    // Written from another thread so that a server answering while we
    // still write can never deadlock the test on full socket buffers.
    let mut writer = client.stream.try_clone().unwrap();
    let write = std::thread::spawn(move || writer.write_all(&batch));
    std::thread::sleep(Duration::from_millis(300));
    for opaque in 1..=COUNT {
        let response = client.read_response();
        assert_eq!(response.opaque, opaque);
        assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
        let remark = response.remark.unwrap_or_default();
        assert!(
            remark.contains(&format!("topic: Topic{opaque}\n")),
            "{remark}"
        );
    }
    write.join().unwrap().unwrap();
}

#[test]
fn sigterm_stops_the_name_server_with_status_zero() {
    let Some(server) = NameServerProcess::start() else {
        return;
    };
    let mut client = server.connect();
    assert_eq!(
        client.call(route_query("Before")).code,
        response_code::TOPIC_NOT_EXIST
    );
    let (status, _) = server.terminate();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        client.is_closed_by_server(),
        "connections are closed on stop"
    );
}

fn kv_key(namespace: &str, key: &str) -> ExtFields {
    GetKvConfigRequestHeader {
        namespace: namespace.into(),
        key: key.into(),
    }
    .to_ext_fields()
}

fn get_kv(client: &mut Client, namespace: &str, key: &str) -> Option<String> {
    let response = client.call(RemotingCommand::new_request(
        request_code::GET_KV_CONFIG,
        kv_key(namespace, key),
    ));
    match response.code {
        response_code::SUCCESS => response.ext_fields.get("value").map(str::to_owned),
        response_code::QUERY_NOT_FOUND => None,
        code => panic!("GET_KV_CONFIG answered {code}: {:?}", response.remark),
    }
}

#[test]
fn kv_changes_answered_are_in_kv_config_json_and_survive_a_kill_nine() {
    let dir = fresh_store("namesrv-kv-kill");
    let Some(server) = NameServerProcess::start_in(&dir) else {
        return;
    };
    let mut client = server.connect();
    for (key, value) in [("TopicA", "broker-a:8"), ("TopicB", "broker-a:4")] {
        let header = PutKvConfigRequestHeader {
            namespace: "ORDER_TOPIC_CONFIG".into(),
            key: key.into(),
            value: value.into(),
        };
        let response = client.call(RemotingCommand::new_request(
            request_code::PUT_KV_CONFIG,
            header.to_ext_fields(),
        ));
        assert_eq!(
            response.code,
            response_code::SUCCESS,
            "{:?}",
            response.remark
        );
    }
    let response = client.call(RemotingCommand::new_request(
        request_code::DELETE_KV_CONFIG,
        kv_key("ORDER_TOPIC_CONFIG", "TopicB"),
    ));
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    // Answered means written: the file holds the change before any stop.
    let text = std::fs::read_to_string(kv_config_path(&dir)).unwrap();
    assert!(text.contains("\"TopicA\""), "{text}");
    assert!(!text.contains("\"TopicB\""), "{text}");
    drop(server); // SIGKILL

    let Some(server) = NameServerProcess::start_in(&dir) else {
        return;
    };
    let mut client = server.connect();
    assert_eq!(
        get_kv(&mut client, "ORDER_TOPIC_CONFIG", "TopicA").as_deref(),
        Some("broker-a:8")
    );
    assert_eq!(get_kv(&mut client, "ORDER_TOPIC_CONFIG", "TopicB"), None);
}

#[test]
fn an_undecodable_kv_config_json_stops_startup_naming_the_file() {
    let dir = fresh_store("namesrv-kv-bad");
    let path = kv_config_path(&dir);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"{\"configTable\": [").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_ringmq"))
        .args(["namesrv", "--listen-port", "0", "--bind", "127.0.0.1"])
        .arg("--kv-config-path")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");

    let output = Command::new(env!("CARGO_BIN_EXE_ringmq"))
        .args([
            "namesrv",
            "--listen-port",
            "0",
            "--kv-config-path",
            "/tmp/kv.json",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("must name a file called kvConfig.json"),
        "{stderr}"
    );
}
