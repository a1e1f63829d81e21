/** The service's version: package.json's, the one place it is written (OpenAPI, /health, webhooks' User-Agent). */
import { readFileSync } from 'node:fs';
import { atRoot } from './root.js';

const packageJson = JSON.parse(readFileSync(atRoot('package.json'), 'utf8')) as { version: string };
export const VERSION: string = packageJson.version;
