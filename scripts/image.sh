#!/usr/bin/env bash
# Herald's container image (Containerfile): build it, check it, save it.
#
#   scripts/image.sh build [--profile release|dev] [--no-build] [--tag TAG]
#   scripts/image.sh check [--tag TAG]
#   scripts/image.sh save  [--tag TAG] --out FILE
#   scripts/image.sh rm    [--tag TAG]
#
# build  stage the context under target/<profile>/image/ (rootfs/: both
#        binaries, stripped, in /usr/bin; the shared libraries `ldd` lists
#        for them, at the same paths; /etc/ssl/certs/ca-certificates.crt;
#        /etc/passwd and /etc/group naming herald, 65532; /tmp; and
#        state/, which becomes /var/lib/herald, owned by herald), then `podman build` it FROM scratch with
#        Debian's podman: nothing is pulled. The binaries are glibc's (this
#        machine's target; no musl target is installed here), so their
#        libraries come along. Labels: org.opencontainers.image.version,
#        .revision (the commit), .source. Timestamps are the commit's.
# check  what an operator's `docker run` would meet, without running a
#        container (`podman run` cannot set resource limits in this
#        sandbox): `podman create` + `podman export` into a temporary
#        directory, then from it under `chroot --userspec=65532:65532`:
#        both binaries' `--version` name the commit of HEAD, the gateway
#        starts with the image's environment (but on a free 127.0.0.1
#        port), answers /healthz and /js/herald.js, and exits 0 on SIGTERM;
#        the image's user, command, ports and labels are as built.
# save   `podman save --format oci-archive` to FILE (scripts/release.sh).
# rm     remove the image (CI's, once checked).
#
# --profile   the Cargo profile whose binaries go in (default release: what
#             to ship). CI uses the dev build the test command already made
#             (`--profile dev --no-build`): the packaging is the same and
#             costs no second, optimized build; the debug binaries are
#             larger, that is all.
# --no-build  use what is built; the binaries must say the commit of HEAD.
# --tag       the image's name (default localhost/herald:VERSION).
#
# Installs Debian's podman and binutils (strip) when missing. Honours
# CARGO_TARGET_DIR. Prints "image: N passed, M failed" after check.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'image.sh: %s\n' "$*" >&2; exit 1; }
# shellcheck source=lib/apt.sh
. "$ROOT/scripts/lib/apt.sh"
usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

# The user the image runs as (the "nonroot" id of distroless images).
IMAGE_UID=65532
START_TIMEOUT=30

[ $# -ge 1 ] || { usage; exit 2; }
CMD=$1
shift
PROFILE=release
NO_BUILD=0
TAG=
OUT_FILE=
while [ $# -gt 0 ]; do
    case $1 in
        --profile) [ $# -ge 2 ] || die "--profile needs a value"; PROFILE=$2; shift 2 ;;
        --profile=*) PROFILE=${1#*=}; shift ;;
        --no-build) NO_BUILD=1; shift ;;
        --tag) [ $# -ge 2 ] || die "--tag needs a value"; TAG=$2; shift 2 ;;
        --tag=*) TAG=${1#*=}; shift ;;
        --out) [ $# -ge 2 ] || die "--out needs a file"; OUT_FILE=$2; shift 2 ;;
        --out=*) OUT_FILE=${1#*=}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
case $PROFILE in
    release) PROFILE_DIR=release ;;
    dev|debug) PROFILE=dev; PROFILE_DIR=debug ;;
    *) PROFILE_DIR=$PROFILE ;;
esac

