//! Replication at the store: the master's chunks of whole records
//! ([`Store::replica_chunk`]) and the slave's append of them
//! ([`Store::append_replicated`]), which dispatches each record to its
//! ConsumeQueue and the index as recovery does (see
//! [`crate::commit_log`]'s `replica` module for the format and checks).

use super::recover::Dispatcher;
use super::{PullRead, Store};
use crate::commit_log::{ReplicaChunk, ReplicaPosition};
use crate::disk::Disk;
use crate::error::StorageError;

impl<D: Disk> Store<D> {
    /// Master side: whole records from local `from` (a slave's end), at
    /// most about `max_bytes`, acknowledgeable ones only, at once from
    /// memory, or read as `read` says
    /// ([`crate::commit_log::CommitLog::replica_chunk`]): with
    /// [`PullRead::Background`] a read in the background, after which the
    /// replica pull is executed again with [`PullRead::AfterRead`] once
    /// [`Store::take_span_reads`] gives its ticket (as a consumer's pull).
    ///
    /// # Errors
    /// As `CommitLog::replica_chunk`.
    pub fn replica_chunk(
        &mut self,
        from: u64,
        max_bytes: usize,
        read: PullRead,
    ) -> Result<ReplicaChunk, StorageError> {
        self.commit_log.replica_chunk(
            &mut self.disk,
            from,
            max_bytes,
            read == PullRead::Background,
        )
    }

    /// Master side: how many bytes from a slave at local `from` to ship
    /// with splice instead of copying
    /// ([`crate::commit_log::CommitLog::replica_ship_len`]).
    ///
    /// # Errors
    /// As `CommitLog::replica_ship_len`.
    pub fn replica_ship_len(
        &self,
        from: u64,
        max_bytes: usize,
    ) -> Result<Option<usize>, StorageError> {
        self.commit_log.replica_ship_len(from, max_bytes)
    }

    /// Master side: where a slave continues after a chunk from local
    /// `from` ([`crate::commit_log::CommitLog::replica_chunk_end`]).
    pub fn replica_chunk_end(&self, from: u64, chunk: &[u8]) -> u64 {
        self.commit_log.replica_chunk_end(from, chunk)
    }

    /// Slave side: where this log ends and its last record, for the
    /// master's [`Store::check_replica_position`].
    ///
    /// # Errors
    /// As [`crate::commit_log::CommitLog::replica_position`].
    pub fn replica_position(&mut self) -> Result<ReplicaPosition, StorageError> {
        self.commit_log.replica_position(&mut self.disk)
    }

    /// Master side: whether this log agrees with a slave's up to the
    /// slave's end, so that it may be served from there.
    ///
    /// # Errors
    /// As [`crate::commit_log::CommitLog::check_replica_position`].
    pub fn check_replica_position(
        &mut self,
        position: &ReplicaPosition,
    ) -> Result<(), StorageError> {
        self.commit_log
            .check_replica_position(&mut self.disk, position)
    }

    /// Slave side: a store whose log holds no record starts it at segment
    /// `base` instead, where its master's log now starts
    /// ([`crate::commit_log::CommitLog::restart_empty_at`]); ConsumeQueue
    /// and index files below `base` (of records its own retention removed)
    /// go in the following turns, as after retention removes a segment.
    ///
    /// # Errors
    /// As `CommitLog::restart_empty_at`.
    pub fn restart_empty_replica_at(&mut self, base: u64) -> Result<(), StorageError> {
        self.commit_log.restart_empty_at(&mut self.disk, base)?;
        self.retention_cursor = Some(0);
        Ok(())
    }

    /// Slave side: appends a master's chunk at local `from` (this log's
    /// end) and dispatches its records to their ConsumeQueues (created as
    /// needed) and the index. The chunk is durable, for the slave's report
    /// to its master, once [`crate::commit_log::appender::Appender::durable`]
    /// passes the returned end.
    ///
    /// # Errors
    /// [`StorageError::DiskFull`], and those of
    /// `CommitLog::append_replicated`, with nothing appended;
    /// [`StorageError::Record`] when a record, appended, does not follow
    /// its queue (this store's queues are not the master's).
    pub fn append_replicated(
        &mut self,
        from: u64,
        bytes: &[u8],
        now_ms: u64,
    ) -> Result<u64, StorageError> {
        self.check_disk_space()?;
        let mut dispatcher = Dispatcher {
            queues: &mut self.queues,
            index: &mut self.index,
            shard_id: self.config.shard_id,
            now_ms,
            // Every record must land at its queue offset.
            strict_from: Some(0),
            existing_queues_below: None,
            error: None,
            inconsistent: None,
            redispatched: 0,
        };
        let mut last = None;
        let end = self.commit_log.append_replicated(
            &mut self.disk,
            from,
            bytes,
            &mut |local, view| {
                last = Some((local, view.store_timestamp_ms()));
                dispatcher.visit(local, view);
            },
        )?;
        if let Some((_, store_timestamp_ms)) = last {
            self.durable_marks.push_back((end, store_timestamp_ms));
        }
        if let Some(error) = dispatcher.error {
            return Err(error);
        }
        if let Some(reason) = dispatcher.inconsistent {
            return Err(StorageError::Record {
                commit_log_offset: crate::commit_log::shard_offset(
                    self.config.shard_id,
                    last.map_or(from, |(local, _)| local),
                ),
                reason: format!("replicated record does not follow its queue: {reason}"),
            });
        }
        Ok(end)
    }
}
