// The minified client the gateway serves under a content-hashed name
// (gateway/src/http.rs: GET /js/herald.<hash>.js, immutable), with its
// source map (the readable source inside it, sourcesContent):
//
//   dist/herald.min.js       terser's output of src/herald.js, ending in
//                            //# sourceMappingURL=herald.<hash>.js.map
//   dist/herald.min.js.map   its source map (file: herald.<hash>.js)
//
// <hash> is the first 16 hex digits of the SHA-256 of the minified code
// (the text before that last line), so it changes exactly when the code
// does. Both files are committed: `cargo build` needs no Node. After
// editing src/herald.js run `npm run build` here; `npm run build -- --check`
// (test/build.test.js, in CI) fails when they are not terser's output of
// the current source, and the gateway's Rust tests fail when the map's
// source is not src/herald.js.
//
// terser is pinned (package.json devDependencies, exact version): the
// output is byte-for-byte the same on every machine.

import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { minify } from 'terser';

const here = join(dirname(fileURLToPath(import.meta.url)), '..');
const SOURCE = join(here, 'src/herald.js');
const OUT_JS = join(here, 'dist/herald.min.js');
const OUT_MAP = join(here, 'dist/herald.min.js.map');

/** The minified module and its map, as the committed files should read. */
export async function build() {
  const pkg = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8'));
  const source = readFileSync(SOURCE, 'utf8');
  const result = await minify(
    { 'herald.js': source },
    {
      module: true,
      ecma: 2020,
      compress: { passes: 2 },
      mangle: true,
      format: {
        comments: false,
        preamble: `/*! ${pkg.name} ${pkg.version} | ${pkg.license} | source: herald.js */`,
      },
      // The map names the source herald.js, relative to the map's URL: the
      // gateway serves the readable module at /js/herald.js, beside it.
      sourceMap: { includeSources: true, asObject: true },
    },
  );
  const code = result.code;
  const hash = createHash('sha256').update(code).digest('hex').slice(0, 16);
  const name = `herald.${hash}.js`;
  const map = { ...result.map, file: name, sources: ['herald.js'] };
  return {
    js: `${code}\n//# sourceMappingURL=${name}.map\n`,
    map: `${JSON.stringify(map)}\n`,
    name,
  };
}

/** Whether the committed files are what build() makes now. */
export async function isCurrent() {
  const want = await build();
  const read = (p) => {
    try {
      return readFileSync(p, 'utf8');
    } catch {
      return null;
    }
  };
  return read(OUT_JS) === want.js && read(OUT_MAP) === want.map;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv.includes('--check')) {
    if (!(await isCurrent())) {
      console.error('gateway/js/dist is not terser\'s output of src/herald.js: run `npm run build` in gateway/js');
      process.exit(1);
    }
    console.log('gateway/js/dist is current');
  } else {
    const out = await build();
    writeFileSync(OUT_JS, out.js);
    writeFileSync(OUT_MAP, out.map);
    const size = (s) => Buffer.byteLength(s);
    console.log(`${out.name}: ${size(out.js)} bytes (source ${size(readFileSync(SOURCE, 'utf8'))}), map ${size(out.map)} bytes`);
  }
}
