//! Lookups: queue offsets, reads of records by CommitLog offset, pulls of a
//! queue's messages (PULL_MESSAGE) and index queries by key. Everything is
//! clamped to the acknowledgeable CommitLog position.

use ringmq_protocol::message::peek_total_size;

use super::{
    FoundRecord, GetMessageStatus, GetMessagesResult, PullRead, Pulled, RecordRead, Store,
};
use crate::commit_log::{ShipPipe, Shipment, split_shard_offset};
use crate::consume_queue::{ConsumeQueue, CqEntry};
use crate::disk::Disk;
use crate::error::StorageError;
use crate::index_file::IndexQueryResult;
use crate::limits::{
    GET_MESSAGES_BYTES_MAX, GET_MESSAGES_COUNT_MAX, GET_MESSAGES_READ_SPAN_MAX,
    GET_MESSAGES_SCAN_ENTRIES_MAX, RECORD_READ_SPAN_BYTES, RECORD_SIZE_MAX,
};

impl<D: Disk> Store<D> {
    /// The queue's min offset (0 if it does not exist).
    pub fn queue_min_offset(&self, topic: &str, queue_id: u32) -> u64 {
        self.queues
            .get(topic, queue_id)
            .map_or(0, |q| q.min_offset())
    }

    /// The queue's max offset counting only acknowledgeable records (0 if it
    /// does not exist).
    pub fn queue_max_offset(&self, topic: &str, queue_id: u32) -> u64 {
        self.queues
            .get(topic, queue_id)
            .map_or(0, |queue| self.visible_max_offset(queue))
    }

    /// [`Store::queue_max_offset`] of `queue`.
    fn visible_max_offset(&self, queue: &ConsumeQueue) -> u64 {
        let visible_end = self.commit_log.max_offset();
        let mut max = queue.max_offset();
        // Only the newest entries can be beyond the acknowledgeable position.
        while max > queue.min_offset() {
            match queue.entry(max - 1) {
                Some(entry) if entry.end_offset() > visible_end => max -= 1,
                _ => break,
            }
        }
        max
    }

    /// QUERY_CONSUME_QUEUE: up to `max` entries of the queue from queue
    /// offset `from`, acknowledgeable records only (as
    /// [`Store::queue_max_offset`] counts them); empty when `from` is outside
    /// `[min, max)`, `None` when the queue does not exist.
    pub fn queue_entries(
        &self,
        topic: &str,
        queue_id: u32,
        from: u64,
        max: usize,
    ) -> Option<Vec<CqEntry>> {
        let queue = self.queues.get(topic, queue_id)?;
        let end = self.queue_max_offset(topic, queue_id);
        let count = end.saturating_sub(from).min(max as u64) as usize;
        Some(queue.entries(from, count))
    }

    /// QUERY_MESSAGE: CommitLog offsets of acknowledgeable records indexed
    /// under `topic#key` and stored within `[begin_ms, end_ms]`, newest first
    /// (hash collisions possible: the caller re-checks keys).
    pub fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> IndexQueryResult {
        let mut result = self.index.query(topic, key, max_num, begin_ms, end_ms);
        let visible_end = self.commit_log.max_offset();
        result.phy_offsets.retain(|offset| *offset < visible_end);
        result
    }

