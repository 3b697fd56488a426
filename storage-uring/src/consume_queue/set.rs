//! [`ConsumeQueueSet`]: all ConsumeQueues of one shard.
//!
//! Queues live at stable indices: the index is the top bits of every
//! operation sequence number of its queue, so completions find their queue
//! without a lookup. Deleting a topic ([`ConsumeQueueSet::delete_topic`])
//! leaves a hole at each of its queues' indices; a hole is reused by a new
//! queue once no operation of the old one is in flight (a queue with
//! operations in flight is *draining*: its completions still reach it, and
//! its files go when they have completed).
//!
//! # Invariants
//! - `by_topic` and `topics` map exactly the live queues to their indices
//!   (topic name → topic slot → queue id → index); a live queue at index
//!   `i` has the sequence prefix `i << LOCAL_SEQ_BITS`. A topic slot exists
//!   exactly while the topic has a live queue.
//! - An index is in `free` only if its slot is empty and no operation with
//!   its prefix is in flight; a draining queue's slot stays empty and out of
//!   `free` until it is gone from disk.
//! - The durability round's targets are live queues.
//! - A live queue with the (topic, queue id) of a draining one is not
//!   flushed (it would open the files the draining one still removes).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{
    AppendOutcome, CQ_DIR_NAME, CQ_SET_QUEUE_COUNT_MAX, ConsumeQueue, CqEntry, LOCAL_SEQ_BITS,
    LastStop, remove_empty_dir,
};
use crate::disk::{Disk, DiskCompletion};
use crate::error::StorageError;
use crate::limits::CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX;

/// All ConsumeQueues of one shard, keyed by (topic, queue id). Routes disk
/// completions to their queue by its own sequence numbers (the queue's index
/// in the set is the top 24 bits of the 56-bit sequence).
#[derive(Debug)]
pub struct ConsumeQueueSet {
    root: PathBuf,
    /// Queues by index; `None` where a deleted topic's queue was.
    queues: Vec<Option<ConsumeQueue>>,
    /// Empty slots of `queues` with nothing in flight: reused first.
    free: Vec<usize>,
    /// Queues of deleted topics with operations in flight, with their index.
    draining: Vec<(usize, ConsumeQueue)>,
    /// Live queues.
    live: usize,
    /// Topic name → slot in `topics`.
    by_topic: HashMap<String, usize>,
    /// Each topic's queues; `None` where a deleted topic was.
    topics: Vec<Option<TopicQueues>>,
    /// Empty slots of `topics`, reused first.
    free_topics: Vec<usize>,
    /// Index of the queue found last (appends come in runs to one queue):
    /// checked by name before use, so it needs no invalidation.
    last_found: Option<usize>,
    /// Slot of the topic found last (appends spread over one topic's
    /// queues skip the name's hash): checked by name before use.
    last_topic: Option<usize>,
    /// The durability round in progress (see
    /// [`ConsumeQueueSet::advance_durable_point`]).
    round: Option<DurableRound>,
    /// The latest durable point (0 until a round completes).
    durable_point: u64,
    /// The queue a flush pass visits next.
    flush_cursor: usize,
    /// Queues the pass in progress has still to visit (0: none in
    /// progress). A pass cut short by
    /// [`CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX`] goes on as operations
    /// complete ([`ConsumeQueueSet::continue_flush`]), not a whole flush
    /// interval later.
    pass_left: usize,
}

/// Queue ids at or above this go to [`TopicQueues::sparse`], so that a
/// stray id cannot grow a topic's vector (a topic's ids are `0..queue
/// count`, which RocketMQ keeps far below this).
const DENSE_QUEUE_ID_END: u32 = 1 << 16;

/// No queue at this id of [`TopicQueues::dense`].
const NO_QUEUE: u32 = u32::MAX;

const _: () = assert!(CQ_SET_QUEUE_COUNT_MAX < NO_QUEUE as usize);

