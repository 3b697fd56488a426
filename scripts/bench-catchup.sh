#!/usr/bin/env bash
# A fresh slave catching up with a loaded master: how fast it copies, and
# what it costs the master's senders meanwhile. Or (--consumer-at) a
# consumer catching up from the oldest message. A benchmark, not a test.
#
#   scripts/bench-catchup.sh [--bin RINGMQ] [--loadgen LOADGEN] [--fill-seconds 4]
#                            [--slave-at 5 | --no-slave | --consumer-at S] [--drop-caches]
#                            [--seconds 24] --out DIR
#
# One run: a name server and a 2-shard ASYNC_MASTER (ports 9876, 10911) on a
# fresh store, filled by FILL seconds of batched 4 KiB sends; then 64 sync
# senders of 128 B for SECONDS (3 s warm-up), and a fresh SLAVE (port 10921)
# started SLAVE_AT seconds into it (--no-slave: none, the baseline). Every
# 0.25 s the master's and the slave's commitLogMaxOffset (shard 1's, the
# highest) go to DIR/progress.txt, the master's major page faults while
# the senders run to DIR/major-faults.txt. DIR/summary.txt says how many bytes the
# slave copied in how long, and how fast the master's log grew before,
# during and after the copy, next to the load generator's figures and the
# disk floor measured first. Master, slave and load generator share this
# machine's CPUs and disk. With --consumer-at, no slave: S seconds into the
# senders, `ringmq-loadgen consume --from earliest` (2 threads, group
# CatchUp) pulls the whole backlog until the senders stop; its figures go
# to DIR/consumer.json and the summary. --drop-caches (root): after the
# fill, the page cache's clean pages are dropped (/proc/sys/vm/drop_caches),
# so the ConsumeQueue pages a catching-up consumer reads, which the broker
# has not mapped in yet, come from the disk (the CommitLog is read with
# O_DIRECT either way).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/target/release/ringmq
LOADGEN=$ROOT/target/release/ringmq-loadgen
FILL=4 SLAVE_AT=5 CONSUMER_AT=-1 SECONDS_RUN=24 OUT="" DROP_CACHES=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --bin) BIN=$2; shift 2 ;;
        --loadgen) LOADGEN=$2; shift 2 ;;
        --fill-seconds) FILL=$2; shift 2 ;;
        --slave-at) SLAVE_AT=$2; shift 2 ;;
        --seconds) SECONDS_RUN=$2; shift 2 ;;
        --no-slave) SLAVE_AT=-1; shift ;;
        --consumer-at) CONSUMER_AT=$2; SLAVE_AT=-1; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --drop-caches) DROP_CACHES=1; shift ;;
        *) echo "bench-catchup.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ -n "$OUT" ]] || { echo "bench-catchup.sh: --out DIR is required" >&2; exit 2; }
for tool in "$BIN" "$LOADGEN"; do
    [[ -x "$tool" ]] || { echo "bench-catchup.sh: $tool is not built (cargo build --release)" >&2; exit 2; }
done
mkdir -p "$OUT"
STORE=$OUT/store
rm -rf "$STORE"
mkdir -p "$STORE/master" "$STORE/slave"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$STORE"
}
# A broker left from an interrupted run would take the ports (and fill the
# disk through a store this script removed).
if pgrep -f -- "--storePathRootDir=.*/store/(master|slave)" >/dev/null; then
    echo "bench-catchup.sh: a broker of an earlier run is still up (pgrep -f storePathRootDir)" >&2
    exit 2
fi
trap cleanup EXIT

{
    echo "binary $BIN, script at commit $(git -C "$ROOT" rev-parse --short HEAD)"
    echo "nproc $(nproc), kernel $(uname -r), $(date -u +%FT%TZ)"
    echo "fill ${FILL} s, senders ${SECONDS_RUN} s, slave at ${SLAVE_AT} s, consumer at ${CONSUMER_AT} s, drop caches ${DROP_CACHES}"
} >"$OUT/machine.txt"
"$LOADGEN" disk-floor --dir "$STORE" --seconds 6 --json-out "$OUT/disk-floor.json" \
    >"$OUT/disk-floor.txt" 2>&1

"$BIN" namesrv --listen-port 9876 --bind 127.0.0.1 >"$OUT/namesrv.log" 2>&1 &
PIDS+=($!)
sleep 0.5
# exec: the recorded pid is the broker's own, not a subshell's.
broker() {
    exec "$BIN" broker -n 127.0.0.1:9876 --brokerIP1=127.0.0.1 --shards=2 "$@"
}
broker --listenPort=10911 --storePathRootDir="$STORE/master" --brokerRole=ASYNC_MASTER \
    >"$OUT/master.log" 2>&1 &
PIDS+=($!)
until "$ROOT/scripts/peer.sh" rpc cluster-has-broker 127.0.0.1:9876 127.0.0.1:10911 2>/dev/null; do
    sleep 0.3
done
"$ROOT/scripts/peer.sh" rpc create-topic 127.0.0.1:10911 RingmqBench 8 >/dev/null
produce() {
    "$LOADGEN" produce --namesrv 127.0.0.1:9876 --topic RingmqBench --queues 8 "$@"
}
produce --mode batch --size 4096 --batch 16 --senders 2 --inflight 8 --seconds "$FILL" \
    --warmup 0 --json-out "$OUT/fill.json" >"$OUT/fill.txt" 2>&1
