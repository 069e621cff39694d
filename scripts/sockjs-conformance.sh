#!/usr/bin/env bash
# Run the SockJS protocol test suite (sockjs-protocol 0.3.3) against herald-gateway and print a
# pass/fail table. See docs/sockjs-conformance.md.
#
#   scripts/sockjs-conformance.sh [options] SUITE
#   SOCKJS_PROTOCOL_PY=SUITE scripts/sockjs-conformance.sh [options]
#
# SUITE is sockjs-protocol-0.3.3.py from a checkout of github.com/sockjs/sockjs-protocol at tag
# v0.3.3 (its utils_03.py and httplib_fork.py must be beside it), or that checkout's directory.
# The suite is not part of Herald, and this script never downloads it.
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
# Needs Python 2.7 (the suite is Python 2): $PYTHON2, else pyenv's 2.7.x, else python2.7 on
# PATH. The suite's packages (scripts/sockjs-conformance/requirements.txt, from PyPI) go into a
# virtualenv outside the repository, $SOCKJS_VENV [default:
# ${XDG_CACHE_HOME:-~/.cache}/herald/sockjs-protocol-venv], made once and remade when the pins
# change. Honours CARGO_TARGET_DIR.
#
# Exit status: 0 when every test passed or is listed in
# scripts/sockjs-conformance/not-applicable.txt, 1 when any other test failed, 2 for usage or
# setup errors.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE="$ROOT/scripts/sockjs-conformance"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/herald"
VENV="${SOCKJS_VENV:-$CACHE/sockjs-protocol-venv}"
VENV_TOOLS="$CACHE/virtualenv-py27"
SUITE_FILE_NAME=sockjs-protocol-0.3.3.py
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
    [ -n "$SUITE" ] || die "give the path of $SUITE_FILE_NAME (argument or SOCKJS_PROTOCOL_PY); see --help"
    [ -z "$URL" ] || [ -z "$GATEWAY" ] || die "--url and --gateway exclude each other"
    if [ -d "$SUITE" ]; then
        SUITE="$SUITE/$SUITE_FILE_NAME"
    fi
    [ -f "$SUITE" ] || die "$SUITE: no such file"
    SUITE=$(abspath "$SUITE")
    local dir
    dir=$(dirname "$SUITE")
    [ -f "$dir/httplib_fork.py" ] && { [ -f "$dir/utils_03.py" ] || [ -f "$dir/utils.py" ]; } \
        || die "utils_03.py and httplib_fork.py must be beside $SUITE (use a checkout of sockjs-protocol at v0.3.3)"
}

abspath() { (cd "$(dirname "$1")" && printf '%s/%s\n' "$(pwd)" "$(basename "$1")"); }

find_python2() {
    local candidate
    if [ -n "${PYTHON2:-}" ]; then
        printf '%s\n' "$PYTHON2"
        return
    fi
    if command -v pyenv >/dev/null 2>&1; then
        for candidate in "$(pyenv root)"/versions/2.7*/bin/python; do
            [ -x "$candidate" ] && { printf '%s\n' "$candidate"; return; }
        done
    fi
    for candidate in "$HOME"/.pyenv/versions/2.7*/bin/python "$(command -v python2.7 || true)"; do
        [ -n "$candidate" ] && [ -x "$candidate" ] && { printf '%s\n' "$candidate"; return; }
    done
    die "Python 2.7 not found: set PYTHON2, or install it (pyenv install 2.7.18)"
}

# The suite's virtualenv: made with virtualenv 20.15 run by Python 2.7 itself, and filled from
# the pinned requirements; remade only when the pins or the interpreter change.
ensure_venv() {
    local python2 stamp want
    python2=$(find_python2)
    "$python2" -c 'import sys; sys.exit(sys.version_info[:2] != (2, 7))' \
        || die "$python2 is not Python 2.7"
    stamp="$VENV/.herald-requirements.sha256"
    want=$( { cat "$HERE/requirements.txt" "$HERE/virtualenv-requirements.txt"; "$python2" -V 2>&1; } \
        | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -x "$VENV/bin/python" ]; then
        return
    fi
    step "preparing the Python 2.7 virtualenv at $VENV"
    if [ ! -f "$VENV_TOOLS/.installed" ] || ! cmp -s "$HERE/virtualenv-requirements.txt" "$VENV_TOOLS/.installed"; then
        rm -rf "$VENV_TOOLS"
        "$python2" -m pip install -q --no-warn-script-location --target "$VENV_TOOLS" \
            -r "$HERE/virtualenv-requirements.txt" 2>&1 | grep -v DEPRECATION >&2 || true
        [ -d "$VENV_TOOLS/virtualenv" ] || die "could not install virtualenv for $python2"
        cp "$HERE/virtualenv-requirements.txt" "$VENV_TOOLS/.installed"
    fi
    rm -rf "$VENV"
    PYTHONPATH="$VENV_TOOLS" "$python2" -m virtualenv -q "$VENV" >&2
    "$VENV/bin/pip" install -q -r "$HERE/requirements.txt" 2>&1 | grep -v DEPRECATION >&2 || true
    "$VENV/bin/python" -c 'import unittest2, websocket, ws4py' \
        || die "the virtualenv at $VENV lacks the suite's packages"
    echo "$want" >"$stamp"
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
        --not-applicable "$HERE/not-applicable.txt" ${RUNNER_ARGS[@]+"${RUNNER_ARGS[@]}"} || status=$?
    if [ "$status" -ne 0 ] && [ -n "$GATEWAY_PID" ] && [ "$GATEWAY_LOG" = "$WORK/gateway.log" ]; then
        local kept
        kept=$(mktemp "${TMPDIR:-/tmp}/herald-sockjs-gateway.XXXXXX.log")
        cp "$GATEWAY_LOG" "$kept"
        printf '\ngateway log: %s\n' "$kept"
    fi
    return "$status"
}

main "$@"
