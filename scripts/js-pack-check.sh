#!/usr/bin/env bash
# @herald/client as npm would ship it. `npm pack` gateway/js, then:
#   - the tarball holds exactly the package's files (package.json, the module,
#     its types, README, CHANGELOG, LICENSE: the repository's, byte for byte);
#   - package.json makes up no link: nothing at example.invalid; a
#     repository only when Cargo.toml names one (then the same, with
#     `directory`); Herald has no public home yet, so today neither does;
#   - it installs offline into a scratch project in a temp dir (no
#     dependencies: sockjs-client is an optional peer, not installed);
#   - Node imports it by name as ESM: the name resolves through `exports` to
#     the packed module, which is the source file, and every export of the
#     source is there;
#   - tsc finds its .d.ts from the scratch project (NodeNext and bundler
#     resolution, strict) and checks a small program against it.
# Prints `js-pack: ok: …` last when everything holds; exits non-zero otherwise.
#
#   scripts/js-pack-check.sh
#
# Needs node and npm, and gateway/js/node_modules (`npm ci` there: typescript).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PKG="$ROOT/gateway/js"
TSC="$PKG/node_modules/typescript/bin/tsc"

die() { printf 'js-pack: FAILED: %s\n' "$*" >&2; exit 1; }

[ -f "$TSC" ] || die "$TSC is missing: run npm ci in gateway/js"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# package.json's links: none made up; its repository is Cargo.toml's
# workspace repository when there is one, and absent when there is none.
# A made-up one (example.invalid: the documentation site's base until the
# project has a public home) counts as none.
cargo_repo=$(sed -n 's/^repository = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | grep -v '://example\.invalid' | head -n1 || true)
node -e '
    const [pkgPath, cargoRepo] = process.argv.slice(1);
    const text = require("fs").readFileSync(pkgPath, "utf8");
    const pkg = JSON.parse(text);
    const fail = (m) => { console.error("js-pack: FAILED: package.json " + m); process.exit(1); };
    if (/example\.invalid/.test(text)) fail("links to example.invalid: name a real place or none");
    if (cargoRepo) {
        const r = pkg.repository || {};
        const want = "git+" + cargoRepo.replace(/\/$/, "") + ".git";
        if (r.url !== want) fail(`repository.url is ${JSON.stringify(r.url)}, Cargo.toml says ${want}`);
        if (r.directory !== "gateway/js") fail("repository.directory must be gateway/js");
    } else if (pkg.repository || pkg.homepage || pkg.bugs) {
        fail("names a repository, homepage or bugs URL while Cargo.toml names no repository");
    }
    if (!Array.isArray(pkg.keywords) || pkg.keywords.length === 0) fail("needs keywords");
    if (!pkg.publishConfig || pkg.publishConfig.access !== "public") fail("needs publishConfig.access public (a scoped name)");
    if (pkg.license !== "Apache-2.0") fail("license must be Apache-2.0");
' "$PKG/package.json" "$cargo_repo"

echo "==> npm pack gateway/js"
(cd "$PKG" && npm pack --json --pack-destination "$WORK" --loglevel=error) >"$WORK/pack.json"
tarball=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))[0].filename)' "$WORK/pack.json")
[ -f "$WORK/$tarball" ] || die "npm pack made no $tarball"

tar -tzf "$WORK/$tarball" | sort >"$WORK/files"
printf 'package/%s\n' CHANGELOG.md LICENSE README.md package.json src/herald.d.ts src/herald.js | sort >"$WORK/expected"
diff -u "$WORK/expected" "$WORK/files" || die "$tarball holds other files than expected (diff above)"
echo "$tarball: $(wc -l <"$WORK/files") files"

