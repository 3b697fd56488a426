//! RINGMQ_REPLICA_PULL (9101): ringmq's own request, by which a slave's
//! shard pulls its master's shard's CommitLog. Not a RocketMQ command:
//! Java's classic HA streams one CommitLog over the HA port, while a
//! ringmq broker has one CommitLog per shard (docs/architecture.md,
//! "Replication").
//!
//! The slave names where its log ends (`offset`, shard-local) and what it
//! has made durable; on the first pull of a connection it also names its
//! last record (`lastOffset`, `lastSize`, `lastCrc`), which the master
//! checks against its own log before serving it; a slave whose log holds
//! no record names none, and its `offset` must be a segment start. The
//! answer's body is whole records from `offset`, possibly empty, or, to a
//! slave that says `raw`, possibly the log's bytes cut anywhere (the
//! answer says `raw`: the master spliced them from the disk); a slave with
//! no record below the master's log is told where to start instead
//! (`startOffset`).
//!
//! RINGMQ_REPLICA_OFFSETS (9102): the consumer offsets of the master's
//! shard, answered with GET_ALL_CONSUMER_OFFSET's body.
//!
//! RINGMQ_SCHEDULE_PROGRESS (9103): the end of what the master's shard
//! acknowledges (`logEnd`) and, from shard 0, the master's delivery
//! progress of delayed messages (the body, as GET_ALL_DELAY_OFFSET's), of
//! timer messages (`timerProgress`) and of the transaction checker
//! (`transactionHalfOffset`, `transactionOpOffset`), read before `logEnd`: every
//! delivery the progress counts is stored below the `logEnd`s the slave
//! asks for after it.

use super::custom_header;

custom_header! {
    /// The slave's pull.
    pub struct ReplicaPullRequestHeader {
        /// `shard`: the shard whose CommitLog is pulled (the slave's shard
        /// of the same id appends it).
        shard: required i32 = "shard",
        /// `shardCount`: the slave's shard count (must be the master's).
        shard_count: required i32 = "shardCount",
        /// `segmentSize`: the slave's CommitLog segment size (must be the
        /// master's: a BLANK ends a segment at the same offset on both).
        segment_size: required i64 = "segmentSize",
        /// `offset`: shard-local end of the slave's log; the chunk starts here.
        offset: required i64 = "offset",
        /// `durableOffset`: shard-local end of what the slave made durable.
        durable_offset: required i64 = "durableOffset",
        /// `lastOffset`: the slave's last record (with `lastSize` and
        /// `lastCrc`), on the first pull of a connection.
        last_offset: optional i64 = "lastOffset",
        /// `lastSize`: its TOTALSIZE.
        last_size: optional i32 = "lastSize",
        /// `lastCrc`: the CRC-32C of its bytes.
        last_crc: optional i64 = "lastCrc",
        /// `maxBytes`: about this many bytes at most (a larger record comes whole).
        max_bytes: required i32 = "maxBytes",
        /// `suspendMillis`: how long the master may hold a pull that finds
        /// nothing new.
        suspend_millis: required i64 = "suspendMillis",
        /// `slaveAddr`: the slave's `brokerIP1:listenPort`, which names it in
        /// the master's HA status (older slaves send none: the connection's
        /// address names it then).
        slave_addr: optional String = "slaveAddr",
        /// `raw`: the slave takes a chunk cut anywhere (it appends the
        /// whole records and asks again from their end), which lets the
        /// master splice older records from its segment to the socket.
        /// Older slaves send none: whole records only.
        raw: optional bool = "raw",
    }
}

custom_header! {
    /// The master's answer (the body holds the records).
    pub struct ReplicaPullResponseHeader {
        /// `masterOffset`: shard-local end of what the master acknowledges.
        master_offset: required i64 = "masterOffset",
        /// `startOffset`: where a slave whose log holds no record and ends
        /// below the master's log must start it (the master's min offset,
        /// a segment base); the body is then empty.
        start_offset: optional i64 = "startOffset",
        /// `raw`: the body is the log's bytes from the slave's `offset`,
        /// cut anywhere (a BLANK's padding included), as a slave that said
        /// `raw` accepts; otherwise whole records.
        raw: optional bool = "raw",
    }
}

custom_header! {
    /// The master's answer to RINGMQ_SCHEDULE_PROGRESS.
    pub struct ScheduleProgressResponseHeader {
        /// `logEnd`: shard-local end of what the master's shard acknowledges.
        log_end: required i64 = "logEnd",
        /// `timerProgress`: the content of the master's
        /// `config/timerProgress.json` (shard 0 only; none without a
        /// timer wheel).
        timer_progress: optional String = "timerProgress",
        /// `transactionHalfOffset`: the transaction checker's progress in
        /// the half queue (shard 0 only; none before its first check).
        transaction_half_offset: optional i64 = "transactionHalfOffset",
        /// `transactionOpOffset`: its progress in the op queue.
        transaction_op_offset: optional i64 = "transactionOpOffset",
    }
}

custom_header! {
    /// A slave's fetch of one master shard's consumer offsets (and of its
    /// schedule progress).
    pub struct ReplicaOffsetsRequestHeader {
        /// `shard`: the master's shard.
        shard: required i32 = "shard",
    }
}
