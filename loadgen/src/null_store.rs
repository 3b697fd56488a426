//! The null broker's memory: per (topic, queue) the next queue offset and,
//! when asked to retain messages, the last few encoded records, so pulls
//! (and so `consume` and `e2e`) can be tested without a real broker.
//!
//! ```text
//! topic -> [QueueLog; queue_id]
//! QueueLog { base_offset, records: VecDeque<record bytes>, next_offset }
//!            ^ offset of records[0]                         ^ next to assign
//! ```
//!
//! # Invariants
//!
//! - `base_offset + records.len() == next_offset` when records are retained
//!   (`base_offset == next_offset` when not).
//! - At most `retain` records per queue; the oldest are dropped first.
//! - Queue ids above [`QUEUE_ID_MAX`] are refused, so a peer cannot make
//!   the store allocate without bound.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use ringmq_protocol::message::RecordSpec;

/// The largest queue id the null broker accepts.
pub const QUEUE_ID_MAX: i32 = 1023;
/// The most topics it tracks; sends to more are refused.
pub const TOPIC_COUNT_MAX: usize = 4096;

/// One message of a send, borrowed from the request.
#[derive(Debug, Clone, Copy)]
pub struct IncomingMessage<'a> {
    /// Body.
    pub body: &'a [u8],
    /// Properties string.
    pub properties: &'a [u8],
    /// User flag.
    pub flag: i32,
}

/// Where a send went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Queue offset of the first message.
    pub queue_offset: i64,
    /// A made-up CommitLog offset for the message id.
    pub commit_log_offset: i64,
}

/// What a pull finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// Concatenated records (a pull body), possibly empty.
    pub body: Vec<u8>,
    /// Records in `body`.
    pub record_count: usize,
    /// Offset to pull from next.
    pub next_begin_offset: i64,
    /// Oldest retained offset.
    pub min_offset: i64,
    /// Next offset to be written.
    pub max_offset: i64,
    /// The requested offset is older than anything retained.
    pub offset_moved: bool,
}

#[derive(Debug, Default)]
struct QueueLog {
    base_offset: i64,
    next_offset: i64,
    records: VecDeque<Vec<u8>>,
}

/// Why a send or pull was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Queue id outside `0..=QUEUE_ID_MAX`.
    #[error("queue id {0} is out of range")]
    QueueId(i32),
    /// Too many topics.
    #[error("too many topics")]
    TopicCount,
}

/// The store; one per null broker, shared by its connections.
#[derive(Debug)]
pub struct Store {
    retain: usize,
    store_host: SocketAddr,
    commit_log_offset: i64,
    topics: HashMap<String, Vec<QueueLog>>,
}

impl Store {
    /// A store keeping the last `retain` records per queue (0: none).
    pub fn new(retain: usize, store_host: SocketAddr) -> Self {
        Self {
            retain,
            store_host,
            commit_log_offset: 0,
            topics: HashMap::new(),
        }
    }

    fn queue(&mut self, topic: &str, queue_id: i32) -> Result<&mut QueueLog, StoreError> {
        if !(0..=QUEUE_ID_MAX).contains(&queue_id) {
            return Err(StoreError::QueueId(queue_id));
        }
        if !self.topics.contains_key(topic) {
            if self.topics.len() >= TOPIC_COUNT_MAX {
                return Err(StoreError::TopicCount);
            }
            self.topics.insert(topic.to_string(), Vec::new());
        }
        let queues = self
            .topics
            .get_mut(topic)
            .expect("invariant: inserted above");
        let index = queue_id as usize;
        if queues.len() <= index {
            queues.resize_with(index + 1, QueueLog::default);
        }
        Ok(&mut queues[index])
    }

