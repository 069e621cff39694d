#!/usr/bin/env bash
# Check the OpenAPI contract (engine/openapi.json): the document is valid
# OpenAPI 3.1 (openapi-spec-validator, on the file and on what each process
# serves), the API reference page /v1/docs and its script are served, the
# committed Redoc bundle is npm's (scripts/vendor-redoc.sh --check, when npm
# is installed), and the running
# binaries answer as it says (schemathesis): a standalone herald-gateway and a herald-router
# (with its delayed store in Redis), each on a loopback port, each checked
# against the document it serves at /v1/openapi.json. schemathesis generates
# requests from the document (valid and invalid ones, its examples, and
# sequences following its links) and checks every answer: no 5xx, a
# documented status, content type, headers and body, invalid input refused,
# undocumented methods answered 405, the API key required.
#
#   scripts/openapi-check.sh [options]
#
# Options:
#   --bin-dir DIR        where herald-gateway and herald-router are
#                        [default: the debug binaries of `cargo metadata`'s target dir]
#   --python PATH        a Python with tests/openapi/requirements.txt installed
#                        [default: .venv/bin/python]
#   --max-examples N     test cases per operation and phase [default: 50; about a
#                        minute for both runs on two cores]
#   --seed N             schemathesis's seed [default: a fixed one, so CI is repeatable]
#   --reports DIR        keep schemathesis's JUnit reports there [default: not kept]
#
# OPENAPI_CHECKS, when set, replaces the list of schemathesis checks (e.g.
# `all`, which adds positive_data_acceptance: it fails where a valid
# request is refused for a reason the document only describes, such as a
# query string beside a JSON body, or a topic's timeout_ms beyond what
# schedule.lease_ms fits).
#
# Needs RabbitMQ on 127.0.0.1:5672 (guest/guest) and Redis on 127.0.0.1:6379
# (scripts/test.sh starts both); the router uses exchanges and queues named
# herald*.openapi-check and Redis keys under herald-openapi-check:; its
# queues and keys are deleted at the end (the exchanges, always the same
# names, stay for the next run). Callbacks cannot leave the machine: both
# processes get a proxy on a closed loopback port for every outgoing request,
# so a callback URL schemathesis makes up fails at once on 127.0.0.1.
#
# Prints `openapi: gateway ..., router ...` last. Exit status: 0 when both
# passed, 1 when schemathesis found a failure, 2 for setup errors.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

BIN_DIR=""
PYTHON="$ROOT/.venv/bin/python"
MAX_EXAMPLES=50
SEED=20261126
REPORTS=""
API_KEY="openapi-check-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
# A second router key with a publish rate, so that 429 and its Retry-After
# are answered and checked too.
LIMITED_KEY="openapi-limited-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
SUFFIX=".openapi-check"
REDIS_PREFIX="herald-openapi-check"
STARTUP_TIMEOUT_SECS=30

usage() { sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { printf 'openapi-check: %s\n' "$*" >&2; exit 2; }
step() { printf '==> %s\n' "$*" >&2; }

while [ $# -gt 0 ]; do
    case $1 in
        --bin-dir) BIN_DIR=$2; shift 2 ;;
        --python) PYTHON=$2; shift 2 ;;
        --max-examples) MAX_EXAMPLES=$2; shift 2 ;;
        --seed) SEED=$2; shift 2 ;;
        --reports) REPORTS=$(realpath -m "$2"); shift 2 ;;
        -h | --help) usage ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done

if [ -z "$BIN_DIR" ]; then
    BIN_DIR="$(cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/debug"
