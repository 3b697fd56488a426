#!/usr/bin/env bash
# Installs and runs a peer RocketMQ broker (name server + broker) on loopback, so ringmq-loadgen
# can drive it beside ringmq. Facts behind every setting: /work/shared/docs/peers.md.
#
#   scripts/peer.sh rocketmq-rust|apache-rocketmq start|stop|status|install [--flush async|sync]
#                   [--role async-master|sync-master-with-slave] [--dir DIR] [--fresh]
#   scripts/peer.sh rpc cluster-has-broker|cluster-broker-id|create-topic|topic-queues|broker-config ...
#                   (one-request remoting helpers, also used by bench.sh)
#
# - Ports are the RocketMQ defaults on 127.0.0.1: name server 9876, broker 10911 (HA 10912).
# - --role (default async-master): sync-master-with-slave starts the broker as SYNC_MASTER and a
#   second broker beside it as its slave (brokerId=1, brokerRole=SLAVE, same brokerName, broker
#   10921, HA 10922, its own store, config and logs under DIR/slave-*), which finds the master's HA
#   port through the name server; `start` also waits for the slave's registration and `stop`
#   stops it too. Apache RocketMQ only (not wired up for rocketmq-rust).
# - Installs on first use into the cache ($RINGMQ_PEERS_CACHE, default bench-results/.peers/ in
#   the repository, which git ignores): Apache RocketMQ 5.3.3 from Maven Central (mvn
#   dependency:copy-dependencies, a few minutes), rocketmq-rust 1.0.0 from crates.io
#   (cargo install, about 10 minutes on 2 cores).
# - DIR (default: CACHE/<peer>/run) holds the configuration files, the store, the logs and the
#   pid files of one running instance; `--fresh` wipes its store before starting.
# - `start` waits (bounded) until the broker is registered with the name server; `stop` kills by
#   pid (after checking the pid is still the process it started) and waits for the ports to free.
# - `status` exits 0 when the name server and the broker (and the slave, with one) run, 3 when
#   none does, 1 otherwise.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly ROOT
readonly CACHE="${RINGMQ_PEERS_CACHE:-$ROOT/bench-results/.peers}"
readonly HOST=127.0.0.1
readonly NAMESRV_PORT=9876
readonly BROKER_PORT=10911
readonly HA_PORT=$((BROKER_PORT + 1))
readonly SLAVE_PORT=10921
readonly SLAVE_HA_PORT=$((SLAVE_PORT + 1))
readonly NAMESRV_ADDR="$HOST:$NAMESRV_PORT"
readonly BROKER_ADDR="$HOST:$BROKER_PORT"
readonly SLAVE_ADDR="$HOST:$SLAVE_PORT"
readonly CLUSTER=DefaultCluster
readonly BROKER_NAME=broker-a

readonly APACHE_VERSION=5.3.3
readonly RUST_VERSION=1.0.0

# Bounds, in seconds, of every wait.
readonly MAVEN_TIMEOUT_S="${PEER_MAVEN_TIMEOUT_S:-1200}"
readonly CARGO_INSTALL_TIMEOUT_S="${PEER_CARGO_INSTALL_TIMEOUT_S:-3600}"
readonly NAMESRV_READY_S=60
readonly BROKER_READY_S=180
readonly STOP_GRACE_S=40
readonly PORT_FREE_S=20

log() { printf 'peer.sh: %s\n' "$*" >&2; }
die() {
    printf 'peer.sh: error: %s\n' "$*" >&2
    exit 1
}