    /// Appends `messages` to a queue; records are kept only when retaining.
    ///
    /// # Errors
    ///
    /// [`StoreError`] for a bad queue id or too many topics.
    pub fn append(
        &mut self,
        topic: &str,
        queue_id: i32,
        born_timestamp_ms: i64,
        born_host: SocketAddr,
        messages: &[IncomingMessage<'_>],
    ) -> Result<Appended, StoreError> {
        let (retain, store_host) = (self.retain, self.store_host);
        let first_commit_log_offset = self.commit_log_offset;
        let store_timestamp_ms = now_ms();
        let mut commit_log_offset = first_commit_log_offset;
        let queue = self.queue(topic, queue_id)?;
        let first_offset = queue.next_offset;
        for message in messages {
            if retain > 0 {
                let spec = RecordSpec {
                    topic,
                    body: message.body,
                    properties: message.properties,
                    queue_id,
                    flag: message.flag,
                    queue_offset: queue.next_offset,
                    commit_log_offset,
                    born_timestamp_ms,
                    born_host,
                    store_timestamp_ms,
                    store_host,
                    ..RecordSpec::default()
                };
                let mut record = Vec::with_capacity(spec.encoded_len());
                if spec.encode_append(&mut record).is_ok() {
                    commit_log_offset += record.len() as i64;
                    queue.records.push_back(record);
                }
                while queue.records.len() > retain {
                    queue.records.pop_front();
                    queue.base_offset += 1;
                }
            } else {
                commit_log_offset += (message.body.len() + message.properties.len()) as i64;
                queue.base_offset += 1;
            }
            queue.next_offset += 1;
        }
        assert_eq!(
            queue.base_offset + queue.records.len() as i64,
            queue.next_offset,
            "queue log out of step"
        );
        self.commit_log_offset = commit_log_offset;
        Ok(Appended {
            queue_offset: first_offset,
            commit_log_offset: first_commit_log_offset,
        })
    }

    /// Reads up to `max_count` records from `queue_offset`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] for a bad queue id or too many topics.
    pub fn pull(
        &mut self,
        topic: &str,
        queue_id: i32,
        queue_offset: i64,
        max_count: usize,
    ) -> Result<Pulled, StoreError> {
        let queue = self.queue(topic, queue_id)?;
        let (min_offset, max_offset) = (queue.base_offset, queue.next_offset);
        let mut pulled = Pulled {
            body: Vec::new(),
            record_count: 0,
            next_begin_offset: queue_offset.clamp(min_offset, max_offset),
            min_offset,
            max_offset,
            offset_moved: queue_offset < min_offset || queue_offset > max_offset,
        };
        if pulled.offset_moved {
            return Ok(pulled);
        }
        let skip = (queue_offset - min_offset) as usize;
        for record in queue.records.iter().skip(skip).take(max_count) {
            pulled.body.extend_from_slice(record);
            pulled.record_count += 1;
        }
        pulled.next_begin_offset = queue_offset + pulled.record_count as i64;
        Ok(pulled)
    }

    /// The next offset of a queue (GET_MAX_OFFSET).
    ///
    /// # Errors
    ///
    /// [`StoreError`] for a bad queue id or too many topics.
    pub fn max_offset(&mut self, topic: &str, queue_id: i32) -> Result<i64, StoreError> {
        Ok(self.queue(topic, queue_id)?.next_offset)
    }

    /// The oldest retained offset of a queue (GET_MIN_OFFSET).
    ///
    /// # Errors
    ///
    /// [`StoreError`] for a bad queue id or too many topics.
    pub fn min_offset(&mut self, topic: &str, queue_id: i32) -> Result<i64, StoreError> {
        Ok(self.queue(topic, queue_id)?.base_offset)
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use ringmq_protocol::message::{CrcCheck, iter_pull_body};

    use super::*;

    fn host() -> SocketAddr {
        "127.0.0.1:10911".parse().unwrap()
    }

    fn message(body: &[u8]) -> IncomingMessage<'_> {
        IncomingMessage {
            body,
            properties: b"WAIT\x01true\x02",
            flag: 0,
        }
    }

    #[test]
    fn pull_returns_retained_records_in_order() {
        let mut store = Store::new(10, host());
        store
            .append("t", 1, 1_000, host(), &[message(b"a"), message(b"b")])
            .unwrap();
        let appended = store
            .append("t", 1, 2_000, host(), &[message(b"c")])
            .unwrap();
        assert_eq!(appended.queue_offset, 2);
        let pulled = store.pull("t", 1, 1, 32).unwrap();
        assert_eq!(pulled.record_count, 2);
        assert_eq!(pulled.next_begin_offset, 3);
        let records: Vec<_> = iter_pull_body(&pulled.body, CrcCheck::Verify)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(records[0].body(), b"b");
        assert_eq!(records[0].queue_offset(), 1);
        assert_eq!(records[1].born_timestamp_ms(), 2_000);
    }

    #[test]
    fn old_records_are_dropped_beyond_the_retain_limit() {
        let mut store = Store::new(2, host());
        for body in [b"1", b"2", b"3"] {
            store.append("t", 0, 0, host(), &[message(body)]).unwrap();
        }
        assert_eq!(store.min_offset("t", 0).unwrap(), 1);
        assert_eq!(store.max_offset("t", 0).unwrap(), 3);
        let moved = store.pull("t", 0, 0, 32).unwrap();
        assert!(moved.offset_moved);
        assert_eq!(moved.next_begin_offset, 1);
        assert_eq!(store.pull("t", 0, 3, 32).unwrap().record_count, 0);
    }

    #[test]
    fn without_retention_offsets_still_advance() {
        let mut store = Store::new(0, host());
        store
            .append("t", 0, 0, host(), &[message(b"1"), message(b"2")])
            .unwrap();
        assert_eq!(store.max_offset("t", 0).unwrap(), 2);
        assert_eq!(store.min_offset("t", 0).unwrap(), 2);
    }

    #[test]
    fn queue_ids_out_of_range_are_refused() {
        let mut store = Store::new(0, host());
        assert_eq!(store.max_offset("t", -1), Err(StoreError::QueueId(-1)));
        assert_eq!(
            store.max_offset("t", QUEUE_ID_MAX + 1),
            Err(StoreError::QueueId(1024))
        );
    }
}
