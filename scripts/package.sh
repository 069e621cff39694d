#!/usr/bin/env bash
# Build Herald's install artifacts into dist/ (gitignored):
#
#   herald-gateway_<version>-1_<arch>.deb, herald-router_<version>-1_<arch>.deb
#       Debian packages (cargo-deb, configured in gateway/Cargo.toml and
#       router/Cargo.toml): the binary in /usr/bin, its man page, the systemd
#       units from deploy/systemd (installed, not enabled; the gateway's
#       also herald-gateway@.service, one instance per edge), /etc/herald/*.toml
#       and *.env (mode 0600) as conffiles, the annotated examples and
#       docs/configuration.md under /usr/share/doc/<package>, and a system
#       user `herald` (postinst, deploy/debian/) with its state in
#       /var/lib/herald; the gateway's also carries deploy/mint-token as
#       herald-mint-token.
#   herald-gateway-<version>-linux-<arch>.tar.gz, herald-router-…tar.gz
#       the same binaries (stripped), units, configurations, examples, man
#       pages, LICENSE and README, for machines without dpkg.
#   SHA256SUMS  the checksums of all of them (`cd dist && sha256sum -c SHA256SUMS`).
#
#   scripts/package.sh [--profile release|dev] [--no-build] [--fast] [--out DIR]
#
# --profile   the Cargo profile packaged (default release: what to ship).
#             CI packages the dev build the test command already made
#             (`--profile dev --no-build --fast`), to check the packaging
#             without a second, optimized build; cargo-deb warns that it
#             does not mean dev builds for release, rightly.
# --no-build  package what is built; the binaries must say the commit of HEAD
#             (`--version`), or this stops: a stale build is never packaged.
# --fast      lighter compression of the .debs (cargo-deb --fast).
# --out DIR   where the artifacts go (default dist/).
#
# Each binary is built on its own (`cargo build -p herald-gateway`, then
# `-p herald-router`), as deploy/up does, so the gateway does not link the
# router's Redis client. `--version` and herald_build_info say the commit
# (scripts/build-version.rs; HERALD_COMMIT overrides it for a build without
# git). Installs what is missing: cargo-deb (pinned, from crates.io) and
# Debian's help2man (man pages from --help), dpkg-dev (cargo-deb's
# dependency resolution) and binutils (strip). Honours CARGO_TARGET_DIR.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

CARGO_DEB_VERSION=3.8.0
PROFILE=release
NO_BUILD=0
FAST=0
OUT="$ROOT/dist"

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'package.sh: %s\n' "$*" >&2; exit 1; }
# shellcheck source=lib/apt.sh
. "$ROOT/scripts/lib/apt.sh"
usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

while [ $# -gt 0 ]; do
    case $1 in
        --profile) [ $# -ge 2 ] || die "--profile needs a value"; PROFILE=$2; shift 2 ;;
        --profile=*) PROFILE=${1#*=}; shift ;;
        --no-build) NO_BUILD=1; shift ;;
        --fast) FAST=1; shift ;;
        --out) [ $# -ge 2 ] || die "--out needs a directory"; OUT=$2; shift 2 ;;
        --out=*) OUT=${1#*=}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
case $PROFILE in
    release) PROFILE_DIR=release ;;
    dev|debug) PROFILE=dev; PROFILE_DIR=debug ;;
    *) PROFILE_DIR=$PROFILE ;;
esac
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

ensure_cargo_deb() {
    local have
    have=$(cargo-deb --version 2>/dev/null | awk '{print $2}' || true)
    [ "$have" = "$CARGO_DEB_VERSION" ] && return 0
    step "installing cargo-deb $CARGO_DEB_VERSION from crates.io${have:+ (found $have)}"
    # Its own build directory, not the workspace's target dir.
    env -u CARGO_TARGET_DIR cargo install cargo-deb --locked --version "$CARGO_DEB_VERSION"
}

