//! ringmq's storage engine for one shard: an io_uring reactor, and on it the
//! CommitLog, ConsumeQueue and IndexFile of RocketMQ.
//!
//! All file I/O goes through the [`disk::Disk`] seam, so the same store code
//! runs on io_uring in production and on a fault-injecting simulated disk in
//! tests.

pub mod aligned;
pub mod checkpoint;
pub mod commit_log;
pub mod consume_queue;
pub mod disk;
pub mod error;
pub mod index_file;
pub mod limits;
pub mod retention;
pub mod ring;
pub mod store;
