/**
 * The version is written once, in package.json: the service reads it from there (OpenAPI, /health, webhooks'
 * User-Agent); what cannot read it holds the same value (package-lock.json's root, the image's label); and
 * CHANGELOG.md has a section for it.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { VERSION } from '../../src/root.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const read = (file: string): string => readFileSync(`${ROOT}/${file}`, 'utf8');
const { version } = JSON.parse(read('package.json')) as { version: string };

it('the service reads package.json, whose version is a semantic one (/health says so)', () => {
  expect(VERSION).toBe(version);
  expect(version).toMatch(/^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/);
});

it("package-lock.json's two root entries say the same", () => {
  const lock = JSON.parse(read('package-lock.json')) as {
    version: string;
    packages: Record<string, { version?: string }>;
  };
  expect([lock.version, lock.packages['']?.version]).toEqual([version, version]);
});

it("so does the Docker image's label", () => {
  expect(read('Dockerfile')).toMatch(
    new RegExp(`^\\s+org\\.opencontainers\\.image\\.version="${version.replaceAll('.', '\\.')}"$`, 'm'),
  );
});

it('CHANGELOG.md has a section for it', () => {
  expect(read('CHANGELOG.md')).toMatch(
    new RegExp(`^## \\[${version.replaceAll('.', '\\.')}\\] - \\d{4}-\\d{2}-\\d{2}$`, 'm'),
  );
});
