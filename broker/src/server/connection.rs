//! One client connection: its read buffer, its output queue and the state of
//! its two operations, plus the pure steps the server runs on them (taking
//! requests off the read buffer, writing responses into the output queue).
//!
//! ```text
//!  Recv ──▶ read_buf: [frame][frame][fra|........spare.........]
//!                      └ decode_frame_mut (split off, no copy) ─▶ RemotingCommand ─▶ handler
//!  handler ─▶ response ─▶ out_queue: [resp][resp]  ── one Send per turn ──▶ socket
//!  handler ─▶ response with a spliced body ─▶ out_queue: [resp][head of resp]
//!             spliced: ([body in a pipe], [what follows it]) ── Splice ──▶ socket
//! ```
//!
//! # Invariants
//! - `read_buf` is `None` exactly while a Recv owns it.
//! - At most one Recv and one Send are in flight; a connection leaves the
//!   server's table only when neither is.
//! - The read buffer always has spare capacity when it is handed to a Recv,
//!   and room for the whole frame at its front once that frame's length word
//!   is known; its capacity never exceeds [`READ_BUFFER_SIZE_MAX`].
//! - Bytes in `out_queue` are whole frames, except that the last may be
//!   the head of a frame whose body is the first spliced body's; the bytes
//!   queued after a spliced body are whole frames too, but for the same
//!   exception with the next body. So output goes out in order: the queue,
//!   then each spliced body and the bytes after it.
//! - At most one output operation (a Send or a Splice) is in flight; a
//!   spliced body's pipe stays in `spliced` until its Splice completed.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use ringmq_protocol::code::{SerializeType, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::error::DecodeError;
use ringmq_protocol::frame::{self, LENGTH_SIZE};
use ringmq_protocol::limits::FRAME_SIZE_MAX;

use ringmq_storage::commit_log::ShipPipe;

use super::ConnectionId;

/// A response body, or one part of it, that the server splices from a pipe
/// to the socket instead of copying it (CommitLog bytes shipped with
/// `Store::start_ship`).
#[derive(Debug)]
pub struct SplicedBody {
    /// The pipe holding it; no one else reads from it until the body is
    /// sent.
    pub pipe: Arc<ShipPipe>,
    /// Bytes in the pipe before the body, dropped first.
    pub head: usize,
    /// The body's length.
    pub len: usize,
    /// Bytes in the pipe after the body, dropped once it is sent.
    pub tail: usize,
}

/// Capacity a connection's read buffer starts with and returns to.
pub const READ_BUFFER_SIZE_INITIAL: usize = 64 * 1024;
/// Largest read buffer: one largest frame, length word included.
pub const READ_BUFFER_SIZE_MAX: usize = FRAME_SIZE_MAX as usize + LENGTH_SIZE;
/// An empty read buffer larger than this is replaced by a fresh initial one,
/// so one large frame does not pin megabytes per idle connection.
pub const READ_BUFFER_SIZE_KEEP_MAX: usize = 4 * READ_BUFFER_SIZE_INITIAL;

const _: () = assert!(READ_BUFFER_SIZE_INITIAL > frame::FRAME_PREFIX_SIZE);
const _: () = assert!(READ_BUFFER_SIZE_KEEP_MAX <= READ_BUFFER_SIZE_MAX);

