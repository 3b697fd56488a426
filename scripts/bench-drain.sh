#!/usr/bin/env bash
# A consumer draining a backlog: how fast ringmq-loadgen's pull consumer reads a topic from its
# oldest message, on ringmq and on a peer broker, alternating in one session. A benchmark, not a
# test.
#
#   scripts/bench-drain.sh [--bin RINGMQ] [--loadgen LOADGEN] [--peer apache-rocketmq|rocketmq-rust]
#                          [--runs 2] [--fill-seconds 60] [--fill-rate 50000] [--size 1024]
#                          [--seconds 5] --out DIR
#
# Each run, for ringmq and then the peer (if given): a fresh broker (ringmq: a name server and
# `ringmq broker` with its default shards; a peer: scripts/peer.sh ... start --fresh), filled by
# FILL_SECONDS of async sends of SIZE bytes at FILL_RATE msgs/s (2 connections x 64 in flight,
# topic DrainBench, 8 queues), then `ringmq-loadgen consume --from earliest --consumers 2` for
# SECONDS: one pull in flight per queue, 32 messages a pull, as Java's push consumer pulls. The
# consumer's msgs/s is the drain rate while the backlog lasts; the summary says when the consumer
# caught up within the window (the rate is then a lower bound) and how much CPU the broker took
# during it. The disk floor is measured first. DIR/summary.txt has one line per run, DIR/<target>-<n>/
# the loadgen outputs and the broker's log.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN=$ROOT/target/release/ringmq
LOADGEN=$ROOT/target/release/ringmq-loadgen
PEER=""
RUNS=2
FILL_SECONDS=60
FILL_RATE=50000
SIZE=1024
SECONDS_RUN=5
OUT=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --bin) BIN=$2; shift 2 ;;
        --loadgen) LOADGEN=$2; shift 2 ;;
        --peer) PEER=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --fill-seconds) FILL_SECONDS=$2; shift 2 ;;
        --fill-rate) FILL_RATE=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --seconds) SECONDS_RUN=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "bench-drain.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ -n "$OUT" ]] || { echo "bench-drain.sh: --out DIR is required" >&2; exit 2; }
case "$PEER" in
    "" | apache-rocketmq | rocketmq-rust) ;;
    *) echo "bench-drain.sh: --peer is apache-rocketmq or rocketmq-rust, not '$PEER'" >&2; exit 2 ;;
esac
for tool in "$BIN" "$LOADGEN"; do
    [[ -x "$tool" ]] || { echo "bench-drain.sh: $tool is not built (cargo build --release)" >&2; exit 2; }
done
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    PIDS=()
}
trap cleanup EXIT

{
    echo "binary $BIN, loadgen $LOADGEN, script at commit $(git -C "$ROOT" rev-parse --short HEAD)"
    echo "nproc $(nproc), kernel $(uname -r), $(date -u +%FT%TZ)"
    echo "fill ${FILL_SECONDS} s at ${FILL_RATE} msgs/s of ${SIZE} B, drain measured ${SECONDS_RUN} s, peer ${PEER:-none}"
} >"$OUT/machine.txt"
mkdir -p "$OUT/floor"
"$LOADGEN" disk-floor --dir "$OUT/floor" --seconds 6 --json-out "$OUT/disk-floor.json" \
    >"$OUT/disk-floor.txt" 2>&1
rm -rf "$OUT/floor"

# The CPU time (clock ticks) process $1 has used.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# start_ringmq DIR: a name server and a broker on a fresh store under DIR; sets BROKER_PID.
start_ringmq() {
    local dir=$1
    "$BIN" namesrv --listen-port 9876 --bind 127.0.0.1 >"$dir/namesrv.log" 2>&1 &
    PIDS+=($!)
    sleep 0.5
    "$BIN" broker -n 127.0.0.1:9876 --brokerIP1=127.0.0.1 --listenPort=10911 \
        --storePathRootDir="$dir/store" >"$dir/broker.log" 2>&1 &
    BROKER_PID=$!
    PIDS+=("$BROKER_PID")
    until "$ROOT/scripts/peer.sh" rpc cluster-has-broker 127.0.0.1:9876 127.0.0.1:10911 2>/dev/null; do
        kill -0 "$BROKER_PID" 2>/dev/null || { echo "bench-drain.sh: ringmq exited; see $dir/broker.log" >&2; exit 1; }
        sleep 0.3
    done
}

