//! The name server plugged into the remoting server: maps connections to the
//! name server's channels, runs its route scan on the server's tick, turns
//! its side effects into connection closes, and keeps `kvConfig.json`.
//!
//! The KV configuration is written by a [`Persister`] thread of its own
//! (the ring thread does no file I/O): a PUT_KV_CONFIG or DELETE_KV_CONFIG
//! that changes the table is answered once the file holding the change is
//! on disk, as Java's `KVConfigManager` writes the file before it answers.
//! A write that fails turns the held answer into SYSTEM_ERROR (the change
//! is in effect in memory and the write is retried).
//!
//! ```text
//! PUT_KV_CONFIG ─▶ NameServer::handle ─▶ Effect::PersistKvConfig
//!   ─▶ persister.write(kvConfig.json) ─▶ ticket; answer held
//! persister thread: file written ─▶ waker ─▶ on_turn: ticket Written ─▶ answer out
//! ```
//!
//! # Invariants
//! - A [`ConnectionId`] and the [`ChannelId`] of the same connection carry
//!   the same number, so a close the name server asks for names the
//!   connection it saw the request on.
//! - A successful answer to a KV change leaves only once a `kvConfig.json`
//!   holding that change (or a later one) is written, also when the change
//!   was already made by an earlier request whose write is still pending.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::json::{KvConfigFile, decode, encode_pretty};
use ringmq_storage::ring::Waker;

use super::{ConnectionId, RequestHandler};
use crate::namesrv::{ChannelId, Effect, KvConfig, NameServer, ROUTE_SCAN_INTERVAL_MS};
use crate::persist::{
    ConfigDir, ConfigFile, PersistError, Persister, PersisterHandle, TicketState, WriteTicket,
};

/// Where the name server keeps its KV configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KvConfigError {
    /// The path does not name a file called `kvConfig.json` in a directory.
    #[error(
        "kvConfigPath {} must name a file called kvConfig.json (its directory is free), \
         e.g. /home/mq/namesrv/kvConfig.json",
        path.display()
    )]
    BadPath {
        /// The path given.
        path: PathBuf,
    },
    /// The file (or its `.bak`) could not be read or decoded, or the
    /// writing thread could not start (the error names the file).
    #[error(transparent)]
    Persist(#[from] PersistError),
}

/// The directory a `kvConfigPath` names: ringmq's persister writes
/// [`ConfigFile::KvConfig`] (`kvConfig.json`) into a directory, so the path
/// must end in that name.
///
/// # Errors
/// [`KvConfigError::BadPath`].
pub fn kv_config_dir(path: &Path) -> Result<ConfigDir, KvConfigError> {
    let bad = || KvConfigError::BadPath {
        path: path.to_owned(),
    };
    if path.file_name().and_then(|name| name.to_str()) != Some(ConfigFile::KvConfig.file_name()) {
        return Err(bad());
    }
    match path.parent() {
        // A bare file name is in the working directory.
        Some(dir) if dir.as_os_str().is_empty() => Ok(ConfigDir::new(".")),
        Some(dir) => Ok(ConfigDir::new(dir)),
        None => Err(bad()),
    }
}

/// Loads the KV configuration at `path` (the file, else its `.bak`; empty
/// when neither exists) and starts the thread that writes it.
///
/// # Errors
/// [`KvConfigError`]: a bad path, an unreadable or undecodable file (named),
/// or no thread.
pub fn open_kv_config(path: &Path) -> Result<(KvConfig, PersisterHandle), KvConfigError> {
    let dir = kv_config_dir(path)?;
    let kv_config = dir
        .load_with(ConfigFile::KvConfig, decode::<KvConfigFile>)?
        .map(KvConfig::from_file)
        .unwrap_or_default();
    let persister = Persister::spawn(dir)?;
    Ok((kv_config, persister))
}

/// An answer to a KV change waiting for its write.
#[derive(Debug)]
struct HeldAnswer {
    ticket: WriteTicket,
    conn: ConnectionId,
    answer: RemotingCommand,
}

/// `kvConfig.json`'s writer and the answers waiting for it.
#[derive(Debug)]
struct KvStore {
    persister: PersisterHandle,
    /// The latest write handed in, until it is written.
    latest: Option<WriteTicket>,
    held: Vec<HeldAnswer>,
}

/// [`NameServer`] as a [`RequestHandler`].
#[derive(Debug)]
pub struct NameServerHandler {
    name_server: NameServer,
    closes: Vec<ConnectionId>,
    /// `None`: the KV table lives in memory only (tests).
    kv_store: Option<KvStore>,
    outbound: Vec<(ConnectionId, RemotingCommand)>,
    kv_memory_only_warned: bool,
}

