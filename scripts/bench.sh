#!/usr/bin/env bash
# The benchmark suite: runs the named workloads with ringmq-loadgen against ringmq and/or a peer
# broker, each started with a fresh store, and writes the results, a markdown summary and
# percentile plots to bench-results/<date>-<commit>/.
#
#   scripts/bench.sh [--peer PEER[,PEER]] [--broker ringmq|none] [--quick]
#                    [--seconds S] [--warmup S] [--only NAME[,NAME...]] [--out DIR]
#
# - Targets: ringmq (unless --broker none) and each peer given (apache-rocketmq, rocketmq-rust),
#   one after the other in that order on the default ports (name server 127.0.0.1:9876, broker
#   127.0.0.1:10911); the summary's ratios are to the first target. While `ringmq broker`
#   refuses to start (no data path yet) the ringmq target is reported as skipped.
# - Workloads (latency runs first, then throughput; the topic has 8 queues):
#     sync-128b     RocketMQ's default benchmark: 128 B, 64 sync senders
#     e2e-128b      128 B produced open loop at $BENCH_E2E_RATE msgs/s and consumed at the tail
#     async-100b    100 B async pipelined, 4 connections x 256 in flight
#     batch-100b    100 B in batches of 32, 2 connections x 32 requests in flight
#     async-1k      1 KiB async, 4 connections x 256 in flight
#     syncflush-1k  1 KiB async, 1,024 in flight, broker restarted in SYNC_FLUSH mode
#     syncmaster-128b  as sync-128b, broker restarted as SYNC_MASTER (ASYNC_FLUSH) with one slave
#                   beside it on the same machine (fresh stores; ringmq: a second `ringmq broker`
#                   on 10921, same --shards; Apache: scripts/peer.sh --role sync-master-with-slave;
#                   rocketmq-rust: skipped, no slave is wired up for it)
#   plus one disk-floor run (4 KiB write+fdatasync, 1 MiB O_DIRECT) on the store's filesystem.
# - Per target and workload: <target>/<workload>.json (summary), .hgrm, .hlog (interval log)
#   and .txt (loadgen's output); ringmq/broker-async.log, broker-sync.log and
#   broker-syncmaster.log (the broker's log of each phase; broker-syncmaster-slave.log the
#   slave's); then summary.md (compare tables with ratios when two targets ran) and plots/*.svg.
# - --quick: 5 s per workload after a 2 s warm-up (smoke run); default 30 s after 5 s.
# - --only: run just the named workloads (an A/B of one workload), in suite order.
# - Binaries: $LOADGEN_BIN and $RINGMQ_BIN if set, else built with cargo --release (in
#   $CARGO_TARGET_DIR, default target/).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly ROOT
readonly PEER_SH="$ROOT/scripts/peer.sh"
readonly NAMESRV_ADDR=127.0.0.1:9876
readonly BROKER_ADDR=127.0.0.1:10911
readonly SLAVE_PORT=10921 # the slave of the syncmaster mode
readonly SLAVE_ADDR=127.0.0.1:$SLAVE_PORT
readonly TOPIC=RingmqBench # not BenchmarkTest: Apache reserves it as a system topic
readonly QUEUES=8
readonly E2E_RATE="${BENCH_E2E_RATE:-2000}"
# Extra seconds a loadgen run may take beyond warm-up + measurement (route lookup, draining).
readonly RUN_SLACK_S=90
readonly RINGMQ_READY_S=30
readonly TICK='`' # markdown code span
readonly TOPIC_READY_S=30

log() { printf 'bench.sh: %s\n' "$*" >&2; }
die() {
    printf 'bench.sh: error: %s\n' "$*" >&2
    exit 1
}