/// A connection and the state of its operations.
#[derive(Debug)]
pub(super) struct Connection {
    pub(super) id: ConnectionId,
    pub(super) fd: OwnedFd,
    pub(super) peer: SocketAddr,
    /// `None` while a Recv owns it.
    pub(super) read_buf: Option<Vec<u8>>,
    pub(super) recv_in_flight: bool,
    pub(super) send_in_flight: bool,
    /// Bytes of the Send in flight.
    pub(super) send_size: usize,
    /// Encoded responses not yet handed to a Send.
    pub(super) out_queue: BytesMut,
    /// Spliced bodies waiting (the front one's Splice perhaps in flight),
    /// each with the encoded output queued after it.
    pub(super) spliced: VecDeque<(SplicedBody, BytesMut)>,
    /// Bytes of the front spliced body not yet spliced, once its head is
    /// dropped.
    pub(super) splice_left: Option<usize>,
    /// Complete frames are waiting in the read buffer (the per-turn request
    /// bound stopped the last pass).
    pub(super) backlog: bool,
    /// In the server's backlog list (so it is listed at most once).
    pub(super) backlog_listed: bool,
    /// Listed for the flush at the start of the next turn.
    pub(super) dirty: bool,
    /// Shut down; waiting for its operations to complete.
    pub(super) closing: bool,
}

impl Connection {
    pub(super) fn new(id: ConnectionId, fd: OwnedFd, peer: SocketAddr) -> Self {
        Connection {
            id,
            fd,
            peer,
            read_buf: Some(Vec::with_capacity(READ_BUFFER_SIZE_INITIAL)),
            recv_in_flight: false,
            send_in_flight: false,
            send_size: 0,
            out_queue: BytesMut::new(),
            spliced: VecDeque::new(),
            splice_left: None,
            backlog: false,
            backlog_listed: false,
            dirty: false,
            closing: false,
        }
    }

    /// Output bytes not yet acknowledged by a completed Send or Splice.
    pub(super) fn output_pending(&self) -> usize {
        let spliced: usize = self
            .spliced
            .iter()
            .map(|(body, after)| body.len + after.len())
            .sum();
        self.out_queue.len() + self.send_size + spliced
    }

    /// Whether output waits to be handed to a Send or Splice.
    pub(super) fn has_output(&self) -> bool {
        !self.out_queue.is_empty() || !self.spliced.is_empty()
    }

    /// Where the next response's bytes go: after the last spliced body.
    pub(super) fn out_tail(&mut self) -> &mut BytesMut {
        match self.spliced.back_mut() {
            Some((_, after)) => after,
            None => &mut self.out_queue,
        }
    }

    /// Queues `response` with `parts` as its body, each spliced from its
    /// pipe in turn.
    pub(super) fn queue_spliced(&mut self, response: &RemotingCommand, parts: Vec<SplicedBody>) {
        let len: usize = parts.iter().map(|part| part.len).sum();
        let out = self.out_tail();
        match response.encode_head_for_body(SerializeType::Json, len, out) {
            Ok(_) => {
                let parts = parts.into_iter().filter(|part| part.len > 0);
                self.spliced
                    .extend(parts.map(|part| (part, BytesMut::new())));
            }
            Err(error) => write_encode_failure(out, response, &error),
        }
    }

    /// Drops what is queued but not in flight: everything except the
    /// spliced body whose Splice is in flight (its pipe must outlive it).
    pub(super) fn drop_output(&mut self) {
        self.out_queue = BytesMut::new();
        let keep = usize::from(self.send_in_flight && self.splice_left.is_some());
        self.spliced.truncate(keep);
    }

    /// Whether the server may drop the connection (no operation owns any of
    /// its memory or its descriptor any more).
    pub(super) fn is_idle(&self) -> bool {
        !self.recv_in_flight && !self.send_in_flight
    }
}

/// Why [`take_requests`] stopped.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum InputEnd {
    /// The buffer holds no complete frame: read more.
    NeedMore,
    /// `max` requests were taken and more complete frames may follow.
    Backlog,
    /// The stream is unusable (bad length word, serialize type or header).
    Malformed(DecodeError),
}