fi
for b in herald-gateway herald-router; do
    [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b was not built"
done
"$PYTHON" -m schemathesis.cli --version >/dev/null 2>&1 \
    || die "$PYTHON has no schemathesis: pip install -r tests/openapi/requirements.txt"
"$PYTHON" -m openapi_spec_validator --version >/dev/null 2>&1 \
    || die "$PYTHON has no openapi-spec-validator: pip install -r tests/openapi/requirements.txt"
redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || die "no Redis on 127.0.0.1:6379"

WORK=$(mktemp -d)
GATEWAY_PID=""
ROUTER_PID=""

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

clear_redis() {
    redis-cli -h 127.0.0.1 -p 6379 --scan --pattern "$REDIS_PREFIX:*" \
        | xargs -r -n 500 redis-cli -h 127.0.0.1 -p 6379 del >/dev/null
}

cleanup() {
    local pid
    for pid in "$GATEWAY_PID" "$ROUTER_PID"; do
        [ -n "$pid" ] || continue
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    # The router's queues hold nothing worth keeping (nobody publishes over
    # AMQP here); deleting them keeps the broker as it was.
    if command -v rabbitmqctl >/dev/null; then
        local q
        for q in "herald.publications$SUFFIX" "herald.dead$SUFFIX" "herald.presence$SUFFIX"; do
            rabbitmqctl -q delete_queue "$q" >/dev/null 2>&1 || true
        done
    fi
    clear_redis || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# Every outgoing HTTP request of the servers (callbacks, rechecks) goes to
# this proxy, where nothing listens.
# this proxy, where nothing listens (only theirs: curl and schemathesis
# would honour it too).
NOWHERE="http://127.0.0.1:$(free_port)"
# This script's own requests (curl, schemathesis) go straight to loopback.
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
SERVER_ENV=(env -u NO_PROXY -u no_proxy -u all_proxy -u http_proxy -u https_proxy
    ALL_PROXY="$NOWHERE" HTTP_PROXY="$NOWHERE" HTTPS_PROXY="$NOWHERE"
    RUST_LOG="${RUST_LOG:-warn}")

# Poll `url` until it answers 200, or give up after STARTUP_TIMEOUT_SECS.
wait_ready() {
    local url=$1 pid=$2 log=$3 deadline=$((SECONDS + STARTUP_TIMEOUT_SECS))
    until curl -fsS -o /dev/null "$url" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            cat "$log" >&2
            die "the process behind $url exited"
        fi
        if [ $SECONDS -ge $deadline ]; then
            cat "$log" >&2
            die "$url did not answer 200 within ${STARTUP_TIMEOUT_SECS}s"
        fi
        sleep 0.1
    done
}

clear_redis
GATEWAY_PORT=$(free_port)
step "starting herald-gateway (standalone) on 127.0.0.1:$GATEWAY_PORT"
"${SERVER_ENV[@]}" "$BIN_DIR/herald-gateway" --listen "127.0.0.1:$GATEWAY_PORT" --data-dir "$WORK/gateway-data" \
    --jwt-secret "openapi-check-secret-openapi-check-secret" --api-key "$API_KEY" \
    >"$WORK/gateway.log" 2>&1 &
GATEWAY_PID=$!
wait_ready "http://127.0.0.1:$GATEWAY_PORT/readyz" "$GATEWAY_PID" "$WORK/gateway.log"

ROUTER_PORT=$(free_port)
step "starting herald-router on 127.0.0.1:$ROUTER_PORT (RabbitMQ 127.0.0.1:5672, Redis prefix $REDIS_PREFIX)"
cat >"$WORK/router.toml" <<EOF
listen = "127.0.0.1:$ROUTER_PORT"
api_keys = ["$API_KEY"]
shutdown_grace_ms = 2000
[[api_key]]
name = "limited"
key = "$LIMITED_KEY"
ops = ["publish"]
rate_per_sec = 0.5
burst = 2
[amqp]
url = "amqp://guest:guest@127.0.0.1:5672/%2f"
connection_name = "herald-router openapi-check"
[amqp.topology]
exchange = "herald$SUFFIX"
queue = "herald.publications$SUFFIX"
dead_exchange = "herald.dead$SUFFIX"
dead_queue = "herald.dead$SUFFIX"
edges_exchange = "herald.edges$SUFFIX"
presence_exchange = "herald.presence$SUFFIX"
presence_queue = "herald.presence$SUFFIX"
[redis]
url = "redis://127.0.0.1:6379"
prefix = "$REDIS_PREFIX"
EOF
"${SERVER_ENV[@]}" "$BIN_DIR/herald-router" --config "$WORK/router.toml" >"$WORK/router.log" 2>&1 &
ROUTER_PID=$!
wait_ready "http://127.0.0.1:$ROUTER_PORT/readyz" "$ROUTER_PID" "$WORK/router.log"

status=0
results=()

# The documents themselves, before anything is generated from them: the
# whole one as written and each one a process serves, valid OpenAPI 3.1
# (openapi-spec-validator: the 3.1 schema and its rules).
validate() {
    local name=$1 file=$2
    step "openapi-spec-validator: $name"
    if "$PYTHON" -m openapi_spec_validator --validation-errors all "$file"; then
        return 0
    fi
    results+=("$name: not valid OpenAPI (openapi-spec-validator)")
    status=1
}
validate engine/openapi.json "$ROOT/engine/openapi.json"
curl -fsS -o "$WORK/gateway-openapi.json" "http://127.0.0.1:$GATEWAY_PORT/v1/openapi.json"
validate "the gateway's /v1/openapi.json" "$WORK/gateway-openapi.json"
curl -fsS -o "$WORK/router-openapi.json" "http://127.0.0.1:$ROUTER_PORT/v1/openapi.json"
validate "the router's /v1/openapi.json" "$WORK/router-openapi.json"
[ $status -eq 0 ] && results+=("documents valid (openapi-spec-validator)")

# The API reference page (/v1/docs) of both: the page, and the script it
# names, from this process. The bundle is npm's redoc as committed
# (scripts/vendor-redoc.sh --check packs it again and compares).
reference_page() {
    local base=$1 script
    script=$(curl -fsS "$base/v1/docs" | sed -n 's|.*<script src="\(/v1/docs/assets/[^"]*\)".*|\1|p')
    [ -n "$script" ] && curl -fsS -o /dev/null "$base$script"
}
for name in gateway router; do
    port=GATEWAY_PORT
    [ $name = router ] && port=ROUTER_PORT
    if ! reference_page "http://127.0.0.1:${!port}"; then
        results+=("$name: /v1/docs or its script not served")
        status=1
    fi
done
if command -v npm >/dev/null; then
    if scripts/vendor-redoc.sh --check; then
        results+=("redoc bundle as npm ships it")
    else
        results+=("redoc bundle differs from npm's")
        status=1
    fi
fi

CHECKS=${OPENAPI_CHECKS:-not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,negative_data_rejection,missing_required_header,unsupported_method,ignored_auth,use_after_free,ensure_resource_availability}

# Run schemathesis with API key `key` against the document served at
# `base`; the rest of the arguments are extra options (filters).
schemathesis_run() {
    local name=$1 base=$2 key=$3
    shift 3
    local args=(run "$base/v1/openapi.json" --url "$base"
        -H "Authorization: Bearer $key"
        --checks "$CHECKS"
        --phases examples,coverage,fuzzing,stateful
        --max-examples "$MAX_EXAMPLES" --seed "$SEED"
        --workers 1 --request-timeout 10
        --suppress-health-check all --output-truncate true "$@")
    if [ -n "$REPORTS" ]; then
        mkdir -p "$REPORTS"
        args+=(--report junit --report-junit-path "$REPORTS/$name.xml")
    fi
    step "schemathesis against the $name ($base)"
    # From the scratch directory: schemathesis keeps a .schemathesis/ there.
    (cd "$WORK" && "$PYTHON" -m schemathesis.cli "${args[@]}") 2>&1 | tee "$WORK/$name.out"
    return "${PIPESTATUS[0]}"
}

# "N generated, N passed" from a run's summary.
cases() {
    grep -E '^ +[0-9]+ generated' "$WORK/$1.out" | tail -n1 | sed -E 's/^ +//; s/, [0-9]+ skipped//'
}

# The SockJS transports are left out: their receivers stream (an answer
# never ends while the session lives) and the SockJS protocol itself
# answers a bad xhr_send with 500 ("Payload expected.", "Broken JSON
# encoding."); the SockJS suite checks them (scripts/sockjs-conformance.sh).
if schemathesis_run gateway "http://127.0.0.1:$GATEWAY_PORT" "$API_KEY" --exclude-tag sockjs-transport; then
    results+=("gateway passed ($(cases gateway))")
else
    results+=("gateway FAILED ($(cases gateway))")
    status=1
    tail -n 50 "$WORK/gateway.log" >&2
fi
if schemathesis_run router "http://127.0.0.1:$ROUTER_PORT" "$API_KEY"; then
    results+=("router passed ($(cases router))")
else
    results+=("router FAILED ($(cases router))")
    status=1
    tail -n 50 "$WORK/router.log" >&2
fi
# Publishing with the rate-limited key: mostly 429 with Retry-After (and
# 403 for the operations it lacks, which stateful steps may reach).
if schemathesis_run router-rate "http://127.0.0.1:$ROUTER_PORT" "$LIMITED_KEY" \
    --include-operation-id publish --phases examples,fuzzing --max-examples 20; then
    # Only worth it if schemathesis did meet 429s (which it then checked).
    if curl -s "http://127.0.0.1:$ROUTER_PORT/metrics" \
        | grep -E '^herald_api_key_refused_total\{.*reason="rate_limited".*\} [1-9]' >/dev/null; then
        results+=("rate-limited key passed ($(cases router-rate))")
    else
        results+=("rate-limited key: no 429 seen")
        status=1
    fi
else
    results+=("rate-limited key FAILED ($(cases router-rate))")
    status=1
fi
for pid in "$GATEWAY_PID" "$ROUTER_PID"; do
    kill -0 "$pid" 2>/dev/null || { results+=("a server died (pid $pid)"); status=1; }
done
summary=$(printf '%s; ' "${results[@]}")
echo "openapi: ${summary%; } (schemathesis, $MAX_EXAMPLES examples per operation and phase)"
exit "$status"