usage() {
    sed -n '2,32p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# The workloads, in run order: name|mode|loadgen arguments|description. The mode is the flush
# type the broker is (re)started with (async, sync), or syncmaster: ASYNC_FLUSH, SYNC_MASTER, with
# one slave.
workloads() {
    cat <<EOF
sync-128b|async|produce --mode sync --size 128 --senders 64|128 B, 64 sync senders (RocketMQ's default benchmark)
e2e-128b|async|e2e --mode async --size 128 --senders 1 --inflight 64 --rate $E2E_RATE --consumers 2|128 B at $E2E_RATE msgs/s open loop, consumed at the tail (produce and end-to-end latency)
async-100b|async|produce --mode async --size 100 --senders 4 --inflight 256|100 B async pipelined, 4 connections x 256 in flight
batch-100b|async|produce --mode batch --size 100 --batch 32 --senders 2 --inflight 32|100 B in batches of 32, 2 connections x 32 requests in flight
async-1k|async|produce --mode async --size 1024 --senders 4 --inflight 256|1 KiB async, 4 connections x 256 in flight
syncflush-1k|sync|produce --mode async --size 1024 --senders 4 --inflight 256|1 KiB async, 1,024 in flight, SYNC_FLUSH broker
syncmaster-128b|syncmaster|produce --mode sync --size 128 --senders 64|128 B, 64 sync senders, SYNC_MASTER (ASYNC_FLUSH) broker with one slave on the same machine
EOF
}

# Every command this script runs that produces results, for the summary.
COMMANDS=()
run_logged() {
    COMMANDS+=("$(printf '%q ' "$@")")
    "$@"
}

# ---------------------------------------------------------------------------------------------
# Binaries.

# The load generator must build; ringmq failing to build only skips the ringmq target.
build_binaries() {
    local target_dir="${CARGO_TARGET_DIR:-$ROOT/target}"
    if [[ -z "${LOADGEN_BIN:-}" ]]; then
        log "building ringmq-loadgen (release, target dir $target_dir)"
        (cd "$ROOT" && cargo build --release --locked -p ringmq-loadgen) ||
            die "cargo build --release -p ringmq-loadgen failed"
    fi
    LOADGEN="${LOADGEN_BIN:-$target_dir/release/ringmq-loadgen}"
    [[ -x "$LOADGEN" ]] || die "no ringmq-loadgen binary at $LOADGEN"
    [[ "$BROKER" == ringmq ]] || return 0
    if [[ -z "${RINGMQ_BIN:-}" ]]; then
        log "building ringmq (release, target dir $target_dir)"
        if ! (cd "$ROOT" && cargo build --release --locked -p ringmq-broker --bin ringmq); then
            log "ringmq does not build; skipping the ringmq target"
            SKIPPED+=("ringmq: skipped, \`cargo build --release -p ringmq-broker\` failed")
            BROKER=none
            return 0
        fi
    fi
    RINGMQ="${RINGMQ_BIN:-$target_dir/release/ringmq}"
    [[ -x "$RINGMQ" ]] || die "no ringmq binary at $RINGMQ"
}

# ---------------------------------------------------------------------------------------------
# Targets: start (fresh store, given flush mode) and stop.

port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# require_free_ports [PORT...]: the name server's, the broker's and any given port are free.
require_free_ports() {
    local port
    for port in 9876 10911 "$@"; do
        if port_open "$port"; then
            die "port $port is in use: stop whatever broker runs there first (scripts/peer.sh NAME status)"
        fi
    done
}

RINGMQ_NAMESRV_PID="" RINGMQ_BROKER_PID="" RINGMQ_SLAVE_PID=""

# ringmq_start FLUSH [ROLE]: returns 0 when ready, 10 when the broker refuses to start (not built
# yet, or a role it does not know). ROLE SYNC_MASTER also starts a slave (ringmq_start_slave).
ringmq_start() {
    local flush_type=$1 role=${2:-} dir="$STORE_ROOT/ringmq"
    local -a role_args=()
    rm -rf "$dir"
    mkdir -p "$dir/store"
    if [[ -n "$role" ]]; then
        role_args=("--brokerRole=$role")
        require_free_ports "$SLAVE_PORT"
    else
        require_free_ports
    fi
    "$RINGMQ" namesrv --listen-port 9876 --bind 127.0.0.1 >"$dir/namesrv.out" 2>&1 </dev/null &
    RINGMQ_NAMESRV_PID=$!
    local deadline=$((SECONDS + RINGMQ_READY_S))
    until port_open 9876; do
        kill -0 "$RINGMQ_NAMESRV_PID" 2>/dev/null || die "ringmq namesrv exited; read $dir/namesrv.out"
        ((SECONDS < deadline)) || die "ringmq namesrv not listening after ${RINGMQ_READY_S} s; read $dir/namesrv.out"
        sleep 0.3
    done
    local -a broker_args=(-n "$NAMESRV_ADDR" --brokerIP1=127.0.0.1 --listenPort=10911
        "--storePathRootDir=$dir/store" "--flushDiskType=$flush_type" "${role_args[@]}")
    "$RINGMQ" broker "${broker_args[@]}" >"$dir/broker.out" 2>&1 </dev/null &
    RINGMQ_BROKER_PID=$!
    deadline=$((SECONDS + RINGMQ_READY_S))
    until "$PEER_SH" rpc cluster-has-broker "$NAMESRV_ADDR" "$BROKER_ADDR" 2>/dev/null; do
        if ! kill -0 "$RINGMQ_BROKER_PID" 2>/dev/null; then
            local status=0
            wait "$RINGMQ_BROKER_PID" || status=$?
            RINGMQ_BROKER_PID=""
            RINGMQ_REFUSAL="$(tail -n 1 "$dir/broker.out")"
            log "ringmq broker exited with status $status: $RINGMQ_REFUSAL"
            ringmq_stop
            return 10
        fi
        if ((SECONDS >= deadline)); then
            ringmq_stop
            die "ringmq broker did not register within ${RINGMQ_READY_S} s; read $dir/broker.out"
        fi
        sleep 0.3
    done
    [[ "$role" == SYNC_MASTER ]] || return 0
    # The master's effective configuration (ringmq does not answer GET_BROKER_CONFIG): the same
    # flags with --print-config, from the same binary, on the same machine.
    "$RINGMQ" broker "${broker_args[@]}" --print-config >"$dir/broker.config" 2>&1 </dev/null ||
        die "ringmq broker --print-config failed; read $dir/broker.config"
    local running
    running=$(sed -n 's/^brokerRole=//p' "$dir/broker.config")
    [[ "$running" == SYNC_MASTER ]] || die "ringmq broker runs with brokerRole=$running, not SYNC_MASTER"
    ringmq_start_slave "$flush_type" "$(sed -n 's/^brokerName=//p' "$dir/broker.config")" \
        "$(sed -n 's/^shards=//p' "$dir/broker.config")"
}

# ringmq_start_slave FLUSH NAME SHARDS: the master's slave, a second `ringmq broker` on SLAVE_PORT
# with its own store under the run's store root (log: slave.out beside broker.out), the master's
# brokerName and shard count; ready once the name server lists it as brokerId 1 of NAME.
ringmq_start_slave() {
    local flush_type=$1 name=$2 shards=$3 dir="$STORE_ROOT/ringmq"
    [[ -n "$name" && "$shards" =~ ^[0-9]+$ ]] ||
        die "no brokerName or shards in the master's configuration ($dir/broker.config)"
    mkdir -p "$dir/slave-store"
    log "ringmq: starting the slave ($SLAVE_ADDR, brokerName $name, $shards shards)"
    "$RINGMQ" broker -n "$NAMESRV_ADDR" --brokerIP1=127.0.0.1 "--listenPort=$SLAVE_PORT" \
        "--storePathRootDir=$dir/slave-store" "--flushDiskType=$flush_type" \
        --brokerRole=SLAVE --brokerId=1 "--brokerName=$name" "--shards=$shards" \
        >"$dir/slave.out" 2>&1 </dev/null &
    RINGMQ_SLAVE_PID=$!
    local deadline=$((SECONDS + RINGMQ_READY_S)) addr
    while true; do
        addr=$("$PEER_SH" rpc cluster-broker-id "$NAMESRV_ADDR" "$name" 1 2>/dev/null) || addr=""
        [[ "$addr" == "$SLAVE_ADDR" ]] && break
        if ! kill -0 "$RINGMQ_SLAVE_PID" 2>/dev/null; then
            local status=0
            wait "$RINGMQ_SLAVE_PID" || status=$?
            RINGMQ_SLAVE_PID=""
            ringmq_stop
            die "ringmq slave exited with status $status: $(tail -n 1 "$dir/slave.out")"
        fi
        if ((SECONDS >= deadline)); then
            ringmq_stop
            die "ringmq slave not listed as brokerId 1 of $name within ${RINGMQ_READY_S} s; read $dir/slave.out"
        fi
        sleep 0.3
    done
    log "ringmq: slave registered as brokerId 1 of $name"
    # Then until every shard's replicator logs "replicating from the master" (450b43d and before
    # log it once connected, before the first pull; from 39ca018 on, once the master answered that
    # pull), so the master has the slave from the first send on.
    local shard
    for ((shard = 0; shard < shards; shard++)); do
        until grep -q "replicating from the master shard=$shard " "$dir/slave.out"; do
            if ! kill -0 "$RINGMQ_SLAVE_PID" 2>/dev/null || ((SECONDS >= deadline)); then
                ringmq_stop
                die "ringmq slave's shard $shard is not replicating within ${RINGMQ_READY_S} s; read $dir/slave.out"
            fi
            sleep 0.3
        done
    done
    log "ringmq: slave replicating on its $shards shards"
}

# stop_child NAME PID: SIGTERM, bounded wait, then SIGKILL.
stop_child() {
    local name=$1 pid=$2 deadline=$((SECONDS + 30))
    [[ -n "$pid" ]] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            log "$name (pid $pid) still running after 30 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    wait "$pid" 2>/dev/null || true
}

ringmq_stop() {
    stop_child "ringmq slave" "$RINGMQ_SLAVE_PID"
    stop_child "ringmq broker" "$RINGMQ_BROKER_PID"
    stop_child "ringmq namesrv" "$RINGMQ_NAMESRV_PID"
    RINGMQ_SLAVE_PID="" RINGMQ_BROKER_PID="" RINGMQ_NAMESRV_PID=""
}

# mode_unsupported TARGET MODE: prints why TARGET cannot run MODE (exit 0), or exits 1 when it can.
mode_unsupported() {
    case "$1:$2" in
        rocketmq-rust:syncmaster)
            echo "scripts/peer.sh starts no slave for rocketmq-rust (not wired up; whether rocketmq-rust 1.0.0's master/slave replication works was not tried)"
            ;;
        *) return 1 ;;
    esac
}