/// Takes up to `max` complete frames off the front of `buf`, decodes each
/// and hands it to `on_request`. When it stops for want of bytes it prepares
/// the remainder for the next Recv (room for the whole next frame, spare
/// capacity, shrunk when empty).
pub(super) fn take_requests(
    buf: Vec<u8>,
    max: usize,
    mut on_request: impl FnMut(RemotingCommand),
) -> (Vec<u8>, InputEnd) {
    // Zero-copy both ways: a Vec becomes a (unique) Bytes and then a
    // BytesMut without copying, frames are split off it, and once the
    // handler has dropped them the allocation is unique again and converts
    // back without copying (only the partial frame at the end moves to the
    // front).
    // An empty Vec without capacity (what a backlog leaves after copying an
    // empty remainder out of a still-shared buffer) becomes the static empty
    // Bytes, which never converts: start from a fresh buffer then.
    let mut input = match Bytes::from(buf).try_into_mut() {
        Ok(input) => input,
        Err(shared) => BytesMut::from(&shared[..]),
    };
    let mut taken = 0;
    let end = loop {
        if taken == max {
            break InputEnd::Backlog;
        }
        match frame::decode_frame_mut(&mut input, FRAME_SIZE_MAX) {
            Ok(Some(raw)) => match RemotingCommand::from_frame(&raw) {
                Ok(command) => {
                    taken += 1;
                    on_request(command);
                }
                Err(error) => break InputEnd::Malformed(error),
            },
            Ok(None) => break InputEnd::NeedMore,
            Err(error) => break InputEnd::Malformed(error),
        }
    };
    let mut buf: Vec<u8> = input.into();
    if end != InputEnd::NeedMore {
        // No Recv follows: a backlog is processed before reading again, and
        // a malformed stream is closed.
        return (buf, end);
    }
    if buf.is_empty() && buf.capacity() > READ_BUFFER_SIZE_KEEP_MAX {
        buf = Vec::with_capacity(READ_BUFFER_SIZE_INITIAL);
    }
    // The length word was validated against FRAME_SIZE_MAX by the decode
    // above, so this reserves at most READ_BUFFER_SIZE_MAX.
    let frame_size = frame::peek_frame_size(&buf, FRAME_SIZE_MAX)
        .ok()
        .flatten()
        .unwrap_or(0);
    let needed = frame_size.max(buf.len() + 1).max(READ_BUFFER_SIZE_INITIAL);
    if buf.capacity() < needed {
        buf.reserve_exact(needed - buf.len());
    }
    assert!(buf.len() < buf.capacity(), "read buffer without spare room");
    assert!(
        buf.capacity() <= READ_BUFFER_SIZE_MAX,
        "read buffer of {} bytes past the maximum",
        buf.capacity()
    );
    (buf, end)
}

/// Appends `response` to `out` as a JSON frame. A response that cannot be
/// encoded (larger than a frame) is replaced by a SYSTEM_ERROR saying so, so
/// that the client is answered either way.
pub(super) fn write_response(out: &mut BytesMut, response: &RemotingCommand) {
    if let Err(error) = response.encode(SerializeType::Json, out) {
        write_encode_failure(out, response, &error);
    }
}

