/**
 * Writes the OpenAPI document exactly as the app serves it (GET /openapi.json
 * through app.inject on buildApp) to the file named by the first argument, for
 * `npm run lint:openapi` to lint with Spectral. A development check, so it
 * lives with the test helpers rather than in src/cli.ts, which ships in the
 * image and holds operator commands. No database is needed: the pool only
 * connects on a first query, and this makes none.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';

const [target] = process.argv.slice(2);
if (!target) {
  console.error('usage: tsx test/helpers/dump-openapi.ts <output.json>');
  process.exit(64);
}
// API_PREFIX, if set, shapes the document's server URL as in production.
const config = loadConfig({ ...process.env, LOG_LEVEL: 'silent', DATABASE_URL: undefined });
const app = await buildApp({ ...config, databaseUrl: 'postgres://127.0.0.1:1/unused' });
try {
  const res = await app.inject({ url: `${config.apiPrefix}/openapi.json` });
  if (res.statusCode !== 200) throw new Error(`GET /openapi.json answered ${res.statusCode}: ${res.body}`);
  await mkdir(dirname(target), { recursive: true });
  await writeFile(target, `${JSON.stringify(res.json(), null, 2)}\n`);
  console.log(`wrote ${target}`);
} finally {
  await app.close();
}
