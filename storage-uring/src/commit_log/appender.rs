//! The write path of the CommitLog: write buffers, group commit and the
//! four positions.
//!
//! Records are encoded into the *active* write buffer. A buffer covers a
//! block-aligned range of one segment:
//!
//! ```text
//!  segment:  |....block....|....block....|....block....|....
//!  buffer:   ^base (aligned)          data_end^  ^align_up(data_end)
//!            [already written bytes | new records | zeros ]
//! ```
//!
//! A commit takes the oldest *sealed* buffer (sealing the active one if
//! none is sealed), and writes `[base, align_up(data_end))` with one O_DIRECT
//! write (linked to an fdatasync in SYNC_FLUSH). The next active buffer starts
//! at `align_down(data_end)` with the partial last block copied, so that block
//! is re-written by the next commit. Up to [`COMMITS_IN_FLIGHT_MAX`] commits
//! are in flight: with none in flight, when the caller is about to wait (or
//! appends stopped), a commit writes everything (partial last block included,
//! and no other commit starts until that write completes); behind others, or
//! while appends keep arriving, it writes only whole blocks, and only once at
//! least [`COMMIT_BEHIND_BYTES_MIN_ASYNC`] (SYNC_FLUSH:
//! [`COMMIT_BEHIND_BYTES_MIN_SYNC`]) of them are ready. So two writes of the same block
//! are never in flight together, and everything appended while commits run
//! joins the next one. Positions advance over the in-order prefix of
//! completed commits.
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
//! - A sealed or active buffer's bytes `[base, data_end)` equal the
//!   CommitLog's content there.
//! - After a write or fdatasync error the appender is failed for good: the
//!   tail on disk is unknown until a restart recovers it.

use std::collections::VecDeque;

use crate::aligned::{AlignedBuf, BLOCK_SIZE, align_down, align_up};
use crate::disk::{Disk, DiskError, DiskOp, FileId, OpId, OpTag};
use crate::limits::{
    COMMIT_BEHIND_BYTES_MIN_ASYNC, COMMIT_BEHIND_BYTES_MIN_SYNC, COMMITS_IN_FLIGHT_MAX,
    WRITE_BUFFER_SIZE,
};

/// When an append is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushMode {
    /// After its O_DIRECT write completed; fdatasync runs every flush
    /// interval (RocketMQ ASYNC_FLUSH, stronger: survives a process kill).
    Async,
    /// After an fdatasync covering it completed (RocketMQ SYNC_FLUSH).
    Sync,
}

/// A write buffer bound to one segment.
#[derive(Debug)]
pub(crate) struct WriteBuf {
    pub(crate) buf: AlignedBuf,
    pub(crate) file: FileId,
    pub(crate) segment_base: u64,
    /// Shard-local offset of `buf[0]`; block-aligned.
    pub(crate) base: u64,
    /// Offset after the last meaningful byte.
    pub(crate) data_end: u64,
    /// Logical end: `data_end`, or the segment end after a BLANK marker.
    pub(crate) end: u64,
}

impl WriteBuf {
    /// Bytes still free in the buffer.
    pub(crate) fn free_bytes(&self) -> usize {
        self.buf.capacity() - (self.data_end - self.base) as usize
    }

    /// Mutable bytes from `data_end` on.
    pub(crate) fn tail_mut(&mut self) -> &mut [u8] {
        let at = (self.data_end - self.base) as usize;
        &mut self.buf.as_full_mut_slice()[at..]
    }
}

#[derive(Debug)]
struct Commit {
    counter: u64,
    end: u64,
    file: FileId,
    write_done: bool,
    fsync_done: bool,
    failed: bool,
}

#[derive(Debug)]
struct Flush {
    covers: u64,
    remaining: usize,
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
const SEQ_COMMIT_FSYNC: u64 = 2;
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
    active: WriteBuf,
    sealed: VecDeque<WriteBuf>,
    spare: Vec<AlignedBuf>,
    /// Ends of appends (single records or whole batches) not yet submitted.
    append_ends: VecDeque<u64>,
    /// Commits in flight, oldest first.
    commits: VecDeque<Commit>,
    /// The in-flight commit that wrote a partial last block, which the next
    /// buffer starts with: no commit may start until its write completes.
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
    buffer_size: usize,
}

