//! The write path of the CommitLog: group commit and the four positions.
//!
//! Records are encoded into the active write buffer of a `WriteBufs`
//! chain (see there: buffers live across many commits and serve as the tail
//! cache). A commit writes, from the oldest buffer with something to write,
//! the blocks between its `submitted_to` and its last whole block with one
//! O_DIRECT write straight from the buffer. Up to [`COMMITS_IN_FLIGHT_MAX`]
//! commits are in flight: with none in flight, when the caller is about to
//! wait (or appends stopped), a commit writes everything, the partial last
//! block included, from a copy of that block (a second write), and no other
//! commit starts until that copy is written; behind others, or while appends
//! keep arriving, a commit writes only whole blocks, and only once enough of
//! them are ready: under ASYNC_FLUSH half the bytes of the commits in flight,
//! within [`COMMIT_BEHIND_BYTES_MIN_ASYNC`] and
//! [`COMMIT_BEHIND_BYTES_MAX_ASYNC`] (fewer, larger writes when the disk has
//! work queued, the sizes of a fixed minimum when it has little), under
//! SYNC_FLUSH [`COMMIT_BEHIND_BYTES_MIN_SYNC`]. So two writes of the
//! same block are never in flight together, and everything appended while
//! commits run joins the next one. Positions advance over the in-order prefix
//! of completed commits.
//!
//! Durability is a group fdatasync, one in flight at a time, covering what
//! was written when it was submitted: ASYNC_FLUSH starts one every flush
//! interval; SYNC_FLUSH starts one as soon as a write completes with none in
//! flight, and the next as soon as it completes if more was written
//! meanwhile. So a SYNC_FLUSH ack waits for its write and at most two
//! fdatasyncs, and the disk sees one fdatasync per round rather than one per
//! commit (measured here with 1,024 appends of 1 KiB in flight: 2,000–2,400
//! fdatasyncs/s against 8,000–9,000 with one linked to each commit, p99.9
//! lower, throughput within 15 %; docs/BENCHMARKS.md).
//!
//! The segment barrier: no write goes into a segment before everything up
//! to its start is durable (ASYNC_FLUSH asks for an fdatasync at once when
//! appends wait at the barrier). A recycled segment holds BLANK markers of
//! its earlier life; without the barrier a crash could keep a later
//! segment's records and lose the end of this one, and recovery could step
//! over a stale BLANK into them. It costs one pipeline drain per segment.
//!
//! # Invariants
//! - `encoded >= submitted >= written >= durable` (shard-local offsets),
//!   asserted at every change; each only grows.
//! - No write into a segment is submitted while `durable` is below its
//!   start.
//! - The acknowledgeable position is `written` (ASYNC_FLUSH) or `durable`
//!   (SYNC_FLUSH); nothing past it is acknowledged or readable.
//! - Every buffer's bytes `[base, data_end)` equal the CommitLog's content
//!   there (`WriteBufs`).
//! - After a write or fdatasync error the appender is failed for good: the
//!   tail on disk is unknown until a restart recovers it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::write_bufs::{WriteBuf, WriteBufs};
use crate::aligned::{AlignedBuf, BLOCK_SIZE, align_down, align_up_offset};
use crate::disk::{Disk, DiskError, DiskOp, FileId, OpId, OpTag};
use crate::limits::{
    COMMIT_BEHIND_BYTES_MAX_ASYNC, COMMIT_BEHIND_BYTES_MIN_ASYNC, COMMIT_BEHIND_BYTES_MIN_SYNC,
    COMMITS_IN_FLIGHT_MAX, WRITE_BUFFER_SIZE,
};

/// ASYNC_FLUSH: the whole-block bytes a commit behind others waits for,
/// from the bytes submitted and not yet written (the module doc).
fn commit_behind_bytes_min_async(in_flight_bytes: u64) -> usize {
    usize::try_from(in_flight_bytes / 2)
        .unwrap_or(usize::MAX)
        .clamp(COMMIT_BEHIND_BYTES_MIN_ASYNC, COMMIT_BEHIND_BYTES_MAX_ASYNC)
}

/// When an append is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushMode {
    /// After its O_DIRECT write completed; fdatasync runs every flush
    /// interval (RocketMQ ASYNC_FLUSH, stronger: survives a process kill).
    Async,
    /// After an fdatasync covering it completed (RocketMQ SYNC_FLUSH).
    Sync,
}

