#!/usr/bin/env bash
# Run the SockJS protocol test suite against herald-gateway and print a pass/fail table. See
# docs/sockjs-conformance.md.
#
#   scripts/sockjs-conformance.sh [options] SUITE
#   SOCKJS_PROTOCOL_PY=SUITE scripts/sockjs-conformance.sh [options]
#
# SUITE is one of the suite's two forms from a checkout of github.com/sockjs/sockjs-protocol, or
# that checkout's directory:
#   sockjs-protocol-0.3.3.py  at tag v0.3.3 (utils_03.py and httplib_fork.py beside it);
#   sockjs-protocol.py        the single-file suite of later revisions, pinned at the
#                             repository's HEAD, commit fdf5b7d (utils.py and httplib_fork.py
#                             beside it).
# The suite is not part of Herald, and this script never downloads it (no package registry
# carries it; see the doc).
#
# Options:
#   --gateway PATH       herald-gateway binary to test [default: `cargo build -p herald-gateway`
#                        and use the debug binary]
#   --url URL            test a SockJS server already running at URL instead (nothing is started)
#   --only TEST          run only TEST: `Class` or `Class.test_name`; repeatable
#   --json FILE          also write the results as JSON
#   --gateway-log FILE   where the gateway's output goes [default: a temporary file, kept and
#                        named when a test fails]
#
# Needs Python 2.7 (both forms are Python 2): $PYTHON2, else pyenv's 2.7.x, else python2.7 on
# PATH. The suite's packages (from PyPI, pinned in scripts/sockjs-conformance/requirements.txt
# for v0.3.3 and requirements-head.txt for sockjs-protocol.py) go into a virtualenv outside the
# repository, $SOCKJS_VENV [default: ${XDG_CACHE_HOME:-~/.cache}/herald/sockjs-protocol-venv,
# or sockjs-protocol-head-venv], made once and remade when the pins change. Honours
# CARGO_TARGET_DIR.
#
# Exit status: 0 when every test passed or is listed in the suite's
# scripts/sockjs-conformance/not-applicable-*.txt, and every v0.3.3 test listed in
# superseded-0.3.3.txt failed on the answer the protocol changed later; 1 otherwise; 2 for usage
# or setup errors.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE="$ROOT/scripts/sockjs-conformance"
# shellcheck source=lib/py27-venv.sh
. "$ROOT/scripts/lib/py27-venv.sh"
SUITE_FILE_NAMES=(sockjs-protocol-0.3.3.py sockjs-protocol.py)
# Set from the suite file by parse_args.
VENV=""
REQUIREMENTS=""
NOT_APPLICABLE=""
SUPERSEDED=""
STARTUP_TIMEOUT_SECS=30
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PYTHONDONTWRITEBYTECODE=1
export PYTHONWARNINGS=ignore::DeprecationWarning

GATEWAY=""
URL=""
GATEWAY_LOG=""
RUNNER_ARGS=()
SUITE="${SOCKJS_PROTOCOL_PY:-}"
WORK=""
GATEWAY_PID=""

usage() { sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { printf 'sockjs-conformance: %s\n' "$*" >&2; exit 2; }
step() { printf '==> %s\n' "$*" >&2; }

parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --gateway) GATEWAY=${2:?--gateway needs a path}; shift 2 ;;
            --url) URL=${2:?--url needs a URL}; shift 2 ;;
            --only) RUNNER_ARGS+=(--only "${2:?--only needs a test name}"); shift 2 ;;
            --json) RUNNER_ARGS+=(--json "$(abspath "${2:?--json needs a file}")"); shift 2 ;;
            --gateway-log) GATEWAY_LOG=$(abspath "${2:?--gateway-log needs a file}"); shift 2 ;;
            -h|--help) usage ;;
            -*) die "unknown option $1 (see --help)" ;;
            *) SUITE=$1; shift ;;
        esac
    done
    [ -n "$SUITE" ] || die "give the path of ${SUITE_FILE_NAMES[*]} (argument or SOCKJS_PROTOCOL_PY); see --help"
    [ -z "$URL" ] || [ -z "$GATEWAY" ] || die "--url and --gateway exclude each other"
    local name
    if [ -d "$SUITE" ]; then
        for name in "${SUITE_FILE_NAMES[@]}"; do
            [ -f "$SUITE/$name" ] && { SUITE="$SUITE/$name"; break; }
        done
    fi
    [ -f "$SUITE" ] || die "$SUITE: no such file (want one of ${SUITE_FILE_NAMES[*]})"
    SUITE=$(abspath "$SUITE")
    local dir helpers
    dir=$(dirname "$SUITE")
    case "$(basename "$SUITE")" in
        sockjs-protocol-0.3.3.py)
            helpers=utils_03.py
            VENV="${SOCKJS_VENV:-$PY27_CACHE/sockjs-protocol-venv}"
            REQUIREMENTS="$HERE/requirements.txt"
            NOT_APPLICABLE="$HERE/not-applicable-0.3.3.txt"
            SUPERSEDED="$HERE/superseded-0.3.3.txt"
            ;;
        sockjs-protocol.py)
            helpers=utils.py
            VENV="${SOCKJS_VENV:-$PY27_CACHE/sockjs-protocol-head-venv}"
            REQUIREMENTS="$HERE/requirements-head.txt"
            NOT_APPLICABLE="$HERE/not-applicable-head.txt"
            SUPERSEDED=""
            ;;
        *) die "$SUITE: not one of ${SUITE_FILE_NAMES[*]}" ;;
    esac
    [ -f "$dir/httplib_fork.py" ] && [ -f "$dir/$helpers" ] \
        || die "$helpers and httplib_fork.py must be beside $SUITE (use a checkout of sockjs-protocol)"
}

