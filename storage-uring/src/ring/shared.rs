//! One ring, several owners: the components of a shard thread (the remoting
//! server, the store's disk) share the thread's [`Ring`] through [`Lane`]s.
//!
//! ```text
//!  SharedRing ── lane(0x4E, quota) ──▶ Lane (server)  ─┐ submit, add_timer: token's top byte = owner
//!             └─ lane(0xD1, quota) ──▶ Lane (disk)    ─┤
//!                                                      ▼
//!  any lane's turn: enter once ─▶ reap ─▶ own completions and timers ─▶ out
//!                                      └▶ other live lanes' ─▶ parked (reap order)
//!                                      └▶ retired owners'   ─▶ dropped
//!  take_parked: a lane collects what other turns parked for it (no syscall)
//! ```
//!
//! A shard loop sleeps in one lane's turn (the server's); afterwards the
//! other lanes collect what that turn parked for them, and whatever they
//! submit reaches the kernel with the loop's next turn, in the same
//! `io_uring_enter` as the loop's own submissions. A lane may also turn the
//! ring itself (the disk's synchronous steps do); what it reaps for others
//! is parked for them.
//!
//! # Invariants
//! - Every token a lane submits and every timer token it arms carries its
//!   owner tag in the top byte ([`token_owner`]); a tag has at most one live
//!   lane.
//! - The lanes' quotas add up to at most the ring's capacity, and a lane never
//!   has more than its quota in flight, so one owner cannot starve another of
//!   ring slots.
//! - Parked completions keep the order in which the ring reaped them (a
//!   write before the fdatasync linked behind it).
//! - A turn does not sleep while anything is parked for a live lane, nor
//!   when the ring was woken since this lane's previous turn (another lane
//!   may have reaped that wake), so no wake-up is lost to another lane.
//! - Completions and timers of an owner without a live lane (dropped) are
//!   dropped; the ring kept their buffers until their final CQE.
//! - The ring is borrowed only for the span of one lane call, and no caller
//!   code runs while it is borrowed.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::{Completion, Op, Ring, RingError, TimerId, Token, TurnOutput};

/// Bit position of the owner tag in a token.
pub const OWNER_SHIFT: u32 = 56;

/// The owner tag of a token (its top byte).
pub fn token_owner(token: Token) -> u8 {
    (token >> OWNER_SHIFT) as u8
}

/// A ring shared by the lanes of one thread. Cheap to clone (a handle).
#[derive(Clone)]
pub struct SharedRing {
    inner: Rc<RefCell<Shared>>,
}

impl std::fmt::Debug for SharedRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shared = self.inner.borrow();
        f.debug_struct("SharedRing")
            .field("ring", &shared.ring)
            .field("lanes", &shared.lanes.len())
            .field("parked", &shared.parked.len())
            .finish()
    }
}

struct Shared {
    ring: Ring,
    lanes: Vec<LaneState>,
    parked: Vec<Completion>,
    parked_timers: Vec<Token>,
    /// Scratch for one turn's reap.
    scratch: TurnOutput,
}

#[derive(Debug)]
struct LaneState {
    owner: u8,
    capacity: usize,
    in_flight: usize,
    /// The ring's wake count at this lane's previous turn.
    wakes_seen: u64,
}

impl Shared {
    /// The live lane of `owner`, if it has one.
    fn find(&self, owner: u8) -> Option<&LaneState> {
        self.lanes.iter().find(|lane| lane.owner == owner)
    }

    fn find_mut(&mut self, owner: u8) -> Option<&mut LaneState> {
        self.lanes.iter_mut().find(|lane| lane.owner == owner)
    }

    fn lane_mut(&mut self, owner: u8) -> &mut LaneState {
        self.find_mut(owner).expect("a live lane calls")
    }

    fn is_live(&self, owner: u8) -> bool {
        self.find(owner).is_some()
    }