#[derive(Debug)]
struct Commit {
    counter: u64,
    end: u64,
    file: FileId,
    /// Writes of the commit not completed (two when the partial last block
    /// goes from a copy).
    writes_pending: u8,
    failed: bool,
    /// When it was submitted, for [`SLOW_DISK_OP_WARN`].
    submitted_at: Instant,
}

#[derive(Debug)]
struct Flush {
    covers: u64,
    remaining: usize,
    /// When it was submitted, for [`SLOW_DISK_OP_WARN`].
    submitted_at: Instant,
}

/// A commit write or group fdatasync that takes longer than this is logged
/// with `tracing::warn!`. The ring's stall warning covers only busy turns;
/// a shard waiting on its disk logs nothing there.
pub const SLOW_DISK_OP_WARN: Duration = Duration::from_millis(200);

fn warn_if_slow(what: &'static str, submitted_at: Instant) {
    let took = submitted_at.elapsed();
    if took > SLOW_DISK_OP_WARN {
        tracing::warn!(
            op = what,
            took_ms = took.as_millis() as u64,
            threshold_ms = SLOW_DISK_OP_WARN.as_millis() as u64,
            "commit log disk operation slow"
        );
    }
}

/// What one completion changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The acknowledgeable position moved.
    pub ack_moved: bool,
}

/// Op sequence numbers in the CommitLog's tag space (the low 56 bits).
const SEQ_KIND_SHIFT: u32 = 52;
const SEQ_COMMIT_WRITE: u64 = 1;
// 2 was the fdatasync linked to each SYNC_FLUSH commit (before the group
// fdatasync); not reused, so an old tag never means something else.
const SEQ_FLUSH_FSYNC: u64 = 3;
/// Kind of a CommitLog op used for synchronous reads (reader side).
pub(crate) const SEQ_READ: u64 = 4;
/// Kind of the background creation of the next segment (counter: its base
/// over the segment size).
pub(crate) const SEQ_SEGMENT_CREATE: u64 = 5;
/// Kind of the background removal of a segment (retention).
pub(crate) const SEQ_SEGMENT_REMOVE: u64 = 6;
/// Kind of the background rename of a retired segment into a spare
/// (counter: its base over the segment size).
pub(crate) const SEQ_SEGMENT_SPARE: u64 = 7;
/// Kind of a commit's write of its partial last block, from a copy.
const SEQ_COMMIT_TAIL_WRITE: u64 = 8;
/// Kind of the rename of a retired segment to `<base>.removing` (counter:
/// its base over the segment size).
pub(crate) const SEQ_SEGMENT_RETIRE: u64 = 9;
/// Kind of an `ftruncate` step shrinking a retired segment (counter: its
/// base over the segment size).
pub(crate) const SEQ_SEGMENT_SHRINK: u64 = 10;
/// Kind of a read for a pull (a consumer's or a slave's), in the
/// background (counter: its ticket). 11 was the kind of a slave's read
/// before the two shared one.
pub(crate) const SEQ_SPAN_READ: u64 = 12;
/// Kind of a splice of a shipped range into its pipe (counter: its ticket).
pub(crate) const SEQ_SHIP: u64 = 13;

/// An OpId of kind `kind` with a counter.
pub(crate) fn commit_log_op_id(kind: u64, counter: u64) -> OpId {
    OpId::new(
        OpTag::CommitLog,
        (kind << SEQ_KIND_SHIFT) | (counter & ((1 << SEQ_KIND_SHIFT) - 1)),
    )
}

/// The kind of a CommitLog OpId.
pub(crate) fn op_kind(op_id: OpId) -> u64 {
    op_id.seq() >> SEQ_KIND_SHIFT
}

/// The counter of a CommitLog OpId.
pub(crate) fn op_counter(op_id: OpId) -> u64 {
    op_id.seq() & ((1 << SEQ_KIND_SHIFT) - 1)
}

/// The append state machine.
#[derive(Debug)]
pub struct Appender {
    mode: FlushMode,
    bufs: WriteBufs,
    /// Ends of appends (single records or whole batches) not yet submitted.
    append_ends: VecDeque<u64>,
    /// Commits in flight, oldest first.
    commits: VecDeque<Commit>,
    /// The in-flight commit that wrote a partial last block (from a copy),
    /// which later commits write again: no commit may start until that write
    /// completes.
    tail_block_commit: Option<u64>,
    flush: Option<Flush>,
    unsynced_files: Vec<FileId>,
    encoded: u64,
    submitted: u64,
    written: u64,
    durable: u64,
    op_counter: u64,
    failed: Option<String>,
    commit_count: u64,
}