abspath() { (cd "$(dirname "$1")" && printf '%s/%s\n' "$(pwd)" "$(basename "$1")"); }

ensure_venv() {
    ensure_py27_venv "$VENV" "unittest2, websocket, ws4py" "$REQUIREMENTS"
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

# GET url: prints "STATUS BODY" (body repr), or "ERR message".
http_get() {
    "$VENV/bin/python" - "$1" <<'EOF'
import sys, urllib2
try:
    r = urllib2.urlopen(sys.argv[1], timeout=2)
    print('%d %r' % (r.getcode(), r.read()))
except urllib2.HTTPError as e:
    print('%d %r' % (e.code, e.read()))
except Exception as e:
    print('ERR %s' % e)
EOF
}

start_gateway() {
    if [ -z "$GATEWAY" ]; then
        step "building herald-gateway"
        (cd "$ROOT" && cargo build -p herald-gateway >&2)
        GATEWAY="$(cd "$ROOT" && target_dir)/debug/herald-gateway"
    fi
    [ -x "$GATEWAY" ] || die "$GATEWAY is not an executable"
    local port deadline answer
    port=$(free_port)
    URL="http://127.0.0.1:$port"
    [ -n "$GATEWAY_LOG" ] || GATEWAY_LOG="$WORK/gateway.log"
    step "starting $GATEWAY on 127.0.0.1:$port (log: $GATEWAY_LOG)"
    "$GATEWAY" --listen "127.0.0.1:$port" --jwt-secret "$(random_token)" \
        --api-key "$(random_token)" --data-dir "$WORK/data" --sockjs-test-endpoints \
        </dev/null >"$GATEWAY_LOG" 2>&1 &
    GATEWAY_PID=$!
    deadline=$((SECONDS + STARTUP_TIMEOUT_SECS))
    while :; do
        kill -0 "$GATEWAY_PID" 2>/dev/null || {
            wait "$GATEWAY_PID" || true
            GATEWAY_PID=""
            tail -n 20 "$GATEWAY_LOG" >&2
            die "the gateway exited during startup (log above)"
        }
        answer=$(http_get "$URL/healthz")
        [ "${answer%% *}" = 200 ] && break
        [ $SECONDS -lt $deadline ] || die "no 200 from $URL/healthz within ${STARTUP_TIMEOUT_SECS}s (last: $answer)"
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
    [ -n "$WORK" ] && rm -rf "$WORK/data"
    if [ -n "$WORK" ] && [ "${KEEP_WORK:-0}" != 1 ]; then rm -rf "$WORK"; fi
}

# The suite needs the four test services; say so plainly if they are not there.
check_test_services() {
    local answer
    answer=$(http_get "$URL/echo")
    [ "$answer" = "200 'Welcome to SockJS!\\n'" ] \
        || die "$URL/echo is not a SockJS service (got: $answer); does this gateway support --sockjs-test-endpoints?"
}

main() {
    parse_args "$@"
    ensure_venv
    WORK=$(mktemp -d)
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    if [ -z "$URL" ]; then
        start_gateway
    fi
    URL=${URL%/}
    check_test_services

    step "running $(basename "$SUITE") against $URL"
    local status=0
    SOCKJS_URL="$URL" "$VENV/bin/python" "$HERE/runner.py" "$SUITE" \
        --not-applicable "$NOT_APPLICABLE" ${SUPERSEDED:+--superseded "$SUPERSEDED"} \
        ${RUNNER_ARGS[@]+"${RUNNER_ARGS[@]}"} || status=$?
    if [ "$status" -ne 0 ] && [ -n "$GATEWAY_PID" ] && [ "$GATEWAY_LOG" = "$WORK/gateway.log" ]; then
        local kept
        kept=$(mktemp "${TMPDIR:-/tmp}/herald-sockjs-gateway.XXXXXX.log")
        cp "$GATEWAY_LOG" "$kept"
        printf '\ngateway log: %s\n' "$kept"
    fi
    return "$status"
}

main "$@"
