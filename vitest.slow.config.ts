/**
 * The slow suite (npm run test:slow): faults (PostgreSQL and Redis lost while
 * requests flow), SIGTERM under load against a real server process, and the
 * fuzz properties with a long budget. The same settings and global setup as
 * the integration project of vitest.config.ts.
 */
import { defineConfig } from 'vitest/config';
import { common, withDatabase } from './vitest.config.js';

export default defineConfig({
  test: {
    ...common,
    ...withDatabase,
    teardownTimeout: 30_000,
    include: ['test/slow/**/*.test.ts'],
    // A fault scenario waits for outages and recoveries; bounded by its own loops.
    testTimeout: 120_000,
  },
});
