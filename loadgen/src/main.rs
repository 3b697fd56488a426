//! The `ringmq-loadgen` binary. Not written yet: it says so and exits non-zero.

use clap::Parser;

/// ringmq-loadgen: drives any RocketMQ broker and records latency histograms.
#[derive(Parser)]
#[command(version, about)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    anyhow::bail!("ringmq-loadgen is not implemented yet (see the status table in README.md)")
}
