#!/usr/bin/env bash
# Regenerates the golden wire fixtures in protocol/tests/fixtures/ from two real clients:
# the Apache RocketMQ Java client (tests/java) and rocketmq-client-rust (tests/rust-client).
#
# Steps: start scripts/capture/capture_server.py on two free loopback ports (fake name server +
# broker), run the Java scenario, then the Rust scenario, stop the server, and copy the first
# frame of every request code (and variant) per client into protocol/tests/fixtures/ with a
# .note sidecar (scripts/capture/make_fixtures.py). Every step is bounded by a timeout.
#
# The Java scenario runs twice: with the default JSON headers, then with
# -Drocketmq.serialize.type=ROCKETMQ so that the ROCKETMQ binary header form is captured too
# (fixtures with the "-binary" variant).
#
# Usage: scripts/capture/capture.sh [--java-only | --rust-only] [--no-java-binary] [--no-fixtures]
# Environment:
#   CAPTURE_OUT       work directory for raw frames and logs (default: a fresh /tmp directory)
#   CARGO_TARGET_DIR  cargo target directory for the Rust client (default: tests/rust-client/target)
# Needs: python3 (3.11), java 17 + mvn, cargo. The first run downloads Maven and crates.io
# dependencies and compiles the Rust client (several minutes).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/scripts/capture"
FIXTURES="$ROOT/protocol/tests/fixtures"
OUT=${CAPTURE_OUT:-$(mktemp -d /tmp/ringmq-capture.XXXXXX)}
TARGET=${CARGO_TARGET_DIR:-$ROOT/tests/rust-client/target}
RUN_JAVA=1
RUN_RUST=1
WRITE_FIXTURES=1
RUN_JAVA_BINARY=1
for arg in "$@"; do
  case "$arg" in
    --java-only) RUN_RUST=0 ;;
    --rust-only) RUN_JAVA=0 ;;
    --no-fixtures) WRITE_FIXTURES=0 ;;
    --no-java-binary) RUN_JAVA_BINARY=0 ;;
    *) echo "unknown argument: $arg" >&2; exit 64 ;;
  esac
done

# Timeouts (seconds).
MVN_TIMEOUT=600
CARGO_TIMEOUT=2400
JAVA_RUN_TIMEOUT=90
RUST_RUN_TIMEOUT=120
SERVER_MAX_SECONDS=$((MVN_TIMEOUT + CARGO_TIMEOUT + 2 * JAVA_RUN_TIMEOUT + RUST_RUN_TIMEOUT + 60))

mkdir -p "$OUT/frames"
echo "capture: work directory $OUT"

# Two free loopback ports (tiny race between probing and binding; good enough for a dev tool).
read -r NS_PORT BROKER_PORT < <(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
for s in socks:
    s.close()
EOF
)
NAMESRV="127.0.0.1:$NS_PORT"

# Build first, so that build time does not count against the client run timeouts.
if [[ $RUN_JAVA == 1 ]]; then
  echo "capture: building tests/java"
  (cd "$ROOT/tests/java" && timeout "$MVN_TIMEOUT" mvn -q -B compile dependency:build-classpath \
      -Dmdep.outputFile=target/classpath.txt) > "$OUT/java-build.log" 2>&1 \
    || { echo "capture: Maven build failed, see $OUT/java-build.log" >&2; exit 1; }
fi
if [[ $RUN_RUST == 1 ]]; then
  echo "capture: building tests/rust-client (CARGO_TARGET_DIR=$TARGET)"
  (cd "$ROOT/tests/rust-client" && CARGO_TARGET_DIR="$TARGET" timeout "$CARGO_TIMEOUT" cargo build --locked) \
      > "$OUT/rust-build.log" 2>&1 \
    || { echo "capture: cargo build failed, see $OUT/rust-build.log" >&2; exit 1; }
fi

python3 "$HERE/capture_server.py" --namesrv-port "$NS_PORT" --broker-port "$BROKER_PORT" \
  --out "$OUT/frames" --max-seconds "$SERVER_MAX_SECONDS" > "$OUT/server.log" 2>&1 &
SERVER_PID=$!
stop_server() {
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
}
trap stop_server EXIT

# Wait (at most 10 s) until both ports accept connections.
for _ in $(seq 1 100); do
  if python3 -c "import socket,sys; [socket.create_connection(('127.0.0.1', p), 0.2).close() for p in map(int, sys.argv[1:])]" \
      "$NS_PORT" "$BROKER_PORT" 2>/dev/null; then
    break
  fi
  sleep 0.1
done
echo "capture: server on namesrv $NAMESRV, broker 127.0.0.1:$BROKER_PORT"

STATUS=0
if [[ $RUN_JAVA == 1 ]]; then
  echo "capture: running Java client scenario"
  (cd "$ROOT/tests/java" && timeout "$JAVA_RUN_TIMEOUT" java \
      -Drocketmq.client.logRoot="$OUT/java-client-logs" \
      -cp "target/classes:$(cat target/classpath.txt)" dev.ringmq.capture.JavaCapture "$NAMESRV") \
      > "$OUT/java.log" 2>&1 || { echo "capture: Java scenario exited with $?, see $OUT/java.log" >&2; STATUS=1; }
  grep '^\[java-capture\]' "$OUT/java.log" | tail -n 1 || true
  if [[ $RUN_JAVA_BINARY == 1 ]]; then
    echo "capture: running Java client scenario with ROCKETMQ binary headers"
    (cd "$ROOT/tests/java" && timeout "$JAVA_RUN_TIMEOUT" java -Drocketmq.serialize.type=ROCKETMQ \
        -Drocketmq.client.logRoot="$OUT/java-binary-client-logs" \
        -cp "target/classes:$(cat target/classpath.txt)" dev.ringmq.capture.JavaCapture "$NAMESRV") \
        > "$OUT/java-binary.log" 2>&1 || { echo "capture: Java binary scenario exited with $?, see $OUT/java-binary.log" >&2; STATUS=1; }
    grep '^\[java-capture\]' "$OUT/java-binary.log" | tail -n 1 || true
  fi
fi
if [[ $RUN_RUST == 1 ]]; then
  echo "capture: running Rust client scenario"
  NO_COLOR=1 RUST_LOG=${RUST_LOG:-info} timeout "$RUST_RUN_TIMEOUT" "$TARGET/debug/rust-capture" "$NAMESRV" \
      > "$OUT/rust.log" 2>&1 || { echo "capture: Rust scenario exited with $?, see $OUT/rust.log" >&2; STATUS=1; }
  grep '^\[rust-capture\]' "$OUT/rust.log" | tail -n 1 || true
fi
stop_server
trap - EXIT

if [[ $WRITE_FIXTURES == 1 ]]; then
  JAVA_VERSION=$(java -version 2>&1 | head -n 1)
  RUSTC_VERSION=$(cd "$ROOT/tests/rust-client" && rustc --version)
  python3 "$HERE/make_fixtures.py" --frames "$OUT/frames" --fixtures "$FIXTURES" \
    --command "$(echo "scripts/capture/capture.sh $*" | sed "s/ *$//")" \
    --java-desc "Apache RocketMQ Java client, org.apache.rocketmq:rocketmq-client:5.3.3 from Maven Central, on $JAVA_VERSION" \
    --rust-desc "rocketmq-client-rust 1.0.0 from crates.io (tests/rust-client, Cargo.lock pinned), built with $RUSTC_VERSION"
fi
echo "capture: done (raw frames and logs in $OUT)"
exit $STATUS
