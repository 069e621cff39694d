#!/usr/bin/env bash
# Run Herald's whole test suite: the Rust tests of every crate, then the
# independent-client tests (tests/python: stomp.py against the real
# herald-gateway binary), the distributed end-to-end tests
# (tests/distributed: a whole deployment from deploy/up, driven with pika and
# stomp.py through HAProxy), a 5-minute soak of such a deployment (herald-bench
# soak --check: nothing lost, nothing growing), then the JavaScript client's unit and type tests
# (gateway/js, and its npm package: scripts/js-pack-check.sh packs it,
# installs it offline into a scratch project, imports and typechecks it) and
# the real-browser tests (tests/browser: chromium), and the
# WebSocket conformance run (scripts/autobahn.sh: Autobahn|Testsuite cases
# 1-10 against the debug gateway, diffed with scripts/autobahn/expected.json),
# the OpenAPI check (scripts/openapi-check.sh: schemathesis against a
# standalone gateway and a router, from engine/openapi.json)
# and the SockJS protocol suite (scripts/sockjs-conformance.sh --pypi-copy:
# the v0.3.3 suite as PyPI's pyramid_sockjs 0.3.9 bundles it, sha256-pinned),
# the Debian packages and release tarballs (scripts/package.sh from the debug
# build, checked by scripts/check-packages.py: extracted and run, lintian,
# READY=1 and STOPPING=1 on $NOTIFY_SOCKET, systemd-analyze verify), the
# container image (scripts/image.sh build and check, from the debug build:
# podman build, podman export, the gateway run under chroot) and the
# compose file (scripts/check-compose.py), cargo deny (deny.toml: licenses,
# bans, duplicate versions, sources),
# the partition tests (scripts/partition-tests.sh: a root, Redis, a router
# and two edges in network namespaces, each path cut silently and healed;
# needs root, as CI runs),
# and, when asked ($HERALD_FUZZ_SECONDS set) and rustup has a nightly
# toolchain, every cargo-fuzz target for that many seconds (scripts/fuzz.sh);
# the seed corpora are replayed on stable by the Rust tests either way, so CI
# does not pay for the sanitizer builds. The backend examples (tests/examples:
# each of examples/ run against a real gateway, or a router and an edge) run
# after the router's pika tests.
#
#   scripts/test.sh
#
# Needs a Debian-like machine with Rust (rustup) and Python 3 installed;
# whatever else is missing is installed here: the Python virtualenv at .venv
# and its pinned packages (stomp.py, pika, schemathesis), Debian's haproxy, rabbitmq-server, redis-server and varnish (for
# deploy/up; tests/python/test_varnish.py runs varnishd too), node and npm (node >= 20), Debian's chromium, and
# the pinned npm packages of gateway/js, tests/browser and the Node examples
# (npm ci), Debian's golang-go, php-cli, php-curl and default-jdk-headless
# for the Go, PHP and Java examples, and the
# Autobahn|Testsuite's and the SockJS suite's Python 2.7 virtualenvs (pyenv's
# 2.7.x must exist), Debian's prometheus (for promtool: the monitoring
# stage checks deploy/monitoring's alert rules and dashboard), Debian's
# lintian and podman, cargo-deny from crates.io (pinned), and (by
# scripts/package.sh) cargo-deb from crates.io and Debian's
# help2man and dpkg-dev, and mdbook from crates.io (the documentation site,
# scripts/check-book.sh). Honours
# CARGO_TARGET_DIR. Uses cargo-nextest when it is installed, `cargo test`
# otherwise. Exits non-zero if anything fails.
#
# Each prerequisite is one small `ensure_*` function, called from `main`.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

VENV="$ROOT/.venv"
# tests/distributed's file includes tests/python's (-r) and adds pika; the
# Python examples' files pin the same versions of what they share;
# tests/openapi's is schemathesis.
REQUIREMENTS=("$ROOT/tests/python/requirements.txt" "$ROOT/tests/distributed/requirements.txt"
              "$ROOT/examples/python/requirements.txt" "$ROOT/examples/pika/requirements.txt"
              "$ROOT/tests/openapi/requirements.txt")
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-$([ -t 1 ] && echo auto || echo never)}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PYTHONDONTWRITEBYTECODE=1