    fn quota_used(&self) -> usize {
        self.lanes.iter().map(|lane| lane.capacity).sum()
    }

    /// Counts a reaped completion against its lane: a final one frees a
    /// slot.
    fn account(&mut self, completion: &Completion) {
        if completion.more {
            return;
        }
        if let Some(lane) = self.find_mut(token_owner(completion.token)) {
            lane.in_flight = lane
                .in_flight
                .checked_sub(1)
                .expect("a lane's completions never outnumber its submissions");
        }
    }

    /// Moves up to `max` completions and every timer parked for `owner` to
    /// `out`, in order.
    fn take_parked(&mut self, owner: u8, max: usize, out: &mut TurnOutput) -> usize {
        let mut taken = 0;
        if !self.parked.is_empty() {
            out.completions
                .extend(self.parked.extract_if(.., |completion| {
                    let mine = taken < max && token_owner(completion.token) == owner;
                    taken += usize::from(mine);
                    mine
                }));
        }
        if !self.parked_timers.is_empty() {
            out.timers.extend(
                self.parked_timers
                    .extract_if(.., |token| token_owner(*token) == owner),
            );
        }
        taken
    }
}

impl SharedRing {
    /// Shares `ring`; lanes divide its capacity.
    pub fn new(ring: Ring) -> Self {
        SharedRing {
            inner: Rc::new(RefCell::new(Shared {
                ring,
                lanes: Vec::new(),
                parked: Vec::new(),
                parked_timers: Vec::new(),
                scratch: TurnOutput::new(),
            })),
        }
    }

    /// Opens the lane of `owner` with room for `capacity` operations in
    /// flight.
    ///
    /// # Errors
    /// [`RingError::Lane`] when `owner` has a live lane, `capacity` is 0, or
    /// it exceeds what the other lanes left of the ring's capacity.
    pub fn lane(&self, owner: u8, capacity: usize) -> Result<Lane, RingError> {
        let mut shared = self.inner.borrow_mut();
        if shared.is_live(owner) {
            return Err(RingError::Lane {
                reason: format!("owner {owner:#04x} has a lane already"),
            });
        }
        let left = shared.ring.capacity() - shared.quota_used();
        if capacity == 0 || capacity > left {
            return Err(RingError::Lane {
                reason: format!(
                    "owner {owner:#04x} asks for {capacity} operations in flight; \
                     {left} of the ring's {} are left",
                    shared.ring.capacity()
                ),
            });
        }
        let wakes_seen = shared.ring.stats().wakes;
        shared.lanes.push(LaneState {
            owner,
            capacity,
            in_flight: 0,
            wakes_seen,
        });
        Ok(Lane {
            shared: self.inner.clone(),
            owner,
        })
    }

    /// Operations in flight the ring holds at most (all lanes together).
    pub fn capacity(&self) -> usize {
        self.inner.borrow().ring.capacity()
    }

    /// Runs `f` on the ring, for set-up and inspection (flags, stats,
    /// wakers, registering buffers). Submitting through it would bypass the
    /// lanes' quotas, so `f` must not.
    pub fn with_ring<R>(&self, f: impl FnOnce(&mut Ring) -> R) -> R {
        f(&mut self.inner.borrow_mut().ring)
    }
}

