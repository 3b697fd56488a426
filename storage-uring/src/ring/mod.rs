//! The shard reactor: one io_uring ring per shard thread, serving disk and
//! network operations alike.
//!
//! ```text
//!  submit(token, Op, link) ──► slab[key] = Op ──► SQE(user_data = key) ─┐
//!                                                                      │ one io_uring_enter
//!  turn(wait, max, out) ◄── Completion{token, result, op} ◄── CQE ◄─────┘ per turn
//!        │                      (continuations / retries re-queued, submitted next turn)
//!        └─ timers due ──► out.timers      eventfd read done ──► out.woken
//! ```
//!
//! A loop turn is: submit everything queued and wait (at most until the
//! caller's bound or the nearest timer, whichever comes first) in one
//! `io_uring_enter`, reap at most `max` (≤ [`COMPLETIONS_PER_TURN_MAX`])
//! completions, fire due timers. The caller runs its handlers on the output
//! and calls `turn` again; the time between two turns is the stall detector's
//! measure (a `tracing::warn!` past [`RingConfig::stall_threshold`]). That is
//! wall time, so the warning also gives the thread's run-queue wait over the
//! last ~100 ms (`run_queue` module): a pinned shard preempted by another
//! process shows a wait near its busy time.
//!
//! Errno handling: `EINTR` and `EAGAIN` are resubmitted (at most
//! [`RESUBMIT_MAX`] times); short reads, writes and sends are continued from
//! where they stopped; a read that meets end of file (0) or fails after
//! progress completes with the bytes it got; any other errno is kept in the
//! completion's `io::Error`.
//!
//! Linked operations (`IOSQE_IO_LINK`): the kernel fails a link whose head
//! completes short or with an error, cancelling its followers. When the head
//! is only short (or hit `EINTR`/`EAGAIN`) the ring continues it, parks the
//! cancelled followers, and resubmits them once the head has fully
//! succeeded; only a real failure of the head reaches the followers, as
//! `ECANCELED`. So "write then fdatasync" stays ordered even through a
//! continued write.
//!
//! # Invariants
//! - user_data of every SQE is the key of its slab entry; the entry (and the
//!   buffers its `Op` owns) lives until the entry's final CQE has been
//!   reaped. Only then is the `Op` handed back.
//! - Each slab entry has at most one SQE in the submission queue, and the slab
//!   never holds more entries than the submission queue has slots, so pushing
//!   an SQE cannot fail.
//! - An eventfd read is always armed (except while the ring is closing).
//! - The ring is used from the thread that created it (`SINGLE_ISSUER`):
//!   `Ring` is neither `Send` nor `Sync`.
//! - Dropping the ring cancels what can be cancelled and waits for every
//!   operation's CQE before freeing its buffers; whatever has not completed
//!   after [`DRAIN_TIMEOUT`] is leaked, never freed under the kernel.
//!
//! # Sharing
//! A shard thread runs one ring for its sockets and its disk: [`SharedRing`]
//! divides it into [`Lane`]s, one per owner (the owner tag is the top byte
//! of a token), each with its quota of slots; any lane's turn reaps for all
//! and parks what belongs to the others (`shared` module).

pub mod affinity;
pub mod buffers;
pub mod error;
mod inflight;
pub mod op;
mod run_queue;
mod setup;
pub mod shared;
pub mod timer;
pub mod waker;

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::types::{CancelBuilder, Fd, SubmitArgs, Timespec};
use io_uring::{EnterFlags, IoUring, cqueue, opcode, squeue};
use slab::Slab;

use crate::aligned::AlignedBuf;
pub use crate::limits::COMPLETIONS_PER_TURN_MAX;
use inflight::{SlotRef, UserOp, Verdict, build_entry, judge, registered_index};

pub use buffers::FixedBufferPool;
pub use error::RingError;
pub use op::{Completion, Op, Token};
pub use setup::SetupFlags;
pub use shared::{Lane, OWNER_SHIFT, SharedRing, token_owner};
pub use timer::{TIMER_COUNT_MAX, TimerId};
pub use waker::Waker;

