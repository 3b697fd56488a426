#!/usr/bin/env bash
# The one command: what CI runs and what every commit must pass.
# fmt, clippy with warnings denied, every Rust test, the end-to-end tests
# with the official Java client (Maven fetches rocketmq-client from Maven
# Central on a clean machine), with rocketmq-client-rust (cargo fetches it
# from crates.io) and with the official Go client (the Go module proxy
# supplies it), and docs with warnings denied.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# The brokers the tests start keep their stores under the temp directory.
# As RocketMQ's, they refuse appends on a disk over 90 % full and drop all
# but their newest CommitLog segment over 85 %, counting other programs'
# files (diskSpaceWarningLevelRatio, diskSpaceCleanForciblyRatio): say how
# full it is, so that a failure there explains itself.
tmp_dir=${TMPDIR:-/tmp}
tmp_used=$(df -P "$tmp_dir" 2>/dev/null | awk 'NR == 2 { sub("%", "", $5); print $5 }' || true)
printf 'check.sh: %s is %s%% full (df)\n' "$tmp_dir" "${tmp_used:-?}"
if [ "${tmp_used:-0}" -ge 85 ] 2>/dev/null; then
    printf 'check.sh: WARNING: the build adds several GB, and at 90 %% the brokers the tests start refuse appends\n'
fi

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

step "Go client tests (official rocketmq-client-go/v2, tests/go-client)"
scripts/go-client-tests.sh

step "cargo doc (-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

printf '\ncheck.sh: all steps passed\n'