/// One topic's live queues: their indices in the set by queue id.
#[derive(Debug)]
struct TopicQueues {
    name: String,
    /// Index by queue id below [`DENSE_QUEUE_ID_END`]; [`NO_QUEUE`] where
    /// there is none.
    dense: Vec<u32>,
    /// Index by queue id from [`DENSE_QUEUE_ID_END`].
    sparse: HashMap<u32, usize>,
}

impl TopicQueues {
    fn new(name: &str) -> Self {
        TopicQueues {
            name: name.to_owned(),
            dense: Vec::new(),
            sparse: HashMap::new(),
        }
    }

    #[inline]
    fn get(&self, queue_id: u32) -> Option<usize> {
        if queue_id < DENSE_QUEUE_ID_END {
            match self.dense.get(queue_id as usize) {
                Some(&index) if index != NO_QUEUE => Some(index as usize),
                _ => None,
            }
        } else {
            self.sparse.get(&queue_id).copied()
        }
    }

    fn insert(&mut self, queue_id: u32, index: usize) {
        if queue_id < DENSE_QUEUE_ID_END {
            let at = queue_id as usize;
            if self.dense.len() <= at {
                self.dense.resize(at + 1, NO_QUEUE);
            }
            self.dense[at] =
                u32::try_from(index).expect("indices are below CQ_SET_QUEUE_COUNT_MAX");
        } else {
            self.sparse.insert(queue_id, index);
        }
    }

