#!/usr/bin/env bash
# The crate and module rules of docs/architecture.md, checked:
#   - no two sibling modules of a crate import each other
#     (scripts/module-cycles.py);
#   - no source file over 700 lines (tests apart);
#   - herald-gateway depends on neither herald-router nor the Redis client,
#     and herald-engine does not depend on herald-amqp (dependencies flow
#     protocol <- engine <- amqp <- {router, gateway});
#   - docs/architecture.md names only paths, Rust items and tasks that exist,
#     and its task table lists every task of each binary
#     (scripts/check-architecture-doc.py, with its self-test
#     scripts/test_check_architecture_doc.py).
# Exits non-zero with what is wrong.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

status=0
python3 scripts/module-cycles.py || status=1

# One concern per file: no source file over 700 lines (tests apart: a
# `tests.rs` or a crate's `tests/` may hold many cases of one thing).
long=$(find */src -name '*.rs' ! -name 'tests.rs' ! -path '*/tests/*' -print0 \
    | xargs -0 awk 'FNR == 1 && NR > 1 { if (n > 700) print f ": " n " lines" } { f = FILENAME; n = FNR } END { if (n > 700) print f ": " n " lines" }')
if [ -n "$long" ]; then
    echo "source files over 700 lines (split them by concern):" >&2
    echo "$long" >&2
    status=1
fi
python3 scripts/test_check_architecture_doc.py -q || status=1
python3 scripts/check-architecture-doc.py || status=1

# `cargo tree -p X` resolves features for X alone, as `cargo build -p X` does.
check_not_in_tree() {
    local package=$1; shift
    local tree dep
    tree=$(cargo tree -p "$package" --edges normal,build --prefix none --format '{p}')
    for dep in "$@"; do
        if grep -qE "^$dep v" <<<"$tree"; then
            echo "$package depends on $dep:" >&2
            cargo tree -p "$package" --edges normal,build --invert "$dep" >&2 || true
            status=1
        fi
    done
}
check_not_in_tree herald-gateway herald-router redis
check_not_in_tree herald-engine herald-amqp herald-router herald-gateway lapin
check_not_in_tree herald-amqp herald-router herald-gateway
check_not_in_tree herald-router herald-gateway
check_not_in_tree herald-protocol herald-engine tokio

if [ "$status" -eq 0 ]; then
    echo "crate dependencies flow one way; the gateway links neither the router nor redis"
fi
exit "$status"