    /// How many of a pull's `picked` records, from the first, one read
    /// takes, and its length (None: each is read alone). Records not in the
    /// tail cache are read together with the queue's next ones in the same
    /// segment, up to [`GET_MESSAGES_READ_SPAN_MAX`] bytes from the first
    /// (other queues' records between them included): a queue's records
    /// lie close together in the CommitLog, and on the disks measured here
    /// one read of 64 KiB takes about as long as one of 4 KiB, so a pull
    /// of 32 records of a consumer far behind costs the shard one wait for
    /// the disk instead of 32.
    fn read_span(&self, picked: &[(u64, CqEntry)]) -> (usize, Option<usize>) {
        let first = picked[0].1;
        if self
            .commit_log
            .is_cached(first.commit_log_offset, first.size as usize)
        {
            return (1, None);
        }
        let start = first.commit_log_offset;
        let (_, local) = split_shard_offset(start);
        let segment_end = start - local + self.commit_log.segment_end(local);
        let limit = segment_end.min(start + GET_MESSAGES_READ_SPAN_MAX as u64);
        let mut end = start + u64::from(first.size);
        let mut count = 1;
        for (_, entry) in &picked[1..] {
            let entry_end = entry.commit_log_offset + u64::from(entry.size);
            if entry.commit_log_offset < end || entry_end > limit {
                break;
            }
            end = entry_end;
            count += 1;
        }
        if count == 1 {
            (1, None)
        } else {
            (count, Some((end - start) as usize))
        }
    }

    /// The tickets of [`Pulled::Reading`] whose reads are done since the
    /// last call (their pulls may be executed again).
    pub fn take_span_reads(&mut self, out: &mut Vec<u64>) {
        self.commit_log.take_span_reads(out);
    }

    /// Starts shipping the acknowledgeable `len` CommitLog bytes at
    /// outside-visible `offset` (within one segment) into `pipe` with
    /// splice, no copy through this process (see
    /// [`CommitLog::start_ship`](crate::commit_log::CommitLog::start_ship));
    /// the ticket comes back from [`Store::take_shipped`]. None when the
    /// range is not acknowledgeable or no longer kept.
    ///
    /// # Errors
    /// As `CommitLog::start_ship`.
    pub fn start_ship(
        &mut self,
        offset: u64,
        len: usize,
        pipe: &std::sync::Arc<ShipPipe>,
    ) -> Result<Option<u64>, StorageError> {
        self.commit_log
            .start_ship(&mut self.disk, offset, len, pipe)
    }

    /// The ships done since the last call: where each range is in its pipe,
    /// or its ticket and the error (the pipe is then not to be used again).
    pub fn take_shipped(&mut self, out: &mut Vec<Result<Shipment, (u64, StorageError)>>) {
        self.commit_log.take_shipped(out);
    }

    /// The stored record at outside-visible `commit_log_offset`, if it is
    /// acknowledgeable and still kept (VIEW_MESSAGE_BY_ID).
    ///
    /// # Errors
    /// Disk errors; [`StorageError::InvalidArgument`] for another shard's
    /// offset.
    pub fn read_record(&mut self, commit_log_offset: u64) -> Result<Option<Vec<u8>>, StorageError> {
        let Some(head) = self.commit_log.read(&mut self.disk, commit_log_offset, 4)? else {
            return Ok(None);
        };
        let Some(size) = record_size(&head) else {
            return Ok(None);
        };
        self.commit_log
            .read(&mut self.disk, commit_log_offset, size)
    }

    /// [`Store::read_record`] for a request on the shard's thread: from
    /// memory at once; otherwise, with [`PullRead::Background`], the read
    /// starts in the background ([`RecordRead::Reading`]: ask again with
    /// [`PullRead::AfterRead`] once [`Store::take_span_reads`] gives the
    /// ticket); otherwise read synchronously. The background read takes the
    /// record's neighbours too (up to [`RECORD_READ_SPAN_BYTES`] from it), so
    /// that a consumer sending back a run of messages finds the next ones
    /// in memory.
    ///
    /// # Errors
    /// As [`Store::read_record`].
    pub fn record_at(
        &mut self,
        commit_log_offset: u64,
        read: PullRead,
    ) -> Result<RecordRead, StorageError> {
        // A head no record can have is answered at once, as read_record does.
        let in_memory = self
            .commit_log
            .cached(commit_log_offset, 4)
            .is_some_and(|head| {
                record_size(head)
                    .is_none_or(|size| self.commit_log.is_cached(commit_log_offset, size))
            });
        if in_memory || read != PullRead::Background {
            return self.read_record(commit_log_offset).map(RecordRead::Ready);
        }
        Ok(
            match self.commit_log.start_record_read(
                &mut self.disk,
                commit_log_offset,
                RECORD_READ_SPAN_BYTES,
            )? {
                Some(ticket) => RecordRead::Reading(ticket),
                None => RecordRead::Ready(None),
            },
        )
    }

