/**
 * .ci/check-migrations.mjs, the CI check that keeps released migrations frozen: on this checkout it passes; on a
 * copy whose released.json lists its files, it fails naming a released file changed or removed, and a migration
 * not released that sorts before a released one.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { appendFileSync, cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CHECK = join(ROOT, '.ci/check-migrations.mjs');

const check = (checkout: string) => spawnSync(process.execPath, [CHECK, checkout], { encoding: 'utf8' });

let copy: string;
let files: string[];
beforeEach(() => {
  copy = mkdtempSync(join(tmpdir(), 'posts-api-released-'));
  cpSync(join(ROOT, 'migrations'), join(copy, 'migrations'), { recursive: true });
  files = readdirSync(join(copy, 'migrations')).filter((file) => file.endsWith('.sql'));
  // Every file released by "9.9.9", whatever this checkout has released.
  const released = files.map((file) => ({
    file,
    release: '9.9.9',
    sha256: createHash('sha256')
      .update(readFileSync(join(copy, 'migrations', file)))
      .digest('hex'),
  }));
  writeFileSync(join(copy, 'migrations/released.json'), JSON.stringify(released));
});
afterEach(() => rmSync(copy, { recursive: true, force: true }));

it('passes on this checkout', () => {
  expect(check(ROOT)).toMatchObject({ status: 0, stderr: '' });
});

it('passes on a copy with every file released, and with a new migration after them', () => {
  expect(check(copy)).toMatchObject({
    status: 0,
    stdout: `${files.length} released migration(s) as shipped; 0 not released yet, after them\n`,
  });
  writeFileSync(join(copy, 'migrations/9999999999999_next.sql'), '-- Up Migration\n');
  expect(check(copy)).toMatchObject({ status: 0, stdout: expect.stringContaining('; 1 not released yet, after them') });
});

it('fails naming a released migration that was changed, and one that was removed', () => {
  const [first, second] = files;
  appendFileSync(join(copy, 'migrations', first!), '\n-- one more line\n');
  rmSync(join(copy, 'migrations', second!));
  const result = check(copy);
  expect(result.status).toBe(1);
  expect(result.stderr).toMatch(
    new RegExp(
      `^the released migrations must stay as they were shipped \\(migrations/released.json\\):\n` +
        `  ${first}, shipped by 9\\.9\\.9, was changed \\(sha256 [0-9a-f]{64}, released [0-9a-f]{64}\\)\n` +
        `  ${second}, shipped by 9\\.9\\.9, was removed\n` +
        'Restore a changed or removed file as its release shipped it',
    ),
  );
});

it('fails naming a migration not released that sorts before a released one', () => {
  writeFileSync(join(copy, 'migrations/1000000000000_early.sql'), '-- Up Migration\n');
  const result = check(copy);
  expect(result.status).toBe(1);
  expect(result.stderr).toContain(
    `  1000000000000_early.sql is not released but sorts before ${files.at(-1)}, which is: give it a later timestamp\n`,
  );
});