/// Appends the SYSTEM_ERROR that stands for `response`, which could not be
/// encoded.
fn write_encode_failure(
    out: &mut BytesMut,
    response: &RemotingCommand,
    error: &ringmq_protocol::error::EncodeError,
) {
    tracing::error!(code = response.code, %error, "response could not be encoded");
    let mut fallback = RemotingCommand::new_response(
        response_code::SYSTEM_ERROR,
        response.opaque,
        Some(format!("the response could not be encoded: {error}")),
    );
    fallback.flag = response.flag;
    fallback
        .encode(SerializeType::Json, out)
        .expect("a bodiless response with a short remark fits a frame");
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringmq_protocol::command::ExtFields;
    use ringmq_protocol::frame::RawFrame;

    fn request_frame(code: i32, opaque: i32) -> Vec<u8> {
        let mut command = RemotingCommand::new_request(code, ExtFields::new());
        command.opaque = opaque;
        let mut out = Vec::new();
        command.encode(SerializeType::Json, &mut out).unwrap();
        out
    }

    fn take_all(buf: Vec<u8>, max: usize) -> (Vec<u8>, InputEnd, Vec<i32>) {
        let mut opaques = Vec::new();
        let (buf, end) = take_requests(buf, max, |command| opaques.push(command.opaque));
        (buf, end, opaques)
    }

    #[test]
    fn take_requests_decodes_pipelined_frames_and_keeps_a_partial_one() {
        let mut input = Vec::with_capacity(READ_BUFFER_SIZE_INITIAL);
        for opaque in 1..=3 {
            input.extend_from_slice(&request_frame(105, opaque));
        }
        let partial = request_frame(105, 4);
        input.extend_from_slice(&partial[..partial.len() - 1]);
        let (buf, end, opaques) = take_all(input, 64);
        assert_eq!(end, InputEnd::NeedMore);
        assert_eq!(opaques, vec![1, 2, 3]);
        assert_eq!(buf, partial[..partial.len() - 1]);
        assert!(buf.capacity() > buf.len());
    }

    #[test]
    fn take_requests_stops_at_the_bound_and_reports_a_backlog() {
        let mut input = Vec::new();
        for opaque in 0..5 {
            input.extend_from_slice(&request_frame(105, opaque));
        }
        let (buf, end, opaques) = take_all(input, 2);
        assert_eq!(end, InputEnd::Backlog);
        assert_eq!(opaques, vec![0, 1]);
        let (_, end, opaques) = take_all(buf, 64);
        assert_eq!(end, InputEnd::NeedMore);
        assert_eq!(opaques, vec![2, 3, 4]);
    }

    #[test]
    fn a_backlog_that_ends_with_the_buffer_while_requests_are_held_reads_on() {
        // The handler keeps every request (a send waiting for its append
        // ack holds its body, a slice of the read buffer), and the bound is
        // reached exactly at the buffer's end: the remainder is an empty Vec
        // without capacity, which the next call must accept.
        let mut input = Vec::new();
        for opaque in 0..2 {
            input.extend_from_slice(&request_frame(105, opaque));
        }
        let mut held = Vec::new();
        let (buf, end) = take_requests(input, 2, |command| held.push(command));
        assert_eq!(end, InputEnd::Backlog);
        assert!(buf.is_empty());
        let (buf, end, opaques) = take_all(buf, 64);
        assert_eq!(end, InputEnd::NeedMore);
        assert!(opaques.is_empty());
        let mut next = buf;
        next.extend_from_slice(&request_frame(105, 7));
        let (_, end, opaques) = take_all(next, 64);
        assert_eq!(end, InputEnd::NeedMore);
        assert_eq!(opaques, vec![7]);
        assert_eq!(held.len(), 2);
    }

    #[test]
    fn take_requests_rejects_an_oversized_length_before_the_frame_arrives() {
        let input = (FRAME_SIZE_MAX + 1).to_be_bytes().to_vec();
        let (buf, end, opaques) = take_all(input, 64);
        assert!(
            matches!(end, InputEnd::Malformed(DecodeError::FrameTooLarge { .. })),
            "{end:?}"
        );
        assert!(opaques.is_empty());
        assert!(buf.capacity() < READ_BUFFER_SIZE_MAX, "nothing reserved");
    }

    #[test]
    fn take_requests_rejects_a_garbage_json_header_after_good_frames() {
        let mut input = request_frame(105, 9);
        let header = b"{not json";
        let mut bad = Vec::new();
        frame::write_frame(&mut bad, SerializeType::Json, header, b"").unwrap();
        input.extend_from_slice(&bad);
        let (_, end, opaques) = take_all(input, 64);
        assert_eq!(opaques, vec![9]);
        assert!(matches!(end, InputEnd::Malformed(_)), "{end:?}");
    }

    #[test]
    fn take_requests_makes_room_for_a_large_frame_and_shrinks_afterwards() {
        let mut command = RemotingCommand::new_request(103, ExtFields::new());
        command.body = Some(Bytes::from(vec![7u8; 3 * READ_BUFFER_SIZE_INITIAL * 2]));
        let mut whole = Vec::new();
        command.encode(SerializeType::Json, &mut whole).unwrap();
        let mut input = Vec::with_capacity(READ_BUFFER_SIZE_INITIAL);
        input.extend_from_slice(&whole[..READ_BUFFER_SIZE_INITIAL]);
        let (mut buf, end, opaques) = take_all(input, 64);
        assert_eq!(end, InputEnd::NeedMore);
        assert!(opaques.is_empty());
        assert!(buf.capacity() >= whole.len(), "room for the whole frame");
        buf.extend_from_slice(&whole[READ_BUFFER_SIZE_INITIAL..]);
        let mut bodies = Vec::new();
        let (buf, end) = take_requests(buf, 64, |command| bodies.push(command.body));
        assert_eq!(end, InputEnd::NeedMore);
        assert_eq!(bodies, vec![command.body.clone()]);
        assert!(buf.is_empty());
        assert_eq!(buf.capacity(), READ_BUFFER_SIZE_INITIAL, "shrunk back");
    }

    #[test]
    fn write_response_replaces_an_unencodable_response_with_system_error() {
        let mut response = RemotingCommand::new_response(0, 42, None);
        response.body = Some(Bytes::from(vec![0u8; FRAME_SIZE_MAX as usize]));
        let mut out = BytesMut::new();
        write_response(&mut out, &response);
        let raw: RawFrame = frame::decode_frame_mut(&mut out, FRAME_SIZE_MAX)
            .unwrap()
            .unwrap();
        let decoded = RemotingCommand::from_frame(&raw).unwrap();
        assert_eq!(decoded.code, response_code::SYSTEM_ERROR);
        assert_eq!(decoded.opaque, 42);
        assert!(decoded.is_response());
        assert!(out.is_empty());
    }

    fn body(len: usize) -> SplicedBody {
        SplicedBody {
            pipe: Arc::new(ShipPipe::new(4096).unwrap()),
            head: 1,
            len,
            tail: 2,
        }
    }

    #[test]
    fn output_after_a_spliced_body_waits_behind_it_and_counts_as_pending() {
        let fd = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let mut conn = Connection::new(ConnectionId(1), fd, "127.0.0.1:1".parse().unwrap());
        let answer = RemotingCommand::new_response(0, 5, None);
        write_response(conn.out_tail(), &answer);
        let before = conn.out_queue.len();
        conn.queue_spliced(&answer, vec![body(600), body(400)]);
        // The spliced answer's head joins the queue, its length word
        // counting the body; what comes next waits behind the body.
        let head = conn.out_queue.len() - before;
        let length = u32::from_be_bytes(conn.out_queue[before..before + 4].try_into().unwrap());
        assert_eq!(length as usize, head - LENGTH_SIZE + 1_000);
        write_response(conn.out_tail(), &answer);
        assert_eq!(conn.spliced.len(), 2);
        assert!(conn.spliced[0].1.is_empty(), "the parts follow each other");
        assert_eq!(conn.spliced[1].1.len(), before);
        assert_eq!(conn.output_pending(), 2 * before + head + 1_000);
        // An empty body is an ordinary answer.
        conn.queue_spliced(&answer, vec![body(0)]);
        assert_eq!(conn.spliced.len(), 2);
        assert_eq!(conn.spliced[1].1.len(), 2 * before);
        // Closing keeps only a body whose splice is in flight.
        conn.send_in_flight = true;
        conn.splice_left = Some(10);
        conn.queue_spliced(&answer, vec![body(3)]);
        conn.drop_output();
        assert!(conn.out_queue.is_empty());
        assert_eq!(conn.spliced.len(), 1);
        conn.splice_left = None;
        conn.drop_output();
        assert!(conn.spliced.is_empty());
    }
}
