/**
 * What lies at the checkout's root (migrations/, package.json), found alike from src/ and from dist/src/; and the
 * service's version, package.json's: the one place it is written (OpenAPI, /health, webhooks' User-Agent).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

// This module runs from src/ (tsx) and dist/src/ (compiled); the Docker image keeps the same layout.
const ROOT_CANDIDATES = ['../', '../../'].map((rel) => fileURLToPath(new URL(rel, import.meta.url)));

export function atRoot(name: string): string {
  const path = ROOT_CANDIDATES.map((root) => join(root, name)).find((candidate) => existsSync(candidate));
  if (path === undefined) throw new Error(`${name} not found (looked in ${ROOT_CANDIDATES.join(', ')})`);
  return path;
}

const packageJson = JSON.parse(readFileSync(atRoot('package.json'), 'utf8')) as { version: string };
export const VERSION: string = packageJson.version;