usage() {
    sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# ---------------------------------------------------------------------------------------------
# Remoting helpers (Python standard library only): one request, one response, JSON headers.

# remoting CMD ARGS...: see the Python source for the commands.
remoting() {
    python3 - "$@" <<'PY'
import json, re, socket, struct, sys

def call(addr, code, ext, timeout=3.0):
    host, port = addr.rsplit(":", 1)
    header = json.dumps({"code": code, "extFields": ext, "flag": 0, "language": "JAVA",
                         "opaque": 1, "serializeTypeCurrentRPC": "JSON", "version": 479},
                        separators=(",", ":")).encode()
    frame = struct.pack(">II", 4 + len(header), len(header)) + header
    with socket.create_connection((host, int(port)), timeout=timeout) as conn:
        conn.settimeout(timeout)
        conn.sendall(frame)
        def read(n):
            data = b""
            while len(data) < n:
                chunk = conn.recv(n - len(data))
                if not chunk:
                    raise ConnectionError("connection closed before a full response")
                data += chunk
            return data
        (length,) = struct.unpack(">I", read(4))
        rest = read(length)
    header_len = struct.unpack(">I", rest[:4])[0] & 0xFFFFFF
    header_text = rest[4:4 + header_len].decode("utf-8", "replace")
    body = rest[4 + header_len:].decode("utf-8", "replace")
    match = re.search(r'"code"\s*:\s*(-?\d+)', header_text)
    remark = re.search(r'"remark"\s*:\s*"((?:[^"\\]|\\.)*)"', header_text)
    return (int(match.group(1)) if match else -1, remark.group(1) if remark else "", body)

GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO, UPDATE_AND_CREATE_TOPIC = 105, 106, 17
GET_BROKER_CONFIG = 26

def cluster_broker_addrs(body, broker_name):
    # GET_BROKER_CLUSTER_INFO body: brokerAddrTable.<name>.brokerAddrs, id -> address. Java's
    # fastjson writes the integer ids as bare keys ({0:"..."}); quote them to read it as JSON.
    quoted = re.sub(r'([{,])\s*(-?\d+)\s*:', r'\1"\2":', body)
    table = json.loads(quoted).get("brokerAddrTable", {})
    return {str(k): v for k, v in table.get(broker_name, {}).get("brokerAddrs", {}).items()}

cmd, args = sys.argv[1], sys.argv[2:]
try:
    if cmd == "cluster-has-broker":          # NAMESRV BROKER_ADDR -> exit 0 if registered
        code, remark, body = call(args[0], GET_BROKER_CLUSTER_INFO, {})
        sys.exit(0 if code == 0 and args[1] in body else 1)
    elif cmd == "cluster-broker-id":         # NAMESRV BROKER_NAME ID -> prints its address, exit 0
        code, remark, body = call(args[0], GET_BROKER_CLUSTER_INFO, {})
        addr = cluster_broker_addrs(body, args[1]).get(args[2]) if code == 0 else None
        if not addr:
            sys.exit(1)
        print(addr)
    elif cmd == "topic-queues":              # NAMESRV TOPIC -> prints writeQueueNums (0: none)
        code, remark, body = call(args[0], GET_ROUTEINFO_BY_TOPIC, {"topic": args[1]})
        counts = [int(n) for n in re.findall(r'"writeQueueNums"\s*:\s*(\d+)', body)]
        print(sum(counts) if code == 0 else 0)
    elif cmd == "broker-config":             # BROKER KEY -> prints the running value of KEY
        code, remark, body = call(args[0], GET_BROKER_CONFIG, {})
        match = re.search(r"^" + re.escape(args[1]) + r"=(.*)$", body, re.M)
        if code != 0 or not match:
            print(f"GET_BROKER_CONFIG: code {code}, no {args[1]}", file=sys.stderr)
            sys.exit(1)
        print(match.group(1).strip())
    elif cmd == "create-topic":              # BROKER TOPIC QUEUES -> exit 0 on success
        queues = args[2]
        ext = {"topic": args[1], "defaultTopic": "TBW102", "readQueueNums": queues,
               "writeQueueNums": queues, "perm": "6", "topicFilterType": "SINGLE_TAG",
               "topicSysFlag": "0", "order": "false"}
        code, remark, body = call(args[0], UPDATE_AND_CREATE_TOPIC, ext, timeout=10.0)
        if code != 0:
            print(f"UPDATE_AND_CREATE_TOPIC answered code {code}: {remark}", file=sys.stderr)
            sys.exit(1)
    else:
        print(f"unknown remoting command {cmd}", file=sys.stderr)
        sys.exit(2)
except (OSError, ConnectionError, struct.error, ValueError) as error:
    if cmd == "topic-queues":
        print(0)
    else:
        print(f"{cmd}: {error}", file=sys.stderr)
    sys.exit(1)
PY
}

# port_open PORT: true when something accepts connections on 127.0.0.1:PORT.
port_open() {
    timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

# wait_port_free PORT SECONDS
wait_port_free() {
    local port=$1 deadline=$((SECONDS + $2))
    while port_open "$port"; do
        if ((SECONDS >= deadline)); then
            die "port $port is still in use after $2 s (another broker? check: ss -ltnp 'sport = :$port')"
        fi
        sleep 0.5
    done
}

# ---------------------------------------------------------------------------------------------
# Processes: started detached (own session), tracked by pid files, killed by pid only.

# launch PIDFILE LOGFILE CMD...: starts CMD detached with its output in LOGFILE; the pid file
# receives CMD's own pid (the launcher shell writes $$ and then execs CMD).
launch() {
    local pidfile=$1 logfile=$2
    shift 2
    rm -f "$pidfile"
    # The exact command line, next to the configuration files (bench.sh keeps a copy).
    printf '%q ' "$@" >"$DATA/conf/$(basename "$pidfile" .pid).cmd"
    # shellcheck disable=SC2016 # $$ and $@ expand in the launched shell, not here
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" >"$logfile" 2>&1 </dev/null &
    local deadline=$((SECONDS + 5))
    until [[ -s "$pidfile" ]]; do
        ((SECONDS < deadline)) || die "could not start $1 (no pid after 5 s); see $logfile"
        sleep 0.1
    done
}

# slave_marker: the slave runs the master's main class; its config file's path tells it apart.
slave_marker() { printf '%s' "$DATA/conf/broker-slave.conf"; }

# pid_alive PIDFILE MARKER: true when the pid file names a live process whose command line
# contains MARKER (so a recycled pid is never taken for ours).
pid_alive() {
    local pidfile=$1 marker=$2 pid
    [[ -s "$pidfile" ]] || return 1
    pid=$(<"$pidfile")
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$marker"
}

# stop_pid NAME PIDFILE MARKER: SIGTERM, wait STOP_GRACE_S, then SIGKILL; removes the pid file.
stop_pid() {
    local name=$1 pidfile=$2 marker=$3 pid deadline
    if ! pid_alive "$pidfile" "$marker"; then
        [[ -e "$pidfile" ]] && log "$name: not running (stale pid file removed)"
        rm -f "$pidfile"
        return 0
    fi
    pid=$(<"$pidfile")
    log "$name: stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + STOP_GRACE_S))
    while pid_alive "$pidfile" "$marker"; do
        if ((SECONDS >= deadline)); then
            log "$name: still running after ${STOP_GRACE_S} s, sending SIGKILL to $pid"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 1
            break
        fi
        sleep 0.3
    done
    # A zombie (reaped by init later) has an empty cmdline and no longer matches.
    pid_alive "$pidfile" "$marker" && die "$name: pid $pid did not exit even after SIGKILL"
    rm -f "$pidfile"
}

# wait_ready NAME PIDFILE MARKER LOGFILE SECONDS CHECK...: polls CHECK until it succeeds, fails
# early (with the log's tail) when the process dies, and gives up after SECONDS.
wait_ready() {
    local name=$1 pidfile=$2 marker=$3 logfile=$4 limit=$5
    shift 5
    local deadline=$((SECONDS + limit))
    until "$@"; do
        if ! pid_alive "$pidfile" "$marker"; then
            log "$name exited during startup; last lines of $logfile:"
            tail -n 30 "$logfile" >&2 || true
            die "$name failed to start (read $logfile)"
        fi
        if ((SECONDS >= deadline)); then
            log "$name not ready after ${limit} s; last lines of $logfile:"
            tail -n 30 "$logfile" >&2 || true
            die "$name did not become ready within ${limit} s (read $logfile); it is still running: \
scripts/peer.sh $PEER stop${DIR_ARG:+ --dir $DIR_ARG}"
        fi
        sleep 0.5
    done
}

log_has() { grep -qF -- "$2" "$1" 2>/dev/null; }
broker_registered() { remoting cluster-has-broker "$NAMESRV_ADDR" "$BROKER_ADDR"; }
# slave_registered: the name server lists brokerId 1 of BROKER_NAME at the slave's address.
slave_registered() {
    [[ "$(remoting cluster-broker-id "$NAMESRV_ADDR" "$BROKER_NAME" 1 2>/dev/null)" == "$SLAVE_ADDR" ]]
}
# slave_ha_connected: a connection to the master's HA port is established (the slave's HA client
# learns that address from the name server some seconds after it registered, and a SYNC_MASTER
# send before it connects waits for the slave timeout).
slave_ha_connected() {
    [[ -n "$(ss -Htn state established "( dport = :$HA_PORT )" 2>/dev/null)" ]]
}

# ---------------------------------------------------------------------------------------------
# Apache RocketMQ 5.3.3 (Maven Central, run on the JDK).

readonly APACHE_INSTALL="$CACHE/apache-rocketmq-$APACHE_VERSION"
readonly APACHE_NAMESRV_MAIN=org.apache.rocketmq.namesrv.NamesrvStartup
readonly APACHE_BROKER_MAIN=org.apache.rocketmq.broker.BrokerStartup

apache_install() {
    [[ -f "$APACHE_INSTALL/.installed" ]] && return 0
    command -v java >/dev/null || die "java is not installed (Apache RocketMQ needs a JDK 17)"
    command -v mvn >/dev/null || die "mvn is not installed (Apache RocketMQ is fetched with Maven)"
    mkdir -p "$APACHE_INSTALL"
    cat >"$APACHE_INSTALL/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by scripts/peer.sh: only used to download Apache RocketMQ's jars into lib/. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>ringmq.peers</groupId>
  <artifactId>apache-rocketmq-runtime</artifactId>
  <version>$APACHE_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.rocketmq</groupId>
      <artifactId>rocketmq-namesrv</artifactId>
      <version>$APACHE_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.rocketmq</groupId>
      <artifactId>rocketmq-broker</artifactId>
      <version>$APACHE_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
    log "installing Apache RocketMQ $APACHE_VERSION jars into $APACHE_INSTALL/lib (Maven, bounded ${MAVEN_TIMEOUT_S} s)"
    rm -rf "$APACHE_INSTALL/lib.partial"
    if ! timeout "$MAVEN_TIMEOUT_S" mvn -B -q -Dstyle.color=never -f "$APACHE_INSTALL/pom.xml" \
        dependency:copy-dependencies -DincludeScope=runtime \
        "-DoutputDirectory=$APACHE_INSTALL/lib.partial" >"$APACHE_INSTALL/install.log" 2>&1; then
        tail -n 20 "$APACHE_INSTALL/install.log" >&2 || true
        die "Maven could not fetch Apache RocketMQ $APACHE_VERSION (read $APACHE_INSTALL/install.log)"
    fi
    compgen -G "$APACHE_INSTALL/lib.partial/rocketmq-broker-$APACHE_VERSION.jar" >/dev/null ||
        die "Maven finished but rocketmq-broker-$APACHE_VERSION.jar is missing (read $APACHE_INSTALL/install.log)"
    rm -rf "${APACHE_INSTALL:?}/lib"
    mv "$APACHE_INSTALL/lib.partial" "$APACHE_INSTALL/lib"
    touch "$APACHE_INSTALL/.installed"
    log "installed $(find "$APACHE_INSTALL/lib" -name '*.jar' | wc -l) jars"
}

# apache_jvm_common [HOME]: JVM flags shared by every process: JDK 17 module openings the 5.3.3
# store needs (RocketMQ issue 9779), G1, logs under HOME/logs/rocketmqlogs (user.home redirected;
# HOME defaults to DATA/home, the slave has DATA/slave-home).
apache_jvm_common() {
    local home=${1:-$DATA/home}
    printf '%s\n' \
        -server -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow \
        --add-exports=java.base/sun.nio.ch=ALL-UNNAMED \
        --add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
        --add-opens=java.base/java.nio=ALL-UNNAMED \
        --add-opens=java.base/java.lang=ALL-UNNAMED \
        --add-opens=java.base/java.util=ALL-UNNAMED \
        "-Duser.home=$home" "-Drocketmq.home.dir=$home" \
        -cp "$APACHE_INSTALL/lib/*"
}

apache_write_config() {
    local flush_type=$1 role=$2
    mkdir -p "$DATA/conf" "$DATA/home" "$DATA/store"
    # Properties files: key=value without spaces (RocketMQ does not trim non-string values).
    cat >"$DATA/conf/namesrv.conf" <<EOF
listenPort=$NAMESRV_PORT
bindAddress=$HOST
rocketmqHome=$DATA/home
kvConfigPath=$DATA/home/namesrv/kvConfig.json
configStorePath=$DATA/home/namesrv/namesrv.properties
EOF
    apache_broker_conf "$DATA/conf/broker.conf" 0 "$role" "$flush_type" "$BROKER_PORT" "$HA_PORT" \
        "$DATA/home" "$DATA/store"
    rm -f "$DATA/conf/broker-slave.conf"
    [[ "$role" == SYNC_MASTER ]] || return 0
    # 5.3.3's SYNC_MASTER waits for the slave only when inSyncReplicas (default 1, counting the
    # master) is over 1: CommitLog.handleHA answers PUT_OK at once for 0 or 1, outside controller
    # and slave-acting-master modes. With the default, a SYNC_MASTER whose slave had been stopped
    # went on answering SEND_OK; with 2 (the master and its one slave) it answered
    # FLUSH_SLAVE_TIMEOUT (docs/BENCHMARKS.md, "Replication").
    cat >>"$DATA/conf/broker.conf" <<EOF
inSyncReplicas=2
EOF
    # The slave: same cluster, brokerName, name server and flush type; its own ports and store.
    # It learns the master's HA address (brokerIP2:haListenPort) from the name server.
    mkdir -p "$DATA/slave-home" "$DATA/slave-store"
    apache_broker_conf "$DATA/conf/broker-slave.conf" 1 SLAVE "$flush_type" "$SLAVE_PORT" \
        "$SLAVE_HA_PORT" "$DATA/slave-home" "$DATA/slave-store"
}

# apache_broker_conf FILE ID ROLE FLUSH PORT HA_PORT HOME STORE: one broker's broker.conf (the
# master's and the slave's differ only in these).
apache_broker_conf() {
    local file=$1 id=$2 role=$3 flush_type=$4 port=$5 ha_port=$6 home=$7 store=$8
    cat >"$file" <<EOF
brokerClusterName=$CLUSTER
brokerName=$BROKER_NAME
brokerId=$id
brokerRole=$role
flushDiskType=$flush_type
brokerIP1=$HOST
brokerIP2=$HOST
bindAddress=$HOST
listenPort=$port
haListenPort=$ha_port
namesrvAddr=$NAMESRV_ADDR
rocketmqHome=$home
storePathRootDir=$store
storePathCommitLog=$store/commitlog
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
enablePropertyFilter=true
EOF
}

apache_start() {
    local flush_type=$1 role=$2
    apache_install
    apache_write_config "$flush_type" "$role"
    local -a common
    mapfile -t common < <(apache_jvm_common)
    log "apache-rocketmq: starting the name server ($NAMESRV_ADDR)"
    ROCKETMQ_HOME="$DATA/home" launch "$DATA/namesrv.pid" "$DATA/namesrv.out" \
        java -Xms512m -Xmx512m "${common[@]}" "$APACHE_NAMESRV_MAIN" -c "$DATA/conf/namesrv.conf"
    wait_ready "apache-rocketmq name server" "$DATA/namesrv.pid" "$APACHE_NAMESRV_MAIN" \
        "$DATA/namesrv.out" "$NAMESRV_READY_S" log_has "$DATA/namesrv.out" "boot success"
    log "apache-rocketmq: starting the broker ($BROKER_ADDR, $flush_type, $role)"
    ROCKETMQ_HOME="$DATA/home" launch "$DATA/broker.pid" "$DATA/broker.out" \
        java -Xms2g -Xmx2g -XX:MaxDirectMemorySize=2g "${common[@]}" "$APACHE_BROKER_MAIN" \
        -c "$DATA/conf/broker.conf"
    wait_ready "apache-rocketmq broker" "$DATA/broker.pid" "$APACHE_BROKER_MAIN" \
        "$DATA/broker.out" "$BROKER_READY_S" log_has "$DATA/broker.out" "boot success"
    wait_ready "apache-rocketmq broker registration" "$DATA/broker.pid" "$APACHE_BROKER_MAIN" \
        "$DATA/broker.out" 30 broker_registered
    [[ -f "$DATA/conf/broker-slave.conf" ]] || return 0
    local -a slave_common
    mapfile -t slave_common < <(apache_jvm_common "$DATA/slave-home")
    log "apache-rocketmq: starting the slave ($SLAVE_ADDR, HA $HOST:$SLAVE_HA_PORT, $flush_type)"
    ROCKETMQ_HOME="$DATA/slave-home" launch "$DATA/slave.pid" "$DATA/slave.out" \
        java -Xms1g -Xmx1g -XX:MaxDirectMemorySize=1g "${slave_common[@]}" "$APACHE_BROKER_MAIN" \
        -c "$DATA/conf/broker-slave.conf"
    wait_ready "apache-rocketmq slave" "$DATA/slave.pid" "$(slave_marker)" \
        "$DATA/slave.out" "$BROKER_READY_S" log_has "$DATA/slave.out" "boot success"
    wait_ready "apache-rocketmq slave registration (brokerId 1 of $BROKER_NAME)" "$DATA/slave.pid" \
        "$(slave_marker)" "$DATA/slave.out" 60 slave_registered
    if command -v ss >/dev/null; then
        wait_ready "apache-rocketmq slave's HA connection to $HOST:$HA_PORT" "$DATA/slave.pid" \
            "$(slave_marker)" "$DATA/slave.out" 60 slave_ha_connected
    else
        log "apache-rocketmq: no ss(8) here, so the slave's HA connection is not awaited"
    fi
}

# ---------------------------------------------------------------------------------------------
# rocketmq-rust 1.0.0 (crates.io).

readonly RUST_INSTALL="$CACHE/rocketmq-rust-$RUST_VERSION"
readonly RUST_NAMESRV_BIN=rocketmq-namesrv-rust
readonly RUST_BROKER_BIN=rocketmq-broker-rust

rust_install() {
    [[ -x "$RUST_INSTALL/bin/$RUST_NAMESRV_BIN" && -x "$RUST_INSTALL/bin/$RUST_BROKER_BIN" ]] &&
        return 0
    command -v cargo >/dev/null || die "cargo is not installed (rocketmq-rust is built with cargo install)"
    mkdir -p "$RUST_INSTALL"
    log "installing rocketmq-rust $RUST_VERSION (rocketmq-namesrv, rocketmq-broker) into $RUST_INSTALL;"
    log "  this compiles for about 10 minutes on 2 cores (bounded ${CARGO_INSTALL_TIMEOUT_S} s); progress: $RUST_INSTALL/install.log"
    # One shared target dir so the broker reuses the name server's compiled dependencies.
    if ! (cd "$RUST_INSTALL" && CARGO_TARGET_DIR="$RUST_INSTALL/build" \
        timeout "$CARGO_INSTALL_TIMEOUT_S" cargo install --locked --root "$RUST_INSTALL" \
        "rocketmq-namesrv@$RUST_VERSION" "rocketmq-broker@$RUST_VERSION") \
        >"$RUST_INSTALL/install.log" 2>&1; then
        tail -n 20 "$RUST_INSTALL/install.log" >&2 || true
        die "cargo install of rocketmq-rust $RUST_VERSION failed or timed out (read $RUST_INSTALL/install.log)"
    fi
    [[ -x "$RUST_INSTALL/bin/$RUST_BROKER_BIN" ]] ||
        die "cargo install finished but $RUST_INSTALL/bin/$RUST_BROKER_BIN is missing (read $RUST_INSTALL/install.log)"
    rm -rf "$RUST_INSTALL/build" # ~GBs of objects; the binaries are all that is needed
}

rust_write_config() {
    local flush_type=$1
    mkdir -p "$DATA/conf" "$DATA/home" "$DATA/store"
    cat >"$DATA/conf/namesrv.toml" <<EOF
rocketmqHome = "$DATA/home"
kvConfigPath = "$DATA/home/namesrv/kvConfig.json"
configStorePath = "$DATA/home/namesrv/namesrv.properties"
listenPort = $NAMESRV_PORT
bindAddress = "$HOST"
EOF
    cat >"$DATA/conf/broker.toml" <<EOF
[broker]
namesrvAddr = "$NAMESRV_ADDR"
brokerIp1 = "$HOST"
listenPort = $BROKER_PORT
storePathRootDir = "$DATA/store"

[broker.brokerServerConfig]
bindAddress = "$HOST"

[broker.brokerIdentity]
brokerName = "$BROKER_NAME"
brokerClusterName = "$CLUSTER"
brokerId = 0

[store]
storeType = "LocalFile"
brokerRole = "ASYNC_MASTER"
flushDiskType = "$flush_type"
storePathRootDir = "$DATA/store"
haListenAddress = "$HOST"
haListenPort = $HA_PORT
EOF
}

rust_start() {
    local flush_type=$1
    rust_install
    rust_write_config "$flush_type"
    local bin="$RUST_INSTALL/bin"
    local -a namesrv_args=(-c "$DATA/conf/namesrv.toml")
    # Newer releases also take the bind address on the command line (and default it to
    # 0.0.0.0 there); pass it when this release knows the flag.
    if "$bin/$RUST_NAMESRV_BIN" --help 2>/dev/null | grep -q -- '--bindAddress'; then
        namesrv_args+=(--bindAddress "$HOST" --listenPort "$NAMESRV_PORT")
    fi
    export ROCKETMQ_HOME="$DATA/home"
    export ROCKETMQ_SECURITY_PROFILE=development-insecure-loopback
    # Both reject unknown TOML fields; `-p` loads the file and prints the effective values.
    timeout 30 "$bin/$RUST_NAMESRV_BIN" -c "$DATA/conf/namesrv.toml" -p >"$DATA/conf/namesrv.effective" 2>&1 ||
        die "rocketmq-rust rejects $DATA/conf/namesrv.toml (read $DATA/conf/namesrv.effective)"
    timeout 30 "$bin/$RUST_BROKER_BIN" -c "$DATA/conf/broker.toml" -n "$NAMESRV_ADDR" -p \
        >"$DATA/conf/broker.effective" 2>&1 ||
        die "rocketmq-rust rejects $DATA/conf/broker.toml (read $DATA/conf/broker.effective)"
    log "rocketmq-rust: starting the name server ($NAMESRV_ADDR)"
    launch "$DATA/namesrv.pid" "$DATA/namesrv.out" "$bin/$RUST_NAMESRV_BIN" "${namesrv_args[@]}"
    wait_ready "rocketmq-rust name server" "$DATA/namesrv.pid" "$RUST_NAMESRV_BIN" \
        "$DATA/namesrv.out" "$NAMESRV_READY_S" port_open "$NAMESRV_PORT"
    log "rocketmq-rust: starting the broker ($BROKER_ADDR, $flush_type)"
    launch "$DATA/broker.pid" "$DATA/broker.out" \
        "$bin/$RUST_BROKER_BIN" -c "$DATA/conf/broker.toml" -n "$NAMESRV_ADDR"
    wait_ready "rocketmq-rust broker" "$DATA/broker.pid" "$RUST_BROKER_BIN" \
        "$DATA/broker.out" "$BROKER_READY_S" broker_registered
}

# ---------------------------------------------------------------------------------------------
# Commands.

peer_markers() {
    case "$PEER" in
        apache-rocketmq) NAMESRV_MARKER=$APACHE_NAMESRV_MAIN BROKER_MARKER=$APACHE_BROKER_MAIN ;;
        rocketmq-rust) NAMESRV_MARKER=$RUST_NAMESRV_BIN BROKER_MARKER=$RUST_BROKER_BIN ;;
    esac
}

