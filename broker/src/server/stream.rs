//! Reading, writing and closing the server's connections: the Recv →
//! requests → responses → Send cycle of one connection, and its shutdown.
//!
//! ```text
//!  arm_recv ─▶ Recv ─▶ on_recv ─▶ process_input ─▶ handler ─▶ out_queue ─▶ dirty
//!     ▲                              │ Backlog (bound reached) ─▶ backlog list
//!     └── on_send ◀── Send ◀── flush ◀┘ (start of the next turn)
//! ```
//!
//! # Invariants
//! - A Recv is armed only while the connection is open, the server is
//!   running, no backlog waits and at most [`OUTPUT_PAUSE_SIZE`] bytes of
//!   output are pending; the Send completion that drains the output re-arms
//!   it.
//! - `close` runs once per connection and tells the handler once; the
//!   connection leaves the table in `finish_close`, when no operation of it
//!   is in flight.

use std::os::fd::AsRawFd;

use bytes::BytesMut;
use ringmq_protocol::code::flag;
use ringmq_storage::ring::{Completion, Op, Token};

use super::connection::{InputEnd, take_requests, write_response};
use super::{
    KIND_RECV, KIND_SEND, KIND_SPLICE, OUTPUT_PAUSE_SIZE, OUTPUT_QUEUE_SIZE_MAX, Phase,
    REQUESTS_PER_CONNECTION_TURN_MAX, RequestHandler, Server, socket, token,
};

impl<H: RequestHandler> Server<H> {
    // ----- reading -----

    pub(super) fn arm_recv(&mut self, key: usize) {
        let phase = self.phase;
        let conn = &mut self.connections[key];
        if conn.closing
            || conn.recv_in_flight
            || conn.backlog
            || phase != Phase::Running
            || conn.output_pending() > OUTPUT_PAUSE_SIZE
        {
            return;
        }
        let buf = conn
            .read_buf
            .take()
            .expect("no recv in flight: the buffer is home");
        let op = Op::Recv {
            fd: conn.fd.as_raw_fd(),
            buf,
        };
        match self.lane.submit(token(KIND_RECV, key), op, false) {
            Ok(()) => conn.recv_in_flight = true,
            Err((error, op)) => {
                let Op::Recv { buf, .. } = op else {
                    unreachable!("the ring gives back the op it refused");
                };
                conn.read_buf = Some(buf);
                tracing::error!(%error, peer = %conn.peer, "submitting recv failed: closing");
                self.close(key);
            }
        }
    }

    pub(super) fn on_recv(&mut self, key: usize, completion: Completion, now_ms: i64) {
        let conn = &mut self.connections[key];
        assert!(
            conn.recv_in_flight,
            "recv completion without a recv in flight"
        );
        conn.recv_in_flight = false;
        let Some(Op::Recv { buf, .. }) = completion.op else {
            unreachable!("a recv completes once, with its op");
        };
        let partial = !buf.is_empty();
        conn.read_buf = Some(buf);
        if conn.closing {
            self.finish_close(key);
            return;
        }
        match completion.result {
            Ok(0) => {
                if partial {
                    tracing::debug!(peer = %conn.peer, "peer closed mid-frame");
                } else {
                    tracing::debug!(peer = %conn.peer, "peer closed");
                }
                self.close(key);
            }
            Ok(_) => self.process_input(key, now_ms),
            Err(error) => {
                tracing::debug!(peer = %conn.peer, %error, "recv failed: closing");
                self.close(key);
            }
        }
    }

    pub(super) fn process_backlog(&mut self, now_ms: i64) {
        let ready = std::mem::take(&mut self.backlog);
        for key in ready {
            let Some(conn) = self.connections.get_mut(key) else {
                continue;
            };
            conn.backlog_listed = false;
            if conn.closing || !conn.backlog {
                continue;
            }
            if conn.output_pending() > OUTPUT_PAUSE_SIZE {
                // Resumed by the Send completion that drains the output.
                continue;
            }
            conn.backlog = false;
            self.process_input(key, now_ms);
        }
    }

    pub(super) fn list_backlog(&mut self, key: usize) {
        let conn = &mut self.connections[key];
        if !conn.backlog_listed {
            conn.backlog_listed = true;
            self.backlog.push(key);
        }
    }

