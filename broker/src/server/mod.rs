//! The remoting server: one listening socket and its connections on one
//! io_uring [`Ring`] (its own, or its [`Lane`] of a shard's ring), one
//! thread. Every broker shard runs one instance (the
//! listener has SO_REUSEPORT, so every shard listens on the same port), and
//! `ringmq namesrv` runs one with the name server as its [`RequestHandler`].
//!
//! ```text
//!            ┌──────────── one loop turn ─────────────────────────────────────┐
//!  outbound: handler.take_outbound ─▶ out_queues (deferred answers, pushes)
//!            handler.take_spliced ─▶ head to out_queue, body kept in its pipe
//!  flush: dirty connections ─▶ Send(out_queue) or Splice(pipe ─▶ socket)
//!         (one per connection, ≤ 1 in flight)
//!  ring.turn (wait ≤ handler.wait_bound) ─▶ completions:
//!                             accept ─▶ new Connection ─▶ Recv
//!                             recv   ─▶ take_requests ─▶ handler.handle ─▶ out_queue
//!                             send   ─▶ next Send / resume reading
//!              timers: tick ─▶ handler.on_tick       woken ─▶ shutdown requested?
//!  backlog: connections with complete frames left ─▶ take_requests (bounded)
//!  handler.on_turn (poll other reactors, inboxes, deadlines)
//!            └────────────────────────────────────────────────────────────────┘
//! ```
//!
//! A handler may answer later: `handle` returns `None` and the finished
//! command (opaque and flags set by the handler) comes back through
//! [`RequestHandler::take_outbound`], as do requests the handler pushes to
//! clients. The ring's waker ([`Server::waker`]) lets other threads, and
//! other rings through `notify_eventfd`, end the wait.
//!
//! Framing errors (a length word over [`FRAME_SIZE_MAX`] or below 4, an
//! unknown serialize type, a header longer than its frame, a header that
//! does not decode) close that connection only, with one `warn` naming the
//! peer and the error, as Java's `NettyDecoder` closes the channel. A peer
//! that closes mid-frame is a normal close. Which request codes exist is the
//! handler's business. Responses are JSON (serialize type 0), carry the
//! request's opaque and the response flag, and are never sent for one-way
//! requests.
//!
//! Closing a connection: `shutdown(SHUT_RDWR)` wakes its Recv (0 bytes) and
//! its Send (EPIPE); when both have completed, the descriptor is closed and
//! the connection leaves the table. The ring has no per-operation cancel,
//! and none is needed.
//!
//! Stopping ([`ShutdownHandle::request`], from the SIGTERM/SIGINT thread of
//! [`signal`]): the listener is shut down (its accept completes), no more
//! reads are armed, the handler is told ([`RequestHandler::on_stop`]),
//! queued responses are flushed and the handler's owed answers awaited
//! ([`RequestHandler::has_pending`]; together at most
//! [`STOP_FLUSH_TIMEOUT`]), then every connection is shut down and `run`
//! returns once their operations have completed.
//!
//! # Invariants
//! - A token is `TOKEN_TAG | kind << 48 | slab key`; a connection's slab
//!   entry lives until none of its operations is in flight, so a completion
//!   always finds the connection it was submitted for.
//! - At most one Recv and one Send per connection, and one accept, are in
//!   flight, and the stop or accept-retry timer: at most
//!   `2 * connections_max + 2` operations, which the ring's capacity covers
//!   (checked by [`Server::bind`]).
//! - A connection's output waiting for a Send never exceeds
//!   [`OUTPUT_QUEUE_SIZE_MAX`]: the connection is closed first. Reading
//!   pauses while more than [`OUTPUT_PAUSE_SIZE`] bytes are pending, so a
//!   client that does not read its responses stops being read.
//! - At most [`REQUESTS_PER_CONNECTION_TURN_MAX`] requests of one connection
//!   are handled per turn.
//! - The ring thread never blocks: no file I/O, no sleep; the only syscalls
//!   outside the ring are `getpeername`, `setsockopt`, `shutdown` and
//!   `close` on sockets, none of which waits.

mod connection;
mod name_server;
pub mod signal;
pub mod socket;
mod stream;

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ringmq_protocol::command::RemotingCommand;
use ringmq_storage::ring::{
    COMPLETIONS_PER_TURN_MAX, Completion, Lane, OWNER_SHIFT, Op, Ring, RingConfig, RingError,
    SharedRing, TimerId, Token, TurnOutput, Waker,
};
use slab::Slab;

pub use connection::{
    READ_BUFFER_SIZE_INITIAL, READ_BUFFER_SIZE_KEEP_MAX, READ_BUFFER_SIZE_MAX, SplicedBody,
};
pub use name_server::{KvConfigError, NameServerHandler, kv_config_dir, open_kv_config};
pub use ringmq_protocol::limits::FRAME_SIZE_MAX;
pub use signal::ShutdownHandle;

use connection::Connection;

/// Default of [`ServerConfig::connections_max`] (`connectionsPerShardMax`).
pub const CONNECTION_COUNT_MAX: usize = 2000;
/// Default of [`ServerConfig::ring_entries`] (a server with a ring of its
/// own: the name server; a shard's ring is sized by `ringEntries`).
pub const RING_ENTRIES: u32 = 4096;
/// Requests of one connection handled per loop turn before the others get
/// their turn (the rest wait in the read buffer).
pub const REQUESTS_PER_CONNECTION_TURN_MAX: usize = 64;
/// Output of one connection past which it is closed (a client that sends
/// and never reads).
pub const OUTPUT_QUEUE_SIZE_MAX: usize = 2 * FRAME_SIZE_MAX as usize;
/// Output of one connection past which its requests are no longer read.
pub const OUTPUT_PAUSE_SIZE: usize = 1024 * 1024;
/// How long a stop waits for queued responses to go out.
pub const STOP_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a stop waits for shut-down connections' operations to complete.
pub const STOP_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause before accepting again after the kernel refused an accept (out of
/// descriptors or memory), so a persistent error does not spin the loop.
pub const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);
/// Longest wait of one turn when nothing is due (timers shorten it).
pub const IDLE_WAIT: Duration = Duration::from_secs(1);

