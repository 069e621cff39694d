#!/usr/bin/env bash
# Test deploy/up and deploy/down on this machine: real RabbitMQ nodes, Redis
# and HAProxy, and stand-ins for herald-router and herald-gateway
# (deploy/testing/fake-bin) unless --real.
#
#   deploy/test-deploy.sh [--real] [--port-offset N]
#
#   --real   use the built binaries (${CARGO_TARGET_DIR:-target}/release, no
#            build) and finish with deploy/smoke, end to end
#
# Runs beside any other deployment: its own temporary state dir and ports
# (--port-offset, default 2000: AMQP 7681/7682, Redis 8390, HAProxy 10000 ...).
# Checks: --dry-run changes nothing; up starts everything and is healthy;
# Varnish fronts the routers (its VCL and backends under the state dir, a
# second GET /v1/stats is a hit);
# secrets are 0600; Redis listens on loopback only, with AOF; up again starts
# nothing; a killed edge is restarted alone; --router-config reaches a router
# started after it (a copy under the state dir, kept for later runs) and not
# one already running; down stops every process and
# frees every port; down again is harmless; up on the kept state works again
# and Redis still has what was written before down; down --purge deletes it.
# Needs what deploy/up needs (it installs haproxy, rabbitmq-server and
# redis-server if missing). Exits non-zero on
# failure and always stops what it started.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REAL=0
OFFSET=2000
while [ $# -gt 0 ]; do
    case "$1" in
        --real) REAL=1; shift ;;
        --port-offset) OFFSET=${2:?}; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "test-deploy: unknown argument $1" >&2; exit 2 ;;
    esac
done

STATE=$(mktemp -d -t herald-test-deploy.XXXXXX)
rmdir "$STATE" # deploy/up makes it (and refuses a non-empty directory it did not make)
if [ "$REAL" = 1 ]; then
    BIN=(--no-build)
else
    BIN=(--bin-dir "$HERE/testing/fake-bin")
fi
UP=("$HERE/up" --state-dir "$STATE" --port-offset "$OFFSET" "${BIN[@]}" --timeout 90)
DOWN=("$HERE/down" --state-dir "$STATE")

PASSED=0
FAILED=0
ok() { PASSED=$((PASSED + 1)); echo "ok   $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL $*"; }
check() { # check WHAT CMD...
    local what=$1
    shift
    if "$@"; then ok "$what"; else fail "$what"; fi
}