cmd_status() {
    local namesrv=stopped broker=stopped slave=stopped flush role slave_text=""
    pid_alive "$DATA/namesrv.pid" "$NAMESRV_MARKER" && namesrv="running (pid $(<"$DATA/namesrv.pid"))"
    pid_alive "$DATA/broker.pid" "$BROKER_MARKER" && broker="running (pid $(<"$DATA/broker.pid"))"
    pid_alive "$DATA/slave.pid" "$(slave_marker)" && slave="running (pid $(<"$DATA/slave.pid"))"
    flush=$(cat "$DATA/flush" 2>/dev/null || echo "-")
    role=$(cat "$DATA/role" 2>/dev/null || echo async-master)
    [[ "$role" == sync-master-with-slave || "$slave" != stopped ]] && slave_text=", slave $slave"
    printf '%s: name server %s, broker %s%s, flush %s, role %s, dir %s\n' "$PEER" "$namesrv" \
        "$broker" "$slave_text" "$flush" "$role" "$DATA"
    if [[ "$namesrv" == running* && "$broker" == running* ]] &&
        [[ "$role" != sync-master-with-slave || "$slave" == running* ]]; then
        return 0
    elif [[ "$namesrv" == stopped && "$broker" == stopped && "$slave" == stopped ]]; then
        return 3
    fi
    return 1
}

