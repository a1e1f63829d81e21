/**
 * Two projects: `unit` (test/unit, pure functions, no database) and
 * `integration` (test/integration and test/docs), which needs one real
 * PostgreSQL server and one migrated template per run
 * (test/helpers/global-setup.ts) and clones a database per test file.
 * `npx vitest run --project unit` runs the first alone, without starting a server.
 */
import { defineConfig } from 'vitest/config';

/** What every test file shares, the slow suite's included (vitest.slow.config.ts). */
export const common = {
  // A child process per file rather than a worker thread: process-wide
  // state (env, singletons, signal handlers) and crashes stay contained.
  pool: 'forks',
  watch: false,
  testTimeout: 20_000,
} as const;

/** What test files that need PostgreSQL share. */
export const withDatabase = {
  globalSetup: ['test/helpers/global-setup.ts'],
  setupFiles: ['test/helpers/cheap-passwords.ts'],
  // Hooks create databases and build the app, which can crawl on a loaded
  // CI machine; a hook timing out says nothing useful about the code.
  hookTimeout: 120_000,
};

export default defineConfig({
  test: {
    ...common,
    // Stopping a container or the embedded server happens after the tests.
    teardownTimeout: 30_000,
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'], pool: 'threads', isolate: false } },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts', 'test/docs/**/*.test.ts'],
          ...withDatabase,
        },
      },
    ],
  },
});