# target_start TARGET MODE(async|sync|syncmaster)
target_start() {
    local target=$1 flush=$2
    log "$target: starting with a fresh store, $flush mode"
    case "$target" in
        ringmq)
            case "$flush" in
                async) ringmq_start ASYNC_FLUSH ;;
                sync) ringmq_start SYNC_FLUSH ;;
                syncmaster) ringmq_start ASYNC_FLUSH SYNC_MASTER ;;
            esac
            ;;
        *)
            stop_running_peer "$target"
            local -a peer_args=(--flush "$flush")
            if [[ "$flush" == syncmaster ]]; then
                peer_args=(--flush async --role sync-master-with-slave)
                require_free_ports "$SLAVE_PORT"
            else
                require_free_ports
            fi
            run_logged "$PEER_SH" "$target" start "${peer_args[@]}" --fresh
            PEER_STARTED=$target
            # Keep the configuration it ran with beside its results.
            local conf="${RINGMQ_PEERS_CACHE:-$ROOT/bench-results/.peers}/$target/run/conf"
            [[ -d "$conf" ]] && cp -r "$conf" "$OUT/$target/conf-$flush"
            ;;
    esac
}

# stop_running_peer PEER: a peer someone left running (with the default dir) is stopped, because
# every target starts with a fresh store and the targets share the ports.
stop_running_peer() {
    local status=0
    "$PEER_SH" "$1" status >/dev/null 2>&1 || status=$?
    if ((status != 3)); then
        log "$1 is already running; stopping it (it is restarted with a fresh store for its turn)"
        "$PEER_SH" "$1" stop
    fi
}