/// Default submission queue depth.
pub const RING_ENTRIES_DEFAULT: u32 = 1024;
/// Smallest accepted depth.
pub const RING_ENTRIES_MIN: u32 = 8;
/// Largest accepted depth.
pub const RING_ENTRIES_MAX: u32 = 32768;
/// Default bound on a loop turn before the stall detector warns.
pub const STALL_THRESHOLD_DEFAULT: Duration = Duration::from_millis(20);
/// Most resubmissions of one operation after `EINTR` / `EAGAIN`.
pub const RESUBMIT_MAX: u32 = 16;
/// How long dropping a ring waits for in-flight operations.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// The kernel's limit on registered buffers per ring (`IORING_MAX_REG_BUFFERS`).
pub const FIXED_BUFFER_COUNT_MAX: usize = 1 << 14;
/// The kernel's limit on the size of one registered buffer (1 GiB).
pub const FIXED_BUFFER_SIZE_MAX: usize = 1 << 30;
/// Slots kept for the ring's own operations (the eventfd read, a cancel):
/// a ring of `entries` holds `entries - RING_INTERNAL_SLOTS` callers' ops.
pub const RING_INTERNAL_SLOTS: usize = 2;

const _: () = assert!(RING_ENTRIES_MIN as usize > RING_INTERNAL_SLOTS);
const _: () = assert!(RING_ENTRIES_DEFAULT >= RING_ENTRIES_MIN);
const _: () = assert!(RING_ENTRIES_DEFAULT <= RING_ENTRIES_MAX);
const _: () = assert!(RING_ENTRIES_MAX.is_power_of_two());

/// How a ring is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Submission queue depth (the completion queue is twice as deep); at
    /// most `entries - 2` operations are in flight at once.
    pub entries: u32,
    /// A turn longer than this is logged with `tracing::warn!`.
    pub stall_threshold: Duration,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            entries: RING_ENTRIES_DEFAULT,
            stall_threshold: STALL_THRESHOLD_DEFAULT,
        }
    }
}

/// Counters of one ring, for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// `io_uring_enter` calls.
    pub enters: u64,
    /// SQEs the kernel accepted.
    pub sqes_submitted: u64,
    /// CQEs reaped.
    pub cqes_reaped: u64,
    /// Operations submitted by callers (not counting continuations).
    pub ops_submitted: u64,
    /// Of those, writes.
    pub writes_submitted: u64,
    /// Of those, fsyncs and fdatasyncs.
    pub fsyncs_submitted: u64,
    /// Reads submitted as `READ_FIXED`.
    pub fixed_reads: u64,
    /// Writes submitted as `WRITE_FIXED`.
    pub fixed_writes: u64,
    /// Short transfers continued.
    pub continuations: u64,
    /// Resubmissions after `EINTR` / `EAGAIN`.
    pub resubmits: u64,
    /// Linked operations parked and resubmitted after their head was continued.
    pub relinked: u64,
    /// Turns longer than the stall threshold.
    pub stalls: u64,
    /// Eventfd wake-ups seen.
    pub wakes: u64,
}

/// What one turn produced. Turns append; the caller clears.
#[derive(Debug, Default)]
pub struct TurnOutput {
    /// Completed operations (and shots of multishot ones).
    pub completions: Vec<Completion>,
    /// Tokens of timers that fired, in deadline order.
    pub timers: Vec<Token>,
    /// The ring was woken through its [`Waker`].
    pub woken: bool,
}

impl TurnOutput {
    /// An empty output.
    pub fn new() -> Self {
        TurnOutput::default()
    }

    /// Empties it for the next turn (keeps the allocations).
    pub fn clear(&mut self) {
        self.completions.clear();
        self.timers.clear();
        self.woken = false;
    }
}

#[derive(Debug)]
enum Slot {
    User(UserOp),
    Wake,
    Cancel,
}

#[derive(Debug)]
struct Entry {
    seq: u64,
    slot: Slot,
}

/// One shard's io_uring reactor.
pub struct Ring {
    ring: IoUring,
    flags: SetupFlags,
    config: RingConfig,
    slab: Slab<Entry>,
    next_seq: u64,
    user_in_flight: usize,
    user_capacity: usize,
    link_tail: Option<SlotRef>,
    /// (address, capacity) of each registered buffer, by index.
    fixed: Vec<(usize, usize)>,
    timers: timer::Timers,
    eventfd: Arc<waker::WakeFd>,
    /// 8 bytes the eventfd read writes into; owned by the ring, freed in Drop.
    wake_buf: NonNull<u64>,
    wake_armed: bool,
    closing: bool,
    cqe_scratch: Vec<cqueue::Entry>,
    busy_since: Option<Instant>,
    run_queue: run_queue::RunQueueClock,
    stats: RingStats,
    /// SINGLE_ISSUER: the ring must stay on its creating thread.
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("flags", &self.flags)
            .field("in_flight", &self.user_in_flight)
            .field("capacity", &self.user_capacity)
            .field("fixed_buffers", &self.fixed.len())
            .finish()
    }
}

