#!/usr/bin/env bash
# Test haproxy/generate's configuration with a real HAProxy and fake edges.
#
#   deploy/test-haproxy.sh [--sources N] [--keep]
#
# Needs only haproxy (Debian: apt-get install haproxy) and python3. Starts
# three fake edges and two fake routers (tiny Python HTTP servers on random
# loopback ports) and HAProxy with a generated configuration, then checks:
#   - every request kind of one user (/ws, each SockJS transport, xhr_send,
#     /sockjs/info, static files) lands on the same edge, every time;
#   - each request kind is counted on its own backend in HAProxy's stats,
#     and the stats page and Prometheus /metrics show them;
#   - different users spread over every edge; edges see every source address;
#   - /v1/notifications goes round robin to the routers, /v1/stats to an edge;
#   - /metrics on the public side is answered 404 by HAProxy, never an edge;
#   - a WebSocket upgrade becomes a tunnel; streamed chunks and WebSocket
#     messages pass without delay (option http-no-delay);
#   - stopping an edge moves only its users and they come back with it;
#   - edges and routers are checked on /readyz: an edge alive but not ready
#     (no root link) is marked DOWN and its users go to the others;
#     with no edge up, HAProxy's /healthz answers 503;
#   - a second HAProxy generated with a per-address connection limit answers
#     new connections over it 429 with Retry-After (WebSocket upgrades too),
#     but not /v1/ and not another address, and counts them as denied.
#   - edges get each browser's address in a PROXY v2 header (send-proxy-v2),
#     routers and health checks get none;
#   - a third HAProxy generated with --tls-cert (a certificate openssl makes
#     here, never kept) and --http-bind serves https:// and wss:// verified
#     against it, redirects plain HTTP with 308, and adds X-Forwarded-Proto.
# The checks themselves are in deploy/testing/haproxy_test.py. Exits non-zero
# on any failure and stops every process it started.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { printf 'test-haproxy: %s\n' "$*" >&2; exit 2; }

HAPROXY=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}
[ -x "$HAPROXY" ] || die "haproxy not found: apt-get install haproxy (or set HAPROXY=/path/to/haproxy)"
command -v python3 >/dev/null || die "python3 not found"
command -v openssl >/dev/null || die "openssl not found: apt-get install openssl"

echo "==> $("$HAPROXY" -v | head -1)"
exec python3 "$HERE/testing/haproxy_test.py" --haproxy "$HAPROXY" "$@"