# target_stop TARGET [FLUSH]: for ringmq, its log of the FLUSH phase (and its slave's) is kept
# beside the results (the next start wipes its directory).
target_stop() {
    local target=$1 flush=${2:-}
    case "$target" in
        ringmq)
            ringmq_stop
            [[ -z "$flush" ]] || cp "$STORE_ROOT/ringmq/broker.out" "$OUT/ringmq/broker-$flush.log" 2>/dev/null || true
            if [[ -n "$flush" && -f "$STORE_ROOT/ringmq/slave.out" ]]; then
                cp "$STORE_ROOT/ringmq/slave.out" "$OUT/ringmq/broker-$flush-slave.log" 2>/dev/null || true
            fi
            ;;
        *)
            "$PEER_SH" "$target" stop
            PEER_STARTED=""
            ;;
    esac
}

# target_alive TARGET: the broker still answers the name server's cluster view.
target_alive() {
    "$PEER_SH" rpc cluster-has-broker "$NAMESRV_ADDR" "$BROKER_ADDR" 2>/dev/null
}

# create_topic: TOPIC with QUEUES queues, then wait until the name server's route shows them.
create_topic() {
    run_logged "$PEER_SH" rpc create-topic "$BROKER_ADDR" "$TOPIC" "$QUEUES" ||
        die "creating topic $TOPIC on $BROKER_ADDR failed"
    local deadline=$((SECONDS + TOPIC_READY_S)) queues
    while true; do
        queues=$("$PEER_SH" rpc topic-queues "$NAMESRV_ADDR" "$TOPIC")
        ((queues >= QUEUES)) && return 0
        ((SECONDS < deadline)) ||
            die "topic $TOPIC has $queues write queues in the name server's route after ${TOPIC_READY_S} s (wanted $QUEUES)"
        sleep 0.5
    done
}