impl NameServerHandler {
    /// Serves `name_server`, its KV configuration in memory only.
    pub fn new(name_server: NameServer) -> Self {
        NameServerHandler {
            name_server,
            closes: Vec::new(),
            kv_store: None,
            outbound: Vec::new(),
            kv_memory_only_warned: false,
        }
    }

    /// Serves `name_server`, writing its KV configuration through
    /// `persister` (from [`open_kv_config`]). Call
    /// [`NameServerHandler::wake_on_kv_written`] once the server is bound.
    pub fn with_kv_persister(name_server: NameServer, persister: PersisterHandle) -> Self {
        let mut handler = Self::new(name_server);
        handler.kv_store = Some(KvStore {
            persister,
            latest: None,
            held: Vec::new(),
        });
        handler
    }

    /// Has the KV writer wake `waker` (the server's ring) after each write,
    /// so held answers leave at once.
    pub fn wake_on_kv_written(&self, waker: Waker) {
        if let Some(store) = &self.kv_store {
            store.persister.on_batch_done(move || {
                let _ = waker.wake();
            });
        }
    }

    /// The KV writer, to stop after the server has run
    /// ([`PersisterHandle::flush_and_stop`]).
    pub fn into_kv_persister(self) -> Option<PersisterHandle> {
        self.kv_store.map(|store| store.persister)
    }

    /// The name server's state.
    pub fn name_server(&self) -> &NameServer {
        &self.name_server
    }

    /// Carries out `effects`; returns the ticket of a KV write handed in.
    fn apply(&mut self, effects: Vec<Effect>) -> Option<WriteTicket> {
        let mut ticket = None;
        for effect in effects {
            match effect {
                Effect::CloseChannel(channel) => self.closes.push(ConnectionId(channel.0)),
                Effect::PersistKvConfig => match &mut self.kv_store {
                    Some(store) => {
                        let mut content = Vec::new();
                        encode_pretty(&self.name_server.kv_config().to_file(), &mut content);
                        let written = store.persister.write(ConfigFile::KvConfig, content);
                        store.latest = Some(written);
                        ticket = Some(written);
                    }
                    None => {
                        if !self.kv_memory_only_warned {
                            self.kv_memory_only_warned = true;
                            tracing::warn!(
                                "the KV configuration changed; this name server keeps it in \
                                 memory only, so the change is lost on restart"
                            );
                        }
                    }
                },
            }
        }
        ticket
    }

    /// The write a successful answer to `request` must wait for: the one
    /// its change handed in, else, for a KV change that changed nothing,
    /// the latest write while it is not on disk (the value it found may be
    /// an earlier request's, not written yet).
    fn write_to_await(
        &self,
        request: &RemotingCommand,
        handed_in: Option<WriteTicket>,
    ) -> Option<WriteTicket> {
        let store = self.kv_store.as_ref()?;
        if handed_in.is_some() {
            return handed_in;
        }
        let changes_kv = request.code == request_code::PUT_KV_CONFIG
            || request.code == request_code::DELETE_KV_CONFIG;
        let latest = store.latest.filter(|_| changes_kv)?;
        (store.persister.ticket_state(latest) != TicketState::Written).then_some(latest)
    }

    /// Sends the held answers whose writes are settled.
    fn release_written(&mut self) {
        let Some(store) = &mut self.kv_store else {
            return;
        };
        if store.held.is_empty() {
            return;
        }
        let persister = &store.persister;
        for held in std::mem::take(&mut store.held) {
            let answer = match persister.ticket_state(held.ticket) {
                TicketState::Pending => {
                    store.held.push(held);
                    continue;
                }
                TicketState::Written => held.answer,
                TicketState::Failed(error) => {
                    let remark = format!(
                        "the KV change is in effect but not on disk (it is retried; a restart \
                         before that undoes it): {}: {error}",
                        ConfigFile::KvConfig.file_name()
                    );
                    RemotingCommand::new_response(
                        response_code::SYSTEM_ERROR,
                        held.answer.opaque,
                        Some(remark),
                    )
                }
            };
            self.outbound.push((held.conn, answer));
        }
        if let Some(latest) = store.latest
            && persister.ticket_state(latest) == TicketState::Written
        {
            store.latest = None;
        }
    }
}

impl RequestHandler for NameServerHandler {
    fn handle(
        &mut self,
        conn: ConnectionId,
        _peer: SocketAddr,
        cmd: RemotingCommand,
        now_ms: i64,
    ) -> Option<RemotingCommand> {
        let handled = self.name_server.handle(&cmd, ChannelId(conn.0), now_ms);
        let handed_in = self.apply(handled.effects);
        let response = handled.response?;
        if response.code != response_code::SUCCESS {
            return Some(response);
        }
        let Some(ticket) = self.write_to_await(&cmd, handed_in) else {
            return Some(response);
        };
        if let Some(store) = &mut self.kv_store {
            store.held.push(HeldAnswer {
                ticket,
                conn,
                answer: response,
            });
        }
        None
    }