    /// Every queue's index, in no particular order.
    fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.dense
            .iter()
            .filter(|&&index| index != NO_QUEUE)
            .map(|&index| index as usize)
            .chain(self.sparse.values().copied())
    }
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
            free: Vec::new(),
            draining: Vec::new(),
            live: 0,
            by_topic: HashMap::new(),
            topics: Vec::new(),
            free_topics: Vec::new(),
            last_found: None,
            last_topic: None,
            round: None,
            durable_point: 0,
            flush_cursor: 0,
            pass_left: 0,
        }
    }

    /// The set's durable point: a CommitLog offset such that every entry of
    /// every record below it is written and fdatasynced (records of topics
    /// deleted since have no entries to wait for). Call it after each
    /// flush with `dispatched_to`, the offset below which every record has
    /// its entry in memory: a round started at one call notes each queue's
    /// end, and once every queue is synced that far, a later call makes the
    /// round's `dispatched_to` the durable point and starts the next round.
    /// Never moves back.
    pub fn advance_durable_point(&mut self, dispatched_to: u64) -> u64 {
        if let Some(round) = &self.round
            && round.targets.iter().all(|&(index, target)| {
                self.queues[index]
                    .as_ref()
                    .is_none_or(|queue| queue.synced_offset() >= target)
            })
        {
            self.durable_point = self.durable_point.max(round.point);
            self.round = None;
        }
        if self.round.is_none() {
            let targets: Vec<(usize, u64)> = self
                .queues
                .iter()
                .enumerate()
                .filter_map(|(index, queue)| queue.as_ref().map(|queue| (index, queue)))
                .filter(|(_, queue)| queue.synced_offset() < queue.max_offset())
                .map(|(index, queue)| (index, queue.max_offset()))
                .collect();
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
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                let index = self.queues.len();
                if index >= CQ_SET_QUEUE_COUNT_MAX {
                    return Err(StorageError::InvalidArgument(format!(
                        "more than {CQ_SET_QUEUE_COUNT_MAX} consume queues in one shard"
                    )));
                }
                self.queues.push(None);
                index
            }
        };
        assert!(self.queues[index].is_none(), "queue slot {index} is taken");
        queue.set_seq_prefix((index as u64) << LOCAL_SEQ_BITS);
        let slot = match self.by_topic.get(queue.topic.as_str()) {
            Some(&slot) => slot,
            None => {
                let topic = TopicQueues::new(&queue.topic);
                let slot = match self.free_topics.pop() {
                    Some(slot) => {
                        self.topics[slot] = Some(topic);
                        slot
                    }
                    None => {
                        self.topics.push(Some(topic));
                        self.topics.len() - 1
                    }
                };
                self.by_topic.insert(queue.topic.clone(), slot);
                slot
            }
        };
        self.topic_at_mut(slot).insert(queue.queue_id, index);
        self.queues[index] = Some(queue);
        self.live += 1;
        Ok(index)
    }

    /// Loads every queue under `<root>/consumequeue/` (see
    /// [`ConsumeQueue::load`]).
    ///
    /// # Errors
    /// As [`ConsumeQueue::load`]; also for a topic directory name that is not
    /// a valid topic.
    pub fn load_all<D: Disk + ?Sized>(
        disk: &mut D,
        root: &Path,
        last_stop: LastStop,
    ) -> Result<Self, StorageError> {
        let mut set = ConsumeQueueSet::new(root);
        let cq_root = root.join(CQ_DIR_NAME);
        for topic in disk.list_dir(&cq_root)? {
            for queue_name in disk.list_dir(&cq_root.join(&topic))? {
                let Ok(queue_id) = queue_name.parse::<u32>() else {
                    tracing::warn!(%topic, %queue_name, "ignoring a consume queue directory that is not a queue id");
                    continue;
                };
                let queue = ConsumeQueue::load(disk, root, &topic, queue_id, last_stop)?;
                set.insert(queue)?;
            }
        }
        Ok(set)
    }

    #[inline]
    fn live_at(&self, index: usize) -> &ConsumeQueue {
        self.queues[index]
            .as_ref()
            .expect("an indexed consume queue exists")
    }

    #[inline]
    fn live_at_mut(&mut self, index: usize) -> &mut ConsumeQueue {
        self.queues[index]
            .as_mut()
            .expect("an indexed consume queue exists")
    }

    #[inline]
    fn topic_at(&self, slot: usize) -> &TopicQueues {
        self.topics[slot]
            .as_ref()
            .expect("a mapped topic slot is taken")
    }

    #[inline]
    fn topic_at_mut(&mut self, slot: usize) -> &mut TopicQueues {
        self.topics[slot]
            .as_mut()
            .expect("a mapped topic slot is taken")
    }

    /// The index of the live queue (`topic`, `queue_id`), if there is one.
    fn find(&self, topic: &str, queue_id: u32) -> Option<usize> {
        let slot = *self.by_topic.get(topic)?;
        self.topic_at(slot).get(queue_id)
    }

    /// The queue, if it exists.
    pub fn get(&self, topic: &str, queue_id: u32) -> Option<&ConsumeQueue> {
        let index = self.find(topic, queue_id)?;
        Some(self.live_at(index))
    }

    /// The queue, mutable, if it exists.
    pub fn get_mut(&mut self, topic: &str, queue_id: u32) -> Option<&mut ConsumeQueue> {
        let index = self.find(topic, queue_id)?;
        Some(self.live_at_mut(index))
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
        let index = match self.find(topic, queue_id) {
            Some(index) => index,
            None => {
                let queue = ConsumeQueue::new(&self.root, topic, queue_id)?;
                self.insert(queue)?
            }
        };
        Ok(self.live_at_mut(index))
    }

    /// The index (for [`ConsumeQueueSet::queue_at`]) of the queue of
    /// (`topic`, `queue_id`), created empty if it does not exist. Repeated
    /// lookups of one queue skip the lookup, and of one topic the topic
    /// name's hash. The index stays the queue's until its topic is deleted.
    ///
    /// # Errors
    /// As [`ConsumeQueueSet::get_or_create`].
    pub fn index_or_create(&mut self, topic: &str, queue_id: u32) -> Result<usize, StorageError> {
        if let Some(index) = self.last_found
            && let Some(Some(queue)) = self.queues.get(index)
            && queue.queue_id == queue_id
            && queue.topic == topic
        {
            return Ok(index);
        }
        let slot = match self.last_topic {
            Some(slot) if self.topics[slot].as_ref().is_some_and(|t| t.name == topic) => Some(slot),
            _ => self.by_topic.get(topic).copied(),
        };
        let found = slot.and_then(|slot| self.topic_at(slot).get(queue_id));
        let index = match found {
            Some(index) => index,
            None => {
                let queue = ConsumeQueue::new(&self.root, topic, queue_id)?;
                self.insert(queue)?
            }
        };
        self.last_found = Some(index);
        self.last_topic = slot.or_else(|| self.by_topic.get(topic).copied());
        Ok(index)
    }

    /// The queue at `index` (from [`ConsumeQueueSet::index_or_create`]).
    ///
    /// # Panics
    /// If no queue has that index.
    #[inline]
    pub fn queue_at(&self, index: usize) -> &ConsumeQueue {
        self.live_at(index)
    }

    /// The queue at `index`, mutable.
    ///
    /// # Panics
    /// If no queue has that index.
    #[inline]
    pub fn queue_at_mut(&mut self, index: usize) -> &mut ConsumeQueue {
        self.live_at_mut(index)
    }

    /// The queue at `index`, if one is there (indices below
    /// [`ConsumeQueueSet::index_bound`] have holes where deleted topics'
    /// queues were).
    #[inline]
    pub fn try_queue_at(&self, index: usize) -> Option<&ConsumeQueue> {
        self.queues.get(index).and_then(Option::as_ref)
    }

    /// The queue at `index`, mutable, if one is there.
    #[inline]
    pub fn try_queue_at_mut(&mut self, index: usize) -> Option<&mut ConsumeQueue> {
        self.queues.get_mut(index).and_then(Option::as_mut)
    }

    /// One past the largest index in use: every queue's index is below it
    /// (walk `0..index_bound()` with [`ConsumeQueueSet::try_queue_at`]).
    pub fn index_bound(&self) -> usize {
        self.queues.len()
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

    /// DELETE_TOPIC (RocketMQ's `deleteTopics`): drops every queue of
    /// `topic` from the set and removes its files and directories, then the
    /// topic's directory. Returns how many queues were dropped. Lookups no
    /// longer find them at once, and a queue of the topic created later
    /// starts empty at queue offset 0. The files of a queue with operations
    /// in flight go when those complete (see [`ConsumeQueueSet::on_completion`]);
    /// meanwhile a new queue of the same (topic, queue id) is not flushed.
    ///
    /// # Errors
    /// The first disk error removing a file or directory (the queues are
    /// dropped from the set all the same; files may stay on disk).
    pub fn delete_topic<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        topic: &str,
    ) -> Result<usize, StorageError> {
        let Some(slot) = self.by_topic.remove(topic) else {
            return Ok(0);
        };
        let queues = self.topics[slot]
            .take()
            .expect("a mapped topic slot is taken");
        self.free_topics.push(slot);
        let mut indices: Vec<usize> = queues.indices().collect();
        indices.sort_unstable();
        self.last_found = None;
        self.last_topic = None;
        if let Some(round) = &mut self.round {
            // A deleted queue's entries no longer need to be durable.
            round
                .targets
                .retain(|(index, _)| indices.binary_search(index).is_err());
        }
        let mut first_error = None;
        for &index in &indices {
            let mut queue = self.queues[index]
                .take()
                .expect("an indexed consume queue exists");
            self.live -= 1;
            let gone = match queue.remove_from_disk(disk) {
                Ok(gone) => gone,
                Err(error) => {
                    first_error.get_or_insert(error);
                    queue.is_idle()
                }
            };
            if gone {
                self.free.push(index);
            } else {
                self.draining.push((index, queue));
            }
        }
        if let Err(error) = self.remove_topic_dir(disk, topic) {
            first_error.get_or_insert(error);
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(indices.len()),
        }
    }

    /// Removes `<root>/consumequeue/<topic>/` if it is empty and no queue
    /// of the topic is still draining.
    fn remove_topic_dir<D: Disk + ?Sized>(
        &self,
        disk: &mut D,
        topic: &str,
    ) -> Result<(), StorageError> {
        if self.draining.iter().any(|(_, queue)| queue.topic == topic) {
            return Ok(());
        }
        let dir = self.root.join(CQ_DIR_NAME).join(topic);
        if !disk.list_dir(&dir)?.is_empty() {
            // A queue of the topic created since has files there.
            return Ok(());
        }
        remove_empty_dir(disk, &dir)
    }

    /// Closes every queue's open files (queues loaded only to be read).
    ///
    /// # Errors
    /// The first disk error.
    pub fn close_all<D: Disk + ?Sized>(&mut self, disk: &mut D) -> Result<(), StorageError> {
        for queue in self.queues.iter_mut().flatten() {
            queue.close_files(disk)?;
        }
        Ok(())
    }

    /// Number of queues.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether there is no queue.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// All queues, by index.
    pub fn iter(&self) -> impl Iterator<Item = &ConsumeQueue> {
        self.queues.iter().flatten()
    }

    /// The largest `commit_log_offset + size` of any queue: where dispatch
    /// resumes after a normal restart (6.9).
    pub fn max_physical_offset(&self) -> u64 {
        self.iter()
            .map(ConsumeQueue::max_physical_offset)
            .max()
            .unwrap_or(0)
    }

    /// Starts a pass of [`ConsumeQueue::flush`] over every queue (unless
    /// one is in progress) and goes on with it: see
    /// [`ConsumeQueueSet::continue_flush`].
    ///
    /// # Errors
    /// As [`ConsumeQueueSet::continue_flush`].
    pub fn flush_all<D: Disk + ?Sized>(&mut self, disk: &mut D) -> Result<usize, StorageError> {
        if self.pass_left == 0 {
            self.pass_left = self.queues.len();
        }
        self.continue_flush(disk)
    }

    /// Whether a flush pass has queues left to visit.
    pub fn flush_pass_in_progress(&self) -> bool {
        self.pass_left > 0
    }

    /// Goes on with the flush pass in progress, round-robin, until every
    /// queue was visited or the disk has
    /// [`CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX`] operations in flight (the
    /// rest of its ring stays free for commits and reads; the pass goes on
    /// at a later call, once some complete). Returns the operations
    /// submitted. A shard with more queues than that cap had visited only
    /// the first 512 per flush interval, so each queue waited several
    /// intervals for its turn, holding its entries in memory meanwhile.
    ///
    /// # Errors
    /// The first queue's flush error (the queues after it wait for the next
    /// call).
    pub fn continue_flush<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
    ) -> Result<usize, StorageError> {
        let count = self.queues.len();
        if count == 0 {
            self.pass_left = 0;
        }
        let mut submitted = 0;
        while self.pass_left > 0 {
            if disk.in_flight() >= CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX {
                return Ok(submitted);
            }
            let index = self.flush_cursor % count;
            self.flush_cursor = (index + 1) % count;
            self.pass_left -= 1;
            let Some(queue) = self.queues[index].as_mut() else {
                continue;
            };
            if shadowed_by_draining(&self.draining, queue) {
                continue;
            }
            submitted += queue.flush(disk)?;
        }
        Ok(submitted)
    }

    /// [`ConsumeQueue::flush`] of the queue at `index` if at least
    /// `min_dirty_bytes` of it are not written yet (and its files are not a
    /// deleted queue's still draining); returns the operations submitted.
    ///
    /// # Errors
    /// As [`ConsumeQueue::flush`].
    pub fn flush_early<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        index: usize,
        min_dirty_bytes: usize,
    ) -> Result<usize, StorageError> {
        let Some(Some(queue)) = self.queues.get_mut(index) else {
            return Ok(0);
        };
        if !queue.unwritten_reaches(min_dirty_bytes)
            || shadowed_by_draining(&self.draining, queue)
            || disk.in_flight() >= CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX
        {
            return Ok(0);
        }
        queue.flush(disk)
    }

    /// Routes a completion tagged [`crate::disk::OpTag::ConsumeQueue`] to its
    /// queue, live or draining; a draining queue's files go once their
    /// operations have completed (a disk error then is logged).
    pub fn on_completion<D: Disk + ?Sized>(&mut self, disk: &mut D, completion: DiskCompletion) {
        let index = (completion.op_id.seq() >> LOCAL_SEQ_BITS) as usize;
        if let Some(queue) = self.try_queue_at_mut(index) {
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
            return;
        }
        let Some(at) = self.draining.iter().position(|(i, _)| *i == index) else {
            if let Some(buf) = completion.buf {
                disk.recycle(buf);
            }
            return;
        };
        let queue = &mut self.draining[at].1;
        queue.on_completion(disk, completion);
        let gone = match queue.remove_from_disk(disk) {
            Ok(gone) => gone,
            Err(error) => {
                tracing::error!(topic = %queue.topic, queue_id = queue.queue_id, %error, "removing a deleted topic's consume queue files failed");
                queue.is_idle()
            }
        };
        if gone {
            let (index, queue) = self.draining.swap_remove(at);
            self.free.push(index);
            if let Err(error) = self.remove_topic_dir(disk, &queue.topic) {
                tracing::error!(topic = %queue.topic, %error, "removing a deleted topic's consume queue directory failed");
            }
        }
    }

    /// Whether no queue, live or draining, has an operation in flight.
    pub fn is_idle(&self) -> bool {
        self.draining.is_empty() && self.iter().all(ConsumeQueue::is_idle)
    }

    /// Whether every queue is written and fdatasynced.
    pub fn is_clean(&self) -> bool {
        self.iter().all(ConsumeQueue::is_clean)
    }

    /// Flush errors of all queues since the last call.
    pub fn take_errors(&mut self) -> Vec<StorageError> {
        self.queues
            .iter_mut()
            .flatten()
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
        for queue in self.queues.iter_mut().flatten() {
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
        for queue in self.queues.iter_mut().flatten() {
            removed += queue.delete_below_commit_log_offset(disk, commit_log_min_offset)?;
        }
        Ok(removed)
    }
}