cmd_stop() {
    stop_pid "$PEER slave" "$DATA/slave.pid" "$(slave_marker)"
    stop_pid "$PEER broker" "$DATA/broker.pid" "$BROKER_MARKER"
    stop_pid "$PEER name server" "$DATA/namesrv.pid" "$NAMESRV_MARKER"
    wait_port_free "$SLAVE_PORT" "$PORT_FREE_S"
    wait_port_free "$BROKER_PORT" "$PORT_FREE_S"
    wait_port_free "$NAMESRV_PORT" "$PORT_FREE_S"
    log "$PEER: stopped"
}

# check_running_config ADDR KEY WANTED: the broker at ADDR runs with KEY=WANTED (GET_BROKER_CONFIG).
check_running_config() {
    local addr=$1 key=$2 wanted=$3 running
    if running=$(remoting broker-config "$addr" "$key" 2>/dev/null); then
        [[ "$running" == "$wanted" ]] ||
            die "$PEER ($addr) runs with $key=$running, not $wanted (read $DATA/conf)"
    else
        log "$PEER: could not read $key of $addr back (GET_BROKER_CONFIG unsupported?); not verified"
    fi
}

cmd_start() {
    local flush_type role_type
    case "$FLUSH" in
        async) flush_type=ASYNC_FLUSH ;;
        sync) flush_type=SYNC_FLUSH ;;
        *) die "--flush must be async or sync, not '$FLUSH'" ;;
    esac
    case "$ROLE" in
        async-master) role_type=ASYNC_MASTER ;;
        sync-master-with-slave) role_type=SYNC_MASTER ;;
        *) die "--role must be async-master or sync-master-with-slave, not '$ROLE'" ;;
    esac
    if [[ "$ROLE" != async-master && "$PEER" != apache-rocketmq ]]; then
        die "--role $ROLE is not supported for $PEER (scripts/peer.sh starts a slave for apache-rocketmq only)"
    fi
    if pid_alive "$DATA/broker.pid" "$BROKER_MARKER" || pid_alive "$DATA/namesrv.pid" "$NAMESRV_MARKER" ||
        pid_alive "$DATA/slave.pid" "$(slave_marker)"; then
        if [[ "$(cat "$DATA/flush" 2>/dev/null)" == "$FLUSH" && "$FRESH" == 0 ]] &&
            [[ "$(cat "$DATA/role" 2>/dev/null || echo async-master)" == "$ROLE" ]] && cmd_status >/dev/null; then
            log "$PEER is already running ($FLUSH flush, $ROLE)"
            return 0
        fi
        die "$PEER is already running (see: scripts/peer.sh $PEER status); stop it first"
    fi
    local port
    local -a ports=("$NAMESRV_PORT" "$BROKER_PORT" "$HA_PORT")
    [[ "$ROLE" == sync-master-with-slave ]] && ports+=("$SLAVE_PORT" "$SLAVE_HA_PORT")
    for port in "${ports[@]}"; do
        port_open "$port" && die "port $port is already in use (another broker running? ss -ltnp 'sport = :$port')"
    done
    mkdir -p "$DATA"
    if [[ "$FRESH" == 1 ]]; then
        log "$PEER: wiping the store in $DATA"
        rm -rf "$DATA/store" "$DATA/home/namesrv" "$DATA/home/store" \
            "$DATA/slave-store" "$DATA/slave-home/store"
    fi
    echo "$FLUSH" >"$DATA/flush"
    echo "$ROLE" >"$DATA/role"
    local started=$SECONDS
    case "$PEER" in
        apache-rocketmq) apache_start "$flush_type" "$role_type" ;;
        rocketmq-rust) rust_start "$flush_type" ;;
    esac
    check_running_config "$BROKER_ADDR" flushDiskType "$flush_type"
    local slave_note=""
    if [[ "$ROLE" == sync-master-with-slave ]]; then
        check_running_config "$BROKER_ADDR" brokerRole "$role_type"
        check_running_config "$BROKER_ADDR" inSyncReplicas 2
        check_running_config "$SLAVE_ADDR" brokerRole SLAVE
        slave_note=", slave $SLAVE_ADDR (logs $DATA/slave.out and $DATA/slave-home/logs)"
    fi
    log "$PEER ready in $((SECONDS - started)) s: name server $NAMESRV_ADDR, broker $BROKER_ADDR," \
        "$flush_type, $role_type$slave_note; logs $DATA/*.out and $DATA/home/logs"
}

