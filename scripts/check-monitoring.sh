#!/usr/bin/env bash
# Check deploy/monitoring: the alert rules are valid and do what their unit
# tests say (promtool check rules / test rules), both binaries' /metrics in
# the Prometheus text format 0.0.4 pass `promtool check metrics` and
# negotiate OpenMetrics by Accept, every metric the rules, the
# Grafana dashboard and docs/monitoring.md name exists in a real scrape of
# the debug herald-gateway (standalone) and herald-router (RabbitMQ on
# 127.0.0.1:5672, Redis on 127.0.0.1:6379, as scripts/test.sh ensures), and
# every family those scrapes export is in docs/monitoring.md.
#
#   scripts/check-monitoring.sh --bin-dir TARGET/debug
#
# Needs promtool (Debian's `prometheus`) and python3. Prints one line per
# check and a last line "monitoring: N passed, M failed"; exits non-zero on
# any failure.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MON="$ROOT/deploy/monitoring"
BIN_DIR=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) BIN_DIR=$2; shift 2 ;;
        *) echo "usage: $0 --bin-dir DIR" >&2; exit 2 ;;
    esac
done
[ -n "$BIN_DIR" ] || { echo "usage: $0 --bin-dir DIR" >&2; exit 2; }

passed=0
failed=0
check() {
    local what=$1
    shift
    if "$@"; then
        echo "ok: $what"
        passed=$((passed + 1))
    else
        echo "FAILED: $what"
        failed=$((failed + 1))
    fi
}

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Poll `url` until it answers 200 (10 s), then save the body to `out`.
scrape() {
    local url=$1 out=$2 ready=$3 i
    for i in $(seq 1 200); do
        if curl -fsS -o /dev/null "$ready" 2>/dev/null; then
            curl -fsS -o "$out" "$url"
            return 0
        fi
        sleep 0.05
    done
    echo "$ready never answered 200" >&2
    return 1
}

check "promtool check rules" promtool check rules "$MON/herald-alerts.yml"
check "promtool test rules" bash -c "cd '$MON' && promtool test rules herald-alerts.test.yml"

# A standalone gateway with a throwaway secret, key and data directory.
gw_port=$(free_port)
"$BIN_DIR/herald-gateway" --listen "127.0.0.1:$gw_port" \
    --jwt-secret "monitoring-check-secret-0123456789abcdef-0123456789abcdef" \
    --api-key monitoring-check --data-dir "$WORK/gateway" >"$WORK/gateway.log" 2>&1 &
PIDS+=($!)

# A router on the local broker and Redis, under names and a key prefix of
# its own (the same every run, so nothing piles up; nothing else uses them).
rt_port=$(free_port)
suffix="monitoring-check"
cat >"$WORK/router.toml" <<EOF
listen = "127.0.0.1:$rt_port"
api_keys = ["monitoring-check"]
[amqp]
url = "amqp://guest:guest@127.0.0.1:5672/%2f"
[amqp.topology]
exchange = "herald.$suffix"
queue = "herald.publications.$suffix"
dead_exchange = "herald.dead.$suffix"
dead_queue = "herald.dead.$suffix"
edges_exchange = "herald.edges.$suffix"
presence_exchange = "herald.presence.$suffix"
presence_queue = "herald.presence.$suffix"
[redis]
url = "redis://127.0.0.1:6379"
prefix = "herald-$suffix"
EOF
"$BIN_DIR/herald-router" --config "$WORK/router.toml" >"$WORK/router.log" 2>&1 &
PIDS+=($!)

# The API-key families are labelled by key name: they appear with the
# first request. One accepted publication and one refused.
api_traffic() {
    local base=$1
    curl -fsS -o /dev/null -X POST "$base/v1/notifications" \
        -H "Authorization: Bearer monitoring-check" -H 'Content-Type: application/json' \
        -d '{"users":["u"],"event":"monitoring.check"}' \
        && [ "$(curl -sS -o /dev/null -w '%{http_code}' -X POST "$base/v1/notifications" \
            -H "Authorization: Bearer wrong" -H 'Content-Type: application/json' \
            -d '{"users":["u"],"event":"monitoring.check"}')" = 401 ]
}

scraped=()
if scrape "http://127.0.0.1:$gw_port/metrics" "$WORK/gateway.prom" "http://127.0.0.1:$gw_port/readyz" \
    && api_traffic "http://127.0.0.1:$gw_port" \
    && curl -fsS -o "$WORK/gateway.prom" "http://127.0.0.1:$gw_port/metrics"; then
    scraped+=("$WORK/gateway.prom")
else
    tail -n 20 "$WORK/gateway.log" >&2
fi
if scrape "http://127.0.0.1:$rt_port/metrics" "$WORK/router.prom" "http://127.0.0.1:$rt_port/readyz" \
    && api_traffic "http://127.0.0.1:$rt_port" \
    && curl -fsS -o "$WORK/router.prom" "http://127.0.0.1:$rt_port/metrics"; then
    scraped+=("$WORK/router.prom")
else
    tail -n 20 "$WORK/router.log" >&2
fi
check "gateway and router scraped" test ${#scraped[@]} -eq 2
# The scrapes above sent no Accept: the Prometheus text format 0.0.4, which
# promtool reads (its lint included: help text, counters' _total, units).
for prom in "${scraped[@]}"; do
    check "promtool check metrics: $(basename "$prom")" promtool check metrics <"$prom"
done
# Accept negotiation, as a scraper asks: Prometheus' own header gets
# OpenMetrics (ending in # EOF), text/plain the 0.0.4 text.
content_type() {
    curl -fsS -o "$WORK/negotiated" -D - -H "Accept: $2" "$1/metrics" \
        | tr -d '\r' | awk -F': ' 'tolower($1) == "content-type" { print $2 }'
}
negotiates() {
    local base=$1
    [[ $(content_type "$base" 'application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1') \
        == application/openmetrics-text* ]] && tail -n1 "$WORK/negotiated" | grep -qx '# EOF' \
        && [[ $(content_type "$base" 'text/plain;version=0.0.4') == 'text/plain; version=0.0.4; charset=utf-8' ]] \
        && ! grep -q '^# EOF' "$WORK/negotiated" \
        && [[ $(content_type "$base" 'application/openmetrics-text;q=0.2, */*') == text/plain* ]]
}
check "gateway /metrics negotiates by Accept" negotiates "http://127.0.0.1:$gw_port"
check "router /metrics negotiates by Accept" negotiates "http://127.0.0.1:$rt_port"
# Families that appear with their first event, their labels unknown before
# (status classes, callback hosts, alert channels): nothing in this check
# makes a callback, so they are taken as exported. docs/monitoring.md says
# so for each.
LAZY=(
    --lazy herald_callback_requests_total
    --lazy herald_callback_request_duration_seconds
    --lazy herald_callback_request_duration_seconds_bucket
    --lazy herald_callback_breaker_open
    --lazy herald_callback_breaker_transitions_total
    --lazy herald_callback_alerts_total
)
check "every metric of the rules, the dashboard and the docs is exported, every family documented" \
    python3 "$ROOT/scripts/check-metric-names.py" \
    --used "$MON/herald-alerts.yml" --used "$MON/herald-alerts.test.yml" \
    --used "$ROOT/docs/monitoring.md" --dashboard "$MON/herald-dashboard.json" \
    --documented "$ROOT/docs/monitoring.md" "${LAZY[@]}" "${scraped[@]}"

echo "monitoring: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