    /// Takes requests off the connection's read buffer, hands them to the
    /// handler and queues the answers; then reads again or lists the
    /// connection as backlogged.
    pub(super) fn process_input(&mut self, key: usize, now_ms: i64) {
        let conn = &mut self.connections[key];
        let buf = conn
            .read_buf
            .take()
            .expect("no recv in flight: the buffer is home");
        let (id, peer) = (conn.id, conn.peer);
        let handler = &mut self.handler;
        let (buf, end) = take_requests(buf, REQUESTS_PER_CONNECTION_TURN_MAX, |command| {
            let opaque = command.opaque;
            let oneway = command.is_oneway() && !command.is_response();
            let Some(mut response) = handler.handle(id, peer, command, now_ms) else {
                return;
            };
            if oneway {
                return;
            }
            response.opaque = opaque;
            response.flag = (response.flag | flag::RESPONSE) & !flag::ONEWAY;
            write_response(conn.out_tail(), &response);
        });
        conn.read_buf = Some(buf);
        self.handler.take_close_requests(&mut self.close_requests);
        let conn = &mut self.connections[key];
        if conn.has_output() && !conn.dirty {
            conn.dirty = true;
            self.dirty.push(key);
        }
        if conn.output_pending() > OUTPUT_QUEUE_SIZE_MAX {
            tracing::warn!(
                peer = %conn.peer,
                queued = conn.output_pending(),
                max = OUTPUT_QUEUE_SIZE_MAX,
                "closing a connection that does not read its responses"
            );
            self.close(key);
            return;
        }
        match end {
            InputEnd::NeedMore => self.arm_recv(key),
            InputEnd::Backlog => {
                conn.backlog = true;
                self.list_backlog(key);
            }
            InputEnd::Malformed(error) => {
                tracing::warn!(peer = %conn.peer, %error, "closing connection: malformed frame");
                self.close(key);
            }
        }
    }

    // ----- writing -----

    pub(super) fn flush_dirty(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        for key in &dirty {
            if let Some(conn) = self.connections.get_mut(*key) {
                conn.dirty = false;
                self.flush(*key);
            }
        }
        // Keep the allocation for the next turn.
        self.dirty = dirty;
        self.dirty.clear();
    }

    pub(super) fn flush(&mut self, key: usize) {
        let conn = &mut self.connections[key];
        if conn.closing || conn.send_in_flight {
            return;
        }
        if conn.out_queue.is_empty() {
            self.splice_next(key);
            return;
        }
        let data = conn.out_queue.split().freeze();
        let size = data.len();
        let op = Op::Send {
            fd: conn.fd.as_raw_fd(),
            data,
        };
        self.submit_output(key, KIND_SEND, op, size);
    }

    /// Submits the connection's output operation (a Send or a Splice) of
    /// `size` bytes; the connection is closed if the ring refuses it.
    fn submit_output(&mut self, key: usize, kind: Token, op: Op, size: usize) {
        let name = op.name();
        let conn = &mut self.connections[key];
        match self.lane.submit(token(kind, key), op, false) {
            Ok(()) => {
                conn.send_in_flight = true;
                conn.send_size = size;
            }
            Err((error, _)) => {
                tracing::error!(%error, peer = %conn.peer, op = name, "submitting output failed: closing");
                self.close(key);
            }
        }
    }

    /// Splices (the rest of) the front spliced body to the socket, its head
    /// dropped first; the output queue is empty.
    fn splice_next(&mut self, key: usize) {
        let conn = &mut self.connections[key];
        let Some((body, _)) = conn.spliced.front() else {
            return;
        };
        let left = match conn.splice_left {
            Some(left) => left,
            None => {
                if let Err(error) = body.pipe.discard(body.head) {
                    tracing::error!(%error, peer = %conn.peer, "a spliced body's pipe failed: closing");
                    self.close(key);
                    return;
                }
                body.len
            }
        };
        let op = Op::Splice {
            fd_in: body.pipe.read_fd(),
            off_in: None,
            fd_out: conn.fd.as_raw_fd(),
            off_out: None,
            len: u32::try_from(left).unwrap_or(u32::MAX),
            flags: 0,
        };
        conn.splice_left = Some(left);
        self.submit_output(key, KIND_SPLICE, op, left);
    }