# ---------------------------------------------------------------------------------------------
# Workloads.

# run_workload TARGET NAME ARGS: one loadgen run; a failure is recorded, not fatal.
run_workload() {
    local target=$1 name=$2 args=$3 dir="$OUT/$1" base
    base="$dir/$name"
    local -a argv
    read -r -a argv <<<"$args"
    argv+=(--namesrv "$NAMESRV_ADDR" --topic "$TOPIC" --queues "$QUEUES"
        --seconds "$RUN_SECONDS" --warmup "$WARMUP_SECONDS"
        --json-out "$base.json" --hgrm-out "$base.hgrm" --hlog-out "$base.hlog" --name "$target")
    [[ "${argv[0]}" == e2e ]] && argv+=(--consumer-group "bench_e2e_${target//-/_}")
    log "$target/$name: ringmq-loadgen ${argv[*]}"
    local status=0
    run_logged timeout --kill-after=10 "$((RUN_SECONDS + WARMUP_SECONDS + RUN_SLACK_S))" \
        "$LOADGEN" "${argv[@]}" >"$base.txt" 2>&1 </dev/null || status=$?
    if ((status != 0)); then
        log "$target/$name FAILED (status $status); last lines of $base.txt:"
        tail -n 5 "$base.txt" >&2 || true
        FAILED+=("$target/$name (status $status, see $target/$name.txt)")
        rm -f "$base.json"
    else
        grep -E '^(msgs/s|Send TPS)' "$base.txt" | sed "s|^|  $target/$name: |" >&2 || true
    fi
    if ! target_alive; then
        FAILED+=("$target: broker gone after $name")
        die "$target: the broker no longer answers after $name; read its log"
    fi
}

# run_target TARGET: every workload, restarting the broker when the mode changes; a workload whose
# mode the target cannot run is reported as skipped.
run_target() {
    local target=$1 current="" name flush args description status why
    mkdir -p "$OUT/$target"
    local line
    for line in "${WORKLOADS[@]}"; do
        IFS='|' read -r name flush args description <<<"$line"
        if why=$(mode_unsupported "$target" "$flush"); then
            SKIPPED+=("$target/$name: skipped, $why")
            SKIPPED_RUNS+=("$target/$name")
            log "$target/$name: skipped ($why)"
            continue
        fi
        if [[ "$flush" != "$current" ]]; then
            [[ -n "$current" ]] && target_stop "$target" "$current"
            current=""
            status=0
            target_start "$target" "$flush" || status=$?
            if ((status == 10)) && [[ "$flush" == syncmaster ]]; then
                SKIPPED+=("ringmq/$name: skipped, \`ringmq broker --brokerRole=SYNC_MASTER\` said: ${RINGMQ_REFUSAL#ringmq: }")
                SKIPPED_RUNS+=("$target/$name")
                log "ringmq: no SYNC_MASTER, $name skipped"
                continue
            fi
            if ((status == 10)); then
                SKIPPED+=("ringmq: no broker yet, skipped (\`ringmq broker\` said: ${RINGMQ_REFUSAL#ringmq: })")
                log "ringmq: no broker yet, skipped"
                rmdir "$OUT/$target" 2>/dev/null || true
                return 0
            fi
            ((status == 0)) || die "$target: start failed (status $status)"
            create_topic
            current=$flush
        fi
        run_workload "$target" "$name" "$args"
    done
    [[ -z "$current" ]] || target_stop "$target" "$current"
    RAN+=("$target")
}