    fn on_closed(&mut self, conn: ConnectionId) {
        let removed = self.name_server.on_channel_closed(ChannelId(conn.0));
        if removed > 0 {
            tracing::info!(
                connection = conn.0,
                brokers = removed,
                "broker connection closed: its routes are removed"
            );
        }
    }

    fn on_tick(&mut self, now_ms: i64) {
        let effects = self.name_server.scan(now_ms);
        self.apply(effects);
    }

    fn tick_interval(&self) -> Duration {
        Duration::from_millis(ROUTE_SCAN_INTERVAL_MS as u64)
    }

    fn take_close_requests(&mut self, out: &mut Vec<ConnectionId>) {
        out.append(&mut self.closes);
    }

    fn take_outbound(&mut self, out: &mut Vec<(ConnectionId, RemotingCommand)>) {
        out.append(&mut self.outbound);
    }

    fn on_turn(&mut self, _now_ms: i64) {
        self.release_written();
    }

    fn wait_bound(&self) -> Option<Duration> {
        // The writer wakes the ring after each write; this bound only
        // covers a wake-up lost before `wake_on_kv_written` was called.
        self.has_pending().then_some(KV_HELD_POLL)
    }

    fn has_pending(&self) -> bool {
        self.kv_store
            .as_ref()
            .is_some_and(|store| !store.held.is_empty())
            || !self.outbound.is_empty()
    }
}