metadata() {
    cargo metadata --format-version 1 --no-deps | python3 -c "$1"
}
VERSION=$(metadata 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "herald-gateway"))')
TARGET_DIR=$(metadata 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
COMMIT=${HERALD_COMMIT:-$(git rev-parse --short=12 HEAD)}
MTIME=$(git log -1 --format=%ct)
TAG=${TAG:-localhost/herald:$VERSION}
BIN_DIR="$TARGET_DIR/$PROFILE_DIR"
BINS=(herald-gateway herald-router)

ensure_tools() {
    local pkgs=()
    command -v podman >/dev/null || pkgs+=(podman)
    command -v strip >/dev/null || pkgs+=(binutils)
    command -v curl >/dev/null || pkgs+=(curl)
    [ ${#pkgs[@]} -eq 0 ] || ensure_apt_packages "${pkgs[@]}"
}

check_commit() {
    local bin out
    for bin in "$@"; do
        [ -x "$bin" ] || die "$bin is not built (run without --no-build, or build it)"
        out=$("$bin" --version)
        [[ $out == *"$COMMIT"* ]] \
            || die "$bin says \"$out\", not the commit of HEAD ($COMMIT): rebuild it"
    done
}

# Copy each shared library `ldd` lists for "$@" (and the dynamic loader) to
# the same path under $rootfs.
copy_libraries() {
    local rootfs=$1 lib
    shift
    ldd "$@" | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }' | sort -u | while read -r lib; do
        mkdir -p "$rootfs$(dirname "$lib")"
        # The file itself, under the name the binaries ask for.
        cp -L "$lib" "$rootfs$lib"
        chmod 0755 "$rootfs$lib"
    done
}

stage() {
    local ctx=$1 rootfs=$1/rootfs name
    rm -rf "$ctx"
    mkdir -p "$rootfs"/{usr/bin,etc/ssl/certs,var/lib,tmp} "$ctx/state"
    for name in "${BINS[@]}"; do
        strip -o "$rootfs/usr/bin/$name" "$BIN_DIR/$name"
    done
    copy_libraries "$rootfs" "$rootfs/usr/bin/herald-gateway" "$rootfs/usr/bin/herald-router"
    if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
        install -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
    fi
    printf 'root:x:0:0:root:/:/nonexistent\nherald:x:%d:%d:Herald:/var/lib/herald:/nonexistent\n' \
        "$IMAGE_UID" "$IMAGE_UID" >"$rootfs/etc/passwd"
    printf 'root:x:0:\nherald:x:%d:\n' "$IMAGE_UID" >"$rootfs/etc/group"
    chmod 1777 "$rootfs/tmp"
    # /var/lib/herald comes from state/ (the Containerfile gives it to the
    # user with COPY --chown: COPY makes everything else root's).
    chmod 0700 "$ctx/state"
    # The commit's time on every file: the same sources make the same layer.
    find "$rootfs" "$ctx/state" -exec touch -h -d "@$MTIME" {} +
}

build() {
    local ctx="$BIN_DIR/image"
    if [ "$NO_BUILD" -eq 0 ]; then
        for name in "${BINS[@]}"; do
            step "cargo build --profile $PROFILE -p $name"
            cargo build --locked --profile "$PROFILE" -p "$name"
        done
    fi
    check_commit "$BIN_DIR/herald-gateway" "$BIN_DIR/herald-router"
    step "staging $ctx"
    stage "$ctx"
    step "podman build -t $TAG"
    podman build --quiet --timestamp "$MTIME" -f "$ROOT/Containerfile" -t "$TAG" \
        --label "org.opencontainers.image.title=herald" \
        --label "org.opencontainers.image.version=$VERSION" \
        --label "org.opencontainers.image.revision=$COMMIT" \
        --label "org.opencontainers.image.licenses=Apache-2.0" \
        --label "org.opencontainers.image.source=$(git config --get remote.origin.url 2>/dev/null || echo herald)" \
        "$ctx" >/dev/null
    podman image ls --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' "$TAG"
}

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
expect() {
    local name=$1
    shift
    if "$@"; then ok "$name"; else fail "$name"; fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

check() {
    podman image exists "$TAG" || die "no image $TAG (scripts/image.sh build first)"
    local dir container fmt
    dir=$(mktemp -d)
    # It becomes /: the image's user must be able to walk it.
    chmod 0755 "$dir"
    container=$(podman create "$TAG")
    # shellcheck disable=SC2064
    trap "podman rm -f $container >/dev/null 2>&1 || true; rm -rf '$dir'" EXIT
    step "podman export $TAG -> $dir"
    podman export "$container" | tar -x -C "$dir" --same-owner --numeric-owner
    podman rm -f "$container" >/dev/null

    fmt='{{.Config.User}}|{{json .Config.Cmd}}|{{index .Config.Labels "org.opencontainers.image.revision"}}'
    expect "config: user $IMAGE_UID, command herald-gateway, revision $COMMIT" \
        test "$(podman image inspect --format "$fmt" "$TAG")" = "$IMAGE_UID:$IMAGE_UID|[\"herald-gateway\"]|$COMMIT"
    expect "ports 8080 and 8090 exposed" \
        bash -c '[[ $(podman image inspect --format "{{json .Config.ExposedPorts}}" "$1") == *8080/tcp*8090/tcp* ]]' _ "$TAG"
    expect "no shell in the image" test ! -e "$dir/bin/sh"
    expect "/var/lib/herald belongs to $IMAGE_UID" \
        test "$(stat -c %u "$dir/var/lib/herald")" = "$IMAGE_UID"

    local name out
    for name in "${BINS[@]}"; do
        out=$(chroot --userspec="$IMAGE_UID:$IMAGE_UID" "$dir" "/usr/bin/$name" --version 2>&1 || true)
        expect "$name --version in the image names $COMMIT ($out)" \
            bash -c '[[ $1 == *"$2"* ]]' _ "$out" "$COMMIT"
    done

    # The image's environment, as `docker run` gives it, but a free port on
    # loopback: this runs in the host's network namespace.
    local env=() line port pid log="$dir.log" status
    while IFS= read -r line; do env+=("$line"); done < <(podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$TAG" | sed '/^$/d')
    port=$(free_port)
    env+=("HERALD_LISTEN=127.0.0.1:$port")
    # From the image's working directory, as its user.
    env -i "${env[@]}" "$(command -v chroot)" --userspec="$IMAGE_UID:$IMAGE_UID" "$dir" \
        /usr/bin/herald-gateway --log-format json >"$log" 2>&1 &
    pid=$!
    local deadline=$((SECONDS + START_TIMEOUT)) health=000
    while [ $SECONDS -lt $deadline ] && kill -0 "$pid" 2>/dev/null; do
        health=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz" || true)
        [ "$health" = 200 ] && break
        sleep 0.1
    done
    expect "the gateway from the image answers /healthz on 127.0.0.1:$port (got $health)" test "$health" = 200
    expect "it serves the browser client /js/herald.js" \
        test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/js/herald.js")" = 200
    expect "dev mode wrote its credentials to /var/lib/herald" \
        bash -c 'ls "$1"/var/lib/herald | grep -q .' _ "$dir"
    kill -TERM "$pid" 2>/dev/null || true
    status=0
    wait "$pid" || status=$?
    expect "SIGTERM: exit 0 (got $status)" test "$status" -eq 0
    [ "$failed" -eq 0 ] || { echo "--- gateway log"; cat "$log"; }
    rm -f "$log"
    echo "image: $passed passed, $failed failed ($(podman image ls --format '{{.Size}}' "$TAG"))"
    [ "$failed" -eq 0 ]
}

save() {
    [ -n "$OUT_FILE" ] || die "save needs --out FILE"
    podman image exists "$TAG" || die "no image $TAG (scripts/image.sh build first)"
    rm -f "$OUT_FILE"
    podman save --quiet --format oci-archive -o "$OUT_FILE" "$TAG"
    echo "$OUT_FILE"
}

case $CMD in
    build) ensure_tools; build ;;
    check) ensure_tools; check ;;
    save) ensure_tools; save ;;
    rm) podman rmi -f "$TAG" >/dev/null 2>&1 || true ;;
    -h|--help) usage ;;
    *) die "unknown command $CMD (build, check, save, rm)" ;;
esac
