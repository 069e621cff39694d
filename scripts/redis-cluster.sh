#!/usr/bin/env bash
# Start, stop or check a local Redis Cluster: three masters, no replicas,
# on loopback, every file under DIR. For the Redis store's tests
# (engine/tests/store_redis.rs) and for trying Herald against a cluster.
#
#   scripts/redis-cluster.sh start      DIR [PORT PORT PORT]   (default 7101 7102 7103)
#   scripts/redis-cluster.sh status     DIR
#   scripts/redis-cluster.sh stop       DIR
#   scripts/redis-cluster.sh kill-node  DIR PORT   (SIGKILL one node: a crash)
#   scripts/redis-cluster.sh start-node DIR PORT   (start it again on its files)
#
# Each node persists to DIR/<port>/ with appendonly yes and appendfsync
# always (what Herald needs: see docs/redis-store.md). Each PORT + 10000 is
# the node's cluster bus port and must be free too. `start` on a DIR whose
# cluster is already up does nothing; `stop` shuts the nodes down, waits
# for them to exit and removes DIR. Needs redis-server and redis-cli
# (Debian: redis-server). Exits non-zero with a message on failure.

set -euo pipefail

usage() {
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 64
}

die() { printf 'redis-cluster: %s\n' "$*" >&2; exit 1; }

# How long a node or the cluster may take to come up or go down.
DEADLINE_S=20

ports_of() {
    [ -f "$1/ports" ] || return 1
    cat "$1/ports"
}

# Whether every node of DIR answers and the cluster reports state ok.
is_up() {
    local dir=$1 p ports
    ports=$(ports_of "$dir") || return 1
    for p in $ports; do
        redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
    done
}

# Poll `$@` every 50 ms until it succeeds or DEADLINE_S passes.
wait_for() {
    local what=$1; shift
    local end=$((SECONDS + DEADLINE_S))
    until "$@"; do
        [ "$SECONDS" -lt "$end" ] || die "timed out waiting for $what"
        sleep 0.05
    done
}

# Start the node on PORT with its files under DIR/PORT (new or existing).
start_node() {
    local dir=$1 p=$2
    mkdir -p "$dir/$p"
    redis-server --port "$p" --bind 127.0.0.1 --protected-mode no \
        --cluster-enabled yes --cluster-config-file "$dir/$p/nodes.conf" \
        --cluster-node-timeout 2000 \
        --dir "$dir/$p" --appendonly yes --appendfsync always --save '' \
        --daemonize yes --pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log" \
        || die "redis-server on port $p did not start (see $dir/$p/redis.log)"
    wait_for "redis on port $p" redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null
}

kill_node() {
    local dir=$1 p=$2 pid
    pid=$(cat "$dir/$p/redis.pid" 2>/dev/null) || die "no node on port $p in $dir"
    kill -9 "$pid" 2>/dev/null || true
    local end=$((SECONDS + DEADLINE_S))
    while kill -0 "$pid" 2>/dev/null; do
        [ "$SECONDS" -lt "$end" ] || die "node $pid survived SIGKILL"
        sleep 0.05
    done
    rm -f "$dir/$p/redis.pid"
    echo "redis-cluster: killed the node on port $p"
}

start() {
    local dir=$1; shift
    local ports=("$@")
    [ ${#ports[@]} -eq 0 ] && ports=(7101 7102 7103)
    [ ${#ports[@]} -eq 3 ] || die "start needs three ports, got ${#ports[@]}"
    command -v redis-server >/dev/null || die "redis-server is not installed (Debian: apt-get install redis-server)"
    if is_up "$dir"; then
        echo "redis-cluster: already up in $dir on ports $(ports_of "$dir")"
        return 0
    fi
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    echo "${ports[*]}" > "$dir/ports"
    local p
    for p in "${ports[@]}"; do
        start_node "$dir" "$p"
    done
    local addrs=()
    for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 \
        || die "cluster create failed (see $dir/create.log)"
    wait_for "cluster state ok" is_up "$dir"
    echo "redis-cluster: up in $dir on ports ${ports[*]}"
}

status() {
    local dir=$1
    if is_up "$dir"; then
        echo "redis-cluster: up in $dir on ports $(ports_of "$dir")"
    else
        echo "redis-cluster: not up in $dir"
        return 1
    fi
}

stop() {
    local dir=$1 p pid ports
    ports=$(ports_of "$dir") || { echo "redis-cluster: nothing to stop in $dir"; return 0; }
    for p in $ports; do
        redis-cli -h 127.0.0.1 -p "$p" shutdown nosave >/dev/null 2>&1 || true
    done
    for p in $ports; do
        pid=$(cat "$dir/$p/redis.pid" 2>/dev/null || true)
        if [ -n "$pid" ]; then
            # A node that ignored SHUTDOWN is killed.
            local end=$((SECONDS + DEADLINE_S))
            while kill -0 "$pid" 2>/dev/null; do
                if [ "$SECONDS" -ge "$end" ]; then kill -9 "$pid" 2>/dev/null || true; fi
                sleep 0.05
            done
        fi
    done
    rm -rf "$dir"
    echo "redis-cluster: stopped"
}

[ $# -ge 2 ] || usage
case $1 in
    start) shift; start "$@" ;;
    status) status "$2" ;;
    stop) stop "$2" ;;
    kill-node) [ $# -eq 3 ] || usage; kill_node "$2" "$3" ;;
    start-node)
        [ $# -eq 3 ] || usage
        dir=$(cd "$2" && pwd)
        start_node "$dir" "$3"
        wait_for "cluster state ok" is_up "$dir"
        echo "redis-cluster: node on port $3 up again"
        ;;
    *) usage ;;
esac