/// How long the ring waits at most while KV answers are held.
const KV_HELD_POLL: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namesrv::register::{BrokerIdentity, register_broker_request};
    use crate::namesrv::{BROKER_CHANNEL_EXPIRED_TIME_MS, NameServerSettings};
    use crate::persist::test_dir::TempDir;
    use ringmq_protocol::header::{
        CustomHeader, GetKvConfigRequestHeader, PutKvConfigRequestHeader,
    };
    use ringmq_protocol::json::DataVersion;
    use std::collections::BTreeMap;
    use std::time::Instant;

    impl TempDir {
        fn kv_path(&self) -> PathBuf {
            self.0
                .join("namesrv")
                .join(ConfigFile::KvConfig.file_name())
        }
    }

    fn put(opaque: i32, key: &str, value: &str) -> RemotingCommand {
        let header = PutKvConfigRequestHeader {
            namespace: "ns".into(),
            key: key.into(),
            value: value.into(),
        };
        let mut request =
            RemotingCommand::new_request(request_code::PUT_KV_CONFIG, header.to_ext_fields());
        request.opaque = opaque;
        request
    }

    /// Turns the handler until `count` answers came out (5 s at most).
    fn answers(
        handler: &mut NameServerHandler,
        count: usize,
    ) -> Vec<(ConnectionId, RemotingCommand)> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut out = Vec::new();
        while out.len() < count {
            assert!(
                Instant::now() < deadline,
                "{} of {count} answers",
                out.len()
            );
            handler.on_turn(0);
            handler.take_outbound(&mut out);
            std::thread::sleep(Duration::from_millis(1));
        }
        out
    }

    fn handler_at(path: &Path) -> NameServerHandler {
        let (kv_config, persister) = open_kv_config(path).unwrap();
        NameServerHandler::with_kv_persister(
            NameServer::with_kv_config(NameServerSettings::default(), kv_config),
            persister,
        )
    }

    #[test]
    fn kv_config_path_must_name_kv_config_json_in_a_directory() {
        assert_eq!(
            kv_config_dir(Path::new("/data/namesrv/kvConfig.json"))
                .unwrap()
                .path(),
            Path::new("/data/namesrv")
        );
        assert_eq!(
            kv_config_dir(Path::new("kvConfig.json")).unwrap().path(),
            Path::new(".")
        );
        for bad in ["/data/namesrv/kv.json", "/data/namesrv/", "/", ""] {
            let error = kv_config_dir(Path::new(bad)).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains("must name a file called kvConfig.json"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn a_kv_change_is_answered_once_written_and_loads_again() {
        let dir = TempDir::new("held");
        let path = dir.kv_path();
        let mut handler = handler_at(&path);
        let peer: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        assert!(
            handler
                .handle(ConnectionId(1), peer, put(7, "k", "v"), 0)
                .is_none()
        );
        assert!(handler.has_pending());
        // The same value again changes nothing, but its write may be pending:
        // answered only once it is written too.
        let expected = match handler.handle(ConnectionId(2), peer, put(8, "k", "v"), 0) {
            None => 2,
            Some(answer) => {
                assert_eq!(answer.code, response_code::SUCCESS);
                assert!(path.exists(), "answered at once only if already written");
                1
            }
        };
        let out = answers(&mut handler, expected);
        for (conn, answer) in &out {
            assert!(conn.0 == 1 || conn.0 == 2);
            assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
        }
        assert!(!handler.has_pending());
        let text = std::fs::read_to_string(&path).unwrap();
        let file: KvConfigFile = decode(text.as_bytes()).unwrap();
        assert_eq!(file.config_table["ns"]["k"], "v");
        // Reads do not wait.
        let header = GetKvConfigRequestHeader {
            namespace: "ns".into(),
            key: "k".into(),
        };
        let get = RemotingCommand::new_request(request_code::GET_KV_CONFIG, header.to_ext_fields());
        assert_eq!(
            handler.handle(ConnectionId(1), peer, get, 0).unwrap().code,
            response_code::SUCCESS
        );
        handler
            .into_kv_persister()
            .unwrap()
            .flush_and_stop()
            .unwrap();

        let handler = handler_at(&path);
        assert_eq!(handler.name_server().kv_config().get("ns", "k"), Some("v"));
        handler
            .into_kv_persister()
            .unwrap()
            .flush_and_stop()
            .unwrap();
    }

    #[test]
    fn a_failed_kv_write_answers_system_error_naming_the_file() {
        let dir = TempDir::new("fail");
        let path = dir.0.join("blocked").join(ConfigFile::KvConfig.file_name());
        let (kv_config, persister) = open_kv_config(&path).unwrap();
        // Where kvConfig.json's directory would be created is now a file:
        // every write fails.
        std::fs::write(dir.0.join("blocked"), b"not a directory").unwrap();
        let mut handler = NameServerHandler::with_kv_persister(
            NameServer::with_kv_config(NameServerSettings::default(), kv_config),
            persister,
        );
        let peer: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        assert!(
            handler
                .handle(ConnectionId(1), peer, put(3, "k", "v"), 0)
                .is_none()
        );
        let out = answers(&mut handler, 1);
        let answer = &out[0].1;
        assert_eq!(answer.opaque, 3);
        assert_eq!(answer.code, response_code::SYSTEM_ERROR);
        let remark = answer.remark.as_deref().unwrap_or_default();
        assert!(remark.contains("kvConfig.json"), "{remark}");
        assert!(remark.contains("not on disk"), "{remark}");
        // In memory it holds, as the remark says.
        assert_eq!(handler.name_server().kv_config().get("ns", "k"), Some("v"));
    }

    #[test]
    fn an_undecodable_kv_config_json_falls_back_to_its_backup_else_fails() {
        let dir = TempDir::new("decode");
        let path = dir.kv_path();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"{\"configTable\": [").unwrap();
        let error = open_kv_config(&path).unwrap_err();
        assert!(error.to_string().contains("kvConfig.json"), "{error}");
        std::fs::write(
            path.with_file_name("kvConfig.json.bak"),
            br#"{"configTable":{"ns":{"k":"from-bak"}}}"#,
        )
        .unwrap();
        let (kv_config, persister) = open_kv_config(&path).unwrap();
        assert_eq!(kv_config.get("ns", "k"), Some("from-bak"));
        persister.flush_and_stop().unwrap();
    }

    fn identity() -> BrokerIdentity {
        BrokerIdentity {
            cluster_name: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            broker_id: 0,
            broker_addr: "127.0.0.1:10911".into(),
            ha_server_addr: "127.0.0.1:10912".into(),
            heartbeat_timeout_ms: None,
            enable_acting_master: false,
            zone_name: None,
        }
    }

    #[test]
    fn expired_broker_connection_is_asked_to_close_on_tick() {
        let mut handler = NameServerHandler::new(NameServer::new(NameServerSettings::default()));
        let peer: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        let conn = ConnectionId(7 << 32 | 3);
        let mut request =
            register_broker_request(&identity(), DataVersion::default(), &BTreeMap::new());
        request.opaque = 1;
        let response = handler.handle(conn, peer, request, 1_000).unwrap();
        assert_eq!(response.code, 0, "{:?}", response.remark);
        handler.on_tick(1_000 + BROKER_CHANNEL_EXPIRED_TIME_MS + 1);
        let mut closes = Vec::new();
        handler.take_close_requests(&mut closes);
        assert_eq!(closes, vec![conn]);
        handler.take_close_requests(&mut closes);
        assert_eq!(closes.len(), 1, "requests are handed out once");
    }
}