// One Recv and one Send per connection plus the accept must fit the ring.
const _: () = assert!(2 * CONNECTION_COUNT_MAX < RING_ENTRIES as usize - 2);
const _: () = assert!(RING_ENTRIES <= ringmq_storage::ring::RING_ENTRIES_MAX);
const _: () = assert!(OUTPUT_PAUSE_SIZE < OUTPUT_QUEUE_SIZE_MAX);
const _: () = assert!(OUTPUT_QUEUE_SIZE_MAX >= FRAME_SIZE_MAX as usize);

/// The owner tag of the server's lane: the top byte of every token it
/// submits.
pub const SERVER_OWNER: u8 = 0x4E;
const TOKEN_TAG: Token = (SERVER_OWNER as Token) << OWNER_SHIFT;
const KIND_SHIFT: u32 = 48;
const KIND_ACCEPT: Token = 1;
const KIND_RECV: Token = 2;
const KIND_SEND: Token = 3;
const KIND_TICK: Token = 4;
const KIND_ACCEPT_RETRY: Token = 5;
const KIND_STOP_DEADLINE: Token = 6;
const KIND_SPLICE: Token = 7;
const KEY_MASK: Token = 0xFFFF_FFFF;

/// Ring slots a server with `connections_max` connections may hold at
/// once: a receive and a send (or splice) per connection, the accept, and
/// one to spare for a timer.
pub fn ring_slots_needed(connections_max: usize) -> usize {
    2 * connections_max + 3
}

fn token(kind: Token, key: usize) -> Token {
    assert!(key as u64 <= KEY_MASK, "slab key {key} past 32 bits");
    TOKEN_TAG | kind << KIND_SHIFT | key as Token
}

/// Names a connection for the handler; unique over the server's life and,
/// when every server of a process has its own [`ServerConfig::connection_tag`],
/// over the process: the tag in the top 8 bits, a 24-bit serial number, the
/// table slot in the low 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(pub u64);

/// Bits of a [`ConnectionId`] the serial number keeps.
const SERIAL_MASK: u64 = 0xFF_FFFF;

impl ConnectionId {
    fn new(tag: u8, serial: u32, key: usize) -> Self {
        ConnectionId(u64::from(tag) << 56 | (u64::from(serial) & SERIAL_MASK) << 32 | key as u64)
    }

    fn key(self) -> usize {
        (self.0 & KEY_MASK) as usize
    }

    /// The [`ServerConfig::connection_tag`] of the server that accepted it.
    pub fn tag(self) -> u8 {
        (self.0 >> 56) as u8
    }
}

/// What the server calls with requests: the name server now, the broker
/// later. All calls run on the ring thread and must not block.
pub trait RequestHandler {
    /// Handles one request (or stray response) of `conn`; the answer goes
    /// back on the same connection unless the request is one-way. The
    /// server sets the answer's opaque and response flag.
    fn handle(
        &mut self,
        conn: ConnectionId,
        peer: SocketAddr,
        cmd: RemotingCommand,
        now_ms: i64,
    ) -> Option<RemotingCommand>;

    /// `conn` is closed: no more requests will come from it.
    fn on_closed(&mut self, conn: ConnectionId);

    /// Called every [`RequestHandler::tick_interval`].
    fn on_tick(&mut self, now_ms: i64);

    /// How often [`RequestHandler::on_tick`] runs.
    fn tick_interval(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// Moves the connections the handler wants closed into `out`; the
    /// server asks after every call. Ids of connections already gone are
    /// ignored.
    fn take_close_requests(&mut self, out: &mut Vec<ConnectionId>) {
        let _ = out;
    }

    /// Moves finished commands for any connection into `out`: deferred
    /// answers (the handler sets their opaque and response flag) and
    /// requests to clients. The server asks every turn; commands for
    /// connections already gone are dropped.
    fn take_outbound(&mut self, out: &mut Vec<(ConnectionId, RemotingCommand)>) {
        let _ = out;
    }

    /// As [`RequestHandler::take_outbound`], for answers whose body the
    /// server splices from pipes to the socket, the parts in order (the
    /// command's own body is not sent). The server asks every turn, after `take_outbound`, so a
    /// connection's command from `take_outbound` in the same turn goes out
    /// before these.
    fn take_spliced(&mut self, out: &mut Vec<(ConnectionId, RemotingCommand, Vec<SplicedBody>)>) {
        let _ = out;
    }

    /// Called once every loop turn, after the completions (poll other
    /// reactors without waiting, drain inboxes, expire deadlines).
    fn on_turn(&mut self, now_ms: i64) {
        let _ = now_ms;
    }

    /// The longest the next wait may last (None: [`IDLE_WAIT`]).
    fn wait_bound(&self) -> Option<Duration> {
        None
    }

    /// Whether answers are still owed; a stop waits (at most
    /// [`STOP_FLUSH_TIMEOUT`]) until there are none.
    fn has_pending(&self) -> bool {
        false
    }

    /// A stop began: answer what can be answered at once (held requests).
    fn on_stop(&mut self, now_ms: i64) {
        let _ = now_ms;
    }
}

/// How a server is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// Address to listen on (port 0: the kernel picks one).
    pub listen_addr: SocketAddr,
    /// Use multishot accept (the default). It falls back to one accept per
    /// connection by itself where the kernel refuses it; false forces that
    /// fallback (tests).
    pub multishot_accept: bool,
    /// The top byte of every [`ConnectionId`] this server hands out (a
    /// shard's id, so that ids are unique across the shards of a process).
    pub connection_tag: u8,
    /// Submission queue entries of the server's ring.
    pub ring_entries: u32,
    /// Most connections served at once; one more is closed at once. Each
    /// holds a receive and a send in the ring, beside the accept, so
    /// `2 * connections_max + 2` must stay below the ring's entries.
    pub connections_max: usize,
    /// A listener of this process already holds the port (an earlier shard,
    /// or the broker's placeholder for port 0) and this server joins its
    /// SO_REUSEPORT group. When false (the default) the bind first waits
    /// (up to [`PORT_FREE_WAIT`]) until no socket listens on the port, so a
    /// second broker started on a taken port fails instead of sharing it.
    pub joins_port: bool,
}