sleep 2
if [[ "$DROP_CACHES" == 1 ]]; then
    sync
    echo 1 >/proc/sys/vm/drop_caches
fi

python3 - "$OUT/progress.txt" <<'PY' &
import json, re, socket, struct, sys, time

def max_offset(port):
    header = json.dumps({"code": 28, "extFields": {}, "flag": 0, "language": "JAVA", "opaque": 1,
                         "serializeTypeCurrentRPC": "JSON", "version": 479}).encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            conn.sendall(struct.pack(">II", 4 + len(header), len(header)) + header)
            data = b""
            while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
                chunk = conn.recv(1 << 16)
                if not chunk:
                    return None
                data += chunk
        found = re.search(rb'"commitLogMaxOffset"\s*:\s*"(\d+)"', data)
        # The shard-local part: the top byte holds the shard.
        return int(found.group(1)) & ((1 << 56) - 1) if found else None
    except OSError:
        return None

start = time.time()
with open(sys.argv[1], "w") as out:
    while True:
        out.write(f"{time.time() - start:.2f} {max_offset(10911)} {max_offset(10921)}\n")
        out.flush()
        time.sleep(0.25)
PY
PIDS+=($!)
if [[ "$SLAVE_AT" -ge 0 ]]; then
    (
        sleep "$SLAVE_AT"
        broker --listenPort=10921 --storePathRootDir="$STORE/slave" --brokerRole=SLAVE --brokerId=1
    ) >"$OUT/slave.log" 2>&1 &
    PIDS+=($!)
fi
if [[ "$CONSUMER_AT" -ge 0 ]]; then
    (
        sleep "$CONSUMER_AT"
        exec "$LOADGEN" consume --namesrv 127.0.0.1:9876 --topic RingmqBench --group CatchUp \
            --from earliest --consumers 2 --seconds $((SECONDS_RUN - CONSUMER_AT)) --warmup 0 \
            --json-out "$OUT/consumer.json"
    ) >"$OUT/consumer.txt" 2>&1 &
    PIDS+=($!)
fi
# The master's major page faults (field 12 of /proc/PID/stat): reads of
# mapped files (ConsumeQueue, index) that waited for the disk.
MASTER_PID=${PIDS[1]}
major_faults() { awk '{ print $12 }' "/proc/$MASTER_PID/stat"; }
FAULTS_BEFORE=$(major_faults)
produce --mode sync --size 128 --senders 64 --seconds "$SECONDS_RUN" --warmup 3 \
    --json-out "$OUT/senders.json" --hlog-out "$OUT/senders.hlog" >"$OUT/senders.txt" 2>&1
echo "master major faults during the senders: $(($(major_faults) - FAULTS_BEFORE))" \
    >"$OUT/major-faults.txt"
sleep 1

python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
machine = open(f"{out}/machine.txt").read().strip()
print(machine)
try:
    floor = json.load(open(f"{out}/disk-floor.json"))
    print("disk floor: " + ", ".join(f"{k}={v}" for k, v in floor.items() if not isinstance(v, (dict, list))))
except (OSError, ValueError):
    print("disk floor: not measured (see disk-floor.txt)")
fill = json.load(open(f"{out}/fill.json"))
print(f"fill: {fill.get('msgs_per_s', 0):,.0f} msgs/s of 4 KiB")
senders = json.load(open(f"{out}/senders.json"))
print("senders: " + " ".join(f"{k}={senders.get(k)}" for k in
                              ["msgs_per_s", "p50_us", "p99_us", "p999_us", "max_us"]))
try:
    consumer = json.load(open(f"{out}/consumer.json"))
    print("consumer: " + " ".join(f"{k}={consumer.get(k)}" for k in
                                   ["msgs_per_s", "mb_per_s", "p50_us", "p99_us", "max_us"]))
except (OSError, ValueError):
    pass
rows = []
for line in open(f"{out}/progress.txt"):
    t, m, s = line.split()
    rows.append((float(t), None if m == "None" else int(m), None if s == "None" else int(s)))
master = [r for r in rows if r[1] is not None]
rate = lambda a, b: (b[1] - a[1]) / (b[0] - a[0]) / 1e6 if b[0] > a[0] else 0.0
first = next((i for i, r in enumerate(rows) if r[2] is not None), None)
if first is None:
    print(f"no slave: the master's shard 1 grew {rate(master[0], master[-1]):.2f} MB/s")
    sys.exit(0)
t0, m0, s0 = rows[first]
done = next((r for r in rows[first:] if r[1] is not None and r[2] is not None
             and r[2] >= r[1] - 2_000_000), None)
before = [r for r in master if r[0] < t0]
growth = f"before {rate(before[0], before[-1]):.2f} MB/s, " if len(before) > 1 else ""
if done is None:
    print(f"the slave did not catch up; the master's shard 1 grew {growth}"
          f"{rate(rows[first], master[-1]):.2f} MB/s after the slave started")
    sys.exit(0)
t1, m1, s1 = done
print(f"catch-up: shard 1 copied {s1 - s0:,} bytes in {t1 - t0:.1f} s "
      f"({(s1 - s0) / (t1 - t0) / 1e6:.0f} MB/s)")
print(f"the master's shard 1 grew {growth}{rate(rows[first], done):.2f} MB/s during, "
      f"{rate(done, master[-1]):.2f} MB/s after")
PY
