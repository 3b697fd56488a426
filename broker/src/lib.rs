//! The ringmq broker as a library: configuration, the name server, and (as
//! they arrive) shards, connections and request handlers.
//!
//! Everything here is plain, deterministic logic that the `ringmq` binary
//! drives: components take decoded requests and the current time as
//! parameters and return responses plus the side effects to carry out, so the
//! network layer stays a thin shell around them.

pub mod client_registry;
pub mod config;
pub mod consumer_offset;
pub mod features;
pub mod namesrv;
pub mod persist;
pub mod queue_lock;
pub mod replication;
pub mod route;
pub mod runtime_info;
pub mod server;
pub mod shard;
pub mod stats_table;
pub mod subscription_group;
pub mod topic_config;
pub mod tps;
