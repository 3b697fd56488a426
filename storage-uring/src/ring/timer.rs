//! Software timers of one ring: a min-heap of deadlines. The ring waits in
//! `io_uring_enter` no longer than the nearest deadline (the wait-with-timeout
//! of `IORING_ENTER_EXT_ARG`), so no timeout operation has to be kept in
//! flight, updated or cancelled.
//!
//! # Invariants
//! - Every live timer has exactly one heap entry; a cancelled timer's heap
//!   entry is stale (its sequence number no longer matches) and is skipped.
//! - Timers fire in deadline order; equal deadlines fire in the order the
//!   timers were added (the sequence number breaks ties).
//! - At most [`TIMER_COUNT_MAX`] timers are live.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use slab::Slab;

use super::op::Token;

/// Most live timers per ring (a limit of this module; shard code arms a few
/// per component, so this is far above need).
pub const TIMER_COUNT_MAX: usize = 65_536;

/// A handle to cancel a timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerId {
    key: usize,
    seq: u64,
}

#[derive(Debug)]
struct TimerEntry {
    seq: u64,
    token: Token,
}

/// The timer table.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    entries: Slab<TimerEntry>,
    next_seq: u64,
}

impl Timers {
    /// Arms a timer; None if [`TIMER_COUNT_MAX`] timers are live.
    pub(crate) fn add(&mut self, deadline: Instant, token: Token) -> Option<TimerId> {
        if self.entries.len() >= TIMER_COUNT_MAX {
            return None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let key = self.entries.insert(TimerEntry { seq, token });
        self.heap.push(Reverse((deadline, seq, key)));
        Some(TimerId { key, seq })
    }

    /// Disarms a timer; false if it already fired or was cancelled.
    pub(crate) fn cancel(&mut self, id: TimerId) -> bool {
        match self.entries.get(id.key) {
            Some(entry) if entry.seq == id.seq => {
                self.entries.remove(id.key);
                true
            }
            _ => false,
        }
    }

    /// The nearest live deadline.
    pub(crate) fn next_deadline(&mut self) -> Option<Instant> {
        self.drop_stale_heads();
        self.heap.peek().map(|Reverse((deadline, _, _))| *deadline)
    }

    /// Appends the tokens of every timer due at `now`, in firing order.
    pub(crate) fn fire_due(&mut self, now: Instant, out: &mut Vec<Token>) -> usize {
        let mut fired = 0;
        loop {
            self.drop_stale_heads();
            match self.heap.peek() {
                Some(Reverse((deadline, _, _))) if *deadline <= now => {}
                _ => return fired,
            }
            let Some(Reverse((_, _, key))) = self.heap.pop() else {
                return fired;
            };
            let entry = self.entries.remove(key);
            out.push(entry.token);
            fired += 1;
        }
    }

    /// Live timers.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    fn drop_stale_heads(&mut self) {
        while let Some(Reverse((_, seq, key))) = self.heap.peek() {
            let live = self
                .entries
                .get(*key)
                .is_some_and(|entry| entry.seq == *seq);
            if live {
                return;
            }
            self.heap.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn timers_fire_in_deadline_order_and_ties_in_insertion_order() {
        let mut timers = Timers::default();
        let start = Instant::now();
        timers.add(start + Duration::from_millis(30), 3).unwrap();
        timers.add(start + Duration::from_millis(10), 1).unwrap();
        timers.add(start + Duration::from_millis(20), 2).unwrap();
        timers.add(start + Duration::from_millis(20), 22).unwrap();
        let mut out = Vec::new();
        assert_eq!(
            timers.fire_due(start + Duration::from_millis(25), &mut out),
            3
        );
        assert_eq!(out, vec![1, 2, 22]);
        assert_eq!(
            timers.next_deadline(),
            Some(start + Duration::from_millis(30))
        );
    }

    #[test]
    fn cancelled_timer_never_fires_and_cannot_be_cancelled_twice() {
        let mut timers = Timers::default();
        let start = Instant::now();
        let id = timers.add(start, 7).unwrap();
        timers.add(start + Duration::from_millis(5), 8).unwrap();
        assert!(timers.cancel(id));
        assert!(!timers.cancel(id));
        assert_eq!(
            timers.next_deadline(),
            Some(start + Duration::from_millis(5))
        );
        let mut out = Vec::new();
        timers.fire_due(start + Duration::from_secs(1), &mut out);
        assert_eq!(out, vec![8]);
        assert_eq!(timers.len(), 0);
    }

    #[test]
    fn reused_slot_does_not_revive_a_cancelled_heap_entry() {
        let mut timers = Timers::default();
        let start = Instant::now();
        let early = timers.add(start, 1).unwrap();
        assert!(timers.cancel(early));
        // Same slab key, later deadline: the stale early heap entry must not
        // fire it ahead of time.
        timers.add(start + Duration::from_secs(10), 2).unwrap();
        let mut out = Vec::new();
        assert_eq!(timers.fire_due(start + Duration::from_secs(1), &mut out), 0);
        assert!(out.is_empty());
    }
}