    pub(super) fn on_send(&mut self, key: usize, completion: Completion) {
        if self.output_completed(key, &completion) {
            self.after_output(key);
        }
    }

    /// A spliced body's Splice completed: more of it, or the next output
    /// once its tail is dropped.
    pub(super) fn on_splice(&mut self, key: usize, completion: Completion) {
        if !self.output_completed(key, &completion) {
            return;
        }
        let conn = &mut self.connections[key];
        let moved = *completion
            .result
            .as_ref()
            .expect("checked by output_completed");
        let left = conn
            .splice_left
            .expect("a splice in flight has its count")
            .saturating_sub(moved);
        if moved == 0 {
            tracing::debug!(peer = %conn.peer, "splice moved nothing: closing");
            self.close(key);
            return;
        }
        if left > 0 {
            conn.splice_left = Some(left);
        } else {
            let (body, after) = conn.spliced.pop_front().expect("the body just spliced");
            conn.splice_left = None;
            conn.out_queue = after;
            if let Err(error) = body.pipe.discard(body.tail) {
                tracing::error!(%error, peer = %conn.peer, "a spliced body's pipe failed: closing");
                self.close(key);
                return;
            }
        }
        self.after_output(key);
    }

    /// The output operation in flight completed: false when the connection
    /// is closing or the operation failed (and the connection is closed).
    fn output_completed(&mut self, key: usize, completion: &Completion) -> bool {
        let conn = &mut self.connections[key];
        assert!(
            conn.send_in_flight,
            "output completion without an output operation in flight"
        );
        conn.send_in_flight = false;
        conn.send_size = 0;
        if conn.closing {
            conn.spliced.clear();
            self.finish_close(key);
            return false;
        }
        if let Err(error) = &completion.result {
            tracing::debug!(peer = %conn.peer, %error, "send failed: closing");
            self.close(key);
            return false;
        }
        true
    }

    /// After an output operation: the next one, and reading again.
    fn after_output(&mut self, key: usize) {
        let conn = &mut self.connections[key];
        if conn.out_queue.capacity() > OUTPUT_PAUSE_SIZE && conn.out_queue.is_empty() {
            conn.out_queue = BytesMut::new();
        }
        self.flush(key);
        let conn = &mut self.connections[key];
        if conn.backlog {
            self.list_backlog(key);
        } else if conn.read_buf.is_some() {
            self.arm_recv(key);
        }
    }

    // ----- closing -----

    pub(super) fn apply_close_requests(&mut self) {
        let requests = std::mem::take(&mut self.close_requests);
        for id in &requests {
            let key = id.key();
            if self
                .connections
                .get(key)
                .is_some_and(|conn| conn.id == *id && !conn.closing)
            {
                tracing::info!(peer = %self.connections[key].peer, "closing at the handler's request");
                self.close(key);
            }
        }
        self.close_requests = requests;
        self.close_requests.clear();
    }

    /// Shuts the connection down and tells the handler; it leaves the table
    /// once its operations have completed.
    pub(super) fn close(&mut self, key: usize) {
        let conn = &mut self.connections[key];
        if conn.closing {
            return;
        }
        conn.closing = true;
        conn.backlog = false;
        conn.drop_output();
        if let Err(error) = socket::shutdown(conn.fd.as_raw_fd(), libc::SHUT_RDWR)
            && error.raw_os_error() != Some(libc::ENOTCONN)
        {
            tracing::debug!(peer = %conn.peer, %error, "shutdown failed");
        }
        let id = conn.id;
        self.handler.on_closed(id);
        self.handler.take_close_requests(&mut self.close_requests);
        self.finish_close(key);
    }

    pub(super) fn finish_close(&mut self, key: usize) {
        let conn = &self.connections[key];
        assert!(conn.closing, "finishing a connection that is not closing");
        if conn.is_idle() {
            // Dropping the connection closes its descriptor: no operation
            // refers to it any more.
            let conn = self.connections.remove(key);
            tracing::debug!(peer = %conn.peer, connection = conn.id.0, "connection closed");
        }
    }
}