impl ServerConfig {
    /// Listens on `listen_addr` with the defaults.
    pub fn new(listen_addr: SocketAddr) -> Self {
        ServerConfig {
            listen_addr,
            multishot_accept: true,
            connection_tag: 0,
            ring_entries: RING_ENTRIES,
            connections_max: CONNECTION_COUNT_MAX,
            joins_port: false,
        }
    }
}

/// Errors of the server as a whole (errors of one connection only close it).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The ring could not be created.
    #[error("setting up the io_uring reactor")]
    Ring(#[source] RingError),
    /// The configuration does not fit together (the message says how).
    #[error("invalid server configuration: {0}")]
    Config(String),
    /// Another socket (of another process, or a listener this process
    /// did not mean to join) already listens on the port.
    #[error(
        "port {} is already in use by another process (another broker or name server?): \
         stop it or listen on another port",
        addr.port()
    )]
    PortInUse {
        /// The address.
        addr: SocketAddr,
    },
    /// The listening socket could not be created, bound or listened on.
    #[error("listening on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// A loop turn failed (`io_uring_enter` outside normal flow).
    #[error("running the io_uring reactor")]
    Turn(#[source] RingError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AcceptMode {
    /// Multishot accept (Linux 5.19+): one armed op, one completion per
    /// connection.
    Multi,
    /// One accept op per connection (older kernels answer EINVAL to
    /// multishot).
    Single,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// Stop requested: no accepting, no reading; flushing output.
    Flushing,
    /// Every connection shut down; waiting for their operations.
    Closing,
}

/// The server: a listener, its connections and their handler, on one ring.
pub struct Server<H: RequestHandler> {
    lane: Lane,
    handler: H,
    listener: OwnedFd,
    local_addr: SocketAddr,
    accept_mode: AcceptMode,
    accept_in_flight: bool,
    accepted_count: u64,
    connections_max: usize,
    connections: Slab<Connection>,
    next_serial: u32,
    dirty: Vec<usize>,
    backlog: Vec<usize>,
    close_requests: Vec<ConnectionId>,
    outbound: Vec<(ConnectionId, RemotingCommand)>,
    /// Reused buffer for [`RequestHandler::take_spliced`].
    spliced: Vec<(ConnectionId, RemotingCommand, Vec<SplicedBody>)>,
    connection_tag: u8,
    shutdown: ShutdownHandle,
    phase: Phase,
    stop_timer: Option<TimerId>,
}

impl<H: RequestHandler> std::fmt::Debug for Server<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .field("connections", &self.connections.len())
            .field("accept_mode", &self.accept_mode)
            .field("phase", &self.phase)
            .finish()
    }
}

/// How long a server claiming a port waits for a listener on it to go.
///
/// A ringmq killed with SIGKILL keeps listening for a moment after its
/// process is reaped: its io_uring ring holds the listener until the
/// kernel tears the ring down (8–13 ms measured here; longer with disk
/// writes in flight), and a restart right after the kill (a supervisor's,
/// or the kill -9 tests') must not fail on it.
pub const PORT_FREE_WAIT: Duration = Duration::from_secs(5);