impl Appender {
    /// An appender continuing at shard-local `end` in segment (`file`,
    /// `segment_base`); `partial_block` holds the bytes
    /// `[align_down(end), end)` already on disk. Everything up to `end` is
    /// durable.
    pub(crate) fn new(
        disk: &mut impl Disk,
        mode: FlushMode,
        file: FileId,
        segment_base: u64,
        end: u64,
        partial_block: &[u8],
        buffer_size: usize,
    ) -> Self {
        let base = align_down(end);
        assert!(
            partial_block.len() as u64 == end - base,
            "partial block of {} bytes",
            partial_block.len()
        );
        assert!(
            buffer_size.is_multiple_of(BLOCK_SIZE),
            "write buffer size {buffer_size} unaligned"
        );
        assert!(
            buffer_size <= WRITE_BUFFER_SIZE,
            "write buffer size {buffer_size} too large"
        );
        let mut buf = disk.buffer(buffer_size);
        buf.as_full_mut_slice()[..partial_block.len()].copy_from_slice(partial_block);
        Appender {
            mode,
            active: WriteBuf {
                buf,
                file,
                segment_base,
                base,
                data_end: end,
                end,
            },
            sealed: VecDeque::new(),
            spare: Vec::new(),
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
            buffer_size,
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
        self.buffer_size
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

    /// Bytes encoded and not yet written.
    pub fn pending_bytes(&self) -> usize {
        (self.encoded - self.written) as usize
    }

    /// The active buffer (for encoding).
    pub(crate) fn active(&mut self) -> &mut WriteBuf {
        &mut self.active
    }

    /// The active buffer's segment base.
    pub(crate) fn active_segment_base(&self) -> u64 {
        self.active.segment_base
    }

    /// Records that `len` bytes were encoded at the active buffer's end
    /// (`end_after_blank`: the logical end jumps to the segment end).
    pub(crate) fn advance(&mut self, len: usize, end_after_blank: Option<u64>) {
        let active = &mut self.active;
        active.data_end += len as u64;
        active.end = end_after_blank.unwrap_or(active.data_end);
        assert!(
            active.data_end - active.base <= active.buf.capacity() as u64,
            "write buffer overrun"
        );
        assert!(active.end >= self.encoded, "encoded went backwards");
        self.encoded = active.end;
    }

    fn take_buffer(&mut self, disk: &mut impl Disk) -> AlignedBuf {
        self.spare
            .pop()
            .unwrap_or_else(|| disk.buffer(self.buffer_size))
    }

    /// Seals the active buffer; the new active one continues in `next`
    /// (`Some((file, segment_base))`: at the start of that segment) or in the
    /// same segment after the partial block.
    pub(crate) fn seal_active(&mut self, disk: &mut impl Disk, next: Option<(FileId, u64)>) {
        let mut buf = self.take_buffer(disk);
        let new_active = match next {
            Some((file, segment_base)) => {
                assert!(
                    segment_base == self.active.end,
                    "next segment {segment_base} != end {}",
                    self.active.end
                );
                WriteBuf {
                    buf,
                    file,
                    segment_base,
                    base: segment_base,
                    data_end: segment_base,
                    end: segment_base,
                }
            }
            None => {
                let old = &self.active;
                let base = align_down(old.data_end);
                let from = (base - old.base) as usize;
                let len = (old.data_end - base) as usize;
                buf.as_full_mut_slice()[..len]
                    .copy_from_slice(&old.buf.as_full_slice()[from..from + len]);
                WriteBuf {
                    buf,
                    file: old.file,
                    segment_base: old.segment_base,
                    base,
                    data_end: old.data_end,
                    end: old.end,
                }
            }
        };
        let old = std::mem::replace(&mut self.active, new_active);
        self.sealed.push_back(old);
    }

    /// The buffers holding encoded bytes not yet submitted, oldest first
    /// (sealed ones, then the active one). Consecutive buffers may overlap
    /// in a partial block.
    pub(crate) fn unsubmitted_buffers(&self) -> impl Iterator<Item = &WriteBuf> {
        self.sealed.iter().chain(std::iter::once(&self.active))
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

    /// Bytes sealed and waiting for a commit.
    pub fn sealed_bytes(&self) -> usize {
        self.sealed
            .iter()
            .map(|b| (b.data_end - b.base) as usize)
            .sum()
    }

    /// Starts commits while fewer than [`COMMITS_IN_FLIGHT_MAX`] are in
    /// flight. With none in flight and `partial_tail` a commit writes
    /// everything appended, partial last block included; behind others, or
    /// without `partial_tail` (the caller goes on appending at once, so the
    /// block will fill), only whole blocks (the partial block waits in the
    /// next buffer), so no two writes of one block are ever in flight
    /// together. A partial-tail commit holds back every later commit until
    /// its write completes, so under load whole-block commits keep several
    /// writes in flight.
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
            if self.sealed.is_empty() {
                if self.active.end <= self.submitted {
                    break;
                }
                // Behind others (or while appends keep coming) a commit waits
                // for enough whole blocks: each commit costs a write (and in
                // SYNC_FLUSH an fdatasync), so small ones waste the disk.
                let whole_bytes = align_down(self.active.data_end).saturating_sub(self.active.base);
                let min_bytes = match self.mode {
                    FlushMode::Async => COMMIT_BEHIND_BYTES_MIN_ASYNC,
                    FlushMode::Sync => COMMIT_BEHIND_BYTES_MIN_SYNC,
                };
                if !tail_now && (whole_bytes == 0 || whole_bytes < min_bytes as u64) {
                    break;
                }
                self.seal_active(disk, None);
            }
            let wb = self.sealed.pop_front().expect("sealed is not empty");
            if wb.end <= self.submitted {
                self.spare.push(wb.buf);
                continue;
            }
            if wb.segment_base > self.durable {
                // The segment barrier (module doc): the one before must be
                // durable first. ASYNC_FLUSH asks for its fdatasync now.
                let segment_base = wb.segment_base;
                self.sealed.push_front(wb);
                if self.mode == FlushMode::Async && self.written >= segment_base {
                    self.start_flush(disk)?;
                }
                break;
            }
            // A buffer ending in a BLANK is its segment's last: its partial
            // block belongs to no later buffer, so it is always written whole.
            let segment_last = wb.end > wb.data_end;
            let whole = tail_now || segment_last;
            if !whole && align_down(wb.data_end) <= wb.base {
                self.sealed.push_front(wb);
                break;
            }
            self.submit_commit(disk, wb, whole)?;
            started = true;
        }
        Ok(started)
    }

    fn submit_commit(
        &mut self,
        disk: &mut impl Disk,
        wb: WriteBuf,
        whole: bool,
    ) -> Result<(), DiskError> {
        let WriteBuf {
            mut buf,
            file,
            segment_base,
            base,
            data_end,
            end,
        } = wb;
        let used = (data_end - base) as usize;
        let len = if whole {
            align_up(used)
        } else {
            align_down(used as u64) as usize
        };
        // What this commit makes readable once written: behind others only
        // up to the last whole append in its blocks, so a batch never becomes
        // visible in part.
        let covered = if whole {
            end
        } else {
            let written_to = base + len as u64;
            let mut covered = self.submitted;
            while let Some(&boundary) = self.append_ends.front() {
                if boundary > written_to {
                    break;
                }
                covered = covered.max(boundary);
                self.append_ends.pop_front();
            }
            covered
        };
        if whole {
            while self.append_ends.front().is_some_and(|b| *b <= end) {
                self.append_ends.pop_front();
            }
        }
        let partial_tail = whole && end == data_end && !used.is_multiple_of(BLOCK_SIZE);
        // Pool buffers hold old bytes: the block's tail past the last record
        // must be zeros on disk (where recovery sees the clean end).
        if whole {
            buf.as_full_mut_slice()[used..len].fill(0);
        }
        assert!(
            base.is_multiple_of(BLOCK_SIZE as u64),
            "write buffer base {base} unaligned"
        );
        let sync = self.mode == FlushMode::Sync;
        self.op_counter += 1;
        // A buffer past `submitted` holds at least the bytes that got it there.
        assert!(len > 0, "commit of an empty buffer ending at {end}");
        let counter = self.op_counter;
        {
            let op = DiskOp::Write {
                file,
                file_offset: base - segment_base,
                buf,
                buf_range: 0..len,
            };
            let write_id = commit_log_op_id(SEQ_COMMIT_WRITE, self.op_counter);
            if let Err((error, op)) = disk.submit(write_id, op, sync) {
                if let DiskOp::Write { buf, .. } = op {
                    // Not submitted: the buffer goes back to the front, unchanged.
                    self.sealed.push_front(WriteBuf {
                        buf,
                        file,
                        segment_base,
                        base,
                        data_end,
                        end,
                    });
                }
                return Err(error);
            }
            if sync {
                let fsync_id = commit_log_op_id(SEQ_COMMIT_FSYNC, self.op_counter);
                if let Err((error, _)) = disk.submit(fsync_id, DiskOp::Fdatasync { file }, false) {
                    // The write is queued without its fdatasync: nothing could
                    // ever make it durable, so stop here.
                    self.failed = Some(error.to_string());
                    return Err(error);
                }
            }
        }
        assert!(covered >= self.submitted, "submitted went backwards");
        assert!(
            covered <= self.encoded,
            "submitted {covered} > encoded {}",
            self.encoded
        );
        self.submitted = covered;
        self.commits.push_back(Commit {
            counter,
            end: covered,
            file,
            write_done: false,
            fsync_done: !sync,
            failed: false,
        });
        if partial_tail {
            self.tail_block_commit = Some(counter);
        }
        self.commit_count += 1;
        Ok(())
    }

    /// Starts the periodic fdatasync (ASYNC_FLUSH) if data is written but not
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
            self.spare.push(buf);
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
            let _ = disk;
            return Progress::default();
        }
        match kind {
            SEQ_COMMIT_WRITE => {
                let commit = self.commit_mut(counter);
                commit.write_done = true;
                let file = commit.file;
                if !self.unsynced_files.contains(&file) {
                    self.unsynced_files.push(file);
                }
                if self.tail_block_commit == Some(counter) {
                    self.tail_block_commit = None;
                }
            }
            SEQ_COMMIT_FSYNC => {
                let commit = self.commit_mut(counter);
                assert!(
                    commit.write_done,
                    "fdatasync completed before its linked write"
                );
                commit.fsync_done = true;
            }
            SEQ_FLUSH_FSYNC => {
                let flush = self.flush.as_mut().expect("a flush is in flight");
                flush.remaining -= 1;
                if flush.remaining == 0 {
                    let covers = flush.covers;
                    self.flush = None;
                    self.mark_durable(covers.max(self.durable));
                }
            }
            other => panic!("unexpected commit log op kind {other}"),
        }
        self.advance_positions();
        Progress {
            ack_moved: self.ack_position() != before,
        }
    }

    fn commit_mut(&mut self, counter: u64) -> &mut Commit {
        self.commits
            .iter_mut()
            .find(|c| c.counter == counter)
            .expect("a completion of a commit in flight")
    }

    /// Moves `written` over the in-order prefix of written commits and
    /// `durable` over the prefix of synced ones (SYNC_FLUSH), retiring them.
    fn advance_positions(&mut self) {
        let mut written_upto = None;
        for commit in &self.commits {
            if !commit.write_done || commit.failed {
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
            if !(front.write_done && front.fsync_done) || front.failed {
                break;
            }
            let front = self.commits.pop_front().expect("front exists");
            if self.mode == FlushMode::Sync {
                self.unsynced_files.retain(|f| *f != front.file);
                // A shutdown flush may have covered it already.
                if front.end > self.durable {
                    self.mark_durable(front.end);
                }
            }
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
        for buf in self.spare.drain(..) {
            disk.recycle(buf);
        }
        for wb in self.sealed.drain(..) {
            disk.recycle(wb.buf);
        }
    }
}
