#!/usr/bin/env bash
# Run the Autobahn|Testsuite WebSocket conformance cases 1-10 (wstest -m fuzzingclient) against
# herald-gateway's own WebSocket framing, and compare every case's outcome with the pinned
# expectations in scripts/autobahn/expected.json. See docs/websocket-conformance.md.
#
#   scripts/autobahn.sh [options]
#
# Two runs, each against a fresh gateway started with --sockjs-test-endpoints, whose
# /echo/websocket echoes every message over the gateway's RFC 6455 codec
# (herald_protocol::websocket, the one /ws and /sockjs/websocket use):
#   default-limits  cases 1-10 with the default session.max_frame_bytes (64 KiB): the 9.x
#                   cases (messages of 256 KiB to 16 MiB) and 7.1.6 are expected to be closed
#                   with 1009 (message too big), which the suite rates FAILED/INFORMATIONAL;
#   raised-limit    the 9.x cases and 7.1.6 with session.max_frame_bytes = 16 MiB, where they
#                   are expected to pass.
# Compression (12.x, 13.x) is not run: the gateway negotiates no extension.
#
# Options:
#   --gateway PATH   herald-gateway binary to test [default: `cargo build -p herald-gateway`
#                    and use the debug binary]
#   --reports DIR    keep wstest's reports (HTML and JSON per case) in DIR/<run> [default: a
#                    temporary directory, removed at the end]
#   --update         rewrite scripts/autobahn/expected.json from this run's results instead of
#                    comparing (review the diff before committing it)
#
# Needs Python 2.7 (autobahntestsuite is Python 2): $PYTHON2, else pyenv's 2.7.x, else
# python2.7. The suite and its dependencies (scripts/autobahn/requirements.txt, from PyPI) go
# into a virtualenv outside the repository, $AUTOBAHN_VENV [default:
# ${XDG_CACHE_HOME:-~/.cache}/herald/autobahn-venv], made once and remade when the pins change.
# Honours CARGO_TARGET_DIR.
#
# Exit status: 0 when every case behaved as expected, 1 when any differed (the differences are
# printed), 2 for usage or setup errors.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE="$ROOT/scripts/autobahn"
# shellcheck source=lib/py27-venv.sh
. "$ROOT/scripts/lib/py27-venv.sh"
VENV="${AUTOBAHN_VENV:-$PY27_CACHE/autobahn-venv}"
EXPECTED="$HERE/expected.json"
STARTUP_TIMEOUT_SECS=30
# The raised limit: 9.1.6 and 9.2.6 send 16 MiB messages.
RAISED_LIMIT_BYTES=$((16 * 1024 * 1024))
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PYTHONDONTWRITEBYTECODE=1
export PYTHONWARNINGS=ignore

GATEWAY=""
REPORTS=""
UPDATE=0
WORK=""
GATEWAY_PID=""
GATEWAY_LOG=""

usage() { sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { printf 'autobahn: %s\n' "$*" >&2; exit 2; }
step() { printf '==> %s\n' "$*" >&2; }

parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --gateway) GATEWAY=${2:?--gateway needs a path}; shift 2 ;;
            --reports) REPORTS=${2:?--reports needs a directory}; shift 2 ;;
            --update) UPDATE=1; shift ;;
            -h|--help) usage ;;
            *) die "unknown argument $1 (see --help)" ;;
        esac
    done
}

