/**
 * The slow suite (npm run test:slow): faults (PostgreSQL and Redis lost while
 * requests flow), SIGTERM under load against a real server process, and the
 * fuzz properties with a long budget. Everything else as in vitest.config.ts,
 * the same global setup included.
 */
import { defineConfig } from 'vitest/config';
import base from './vitest.config.js';

export default defineConfig({
  ...base,
  test: {
    ...base.test,
    include: ['test/slow/**/*.test.ts'],
    exclude: [],
    // A fault scenario waits for outages and recoveries; bounded by its own loops.
    testTimeout: 120_000,
  },
});
