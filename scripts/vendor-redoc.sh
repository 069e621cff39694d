#!/usr/bin/env bash
# The API reference page's renderer (engine/apidocs/: /v1/docs) is Redoc's
# standalone bundle from the npm package `redoc`, committed so that a build
# needs neither npm nor the network and the page loads nothing from
# elsewhere. This script takes it from the npm registry with `npm pack`
# (the version pinned in engine/apidocs/VENDORED), checks the tarball
# against the integrity recorded there, and then either
#
#   scripts/vendor-redoc.sh            writes the bundle, its license files
#                                      and its sha256 into engine/apidocs/
#   scripts/vendor-redoc.sh --check    compares the committed files with
#                                      the package's, byte for byte (CI)
#
# To move to another version: set `version` and `integrity` (from
# `npm view redoc@VERSION dist.integrity`) in engine/apidocs/VENDORED, run
# this without --check, then the engine's tests (apidocs::tests check the
# bundle against the sha256 written here). Needs npm and tar.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR="$ROOT/engine/apidocs"
CHECK=0
case "${1:-}" in
    --check) CHECK=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

field() { sed -n "s/^$1 = //p" "$DIR/VENDORED"; }
version=$(field version)
integrity=$(field integrity)
[ -n "$version" ] && [ -n "$integrity" ] || { echo "vendor-redoc: VENDORED lacks version or integrity" >&2; exit 2; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && npm pack --silent "redoc@$version" >/dev/null)
tarball="$WORK/redoc-$version.tgz"
got="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
if [ "$got" != "$integrity" ]; then
    echo "vendor-redoc: redoc@$version's tarball is $got, VENDORED says $integrity" >&2
    exit 1
fi
tar -xzf "$tarball" -C "$WORK" package/bundles/redoc.standalone.js \
    package/bundles/redoc.standalone.js.LICENSE.txt package/LICENSE

FILES=(redoc.standalone.js redoc.standalone.js.LICENSE.txt)
if [ "$CHECK" -eq 1 ]; then
    status=0
    for f in "${FILES[@]}"; do
        cmp -s "$WORK/package/bundles/$f" "$DIR/$f" \
            || { echo "vendor-redoc: engine/apidocs/$f is not redoc@$version's" >&2; status=1; }
    done
    cmp -s "$WORK/package/LICENSE" "$DIR/LICENSE.redoc" \
        || { echo "vendor-redoc: engine/apidocs/LICENSE.redoc is not redoc@$version's LICENSE" >&2; status=1; }
    sum=$(sha256sum "$DIR/redoc.standalone.js" | cut -d' ' -f1)
    [ "$sum" = "$(field sha256)" ] \
        || { echo "vendor-redoc: VENDORED's sha256 is not the bundle's ($sum)" >&2; status=1; }
    [ "$status" -eq 0 ] && echo "vendor-redoc: engine/apidocs holds redoc@$version's bundle, as npm ships it"
    exit "$status"
fi
for f in "${FILES[@]}"; do cp "$WORK/package/bundles/$f" "$DIR/$f"; done
cp "$WORK/package/LICENSE" "$DIR/LICENSE.redoc"
sum=$(sha256sum "$DIR/redoc.standalone.js" | cut -d' ' -f1)
sed -i "s/^sha256 = .*/sha256 = $sum/" "$DIR/VENDORED"
echo "vendor-redoc: redoc@$version's bundle written (sha256 $sum)"