target_dir() {
    cargo metadata --format-version 1 --no-deps \
        | "$VENV/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

free_port() {
    "$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

random_token() {
    "$VENV/bin/python" -c 'import binascii, os; print(binascii.hexlify(os.urandom(24)))'
}

# GET url: prints the status code, or ERR.
http_status() {
    "$VENV/bin/python" - "$1" <<'PY'
import sys, urllib2
try:
    print(urllib2.urlopen(sys.argv[1], timeout=2).getcode())
except urllib2.HTTPError as e:
    print(e.code)
except Exception:
    print('ERR')
PY
}

# start_gateway NAME [CONFIG]: a gateway on a free port with the test endpoints; sets PORT.
start_gateway() {
    local name=$1 config=${2:-} deadline args=()
    PORT=$(free_port)
    GATEWAY_LOG="$WORK/gateway-$name.log"
    [ -z "$config" ] || args+=(--config "$config")
    "$GATEWAY" ${args[@]+"${args[@]}"} --listen "127.0.0.1:$PORT" --jwt-secret "$(random_token)" \
        --api-key "$(random_token)" --data-dir "$WORK/data-$name" --sockjs-test-endpoints \
        </dev/null >"$GATEWAY_LOG" 2>&1 &
    GATEWAY_PID=$!
    deadline=$((SECONDS + STARTUP_TIMEOUT_SECS))
    until [ "$(http_status "http://127.0.0.1:$PORT/healthz")" = 200 ]; do
        if ! kill -0 "$GATEWAY_PID" 2>/dev/null; then
            wait "$GATEWAY_PID" || true
            GATEWAY_PID=""
            tail -n 20 "$GATEWAY_LOG" >&2
            die "the gateway exited during startup (log above)"
        fi
        [ $SECONDS -lt "$deadline" ] || die "no 200 from /healthz within ${STARTUP_TIMEOUT_SECS}s"
        sleep 0.1
    done
}

stop_gateway() {
    [ -n "$GATEWAY_PID" ] || return 0
    kill -TERM "$GATEWAY_PID" 2>/dev/null || true
    local i
    for i in $(seq 100); do
        kill -0 "$GATEWAY_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$GATEWAY_PID" 2>/dev/null || true
    wait "$GATEWAY_PID" 2>/dev/null || true
    GATEWAY_PID=""
}

cleanup() {
    stop_gateway
    if [ -n "$WORK" ]; then rm -rf "$WORK"; fi
}

# run_cases NAME CASES_JSON [CONFIG]: one fuzzingclient run against a fresh gateway.
run_cases() {
    local name=$1 cases=$2 config=${3:-} outdir="$REPORTS/$1" status=0
    start_gateway "$name" "$config"
    rm -rf "$outdir"
    cat >"$WORK/spec-$name.json" <<JSON
{
  "outdir": "$outdir",
  "servers": [{"agent": "herald-gateway", "url": "ws://127.0.0.1:$PORT/echo/websocket"}],
  "cases": $cases,
  "exclude-cases": [],
  "exclude-agent-cases": {}
}
JSON
    step "$name: wstest -m fuzzingclient, cases $cases, against 127.0.0.1:$PORT"
    (cd "$WORK" && "$VENV/bin/wstest" -m fuzzingclient -s "$WORK/spec-$name.json") \
        >"$WORK/wstest-$name.log" 2>&1 || status=$?
    stop_gateway
    if [ "$status" -ne 0 ] || [ ! -f "$outdir/index.json" ]; then
        tail -n 30 "$WORK/wstest-$name.log" >&2
        die "wstest failed for $name (exit $status; log above)"
    fi
}

main() {
    parse_args "$@"
    ensure_py27_venv "$VENV" autobahntestsuite "$HERE/requirements.txt"
    WORK=$(mktemp -d)
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    if [ -z "$REPORTS" ]; then
        REPORTS="$WORK/reports"
    fi
    mkdir -p "$REPORTS"
    REPORTS=$(cd "$REPORTS" && pwd)
    if [ -z "$GATEWAY" ]; then
        step "building herald-gateway"
        (cd "$ROOT" && cargo build -p herald-gateway >&2)
        GATEWAY="$(cd "$ROOT" && target_dir)/debug/herald-gateway"
    fi
    [ -x "$GATEWAY" ] || die "$GATEWAY is not an executable"

    run_cases default-limits '["1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "8.*", "9.*", "10.*"]'
    printf '[session]\nmax_frame_bytes = %d\n' "$RAISED_LIMIT_BYTES" >"$WORK/raised-limit.toml"
    run_cases raised-limit '["7.1.6", "9.*"]' "$WORK/raised-limit.toml"

    local args=(--expected "$EXPECTED" "default-limits=$REPORTS/default-limits"
        "raised-limit=$REPORTS/raised-limit")
    [ "$UPDATE" = 0 ] || args+=(--update)
    "$VENV/bin/python" "$HERE/compare.py" "${args[@]}"
}

main "$@"
