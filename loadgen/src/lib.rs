//! `ringmq-loadgen` as a library: workloads against any RocketMQ broker,
//! latency histograms, reports, comparisons and plots.
//!
//! The binary (`main.rs`) is a thin command line over these modules.

pub mod client;
pub mod compare;
pub mod consume;
pub mod delay;
pub mod disk_floor;
pub mod hgrm;
pub mod hist;
pub mod hlog;
pub mod json;
pub mod null_broker;
pub mod null_store;
pub mod plot;
pub mod report;
pub mod reporter;
pub mod schedule;
mod sender;
pub mod workload;