    /// Messages of one queue from `queue_offset` (PULL_MESSAGE), as
    /// RocketMQ's `DefaultMessageStore.getMessage`: at most `max_count`
    /// records and, after the first, at most `max_bytes`; `tag_filter` keeps
    /// entries whose `(i32) tags_code` is in the set (None: all).
    ///
    /// # Errors
    /// Disk errors reading older records.
    pub fn get_messages(
        &mut self,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        max_count: usize,
        max_bytes: usize,
        tag_filter: Option<&[i32]>,
    ) -> Result<GetMessagesResult, StorageError> {
        let pulled = self.pull_messages(
            topic,
            queue_id,
            queue_offset,
            max_count,
            max_bytes,
            tag_filter,
            PullRead::Sync,
        )?;
        match pulled {
            Pulled::Ready(result) => Ok(result),
            Pulled::Reading(_) => {
                unreachable!("a synchronous pull reads no span in the background")
            }
        }
    }

    /// As [`Store::get_messages`], reading records not in memory as `read`
    /// says: a pull for a consumer far behind then does not hold the
    /// shard on the disk (see [`PullRead`]).
    ///
    /// # Errors
    /// Disk errors reading or submitting reads of older records.
    #[allow(clippy::too_many_arguments)]
    pub fn pull_messages(
        &mut self,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        max_count: usize,
        max_bytes: usize,
        tag_filter: Option<&[i32]>,
        read: PullRead,
    ) -> Result<Pulled, StorageError> {
        let mut result = GetMessagesResult {
            status: GetMessageStatus::NoMatchedLogicQueue,
            next_begin_offset: 0,
            min_offset: 0,
            max_offset: 0,
            body: Vec::new(),
            records: Vec::new(),
        };
        let Some(queue) = self.queues.get(topic, queue_id) else {
            return Ok(Pulled::Ready(result));
        };
        let min = queue.min_offset();
        let max = self.visible_max_offset(queue);
        result.min_offset = min;
        result.max_offset = max;
        if max == 0 {
            result.status = GetMessageStatus::NoMessageInQueue;
            return Ok(Pulled::Ready(result));
        }
        if queue_offset < min {
            result.status = GetMessageStatus::OffsetTooSmall;
            result.next_begin_offset = min;
            return Ok(Pulled::Ready(result));
        }
        if queue_offset == max {
            result.status = GetMessageStatus::OffsetOverflowOne;
            result.next_begin_offset = queue_offset;
            return Ok(Pulled::Ready(result));
        }
        if queue_offset > max {
            result.status = GetMessageStatus::OffsetOverflowBadly;
            result.next_begin_offset = if min == 0 { min } else { max };
            return Ok(Pulled::Ready(result));
        }
        let max_count = max_count.clamp(1, GET_MESSAGES_COUNT_MAX);
        let max_bytes = max_bytes.min(GET_MESSAGES_BYTES_MAX);
        let scan =
            (max - queue_offset).min(GET_MESSAGES_SCAN_ENTRIES_MAX.max(max_count) as u64) as usize;
        let log_min = self.commit_log.min_offset();
        let mut status = GetMessageStatus::NoMatchedMessage;
        let mut next = queue_offset;
        // Which records the pull takes follows from the queue alone (sizes
        // and tags); they are read afterwards, neighbours together. Entries
        // are decoded only up to the last one taken.
        let mut picked = Vec::new();
        let mut picked_bytes = 0usize;
        for entry in queue.iter_entries(queue_offset, scan) {
            if picked.len() >= max_count
                || (!picked.is_empty() && picked_bytes + entry.size as usize > max_bytes)
            {
                break;
            }
            let this_offset = next;
            next += 1;
            if entry.commit_log_offset < log_min {
                status = GetMessageStatus::MessageWasRemoving;
                continue;
            }
            if let Some(codes) = tag_filter
                && !codes.contains(&(entry.tags_code as i32))
            {
                continue;
            }
            picked_bytes += entry.size as usize;
            picked.push((this_offset, entry));
        }
        result.body.reserve(picked_bytes);
        let mut at = 0;
        while at < picked.len() {
            let (count, span) = self.read_span(&picked[at..]);
            let first = picked[at].1.commit_log_offset;
            let len = span.unwrap_or(picked[at].1.size as usize);
            if read != PullRead::Sync && !self.commit_log.is_cached(first, len) {
                if !result.records.is_empty() {
                    // The consumer's next pull starts here.
                    next = picked[at].0;
                    break;
                }
                if read == PullRead::Background
                    && let Some(ticket) = self.commit_log.start_pull_read(
                        &mut self.disk,
                        first,
                        picked[at].1.size as usize,
                    )?
                {
                    return Ok(Pulled::Reading(ticket));
                }
            }
            // The records' bytes go straight from the cache (or one read)
            // into the answer; a span that cannot be read is tried record by
            // record.
            let records = &picked[at..at + count];
            if let Some(bytes) = self.commit_log.cached(first, len) {
                push_records(&mut result, records, first, bytes);
            } else if let Some(bytes) = self.commit_log.read(&mut self.disk, first, len)? {
                push_records(&mut result, records, first, &bytes);
            } else {
                for (this_offset, entry) in records {
                    let size = entry.size as usize;
                    match self
                        .commit_log
                        .read(&mut self.disk, entry.commit_log_offset, size)?
                    {
                        Some(record) => push_record(&mut result, *this_offset, entry, &record),
                        None => status = GetMessageStatus::MessageWasRemoving,
                    }
                }
            }
            at += count;
        }
        result.status = if result.records.is_empty() {
            status
        } else {
            GetMessageStatus::Found
        };
        result.next_begin_offset = next;
        if read != PullRead::Sync
            && let Some(last) = result.records.last()
        {
            // A consumer catching up: its next pulls' records are read now.
            let end = last.commit_log_offset + last.range.len() as u64;
            if let Err(error) = self.commit_log.read_ahead(&mut self.disk, end) {
                tracing::debug!(%error, "reading ahead of a pull failed");
            }
        }
        Ok(Pulled::Ready(result))
    }
}

