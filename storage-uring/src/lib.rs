//! ringmq's storage engine for one shard: an io_uring reactor, and on it the
//! CommitLog, ConsumeQueue and IndexFile of RocketMQ.
//!
//! Not written yet; see the README's status table.
