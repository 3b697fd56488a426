#!/usr/bin/env bash
# Stands in for `ringmq broker` with Apache RocketMQ 5.3.3, so that the Java end-to-end tests that
# start, stop, kill -9 and restart their broker (BrokerUnderTest) can be checked against the
# reference implementation before ringmq's broker works:
#
#   RINGMQ_JAVA_PORT_OFFSET=50 scripts/java-tests.sh tests/java/apache-as-ringmq.sh
#
# It accepts the command line BrokerUnderTest gives ringmq (`broker --listenPort=P
# --namesrvListenPort=Q --storePathRootDir=DIR --brokerIP1=IP --brokerName=NAME [--KEY=VALUE...]`),
# runs an Apache name server on 127.0.0.1:Q and an Apache broker on 127.0.0.1:P (HA port P+1) with
# the store in DIR, and forwards the broker's output (which holds RocketMQ's own boot line). On
# SIGTERM it stops both and exits 0 once the broker has shut down cleanly; SIGKILL of this script
# and its children (what BrokerUnderTest.kill9 does) leaves the store as a crash would.
#
# The jars come from scripts/peer.sh's cache (`scripts/peer.sh apache-rocketmq install`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
lib="${RINGMQ_PEERS_CACHE:-$root/bench-results/.peers}/apache-rocketmq-5.3.3/lib"
[[ -d "$lib" ]] || { echo "apache-as-ringmq: no $lib (run scripts/peer.sh apache-rocketmq install)" >&2; exit 1; }
[[ "${1:-}" == broker ]] || { echo "apache-as-ringmq: only 'broker' is supported" >&2; exit 2; }
shift

declare -A conf=(
    [brokerClusterName]=DefaultCluster [brokerId]=0 [brokerRole]=ASYNC_MASTER
    [flushDiskType]=ASYNC_FLUSH [autoCreateTopicEnable]=true [autoCreateSubscriptionGroup]=true
    [mapedFileSizeCommitLog]=67108864
)
namesrv_port=""
for arg in "$@"; do
    [[ "$arg" =~ ^--([A-Za-z0-9]+)=(.*)$ ]] || { echo "apache-as-ringmq: bad option '$arg'" >&2; exit 2; }
    if [[ "${BASH_REMATCH[1]}" == namesrvListenPort ]]; then
        namesrv_port="${BASH_REMATCH[2]}"
    else
        conf[${BASH_REMATCH[1]}]="${BASH_REMATCH[2]}"
    fi
done
for key in listenPort storePathRootDir brokerName; do
    [[ -n "${conf[$key]:-}" ]] || { echo "apache-as-ringmq: --$key is required" >&2; exit 2; }
done
[[ -n "$namesrv_port" ]] || { echo "apache-as-ringmq: --namesrvListenPort is required" >&2; exit 2; }
store="${conf[storePathRootDir]}"
home="$store/../$(basename "$store")-apache-home"
mkdir -p "$store" "$home"
conf[namesrvAddr]="127.0.0.1:$namesrv_port"
conf[bindAddress]=127.0.0.1
conf[haListenPort]=$((conf[listenPort] + 1))
conf[rocketmqHome]="$home"
conf[storePathCommitLog]="$store/commitlog"
: >"$home/broker.conf"
for key in "${!conf[@]}"; do
    printf '%s=%s\n' "$key" "${conf[$key]}" >>"$home/broker.conf"
done
printf 'listenPort=%s\nbindAddress=127.0.0.1\nrocketmqHome=%s\nkvConfigPath=%s/kv.json\nconfigStorePath=%s/namesrv.properties\n' \
    "$namesrv_port" "$home" "$home" "$home" >"$home/namesrv.conf"

jvm=(-XX:+UseG1GC --add-exports=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
    --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED
    --add-opens=java.base/java.util=ALL-UNNAMED "-Duser.home=$home" "-Drocketmq.home.dir=$home" -cp "$lib/*")
export ROCKETMQ_HOME="$home"

java -Xms256m -Xmx256m "${jvm[@]}" org.apache.rocketmq.namesrv.NamesrvStartup -c "$home/namesrv.conf" \
    >"$home/namesrv.out" 2>&1 &
namesrv=$!
broker=""
# shellcheck disable=SC2317 # invoked by the trap
stop() {
    [[ -n "$broker" ]] && kill -TERM "$broker" 2>/dev/null
    status=0
    [[ -n "$broker" ]] && { wait "$broker" || status=$?; }
    kill -TERM "$namesrv" 2>/dev/null
    wait "$namesrv" 2>/dev/null || true
    # A JVM that ran its shutdown hooks after SIGTERM exits 143; that is a clean stop here.
    [[ $status -eq 0 || $status -eq 143 ]] && exit 0
    exit "$status"
}
trap stop TERM INT
deadline=$((SECONDS + 60))
until grep -q "boot success" "$home/namesrv.out" 2>/dev/null; do
    kill -0 "$namesrv" 2>/dev/null || { cat "$home/namesrv.out" >&2; exit 1; }
    ((SECONDS < deadline)) || { echo "apache-as-ringmq: name server did not boot" >&2; exit 1; }
    sleep 0.2
done
java -Xms512m -Xmx512m -XX:MaxDirectMemorySize=512m "${jvm[@]}" org.apache.rocketmq.broker.BrokerStartup \
    -c "$home/broker.conf" &
broker=$!
status=0
wait "$broker" || status=$?
kill -TERM "$namesrv" 2>/dev/null || true
exit "$status"
