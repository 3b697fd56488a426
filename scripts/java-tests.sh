#!/usr/bin/env bash
# End-to-end tests with the official Apache RocketMQ Java client (tests/java, JUnit 5 under
# Surefire) against the real `ringmq` binary.
#
#   scripts/java-tests.sh [PATH_TO_RINGMQ] [MAVEN_ARGS...]
#   scripts/java-tests.sh --external HOST:PORT [MAVEN_ARGS...]
#
# Without a path (or when the first argument starts with '-'), the debug binary is built with
# cargo. Remaining arguments go to Maven, e.g. -Dmaven.repo.local=/tmp/m2-cold. Maven fetches
# what it needs from Maven Central, so this works with an empty ~/.m2 (given network access).
#
# - RINGMQ_JAVA_TESTS=ProducerIT,PushConsumerIT runs only those classes (Surefire -Dtest=...;
#   passing -Dtest=... yourself works too).
# - --external HOST:PORT runs the broker tests against a broker that is already registered with
#   the name server HOST:PORT (e.g. Apache RocketMQ from `scripts/peer.sh apache-rocketmq start`:
#   --external 127.0.0.1:9876). Nothing is built or started for them; the tests that stop, kill or
#   restart the broker are skipped, and NameServerIT (which needs `ringmq namesrv`) is excluded
#   unless RINGMQ_JAVA_TESTS names it.
# - Brokers under test listen on 23000-23999 (one range per test class; RINGMQ_JAVA_PORT_OFFSET=N,
#   0..90, shifts them so that two suites can run side by side).
# - RINGMQ_JAVA_TARGET=DIR puts Maven's build directory (reports, broker logs ringmq-*.log,
#   stores ringmq-store-*) there instead of tests/java/target, so concurrent runs stay apart.
# The whole run is bounded by RINGMQ_JAVA_TESTS_TIMEOUT seconds (default 900).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

limit="${RINGMQ_JAVA_TESTS_TIMEOUT:-900}"

for tool in java mvn timeout; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "java-tests.sh: '$tool' is not installed; the Java client tests need a JDK 17+ and Maven" >&2
        exit 1
    fi
done

external=""
if [[ $# -gt 0 && ( "$1" == --external || "$1" == --external=* ) ]]; then
    if [[ "$1" == --external=* ]]; then
        external="${1#--external=}"
        shift
    else
        external="${2:-}"
        shift 2 || true
    fi
    if [[ ! "$external" =~ ^[^:]+:[0-9]+$ ]]; then
        echo "java-tests.sh: --external needs the name server as HOST:PORT, not '$external'" >&2
        exit 2
    fi
fi

target_dir="${RINGMQ_JAVA_TARGET:-$root/tests/java/target}"
mkdir -p "$target_dir"
target_dir="$(cd "$target_dir" && pwd)"
maven_args=("-Dringmq.target=$target_dir")
if [[ -n "${RINGMQ_JAVA_PORT_OFFSET:-}" ]]; then
    if [[ ! "$RINGMQ_JAVA_PORT_OFFSET" =~ ^[0-9]+$ ]] || ((RINGMQ_JAVA_PORT_OFFSET > 90)); then
        echo "java-tests.sh: RINGMQ_JAVA_PORT_OFFSET must be a number from 0 to 90" >&2
        exit 2
    fi
    maven_args+=("-Dringmq.it.portOffset=$RINGMQ_JAVA_PORT_OFFSET")
fi
if [[ -n "$external" ]]; then
    maven_args+=("-Dringmq.external.namesrv=$external")
    target="the broker registered with $external"
else
    if [[ $# -gt 0 && "$1" != -* ]]; then
        bin="$1"
        shift
    else
        echo "==> cargo build -p ringmq-broker --bin ringmq" >&2
        cargo build -p ringmq-broker --bin ringmq --locked
        bin="${CARGO_TARGET_DIR:-$root/target}/debug/ringmq"
    fi
    if [[ ! -x "$bin" ]]; then
        echo "java-tests.sh: $bin is not an executable ringmq binary" >&2
        exit 1
    fi
    bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
    maven_args+=("-Dringmq.bin=$bin")
    target="$bin"
fi

if [[ -n "${RINGMQ_JAVA_TESTS:-}" ]]; then
    if [[ ! "$RINGMQ_JAVA_TESTS" =~ ^[A-Za-z0-9_#*,.!]+$ ]]; then
        echo "java-tests.sh: RINGMQ_JAVA_TESTS must be a comma-separated list of test classes" >&2
        exit 2
    fi
    maven_args+=("-Dtest=$RINGMQ_JAVA_TESTS")
elif [[ -n "$external" ]]; then
    # NameServerIT starts `ringmq namesrv` itself; an external run has no binary for it.
    maven_args+=("-Dtest=*IT,!NameServerIT")
fi

echo "==> mvn test (tests/java) against $target" >&2
# Stale reports from an earlier run must not show up in the summary below.
rm -rf "$target_dir/surefire-reports"
status=0
timeout --kill-after=30 "$limit" \
    mvn -q -B -Dstyle.color=never -f tests/java/pom.xml test "${maven_args[@]}" "$@" || status=$?
# Maven runs quiet (-q); print Surefire's own per-class summary lines (and a total) so the
# log shows how many Java tests ran and were skipped.
shopt -s nullglob
reports=("$target_dir"/surefire-reports/*.txt)
if [[ ${#reports[@]} -gt 0 ]]; then
    grep -hE '^Tests run:' "${reports[@]}" || true
    grep -hE '^Tests run:' "${reports[@]}" | awk -F'[:,]' '
        { run += $2; failed += $4 + $6; skipped += $8 }
        END { printf "java: %d passed, %d failed, %d skipped\n", run - failed - skipped, failed, skipped }'
fi
if [[ $status -eq 124 || $status -eq 137 ]]; then
    echo "java-tests.sh: timed out after ${limit}s" >&2
elif [[ $status -ne 0 ]]; then
    echo "java-tests.sh: Java client tests failed (status $status);" \
        "reports in $target_dir/surefire-reports, broker logs in $target_dir/ringmq-*.log" >&2
fi
exit "$status"
