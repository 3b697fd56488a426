//! Queue ownership: which shard owns a queue.
//!
//! Every shard owns a disjoint set of queues and all their files; a request
//! for a queue another shard owns crosses to that shard (design.md, Shards).
//! Ownership is a pure function of the queue id and the shard count, the same
//! for every topic:
//!
//! ```text
//! shard = queue_id mod shard_count
//!
//! queue_id   0  1  2  3  4  5  6  7      (shard_count = 3)
//! shard      0  1  2  0  1  2  0  1
//! ```
//!
//! so a topic's queues spread round-robin over the shards and a topic with at
//! least `shard_count` queues touches every shard.
//!
//! # Invariants
//!
//! - `1 <= shard_count <= SHARD_COUNT_MAX`; a [`Router`] cannot be built
//!   otherwise.
//! - `shard_of(q, n).0 < n` for every queue id `q`.
//! - The shard id fits the top 8 bits of a CommitLog offset the outside world
//!   sees (design.md, Message ids), hence [`SHARD_COUNT_MAX`] = 256.

use std::fmt;

/// Most shards a broker runs: the shard id travels in the top 8 bits of the
/// CommitLog offsets in message ids.
pub const SHARD_COUNT_MAX: u16 = 256;

const _: () = assert!(SHARD_COUNT_MAX as u32 == 1 << 8);

/// The id of one shard thread, `0..shard_count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ShardId(pub u16);

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shard {}", self.0)
    }
}

/// The shard that owns `queue_id` among `shard_count` shards.
///
/// # Panics
///
/// If `shard_count` is 0 or above [`SHARD_COUNT_MAX`]: the shard count is
/// fixed at startup and checked there ([`Router::new`]), so a bad value here
/// is our bug.
pub fn shard_of(queue_id: u32, shard_count: u16) -> ShardId {
    assert!(shard_count > 0, "shard_count is 0");
    assert!(
        shard_count <= SHARD_COUNT_MAX,
        "shard_count {shard_count} > {SHARD_COUNT_MAX}"
    );
    let shard = queue_id % u32::from(shard_count);
    ShardId(u16::try_from(shard).expect("a remainder mod a u16 fits a u16"))
}

/// A shard count that can only be valid, and the routing functions over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Router {
    shard_count: u16,
}

/// A shard count outside `1..=SHARD_COUNT_MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("shard count {shard_count} is outside 1..={SHARD_COUNT_MAX}")]
pub struct ShardCountError {
    /// The count that was refused.
    pub shard_count: u32,
}

impl Router {
    /// A router over `shard_count` shards.
    ///
    /// # Errors
    ///
    /// [`ShardCountError`] when `shard_count` is 0 or above
    /// [`SHARD_COUNT_MAX`].
    pub fn new(shard_count: u32) -> Result<Self, ShardCountError> {
        match u16::try_from(shard_count) {
            Ok(count) if (1..=SHARD_COUNT_MAX).contains(&count) => Ok(Self { shard_count: count }),
            _ => Err(ShardCountError { shard_count }),
        }
    }

    /// The number of shards.
    pub fn shard_count(&self) -> u16 {
        self.shard_count
    }

    /// The shard owning `queue_id`.
    pub fn shard_of(&self, queue_id: u32) -> ShardId {
        shard_of(queue_id, self.shard_count)
    }

    /// The shard owning a queue id as it arrives on the wire (a Java `int`);
    /// `None` for a negative id, which names no queue (a send with a negative
    /// queue id asks the broker to pick one first).
    pub fn shard_of_wire(&self, queue_id: i32) -> Option<ShardId> {
        u32::try_from(queue_id).ok().map(|id| self.shard_of(id))
    }

    /// The queue ids below `queue_nums` that `shard` owns, ascending.
    pub fn queues_of(&self, shard: ShardId, queue_nums: u32) -> impl Iterator<Item = u32> + use<> {
        let step = usize::from(self.shard_count);
        (u32::from(shard.0)..queue_nums).step_by(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_of_is_queue_id_mod_shard_count() {
        assert_eq!(shard_of(0, 3), ShardId(0));
        assert_eq!(shard_of(4, 3), ShardId(1));
        assert_eq!(shard_of(8, 3), ShardId(2));
        assert_eq!(shard_of(u32::MAX, 256), ShardId(255));
        assert_eq!(shard_of(12345, 1), ShardId(0));
    }

    #[test]
    fn every_queue_maps_to_a_shard_below_the_count_and_spreads_evenly() {
        for shard_count in 1..=17u16 {
            let mut per_shard = vec![0u32; usize::from(shard_count)];
            let queue_count = u32::from(shard_count) * 5;
            for queue_id in 0..queue_count {
                let shard = shard_of(queue_id, shard_count);
                assert!(shard.0 < shard_count, "{queue_id} -> {shard}");
                per_shard[usize::from(shard.0)] += 1;
            }
            assert!(per_shard.iter().all(|&count| count == 5), "{per_shard:?}");
        }
    }

    #[test]
    fn router_refuses_zero_and_too_many_shards() {
        assert_eq!(Router::new(0), Err(ShardCountError { shard_count: 0 }));
        assert_eq!(Router::new(257), Err(ShardCountError { shard_count: 257 }));
        assert_eq!(
            Router::new(70000),
            Err(ShardCountError { shard_count: 70000 })
        );
        assert_eq!(Router::new(256).unwrap().shard_count(), 256);
    }

    #[test]
    fn negative_wire_queue_ids_have_no_shard() {
        let router = Router::new(4).unwrap();
        assert_eq!(router.shard_of_wire(-1), None);
        assert_eq!(router.shard_of_wire(6), Some(ShardId(2)));
    }

    #[test]
    fn queues_of_lists_exactly_the_queues_the_shard_owns() {
        let router = Router::new(3).unwrap();
        for shard in 0..3 {
            let owned: Vec<u32> = router.queues_of(ShardId(shard), 10).collect();
            let expected: Vec<u32> = (0..10)
                .filter(|&queue_id| router.shard_of(queue_id) == ShardId(shard))
                .collect();
            assert_eq!(owned, expected);
        }
        assert_eq!(router.queues_of(ShardId(2), 2).count(), 0);
    }

    #[test]
    #[should_panic(expected = "shard_count is 0")]
    fn shard_of_panics_on_zero_shards() {
        shard_of(1, 0);
    }
}
