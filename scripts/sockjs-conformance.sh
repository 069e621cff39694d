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
# The suite is not part of Herald. No package registry carries either pinned file; with
# --pypi-copy the script instead downloads the one copy a registry does carry (see that option),
# which is what scripts/test.sh runs in CI.
#
# Options:
#   --pypi-copy          instead of SUITE, test the copy of the v0.3.3 suite bundled in PyPI's
#                        pyramid_sockjs 0.3.9 sdist (tests/sockjs-protocol-0.3.3.py: upstream
#                        commit 47ad873 of 2012-10-30, 3.5 months before the v0.3.3 tag, with one
#                        indentation fix), downloaded with pip once into
#                        ${XDG_CACHE_HOME:-~/.cache}/herald/sockjs-protocol-pypi, sha256-checked
#   --gateway PATH       herald-gateway binary to test [default: `cargo build -p herald-gateway`
#                        and use the debug binary]
#   --url URL            test a SockJS server already running at URL instead (nothing is started)
#   --only TEST          run only TEST: `Class` or `Class.test_name`; repeatable
#   --json FILE          also write the results as JSON
#   --retries N          run a failing test up to N more times [default: 3]: a few of the
#                        suite's tests rely on 0.25 s sleeps, or on two requests sent on two
#                        connections being served in the order sent, and miss now and then;
#                        a pass on a retry is reported as such
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
RETRIES=3
SUITE="${SOCKJS_PROTOCOL_PY:-}"
PYPI_COPY=0
# The registry copy of the v0.3.3 suite: the sdist and its sha256.
PYPI_COPY_REQUIREMENT=pyramid_sockjs==0.3.9
PYPI_COPY_SDIST=pyramid_sockjs-0.3.9.tar.gz
PYPI_COPY_SHA256=f2c771e068f001fa795e042cc47f1062d02f935aa30761337a98ea172f6d1bdd
PYPI_COPY_DIR="$PY27_CACHE/sockjs-protocol-pypi/pyramid_sockjs-0.3.9"
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
            --pypi-copy) PYPI_COPY=1; shift ;;
            --retries) RETRIES=${2:?--retries needs a number}; shift 2 ;;
            --only) RUNNER_ARGS+=(--only "${2:?--only needs a test name}"); shift 2 ;;
            --json) RUNNER_ARGS+=(--json "$(abspath "${2:?--json needs a file}")"); shift 2 ;;
            --gateway-log) GATEWAY_LOG=$(abspath "${2:?--gateway-log needs a file}"); shift 2 ;;
            -h|--help) usage ;;
            -*) die "unknown option $1 (see --help)" ;;
            *) SUITE=$1; shift ;;
        esac
    done
    if [ "$PYPI_COPY" = 1 ]; then
        # Downloaded after the virtualenv exists (its pip does it), by fetch_pypi_copy.
        SUITE="$PYPI_COPY_DIR/sockjs-protocol-0.3.3.py"
        set_version sockjs-protocol-0.3.3.py
        return
    fi
    [ -n "$SUITE" ] || die "give the path of ${SUITE_FILE_NAMES[*]} (argument or SOCKJS_PROTOCOL_PY), or --pypi-copy; see --help"
    [ -z "$URL" ] || [ -z "$GATEWAY" ] || die "--url and --gateway exclude each other"
    local name
    if [ -d "$SUITE" ]; then
        for name in "${SUITE_FILE_NAMES[@]}"; do
            [ -f "$SUITE/$name" ] && { SUITE="$SUITE/$name"; break; }
        done
    fi
    [ -f "$SUITE" ] || die "$SUITE: no such file (want one of ${SUITE_FILE_NAMES[*]})"
    SUITE=$(abspath "$SUITE")
    set_version "$(basename "$SUITE")"
    local dir
    dir=$(dirname "$SUITE")
    [ -f "$dir/httplib_fork.py" ] && [ -f "$dir/$HELPERS" ] \
        || die "$HELPERS and httplib_fork.py must be beside $SUITE (use a checkout of sockjs-protocol)"
}

# set_version FILE_NAME: the helpers, virtualenv, requirements and lists of that suite form.
set_version() {
    case "$1" in
        sockjs-protocol-0.3.3.py)
            HELPERS=utils_03.py
            VENV="${SOCKJS_VENV:-$PY27_CACHE/sockjs-protocol-venv}"
            REQUIREMENTS="$HERE/requirements.txt"
            NOT_APPLICABLE="$HERE/not-applicable-0.3.3.txt"
            SUPERSEDED="$HERE/superseded-0.3.3.txt"
            ;;
        sockjs-protocol.py)
            HELPERS=utils.py
            VENV="${SOCKJS_VENV:-$PY27_CACHE/sockjs-protocol-head-venv}"
            REQUIREMENTS="$HERE/requirements-head.txt"
            NOT_APPLICABLE="$HERE/not-applicable-head.txt"
            SUPERSEDED=""
            ;;
        *) die "$SUITE: not one of ${SUITE_FILE_NAMES[*]}" ;;
    esac
}

# The suite files of the registry copy, into PYPI_COPY_DIR once: pip downloads the sdist (no
# install, nothing of it runs but its setup.py's metadata step), the sha256 is checked, and only
# the suite's three files are kept.
fetch_pypi_copy() {
    [ -f "$PYPI_COPY_DIR/.sha256" ] && [ "$(cat "$PYPI_COPY_DIR/.sha256")" = "$PYPI_COPY_SHA256" ] \
        && return
    step "downloading $PYPI_COPY_REQUIREMENT (its tests/ bundle the SockJS protocol suite)"
    local dl="$WORK/pypi-copy" got
    mkdir -p "$dl"
    "$VENV/bin/pip" download -q --no-deps --no-binary :all: -d "$dl" "$PYPI_COPY_REQUIREMENT" \
        2>&1 | grep -v DEPRECATION >&2 || true
    [ -f "$dl/$PYPI_COPY_SDIST" ] || die "pip did not download $PYPI_COPY_SDIST"
    got=$(sha256sum "$dl/$PYPI_COPY_SDIST" | cut -d' ' -f1)
    [ "$got" = "$PYPI_COPY_SHA256" ] \
        || die "$PYPI_COPY_SDIST has sha256 $got, expected $PYPI_COPY_SHA256"
    tar -xzf "$dl/$PYPI_COPY_SDIST" -C "$dl"
    rm -rf "$PYPI_COPY_DIR"
    mkdir -p "$PYPI_COPY_DIR"
    local f
    for f in sockjs-protocol-0.3.3.py utils_03.py httplib_fork.py; do
        cp "$dl/${PYPI_COPY_SDIST%.tar.gz}/tests/$f" "$PYPI_COPY_DIR/$f"
    done
    echo "$PYPI_COPY_SHA256" >"$PYPI_COPY_DIR/.sha256"
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
    [ "$PYPI_COPY" = 0 ] || fetch_pypi_copy
    if [ -z "$URL" ]; then
        start_gateway
    fi
    URL=${URL%/}
    check_test_services

    step "running $(basename "$SUITE") against $URL"
    local status=0
    SOCKJS_URL="$URL" "$VENV/bin/python" "$HERE/runner.py" "$SUITE" \
        --not-applicable "$NOT_APPLICABLE" ${SUPERSEDED:+--superseded "$SUPERSEDED"} \
        --retries "$RETRIES" \
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