impl Ring {
    /// Builds a ring on the calling thread, which must be the only one to use
    /// it.
    ///
    /// # Errors
    /// [`RingError::Unavailable`] (cause and fix in the message) or
    /// [`RingError::Unsupported`].
    ///
    /// # Panics
    /// If `config.entries` is outside [`RING_ENTRIES_MIN`]..=[`RING_ENTRIES_MAX`].
    pub fn new(config: RingConfig) -> Result<Ring, RingError> {
        assert!(
            config.entries >= RING_ENTRIES_MIN,
            "ring entries {} < min",
            config.entries
        );
        assert!(
            config.entries <= RING_ENTRIES_MAX,
            "ring entries {} > max",
            config.entries
        );
        let (ring, flags) = setup::build_ring(config.entries)?;
        let eventfd = waker::new_eventfd().map_err(|source| RingError::Unavailable {
            cause: "eventfd(2) failed".into(),
            fix: "raise the open-files limit (`ulimit -n`)",
            source,
        })?;
        let sq_capacity = ring.params().sq_entries() as usize;
        let wake_buf = NonNull::from(Box::leak(Box::new(0u64)));
        let mut ring = Ring {
            ring,
            flags,
            config,
            slab: Slab::with_capacity(sq_capacity),
            next_seq: 0,
            user_in_flight: 0,
            user_capacity: sq_capacity - RING_INTERNAL_SLOTS,
            link_tail: None,
            fixed: Vec::new(),
            timers: timer::Timers::default(),
            eventfd,
            wake_buf,
            wake_armed: false,
            closing: false,
            cqe_scratch: Vec::with_capacity(COMPLETIONS_PER_TURN_MAX),
            busy_since: None,
            run_queue: run_queue::RunQueueClock::for_this_thread(Instant::now()),
            stats: RingStats::default(),
            _not_send: PhantomData,
        };
        ring.arm_wake();
        Ok(ring)
    }

    /// The setup flags the kernel accepted.
    pub fn setup_flags(&self) -> SetupFlags {
        self.flags
    }

    /// The configuration the ring was built with.
    pub fn config(&self) -> RingConfig {
        self.config
    }

    /// Forgets when the previous turn ended, so the next turn does not count
    /// the time since as a stall (a loop that starts after set-up work).
    pub fn reset_stall_clock(&mut self) {
        self.busy_since = None;
    }

    /// Changes the stall detector's bound (a phase of long turns, such as
    /// recovery, raises it for a while).
    pub fn set_stall_threshold(&mut self, threshold: Duration) {
        self.config.stall_threshold = threshold;
    }

    /// A handle that wakes this ring from any thread.
    pub fn waker(&self) -> Waker {
        Waker::new(self.eventfd.clone())
    }

    /// Operations submitted and not finally completed.
    pub fn in_flight(&self) -> usize {
        self.user_in_flight
    }

    /// Most operations in flight at once.
    pub fn capacity(&self) -> usize {
        self.user_capacity
    }

    /// Makes the kernel signal `eventfd` whenever this ring posts a
    /// completion (`IORING_REGISTER_EVENTFD`; with DEFER_TASKRUN also when
    /// deferred work is queued, so the owner knows to enter this ring). A
    /// thread that runs two rings sleeps in one of them and hands it the
    /// other's eventfd: pass the sleeping ring's [`Waker::as_fd`]. The
    /// descriptor must outlive this ring's use of it.
    ///
    /// # Errors
    /// [`RingError::RegisterEventfd`] with the errno (EBUSY: one is
    /// registered already).
    pub fn notify_eventfd(&self, eventfd: BorrowedFd<'_>) -> Result<(), RingError> {
        self.ring
            .submitter()
            .register_eventfd(eventfd.as_raw_fd())
            .map_err(|source| RingError::RegisterEventfd { source })
    }

    /// Counters.
    pub fn stats(&self) -> RingStats {
        self.stats
    }

    /// Live timers.
    pub fn timer_count(&self) -> usize {
        self.timers.len()
    }

