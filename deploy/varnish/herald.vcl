vcl 4.1;
# Varnish in front of Herald's routers: the operator's read-only API.
#
# What it does (docs/varnish.md has the why and the measurements):
#   GET /v1/stats            cached 15 s, then served stale while one fetch
#                            refreshes it: up to 10 s while a router is healthy,
#                            up to 6 h while none is (grace); gzipped; keyed on
#                            the caller's API key (see vcl_hash)
#   GET /console/assets/...  cached 7 days (hashed or versioned file names)
#   GET /console             the console's HTML page: cached 10 s only
#   everything else          passed to the routers, never stored: the publish
#                            API, topics, notifications, presence, /metrics,
#                            /healthz, /readyz, and every method but GET/HEAD
#   WebSocket upgrades       refused (501): browsers reach the edges through
#                            HAProxy, never through this cache
#   no router answering      503 with a fixed JSON body, when nothing is cached
#
# Backends: herald-backends.vcl, found on varnishd's vcl_path, defines one
# backend per router (each with `.probe = herald_health;`) and a vcl_init that
# fills the round-robin director `herald`. deploy/varnish/generate-backends
# writes it; deploy/up runs it.
#
# Tunables: the durations below can be changed without editing this file by
# setting the environment of varnishd (read on each request, a bad value falls
# back to the default): HERALD_VARNISH_STATS_TTL (15s), HERALD_VARNISH_STATS_GRACE
# (10s: stale while a router is healthy), HERALD_VARNISH_STATS_STALE (6h: stale
# while none is). The tests use them to see grace in seconds instead of minutes.
#
# Debian 12's varnish is 7.1; this is VCL 4.1 and compiles with it
# (tests/python/test_varnish.py runs `varnishd -C` on it).

import std;
import directors;

# Each router answers /healthz with 200 while it serves. A router is sick
# after 3 failed probes of the last 5 (2 s apart: 6 s at most), healthy again
# after 3 good ones. It starts healthy (.initial = .threshold) so that a cache
# started next to running routers serves at once.
probe herald_health {
    .url = "/healthz";
    .interval = 2s;
    .timeout = 1s;
    .window = 5;
    .threshold = 3;
    .initial = 3;
    .expected_response = 200;
}

include "herald-backends.vcl";

sub vcl_recv {
    # Our own bookkeeping header, never a client's.
    unset req.http.X-Herald-Cache;
    set req.backend_hint = herald.backend();

    if (req.http.Upgrade ~ "(?i)websocket") {
        return (synth(501, "websocket"));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }

    if (req.url ~ "^/v1/stats(\?|$)") {
        # Only the parameters the stats API reads are part of the key:
        # anything else (a dashboard's cache-buster `_=...`) is dropped, so
        # it can neither split the cache nor send every poll to the routers
        # (the API ignores unknown parameters). Then the same query in any
        # order is the same answer (?topics_limit=&topics_after=).
        set req.url = regsuball(req.url, "([?&])(?!topics_limit=|topics_after=)[^&]*", "\1");
        set req.url = regsuball(req.url, "&{2,}", "&");
        set req.url = regsub(req.url, "\?&+", "?");
        set req.url = regsub(req.url, "[?&]+$", "");
        set req.url = std.querysort(req.url);
        # Stale stats: up to HERALD_VARNISH_STATS_GRACE old while a router is
        # healthy (one request refetches in the background, the others get
        # the stale copy), the object's whole grace while none is.
        if (std.healthy(req.backend_hint)) {
            set req.grace = std.duration(std.getenv("HERALD_VARNISH_STATS_GRACE"), 10s);
        }
    } elsif (req.url ~ "^/console/assets/" || req.url ~ "^/console/?(\?|$)") {
        # The console's assets and its page (TTLs in vcl_backend_response).
    } else {
        # Everything else answers for the caller, now: never stored.
        return (pass);
    }

    # Credentials and caching. Herald authenticates the HTTP API by an API key
    # in `Authorization: Bearer KEY` or `X-Api-Key: KEY`, and by nothing else.
    #
    # - Those two headers are kept and HASHED (vcl_hash): a request is only
    #   ever served an object fetched with the very same header values. A
    #   dashboard polling with its key shares one object with every other
    #   poller using that key, which is what the cache is for: passing every
    #   request that carries a key would pass every request once /v1/stats
    #   requires one, and the routers would recompute the stats per poll.
    #   Only 200 answers are stored (vcl_backend_response), so a wrong key
    #   never fills the cache: its 401 goes back to the router every time.
    #   The number of objects is bounded by the storage (-s malloc,SIZE):
    #   when full, Varnish evicts the least recently used object.
    # - Cookies are removed: Herald reads none, and a header the router never
    #   sees cannot change its answer, so no cookie can leak into a shared
    #   object (nor split the cache per browser).
    # - Any other header that could change the answer must come back in Vary,
    #   which Varnish honours.
    unset req.http.Cookie;
    return (hash);
}