echo "==> npm install --offline $tarball into a scratch project"
mkdir "$WORK/app"
cat >"$WORK/app/package.json" <<'EOF'
{ "name": "herald-client-scratch", "version": "0.0.0", "private": true, "type": "module" }
EOF
(cd "$WORK/app" && npm install --offline --no-audit --no-fund --loglevel=error "$WORK/$tarball")
installed="$WORK/app/node_modules/@herald/client"
cmp "$installed/LICENSE" "$ROOT/LICENSE" || die "the packed LICENSE is not the repository's"
cmp "$installed/src/herald.js" "$PKG/src/herald.js" || die "the packed module is not gateway/js/src/herald.js"
others=$(cd "$WORK/app/node_modules" && ls -A | grep -vxE '@herald|\.package-lock\.json' || true)
[ -z "$others" ] || die "installing it pulled in more packages: $others"

echo "==> node: import '@herald/client'"
(cd "$WORK/app" && node --input-type=module - "$PKG/src/herald.js" <<'EOF'
import assert from 'node:assert/strict';
import { pathToFileURL } from 'node:url';
import connect, * as herald from '@herald/client';

const resolved = import.meta.resolve('@herald/client');
assert.match(resolved, /\/node_modules\/@herald\/client\/src\/herald\.js$/, `resolved to ${resolved}`);
const source = await import(pathToFileURL(process.argv[2]).href);
assert.deepEqual(Object.keys(herald).sort(), Object.keys(source).sort(), 'the same exports as the source');
assert.ok(Object.keys(herald).length > 10);
assert.equal(connect, herald.connect, 'the default export is connect');
const [frame] = new herald.FrameDecoder().push(herald.encodeFrame('SEND', { destination: '/x' }, 'hé'));
assert.equal(new TextDecoder().decode(frame.body), 'hé');
assert.equal(herald.positionKey('default', ['b.*', 'a.*']), 'herald.resume:default:a.*,b.*');
assert.throws(() => connect('ws://127.0.0.1:1/ws', {}), TypeError);
console.log(`imported: ${Object.keys(herald).length} exports from ${resolved}`);
EOF
)

echo "==> tsc: the packed types from the scratch project"
cat >"$WORK/app/tsconfig.json" <<'EOF'
{
  "compilerOptions": {
    "target": "ES2022",
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "lib": ["ES2022", "DOM"],
    "strict": true,
    "noEmit": true,
    "skipLibCheck": false,
    "types": []
  },
  "files": ["main.ts"]
}
EOF
cat >"$WORK/app/main.ts" <<'EOF'
import connect, { parsePosition, positionKey, type ConnectOptions, type HeraldMessage, type Position } from '@herald/client';

const options: ConnectOptions = { token: 'jwt', transports: 'websocket-raw', resume: { storage: 'session' } };
const h = connect('wss://herald.example/ws', options);
h.on('chat.*', (m: HeraldMessage) => void m.json<{ text: string }>().text);
h.on('gap', (g) => void g.reason);
const p: Position | null = parsePosition(sessionStorage.getItem(positionKey('default', null)));
const seq: number | undefined = p?.seq;
void [seq, h.lastSeq, h.epoch];
// The types are really there: an untyped module would accept this call.
// @ts-expect-error connect takes a URL string
connect(42, options);
EOF
for resolution in NodeNext Bundler; do
    module=$([ "$resolution" = NodeNext ] && echo NodeNext || echo ES2022)
    (cd "$WORK/app" && node "$TSC" -p . --module "$module" --moduleResolution "$resolution" --listFiles) >"$WORK/tsc.out" \
        || { cat "$WORK/tsc.out"; die "tsc ($resolution) failed against the packed types"; }
    grep -q 'node_modules/@herald/client/src/herald\.d\.ts$' "$WORK/tsc.out" \
        || { cat "$WORK/tsc.out"; die "tsc ($resolution) did not read the packed herald.d.ts"; }
    echo "tsc ($resolution): ok, types from node_modules/@herald/client/src/herald.d.ts"
done

echo "js-pack: ok: $tarball ($(wc -l <"$WORK/files") files) installs offline, imports by name, typechecks (NodeNext, bundler)"