/// One owner's share of a [`SharedRing`]. Dropping it retires the owner:
/// what was parked for it, and what completes for it later, is dropped.
pub struct Lane {
    shared: Rc<RefCell<Shared>>,
    owner: u8,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("owner", &self.owner)
            .field("in_flight", &self.in_flight())
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl Lane {
    /// The owner tag this lane's tokens carry.
    pub fn owner(&self) -> u8 {
        self.owner
    }

    /// The ring these lanes share.
    pub fn shared_ring(&self) -> SharedRing {
        SharedRing {
            inner: self.shared.clone(),
        }
    }

    /// This lane's operations submitted and not finally completed.
    pub fn in_flight(&self) -> usize {
        self.state(|lane| lane.in_flight)
    }

    /// Most operations this lane has in flight at once.
    pub fn capacity(&self) -> usize {
        self.state(|lane| lane.capacity)
    }

    fn state<R>(&self, f: impl FnOnce(&LaneState) -> R) -> R {
        f(self
            .shared
            .borrow()
            .find(self.owner)
            .expect("a live lane has its state"))
    }

    /// As [`Ring::submit`], within this lane's quota.
    ///
    /// # Errors
    /// [`RingError::QueueFull`] (with the lane's capacity) gives the op back.
    ///
    /// # Panics
    /// If `token` does not carry this lane's owner tag.
    pub fn submit(&self, token: Token, op: Op, link_next: bool) -> Result<(), (RingError, Op)> {
        assert_eq!(
            token_owner(token),
            self.owner,
            "token {token:#x} submitted on the lane of owner {:#04x}",
            self.owner
        );
        let mut shared = self.shared.borrow_mut();
        let lane = shared.lane_mut(self.owner);
        if lane.in_flight >= lane.capacity {
            let capacity = lane.capacity;
            return Err((RingError::QueueFull { capacity }, op));
        }
        shared.ring.submit(token, op, link_next)?;
        shared.lane_mut(self.owner).in_flight += 1;
        Ok(())
    }

    /// As [`Ring::add_timer`]; the timer fires in this lane's output.
    ///
    /// # Errors
    /// [`RingError::TimersFull`].
    ///
    /// # Panics
    /// If `token` does not carry this lane's owner tag.
    pub fn add_timer(&self, deadline: Instant, token: Token) -> Result<TimerId, RingError> {
        assert_eq!(
            token_owner(token),
            self.owner,
            "timer token {token:#x} armed on the lane of owner {:#04x}",
            self.owner
        );
        self.shared.borrow_mut().ring.add_timer(deadline, token)
    }

    /// As [`Ring::cancel_timer`].
    pub fn cancel_timer(&self, id: TimerId) -> bool {
        self.shared.borrow_mut().ring.cancel_timer(id)
    }

    /// One turn for this lane: first what other turns parked for it, then
    /// as [`Ring::turn`] (submitting every lane's queued operations in one
    /// `io_uring_enter`), keeping this lane's completions and timers and
    /// parking the other lanes'. It waits only when nothing is parked for
    /// anyone and no wake went unseen by this lane.
    ///
    /// # Errors
    /// As [`Ring::turn`].
    pub fn turn(
        &self,
        wait: Option<Duration>,
        max: usize,
        out: &mut TurnOutput,
    ) -> Result<usize, RingError> {
        let mut guard = self.shared.borrow_mut();
        let shared = &mut *guard;
        let taken = shared.take_parked(self.owner, max, out);
        let wakes_seen = shared.lane_mut(self.owner).wakes_seen;
        let woken_elsewhere = shared.ring.stats().wakes > wakes_seen;
        let may_sleep = taken == 0 && shared.parked.is_empty() && !woken_elsewhere;
        let wait = wait.filter(|_| may_sleep);
        let mut scratch = std::mem::take(&mut shared.scratch);
        scratch.clear();
        let result = shared
            .ring
            .turn(wait, max.saturating_sub(taken), &mut scratch);
        let mut added = taken;
        for completion in scratch.completions.drain(..) {
            shared.account(&completion);
            let owner = token_owner(completion.token);
            if owner == self.owner {
                out.completions.push(completion);
                added += 1;
            } else if shared.is_live(owner) {
                shared.parked.push(completion);
            }
        }
        for token in scratch.timers.drain(..) {
            let owner = token_owner(token);
            if owner == self.owner {
                out.timers.push(token);
            } else if shared.is_live(owner) {
                shared.parked_timers.push(token);
            }
        }
        out.woken |= scratch.woken || woken_elsewhere;
        shared.scratch = scratch;
        let wakes_now = shared.ring.stats().wakes;
        shared.lane_mut(self.owner).wakes_seen = wakes_now;
        result.map(|_| added)
    }

    /// Moves what other lanes' turns parked for this one (at most `max`
    /// completions, and its timers) to `out`, without a system call.
    /// Returns the number of completions moved.
    pub fn take_parked(&self, max: usize, out: &mut TurnOutput) -> usize {
        self.shared.borrow_mut().take_parked(self.owner, max, out)
    }

    /// Runs `f` on the ring, as [`SharedRing::with_ring`].
    pub fn with_ring<R>(&self, f: impl FnOnce(&mut Ring) -> R) -> R {
        f(&mut self.shared.borrow_mut().ring)
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        let Ok(mut shared) = self.shared.try_borrow_mut() else {
            // Only a panic while the ring is borrowed gets here; the lane's
            // state then goes with the ring.
            return;
        };
        let owner = self.owner;
        shared.lanes.retain(|lane| lane.owner != owner);
        shared
            .parked
            .retain(|completion| token_owner(completion.token) != owner);
        shared
            .parked_timers
            .retain(|token| token_owner(*token) != owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::RingConfig;

    const A: u8 = 0xA1;
    const B: u8 = 0xB2;

    fn tok(owner: u8, n: u64) -> Token {
        u64::from(owner) << OWNER_SHIFT | n
    }

    fn shared(entries: u32) -> SharedRing {
        SharedRing::new(
            Ring::new(RingConfig {
                entries,
                ..RingConfig::default()
            })
            .expect("io_uring available"),
        )
    }

    /// Turns `lane` (no waiting) until `want` completions arrived.
    fn collect(lane: &Lane, want: usize) -> Vec<Token> {
        let mut out = TurnOutput::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while out.completions.len() < want && Instant::now() < deadline {
            lane.turn(Some(Duration::from_millis(10)), 64, &mut out)
                .expect("turn");
        }
        out.completions.iter().map(|c| c.token).collect()
    }

    /// Turns `lane` until the ring has nothing in flight (at most 5 s).
    fn turn_until_idle(ring: &SharedRing, lane: &Lane, out: &mut TurnOutput) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while ring.with_ring(|r| r.in_flight()) > 0 && Instant::now() < deadline {
            lane.turn(Some(Duration::from_millis(10)), 64, out)
                .expect("turn");
        }
    }

    #[test]
    fn each_lane_gets_its_own_completions_in_order_whoever_turns() {
        let ring = shared(64);
        let a = ring.lane(A, 16).expect("lane a");
        let b = ring.lane(B, 16).expect("lane b");
        for n in 0..4 {
            a.submit(tok(A, n), Op::Nop, false).expect("submit a");
            b.submit(tok(B, n), Op::Nop, false).expect("submit b");
        }
        // A's turn reaps everything and parks B's.
        assert_eq!(
            collect(&a, 4),
            (0..4).map(|n| tok(A, n)).collect::<Vec<_>>()
        );
        assert_eq!(b.in_flight(), 0, "b's completions were counted when reaped");
        let mut out = TurnOutput::new();
        assert_eq!(b.take_parked(64, &mut out), 4);
        let got: Vec<Token> = out.completions.iter().map(|c| c.token).collect();
        assert_eq!(got, (0..4).map(|n| tok(B, n)).collect::<Vec<_>>());
        assert_eq!(a.in_flight(), 0);
    }

    #[test]
    fn quotas_bound_each_lane_and_the_ring() {
        let ring = shared(16);
        let capacity = ring.capacity();
        let a = ring.lane(A, 3).expect("lane a");
        assert!(matches!(ring.lane(A, 1), Err(RingError::Lane { .. })));
        assert!(matches!(
            ring.lane(B, capacity - 2),
            Err(RingError::Lane { .. })
        ));
        assert!(matches!(ring.lane(B, 0), Err(RingError::Lane { .. })));
        let b = ring.lane(B, capacity - 3).expect("lane b takes the rest");
        for n in 0..3 {
            a.submit(tok(A, n), Op::Nop, false).expect("within quota");
        }
        match a.submit(tok(A, 3), Op::Nop, false) {
            Err((RingError::QueueFull { capacity: 3 }, Op::Nop)) => {}
            other => panic!("expected QueueFull at the quota, got {other:?}"),
        }
        // B still has its room.
        b.submit(tok(B, 0), Op::Nop, false).expect("b unaffected");
        assert_eq!(collect(&a, 3).len(), 3);
        a.submit(tok(A, 4), Op::Nop, false).expect("room again");
        drop(b);
        let c = ring
            .lane(B, 1)
            .expect("a dropped lane's quota is free again");
        drop(c);
    }

    #[test]
    #[should_panic(expected = "submitted on the lane of owner")]
    fn a_token_of_another_owner_is_refused() {
        let ring = shared(16);
        let a = ring.lane(A, 4).expect("lane a");
        let _ = a.submit(tok(B, 1), Op::Nop, false);
    }

    #[test]
    fn timers_fire_in_their_lane() {
        let ring = shared(16);
        let a = ring.lane(A, 4).expect("lane a");
        let b = ring.lane(B, 4).expect("lane b");
        b.add_timer(Instant::now(), tok(B, 7)).expect("timer");
        let mut out = TurnOutput::new();
        a.turn(None, 64, &mut out).expect("turn a");
        assert!(out.timers.is_empty(), "b's timer is not a's");
        let mut out = TurnOutput::new();
        b.take_parked(64, &mut out);
        assert_eq!(out.timers, vec![tok(B, 7)]);
    }

    #[test]
    fn a_turn_does_not_sleep_while_another_lane_has_parked_completions() {
        let ring = shared(16);
        let a = ring.lane(A, 4).expect("lane a");
        let b = ring.lane(B, 4).expect("lane b");
        b.submit(tok(B, 1), Op::Nop, false).expect("submit");
        let mut out = TurnOutput::new();
        turn_until_idle(&ring, &a, &mut out);
        // B's completion is parked: a long wait must return at once.
        let started = Instant::now();
        a.turn(Some(Duration::from_secs(2)), 64, &mut out)
            .expect("turn");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(out.completions.is_empty());
    }

    #[test]
    fn a_wake_reaped_by_one_lane_is_seen_by_the_other() {
        let ring = shared(16);
        let sleeper = ring.lane(A, 4).expect("lane a");
        let other = ring.lane(B, 4).expect("lane b");
        let waker = ring.with_ring(|r| r.waker());
        waker.wake().expect("wake");
        // The other lane reaps the wake.
        let mut out = TurnOutput::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !out.woken && Instant::now() < deadline {
            other
                .turn(Some(Duration::from_millis(10)), 64, &mut out)
                .expect("turn");
        }
        assert!(out.woken);
        // The sleeper's next turn must not sleep past it.
        let mut out = TurnOutput::new();
        let started = Instant::now();
        sleeper
            .turn(Some(Duration::from_secs(2)), 64, &mut out)
            .expect("turn");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(out.woken);
    }

    #[test]
    fn completions_of_a_dropped_lane_are_dropped() {
        let ring = shared(16);
        let a = ring.lane(A, 4).expect("lane a");
        let b = ring.lane(B, 4).expect("lane b");
        b.submit(tok(B, 1), Op::Nop, false).expect("submit");
        drop(b);
        let mut out = TurnOutput::new();
        turn_until_idle(&ring, &a, &mut out);
        assert!(out.completions.is_empty());
        // Nothing parked: a wait sleeps again (bounded here).
        let started = Instant::now();
        a.turn(Some(Duration::from_millis(50)), 64, &mut out)
            .expect("turn");
        assert!(started.elapsed() >= Duration::from_millis(40));
    }
}