/// Whether `queue`'s files are still a deleted queue's (one of `draining`
/// with its topic and queue id): it is not flushed until those are gone.
fn shadowed_by_draining(draining: &[(usize, ConsumeQueue)], queue: &ConsumeQueue) -> bool {
    draining
        .iter()
        .any(|(_, old)| old.queue_id == queue.queue_id && old.topic == queue.topic)
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
        assert!(set.iter().all(|q| q.synced_offset() == q.max_offset()));
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

    fn settle(disk: &mut SimDisk, set: &mut ConsumeQueueSet) {
        for _ in 0..1000 {
            set.flush_all(disk).unwrap();
            io_turn(disk, set);
            if set.is_idle() && set.is_clean() {
                return;
            }
        }
        panic!("the set did not settle");
    }

    #[test]
    fn a_flush_of_many_queues_leaves_the_disk_room_and_resumes_where_it_stopped() {
        let mut disk = SimDisk::new(SimConfig::new(4));
        let mut set = ConsumeQueueSet::new(Path::new("/store"));
        let queues = CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX as u32 + 200;
        for queue_id in 0..queues {
            set.append("T", queue_id, 0, entry(1_000 + u64::from(queue_id)))
                .unwrap();
        }
        set.flush_all(&mut disk).unwrap();
        let in_flight = disk.in_flight();
        assert!(
            (CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX..CONSUME_QUEUE_FLUSH_DISK_IN_FLIGHT_MAX + 4)
                .contains(&in_flight),
            "{in_flight} operations in flight after one flush"
        );
        assert!(!set.is_clean(), "the flush stopped short");
        assert!(set.flush_pass_in_progress());
        // The pass goes on as operations complete, within the same flush
        // interval: no second flush_all.
        for _ in 0..1000 {
            io_turn(&mut disk, &mut set);
            set.continue_flush(&mut disk).unwrap();
            if set.is_idle() && set.is_clean() {
                break;
            }
        }
        assert!(!set.flush_pass_in_progress());
        assert!(set.iter().all(|q| q.synced_offset() == q.max_offset()));
    }

    /// Three queues: A/0 and A/1 (3 entries each), B/0 (2 entries); every
    /// queue's CommitLog offsets ascend.
    fn three_queues() -> ConsumeQueueSet {
        let mut set = ConsumeQueueSet::new(Path::new("/store"));
        for i in 0..3 {
            set.append("A", 0, i, entry(1_000 + 100 * i)).unwrap();
            set.append("A", 1, i, entry(2_000 + 100 * i)).unwrap();
        }
        for i in 0..2 {
            set.append("B", 0, i, entry(3_000 + 100 * i)).unwrap();
        }
        set
    }

    fn paths_under(disk: &SimDisk, dir: &str) -> Vec<PathBuf> {
        let image = disk.snapshot();
        image
            .dirs
            .into_iter()
            .chain(image.files.into_keys())
            .filter(|p| p.starts_with(dir))
            .collect()
    }

    #[test]
    fn delete_topic_drops_its_queues_and_files_and_leaves_other_topics_alone() {
        let mut disk = SimDisk::new(SimConfig::new(21));
        let mut set = three_queues();
        settle(&mut disk, &mut set);
        assert!(!paths_under(&disk, "/store/consumequeue/A").is_empty());
        let b_files = paths_under(&disk, "/store/consumequeue/B");
        assert_eq!(set.delete_topic(&mut disk, "A").unwrap(), 2);
        assert!(set.get("A", 0).is_none() && set.get("A", 1).is_none());
        assert_eq!(
            paths_under(&disk, "/store/consumequeue/A"),
            Vec::<PathBuf>::new()
        );
        assert_eq!(paths_under(&disk, "/store/consumequeue/B"), b_files);
        assert_eq!(set.len(), 1);
        assert_eq!(set.iter().count(), 1);
        assert_eq!(set.get("B", 0).unwrap().entry(1), Some(entry(3_100)));
        assert_eq!(set.max_physical_offset(), entry(3_100).end_offset());
        assert_eq!(set.delete_topic(&mut disk, "A").unwrap(), 0, "already gone");
        // The topic starts again at queue offset 0, in a reused index.
        let at = set.index_or_create("A", 0).unwrap();
        assert!(at < 3, "index {at} is one of the freed ones");
        assert_eq!(set.queue_at(at).max_offset(), 0);
        set.queue_at_mut(at).append(0, entry(9_000)).unwrap();
        settle(&mut disk, &mut set);
        let loaded = ConsumeQueueSet::load_all(
            &mut SimDisk::from_image(disk.durable_image(), SimConfig::new(22)),
            Path::new("/store"),
            LastStop::Clean,
        )
        .unwrap();
        assert!(
            loaded.get("A", 1).is_none(),
            "a reload does not bring it back"
        );
        assert_eq!(
            loaded.get("A", 0).unwrap().entries(0, 10),
            vec![entry(9_000)]
        );
        assert_eq!(loaded.get("B", 0).unwrap().max_offset(), 2);
    }

    #[test]
    fn queue_ids_far_apart_are_found_without_a_vector_that_large() {
        let mut disk = SimDisk::new(SimConfig::new(25));
        let mut set = ConsumeQueueSet::new(Path::new("/store"));
        let ids = [0, 7, DENSE_QUEUE_ID_END - 1, DENSE_QUEUE_ID_END, u32::MAX];
        let indices: Vec<usize> = ids
            .iter()
            .map(|&id| set.index_or_create("T", id).unwrap())
            .collect();
        // Found again through either path, last topic or not.
        set.index_or_create("U", 0).unwrap();
        for (&id, &index) in ids.iter().zip(&indices) {
            assert_eq!(set.index_or_create("T", id).unwrap(), index, "id {id}");
            assert_eq!(set.get("T", id).unwrap().queue_id(), id);
        }
        assert!(set.get("T", 8).is_none());
        assert!(set.get("T", DENSE_QUEUE_ID_END + 1).is_none());
        let slot = set.by_topic["T"];
        assert_eq!(
            set.topic_at(slot).dense.len(),
            DENSE_QUEUE_ID_END as usize,
            "ids from DENSE_QUEUE_ID_END are kept in the map"
        );
        assert_eq!(set.delete_topic(&mut disk, "T").unwrap(), ids.len());
        assert!(set.get("T", 7).is_none());
        // The slot goes to the next new topic.
        set.index_or_create("V", 1).unwrap();
        assert_eq!(set.by_topic["V"], slot);
        assert_eq!(set.get("U", 0).unwrap().topic(), "U");
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn a_stale_last_found_index_never_reaches_another_queue() {
        let mut disk = SimDisk::new(SimConfig::new(23));
        let mut set = three_queues();
        let a0 = set.index_or_create("A", 0).unwrap();
        set.delete_topic(&mut disk, "A").unwrap();
        assert!(set.try_queue_at(a0).is_none());
        assert!(a0 < set.index_bound());
        // Freed indices go to new queues, each found by its own name.
        let c = set.index_or_create("C", 5).unwrap();
        let a = set.index_or_create("A", 0).unwrap();
        assert_ne!(c, a);
        assert!(c < 3 && a < 3, "freed indices are reused");
        assert_eq!(
            (set.queue_at(c).topic(), set.queue_at(c).queue_id()),
            ("C", 5)
        );
        assert_eq!(
            (set.queue_at(a).topic(), set.queue_at(a).queue_id()),
            ("A", 0)
        );
        assert_eq!(set.queue_at(a).max_offset(), 0);
        assert_eq!(set.index_or_create("C", 5).unwrap(), c);
        assert_eq!(set.len(), 3);
    }

    #[test]
    fn operations_in_flight_of_a_deleted_queue_complete_before_its_files_go() {
        let mut disk = SimDisk::new(SimConfig::new(24));
        let mut set = three_queues();
        assert!(set.flush_all(&mut disk).unwrap() > 0);
        assert_eq!(set.delete_topic(&mut disk, "A").unwrap(), 2);
        assert_eq!(set.draining.len(), 2, "A's writes are still in flight");
        // Re-created meanwhile: kept in memory, not flushed while the old
        // queue's files are still there.
        let at = set.index_or_create("A", 0).unwrap();
        set.queue_at_mut(at).append(0, entry(9_000)).unwrap();
        set.append("A", 2, 0, entry(9_100)).unwrap();
        settle(&mut disk, &mut set);
        assert!(set.draining.is_empty());
        assert_eq!(set.free.len(), 2, "the old indices are free once drained");
        let image = disk.durable_image();
        let a0 = Path::new("/store/consumequeue/A/0");
        let a0_files: Vec<_> = image.files.keys().filter(|p| p.starts_with(a0)).collect();
        assert_eq!(a0_files.len(), 1);
        assert_eq!(
            image.files[a0_files[0]][..20],
            entry(9_000).encode(),
            "the new queue's file holds only its own entry"
        );
        assert!(
            !image.dirs.contains(Path::new("/store/consumequeue/A/1")),
            "the old queue's directory is gone"
        );
        // B's operations went on as before.
        assert!(set.get("B", 0).unwrap().is_clean());
        let loaded = ConsumeQueueSet::load_all(
            &mut SimDisk::from_image(image, SimConfig::new(25)),
            Path::new("/store"),
            LastStop::Clean,
        )
        .unwrap();
        assert_eq!(loaded.len(), 3);
        assert_eq!(
            loaded.get("A", 0).unwrap().entries(0, 10),
            vec![entry(9_000)]
        );
        assert!(loaded.get("A", 1).is_none());
        assert_eq!(loaded.get("B", 0).unwrap().max_offset(), 2);
    }

    #[test]
    fn a_durability_round_does_not_wait_for_a_deleted_queue() {
        let mut disk = SimDisk::new(SimConfig::new(26));
        let mut set = three_queues();
        assert_eq!(set.advance_durable_point(1_000), 0);
        // Only B gets synced; A is deleted with nothing written.
        set.get_mut("B", 0).unwrap().flush(&mut disk).unwrap();
        for _ in 0..100 {
            io_turn(&mut disk, &mut set);
        }
        assert!(set.get("B", 0).unwrap().is_clean());
        assert_eq!(set.advance_durable_point(1_500), 0, "A holds the round");
        set.delete_topic(&mut disk, "A").unwrap();
        assert_eq!(set.advance_durable_point(2_000), 2_000);
        // A queue created in a freed index is a target of later rounds.
        set.append("C", 0, 0, entry(9_000)).unwrap();
        assert_eq!(set.advance_durable_point(4_000), 2_000);
        settle(&mut disk, &mut set);
        assert_eq!(set.advance_durable_point(5_000), 5_000);
    }
}