main() {
    [[ $# -ge 1 ]] || usage
    if [[ "$1" == rpc ]]; then
        shift
        [[ $# -ge 1 ]] || usage
        remoting "$@"
        return
    fi
    [[ $# -ge 2 ]] || usage
    PEER=$1
    local command=$2
    shift 2
    case "$PEER" in
        apache-rocketmq | rocketmq-rust) ;;
        *) die "unknown peer '$PEER' (apache-rocketmq or rocketmq-rust)" ;;
    esac
    FLUSH=async ROLE=async-master FRESH=0 DIR_ARG=""
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --flush) FLUSH=${2:?--flush needs async or sync}; shift 2 ;;
            --flush=*) FLUSH=${1#--flush=}; shift ;;
            --role) ROLE=${2:?--role needs async-master or sync-master-with-slave}; shift 2 ;;
            --role=*) ROLE=${1#--role=}; shift ;;
            --dir) DIR_ARG=${2:?--dir needs a directory}; shift 2 ;;
            --dir=*) DIR_ARG=${1#--dir=}; shift ;;
            --fresh) FRESH=1; shift ;;
            -h | --help) usage ;;
            *) die "unknown option '$1'" ;;
        esac
    done
    if [[ -n "$DIR_ARG" ]]; then
        mkdir -p "$DIR_ARG"
        DATA="$(cd "$DIR_ARG" && pwd)"
    else
        DATA="$CACHE/$PEER/run"
    fi
    peer_markers
    case "$command" in
        start) cmd_start ;;
        stop) cmd_stop ;;
        status) cmd_status ;;
        install)
            case "$PEER" in
                apache-rocketmq) apache_install ;;
                rocketmq-rust) rust_install ;;
            esac
            ;;
        *) die "unknown command '$command' (start, stop, status or install)" ;;
    esac
}

main "$@"