/// Appends `records`, which lie in `bytes` read from outside-visible
/// CommitLog offset `first`, to a pull's answer.
fn push_records(
    result: &mut GetMessagesResult,
    records: &[(u64, CqEntry)],
    first: u64,
    bytes: &[u8],
) {
    for (queue_offset, entry) in records {
        let from = (entry.commit_log_offset - first) as usize;
        push_record(
            result,
            *queue_offset,
            entry,
            &bytes[from..from + entry.size as usize],
        );
    }
}

/// Appends `record`, the one `entry` at `queue_offset` names, to a pull's
/// answer.
fn push_record(result: &mut GetMessagesResult, queue_offset: u64, entry: &CqEntry, record: &[u8]) {
    let start = result.body.len();
    result.body.extend_from_slice(record);
    result.records.push(FoundRecord {
        queue_offset,
        commit_log_offset: entry.commit_log_offset,
        range: start..result.body.len(),
    });
}

/// The TOTALSIZE at the head of a record, if a record can have it: bytes
/// at an offset that is no record's start (an id or offset a client made
/// up, a BLANK's) may say anything, negative or far past a record's size.
fn record_size(head: &[u8]) -> Option<usize> {
    let size = peek_total_size(head).ok()?;
    usize::try_from(size)
        .ok()
        .filter(|size| (1..=RECORD_SIZE_MAX).contains(size))
}