cleanup() {
    "${DOWN[@]}" --purge --timeout 20 >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pids() { cat "$STATE"/run/*.pid 2>/dev/null | sort; }
port() { echo $(($1 + OFFSET)); }
ports=("$(port 5681)" "$(port 5682)" "$(port 25681)" "$(port 25682)" "$(port 6390)" "$(port 9101)"
    "$(port 9102)" "$(port 9103)" "$(port 9201)" "$(port 9202)" "$(port 8000)" "$(port 8404)" "$(port 8100)")
redis() { redis-cli -h 127.0.0.1 -p "$(port 6390)" "$@"; }
any_port_open() {
    local p
    for p in "${ports[@]}"; do
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && { echo "port $p still open"; return 0; }
    done
    return 1
}
tagged_processes() { # processes whose environment carries this state dir's tag
    local d
    for d in /proc/[0-9]*; do
        grep -qszE "^HERALD_DEPLOY_TAG=$STATE#" "$d/environ" && echo "${d#/proc/}"
    done
    return 0
}

echo "==> state dir $STATE, port offset $OFFSET, $([ "$REAL" = 1 ] && echo "real binaries" || echo "stand-in binaries")"

out=$(mktemp)
"${UP[@]}" --dry-run >"$out" 2>&1 && rc=0 || rc=$?
check "--dry-run exits 0" [ "$rc" = 0 ]
check "--dry-run creates no state dir" [ ! -e "$STATE" ]
check "--dry-run prints the rabbitmq, redis, router, gateway, haproxy and varnishd commands" \
    grep -q "rabbitmq-server" "$out"
for c in "redis-server --bind 127.0.0.1 --port $(port 6390)" "herald-router --listen" \
    "--redis-url redis://127.0.0.1:$(port 6390)/0" "herald-gateway --listen" "haproxy -db -f" \
    "varnishd -F -j none -n $STATE/varnish/work -a 127.0.0.1:$(port 8100)"; do
    grep -q -- "$c" "$out" || fail "--dry-run output misses '$c'"
done

if "${UP[@]}" >"$out" 2>&1; then ok "up starts the deployment"; else
    fail "up starts the deployment"; cat "$out"; exit 1
fi
first=$(pids)
check "up recorded 2 roots, redis, 2 routers, 3 edges, haproxy and varnish" \
    test -s "$STATE/run/root1.pid" -a -s "$STATE/run/root2.pid" -a -s "$STATE/run/redis.pid" \
    -a -s "$STATE/run/router1.pid" -a -s "$STATE/run/router2.pid" -a -s "$STATE/run/edge1.pid" \
    -a -s "$STATE/run/edge2.pid" -a -s "$STATE/run/edge3.pid" -a -s "$STATE/run/haproxy.pid" \
    -a -s "$STATE/run/varnish.pid"
check "deployment.env records the routers' Redis" \
    grep -qx "REDIS_URL=redis://127.0.0.1:$(port 6390)/0" "$STATE/deployment.env"
check "Redis answers, bound to loopback only" [ "$(redis config get bind | tail -n1)" = 127.0.0.1 ]
check "... with AOF fsynced every second" \
    [ "$(redis config get appendonly | tail -n1),$(redis config get appendfsync | tail -n1)" = yes,everysec ]
check "... its data under the state dir" [ "$(redis config get dir | tail -n1)" = "$STATE/redis" ]
# Written now, read back after down and up: Redis restarts on the AOF under
# the state dir. (Not under the routers' key prefix, "herald".)
probe="test-deploy-probe-$$"
check "a probe key is written to Redis" [ "$(redis set "$probe" kept)" = OK ]
check "HAProxy answers /healthz 200" curl -fsS -o /dev/null "http://127.0.0.1:$(port 8000)/healthz"
reaches_router() { # a router answers (401 without a key is an answer); HAProxy's own 503 is not
    local code
    code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$(port 8000)/v1/notifications")
    case "$code" in 200 | 202 | 401) return 0 ;; *) echo "     got HTTP $code"; return 1 ;; esac
}
check "the publish API reaches a router through HAProxy" reaches_router
check "Varnish runs the VCL copied into the state dir" cmp -s "$HERE/varnish/herald.vcl" "$STATE/varnish/herald.vcl"
check "... in front of both routers" grep -q "\.port = \"$(port 9202)\"" "$STATE/varnish/herald-backends.vcl"
check "Varnish passes /healthz to a router" curl -fsS -o /dev/null "http://127.0.0.1:$(port 8100)/healthz"
x_cache() { curl -fsS -o /dev/null -D - "http://127.0.0.1:$(port 8100)$1" | tr -d '\r' | sed -n 's/^[Xx]-[Cc]ache: //p'; }
check "GET /v1/stats through Varnish: a miss, then a hit" \
    [ "$(x_cache /v1/stats?test-deploy),$(x_cache /v1/stats?test-deploy)" = MISS,HIT ]
check "... and the publish API is passed" [ "$(x_cache /v1/notifications/x)" = PASS ]
check "secrets are mode 0600" \
    [ "$(stat -c %a "$STATE/secrets/jwt-secret" "$STATE/secrets/api-key" | sort -u)" = 600 ]
RABBITMQCTL=/usr/lib/rabbitmq/bin/rabbitmqctl
[ -x "$RABBITMQCTL" ] || RABBITMQCTL=rabbitmqctl
alone_in_cluster() { # the node knows only itself
    env HOME="$STATE/rabbitmq/home" "$RABBITMQCTL" -n "$1" cluster_status --formatter json 2>/dev/null \
        | python3 -c 'import json,sys; s=json.loads(sys.stdin.read().strip().splitlines()[-1]); sys.exit(s["disk_nodes"] != [sys.argv[1]])' "$1"
}
check "the RabbitMQ roots are two separate nodes, not a cluster" \
    alone_in_cluster "herald-root1-$OFFSET@localhost"
check "... (root2 too)" alone_in_cluster "herald-root2-$OFFSET@localhost"

"${UP[@]}" >"$out" 2>&1 || { fail "up again"; cat "$out"; }
check "up again starts nothing (same pids)" [ "$(pids)" = "$first" ]
check "up again says what is already running" grep -q "edge2 already running" "$out"

victim=$(cat "$STATE/run/edge2.pid")
kill -KILL "$victim"
while kill -0 "$victim" 2>/dev/null; do sleep 0.05; done
"${UP[@]}" >"$out" 2>&1 || { fail "up after a crash"; cat "$out"; }
check "up after a killed edge restarts it alone" grep -q "started edge2" "$out"
check "... and nothing else" [ "$(grep -c "^    started" "$out")" = 1 ]

# --router-config: a router started from now on runs with a copy of the file,
# one already running is left alone (and said so).
runs_with_config() { # runs_with_config NAME: its command line has --config <its router.toml>
    tr '\0' '\n' <"/proc/$(cat "$STATE/run/$1.pid")/cmdline" \
        | grep -A1 -x -- --config | grep -qx -- "$STATE/routers/$1/router.toml"
}
rconf=$(mktemp)
printf '[callbacks]\nallow_private_networks = true\n' >"$rconf"
victim=$(cat "$STATE/run/router1.pid")
kill -KILL "$victim"
while kill -0 "$victim" 2>/dev/null; do sleep 0.05; done
"${UP[@]}" --router-config "$rconf" >"$out" 2>&1 || { fail "up --router-config"; cat "$out"; }
check "up --router-config restarts the killed router1" grep -q "started router1" "$out"
check "... with a copy of the file in routers/router1/router.toml" \
    cmp -s "$rconf" "$STATE/routers/router1/router.toml"
check "... which it runs with (--config)" runs_with_config router1
check "... and leaves router2 running as it was, saying so" \
    grep -q "router2 is already running with the configuration it was started with" "$out"
check "... (router2 has no router.toml)" [ ! -e "$STATE/routers/router2/router.toml" ]
rm -f "$rconf"

if [ "$REAL" = 1 ]; then
    if python3 "$HERE/smoke" --state-dir "$STATE"; then ok "deploy/smoke"; else fail "deploy/smoke"; fi
fi

"${DOWN[@]}" >"$out" 2>&1 || { fail "down"; cat "$out"; }
check "down leaves no process of the deployment" [ -z "$(tagged_processes)" ]
if any_port_open; then fail "down frees every port"; else ok "down frees every port"; fi
check "down keeps the state dir" [ -s "$STATE/secrets/jwt-secret" ]
"${DOWN[@]}" >"$out" 2>&1 && rc=0 || rc=$?
check "down again is harmless" [ "$rc" = 0 ]
check "down again says nothing was running" grep -q "nothing was running" "$out"

secret=$(cat "$STATE/secrets/jwt-secret")
if "${UP[@]}" >"$out" 2>&1; then ok "up again on the kept state (brokers restart on their data)"; else
    fail "up again on the kept state"; cat "$out"
fi
check "the secrets survived" [ "$(cat "$STATE/secrets/jwt-secret")" = "$secret" ]
check "Redis kept its data across down and up (AOF)" [ "$(redis get "$probe")" = kept ]
check "router1 runs with its recorded router.toml again, without --router-config" \
    runs_with_config router1
if runs_with_config router2; then fail "router2 runs with the defaults"; else ok "router2 runs with the defaults"; fi
"${DOWN[@]}" --purge >"$out" 2>&1 || { fail "down --purge"; cat "$out"; }
check "down --purge deletes the state dir" [ ! -e "$STATE" ]
check "down --purge leaves no process" [ -z "$(tagged_processes)" ]
rm -f "$out"

echo
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