# was_skipped TARGET/NAME
was_skipped() {
    local run
    for run in "${SKIPPED_RUNS[@]}"; do [[ "$run" == "$1" ]] && return 0; done
    return 1
}

# ---------------------------------------------------------------------------------------------
# Summary.

machine_info() {
    local cpu mem fs
    cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
    mem=$(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')
    fs=$(df -hT "$STORE_ROOT" 2>/dev/null | awk 'NR == 2 {print $1 " (" $2 ", " $3 ")"}')
    printf -- '- machine: %s cores (%s), %s RAM, kernel %s\n' "$(nproc)" "${cpu:-unknown CPU}" \
        "${mem:-?}" "$(uname -r)"
    printf -- '- store filesystem: %s at %s\n' "${fs:-?}" "$STORE_ROOT"
    printf -- '- java: %s\n' "$(java -version 2>&1 | head -n 1 || echo none)"
    printf -- '- loadgen and brokers share the machine (no CPU pinning); loopback TCP\n'
    if printf '%s\n' "${WORKLOADS[@]}" | grep -q '^[^|]*|syncmaster|'; then
        printf -- '- syncmaster: the slave runs on the same machine and cores as its master and loadgen\n'
    fi
}

# row TARGET WORKLOAD FILE: one markdown table row from a JSON summary.
row() {
    jq -r --arg t "$1" --arg w "$2" '
        def us: if . == null then "-" else (. | round | tostring) end;
        "| \($t) | \($w) | \(.msgs_per_s | round) | \(.mb_per_s * 100 | round / 100) | \(.errors) "
        + "| \(.p50_us | us) | \(.p99_us | us) | \(.p999_us | us) | \(.max_us | us) |"
        + (if .e2e then " e2e: p50 \(.e2e.p50_us | us), p99 \(.e2e.p99_us | us), max \(.e2e.max_us | us); consumed \(.e2e.msgs_consumed)" else "" end)
        + (if (.errors_by_code // {} | length) > 0
           then " errors by code: \(.errors_by_code | to_entries
                | map("\(.key)\({"10": " FLUSH_DISK_TIMEOUT", "11": " SLAVE_NOT_AVAILABLE",
                                   "12": " FLUSH_SLAVE_TIMEOUT"}[.key] // "") × \(.value)")
                | join(", "))"
           else "" end)
        + " |"
    ' "$3"
}

write_summary() {
    local summary="$OUT/summary.md" name flush args description target file line
    mkdir -p "$OUT/plots"
    {
        printf '# Benchmark results: %s\n\n' "$(basename "$OUT")"
        printf -- '- date: %s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
        printf -- '- commit: %s\n' "$COMMIT"
        printf -- '- command: %s%s%s\n' "$TICK" "$INVOCATION" "$TICK"
        printf -- '- runs: %s s measured after %s s warm-up each%s\n' "$RUN_SECONDS" "$WARMUP_SECONDS" \
            "$([[ "$QUICK" == 1 ]] && echo ' (--quick smoke run: short, noisy)')"
        machine_info
        printf -- '- targets run: %s\n' "${RAN[*]:-none}"
        for target in "${RAN[@]}"; do
            [[ "$target" == ringmq ]] && continue
            local -a confs=()
            for file in "$OUT/$target"/conf-*; do [[ -d "$file" ]] && confs+=("$target/${file##*/}/"); done
            ((${#confs[@]} > 0)) || continue
            printf -- '- %s: configuration files in %s (written by scripts/peer.sh)\n' "$target" "${confs[*]}"
        done
        for target in "${SKIPPED[@]}"; do printf -- '- %s\n' "$target"; done
        for target in "${FAILED[@]}"; do printf -- '- FAILED: %s\n' "$target"; done
        printf '\n## Disk floor\n\n'
        if [[ -f "$OUT/disk-floor.json" ]]; then
            printf '| 4 KiB write+fdatasync p50 µs | p99 µs | max µs | fdatasyncs/s | 1 MiB O_DIRECT write MB/s |\n'
            printf '|---:|---:|---:|---:|---:|\n'
            jq -r '"| \(.fdatasync_4k_p50_us | round) | \(.fdatasync_4k_p99_us | round) | \(.fdatasync_4k_max_us | round) | \(.fdatasync_4k_per_s | round) | \(.direct_write_1m_mb_per_s | round) |"' \
                "$OUT/disk-floor.json"
        else
            printf 'not measured (see disk-floor.txt)\n'
        fi
        printf '\n## All workloads\n\n'
        printf 'Latency in µs per message (send to response; for batches, per message of the batch).\n\n'
        printf '| target | workload | msgs/s | MB/s | errors | p50 | p99 | p99.9 | max | notes |\n'
        printf '|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n'
        for line in "${WORKLOADS[@]}"; do
            IFS='|' read -r name flush args description <<<"$line"
            for target in "${RAN[@]}"; do
                file="$OUT/$target/$name.json"
                if [[ -f "$file" ]]; then
                    row "$target" "$name" "$file"
                elif was_skipped "$target/$name"; then
                    printf '| %s | %s | skipped | | | | | | | see above |\n' "$target" "$name"
                else
                    printf '| %s | %s | failed | | | | | | | see %s/%s.txt |\n' "$target" "$name" "$target" "$name"
                fi
            done
        done
        printf '\n## Per workload\n'
        for line in "${WORKLOADS[@]}"; do
            IFS='|' read -r name flush args description <<<"$line"
            local -a files=()
            for target in "${RAN[@]}"; do
                [[ -f "$OUT/$target/$name.json" ]] && files+=("$OUT/$target/$name.json")
            done
            ((${#files[@]} > 0)) || continue
            printf '\n### %s\n\n%s. %sringmq-loadgen %s%s\n\n' "$name" "$description" "$TICK" "$args" "$TICK"
            run_logged "$LOADGEN" compare --markdown "${files[@]}"
            run_logged "$LOADGEN" plot "${files[@]}" --out "$OUT/plots/$name.svg" \
                --title "$name: latency by percentile" >/dev/null
            printf '\n![%s](plots/%s.svg)\n' "$name" "$name"
        done
        for target in "${RAN[@]}"; do
            local -a hgrms=()
            for file in "$OUT/$target"/*.hgrm; do [[ -f "$file" ]] && hgrms+=("$file"); done
            ((${#hgrms[@]} > 0)) || continue
            run_logged "$LOADGEN" plot "${hgrms[@]}" --out "$OUT/plots/$target-all.svg" \
                --title "$target: every workload" >/dev/null
            printf '\n### %s, every workload\n\n![%s](plots/%s-all.svg)\n' "$target" "$target" "$target"
        done
        printf '\n## Commands\n\n```\n'
        printf '%s\n' "${COMMANDS[@]}" | sed "s|$ROOT/||g"
        printf '```\n\nTotal wall time: %s s.\n' "$((SECONDS - START_SECONDS))"
    } >"$summary"
    log "summary: $summary"
}

# ---------------------------------------------------------------------------------------------

cleanup() {
    ringmq_stop
    if [[ -n "${PEER_STARTED:-}" ]]; then
        log "stopping $PEER_STARTED (interrupted run)"
        "$PEER_SH" "$PEER_STARTED" stop || true
    fi
}

main() {
    INVOCATION="scripts/bench.sh $*"
    PEER="" BROKER=ringmq QUICK=0 OUT="" RUN_SECONDS="" WARMUP_SECONDS="" ONLY=""
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --peer) PEER=${2:?--peer needs a name}; shift 2 ;;
            --broker) BROKER=${2:?--broker needs ringmq or none}; shift 2 ;;
            --quick) QUICK=1; shift ;;
            --seconds) RUN_SECONDS=${2:?}; shift 2 ;;
            --warmup) WARMUP_SECONDS=${2:?}; shift 2 ;;
            --out) OUT=${2:?}; shift 2 ;;
            --only) ONLY=${2:?--only needs workload names}; shift 2 ;;
            -h | --help) usage ;;
            *) die "unknown option '$1'" ;;
        esac
    done
    local -a PEERS=()
    [[ -z "$PEER" ]] || IFS=, read -r -a PEERS <<<"$PEER"
    local peer
    for peer in "${PEERS[@]}"; do
        case "$peer" in
            apache-rocketmq | rocketmq-rust) ;;
            *) die "unknown peer '$peer' (apache-rocketmq or rocketmq-rust)" ;;
        esac
    done
    case "$BROKER" in ringmq | none) ;; *) die "--broker must be ringmq or none" ;; esac
    [[ -n "$PEER" || "$BROKER" == ringmq ]] || die "nothing to run: --broker none and no --peer"
    if [[ "$QUICK" == 1 ]]; then
        RUN_SECONDS=${RUN_SECONDS:-5} WARMUP_SECONDS=${WARMUP_SECONDS:-2}
    else
        RUN_SECONDS=${RUN_SECONDS:-30} WARMUP_SECONDS=${WARMUP_SECONDS:-5}
    fi
    local tool
    for tool in jq python3 timeout; do
        command -v "$tool" >/dev/null || die "'$tool' is not installed"
    done
    START_SECONDS=$SECONDS
    COMMIT="$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
    [[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]] && COMMIT+="-dirty"
    OUT="${OUT:-$ROOT/bench-results/$(date -u +%Y-%m-%d)-$COMMIT}"
    mkdir -p "$OUT"
    OUT="$(cd "$OUT" && pwd)"
    STORE_ROOT="${BENCH_STORE_DIR:-$ROOT/bench-results/.stores}"
    mkdir -p "$STORE_ROOT"
    RAN=() SKIPPED=() SKIPPED_RUNS=() FAILED=() PEER_STARTED=""
    mapfile -t WORKLOADS < <(workloads)
    if [[ -n "$ONLY" ]]; then
        local -a kept=() wanted
        local line name
        IFS=, read -r -a wanted <<<"$ONLY"
        for name in "${wanted[@]}"; do
            grep -q "^$name|" < <(workloads) || die "unknown workload '$name' in --only"
        done
        for line in "${WORKLOADS[@]}"; do
            for name in "${wanted[@]}"; do
                [[ "${line%%|*}" == "$name" ]] && kept+=("$line")
            done
        done
        WORKLOADS=("${kept[@]}")
    fi
    trap cleanup EXIT
    trap 'exit 130' INT TERM

    build_binaries
    [[ -n "$PEER" || "$BROKER" == ringmq ]] || die "nothing left to run"
    log "results in $OUT"
    for peer in "${PEERS[@]}"; do stop_running_peer "$peer"; done
    local floor_s=10
    [[ "$QUICK" == 1 ]] && floor_s=4
    log "disk floor on $STORE_ROOT (${floor_s} s)"
    run_logged timeout 120 "$LOADGEN" disk-floor --dir "$STORE_ROOT" --seconds "$floor_s" \
        --json-out "$OUT/disk-floor.json" >"$OUT/disk-floor.txt" 2>&1 ||
        log "disk-floor failed; see $OUT/disk-floor.txt"

    local target
    local -a targets=()
    [[ "$BROKER" == ringmq ]] && targets+=(ringmq)
    targets+=("${PEERS[@]}")
    for target in "${targets[@]}"; do
        rm -rf "${OUT:?}/$target"
        run_target "$target"
    done
    write_summary
    log "done in $((SECONDS - START_SECONDS)) s; ${#FAILED[@]} failure(s)"
    ((${#FAILED[@]} == 0))
}

main "$@"