/// What one commit writes from one buffer.
struct CommitPlan {
    /// Index of the buffer in the chain.
    index: usize,
    /// Also the partial last block (from a copy), and everything up to the
    /// buffer's logical end becomes covered. A whole commit of a sealed
    /// buffer is its segment's last (the BLANK marker, or a record reaching
    /// the segment end): nothing is written from that buffer after it.
    whole: bool,
}

impl Appender {
    /// An appender continuing at shard-local `end` in segment (`file`,
    /// `segment_base`); `partial_block` holds the bytes
    /// `[align_down(end), end)` already on disk. Everything up to `end` is
    /// durable. Written buffers are kept as the tail cache while they hold
    /// at most `cache_bytes`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        disk: &mut impl Disk,
        mode: FlushMode,
        file: FileId,
        segment_base: u64,
        end: u64,
        partial_block: &[u8],
        buffer_size: usize,
        cache_bytes: usize,
    ) -> Self {
        assert!(
            buffer_size.is_multiple_of(BLOCK_SIZE),
            "write buffer size {buffer_size} unaligned"
        );
        assert!(
            buffer_size <= WRITE_BUFFER_SIZE,
            "write buffer size {buffer_size} too large"
        );
        Appender {
            mode,
            bufs: WriteBufs::new(
                disk,
                file,
                segment_base,
                end,
                partial_block,
                buffer_size,
                cache_bytes,
            ),
            append_ends: VecDeque::new(),
            commits: VecDeque::new(),
            tail_block_commit: None,
            flush: None,
            unsynced_files: Vec::new(),
            encoded: end,
            submitted: end,
            written: end,
            durable: end,
            op_counter: 0,
            failed: None,
            commit_count: 0,
        }
    }

    /// The flush mode.
    pub fn mode(&self) -> FlushMode {
        self.mode
    }

    /// End of what is encoded (appended in memory).
    pub fn encoded(&self) -> u64 {
        self.encoded
    }

    /// End of what is submitted to the disk.
    pub fn submitted(&self) -> u64 {
        self.submitted
    }

    /// End of what the disk has written (O_DIRECT write completed).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// End of what an fdatasync covered.
    pub fn durable(&self) -> u64 {
        self.durable
    }

    /// Capacity of each write buffer.
    pub fn buffer_size(&self) -> usize {
        self.bufs.buffer_size()
    }

    /// Commits started so far.
    pub fn commit_count(&self) -> u64 {
        self.commit_count
    }

    /// The acknowledgeable (and readable) position.
    pub fn ack_position(&self) -> u64 {
        match self.mode {
            FlushMode::Async => self.written,
            FlushMode::Sync => self.durable,
        }
    }

    /// Why the appender failed, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Whether nothing is pending: all encoded data durable, nothing in flight.
    pub fn is_idle(&self) -> bool {
        self.commits.is_empty() && self.flush.is_none() && self.durable == self.encoded
    }

    /// Whether bytes are encoded but not submitted and a commit could take
    /// them now. False while a commit is in flight: the partial tail block
    /// waits for it (see [`Appender::start_commit`]), and its completion wakes
    /// the ring anyway, so a caller that polls again at once only spins. False
    /// after a failure too: nothing is submitted any more.
    pub fn unsubmitted_ready(&self) -> bool {
        self.encoded > self.submitted
            && self.failed.is_none()
            && self.commits.is_empty()
            && self.tail_block_commit.is_none()
    }

    /// Bytes encoded and not yet written.
    pub fn pending_bytes(&self) -> usize {
        (self.encoded - self.written) as usize
    }

    /// The active buffer (for encoding).
    #[inline]
    pub(crate) fn active(&mut self) -> &mut WriteBuf {
        self.bufs.active()
    }

    /// The active buffer's segment base.
    pub(crate) fn active_segment_base(&self) -> u64 {
        self.bufs.active_ref().segment_base
    }

    /// The `len` bytes at shard-local `offset` if a write buffer still holds
    /// them. The caller checks the range is acknowledgeable.
    pub(crate) fn cached(&self, offset: u64, len: usize) -> Option<&[u8]> {
        self.bufs.cached(offset, len)
    }

    /// Drops written buffers while the write buffers hold more than the
    /// tail cache's capacity.
    pub(crate) fn evict_cache(&mut self) {
        self.bufs.evict(self.written);
    }

    /// Records that `len` bytes were encoded at the active buffer's end
    /// (`end_after_blank`: the logical end jumps to the segment end).
    pub(crate) fn advance(&mut self, len: usize, end_after_blank: Option<u64>) {
        let active = self.bufs.active();
        active.data_end += len as u64;
        active.end = end_after_blank.unwrap_or(active.data_end);
        assert!(
            active.held_bytes() <= active.buf.buf().capacity(),
            "write buffer overrun"
        );
        assert!(active.end >= self.encoded, "encoded went backwards");
        self.encoded = active.end;
    }

    /// Seals the active buffer; the new active one continues in `next`
    /// (`Some((file, segment_base))`: at the start of that segment) or in the
    /// same segment after the partial block.
    pub(crate) fn seal_active(&mut self, disk: &mut impl Disk, next: Option<(FileId, u64)>) {
        self.bufs.seal_active(disk, next);
    }

    /// Records that an append (one record or a whole batch) ends at `end`.
    pub(crate) fn mark_append_end(&mut self, end: u64) {
        assert!(
            end == self.encoded,
            "append end {end} != encoded {}",
            self.encoded
        );
        self.append_ends.push_back(end);
    }

    /// Starts commits while fewer than [`COMMITS_IN_FLIGHT_MAX`] are in
    /// flight. With none in flight and `partial_tail` a commit writes
    /// everything appended, partial last block included; behind others, or
    /// without `partial_tail` (the caller goes on appending at once, so the
    /// block will fill), only whole blocks (the partial block waits for a
    /// later commit), so no two writes of one block are ever in flight
    /// together. A partial-tail commit holds back every later commit until
    /// its copy of the block is written, so under load whole-block commits
    /// keep several writes in flight.
    pub fn start_commit(
        &mut self,
        disk: &mut impl Disk,
        partial_tail: bool,
    ) -> Result<bool, DiskError> {
        let mut started = false;
        while self.failed.is_none()
            && self.commits.len() < COMMITS_IN_FLIGHT_MAX
            && self.tail_block_commit.is_none()
        {
            let tail_now = partial_tail && self.commits.is_empty();
            let Some(plan) = self.next_commit(tail_now) else {
                break;
            };
            let segment_base = self.bufs.get(plan.index).segment_base;
            if segment_base > self.durable {
                // The segment barrier (module doc): the one before must be
                // durable first. ASYNC_FLUSH asks for its fdatasync now.
                if self.mode == FlushMode::Async && self.written >= segment_base {
                    self.start_flush(disk)?;
                }
                break;
            }
            self.submit_commit(disk, plan)?;
            started = true;
        }
        Ok(started)
    }

    /// What the next commit writes, if anything is ready: the oldest buffer
    /// with blocks not yet handed to a write. A sealed buffer's partial last
    /// block is the next buffer's first (written from there), except in its
    /// segment's last buffer, which is written whole.
    fn next_commit(&self, tail_now: bool) -> Option<CommitPlan> {
        let last = self.bufs.len() - 1;
        for index in 0..=last {
            let wb = self.bufs.get(index);
            if wb.end <= self.submitted {
                continue;
            }
            let blocks_end = align_down(wb.data_end);
            if index < last {
                // Its partial block is the next buffer's first, unless that
                // one starts the next segment.
                let whole = self.bufs.get(index + 1).segment_base != wb.segment_base;
                let target = if whole {
                    align_up_offset(wb.data_end)
                } else {
                    blocks_end
                };
                if wb.submitted_to < target {
                    return Some(CommitPlan { index, whole });
                }
                continue;
            }
            if tail_now {
                return Some(CommitPlan { index, whole: true });
            }
            // Behind others (or while appends keep coming) a commit waits for
            // enough whole blocks: each commit costs a write (and in
            // SYNC_FLUSH an fdatasync), so small ones waste the disk.
            let min_bytes = match self.mode {
                FlushMode::Async => commit_behind_bytes_min_async(self.submitted - self.written),
                FlushMode::Sync => COMMIT_BEHIND_BYTES_MIN_SYNC,
            };
            let ready = blocks_end.saturating_sub(wb.submitted_to);
            return (ready > 0 && ready >= min_bytes as u64).then_some(CommitPlan {
                index,
                whole: false,
            });
        }
        None
    }

    fn submit_commit(&mut self, disk: &mut impl Disk, plan: CommitPlan) -> Result<(), DiskError> {
        let wb = self.bufs.get(plan.index);
        let (file, segment_base, base, data_end, end) =
            (wb.file, wb.segment_base, wb.base, wb.data_end, wb.end);
        let from = wb.submitted_to;
        let blocks_end = align_down(data_end);
        let tail_len = if plan.whole {
            (data_end - blocks_end) as usize
        } else {
            0
        };
        // What this commit makes readable once written: behind others only
        // up to the last whole append in its blocks, so a batch never becomes
        // visible in part. The append ends it covers go once it is submitted.
        let covers_to = if plan.whole { end } else { blocks_end };
        let covered_ends = self
            .append_ends
            .iter()
            .take_while(|boundary| **boundary <= covers_to)
            .count();
        let covered = if plan.whole {
            end
        } else {
            covered_ends.checked_sub(1).map_or(self.submitted, |last| {
                self.append_ends[last].max(self.submitted)
            })
        };
        assert!(
            from < blocks_end || tail_len > 0,
            "commit of nothing ending at {end}"
        );
        self.op_counter += 1;
        let counter = self.op_counter;
        let mut writes: u8 = 0;
        if from < blocks_end {
            let op = DiskOp::WriteShared {
                file,
                file_offset: from - segment_base,
                buf: wb.buf.clone(),
                buf_range: (from - base) as usize..(blocks_end - base) as usize,
            };
            disk.submit(commit_log_op_id(SEQ_COMMIT_WRITE, counter), op, false)
                .map_err(|(error, _)| error)?;
            writes += 1;
        }
        let mut failed_now = None;
        if tail_len > 0 {
            let mut block = self.bufs.take_block(disk);
            block.as_full_mut_slice()[..tail_len]
                .copy_from_slice(self.bufs.get(plan.index).bytes(blocks_end, data_end));
            let op = DiskOp::Write {
                file,
                file_offset: blocks_end - segment_base,
                buf: block,
                buf_range: 0..BLOCK_SIZE,
            };
            match disk.submit(commit_log_op_id(SEQ_COMMIT_TAIL_WRITE, counter), op, false) {
                Ok(()) => writes += 1,
                Err((error, op)) => {
                    if let Some(buf) = op.into_buf() {
                        self.bufs.give_back(disk, buf);
                    }
                    if writes == 0 {
                        return Err(error);
                    }
                    failed_now = Some(error);
                }
            }
        }
        // The active buffer's partial block is written again (from the
        // buffer, once whole) by a later commit; a segment's last is done.
        let segment_last = plan.whole && plan.index + 1 < self.bufs.len();
        self.bufs.get_mut(plan.index).submitted_to = if segment_last {
            align_up_offset(data_end)
        } else {
            blocks_end
        };
        assert!(covered >= self.submitted, "submitted went backwards");
        assert!(
            covered <= self.encoded,
            "submitted {covered} > encoded {}",
            self.encoded
        );
        self.submitted = covered;
        self.append_ends.drain(..covered_ends);
        self.commits.push_back(Commit {
            counter,
            end: covered,
            file,
            writes_pending: writes,
            failed: failed_now.is_some(),
            submitted_at: Instant::now(),
        });
        if tail_len > 0 && failed_now.is_none() {
            self.tail_block_commit = Some(counter);
        }
        self.commit_count += 1;
        match failed_now {
            // Writes are queued that nothing could ever make durable (or the
            // commit is incomplete): stop here.
            Some(error) => {
                self.failed = Some(error.to_string());
                Err(error)
            }
            None => Ok(()),
        }
    }

    /// Starts the group fdatasync (ASYNC_FLUSH: the periodic one; SYNC_FLUSH
    /// starts it itself, see the module doc) if data is written but not
    /// durable and no flush runs.
    pub fn start_flush(&mut self, disk: &mut impl Disk) -> Result<bool, DiskError> {
        if self.flush.is_some() || self.failed.is_some() || self.written <= self.durable {
            return Ok(false);
        }
        let files = std::mem::take(&mut self.unsynced_files);
        if files.is_empty() {
            return Ok(false);
        }
        for file in &files {
            self.op_counter += 1;
            disk.submit(
                commit_log_op_id(SEQ_FLUSH_FSYNC, self.op_counter),
                DiskOp::Fdatasync { file: *file },
                false,
            )
            .map_err(|(error, _)| error)?;
        }
        self.flush = Some(Flush {
            covers: self.written,
            remaining: files.len(),
            submitted_at: Instant::now(),
        });
        Ok(true)
    }

    /// Handles a CommitLog completion of the write path.
    pub fn on_completion(
        &mut self,
        disk: &mut impl Disk,
        op_id: OpId,
        result: Result<usize, DiskError>,
        buf: Option<AlignedBuf>,
    ) -> Progress {
        if let Some(buf) = buf {
            self.bufs.give_back(disk, buf);
        }
        let kind = op_kind(op_id);
        let counter = op_counter(op_id);
        let before = self.ack_position();
        if let Err(error) = result {
            if self.failed.is_none() {
                self.failed = Some(error.to_string());
                tracing::error!(%error, "commit log write failed; the store stops accepting appends");
            }
            match kind {
                SEQ_FLUSH_FSYNC => self.flush = None,
                _ => {
                    if let Some(commit) = self.commits.iter_mut().find(|c| c.counter == counter) {
                        commit.failed = true;
                    }
                }
            }
            return Progress::default();
        }
        match kind {
            SEQ_COMMIT_WRITE | SEQ_COMMIT_TAIL_WRITE => {
                let commit = self.commit_mut(counter);
                assert!(
                    commit.writes_pending > 0,
                    "more writes completed than submitted"
                );
                commit.writes_pending -= 1;
                if commit.writes_pending == 0 {
                    warn_if_slow("write", commit.submitted_at);
                }
                let file = commit.file;
                if !self.unsynced_files.contains(&file) {
                    self.unsynced_files.push(file);
                }
                if kind == SEQ_COMMIT_TAIL_WRITE && self.tail_block_commit == Some(counter) {
                    self.tail_block_commit = None;
                }
            }
            SEQ_FLUSH_FSYNC => {
                let flush = self.flush.as_mut().expect("a flush is in flight");
                flush.remaining -= 1;
                if flush.remaining == 0 {
                    warn_if_slow("fdatasync", flush.submitted_at);
                    let covers = flush.covers;
                    self.flush = None;
                    self.mark_durable(covers.max(self.durable));
                }
            }
            other => panic!("unexpected commit log op kind {other}"),
        }
        self.advance_positions();
        if self.mode == FlushMode::Sync {
            self.sync_written(disk);
        }
        Progress {
            ack_moved: self.ack_position() != before,
        }
    }

    /// SYNC_FLUSH: starts the group fdatasync over what is written, unless
    /// one runs (its completion comes back here). A submission failure fails
    /// the appender: nothing it wrote could become durable any more.
    fn sync_written(&mut self, disk: &mut impl Disk) {
        if let Err(error) = self.start_flush(disk) {
            tracing::error!(%error, "commit log fdatasync failed; the store stops accepting appends");
            self.failed.get_or_insert(error.to_string());
        }
    }

    fn commit_mut(&mut self, counter: u64) -> &mut Commit {
        self.commits
            .iter_mut()
            .find(|c| c.counter == counter)
            .expect("a completion of a commit in flight")
    }

    /// Moves `written` over the in-order prefix of written commits, retiring
    /// them (`durable` moves with the group fdatasync).
    fn advance_positions(&mut self) {
        let mut written_upto = None;
        for commit in &self.commits {
            if commit.writes_pending > 0 || commit.failed {
                break;
            }
            written_upto = Some(commit.end);
        }
        if let Some(upto) = written_upto
            && upto > self.written
        {
            self.mark_written(upto);
        }
        while let Some(front) = self.commits.front() {
            if front.writes_pending > 0 || front.failed {
                break;
            }
            self.commits.pop_front();
        }
    }

    fn mark_written(&mut self, upto: u64) {
        assert!(
            upto <= self.submitted,
            "written {upto} > submitted {}",
            self.submitted
        );
        assert!(upto >= self.written, "written went backwards");
        self.written = upto;
    }

    fn mark_durable(&mut self, upto: u64) {
        assert!(
            upto <= self.written,
            "durable {upto} > written {}",
            self.written
        );
        assert!(upto >= self.durable, "durable went backwards");
        self.durable = upto;
    }

    /// Gives every buffer back to the disk (shutdown).
    pub(crate) fn release_buffers(&mut self, disk: &mut impl Disk) {
        self.bufs.release(disk);
    }

    /// Gives every buffer back, the active one too: the appender is about
    /// to be replaced. Call when idle.
    pub(crate) fn release_all_buffers(&mut self, disk: &mut impl Disk) {
        assert!(self.is_idle(), "releasing the buffers of a busy appender");
        self.bufs.release_all(disk);
    }

    /// Fails the appender for good (a step outside it left the log in a
    /// state only a restart's recovery knows): appends are refused.
    pub(crate) fn fail(&mut self, reason: String) {
        tracing::error!(reason, "the commit log is failed until a restart");
        self.failed.get_or_insert(reason);
    }
}