target_dir() {
    cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

build() {
    local pkg
    for pkg in herald-gateway herald-router; do
        step "cargo build --profile $PROFILE -p $pkg"
        cargo build --locked --profile "$PROFILE" -p "$pkg"
    done
}

# The binaries must say the commit of HEAD: a package says what it carries.
check_commit() {
    local commit bin out
    commit=${HERALD_COMMIT:-$(git rev-parse --short=12 HEAD)}
    for bin in "$BIN_DIR/herald-gateway" "$BIN_DIR/herald-router"; do
        [ -x "$bin" ] || die "$bin is not built (run without --no-build, or build it)"
        out=$("$bin" --version)
        [[ $out == *"$commit"* ]] \
            || die "$bin says \"$out\", not the commit of HEAD ($commit): rebuild it"
        echo "$out"
    done
}

# Man pages from each program's --help (help2man), gzipped where cargo-deb's
# assets expect them (target/release/man/ is target/<profile>/man/).
man_pages() {
    # help2man dates the pages by SOURCE_DATE_EPOCH: the commit, not the build.
    export SOURCE_DATE_EPOCH="$MTIME"
    local man="$BIN_DIR/man"
    mkdir -p "$man"
    help2man --no-info --no-discard-stderr --section 1 \
        --name "Herald gateway: browser sessions, mailboxes, standalone Herald" \
        "$BIN_DIR/herald-gateway" | gzip -9n >"$man/herald-gateway.1.gz"
    help2man --no-info --no-discard-stderr --section 1 \
        --name "Herald router: publication intake and forwarding to edges" \
        "$BIN_DIR/herald-router" | gzip -9n >"$man/herald-router.1.gz"
    help2man --no-info --no-discard-stderr --section 1 --version-string "$VERSION" \
        --name "sign a browser token (HS256 JWT) for a Herald deployment" \
        "$ROOT/deploy/mint-token" | gzip -9n >"$man/herald-mint-token.1.gz"
}

debs() {
    local pkg args=(--no-build --profile "$PROFILE" --strip --output "$OUT")
    [ "$FAST" -eq 1 ] && args+=(--fast)
    for pkg in herald-gateway herald-router; do
        step "cargo deb -p $pkg ${args[*]}"
        cargo deb -p "$pkg" "${args[@]}"
    done
}

# One tarball per binary: bin/, systemd/, etc/ (the packaged configurations),
# examples/, man/, docs/configuration.md, LICENSE, README.md, VERSION.
tarball() {
    local name=$1 stage dir
    stage=$(mktemp -d)
    dir="$stage/$name-$VERSION"
    mkdir -p "$dir"/{bin,systemd,etc,examples,man,docs}
    strip -o "$dir/bin/$name" "$BIN_DIR/$name"
    install -m 0644 "deploy/systemd/$name.service" "$dir/systemd/"
    install -m 0644 "$BIN_DIR/man/$name.1.gz" "$dir/man/"
    install -m 0644 docs/configuration.md LICENSE README.md "$dir/"
    mv "$dir/configuration.md" "$dir/docs/"
    printf '%s %s (commit %s)\n' "$name" "$VERSION" "$COMMIT" >"$dir/VERSION"
    case $name in
        herald-gateway)
            install -m 0644 "deploy/systemd/herald-gateway@.service" "$dir/systemd/"
            install -m 0755 deploy/mint-token "$dir/bin/herald-mint-token"
            install -m 0644 "$BIN_DIR/man/herald-mint-token.1.gz" "$dir/man/"
            install -m 0644 deploy/debian/gateway.toml "$dir/etc/gateway.toml"
            install -m 0644 deploy/systemd/gateway.env.example "$dir/etc/"
            install -m 0644 deploy/gateway.example.toml deploy/examples/gateway-standalone.toml \
                deploy/examples/gateway-edge.toml "$dir/examples/"
            ;;
        herald-router)
            install -m 0644 deploy/debian/router.toml "$dir/etc/router.toml"
            install -m 0644 deploy/systemd/router.env.example "$dir/etc/"
            install -m 0644 router/router.example.toml deploy/examples/router.toml "$dir/examples/"
            ;;
    esac
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$MTIME" \
        -C "$stage" -cf - "$name-$VERSION" | gzip -9n >"$OUT/$name-$VERSION-linux-$ARCH.tar.gz"
    rm -rf "$stage"
    echo "$OUT/$name-$VERSION-linux-$ARCH.tar.gz"
}

main() {
    command -v cargo >/dev/null || die "cargo not found: install Rust from https://rustup.rs"
    ensure_apt_packages help2man dpkg-dev binutils
    ensure_cargo_deb
    BIN_DIR="$(target_dir)/$PROFILE_DIR"
    VERSION=$(cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "herald-gateway"))')
    COMMIT=${HERALD_COMMIT:-$(git rev-parse --short=12 HEAD)}
    MTIME=$(git log -1 --format=%ct)
    ARCH=$(uname -m)

    [ "$NO_BUILD" -eq 1 ] || build
    check_commit
    rm -f "$OUT"/herald-*.deb "$OUT"/herald-*.tar.gz "$OUT/SHA256SUMS"
    man_pages
    debs
    step "release tarballs"
    tarball herald-gateway
    tarball herald-router
    (cd "$OUT" && sha256sum herald-*.deb herald-*.tar.gz >SHA256SUMS)
    step "dist: $OUT"
    (cd "$OUT" && ls -l herald-*.deb herald-*.tar.gz SHA256SUMS)
}

main
