#!/usr/bin/env bash
# Make a versioned release directory, dist/release-VERSION/:
#
#   herald-gateway_VERSION-1_ARCH.deb, herald-router_VERSION-1_ARCH.deb
#   herald-gateway-VERSION-linux-ARCH.tar.gz, herald-router-…tar.gz
#                          scripts/package.sh (release profile)
#   herald-image-VERSION-ARCH.oci.tar
#                          the image (Containerfile, scripts/image.sh) with
#                          the same binaries: `podman load -i` / `docker load -i`
#   herald-client-VERSION.tgz
#                          the browser client's npm tarball (`npm pack`
#                          gateway/js; `npm install ./herald-client-….tgz`)
#   herald-VERSION.cdx.json
#                          CycloneDX SBOM (scripts/sbom.py: the crates both
#                          binaries link, the npm package)
#   CHANGELOG.md           the repository's
#   SHA256SUMS             over all of the above (`sha256sum -c SHA256SUMS`)
#
#   scripts/release.sh [VERSION] [--allow-dirty] [--profile release|dev] [--no-build]
#
# VERSION defaults to the workspace version (Cargo.toml); given, it must be
# that version: a release says what its binaries say. The work tree must be
# clean (--allow-dirty to try the script itself): the binaries name the
# commit, and a dirty tree is not that commit. CHANGELOG.md must have a
# section for VERSION (or [Unreleased] when VERSION is the workspace's
# next, unreleased one: then the release is marked as a preview).
# --profile dev --no-build packages the debug build (to check this script
# quickly; never to ship). Needs what scripts/package.sh and
# scripts/image.sh need, and npm.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'release.sh: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

VERSION=
ALLOW_DIRTY=0
PROFILE=release
NO_BUILD=0
while [ $# -gt 0 ]; do
    case $1 in
        --allow-dirty) ALLOW_DIRTY=1; shift ;;
        --profile) [ $# -ge 2 ] || die "--profile needs a value"; PROFILE=$2; shift 2 ;;
        --profile=*) PROFILE=${1#*=}; shift ;;
        --no-build) NO_BUILD=1; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [ -z "$VERSION" ] || die "one VERSION only"; VERSION=$1; shift ;;
    esac
done

WORKSPACE_VERSION=$(cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "herald-gateway"))')
VERSION=${VERSION:-$WORKSPACE_VERSION}
VERSION=${VERSION#v}
[ "$VERSION" = "$WORKSPACE_VERSION" ] \
    || die "VERSION $VERSION is not the workspace version $WORKSPACE_VERSION (Cargo.toml [workspace.package]): bump it first"
CLIENT_VERSION=$(node -p 'require("./gateway/js/package.json").version')
[ "$CLIENT_VERSION" = "$VERSION" ] \
    || die "gateway/js/package.json says $CLIENT_VERSION, the workspace $VERSION: keep them one"
if [ "$ALLOW_DIRTY" -eq 0 ] && [ -n "$(git status --porcelain)" ]; then
    die "the work tree has changes (git status): commit them, or --allow-dirty"
fi
if grep -q "^## \[$VERSION\]" CHANGELOG.md; then
    :
elif grep -q '^## \[Unreleased\]' CHANGELOG.md; then
    echo "release.sh: CHANGELOG.md has no [$VERSION] section yet: this is a preview of [Unreleased]"
else
    die "CHANGELOG.md has no section [$VERSION]"
fi

ARCH=$(uname -m)
OUT="$ROOT/dist/release-$VERSION"
TAG="localhost/herald:$VERSION"
rm -rf "$OUT"
mkdir -p "$OUT"
started=$SECONDS

step "packages and tarballs (scripts/package.sh --profile $PROFILE)"
args=(--profile "$PROFILE" --out "$OUT")
[ "$NO_BUILD" -eq 1 ] && args+=(--no-build)
scripts/package.sh "${args[@]}"
rm -f "$OUT/SHA256SUMS"

step "image $TAG (scripts/image.sh, the same binaries)"
scripts/image.sh build --profile "$PROFILE" --no-build --tag "$TAG"
scripts/image.sh save --tag "$TAG" --out "$OUT/herald-image-$VERSION-$ARCH.oci.tar"

step "npm pack gateway/js"
packed=$(cd gateway/js && npm pack --json --pack-destination "$OUT" --loglevel=error \
    | node -e 'let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => console.log(JSON.parse(s)[0].filename))')
mv "$OUT/$packed" "$OUT/herald-client-$VERSION.tgz"

step "SBOM (CycloneDX)"
python3 scripts/sbom.py --out "$OUT/herald-$VERSION.cdx.json"

cp CHANGELOG.md "$OUT/"
(cd "$OUT" && sha256sum -- *.deb *.tar.gz *.oci.tar *.tgz *.cdx.json CHANGELOG.md >SHA256SUMS)

step "dist/release-$VERSION ($((SECONDS - started)) s)"
(cd "$OUT" && ls -l && sha256sum -c --quiet SHA256SUMS && echo "SHA256SUMS: OK")
