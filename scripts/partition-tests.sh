#!/usr/bin/env bash
# The partition tests (tests/partitions, docs/partitions.md): a RabbitMQ
# root, Redis, a router and two edges, each in its own network namespace
# on a bridge of this machine (10.77.<n>.0/24, nothing routed off it), cut
# from each other one path at a time without a reset, then healed.
#
#   scripts/partition-tests.sh [--bin-dir DIR] [--python PY] [--timeout SECS] [-- PYTEST ARGS]
#
# Needs root (ip netns) and iproute2; fails, saying so, without them.
# Bounded: pytest is killed after --timeout seconds (default 300). On exit,
# whatever happened (a failure, Ctrl-C, the timeout), every process in the
# namespaces is ended and the namespaces and the bridge are deleted.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR=
PYTHON="$ROOT/.venv/bin/python"
LIMIT=300
while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) BIN_DIR=${2:?--bin-dir needs a directory}; shift 2 ;;
        --python) PYTHON=${2:?--python needs an interpreter}; shift 2 ;;
        --timeout) LIMIT=${2:?--timeout needs seconds}; shift 2 ;;
        --) shift; break ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "partition-tests: unknown argument: $1" >&2; exit 2 ;;
    esac
done

die() { echo "partition-tests: error: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root: the tests build hosts from network namespaces (ip netns), as CI runs them"
command -v ip >/dev/null || die "ip (iproute2) is missing"
ip netns list >/dev/null 2>&1 || die "ip netns does not work here (iproute2 without netns support?)"
case "$LIMIT" in '' | *[!0-9]*) die "--timeout: seconds, got '$LIMIT'" ;; esac
[ -x "$PYTHON" ] || die "$PYTHON: no Python with the tests' requirements (tests/distributed/requirements.txt)"

# Names of this run's namespaces (<prefix>-root ...), veths and bridge
# (<prefix>br): short, for the 15-byte interface names.
PREFIX="hp$(( $$ % 100000 ))"
export HERALD_PART_PREFIX=$PREFIX
[ -z "$BIN_DIR" ] || export HERALD_PART_BIN_DIR="$(realpath -m "$BIN_DIR")"

# The deployment's state (logs, broker data) goes under WORK: kept when
# the tests failed or timed out, or HERALD_PART_KEEP=1; else
# removed with the rest.
WORK=$(mktemp -d /tmp/herald-part-run.XXXXXX)
status=1

cleanup() {
    local ns pids i p alive sig
    for sig in TERM KILL; do
        pids=()
        for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PREFIX-" || true); do
            # shellcheck disable=SC2207
            pids+=($(ip netns pids "$ns" 2>/dev/null || true))
        done
        [ ${#pids[@]} -eq 0 ] && break
        kill "-$sig" "${pids[@]}" 2>/dev/null || true
        for i in $(seq 1 50); do
            alive=0
            for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
            [ "$alive" = 1 ] || break
            sleep 0.1
        done
    done
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PREFIX-" || true); do
        ip netns del "$ns" 2>/dev/null || true
    done
    ip link del "${PREFIX}br" 2>/dev/null || true
    if { [ "$status" -ne 0 ] && [ "$status" -ne 130 ]; } || [ "${HERALD_PART_KEEP:-}" = 1 ]; then
        echo "partition-tests: state and logs kept in $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

# Every client talks to the namespaces' addresses directly.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
cd "$ROOT/tests/partitions"
started=$SECONDS
# In the background, so that a signal to this script is handled at once
# (bash runs traps only between foreground commands): it stops pytest, and
# the EXIT trap cleans up.
TMPDIR=$WORK timeout --kill-after=10 "$LIMIT" "$PYTHON" -m pytest -p no:cacheprovider -v -s "$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; status=130; exit 130' INT TERM
set +e
wait "$child"
status=$?
set -e
[ "$status" -ne 124 ] || echo "partition-tests: killed after ${LIMIT}s" >&2
echo "partition-tests: $((SECONDS - started)) s"
exit "$status"
