#!/usr/bin/env bash
# End-to-end tests with the official Apache RocketMQ Java client (tests/java, JUnit 5 under
# Surefire) against the real `ringmq` binary.
#
#   scripts/java-tests.sh [PATH_TO_RINGMQ] [MAVEN_ARGS...]
#
# Without a path (or when the first argument starts with '-'), the debug binary is built with
# cargo. Remaining arguments go to Maven, e.g. -Dmaven.repo.local=/tmp/m2-cold. Maven fetches
# what it needs from Maven Central, so this works with an empty ~/.m2 (given network access).
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

echo "==> mvn test (tests/java) against $bin" >&2
status=0
timeout --kill-after=30 "$limit" \
    mvn -q -B -Dstyle.color=never -f tests/java/pom.xml test "-Dringmq.bin=$bin" "$@" || status=$?
# Maven runs quiet (-q); print Surefire's own per-class summary lines so the
# log shows how many Java tests ran.
cat tests/java/target/surefire-reports/*.txt 2>/dev/null | grep -E '^Tests run:' || true
if [[ $status -eq 124 || $status -eq 137 ]]; then
    echo "java-tests.sh: timed out after ${limit}s" >&2
elif [[ $status -ne 0 ]]; then
    echo "java-tests.sh: Java client tests failed (status $status);" \
        "reports in tests/java/target/surefire-reports, server log in tests/java/target/ringmq-namesrv.log" >&2
fi
exit "$status"