    /// Whether `buf` is registered with this ring (so reads and writes from it
    /// use the fixed opcodes).
    pub fn is_registered(&self, buf: &AlignedBuf) -> bool {
        registered_index(&self.fixed, buf).is_some()
    }

    /// Queues `op`; it reaches the kernel in the next [`Ring::turn`]. With
    /// `link_next`, the next op submitted before that turn starts only after
    /// this one fully succeeded.
    ///
    /// # Errors
    /// [`RingError::QueueFull`] gives the op back untouched.
    ///
    /// # Panics
    /// If the op's lengths are out of bounds (see [`Op`]).
    pub fn submit(&mut self, token: Token, op: Op, link_next: bool) -> Result<(), (RingError, Op)> {
        if self.user_in_flight >= self.user_capacity || self.closing {
            return Err((
                RingError::QueueFull {
                    capacity: self.user_capacity,
                },
                op,
            ));
        }
        op.assert_valid();
        self.stats.ops_submitted += 1;
        match op {
            Op::Write { .. } | Op::WriteShared { .. } => self.stats.writes_submitted += 1,
            Op::Fsync { .. } => self.stats.fsyncs_submitted += 1,
            _ => {}
        }
        let timespec = match &op {
            Op::Timeout { duration } => Some(Box::new(Timespec::from(*duration))),
            _ => None,
        };
        let prev = self.link_tail.take();
        let seq = self.take_seq();
        let user = UserOp {
            token,
            op,
            progress: 0,
            retries: 0,
            link: link_next,
            prev,
            next: None,
            parked: false,
            timespec,
        };
        let key = self.slab.insert(Entry {
            seq,
            slot: Slot::User(user),
        });
        let this = SlotRef { key, seq };
        if let Some(prev) = prev
            && let Some(leader) = self.live_user_mut(prev)
        {
            leader.next = Some(this);
        }
        if link_next {
            self.link_tail = Some(this);
        }
        self.user_in_flight += 1;
        self.push_user(key, link_next);
        Ok(())
    }

    /// Arms a timer that fires (appears in [`TurnOutput::timers`]) at the
    /// first turn at or after `deadline`.
    ///
    /// # Errors
    /// [`RingError::TimersFull`] past [`TIMER_COUNT_MAX`] live timers.
    pub fn add_timer(&mut self, deadline: Instant, token: Token) -> Result<TimerId, RingError> {
        self.timers
            .add(deadline, token)
            .ok_or(RingError::TimersFull {
                max: TIMER_COUNT_MAX,
            })
    }