# Summary lines collected for the end, and the stages that failed.
SUMMARY=()
FAILED=()
LOGDIR=$(mktemp -d)
trap 'rm -rf "$LOGDIR"' EXIT

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
# shellcheck source=lib/apt.sh
. "$ROOT/scripts/lib/apt.sh"

ensure_rust() {
    command -v cargo >/dev/null \
        || die "cargo not found: install Rust from https://rustup.rs, then run this again"
}

ensure_python_venv() {
    command -v python3 >/dev/null || ensure_apt_packages python3
    if [ ! -x "$VENV/bin/python" ]; then
        # Debian's python3 keeps venv/ensurepip in a separate package.
        if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
            ensure_apt_packages python3-venv
        fi
        step "creating the Python virtualenv at .venv"
        python3 -m venv "$VENV"
    fi
}

ensure_python_requirements() {
    # Reinstall only when a requirements file changed since the last install.
    local stamp="$VENV/.requirements.sha256" want f args=()
    want=$(cat "${REQUIREMENTS[@]}" | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        step "installing the tests' (schemathesis included) and the Python examples' requirements into .venv"
        for f in "${REQUIREMENTS[@]}"; do args+=(-r "$f"); done
        "$VENV/bin/pip" install -q "${args[@]}"
        echo "$want" >"$stamp"
    fi
}

ensure_deploy_tools() {
    # deploy/up runs the root brokers and the proxy from Debian's packages.
    local pkgs=()
    command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || pkgs+=(haproxy)
    [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || command -v rabbitmq-server >/dev/null \
        || pkgs+=(rabbitmq-server)
    command -v curl >/dev/null || pkgs+=(curl)
    # The TLS tests (HAProxy's, the Python and browser ones through it) make
    # their certificate at test time with openssl.
    command -v openssl >/dev/null || pkgs+=(openssl)
    # The delayed store's tests and deploy/up run redis-server (and the
    # Redis Cluster test starts several).
    command -v redis-server >/dev/null || pkgs+=(redis-server)
    command -v redis-cli >/dev/null || pkgs+=(redis-tools)
    # tests/python/test_varnish.py and deploy/up run Debian's varnishd.
    command -v varnishd >/dev/null || [ -x /usr/sbin/varnishd ] || pkgs+=(varnish)
    # herald-bench compare's Nchan peer (bench/tests/compare.rs runs it): its
    # own nginx on a port of its own, from Debian's packages.
    [ -x /usr/sbin/nginx ] || pkgs+=(nginx-light)
    [ -f /usr/lib/nginx/modules/ngx_nchan_module.so ] || pkgs+=(libnginx-mod-nchan)
    [ ${#pkgs[@]} -eq 0 ] || ensure_apt_packages "${pkgs[@]}"
    # The package enables and starts its own varnish.service (port 6081) on
    # a systemd host; the tests start their own varnishd, so stop it again.
    case " ${pkgs[*]} " in
        *" varnish "*) [ ! -d /run/systemd/system ] \
            || as_root systemctl disable --now varnish.service varnishncsa.service || true ;;
    esac
    # Likewise nginx.service (port 80): the bench starts its own nginx.
    case " ${pkgs[*]} " in
        *" nginx-light "*) [ ! -d /run/systemd/system ] \
            || as_root systemctl disable --now nginx.service || true ;;
    esac
}

ensure_redis() {
    # The delayed store's tests talk to a real Redis on 127.0.0.1:6379
    # (each under a key prefix of its own): start one when none answers.
    if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
        step "starting Redis on 127.0.0.1:6379"
        local dir="${XDG_CACHE_HOME:-$HOME/.cache}/herald/redis-6379"
        mkdir -p "$dir"
        redis-server --bind 127.0.0.1 --port 6379 --dir "$dir" --daemonize yes \
            --appendonly yes --appendfsync everysec --save "" >/dev/null
        local i
        for i in $(seq 1 100); do
            redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && return 0
            sleep 0.1
        done
        die "Redis did not start on 127.0.0.1:6379"
    fi
}

ensure_rabbitmq() {
    # The router's and the edge's tests talk to a real broker on
    # 127.0.0.1:5672 (guest/guest): start the default node when it is down.
    if ! rabbitmqctl -q status >/dev/null 2>&1; then
        step "starting RabbitMQ on 127.0.0.1:5672"
        as_root rabbitmq-server -detached
        as_root rabbitmqctl -q await_startup --timeout 120 >/dev/null
    fi
}

# The HAProxy configuration against fake edges: hashing by user, consistent
# moves when an edge leaves, per-transport counts, no-delay streaming.
haproxy_tests() {
    run_stage haproxy bash deploy/test-haproxy.sh
    SUMMARY+=("haproxy config: $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$LOGDIR/haproxy.log" | tail -n1)")
}

ensure_promtool() {
    # Debian's prometheus package carries promtool.
    command -v promtool >/dev/null || ensure_apt_packages prometheus
}

# deploy/monitoring: the alert rules pass promtool's check and their unit
# tests, and every metric they and the dashboard use is in a real scrape of
# the debug gateway and router.
monitoring_tests() {
    run_stage monitoring scripts/check-monitoring.sh --bin-dir "$(target_dir)/debug"
    SUMMARY+=("monitoring (promtool, metric names vs scrapes): $(grep -E '^monitoring: [0-9]+ passed' "$LOGDIR/monitoring.log" | tail -n1 | sed 's/^monitoring: //')")
}

# mdBook for the documentation site, from crates.io (pinned; the HTML
# renderer with search, without the serve and watch features nobody runs in
# CI). Installed once into ~/.cargo/bin, then reused.
MDBOOK_VERSION=0.5.4
ensure_mdbook() {
    if [ "$(mdbook --version 2>/dev/null)" != "mdbook v$MDBOOK_VERSION" ]; then
        step "installing mdbook $MDBOOK_VERSION from crates.io"
        # Built in a temporary directory, not in the workspace's target dir.
        env -u CARGO_TARGET_DIR cargo install mdbook --locked --version "$MDBOOK_VERSION" \
            --no-default-features --features search
        command -v mdbook >/dev/null \
            || die "mdbook was installed into ${CARGO_HOME:-$HOME/.cargo}/bin, which is not on PATH"
    fi
}

# The documentation site: docs/ built with mdBook (a page SUMMARY.md names
# but that is missing fails it), every page of docs/ in SUMMARY.md, every
# internal link and anchor of the built HTML resolving (scripts/check-book.sh).
docs_site_tests() {
    run_stage docs-site scripts/check-book.sh
    SUMMARY+=("documentation site (mdbook): $(grep -E '^book: ' "$LOGDIR/docs-site.log" | tail -n1 | sed 's/^book: //')")
}

# Where cargo puts its output: CARGO_TARGET_DIR, build.target-dir, or ./target.
target_dir() {
    cargo metadata --format-version 1 --no-deps \
        | "$VENV/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

# Run a test stage, keep its output for the summary, and carry on if it fails
# so that one run shows every failure.
run_stage() {
    local name=$1 log="$LOGDIR/$1.log"
    shift
    step "$name: $*"
    set +e
    "$@" 2>&1 | tee "$log"
    local status=${PIPESTATUS[0]}
    set -e
    [ "$status" -eq 0 ] || FAILED+=("$name (exit $status)")
    return 0
}

cargo_tests() {
    if cargo nextest --version >/dev/null 2>&1; then
        run_stage cargo-nextest cargo nextest run --workspace --no-fail-fast
        SUMMARY+=("rust (nextest): $(grep -E '^ *Summary \[' "$LOGDIR/cargo-nextest.log" | tail -n1 | sed 's/^ *//')")
        # nextest does not run doctests.
        run_stage cargo-doctests cargo test --workspace --doc
        SUMMARY+=("rust doctests: $(sum_cargo_results "$LOGDIR/cargo-doctests.log")")
    else
        run_stage cargo-test cargo test --workspace --no-fail-fast
        SUMMARY+=("rust (cargo test): $(sum_cargo_results "$LOGDIR/cargo-test.log")")
    fi
}

# Every cargo-fuzz target for a bounded time, from its seed corpus (nightly
# only; cargo-fuzz is installed from crates.io when missing). Without nightly
# the corpora still ran, replayed on stable in the Rust tests.
fuzz_tests() {
    if [ -z "${HERALD_FUZZ_SECONDS:-}" ]; then
        SUMMARY+=("fuzz: seed corpora replayed by the rust tests (set HERALD_FUZZ_SECONDS to also run cargo-fuzz)")
        return 0
    fi
    if ! cargo +nightly --version >/dev/null 2>&1; then
        SUMMARY+=("fuzz: not run (no nightly toolchain); the seed corpora were replayed by the rust tests")
        return 0
    fi
    local secs=${HERALD_FUZZ_SECONDS}
    run_stage fuzz scripts/fuzz.sh --seconds "$secs"
    SUMMARY+=("fuzz (cargo-fuzz, ${secs}s per target): $(grep -E '^fuzz: [0-9]+ passed' "$LOGDIR/fuzz.log" | tail -n1 | sed 's/^fuzz: //') targets")
}

# Add up cargo test's per-binary "test result:" lines.
sum_cargo_results() {
    awk '/^test result:/ {
            for (i = 1; i <= NF; i++) {
                if ($(i + 1) ~ /^passed/) p += $i
                if ($(i + 1) ~ /^failed/) f += $i
                if ($(i + 1) ~ /^ignored/) g += $i
            }
            n++
         }
         END { printf "%d passed, %d failed, %d ignored (%d test binaries)", p, f, g, n }' "$1"
}

python_tests() {
    local bin
    bin="$(target_dir)/debug/herald-gateway"
    [ -x "$bin" ] || die "$bin was not built"
    HERALD_GATEWAY_BIN="$bin" run_stage pytest "$VENV/bin/python" -m pytest tests/python
    SUMMARY+=("python (pytest): $(grep -E '^=+ .*(passed|failed|error|no tests ran).* =+$' "$LOGDIR/pytest.log" | tail -n1 | sed -E 's/^=+ //; s/ =+$//')")
}

# The last "N passed, M failed ..." line of a pytest log.
sum_pytest_results() {
    grep -E '^=+ .*(passed|failed|error|no tests ran).* =+$' "$1" | tail -n1 | sed -E 's/^=+ //; s/ =+$//'
}

# Autobahn|Testsuite (an independent WebSocket client, Python 2.7) against
# the gateway's own WebSocket framing; every case's outcome is pinned.
autobahn_tests() {
    local bin
    bin="$(target_dir)/debug/herald-gateway"
    [ -x "$bin" ] || die "$bin was not built"
    run_stage autobahn scripts/autobahn.sh --gateway "$bin"
    SUMMARY+=("websocket conformance (autobahn 1-10 vs expected.json): $(grep -E '^autobahn: [0-9]+ passed' "$LOGDIR/autobahn.log" | tail -n1 | sed 's/^autobahn: //')")
}

# The SockJS protocol suite (v0.3.3, the copy a registry carries) against the
# gateway's SockJS test services. The suite at its repository's HEAD is on no
# registry: docs/sockjs-conformance.md says how to run it by hand.
sockjs_conformance_tests() {
    local bin
    bin="$(target_dir)/debug/herald-gateway"
    [ -x "$bin" ] || die "$bin was not built"
    run_stage sockjs-conformance scripts/sockjs-conformance.sh --gateway "$bin" --pypi-copy
    SUMMARY+=("sockjs protocol suite (v0.3.3, pyramid_sockjs copy): $(grep -E '^total ' "$LOGDIR/sockjs-conformance.log" | tail -n1 | sed -E 's/^total +//')")
}

# pika (an independent AMQP client) against the router binary.
router_pika_tests() {
    HERALD_ROUTER_BIN="$(target_dir)/debug/herald-router" \
        run_stage router-pika "$VENV/bin/python" -m pytest router/tests/pika
    SUMMARY+=("router (pika, pytest): $(sum_pytest_results "$LOGDIR/router-pika.log")")
}

# The OpenAPI contract (engine/openapi.json) against a running standalone
# gateway and router (RabbitMQ and Redis on their loopback ports), with
# schemathesis: no 5xx, documented statuses, bodies and headers.
openapi_tests() {
    run_stage openapi scripts/openapi-check.sh --bin-dir "$(target_dir)/debug" --python "$VENV/bin/python"
    SUMMARY+=("openapi (schemathesis): $(grep -E '^openapi: ' "$LOGDIR/openapi.log" | tail -n1 | sed 's/^openapi: //')")
}

# The Debian packages and release tarballs of scripts/package.sh, made from
# the debug build above (`--profile dev --no-build --fast`: checking the
# packaging costs no second, optimized build; release packages use the
# release profile, see deploy/README.md), then checked by
# scripts/check-packages.py: extracted with dpkg-deb -x, the binaries run
# from the extracted tree (--version, start, /healthz, SIGTERM; the router
# on the RabbitMQ and Redis started above), lintian, sha256sum -c.
ensure_packaging_tools() {
    # scripts/package.sh installs cargo-deb (pinned) and its own Debian tools.
    command -v lintian >/dev/null || ensure_apt_packages lintian
}

package_tests() {
    local dist="$LOGDIR/dist" started=$SECONDS
    run_stage packages bash -c 'scripts/package.sh --profile dev --no-build --fast --out "$1" \
        && "$2" scripts/check-packages.py --dist "$1"' _ "$dist" "$VENV/bin/python"
    SUMMARY+=("packages (cargo-deb, dpkg-deb -x, lintian, $((SECONDS - started)) s): $(grep -E '^packages: [0-9]+ passed' "$LOGDIR/packages.log" | tail -n1 | sed -E 's/^packages: //; s/ \([0-9]+ s\)$//')")
}

# The container image (Containerfile) from the debug binaries just built
# (`--profile dev --no-build`: no second, optimized build; release images
# use release binaries), checked without a container runtime (podman run
# cannot set resource limits in this sandbox): exported with podman create
# + podman export and run under chroot (scripts/image.sh check), then
# removed; and deploy/compose.yaml checked statically
# (scripts/check-compose.py).
ensure_image_tools() {
    command -v podman >/dev/null || ensure_apt_packages podman
}

image_tests() {
    local tag="localhost/herald:ci-$$" started=$SECONDS
    run_stage image bash -c 'scripts/image.sh build --profile dev --no-build --tag "$1" \
        && scripts/image.sh check --tag "$1"; status=$?; scripts/image.sh rm --tag "$1"; exit $status' _ "$tag"
    SUMMARY+=("image (podman build, export, chroot; $((SECONDS - started)) s): $(grep -E '^image: [0-9]+ passed' "$LOGDIR/image.log" | tail -n1 | sed 's/^image: //')")
    run_stage compose "$VENV/bin/python" scripts/check-compose.py
    SUMMARY+=("compose file (static): $(grep -E '^compose: [0-9]+ passed' "$LOGDIR/compose.log" | tail -n1 | sed 's/^compose: //')")
}

# cargo deny (deny.toml): licenses, bans (duplicate versions, with the
# allowed ones named and why) and sources; advisories need the network and
# are left out. cargo-deny is installed, pinned, from crates.io when missing.
CARGO_DENY_VERSION=0.20.2

ensure_cargo_deny() {
    local have
    have=$(cargo-deny --version 2>/dev/null | awk '{print $2}' || true)
    [ "$have" = "$CARGO_DENY_VERSION" ] && return 0
    step "installing cargo-deny $CARGO_DENY_VERSION from crates.io${have:+ (found $have)}"
    env -u CARGO_TARGET_DIR cargo install cargo-deny --locked --version "$CARGO_DENY_VERSION"
}

deny_tests() {
    local started=$SECONDS
    run_stage cargo-deny cargo deny --locked check licenses bans sources
    local result=ok f
    for f in "${FAILED[@]}"; do [[ $f == cargo-deny* ]] && result="failed, see above"; done
    SUMMARY+=("cargo deny (licenses, bans, sources; $((SECONDS - started)) s): $result")
}

distributed_tests() {
    # A whole deployment (deploy/up: two RabbitMQ roots, two routers, three
    # edges, HAProxy; on its own --port-offset) from the debug binaries just
    # built, torn down with deploy/down --purge at the end.
    local dir
    dir="$(target_dir)/debug"
    [ -x "$dir/herald-router" ] && [ -x "$dir/herald-gateway" ] \
        || die "$dir/herald-router and herald-gateway were not built"
    HERALD_DIST_BIN_DIR="$dir" run_stage distributed "$VENV/bin/python" -m pytest tests/distributed \
        -m "not targeted_only"
    SUMMARY+=("distributed (deploy/up, pytest): $(sum_pytest_results "$LOGDIR/distributed.log")")
    # Again with the routers routing by edge (routing.mode = "targeted"):
    # the whole suite, and the tests marked targeted_only (what each edge
    # receives, a restarted router's view).
    HERALD_DIST_BIN_DIR="$dir" HERALD_DIST_ROUTING=targeted run_stage distributed-targeted \
        "$VENV/bin/python" -m pytest tests/distributed
    SUMMARY+=("distributed, targeted routing (deploy/up, pytest): $(sum_pytest_results "$LOGDIR/distributed-targeted.log")")
}

# The short soak (bench/README.md#soak): the distributed deployment (deploy/up,
# on its own --port-offset) from the debug binaries under mixed traffic for 4
# minutes, about 5 with bring-up, the drain and teardown. It fails on anything
# lost, duplicated or refused, a session the server ended, a wrong presence
# answer, and on growth after the warm-up beyond limits meant to catch a leak,
# not to measure a slope (fds 20/min, threads 4/min, RSS 5 %/min per process).
# No timing is asserted. The report (Markdown, JSON, SVG) stays in the logs.
soak_tests() {
    local dir started=$SECONDS
    dir="$(target_dir)/debug"
    [ -x "$dir/herald-bench" ] && [ -x "$dir/herald-router" ] && [ -x "$dir/herald-gateway" ] \
        || die "$dir/herald-bench, herald-router and herald-gateway were not built"
    run_stage soak "$dir/herald-bench" soak --minutes 5 --sample-secs 15 --warmup-percent 30 \
        --check --bin-dir "$dir" --port-offset 6000 --out-dir "$LOGDIR/soak" --name soak-ci
    SUMMARY+=("soak (herald-bench soak, 5 min of traffic, $((SECONDS - started)) s): $(grep -E '^soak soak-ci:' "$LOGDIR/soak.log" | tail -n1 | sed -E 's/^soak soak-ci: //')")
}

ensure_iproute2() {
    # The partition tests build hosts from network namespaces (ip netns).
    command -v ip >/dev/null || ensure_apt_packages iproute2
}

# Silent network partitions (tests/partitions, docs/partitions.md): a root,
# Redis, a router and two edges in network namespaces on a bridge, each path
# cut (blackhole routes, a link down) and healed in turn. Needs root, as CI
# runs; fails (it does not skip) otherwise. Bounded at 300 s; the script's
# trap deletes the namespaces and ends their processes whatever happens.
partition_tests() {
    local started=$SECONDS
    run_stage partitions scripts/partition-tests.sh --bin-dir "$(target_dir)/debug" \
        --python "$VENV/bin/python" --timeout 300
    SUMMARY+=("partitions (network namespaces, $((SECONDS - started)) s): $(sum_pytest_results "$LOGDIR/partitions.log")")
}

# ---- JavaScript: the browser client (gateway/js) and the real-browser tests
# (tests/browser: Debian chromium driven by playwright-core; no browser is
# ever downloaded).

JS_DIRS=(gateway/js tests/browser examples/node examples/amqplib)

ensure_node() {
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        ensure_apt_packages nodejs npm
    fi
    # playwright-core needs node 20 (Debian 13 has it; Debian 12 has 18).
    local major
    major=$(node -p 'process.versions.node.split(".")[0]')
    [ "$major" -ge 20 ] || die "node $(node --version) is too old: the browser tests need node >= 20"
}

ensure_chromium() {
    # tests/browser uses $HERALD_CHROMIUM, default /usr/bin/chromium (Debian's).
    [ -n "${HERALD_CHROMIUM:-}" ] && [ -x "$HERALD_CHROMIUM" ] && return 0
    [ -x /usr/bin/chromium ] || ensure_apt_packages chromium
}

ensure_node_deps() {
    # `npm ci` in each JS directory only when its package-lock.json changed
    # since the last install (or node_modules is gone).
    local dir stamp want
    for dir in "${JS_DIRS[@]}"; do
        stamp="$ROOT/$dir/node_modules/.package-lock.sha256"
        want=$(sha256sum "$ROOT/$dir/package-lock.json" | cut -d' ' -f1)
        if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
            step "installing $dir/package-lock.json into $dir/node_modules"
            (cd "$ROOT/$dir" && npm ci --no-audit --no-fund --loglevel=error)
            echo "$want" >"$stamp"
        fi
    done
}

# "N passed, N failed, ..." from node --test's spec reporter summary.
sum_node_results() {
    awk '/^ℹ (tests|pass|fail|cancelled|skipped|todo) / { v[$2] = $3 }
         END {
            if (!("tests" in v)) { print "no summary (see the log above)"; exit }
            printf "%d passed, %d failed, %d cancelled, %d skipped, %d todo (%d tests)",
                   v["pass"], v["fail"], v["cancelled"], v["skipped"], v["todo"], v["tests"]
         }' "$1"
}

js_tests() {
    run_stage js-unit node --test --test-reporter=spec gateway/js/test/
    SUMMARY+=("js client (node --test): $(sum_node_results "$LOGDIR/js-unit.log")")
    # The published types against a usage file, and the module's own JSDoc.
    run_stage js-types npm --prefix gateway/js run --silent typecheck
    local types=ok f
    for f in "${FAILED[@]}"; do [[ $f == js-types* ]] && types="failed, see above"; done
    SUMMARY+=("js client types (tsc --noEmit): $types")
    js_pack_test
}

# @herald/client as npm ships it: packed, installed offline into a scratch
# project, imported by name from Node, its types found by tsc there.
js_pack_test() {
    run_stage js-pack scripts/js-pack-check.sh
    SUMMARY+=("js client package (npm pack, install, import, tsc): $(awk '/^js-pack: /{ l = substr($0, 10) }
        END { print (l != "" ? l : "no result, see above") }' "$LOGDIR/js-pack.log")")
}

browser_tests() {
    local bin
    bin="$(target_dir)/debug/herald-gateway"
    [ -x "$bin" ] || die "$bin was not built"
    # The console's screenshots (tests/browser/console.test.js) go beside the build.
    HERALD_GATEWAY_BIN="$bin" HERALD_ARTIFACTS="$(target_dir)/test-artifacts" \
        run_stage browser node --test --test-reporter=spec tests/browser/
    SUMMARY+=("browser (chromium, node --test): $(sum_node_results "$LOGDIR/browser.log"); console screenshots in $(target_dir)/test-artifacts/console")
}

# ---- The backend examples (examples/, docs/examples.md): the HTTP ones
# (Python, Node, Go, PHP, Java) against a standalone gateway, the AMQP
# publishers (pika, amqplib) against a router and an edge on the RabbitMQ and
# Redis started above; stomp.py checks what each one did.

ensure_example_tools() {
    # Go builds its example from the standard library (no module is
    # downloaded); PHP needs its curl extension; `java Example.java` a JDK.
    local pkgs=()
    command -v go >/dev/null || pkgs+=(golang-go)
    command -v php >/dev/null || pkgs+=(php-cli)
    { command -v php >/dev/null && php -m | grep -qx curl; } || pkgs+=(php-curl)
    command -v javac >/dev/null || pkgs+=(default-jdk-headless)
    [ ${#pkgs[@]} -eq 0 ] || ensure_apt_packages "${pkgs[@]}"
}

examples_tests() {
    local dir
    dir="$(target_dir)/debug"
    [ -x "$dir/herald-router" ] && [ -x "$dir/herald-gateway" ] \
        || die "$dir/herald-router and herald-gateway were not built"
    HERALD_GATEWAY_BIN="$dir/herald-gateway" HERALD_ROUTER_BIN="$dir/herald-router" \
        run_stage examples "$VENV/bin/python" -m pytest tests/examples
    SUMMARY+=("backend examples (pytest): $(sum_pytest_results "$LOGDIR/examples.log")")
}

main() {
    ensure_rust
    ensure_python_venv
    ensure_python_requirements
    ensure_deploy_tools
    ensure_rabbitmq
    ensure_redis
    ensure_node
    ensure_chromium
    ensure_node_deps
    ensure_example_tools
    ensure_promtool
    ensure_packaging_tools
    ensure_mdbook
    ensure_image_tools
    ensure_cargo_deny
    ensure_iproute2

    step "building the workspace (all targets)"
    cargo build --workspace --all-targets

    cargo_tests
    fuzz_tests
    python_tests
    autobahn_tests
    sockjs_conformance_tests
    router_pika_tests
    examples_tests
    openapi_tests
    package_tests
    image_tests
    deny_tests
    haproxy_tests
    docs_site_tests
    monitoring_tests
    distributed_tests
    soak_tests
    partition_tests
    js_tests
    browser_tests

    step "summary"
    printf '  %s\n' "${SUMMARY[@]}"
    if [ ${#FAILED[@]} -gt 0 ]; then
        printf '  FAILED: %s\n' "${FAILED[@]}"
        exit 1
    fi
    echo "  all tests passed"
}

main "$@"
