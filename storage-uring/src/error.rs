//! Errors of the store: one enum, [`StorageError`], for the CommitLog,
//! checkpoint, recovery and the [`crate::store`] API.
//!
//! Variants carry what the broker needs to pick a RocketMQ response code
//! (retriable or not) and what a person needs to debug (path, file offset,
//! operation, the kept cause).
//!
//! # Invariants
//! - A disk failure keeps its [`DiskError`] (and through it the errno).
//! - [`StorageError::DiskFull`], [`StorageError::NotWritable`] and
//!   [`StorageError::Busy`] reject a write *before* anything is stored: the
//!   producer may retry.

use std::path::PathBuf;

use crate::disk::DiskError;

/// An error of the store.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A disk operation failed.
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// A file holds bytes that cannot be what the store wrote (not a torn
    /// tail: those are truncated silently by recovery).
    #[error("corrupt {path} at byte {file_offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset in the file of the first bad byte (or record).
        file_offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A stored record failed to encode or decode.
    #[error("record at commit log offset {commit_log_offset}: {reason}")]
    Record {
        /// The record's outside-visible commit log offset.
        commit_log_offset: u64,
        /// The codec's message.
        reason: String,
    },
    /// The message (or batch) is larger than the store accepts
    /// (RocketMQ: `MESSAGE_ILLEGAL`).
    #[error("message of {size} bytes exceeds the {max}-byte limit")]
    MessageTooLarge {
        /// Size of the encoded record or body.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The disk is fuller than the configured ratio; writes are rejected
    /// until retention frees space (retriable).
    #[error("disk {:.1}% full, writes rejected", used_ratio * 100.0)]
    DiskFull {
        /// Used space over total space, 0.0 to 1.0.
        used_ratio: f64,
    },
    /// The store refuses writes: a disk write failed earlier (the tail is
    /// unknown until a restart recovers it), or the store is shutting down.
    #[error("store is not writable: {reason}")]
    NotWritable {
        /// Why.
        reason: &'static str,
    },
    /// Too many appends wait for the disk; retry later (RocketMQ:
    /// `SYSTEM_BUSY`). Nothing was stored.
    #[error("store busy: {pending_bytes} bytes waiting for the disk")]
    Busy {
        /// Bytes appended but not yet written.
        pending_bytes: usize,
    },
    /// SYNC_FLUSH: the record is stored (and will be durable) but the flush
    /// did not complete within `sync_flush_timeout_ms` (RocketMQ:
    /// `FLUSH_DISK_TIMEOUT`).
    #[error("flush did not complete within {timeout_ms} ms")]
    FlushTimeout {
        /// The configured timeout.
        timeout_ms: u64,
    },
    /// A caller's argument is outside what the store accepts.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A store configuration value is malformed; names the key (RocketMQ's
    /// spelling) and the value as given.
    #[error("invalid value {value:?} for {key}: {reason}")]
    InvalidConfig {
        /// The configuration key, e.g. `deleteWhen`.
        key: &'static str,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A ConsumeQueue append skipped queue offsets: dispatch is out of order.
    #[error(
        "consume queue {topic}/{queue_id}: entry at queue offset {queue_offset} leaves a gap (next is {expected})"
    )]
    ConsumeQueueGap {
        /// The queue's topic.
        topic: String,
        /// The queue id.
        queue_id: u32,
        /// The next queue offset the queue expected.
        expected: u64,
        /// The queue offset of the rejected entry.
        queue_offset: u64,
    },
    /// A file-system operation outside the disk seam failed (tools, tests).
    #[error("{op} {path}: {source}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause, kept.
        #[source]
        source: std::io::Error,
    },
}

impl StorageError {
    /// Whether the producer may simply retry (nothing was stored).
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            StorageError::DiskFull { .. }
                | StorageError::Busy { .. }
                | StorageError::NotWritable { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_full_is_retriable_and_corrupt_is_not() {
        assert!(StorageError::DiskFull { used_ratio: 0.95 }.is_retriable());
        let corrupt = StorageError::Corrupt {
            path: PathBuf::from("/x"),
            file_offset: 8,
            reason: "bad".into(),
        };
        assert!(!corrupt.is_retriable());
        assert_eq!(
            StorageError::DiskFull { used_ratio: 0.955 }.to_string(),
            "disk 95.5% full, writes rejected"
        );
    }
}
