#!/usr/bin/env node
/**
 * Released migrations are frozen. A database that a release migrated records its migrations by name
 * only (node-pg-migrate's pgmigrations), so a released file changed later never runs there, and one
 * removed makes `npm run migrate` refuse that database. migrations/released.json lists each file a
 * release shipped, the release and the file's SHA-256; this fails when one of them was changed or
 * removed, or when a migration not released yet sorts before a released one (node-pg-migrate's order
 * check would then refuse every database that release migrated).
 *
 * Plain Node, no dependencies: `node .ci/check-migrations.mjs [checkout]` (default: the current folder).
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const dir = join(process.argv[2] ?? '.', 'migrations');
const released = JSON.parse(readFileSync(join(dir, 'released.json'), 'utf8'));
const problems = [];

for (const entry of released) {
  const { file, release, sha256 } = entry;
  if (typeof file !== 'string' || typeof release !== 'string' || !/^[0-9a-f]{64}$/.test(sha256 ?? '')) {
    problems.push(`released.json: ${JSON.stringify(entry)} is not { "file", "release", "sha256" }`);
    continue;
  }
  const path = join(dir, file);
  if (!existsSync(path)) {
    problems.push(`${file}, shipped by ${release}, was removed`);
    continue;
  }
  const actual = createHash('sha256').update(readFileSync(path)).digest('hex');
  if (actual !== sha256)
    problems.push(`${file}, shipped by ${release}, was changed (sha256 ${actual}, released ${sha256})`);
}

const releasedFiles = released.map((entry) => entry.file).sort();
const newestReleased = releasedFiles.at(-1);
const unreleased = readdirSync(dir).filter((file) => file.endsWith('.sql') && !releasedFiles.includes(file));
for (const file of unreleased) {
  if (newestReleased !== undefined && file < newestReleased) {
    problems.push(`${file} is not released but sorts before ${newestReleased}, which is: give it a later timestamp`);
  }
}

if (problems.length > 0) {
  console.error(
    `the released migrations must stay as they were shipped (migrations/released.json):\n  ${problems.join('\n  ')}`,
  );
  console.error(
    'Restore a changed or removed file as its release shipped it (`git log -- migrations/<file>`), and make the ' +
      'change in a new migration; see docs/operations.md, "Upgrading from a release".',
  );
  process.exit(1);
}
console.log(
  `${releasedFiles.length} released migration(s) as shipped; ${unreleased.length} not released yet, after them`,
);
