//! What the store's callers hand in and get back: messages to append,
//! tickets and acks, pull results and what `open` found.

use std::net::SocketAddr;

use crate::commit_log::RecoveryReport;

/// One message to append; the store fills in queue offset, CommitLog
/// offset, store timestamp and store host.
#[derive(Clone, Copy, Debug)]
pub struct AppendMessage<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Queue id (must be owned by this shard; the broker routes).
    pub queue_id: u32,
    /// Body as stored.
    pub body: &'a [u8],
    /// Properties string (TAGS, KEYS, UNIQ_KEY ... already added).
    pub properties: &'a [u8],
    /// User flag.
    pub flag: i32,
    /// SYSFLAG.
    pub sys_flag: i32,
    /// Producer's timestamp.
    pub born_timestamp_ms: i64,
    /// Producer's address.
    pub born_host: SocketAddr,
    /// RECONSUMETIMES.
    pub reconsume_times: i32,
    /// PREPAREDTRANSACTIONOFFSET.
    pub prepared_transaction_offset: i64,
}

/// What an accepted append was assigned (answer the producer on its ack).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendTicket {
    /// The ack that will carry this id.
    pub id: u64,
    /// Outside-visible CommitLog offset of the (first) record.
    pub commit_log_offset: u64,
    /// Queue offset of the (first) record (0 for records not dispatched,
    /// e.g. transaction half messages).
    pub queue_offset: u64,
    /// Records appended (1, or the batch size).
    pub message_count: u32,
    /// Bytes appended.
    pub wrote_bytes: u32,
    /// STORETIMESTAMP written.
    pub store_timestamp_ms: i64,
    /// For a batch: every record's outside-visible offset (empty otherwise).
    pub batch_commit_log_offsets: Vec<u64>,
}

/// The outcome of an append, reported by [`Store::poll`](super::Store::poll).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AckStatus {
    /// Stored as the flush mode promises.
    Ok,
    /// SYNC_FLUSH: not durable within the timeout; stored nonetheless.
    FlushTimeout,
    /// A disk write failed; the record may or may not survive.
    Failed(String),
}

/// An acknowledgement of one [`AppendTicket`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendAck {
    /// The ticket's id.
    pub id: u64,
    /// The outcome.
    pub status: AckStatus,
    /// The ticket's (first) outside-visible CommitLog offset.
    pub commit_log_offset: u64,
    /// The ticket's (first) queue offset.
    pub queue_offset: u64,
}

/// RocketMQ's `GetMessageStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetMessageStatus {
    /// Messages returned.
    Found,
    /// Entries were read but none matched the tag filter.
    NoMatchedMessage,
    /// The CommitLog data of the entries is gone (retention).
    MessageWasRemoving,
    /// Offset below the queue's min offset.
    OffsetTooSmall,
    /// Offset equals the max offset (nothing new yet).
    OffsetOverflowOne,
    /// Offset beyond the max offset.
    OffsetOverflowBadly,
    /// The queue exists but has no messages.
    NoMessageInQueue,
    /// The queue does not exist.
    NoMatchedLogicQueue,
}

/// One record of a [`GetMessagesResult`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundRecord {
    /// Its queue offset.
    pub queue_offset: u64,
    /// Its outside-visible CommitLog offset.
    pub commit_log_offset: u64,
    /// Its bytes in [`GetMessagesResult::body`].
    pub range: std::ops::Range<usize>,
}

/// The answer to [`Store::get_messages`](super::Store::get_messages) (a PULL_MESSAGE's data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetMessagesResult {
    /// The status.
    pub status: GetMessageStatus,
    /// Where the consumer continues.
    pub next_begin_offset: u64,
    /// The queue's min offset.
    pub min_offset: u64,
    /// The queue's max offset (visible: acknowledgeable records only).
    pub max_offset: u64,
    /// Stored records, concatenated (a pull body).
    pub body: Vec<u8>,
    /// Each record's place in `body`.
    pub records: Vec<FoundRecord>,
}

/// How [`Store::pull_messages`](super::Store::pull_messages) reads records
/// that are not in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullRead {
    /// Synchronously, all of them (as `get_messages`).
    Sync,
    /// The first ones in the background ([`Pulled::Reading`]); later ones
    /// not in memory end the answer (the consumer's next pull gets them).
    Background,
    /// As `Background`, but the first ones synchronously: a pull executed
    /// again after its background read, whose span was evicted or came
    /// short, still gets an answer.
    AfterRead,
}

/// What [`Store::pull_messages`](super::Store::pull_messages) has now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pulled {
    /// The answer.
    Ready(GetMessagesResult),
    /// Its first records are being read: execute the pull again (with
    /// [`PullRead::AfterRead`]) once [`Store::take_span_reads`](super::Store::take_span_reads)
    /// gives this ticket.
    Reading(u64),
}

/// What [`Store::record_at`](super::Store::record_at) has now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordRead {
    /// The record (None: not acknowledgeable, not kept, or not a record).
    Ready(Option<Vec<u8>>),
    /// It is being read: ask again (with [`PullRead::AfterRead`]) once
    /// [`Store::take_span_reads`](super::Store::take_span_reads) gives this
    /// ticket.
    Reading(u64),
}

/// What `open` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenReport {
    /// Whether the abort file was present (abnormal recovery).
    pub abnormal: bool,
    /// Whether a valid checkpoint was read.
    pub checkpoint_valid: bool,
    /// The CommitLog recovery.
    pub recovery: RecoveryReport,
    /// Records re-dispatched into ConsumeQueues.
    pub redispatched: u64,
    /// Whether the ConsumeQueues and the index were rebuilt from the whole
    /// CommitLog (an abnormal stop without usable durable points, or kept
    /// files that disagreed with the CommitLog).
    pub derived_rebuilt: bool,
}
