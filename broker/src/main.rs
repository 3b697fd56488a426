//! The `ringmq` binary. The broker is not written yet: this entry point only
//! says so, so that nobody mistakes it for a working broker.

use clap::Parser;

/// ringmq: a RocketMQ-compatible message broker on io_uring.
#[derive(Parser)]
#[command(version, about)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    anyhow::bail!(
        "the ringmq broker is not implemented yet (see the status table in README.md); \
         this build contains the protocol crate only"
    )
}
