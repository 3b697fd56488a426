//! [`ConsumeQueueSet`]: all ConsumeQueues of one shard.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{
    AppendOutcome, CQ_DIR_NAME, CQ_SET_QUEUE_COUNT_MAX, ConsumeQueue, CqEntry, LOCAL_SEQ_BITS,
};
use crate::disk::{Disk, DiskCompletion};
use crate::error::StorageError;

/// All ConsumeQueues of one shard, keyed by (topic, queue id). Routes disk
/// completions to their queue by its own sequence numbers (the queue's index
/// in the set is the top 24 bits of the 56-bit sequence).
#[derive(Debug)]
pub struct ConsumeQueueSet {
    root: PathBuf,
    queues: Vec<ConsumeQueue>,
    by_topic: HashMap<String, HashMap<u32, usize>>,
    /// Index of the queue found last (appends come in runs to one queue):
    /// checked by name before use, so it needs no invalidation.
    last_found: Option<usize>,
    /// The durability round in progress (see
    /// [`ConsumeQueueSet::advance_durable_point`]).
    round: Option<DurableRound>,
    /// The latest durable point (0 until a round completes).
    durable_point: u64,
}

/// A round of [`ConsumeQueueSet::advance_durable_point`]: once every queue
/// listed is synced up to its target queue offset, `point` is durable.
#[derive(Debug)]
struct DurableRound {
    point: u64,
    targets: Vec<(usize, u64)>,
}

impl ConsumeQueueSet {
    /// An empty set for the store at `root`.
    pub fn new(root: &Path) -> Self {
        ConsumeQueueSet {
            root: root.to_path_buf(),
            queues: Vec::new(),
            by_topic: HashMap::new(),
            last_found: None,
            round: None,
            durable_point: 0,
        }
    }

    /// The set's durable point: a CommitLog offset such that every entry of
    /// every record below it is written and fdatasynced. Call it after each
    /// flush with `dispatched_to`, the offset below which every record has
    /// its entry in memory: a round started at one call notes each queue's
    /// end, and once every queue is synced that far, a later call makes the
    /// round's `dispatched_to` the durable point and starts the next round.
    /// Never moves back.
    pub fn advance_durable_point(&mut self, dispatched_to: u64) -> u64 {
        if let Some(round) = &self.round
            && round
                .targets
                .iter()
                .all(|&(index, target)| self.queues[index].synced_offset() >= target)
        {
            self.durable_point = self.durable_point.max(round.point);
            self.round = None;
        }
        if self.round.is_none() {
            let targets = self
                .queues
                .iter()
                .enumerate()
                .filter(|(_, queue)| queue.synced_offset() < queue.max_offset())
                .map(|(index, queue)| (index, queue.max_offset()))
                .collect();
            let targets: Vec<(usize, u64)> = targets;
            if targets.is_empty() {
                // Everything is synced already.
                self.durable_point = self.durable_point.max(dispatched_to);
            } else {
                self.round = Some(DurableRound {
                    point: dispatched_to,
                    targets,
                });
            }
        }
        self.durable_point
    }

    /// The durable point as of the last
    /// [`ConsumeQueueSet::advance_durable_point`].
    pub fn durable_point(&self) -> u64 {
        self.durable_point
    }

    /// Starts the durable point at `point` (recovery: what the checkpoint
    /// said, or the CommitLog end after a clean stop).
    pub fn set_durable_point(&mut self, point: u64) {
        self.durable_point = point;
        self.round = None;
    }

    fn insert(&mut self, mut queue: ConsumeQueue) -> Result<usize, StorageError> {
        let index = self.queues.len();
        if index >= CQ_SET_QUEUE_COUNT_MAX {
            return Err(StorageError::InvalidArgument(format!(
                "more than {CQ_SET_QUEUE_COUNT_MAX} consume queues in one shard"
            )));
        }
        queue.set_seq_prefix((index as u64) << LOCAL_SEQ_BITS);
        self.by_topic
            .entry(queue.topic.clone())
            .or_default()
            .insert(queue.queue_id, index);
        self.queues.push(queue);
        Ok(index)
    }

    /// Loads every queue under `<root>/consumequeue/` (see
    /// [`ConsumeQueue::load`]).
    ///
    /// # Errors
    /// As [`ConsumeQueue::load`]; also for a topic directory name that is not
    /// a valid topic.
    pub fn load_all<D: Disk + ?Sized>(disk: &mut D, root: &Path) -> Result<Self, StorageError> {
        let mut set = ConsumeQueueSet::new(root);
        let cq_root = root.join(CQ_DIR_NAME);
        for topic in disk.list_dir(&cq_root)? {
            for queue_name in disk.list_dir(&cq_root.join(&topic))? {
                let Ok(queue_id) = queue_name.parse::<u32>() else {
                    tracing::warn!(%topic, %queue_name, "ignoring a consume queue directory that is not a queue id");
                    continue;
                };
                let queue = ConsumeQueue::load(disk, root, &topic, queue_id)?;
                set.insert(queue)?;
            }
        }
        Ok(set)
    }

