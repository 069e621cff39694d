#!/usr/bin/env bash
# Run every cargo-fuzz target of Herald for a bounded time (libFuzzer, nightly Rust): the
# decoders of protocol/fuzz (STOMP, WebSocket, SockJS, bundles, streaming UTF-8), engine/fuzz
# (the HTTP publish envelope, the delayed store's records) and amqp/fuzz (the edges' presence
# reports, the frames an edge's root link reads). See docs/fuzzing.md.
#
#   scripts/fuzz.sh [--seconds N] [TARGET...]
#
# Each target starts from its checked-in seed corpus (protocol/fuzz/corpus/<target>,
# engine/fuzz/corpus/<target>, amqp/fuzz/corpus/<target>), which is only read: what the fuzzer finds goes to a temporary
# directory and is dropped. A crash or a failed check stops that target; its input is kept in
# ${XDG_CACHE_HOME:-~/.cache}/herald/fuzz-artifacts/<target>/ (libFuzzer also prints it) and the
# script exits 1 once every target has run.
#
# Options:
#   --seconds N   how long each target runs [default: 20]
#   TARGET...     only these targets [default: all]
#
# Needs the nightly toolchain (rustup's `nightly`) and cargo-fuzz; installs cargo-fuzz
# 0.13.1 with `cargo install --locked` when it is missing. Honours CARGO_TARGET_DIR. The last
# line is `fuzz: N passed, M failed` (targets).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARGO_FUZZ_VERSION=0.13.1
ARTIFACTS="${XDG_CACHE_HOME:-$HOME/.cache}/herald/fuzz-artifacts"
SECONDS_EACH=20
# crate directory (holding fuzz/... or being the fuzz crate) and targets.
FUZZ_DIRS=(protocol/fuzz engine/fuzz amqp/fuzz)
ONLY=()

die() { printf 'fuzz: %s\n' "$*" >&2; exit 2; }
step() { printf '==> %s\n' "$*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECONDS_EACH=${2:?--seconds needs a number}; shift 2 ;;
        -h|--help) sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
        -*) die "unknown option $1" ;;
        *) ONLY+=("$1"); shift ;;
    esac
done

cargo +nightly --version >/dev/null 2>&1 \
    || die "no nightly toolchain (rustup toolchain list): cargo-fuzz needs it"
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
    step "installing cargo-fuzz $CARGO_FUZZ_VERSION (cargo install --locked)"
    cargo install --locked --quiet cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

passed=0
failed=0
failures=()
for dir in "${FUZZ_DIRS[@]}"; do
    # cargo fuzz works from the crate that holds the fuzz directory.
    crate="$ROOT/$(dirname "$dir")"
    for target in $(cd "$crate" && cargo +nightly fuzz list --fuzz-dir "$ROOT/$dir"); do
        if [ ${#ONLY[@]} -gt 0 ] && [[ ! " ${ONLY[*]} " == *" $target "* ]]; then
            continue
        fi
        corpus="$ROOT/$dir/corpus/$target"
        [ -d "$corpus" ] || die "$corpus: no seed corpus"
        mkdir -p "$WORK/$target" "$ARTIFACTS/$target"
        step "$target: ${SECONDS_EACH}s from $(find "$corpus" -type f | wc -l) seeds"
        if (cd "$crate" && cargo +nightly fuzz run --fuzz-dir "$ROOT/$dir" "$target" \
            "$WORK/$target" "$corpus" -- -max_total_time="$SECONDS_EACH" \
            -artifact_prefix="$ARTIFACTS/$target/" -print_final_stats=1) \
            >"$WORK/$target.log" 2>&1; then
            passed=$((passed + 1))
            printf '%s: ok, %s runs, %s new inputs (dropped)\n' "$target" \
                "$(grep -E '^stat::number_of_executed_units' "$WORK/$target.log" | awk '{print $2}')" \
                "$(find "$WORK/$target" -type f | wc -l)"
        else
            failed=$((failed + 1))
            failures+=("$target")
            tail -n 40 "$WORK/$target.log"
            printf '%s: FAILED; the input is in %s\n' "$target" "$ARTIFACTS/$target/"
        fi
    done
done
[ $((passed + failed)) -gt 0 ] || die "no target matched ${ONLY[*]}"
[ ${#failures[@]} -eq 0 ] || printf 'failed targets: %s\n' "${failures[*]}"
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
