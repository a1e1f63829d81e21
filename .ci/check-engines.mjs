#!/usr/bin/env node
/**
 * Every installed package must run on the oldest Node our own `engines.node`
 * allows: otherwise that field (and the README's Node version) would promise
 * what a dependency does not. Walks node_modules, nested copies included, and
 * lists each package whose `engines.node` excludes that minimum.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import semver from 'semver';

const range = JSON.parse(readFileSync('package.json', 'utf8')).engines.node;
const oldest = semver.minVersion(range).version;
const offenders = [];

function walk(dir) {
  for (const name of readdirSync(dir)) {
    if (name.startsWith('.')) continue;
    const path = join(dir, name);
    if (name.startsWith('@')) {
      walk(path);
      continue;
    }
    const manifest = join(path, 'package.json');
    if (existsSync(manifest)) {
      const { name: pkg, version, engines } = JSON.parse(readFileSync(manifest, 'utf8'));
      const wanted = engines?.node;
      if (typeof wanted === 'string' && !semver.satisfies(oldest, wanted))
        offenders.push(`${pkg}@${version} (${path}) needs node ${wanted}`);
    }
    if (existsSync(join(path, 'node_modules'))) walk(join(path, 'node_modules'));
  }
}

walk('node_modules');
if (offenders.length > 0) {
  console.error(
    `engines.node is "${range}", but these packages do not support Node ${oldest}:\n  ${offenders.join('\n  ')}`,
  );
  console.error('Pin a version that does (package.json "overrides"), or raise engines.node and the README.');
  process.exit(1);
}
console.log(`every installed package supports Node ${oldest} (engines.node "${range}")`);
