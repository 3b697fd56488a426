#!/usr/bin/env bash
# End-to-end tests with rocketmq-client-rust 1.0.0 (tests/rust-client, the `rust-e2e` program)
# against the real `ringmq` binary, or against a broker that is already running.
#
#   scripts/rust-client-tests.sh [PATH_TO_RINGMQ] [-- RUST_E2E_ARGS...]
#   scripts/rust-client-tests.sh --external NAMESRV_HOST:PORT [-- RUST_E2E_ARGS...]
#
# - Without a path, the debug ringmq binary is built with cargo (as scripts/java-tests.sh does).
#   The script starts `ringmq broker` on two free loopback ports in 24000-24999 (listenPort and
#   namesrvListenPort) with a fresh store (and --transactionCheckInterval=1000
#   --transactionTimeOut=1000 --enablePropertyFilter=true for the `features` scenarios), waits
#   for its boot line, runs `rust-e2e all` and `rust-e2e features` against its embedded name
#   server, then `broker-restart-1`, restarts the broker (SIGTERM, exit status
#   0 expected, same store), `broker-restart-2`, and finally stops it with SIGTERM (exit 0).
# - With --external, nothing is started: `rust-e2e all` and `features` run against that name
#   server (e.g. 127.0.0.1:9876 for the Apache RocketMQ peer of scripts/peer.sh). Topic and group names carry
#   a per-run prefix (rust-<time>-<pid>), so a shared broker is safe to use.
# - RUST_E2E_ARGS replace `all`, `features` and the restart phases (e.g. `-- sync retry`); `--namesrv` and
#   `--prefix` are set here. Against --external the restart phases run without a restart.
# - Bounded: RINGMQ_RUST_TESTS_TIMEOUT seconds for the scenarios (default 600), 120 s for the
#   broker to boot, 60 s for it to stop. Logs go to a fresh directory under /tmp (or
#   $RINGMQ_RUST_TESTS_LOG_DIR), named on failure and removed on success.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

readonly limit="${RINGMQ_RUST_TESTS_TIMEOUT:-600}"
readonly boot_timeout_s=120
readonly stop_timeout_s=60
readonly port_min=24000
readonly port_max=24999

die() {
    echo "rust-client-tests.sh: $*" >&2
    exit 1
}

external=""
bin=""
e2e_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --external)
            [[ $# -ge 2 ]] || die "--external needs HOST:PORT"
            external="$2"
            shift 2
            ;;
        --)
            shift
            e2e_args=("$@")
            break
            ;;
        -*) die "unknown option $1" ;;
        *)
            [[ -z "$bin" ]] || die "more than one ringmq path given"
            bin="$1"
            shift
            ;;
    esac
done
explicit_args=""
[[ ${#e2e_args[@]} -eq 0 ]] || explicit_args=yes
[[ -z "$external" || -z "$bin" ]] || die "give either a ringmq path or --external, not both"

for tool in cargo timeout python3; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not installed"
done

echo "==> cargo build (tests/rust-client, rust-e2e)" >&2
cargo build --manifest-path tests/rust-client/Cargo.toml --bin rust-e2e --locked
e2e="${CARGO_TARGET_DIR:-$root/tests/rust-client/target}/debug/rust-e2e"
[[ -x "$e2e" ]] || die "$e2e was not built"

script_name=rust-client-tests.sh
# shellcheck source=scripts/lib/ringmq-under-test.sh
source "$root/scripts/lib/ringmq-under-test.sh"
logs="$(log_dir "${RINGMQ_RUST_TESTS_LOG_DIR:-}" rust)"

e2e_log="$logs/rust-e2e.out"
client_log="$logs/rust-e2e-client.log"
prefix="rust-$(date +%s)-$$"
deadline=$((SECONDS + limit))

# run_e2e ARGS...: one rust-e2e run within what is left of the time limit; returns its status.
run_e2e() {
    local left=$((deadline - SECONDS))
    [[ $left -gt 0 ]] || left=1
    echo "==> rust-e2e --namesrv $namesrv --prefix $prefix $* (client log: $client_log)" >&2
    local run_status
    set +e
    timeout --kill-after=10 "$((left + 30))" "$e2e" --namesrv "$namesrv" --prefix "$prefix" \
        --timeout "$left" "$@" 2>>"$client_log" | tee -a "$e2e_log"
    run_status="${PIPESTATUS[0]}"
    set -e
    if [[ $run_status -eq 124 || $run_status -eq 137 ]]; then
        echo "rust-client-tests.sh: rust-e2e timed out" >&2
    fi
    return "$run_status"
}

if [[ -n "$external" ]]; then
    namesrv="$external"
    echo "==> against the running broker behind name server $namesrv" >&2
else
    launch_broker_under_test rust
fi

status=0
if [[ -n "$explicit_args" ]]; then
    run_e2e "${e2e_args[@]}" || status=$?
else
    run_e2e all || status=$?
    # Message features (delay/timer, transactions with check-back, SQL92, request-reply):
    # slower than `all`, so a group of their own.
    run_e2e features || status=$?
    # Offsets and messages across a broker restart: phase 1, restart, phase 2 (same prefix).
    # Against an external broker nothing can be restarted; the phases then run back to back.
    run_e2e broker-restart-1 || status=$?
    if [[ -n "$broker_pid" ]]; then
        stop_broker || status=1
        [[ -n "$broker_pid" ]] || start_broker
    else
        echo "==> (external broker: not restarted between the phases)" >&2
    fi
    run_e2e broker-restart-2 || status=$?
fi

finish_broker_under_test "$status" "${RINGMQ_RUST_TESTS_LOG_DIR:-}" \
    "rust-e2e.out: scenario results, rust-e2e-client.log: client log" "all rust-e2e scenarios passed"
