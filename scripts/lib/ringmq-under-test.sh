# Sourced by the end-to-end test scripts (rust-client-tests.sh, go-client-tests.sh): runs the
# ringmq broker under test on free loopback ports with a fresh store.
#
# The sourcing script sets before calling these: root, script_name (for messages), port_min and
# port_max (its own port range), boot_timeout_s, stop_timeout_s, logs, and bin (empty: the
# debug binary is built). launch_broker_under_test sets listen_port, namesrv_port, namesrv,
# broker_address, store, broker_log and broker_pid; stop_broker clears broker_pid;
# finish_broker_under_test ends the script. An EXIT trap kills a broker still running. The broker runs with 64 MiB segments,
# --transactionCheckInterval=1000 --transactionTimeOut=1000 (check-backs within seconds) and
# --enablePropertyFilter=true (SQL92 selectors).

broker_pid=""
store=""
cleanup() {
    if [[ -n "$broker_pid" ]] && kill -0 "$broker_pid" 2>/dev/null; then
        kill -KILL "$broker_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT

# Prints two free loopback TCP ports of [port_min, port_max], checked by binding them, with a
# spare port on either side of the first (RocketMQ-style brokers may use listenPort-2 and +1).
free_ports() {
    python3 - "$port_min" "$port_max" <<'PY'
import random, socket, sys
low, high = int(sys.argv[1]), int(sys.argv[2])
def free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
candidates = list(range(low + 2, high - 2, 4))
random.shuffle(candidates)
for port in candidates:
    if all(free(p) for p in (port - 2, port - 1, port, port + 1, port + 2)):
        print(port, port + 2)
        sys.exit(0)
sys.exit(1)
PY
}

# start_broker: starts ringmq on $listen_port/$namesrv_port over $store, waits for its boot line.
start_broker() {
    echo "==> $bin broker on 127.0.0.1:$listen_port, name server $namesrv, store $store" >&2
    # Only lines after this one count: after a restart the log already holds a boot line.
    local skip
    skip="$(wc -l <"$broker_log")"
    "$bin" broker "--listenPort=$listen_port" "--namesrvListenPort=$namesrv_port" \
        "--storePathRootDir=$store" --brokerIP1=127.0.0.1 --brokerName=broker-a \
        --mapedFileSizeCommitLog=67108864 \
        --transactionCheckInterval=1000 --transactionTimeOut=1000 --enablePropertyFilter=true \
        >>"$broker_log" 2>&1 &
    broker_pid=$!
    for _ in $(seq 1 $((boot_timeout_s * 5))); do
        if tail -n "+$((skip + 1))" "$broker_log" |
            grep -m1 "boot success. serializeType=JSON and name server is" >&2; then
            return 0
        fi
        kill -0 "$broker_pid" 2>/dev/null || break
        sleep 0.2
    done
    tail -n 20 "$broker_log" >&2 || true
    die "ringmq did not print its boot line within ${boot_timeout_s}s (log: $broker_log)"
}

# stop_broker: SIGTERM, then expects exit status 0 within stop_timeout_s; returns 1 otherwise.
stop_broker() {
    echo "==> stopping ringmq (SIGTERM)" >&2
    kill -TERM "$broker_pid" 2>/dev/null || true
    local broker_status=""
    for _ in $(seq 1 $((stop_timeout_s * 5))); do
        if ! kill -0 "$broker_pid" 2>/dev/null; then
            broker_status=0
            wait "$broker_pid" || broker_status=$?
            break
        fi
        sleep 0.2
    done
    if [[ -z "$broker_status" ]]; then
        echo "$script_name: ringmq did not exit within ${stop_timeout_s}s of SIGTERM" >&2
        return 1
    fi
    broker_pid=""
    if [[ "$broker_status" -ne 0 ]]; then
        echo "$script_name: ringmq exited with status $broker_status after SIGTERM" >&2
        return 1
    fi
}


# log_dir DIR LABEL: prints DIR after creating it, or a fresh /tmp/ringmq-LABEL-tests.XXXXXX.
log_dir() {
    if [[ -z "$1" ]]; then
        mktemp -d "/tmp/ringmq-$2-tests.XXXXXX"
    else
        mkdir -p "$1" && printf '%s\n' "$1"
    fi
}

# launch_broker_under_test LABEL: builds ringmq unless bin names one, picks free ports and a
# fresh store (/tmp/ringmq-LABEL-store.XXXXXX), starts the broker and waits for its boot line.
launch_broker_under_test() {
    if [[ -z "$bin" ]]; then
        echo "==> cargo build -p ringmq-broker --bin ringmq" >&2
        cargo build -p ringmq-broker --bin ringmq --locked
        bin="${CARGO_TARGET_DIR:-$root/target}/debug/ringmq"
    fi
    [[ -x "$bin" ]] || die "$bin is not an executable ringmq binary"
    read -r listen_port namesrv_port < <(free_ports) || die "no free ports in $port_min-$port_max"
    namesrv="127.0.0.1:$namesrv_port"
    broker_address="127.0.0.1:$listen_port"
    store="$(mktemp -d "/tmp/ringmq-$1-store.XXXXXX")"
    broker_log="$logs/ringmq-broker.log"
    : >"$broker_log"
    start_broker
}

# finish_broker_under_test STATUS KEEP_LOGS LOG_FILES PASSED: stops the broker if it still runs (a
# failed stop fails the run). On failure names the logs (LOG_FILES says what the script's own
# files hold) and exits with the status; otherwise removes the store, and the logs unless
# KEEP_LOGS is non-empty, and prints PASSED.
finish_broker_under_test() {
    local status=$1
    if [[ -n "$broker_pid" ]]; then
        stop_broker || status=1
    fi
    if [[ $status -ne 0 ]]; then
        echo "$script_name: FAILED (status $status); logs in $logs" \
            "($3${store:+, ringmq-broker.log: broker log; store $store})" >&2
        exit "$status"
    fi
    [[ -z "$store" ]] || rm -rf "$store"
    [[ -n "$2" ]] || rm -rf "$logs"
    echo "$script_name: $4" >&2
}