# start_peer DIR: the peer on a fresh store under DIR; sets BROKER_PID (the broker's JVM or process).
start_peer() {
    local dir=$1
    "$ROOT/scripts/peer.sh" "$PEER" start --dir "$dir/peer" --fresh >"$dir/peer.log" 2>&1
    BROKER_PID=$(cat "$dir/peer/broker.pid" 2>/dev/null || true)
}

stop_target() {
    local target=$1 dir=$2
    if [[ "$target" == ringmq ]]; then
        cleanup
        rm -rf "$dir/store"
    else
        "$ROOT/scripts/peer.sh" "$PEER" stop --dir "$dir/peer" >>"$dir/peer.log" 2>&1 || true
        rm -rf "$dir/peer/store" "$dir/peer/slave-store"
    fi
}

# run_one TARGET N: fill, drain, summary line.
run_one() {
    local target=$1 n=$2 dir="$OUT/$1-$2"
    rm -rf "$dir"
    mkdir -p "$dir"
    if [[ "$target" == ringmq ]]; then start_ringmq "$dir"; else start_peer "$dir"; fi
    "$ROOT/scripts/peer.sh" rpc create-topic 127.0.0.1:10911 DrainBench 8 >/dev/null
    "$LOADGEN" produce --namesrv 127.0.0.1:9876 --topic DrainBench --queues 8 --mode async \
        --size "$SIZE" --senders 2 --inflight 64 --rate "$FILL_RATE" --seconds "$FILL_SECONDS" \
        --json-out "$dir/fill.json" >"$dir/fill.txt" 2>&1
    local before=0 after=0
    [[ -n "${BROKER_PID:-}" ]] && before=$(cpu_ticks "$BROKER_PID" 2>/dev/null || echo 0)
    "$LOADGEN" consume --namesrv 127.0.0.1:9876 --topic DrainBench --group drain_bench \
        --from earliest --consumers 2 --seconds "$SECONDS_RUN" --json-out "$dir/drain.json" \
        --hgrm-out "$dir/drain.hgrm" --name "$target" >"$dir/drain.txt" 2>&1
    [[ -n "${BROKER_PID:-}" ]] && after=$(cpu_ticks "$BROKER_PID" 2>/dev/null || echo 0)
    python3 - "$target" "$n" "$dir" "$((after - before))" "$(getconf CLK_TCK)" "$SECONDS_RUN" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
target, n, d, ticks, hz, secs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
fill = json.load(open(f"{d}/fill.json"))
drain = json.load(open(f"{d}/drain.json"))
lag = dict(drain.get("consumer_lag", {}))
caught_up = lag.get("final_total_msgs", 1) == 0
cpu = ticks / hz / secs if ticks > 0 else float("nan")
print(f"{target} #{n}: filled {fill['msgs']} msgs ({fill['msgs_per_s']:.0f}/s); drained "
      f"{drain['msgs_per_s']:.0f} msgs/s, {drain['mb_per_s']:.1f} MB/s over {drain['measured_s']:.1f} s; "
      f"broker CPU {cpu:.2f} cores; {'caught up (a lower bound)' if caught_up else 'backlog left ' + str(lag.get('final_total_msgs'))}")
PY
    stop_target "$target" "$dir"
}

for n in $(seq 1 "$RUNS"); do
    run_one ringmq "$n"
    [[ -n "$PEER" ]] && run_one "$PEER" "$n"
done
echo "disk floor: $(cat "$OUT/disk-floor.txt" | tr '\n' ' ')" >>"$OUT/summary.txt"
