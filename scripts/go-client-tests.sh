#!/usr/bin/env bash
# End-to-end tests with the official Go client, github.com/apache/rocketmq-client-go/v2
# (tests/go-client, `go test`), against the real `ringmq` binary or a broker already running.
#
#   scripts/go-client-tests.sh [PATH_TO_RINGMQ] [-- GO_TEST_ARGS...]
#   scripts/go-client-tests.sh --external NAMESRV_HOST:PORT BROKER_HOST:PORT [-- GO_TEST_ARGS...]
#
# - Without a path, the debug ringmq binary is built with cargo (as the other client tests do).
#   The script starts `ringmq broker` on two free loopback ports in 26000-26999 with a fresh
#   store (scripts/lib/ringmq-under-test.sh says with which options), waits for its boot line,
#   runs `go test` in tests/go-client against its embedded name server, and stops it with
#   SIGTERM (exit status 0 expected).
# - With --external, nothing is started: the tests run against that name server and broker
#   (for example 127.0.0.1:9876 and 127.0.0.1:10911 for the Apache RocketMQ peer of
#   scripts/peer.sh). Topic and group names carry a per-run prefix (go-<time>-<pid>).
# - GO_TEST_ARGS go to `go test` (e.g. `-- -run Transaction`).
# - The Go module proxy supplies the client on first use (go.sum pins every module); the
#   module cache and build cache are Go's defaults.
# - Bounded: RINGMQ_GO_TESTS_TIMEOUT seconds for `go test` including its build (default 900),
#   120 s for the broker to boot, 60 s for it to stop. Logs go to a fresh directory under /tmp
#   (or $RINGMQ_GO_TESTS_LOG_DIR), named on failure and removed on success.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

readonly limit="${RINGMQ_GO_TESTS_TIMEOUT:-900}"
readonly boot_timeout_s=120
readonly stop_timeout_s=60
readonly port_min=26000
readonly port_max=26999

die() {
    echo "go-client-tests.sh: $*" >&2
    exit 1
}

external_namesrv=""
external_broker=""
bin=""
go_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --external)
            [[ $# -ge 3 ]] || die "--external needs NAMESRV_HOST:PORT BROKER_HOST:PORT"
            external_namesrv="$2"
            external_broker="$3"
            shift 3
            ;;
        --)
            shift
            go_args=("$@")
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
[[ -z "$external_namesrv" || -z "$bin" ]] || die "give either a ringmq path or --external, not both"

for tool in go cargo timeout python3; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not installed"
done

unformatted="$(cd tests/go-client && gofmt -l .)"
[[ -z "$unformatted" ]] || die "gofmt would change tests/go-client/$unformatted (run gofmt -w there)"

script_name=go-client-tests.sh
# shellcheck source=scripts/lib/ringmq-under-test.sh
source "$root/scripts/lib/ringmq-under-test.sh"
logs="$(log_dir "${RINGMQ_GO_TESTS_LOG_DIR:-}" go)"

if [[ -n "$external_namesrv" ]]; then
    namesrv="$external_namesrv"
    broker_address="$external_broker"
    echo "==> against the running broker $broker_address behind name server $namesrv" >&2
else
    launch_broker_under_test go
fi

test_log="$logs/go-test.out"
status=0
echo "==> go test (tests/go-client) against $namesrv, output in $test_log" >&2
set +e
(
    cd tests/go-client &&
        RINGMQ_NAMESRV="$namesrv" RINGMQ_BROKER="$broker_address" RINGMQ_PREFIX="go-$(date +%s)-$$" \
            GOFLAGS=-mod=readonly timeout --kill-after=10 "$limit" \
            go test -count=1 -v -timeout "${limit}s" ./... "${go_args[@]}"
) >"$test_log" 2>&1
status=$?
set -e
# The verdict of each test, without the client's own log lines.
grep -E '^(--- |ok |FAIL|PASS$|panic:)|_test\.go:[0-9]+:' "$test_log" >&2 || true
if [[ $status -eq 124 || $status -eq 137 ]]; then
    echo "go-client-tests.sh: go test timed out after ${limit}s" >&2
fi

finish_broker_under_test "$status" "${RINGMQ_GO_TESTS_LOG_DIR:-}" \
    "go-test.out: the tests' output" "all Go client tests passed"