sub vcl_hash {
    # One application behind this cache: the Host header does not change the
    # answer, so it is not part of the key (127.0.0.1:PORT and localhost:PORT
    # share objects).
    hash_data(req.url);
    # Labelled, so a key in one header never meets the same key in the other.
    if (req.http.Authorization) {
        hash_data("authorization: " + req.http.Authorization);
    }
    if (req.http.X-Api-Key) {
        hash_data("x-api-key: " + req.http.X-Api-Key);
    }
    return (lookup);
}

sub vcl_hit {
    if (obj.ttl >= 0s) {
        set req.http.X-Herald-Cache = "HIT";
    } else {
        # In grace: delivered now while one background fetch refreshes it.
        set req.http.X-Herald-Cache = "HIT-STALE";
    }
}

sub vcl_miss {
    set req.http.X-Herald-Cache = "MISS";
}

sub vcl_pass {
    set req.http.X-Herald-Cache = "PASS";
}

sub vcl_backend_response {
    if (bereq.uncacheable) {
        # A pass: nothing to decide.
        return (deliver);
    }
    if (beresp.status >= 500 && bereq.is_bgfetch) {
        # A refresh that failed: keep serving the stale object.
        return (abandon);
    }
    if (beresp.status != 200 || beresp.http.Set-Cookie
        || beresp.http.Cache-Control ~ "(?i)(private|no-store)") {
        # Errors, 401s of wrong keys, answers for one browser: never stored.
        # (A short hit-for-miss: the next request goes to a router, without
        # waiting behind this one.)
        set beresp.ttl = 2s;
        set beresp.uncacheable = true;
        return (deliver);
    }

    if (bereq.url ~ "^/v1/stats(\?|$)") {
        # Set here whatever the router sent (max-age=15 today; no
        # Cache-Control at all from an older router).
        set beresp.ttl = std.duration(std.getenv("HERALD_VARNISH_STATS_TTL"), 15s);
        set beresp.grace = std.duration(std.getenv("HERALD_VARNISH_STATS_STALE"), 6h);
        # Kept a little past grace with its ETag / Last-Modified: a refresh
        # then asks the router conditionally (If-None-Match,
        # If-Modified-Since) and a 304 renews the object without a body.
        set beresp.keep = 1m;
        if (!beresp.http.Cache-Control) {
            set beresp.http.Cache-Control = "max-age=15";
        }
    } elsif (bereq.url ~ "^/console/assets/") {
        # Hashed or versioned names: an asset never changes under its name.
        set beresp.ttl = 7d;
        set beresp.grace = 1d;
        if (!beresp.http.Cache-Control) {
            set beresp.http.Cache-Control = "public, max-age=604800, immutable";
        }
    } else {
        # The console's page names the current assets: short-lived, so a new
        # release shows within seconds.
        set beresp.ttl = 10s;
        set beresp.grace = 1m;
        if (!beresp.http.Cache-Control) {
            set beresp.http.Cache-Control = "no-cache";
        }
    }

    # Stored gzipped (a stats answer shrinks about tenfold); clients that do
    # not accept gzip get it gunzipped on the way out.
    if (!beresp.http.Content-Encoding
        && beresp.http.Content-Type ~ "(?i)^(application/(json|javascript)|text/|image/svg)") {
        set beresp.do_gzip = true;
    }
    return (deliver);
}

sub vcl_backend_error {
    if (bereq.is_bgfetch) {
        # A refresh that could not reach a router: keep the stale object.
        return (abandon);
    }
    # No router answered and nothing usable is cached: one fixed body, never
    # stored.
    set beresp.status = 503;
    set beresp.ttl = 0s;
    set beresp.uncacheable = true;
    set beresp.http.Content-Type = "application/json";
    set beresp.http.Cache-Control = "no-store";
    set beresp.http.Retry-After = "5";
    set beresp.body = """{"error":{"code":"backend_unavailable","message":"no Herald router is answering; retry in a few seconds"}}
""";
    return (deliver);
}

sub vcl_synth {
    set resp.http.Content-Type = "application/json";
    set resp.http.Cache-Control = "no-store";
    if (resp.status == 501 && resp.reason == "websocket") {
        set resp.reason = "Not Implemented";
        set resp.body = """{"error":{"code":"websocket_not_here","message":"this is the stats cache in front of the routers; browsers connect to the edges through HAProxy"}}
""";
    } else {
        set resp.body = """{"error":{"code":"varnish_""" + resp.status
            + {"","message":""} + resp.reason + """"}}
""";
    }
    return (deliver);
}

sub vcl_deliver {
    set resp.http.X-Cache = req.http.X-Herald-Cache;
    unset req.http.X-Herald-Cache;
    unset resp.http.Via;
}