/// Returns once nothing listens on `addr`'s port ([`socket::check_port_free`]),
/// waiting up to [`PORT_FREE_WAIT`].
fn wait_for_free_port(addr: SocketAddr) -> Result<(), ServerError> {
    let deadline = Instant::now() + PORT_FREE_WAIT;
    let mut said = false;
    loop {
        match socket::check_port_free(addr) {
            Ok(()) => return Ok(()),
            Err(source) if source.kind() != io::ErrorKind::AddrInUse => {
                return Err(ServerError::Listen { addr, source });
            }
            Err(_) if Instant::now() >= deadline => return Err(ServerError::PortInUse { addr }),
            Err(_) => {
                if !said {
                    said = true;
                    tracing::info!(
                        port = addr.port(),
                        wait_s = PORT_FREE_WAIT.as_secs(),
                        "the port is in use; waiting for it to free (a broker killed a moment ago holds it until its ring is torn down)"
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl<H: RequestHandler> Server<H> {
    /// Creates the ring and the listening socket on the calling thread,
    /// which must be the one that calls [`Server::run`].
    ///
    /// # Errors
    /// [`ServerError::Ring`] (io_uring unavailable: the message says why) or
    /// [`ServerError::Listen`].
    pub fn bind(config: ServerConfig, handler: H) -> Result<Self, ServerError> {
        let ring = Ring::new(RingConfig {
            entries: config.ring_entries,
            ..RingConfig::default()
        })
        .map_err(ServerError::Ring)?;
        let shared = SharedRing::new(ring);
        let lane = shared
            .lane(SERVER_OWNER, shared.capacity())
            .map_err(ServerError::Ring)?;
        Self::bind_on(lane, config, handler)
    }

    /// As [`Server::bind`], on `lane` (owner [`SERVER_OWNER`]) of a ring the
    /// thread shares with other lanes (a shard's disk); `config.ring_entries`
    /// is not used. [`Server::run`] turns and sleeps in that ring; the
    /// handler's [`RequestHandler::on_turn`] collects what the turn parked
    /// for the other lanes.
    ///
    /// # Errors
    /// As [`Server::bind`]; [`ServerError::Config`] when the lane is not the
    /// server's or has no room for `connections_max`.
    pub fn bind_on(lane: Lane, config: ServerConfig, handler: H) -> Result<Self, ServerError> {
        if config.connections_max == 0 {
            return Err(ServerError::Config(
                "connections_max must be positive".into(),
            ));
        }
        if lane.owner() != SERVER_OWNER {
            return Err(ServerError::Config(format!(
                "the server's lane must have owner {SERVER_OWNER:#04x}, not {:#04x}",
                lane.owner()
            )));
        }
        // One receive and one send per connection plus the accept (and a
        // timer) must fit the lane.
        let needs = ring_slots_needed(config.connections_max);
        if lane.capacity() < needs {
            return Err(ServerError::Config(format!(
                "{} connections need a ring of more than {} entries, not {}",
                config.connections_max,
                needs - 1,
                lane.capacity()
            )));
        }
        let listen_error = |source| ServerError::Listen {
            addr: config.listen_addr,
            source,
        };
        if !config.joins_port {
            wait_for_free_port(config.listen_addr)?;
        }
        let listener = socket::bind_listener(config.listen_addr).map_err(listen_error)?;
        let local_addr = socket::local_addr(listener.as_raw_fd()).map_err(listen_error)?;
        let shutdown = ShutdownHandle::new(lane.with_ring(|ring| ring.waker()));
        Ok(Server {
            lane,
            handler,
            listener,
            local_addr,
            accept_mode: if config.multishot_accept {
                AcceptMode::Multi
            } else {
                AcceptMode::Single
            },
            accept_in_flight: false,
            accepted_count: 0,
            connections_max: config.connections_max,
            connections: Slab::new(),
            next_serial: 0,
            dirty: Vec::new(),
            backlog: Vec::new(),
            close_requests: Vec::new(),
            outbound: Vec::new(),
            spliced: Vec::new(),
            connection_tag: config.connection_tag,
            shutdown,
            phase: Phase::Running,
            stop_timer: None,
        })
    }

    /// The address the server listens on (with the port the kernel picked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A handle that stops [`Server::run`] from any thread.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// A handle that wakes the server's ring from any thread (the turn then
    /// runs [`RequestHandler::on_turn`]); its eventfd can also be given to
    /// another ring's `notify_eventfd`.
    pub fn waker(&self) -> Waker {
        self.lane.with_ring(|ring| ring.waker())
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// The handler, mutable (set-up before [`Server::run`]).
    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.handler
    }

    /// Serves until a stop is requested and finished, then returns the
    /// handler.
    ///
    /// # Errors
    /// [`ServerError::Turn`] when the ring itself fails.
    pub fn run(mut self) -> Result<H, ServerError> {
        // Set-up before this (store recovery, waiting for the other shards)
        // is not a stalled turn.
        self.lane.with_ring(|ring| ring.reset_stall_clock());
        self.arm_accept();
        let _ = self.arm_timer(KIND_TICK, self.handler.tick_interval());
        let mut out = TurnOutput::new();
        loop {
            self.drain_outbound();
            self.flush_dirty();
            if self.phase == Phase::Closing && self.connections.is_empty() {
                break;
            }
            if self.phase == Phase::Flushing && self.is_flushed() && !self.handler.has_pending() {
                self.close_all();
                continue;
            }
            let wait = if self.backlog.is_empty() {
                self.handler
                    .wait_bound()
                    .map_or(IDLE_WAIT, |bound| bound.min(IDLE_WAIT))
            } else {
                Duration::ZERO
            };
            out.clear();
            self.lane
                .turn(Some(wait), COMPLETIONS_PER_TURN_MAX, &mut out)
                .map_err(ServerError::Turn)?;
            let now_ms = wall_clock_ms();
            for completion in out.completions.drain(..) {
                self.on_completion(completion, now_ms);
            }
            for fired in out.timers.drain(..) {
                if self.on_timer(fired, now_ms) {
                    return Ok(self.handler);
                }
            }
            if self.phase == Phase::Running && self.shutdown.is_requested() {
                self.begin_stop();
                self.handler.on_stop(now_ms);
            }
            self.process_backlog(now_ms);
            self.handler.on_turn(now_ms);
            self.handler.take_close_requests(&mut self.close_requests);
            self.apply_close_requests();
        }
        tracing::info!(addr = %self.local_addr, "server stopped");
        Ok(self.handler)
    }

    fn on_completion(&mut self, completion: Completion, now_ms: i64) {
        let kind = (completion.token >> KIND_SHIFT) & 0xFF;
        let key = (completion.token & KEY_MASK) as usize;
        assert_eq!(
            completion.token & (0xFF << 56),
            TOKEN_TAG,
            "completion {:#x} not submitted by the server",
            completion.token
        );
        match kind {
            KIND_ACCEPT => self.on_accept(completion),
            KIND_RECV => self.on_recv(key, completion, now_ms),
            KIND_SEND => self.on_send(key, completion),
            KIND_SPLICE => self.on_splice(key, completion),
            _ => unreachable!("completion of unknown kind {kind}"),
        }
    }

    /// Returns true when the server must stop now (close deadline passed).
    fn on_timer(&mut self, fired: Token, now_ms: i64) -> bool {
        match (fired >> KIND_SHIFT) & 0xFF {
            KIND_TICK => {
                self.handler.on_tick(now_ms);
                self.handler.take_close_requests(&mut self.close_requests);
                let _ = self.arm_timer(KIND_TICK, self.handler.tick_interval());
            }
            KIND_ACCEPT_RETRY => self.arm_accept(),
            KIND_STOP_DEADLINE => {
                // A replaced deadline is cancelled and never fires, so this
                // is the current one; fired, it is no longer cancellable.
                self.stop_timer = None;
                match self.phase {
                    Phase::Running => unreachable!("stop deadline while running"),
                    Phase::Flushing => {
                        tracing::warn!(
                            "responses still unsent after the stop timeout: dropping them"
                        );
                        self.close_all();
                    }
                    Phase::Closing => {
                        tracing::warn!(
                            connections = self.connections.len(),
                            "connections still busy after the close timeout: leaving them to \
                             the ring's drain"
                        );
                        return true;
                    }
                }
            }
            kind => unreachable!("timer of unknown kind {kind}"),
        }
        false
    }

    fn arm_timer(&mut self, kind: Token, after: Duration) -> Option<TimerId> {
        match self.lane.add_timer(Instant::now() + after, token(kind, 0)) {
            Ok(id) => Some(id),
            Err(error) => {
                // A handful of timers against a table of 65,536: a bug if it
                // happens, but not one worth killing the server for.
                tracing::error!(%error, kind, "arming a server timer failed");
                None
            }
        }
    }

    /// Replaces the stop deadline (one per stop phase).
    fn arm_stop_deadline(&mut self, after: Duration) {
        if let Some(previous) = self.stop_timer.take() {
            self.lane.cancel_timer(previous);
        }
        self.stop_timer = self.arm_timer(KIND_STOP_DEADLINE, after);
    }

    // ----- accepting -----

    fn arm_accept(&mut self) {
        if self.accept_in_flight || self.phase != Phase::Running {
            return;
        }
        let fd = self.listener.as_raw_fd();
        let op = match self.accept_mode {
            AcceptMode::Multi => Op::AcceptMulti { fd },
            AcceptMode::Single => Op::Accept { fd },
        };
        match self.lane.submit(token(KIND_ACCEPT, 0), op, false) {
            Ok(()) => self.accept_in_flight = true,
            Err((error, _)) => {
                tracing::error!(%error, "submitting accept failed; retrying");
                let _ = self.arm_timer(KIND_ACCEPT_RETRY, ACCEPT_RETRY_DELAY);
            }
        }
    }

    fn on_accept(&mut self, completion: Completion) {
        let ended = !completion.more;
        let mut retry_later = false;
        match completion.result {
            Ok(fd) => {
                // SAFETY: a successful accept completes with a fresh
                // descriptor that nothing else owns.
                let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
                self.accepted_count += 1;
                self.add_connection(fd);
            }
            Err(error) => {
                let errno = error.raw_os_error();
                if ended
                    && self.accept_mode == AcceptMode::Multi
                    && errno == Some(libc::EINVAL)
                    && self.accepted_count == 0
                    && self.phase == Phase::Running
                {
                    tracing::info!("multishot accept unsupported; accepting one at a time");
                    self.accept_mode = AcceptMode::Single;
                } else if self.phase == Phase::Running
                    && !matches!(errno, Some(libc::ECONNABORTED | libc::EINTR | libc::EAGAIN))
                {
                    retry_later = true;
                    tracing::warn!(%error, "accept failed");
                }
            }
        }
        if ended {
            self.accept_in_flight = false;
            if retry_later {
                let _ = self.arm_timer(KIND_ACCEPT_RETRY, ACCEPT_RETRY_DELAY);
            } else {
                self.arm_accept();
            }
        }
    }

    fn add_connection(&mut self, fd: OwnedFd) {
        if self.phase != Phase::Running {
            return;
        }
        if self.connections.len() >= self.connections_max {
            tracing::warn!(
                max = self.connections_max,
                "connection limit reached: closing a new connection"
            );
            return;
        }
        let peer = match socket::peer_addr(fd.as_raw_fd()) {
            Ok(peer) => peer,
            Err(error) => {
                tracing::debug!(%error, "accepted connection vanished before it was served");
                return;
            }
        };
        if let Err(error) = socket::set_nodelay(fd.as_raw_fd()) {
            tracing::debug!(%peer, %error, "setting TCP_NODELAY failed");
        }
        self.next_serial = self.next_serial.wrapping_add(1);
        let entry = self.connections.vacant_entry();
        let id = ConnectionId::new(self.connection_tag, self.next_serial, entry.key());
        let key = entry.key();
        entry.insert(Connection::new(id, fd, peer));
        tracing::debug!(%peer, connection = id.0, "connection accepted");
        self.arm_recv(key);
    }

    // ----- stopping -----

    fn begin_stop(&mut self) {
        tracing::info!(
            addr = %self.local_addr,
            connections = self.connections.len(),
            "stopping: no more accepts, flushing responses"
        );
        self.phase = Phase::Flushing;
        // Ends the accept in flight (EINVAL) and refuses new connections.
        if let Err(error) = socket::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) {
            tracing::debug!(%error, "shutting the listener down failed");
        }
        self.arm_stop_deadline(STOP_FLUSH_TIMEOUT);
    }

    /// Writes the handler's outbound commands into their connections'
    /// output queues.
    fn drain_outbound(&mut self) {
        self.handler.take_outbound(&mut self.outbound);
        let mut outbound = std::mem::take(&mut self.outbound);
        for (id, command) in outbound.drain(..) {
            if let Some(key) = self.live_connection(id) {
                connection::write_response(self.connections[key].out_tail(), &command);
                self.queued_output(key);
            }
        }
        self.outbound = outbound;
        self.handler.take_spliced(&mut self.spliced);
        let mut spliced = std::mem::take(&mut self.spliced);
        for (id, command, parts) in spliced.drain(..) {
            if let Some(key) = self.live_connection(id) {
                self.connections[key].queue_spliced(&command, parts);
                self.queued_output(key);
            }
        }
        self.spliced = spliced;
    }

    /// The table key of connection `id` if it is still there and open.
    fn live_connection(&self, id: ConnectionId) -> Option<usize> {
        let key = id.key();
        let conn = self.connections.get(key)?;
        (conn.id == id && !conn.closing).then_some(key)
    }

    /// Output was queued on connection `key`: it is flushed next turn, or
    /// closed if its client does not read.
    fn queued_output(&mut self, key: usize) {
        let conn = &mut self.connections[key];
        let pending = conn.output_pending();
        if pending > OUTPUT_QUEUE_SIZE_MAX {
            tracing::warn!(
                peer = %conn.peer,
                queued = pending,
                max = OUTPUT_QUEUE_SIZE_MAX,
                "closing a connection that does not read its responses"
            );
            self.close(key);
            return;
        }
        if !conn.dirty {
            conn.dirty = true;
            self.dirty.push(key);
        }
    }

    fn is_flushed(&self) -> bool {
        self.connections.iter().all(|(_, conn)| {
            conn.closing || (!conn.has_output() && !conn.send_in_flight && !conn.backlog)
        })
    }

    fn close_all(&mut self) {
        self.phase = Phase::Closing;
        let keys: Vec<usize> = self.connections.iter().map(|(key, _)| key).collect();
        for key in keys {
            self.close(key);
        }
        self.arm_stop_deadline(STOP_CLOSE_TIMEOUT);
    }
}

/// Milliseconds since the Unix epoch (Java's `System.currentTimeMillis`),
/// the clock the name server's expiry runs on.
fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, mpsc};
    use std::thread::JoinHandle;

    use bytes::Bytes;
    use ringmq_protocol::code::SerializeType;
    use ringmq_protocol::command::ExtFields;
    use ringmq_protocol::frame;

    const CLOSE_ME: i32 = 9001;
    const TIMEOUT: Duration = Duration::from_secs(5);

    /// Answers every request with code 0 but neither opaque nor response
    /// flag (the server must add them); asks to close the connection of a
    /// CLOSE_ME request; counts ticks and closes.
    #[derive(Default)]
    struct Probe {
        close_requests: Vec<ConnectionId>,
        closed: Arc<Mutex<Vec<ConnectionId>>>,
        ticks: Arc<AtomicUsize>,
    }

    impl RequestHandler for Probe {
        fn handle(
            &mut self,
            conn: ConnectionId,
            _peer: SocketAddr,
            cmd: RemotingCommand,
            _now_ms: i64,
        ) -> Option<RemotingCommand> {
            if cmd.code == CLOSE_ME {
                self.close_requests.push(conn);
            }
            let mut answer = RemotingCommand::new_response(0, 0, Some(format!("{}", conn.0)));
            answer.flag = 0;
            Some(answer)
        }

        fn on_closed(&mut self, conn: ConnectionId) {
            self.closed.lock().unwrap().push(conn);
        }

        fn on_tick(&mut self, _now_ms: i64) {
            self.ticks.fetch_add(1, Ordering::Relaxed);
        }

        fn tick_interval(&self) -> Duration {
            Duration::from_millis(20)
        }

        fn take_close_requests(&mut self, out: &mut Vec<ConnectionId>) {
            out.append(&mut self.close_requests);
        }
    }

    type Running<H = Probe> = (
        SocketAddr,
        ShutdownHandle,
        JoinHandle<Result<H, ServerError>>,
    );

    /// Runs a server on its own thread; None (with a skip line) without io_uring.
    fn spawn(probe: Probe) -> Option<Running> {
        spawn_with(probe, true)
    }

    fn spawn_with(probe: Probe, multishot_accept: bool) -> Option<Running> {
        spawn_config(
            probe,
            ServerConfig {
                multishot_accept,
                ..ServerConfig::new("127.0.0.1:0".parse().unwrap())
            },
        )
    }

    fn spawn_config<H: RequestHandler + Send + 'static>(
        handler: H,
        config: ServerConfig,
    ) -> Option<Running<H>> {
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let server = match Server::bind(config, handler) {
                Ok(server) => server,
                Err(error) => {
                    ready_tx.send(Err(format!("{error:?}"))).unwrap();
                    return Err(error);
                }
            };
            ready_tx
                .send(Ok((server.local_addr(), server.shutdown_handle())))
                .unwrap();
            server.run()
        });
        match ready_rx.recv_timeout(TIMEOUT).unwrap() {
            Ok((addr, handle)) => Some((addr, handle, thread)),
            Err(error) if error.contains("Unavailable") => {
                eprintln!("SKIPPED: io_uring is unavailable: {error}");
                None
            }
            Err(error) => panic!("server did not start: {error}"),
        }
    }

    fn connect(addr: SocketAddr) -> TcpStream {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        stream
    }

    fn send(stream: &mut TcpStream, code: i32, opaque: i32) {
        let mut request = RemotingCommand::new_request(code, ExtFields::new());
        request.opaque = opaque;
        let mut out = Vec::new();
        request.encode(SerializeType::Json, &mut out).unwrap();
        stream.write_all(&out).unwrap();
    }

    fn read_response(stream: &mut TcpStream) -> Option<RemotingCommand> {
        let mut length = [0u8; 4];
        if stream.read_exact(&mut length).is_err() {
            return None;
        }
        let mut bytes = length.to_vec();
        bytes.resize(4 + u32::from_be_bytes(length) as usize, 0);
        stream.read_exact(&mut bytes[4..]).unwrap();
        let raw = frame::decode_frame(&Bytes::from(bytes), FRAME_SIZE_MAX)
            .unwrap()
            .unwrap();
        Some(RemotingCommand::from_frame(&raw).unwrap())
    }

    fn wait_until(what: &str, condition: impl Fn() -> bool) {
        let deadline = Instant::now() + TIMEOUT;
        while !condition() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_connection_over_connections_max_is_closed_and_the_others_are_served() {
        let config = ServerConfig {
            connections_max: 1,
            ..ServerConfig::new("127.0.0.1:0".parse().unwrap())
        };
        let Some((addr, stop, thread)) = spawn_config(Probe::default(), config) else {
            return;
        };
        let mut first = connect(addr);
        send(&mut first, 105, 1);
        assert!(read_response(&mut first).is_some(), "the first is served");
        let mut second = connect(addr);
        send(&mut second, 105, 2);
        assert!(
            read_response(&mut second).is_none(),
            "the connection over the limit is closed without an answer"
        );
        send(&mut first, 105, 3);
        assert_eq!(read_response(&mut first).map(|r| r.opaque), Some(3));
        stop.request();
        thread.join().unwrap().unwrap();
    }

    #[test]
    fn a_second_server_on_a_taken_port_fails_unless_it_joins_the_port() {
        let Some((addr, stop, thread)) = spawn(Probe::default()) else {
            return;
        };
        match Server::bind(ServerConfig::new(addr), Probe::default()) {
            Err(error @ ServerError::PortInUse { .. }) => {
                let message = error.to_string();
                assert!(
                    message.contains(&format!("port {} is already in use", addr.port())),
                    "{message}"
                );
            }
            other => panic!("expected PortInUse, got {:?}", other.err()),
        }
        // What a broker's second shard does: it joins shard 0's port.
        let joined = Server::bind(
            ServerConfig {
                joins_port: true,
                ..ServerConfig::new(addr)
            },
            Probe::default(),
        )
        .unwrap();
        assert_eq!(joined.local_addr(), addr);
        drop(joined);
        stop.request();
        thread.join().unwrap().unwrap();
    }

    #[test]
    fn bind_refuses_more_connections_than_the_ring_holds() {
        let config = ServerConfig {
            ring_entries: 64,
            connections_max: 31,
            ..ServerConfig::new("127.0.0.1:0".parse().unwrap())
        };
        match Server::bind(config, Probe::default()) {
            Err(ServerError::Config(message)) => {
                assert!(message.contains("31 connections"), "{message}")
            }
            Err(ServerError::Ring(error)) => eprintln!("SKIPPED: io_uring unavailable: {error}"),
            other => panic!("expected a configuration error, got {:?}", other.err()),
        }
    }

    #[test]
    fn server_sets_the_request_opaque_and_the_response_flag_on_answers() {
        let Some((addr, stop, thread)) = spawn(Probe::default()) else {
            return;
        };
        let mut client = connect(addr);
        send(&mut client, 105, 77);
        let response = read_response(&mut client).expect("a response");
        assert_eq!(response.opaque, 77);
        assert!(response.is_response());
        stop.request();
        thread.join().unwrap().unwrap();
    }

    #[test]
    fn handler_close_request_closes_only_that_connection_and_reports_it() {
        let probe = Probe::default();
        let closed = probe.closed.clone();
        let Some((addr, stop, thread)) = spawn(probe) else {
            return;
        };
        let mut bystander = connect(addr);
        let mut doomed = connect(addr);
        send(&mut doomed, CLOSE_ME, 1);
        // The answer may or may not get out before the close; then EOF.
        let mut seen = 0;
        while read_response(&mut doomed).is_some() {
            seen += 1;
            assert!(seen <= 1, "more than one answer to one request");
        }
        wait_until("on_closed", || closed.lock().unwrap().len() == 1);
        send(&mut bystander, 105, 2);
        assert_eq!(read_response(&mut bystander).map(|r| r.opaque), Some(2));
        stop.request();
        let probe = thread.join().unwrap().unwrap();
        assert_eq!(
            probe.closed.lock().unwrap().len(),
            2,
            "the bystander is closed on stop"
        );
    }

    #[test]
    fn handler_ticks_run_on_the_ring_timers_at_its_interval() {
        let probe = Probe::default();
        let ticks = probe.ticks.clone();
        let Some((_, stop, thread)) = spawn(probe) else {
            return;
        };
        wait_until("three ticks", || ticks.load(Ordering::Relaxed) >= 3);
        stop.request();
        thread.join().unwrap().unwrap();
    }

    #[test]
    fn stop_closes_every_connection_and_returns_the_handler() {
        let Some((addr, stop, thread)) = spawn(Probe::default()) else {
            return;
        };
        let mut clients: Vec<TcpStream> = (0..5).map(|_| connect(addr)).collect();
        for (opaque, client) in clients.iter_mut().enumerate() {
            send(client, 105, opaque as i32);
            assert!(read_response(client).is_some());
        }
        stop.request();
        let probe = thread.join().unwrap().unwrap();
        assert_eq!(probe.closed.lock().unwrap().len(), clients.len());
        for client in &mut clients {
            assert!(read_response(client).is_none(), "closed on stop");
        }
        assert!(TcpStream::connect(addr).is_err(), "no longer listening");
    }

    /// Answers nothing at once; every turn, answers what it received
    /// before through `take_outbound`, with the opaque it set itself.
    #[derive(Default)]
    struct Deferring {
        owed: Vec<(ConnectionId, i32)>,
        ready: Vec<(ConnectionId, RemotingCommand)>,
    }

    impl RequestHandler for Deferring {
        fn handle(
            &mut self,
            conn: ConnectionId,
            _peer: SocketAddr,
            cmd: RemotingCommand,
            _now_ms: i64,
        ) -> Option<RemotingCommand> {
            self.owed.push((conn, cmd.opaque));
            None
        }

        fn on_closed(&mut self, _conn: ConnectionId) {}

        fn on_tick(&mut self, _now_ms: i64) {}

        fn on_turn(&mut self, _now_ms: i64) {
            for (conn, opaque) in self.owed.drain(..) {
                self.ready.push((
                    conn,
                    RemotingCommand::new_response(0, opaque, Some("later".into())),
                ));
            }
        }

        fn wait_bound(&self) -> Option<Duration> {
            (!self.owed.is_empty()).then_some(Duration::ZERO)
        }

        fn has_pending(&self) -> bool {
            !self.owed.is_empty()
        }

        fn take_outbound(&mut self, out: &mut Vec<(ConnectionId, RemotingCommand)>) {
            out.append(&mut self.ready);
        }
    }

    #[test]
    fn deferred_answers_reach_their_connection_with_the_handlers_opaque() {
        let config = ServerConfig {
            connection_tag: 7,
            ..ServerConfig::new("127.0.0.1:0".parse().unwrap())
        };
        let Some((addr, stop, thread)) = spawn_config(Deferring::default(), config) else {
            return;
        };
        let mut first = connect(addr);
        let mut second = connect(addr);
        send(&mut first, 105, 11);
        send(&mut second, 105, 22);
        let answer = read_response(&mut second).expect("an answer");
        assert_eq!(
            (answer.opaque, answer.remark.as_deref()),
            (22, Some("later"))
        );
        let answer = read_response(&mut first).expect("an answer");
        assert_eq!(answer.opaque, 11);
        stop.request();
        thread.join().unwrap().unwrap();
    }

    #[test]
    fn connection_ids_carry_the_servers_tag() {
        let id = ConnectionId::new(9, 0x1234_5678, 42);
        assert_eq!(id.tag(), 9);
        assert_eq!(id.key(), 42);
        assert_eq!(
            ConnectionId::new(9, 0x1FF_FFFF, 1).tag(),
            9,
            "the serial wraps below the tag"
        );
    }

    #[test]
    fn single_accept_mode_serves_connection_after_connection() {
        let Some((addr, stop, thread)) = spawn_with(Probe::default(), false) else {
            return;
        };
        for opaque in 0..5 {
            let mut client = connect(addr);
            send(&mut client, 105, opaque);
            assert_eq!(read_response(&mut client).map(|r| r.opaque), Some(opaque));
        }
        stop.request();
        let probe = thread.join().unwrap().unwrap();
        wait_until("five closes", || probe.closed.lock().unwrap().len() == 5);
    }

    /// Answers code 201 later with a body spliced from two pipes that hold
    /// junk around its parts, and everything else at once, as `Probe` does.
    #[derive(Default)]
    struct Splicing {
        owed: Vec<(ConnectionId, i32)>,
    }

    /// The body a spliced answer to `opaque` carries.
    fn spliced_body(opaque: i32) -> Vec<u8> {
        (0..300_000u32)
            .map(|n| (n * 7 + opaque as u32) as u8)
            .collect()
    }

    impl RequestHandler for Splicing {
        fn handle(
            &mut self,
            conn: ConnectionId,
            _peer: SocketAddr,
            cmd: RemotingCommand,
            _now_ms: i64,
        ) -> Option<RemotingCommand> {
            if cmd.code == 201 {
                self.owed.push((conn, cmd.opaque));
                return None;
            }
            Some(RemotingCommand::new_response(0, 0, Some("copied".into())))
        }

        fn on_closed(&mut self, _conn: ConnectionId) {}

        fn on_tick(&mut self, _now_ms: i64) {}

        fn wait_bound(&self) -> Option<Duration> {
            (!self.owed.is_empty()).then_some(Duration::ZERO)
        }

        fn take_spliced(
            &mut self,
            out: &mut Vec<(ConnectionId, RemotingCommand, Vec<SplicedBody>)>,
        ) {
            for (conn, opaque) in self.owed.drain(..) {
                // The body in two parts, each between junk in its own pipe.
                let body = spliced_body(opaque);
                let parts = [&body[..100_000], &body[100_000..]]
                    .into_iter()
                    .map(|part| {
                        let pipe = ringmq_storage::commit_log::ShipPipe::new(1 << 20).unwrap();
                        let mut bytes = vec![0xEE; 100];
                        bytes.extend(part);
                        bytes.extend([0xDD; 50]);
                        let mut written = 0;
                        while written < bytes.len() {
                            let rest = &bytes[written..];
                            // SAFETY: a live slice into the pipe's write end.
                            let count = unsafe {
                                libc::write(pipe.write_fd(), rest.as_ptr().cast(), rest.len())
                            };
                            assert!(count > 0);
                            written += count as usize;
                        }
                        SplicedBody {
                            pipe: Arc::new(pipe),
                            head: 100,
                            len: part.len(),
                            tail: 50,
                        }
                    })
                    .collect();
                let answer = RemotingCommand::new_response(0, opaque, Some("spliced".into()));
                out.push((conn, answer, parts));
            }
        }
    }

    #[test]
    fn spliced_bodies_reach_the_client_whole_and_in_order() {
        let config = ServerConfig::new("127.0.0.1:0".parse().unwrap());
        let Some((addr, stop, thread)) = spawn_config(Splicing::default(), config) else {
            return;
        };
        let mut client = connect(addr);
        // One spliced answer; then a copied one and two spliced ones asked
        // together: the copied one (answered at once) first, then the
        // spliced ones as asked, each body whole, junk left in the pipe.
        send(&mut client, 201, 1);
        let answer = read_response(&mut client).expect("an answer");
        assert_eq!(
            (answer.opaque, answer.remark.as_deref()),
            (1, Some("spliced"))
        );
        assert!(answer.body_bytes() == spliced_body(1).as_slice());
        let mut together = Vec::new();
        for (code, opaque) in [(201, 2), (105, 3), (201, 4)] {
            let mut request = RemotingCommand::new_request(code, ExtFields::new());
            request.opaque = opaque;
            request.encode(SerializeType::Json, &mut together).unwrap();
        }
        client.write_all(&together).unwrap();
        let copied = read_response(&mut client).expect("an answer");
        assert_eq!(
            (copied.opaque, copied.remark.as_deref()),
            (3, Some("copied"))
        );
        for opaque in [2, 4] {
            let answer = read_response(&mut client).expect("an answer");
            assert_eq!(answer.opaque, opaque);
            assert!(answer.body_bytes() == spliced_body(opaque).as_slice());
        }
        stop.request();
        thread.join().unwrap().unwrap();
    }
}