    /// The queue, if it exists.
    pub fn get(&self, topic: &str, queue_id: u32) -> Option<&ConsumeQueue> {
        let index = *self.by_topic.get(topic)?.get(&queue_id)?;
        Some(&self.queues[index])
    }

    /// The queue, mutable, if it exists.
    pub fn get_mut(&mut self, topic: &str, queue_id: u32) -> Option<&mut ConsumeQueue> {
        let index = *self.by_topic.get(topic)?.get(&queue_id)?;
        Some(&mut self.queues[index])
    }

    /// The queue, created empty if it does not exist.
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`] for a topic that cannot be a
    /// directory name, or when the set is full.
    pub fn get_or_create(
        &mut self,
        topic: &str,
        queue_id: u32,
    ) -> Result<&mut ConsumeQueue, StorageError> {
        let index = match self.by_topic.get(topic).and_then(|q| q.get(&queue_id)) {
            Some(index) => *index,
            None => {
                let queue = ConsumeQueue::new(&self.root, topic, queue_id)?;
                self.insert(queue)?
            }
        };
        Ok(&mut self.queues[index])
    }

    /// The index (for [`ConsumeQueueSet::queue_at`]) of the queue of
    /// (`topic`, `queue_id`), created empty if it does not exist. Repeated
    /// lookups of one queue skip the hash maps.
    ///
    /// # Errors
    /// As [`ConsumeQueueSet::get_or_create`].
    pub fn index_or_create(&mut self, topic: &str, queue_id: u32) -> Result<usize, StorageError> {
        if let Some(index) = self.last_found
            && let Some(queue) = self.queues.get(index)
            && queue.queue_id == queue_id
            && queue.topic == topic
        {
            return Ok(index);
        }
        let index = match self.by_topic.get(topic).and_then(|q| q.get(&queue_id)) {
            Some(index) => *index,
            None => {
                let queue = ConsumeQueue::new(&self.root, topic, queue_id)?;
                self.insert(queue)?
            }
        };
        self.last_found = Some(index);
        Ok(index)
    }

    /// The queue at `index` (from [`ConsumeQueueSet::index_or_create`]).
    ///
    /// # Panics
    /// If no queue has that index.
    pub fn queue_at(&self, index: usize) -> &ConsumeQueue {
        &self.queues[index]
    }

    /// The queue at `index`, mutable.
    ///
    /// # Panics
    /// If no queue has that index.
    pub fn queue_at_mut(&mut self, index: usize) -> &mut ConsumeQueue {
        &mut self.queues[index]
    }

    /// Appends to the queue (created if needed); see [`ConsumeQueue::append`].
    ///
    /// # Errors
    /// As [`ConsumeQueue::append`] and [`ConsumeQueueSet::get_or_create`].
    pub fn append(
        &mut self,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        entry: CqEntry,
    ) -> Result<AppendOutcome, StorageError> {
        self.get_or_create(topic, queue_id)?
            .append(queue_offset, entry)
    }

    /// Closes every queue's open files (queues loaded only to be read).
    ///
    /// # Errors
    /// The first disk error.
    pub fn close_all<D: Disk + ?Sized>(&mut self, disk: &mut D) -> Result<(), StorageError> {
        for queue in &mut self.queues {
            queue.close_files(disk)?;
        }
        Ok(())
    }

    /// Number of queues.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Whether there is no queue.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// All queues, in creation order.
    pub fn iter(&self) -> impl Iterator<Item = &ConsumeQueue> {
        self.queues.iter()
    }

    /// The largest `commit_log_offset + size` of any queue: where dispatch
    /// resumes after a normal restart (6.9).
    pub fn max_physical_offset(&self) -> u64 {
        self.queues
            .iter()
            .map(ConsumeQueue::max_physical_offset)
            .max()
            .unwrap_or(0)
    }

    /// [`ConsumeQueue::flush`] of every queue; returns the operations
    /// submitted.
    ///
    /// # Errors
    /// The first queue's flush error (queues after it are not flushed this
    /// time).
    pub fn flush_all<D: Disk + ?Sized>(&mut self, disk: &mut D) -> Result<usize, StorageError> {
        let mut submitted = 0;
        for queue in &mut self.queues {
            submitted += queue.flush(disk)?;
        }
        Ok(submitted)
    }

    /// Routes a completion tagged [`crate::disk::OpTag::ConsumeQueue`] to its queue.
    pub fn on_completion<D: Disk + ?Sized>(&mut self, disk: &mut D, completion: DiskCompletion) {
        let index = (completion.op_id.seq() >> LOCAL_SEQ_BITS) as usize;
        match self.queues.get_mut(index) {
            Some(queue) => {
                queue.on_completion(disk, completion);
                // A completed write is synced at once rather than at the
                // next flush interval (so the durable point trails the
                // flushes by one sync, not one interval), and a queue that
                // filled several files goes on with the next one.
                if queue.wants_flush_now()
                    && let Err(error) = queue.flush(disk)
                {
                    tracing::warn!(%error, "consume queue sync after a write failed; it is retried");
                }
            }
            None => {
                if let Some(buf) = completion.buf {
                    disk.recycle(buf);
                }
            }
        }
    }

    /// Whether no queue has an operation in flight.
    pub fn is_idle(&self) -> bool {
        self.queues.iter().all(ConsumeQueue::is_idle)
    }

    /// Whether every queue is written and fdatasynced.
    pub fn is_clean(&self) -> bool {
        self.queues.iter().all(ConsumeQueue::is_clean)
    }

    /// Flush errors of all queues since the last call.
    pub fn take_errors(&mut self) -> Vec<StorageError> {
        self.queues
            .iter_mut()
            .flat_map(ConsumeQueue::take_errors)
            .collect()
    }

    /// [`ConsumeQueue::truncate_from_commit_log_offset`] on every queue.
    ///
    /// # Errors
    /// The first disk error.
    ///
    /// # Panics
    /// If a queue has an operation in flight.
    pub fn truncate_from_commit_log_offset<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        commit_log_offset: u64,
    ) -> Result<(), StorageError> {
        for queue in &mut self.queues {
            queue.truncate_from_commit_log_offset(disk, commit_log_offset)?;
        }
        Ok(())
    }

    /// [`ConsumeQueue::delete_below_commit_log_offset`] on every queue;
    /// returns the files removed.
    ///
    /// # Errors
    /// The first disk error.
    pub fn delete_below_commit_log_offset<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        commit_log_min_offset: u64,
    ) -> Result<usize, StorageError> {
        let mut removed = 0;
        for queue in &mut self.queues {
            removed += queue.delete_below_commit_log_offset(disk, commit_log_min_offset)?;
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::disk::Wait;
    use crate::disk::sim::{SimConfig, SimDisk};

    fn entry(offset: u64) -> CqEntry {
        CqEntry {
            commit_log_offset: offset,
            size: 100,
            tags_code: 0,
        }
    }

    fn io_turn(disk: &mut SimDisk, set: &mut ConsumeQueueSet) {
        let mut out = Vec::new();
        disk.poll(&mut out, 64, Wait::AtLeastOne(Duration::ZERO))
            .unwrap();
        for completion in out {
            set.on_completion(disk, completion);
        }
    }

    #[test]
    fn the_durable_point_is_a_rounds_start_once_every_queue_is_synced_past_it() {
        let mut disk = SimDisk::new(SimConfig::new(3));
        let mut set = ConsumeQueueSet::new(Path::new("/store"));
        for queue_id in 0..2 {
            let at = set.index_or_create("T", queue_id).unwrap();
            for i in 0..3 {
                let offset = 1_000 * u64::from(queue_id) + 100 * i;
                set.queue_at_mut(at).append(i, entry(offset)).unwrap();
            }
        }
        assert_eq!(set.advance_durable_point(5_000), 0, "nothing synced yet");
        // Entries dispatched after the round started are not its business.
        let at = set.index_or_create("T", 0).unwrap();
        set.queue_at_mut(at).append(3, entry(6_000)).unwrap();
        set.flush_all(&mut disk).unwrap();
        for _ in 0..100 {
            io_turn(&mut disk, &mut set);
        }
        assert!(
            set.queues
                .iter()
                .all(|q| q.synced_offset() == q.max_offset())
        );
        // An entry not yet synced holds the next round back, not this one.
        set.queue_at_mut(at).append(4, entry(6_500)).unwrap();
        assert_eq!(set.advance_durable_point(7_000), 5_000);
        assert_eq!(set.advance_durable_point(7_500), 5_000);
        set.flush_all(&mut disk).unwrap();
        for _ in 0..100 {
            io_turn(&mut disk, &mut set);
        }
        assert_eq!(
            set.advance_durable_point(8_000),
            8_000,
            "all synced: at once"
        );
        set.set_durable_point(1_000);
        assert_eq!(set.durable_point(), 1_000);
    }
}
