#!/usr/bin/env bash
# The one command: what CI runs and what every commit must pass.
# fmt, clippy with warnings denied, every Rust test, the end-to-end tests
# with the official Java client (Maven fetches rocketmq-client from Maven
# Central on a clean machine) and with rocketmq-client-rust (cargo fetches it
# from crates.io), and docs with warnings denied.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy (-D warnings)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
cargo test --workspace --locked

step "Java client tests (official rocketmq-client, tests/java)"
scripts/java-tests.sh

step "rocketmq-client-rust tests (tests/rust-client)"
scripts/rust-client-tests.sh

step "cargo doc (-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

printf '\ncheck.sh: all steps passed\n'
