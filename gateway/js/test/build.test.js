// The minified client the gateway serves (dist/, scripts/build.mjs): the
// committed files are terser's output of the current source, and the
// minified module exports what the source does.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

import { build } from '../scripts/build.mjs';
import * as source from '../src/herald.js';
import * as minified from '../dist/herald.min.js';

// terser runs once for the whole file.
const built = build();

test('dist/ is the build of src/herald.js (else: npm run build in gateway/js)', async () => {
  const want = await built;
  const read = (f) => readFileSync(new URL(`../dist/${f}`, import.meta.url), 'utf8');
  assert.ok(read('herald.min.js') === want.js && read('herald.min.js.map') === want.map,
    'gateway/js/dist is stale: run `npm run build` in gateway/js');
});

test('the minified module exports the same names, of the same kinds', () => {
  const shape = (m) => Object.fromEntries(Object.entries(m).map(([k, v]) => [k, typeof v]));
  assert.deepEqual(shape(minified), shape(source));
  assert.deepEqual(minified.DEFAULTS, source.DEFAULTS);
  assert.equal(minified.matchEvent('order.*', 'order.paid'), source.matchEvent('order.*', 'order.paid'));
});

test('the map points back at herald.js, whose text it carries', async () => {
  const { name } = await built;
  const map = JSON.parse(readFileSync(new URL('../dist/herald.min.js.map', import.meta.url), 'utf8'));
  assert.equal(map.file, name);
  assert.deepEqual(map.sources, ['herald.js']);
  assert.equal(map.sourcesContent[0], readFileSync(new URL('../src/herald.js', import.meta.url), 'utf8'));
  assert.match(readFileSync(new URL('../dist/herald.min.js', import.meta.url), 'utf8'),
    new RegExp(`\\n//# sourceMappingURL=${name.replace(/\./g, '\\.')}\\.map\\n$`));
});