    /// Disarms a timer; false if it already fired or was cancelled.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.timers.cancel(id)
    }

    /// One loop turn: submits everything queued in one `io_uring_enter`,
    /// waiting up to `wait` (None or zero: not at all; never past the next
    /// timer) for a completion, then reaps at most `max` completions (capped
    /// at [`COMPLETIONS_PER_TURN_MAX`]) and fires due timers into `out`.
    /// Returns the number of completions appended.
    ///
    /// # Errors
    /// [`RingError::Enter`] for an errno of `io_uring_enter` outside normal
    /// flow (`EINTR`, `ETIME`, `EBUSY` and `EAGAIN` are normal).
    pub fn turn(
        &mut self,
        wait: Option<Duration>,
        max: usize,
        out: &mut TurnOutput,
    ) -> Result<usize, RingError> {
        let now = Instant::now();
        if let Some(since) = self.busy_since.take() {
            let busy = now.duration_since(since);
            if busy > self.config.stall_threshold {
                self.stats.stalls += 1;
                // The wait for a CPU since the last sample (at most ~100 ms
                // before this turn began, so the window holds the turn).
                let preempted = self.run_queue.since_last_sample(now);
                tracing::warn!(
                    busy_us = busy.as_micros() as u64,
                    threshold_us = self.config.stall_threshold.as_micros() as u64,
                    in_flight = self.user_in_flight,
                    run_queue_wait_us = preempted.map(|p| p.waited.as_micros() as u64),
                    run_queue_window_us = preempted.map(|p| p.window.as_micros() as u64),
                    "ring loop turn stalled"
                );
            }
        }
        self.run_queue.tick(now);
        // A link never spans two submissions. The wake read is normally
        // re-armed during the reap; arming it here would put it behind the
        // caller's SQEs, so only do so when the last of them is not linked.
        if !self.wake_armed && !self.closing && self.link_tail.is_none() {
            self.arm_wake();
        }
        self.link_tail = None;
        let mut timeout = wait.filter(|wait| !wait.is_zero());
        if let (Some(limit), Some(deadline)) = (timeout, self.timers.next_deadline()) {
            timeout = Some(limit.min(deadline.saturating_duration_since(now)));
        }
        let cq_ready = !self.ring.completion().is_empty();
        let timeout = timeout.filter(|timeout| !timeout.is_zero() && !cq_ready);
        self.enter(timeout)?;
        self.busy_since = Some(Instant::now());
        let before = out.completions.len();
        self.reap(max.min(COMPLETIONS_PER_TURN_MAX), out);
        self.timers.fire_due(Instant::now(), &mut out.timers);
        Ok(out.completions.len() - before)
    }

    /// Registers `bufs` as this ring's fixed-buffer table and marks each with
    /// its index. Most callers use [`FixedBufferPool::register`].
    ///
    /// # Errors
    /// [`RingError::BuffersRefused`] when RLIMIT_MEMLOCK is short (the message
    /// names cause and remedy), [`RingError::AlreadyRegistered`],
    /// [`RingError::Register`].
    ///
    /// # Panics
    /// If a buffer is already registered, or the count or a size exceeds the
    /// kernel's limits.
    pub fn register_buffers(&mut self, bufs: &mut [AlignedBuf]) -> Result<(), RingError> {
        if !self.fixed.is_empty() {
            return Err(RingError::AlreadyRegistered);
        }
        assert!(
            bufs.len() <= FIXED_BUFFER_COUNT_MAX,
            "{} buffers > kernel max",
            bufs.len()
        );
        let mut iovecs = Vec::with_capacity(bufs.len());
        for buf in bufs.iter_mut() {
            assert!(buf.fixed_index().is_none(), "buffer already registered");
            assert!(
                buf.capacity() <= FIXED_BUFFER_SIZE_MAX,
                "buffer of {} bytes > 1 GiB",
                buf.capacity()
            );
            iovecs.push(libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.capacity(),
            });
        }
        // SAFETY: each iovec covers exactly the allocation of a live
        // AlignedBuf. Once marked with a fixed index below, an AlignedBuf is
        // never freed (its Drop leaks it), so the memory stays valid for as
        // long as the kernel may use the registration (until this ring is
        // gone). On error nothing is registered and nothing is marked.
        let registered = unsafe { self.ring.submitter().register_buffers(&iovecs) };
        if let Err(source) = registered {
            let bytes = iovecs.iter().map(|iovec| iovec.iov_len).sum();
            return Err(if source.raw_os_error() == Some(libc::ENOMEM) {
                RingError::BuffersRefused {
                    count: bufs.len(),
                    bytes,
                    limit: memlock_limit_text(),
                    source,
                }
            } else {
                RingError::Register {
                    count: bufs.len(),
                    source,
                }
            });
        }
        for (index, buf) in bufs.iter_mut().enumerate() {
            let index16 =
                u16::try_from(index).expect("count checked against FIXED_BUFFER_COUNT_MAX");
            buf.set_fixed_index(index16);
            self.fixed.push((buf.as_ptr() as usize, buf.capacity()));
        }
        Ok(())
    }

    fn take_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    fn live_user_mut(&mut self, at: SlotRef) -> Option<&mut UserOp> {
        match self.slab.get_mut(at.key) {
            Some(Entry {
                seq,
                slot: Slot::User(user),
            }) if *seq == at.seq => Some(user),
            _ => None,
        }
    }

    fn live_user(&self, at: SlotRef) -> Option<&UserOp> {
        match self.slab.get(at.key) {
            Some(Entry {
                seq,
                slot: Slot::User(user),
            }) if *seq == at.seq => Some(user),
            _ => None,
        }
    }

    /// Pushes the SQE of user op `key` (first submission, continuation,
    /// retry or relink).
    fn push_user(&mut self, key: usize, link: bool) {
        let Some(Entry {
            slot: Slot::User(user),
            ..
        }) = self.slab.get_mut(key)
        else {
            unreachable!("push_user on a slot that is not a user op");
        };
        let mut sqe = build_entry(user, &self.fixed, &mut self.stats).user_data(key as u64);
        if link {
            sqe = sqe.flags(squeue::Flags::IO_LINK);
        }
        self.push_sqe(&sqe);
    }

    fn push_sqe(&mut self, sqe: &squeue::Entry) {
        // SAFETY: every pointer in `sqe` refers to memory owned by the slab
        // entry whose key is the SQE's user_data (its Op's buffers, path or
        // timespec, all heap allocations that do not move when the entry
        // moves), or to the ring's own wake buffer. The entry is removed only
        // after its final CQE is reaped, so the memory outlives the kernel's
        // use of it.
        let pushed = unsafe { self.ring.submission().push(sqe) };
        pushed.expect("SQ has a free slot: slab entries never exceed SQ capacity");
    }

    fn arm_wake(&mut self) {
        let seq = self.take_seq();
        let key = self.slab.insert(Entry {
            seq,
            slot: Slot::Wake,
        });
        let sqe = opcode::Read::new(Fd(self.eventfd.raw_fd()), self.wake_buf.as_ptr().cast(), 8)
            .build()
            .user_data(key as u64);
        self.push_sqe(&sqe);
        self.wake_armed = true;
    }

    fn enter(&mut self, timeout: Option<Duration>) -> Result<(), RingError> {
        let to_submit = self.ring.submission().len() as u32;
        let submitter = self.ring.submitter();
        // GETEVENTS on every enter: with DEFER_TASKRUN completions are only
        // posted while the owner is in the kernel asking for events.
        let flags = EnterFlags::GETEVENTS;
        let result = match timeout {
            Some(timeout) => {
                let timespec = Timespec::from(timeout);
                let args = SubmitArgs::new().timespec(&timespec);
                // SAFETY: `args` is a valid io_uring_getevents_arg that lives
                // across the call; EXT_ARG tells the kernel its type and size.
                unsafe {
                    submitter.enter(
                        to_submit,
                        1,
                        (flags | EnterFlags::EXT_ARG).bits(),
                        Some(&args),
                    )
                }
            }
            // SAFETY: no argument pointer is passed (null sigmask).
            None => unsafe { submitter.enter::<libc::sigset_t>(to_submit, 0, flags.bits(), None) },
        };
        self.stats.enters += 1;
        match result {
            Ok(submitted) => {
                self.stats.sqes_submitted += submitted as u64;
                Ok(())
            }
            Err(error) => match error.raw_os_error() {
                Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN) => Ok(()),
                _ => Err(RingError::Enter { source: error }),
            },
        }
    }

    fn reap(&mut self, max: usize, out: &mut TurnOutput) {
        let mut cqes = std::mem::take(&mut self.cqe_scratch);
        cqes.clear();
        cqes.extend(self.ring.completion().take(max));
        self.stats.cqes_reaped += cqes.len() as u64;
        for cqe in &cqes {
            self.handle_cqe(cqe.user_data() as usize, cqe.result(), cqe.flags(), out);
        }
        self.cqe_scratch = cqes;
    }

    fn handle_cqe(&mut self, key: usize, result: i32, flags: u32, out: &mut TurnOutput) {
        let Some(entry) = self.slab.get_mut(key) else {
            tracing::error!(key, result, "completion for an unknown ring slot");
            return;
        };
        match entry.slot {
            Slot::Wake => {
                self.slab.remove(key);
                self.wake_armed = false;
                // Before the caller looks at what the wakers left: a wake
                // from here on writes the eventfd again.
                self.eventfd.consume();
                if result >= 0 {
                    self.stats.wakes += 1;
                    out.woken = true;
                }
                // Re-armed here, during the reap, so its SQE precedes any
                // the caller queues next: it can never end up linked behind
                // a caller's op that asked for `link_next`.
                if !self.closing {
                    self.arm_wake();
                }
            }
            Slot::Cancel => {
                self.slab.remove(key);
            }
            Slot::User(_) => self.handle_user_cqe(key, result, flags, out),
        }
    }

    fn handle_user_cqe(&mut self, key: usize, result: i32, flags: u32, out: &mut TurnOutput) {
        let prev = match &self.slab[key] {
            Entry {
                slot: Slot::User(user),
                ..
            } => user.prev,
            _ => unreachable!("checked by the caller"),
        };
        let prev_live = prev.is_some_and(|prev| self.live_user(prev).is_some());
        let closing = self.closing;
        let Entry {
            slot: Slot::User(user),
            ..
        } = &mut self.slab[key]
        else {
            unreachable!("checked by the caller");
        };
        let mut verdict = judge(user, result, cqueue::more(flags), prev_live);
        if closing && matches!(verdict, Verdict::Resubmit | Verdict::Park) {
            verdict = Verdict::Complete(Err(io::Error::from_raw_os_error(libc::ECANCELED)));
        }
        match verdict {
            Verdict::Resubmit => {
                if user.progress == 0 {
                    self.stats.resubmits += 1;
                } else {
                    self.stats.continuations += 1;
                }
                self.push_user(key, false);
            }
            Verdict::Park => user.parked = true,
            Verdict::Shot(result) => {
                let token = user.token;
                out.completions.push(Completion {
                    token,
                    result,
                    op: None,
                    more: true,
                });
            }
            Verdict::Complete(result) => {
                let ok = result.is_ok();
                let next = self.complete(key, result, out);
                let parked_next =
                    next.filter(|next| self.live_user(*next).is_some_and(|user| user.parked));
                if let Some(next) = parked_next {
                    if ok && !closing {
                        self.relink_parked(next);
                    } else {
                        self.cancel_parked(next, out);
                    }
                }
            }
        }
    }

    /// Removes a finished user op and hands it back; returns its follower.
    fn complete(
        &mut self,
        key: usize,
        result: io::Result<usize>,
        out: &mut TurnOutput,
    ) -> Option<SlotRef> {
        let Entry {
            slot: Slot::User(user),
            ..
        } = self.slab.remove(key)
        else {
            unreachable!("complete on a slot that is not a user op");
        };
        self.user_in_flight -= 1;
        out.completions.push(Completion {
            token: user.token,
            result,
            op: Some(user.op),
            more: false,
        });
        user.next
    }

    /// Resubmits a chain of parked followers, keeping links only between ops
    /// that are pushed back to back.
    fn relink_parked(&mut self, first: SlotRef) {
        let mut current = Some(first);
        while let Some(at) = current {
            let Some(user) = self.live_user_mut(at) else {
                return;
            };
            if !user.parked {
                return;
            }
            user.parked = false;
            user.retries = 0;
            let (link, next) = (user.link, user.next);
            let next_parked =
                next.is_some_and(|next| self.live_user(next).is_some_and(|u| u.parked));
            self.stats.relinked += 1;
            self.push_user(at.key, link && next_parked);
            current = if next_parked { next } else { None };
        }
    }

    /// Completes a chain of parked followers with `ECANCELED`.
    fn cancel_parked(&mut self, first: SlotRef, out: &mut TurnOutput) {
        let mut current = Some(first);
        while let Some(at) = current {
            if !self.live_user(at).is_some_and(|user| user.parked) {
                return;
            }
            current = self.complete(
                at.key,
                Err(io::Error::from_raw_os_error(libc::ECANCELED)),
                out,
            );
        }
    }

    /// Cancels everything and waits (bounded) for every CQE.
    fn drain(&mut self) {
        self.closing = true;
        if self.slab.is_empty() {
            return;
        }
        let seq = self.take_seq();
        let key = self.slab.insert(Entry {
            seq,
            slot: Slot::Cancel,
        });
        let sqe = opcode::AsyncCancel2::new(CancelBuilder::any())
            .build()
            .user_data(key as u64);
        self.push_sqe(&sqe);
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        let mut out = TurnOutput::new();
        while !self.slab.is_empty() && Instant::now() < deadline {
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            if self
                .turn(Some(wait), COMPLETIONS_PER_TURN_MAX, &mut out)
                .is_err()
            {
                break;
            }
            // Their CQEs have arrived: dropping the ops frees memory the
            // kernel no longer uses.
            out.clear();
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        self.drain();
        if self.slab.is_empty() {
            // SAFETY: wake_buf came from Box::leak in `new`, and no eventfd
            // read is in flight any more (the slab is empty).
            drop(unsafe { Box::from_raw(self.wake_buf.as_ptr()) });
        } else {
            tracing::error!(
                in_flight = self.slab.len(),
                "ring dropped with operations still in flight after the drain timeout; \
                 leaking their buffers rather than freeing memory the kernel may still use"
            );
            for entry in self.slab.drain() {
                std::mem::forget(entry);
            }
        }
    }
}

/// RLIMIT_MEMLOCK's soft limit, for error messages.
fn memlock_limit_text() -> String {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the live local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0 {
        return "unknown".into();
    }
    if limit.rlim_cur == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        format!("{} bytes", limit.rlim_cur)
    }
}
