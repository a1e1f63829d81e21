/**
 * Projects: `unit` (test/unit, pure functions, no database) and
 * `integration` (test/integration and test/docs; `integration-mocks`, its
 * files that mock a module), which need one real PostgreSQL server and one
 * migrated template per run (test/helpers/global-setup.ts) and clone a
 * database per test file.
 * `npx vitest run --project unit` runs the first alone, without starting a server.
 */
import { defineConfig } from 'vitest/config';

/** What every test file shares, the slow suite's included (vitest.slow.config.ts). */
export const common = {
  // Child processes rather than worker threads: signal handlers and crashes
  // stay out of vitest's own process.
  pool: 'forks',
  watch: false,
  // Bounds for a test that hangs, not for how fast it is: a loaded machine
  // may take many times as long as a quiet one.
  testTimeout: 60_000,
  expect: { poll: { timeout: 30_000 } },
} as const;

/** What test files that need PostgreSQL share. */
export const withDatabase = {
  globalSetup: ['test/helpers/global-setup.ts'],
  setupFiles: ['test/helpers/cheap-passwords.ts'],
  // Hooks create databases and build the app, which can crawl on a loaded
  // CI machine; a hook timing out says nothing useful about the code.
  hookTimeout: 120_000,
};

/** Integration files that vi.mock a module of the service. */
const MOCKING = ['test/integration/check-order.test.ts', 'test/integration/write-paths.test.ts'];

export default defineConfig({
  test: {
    ...common,
    // Files wait on timers and PostgreSQL as much as they compute: on two
    // cores, three at once keep both busy (vitest's default would be one).
    maxWorkers: 3,
    // Stopping a container or the embedded server happens after the tests.
    teardownTimeout: 30_000,
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'], pool: 'threads', isolate: false } },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts', 'test/docs/**/*.test.ts'],
          exclude: MOCKING,
          ...withDatabase,
          // Files share their worker's loaded modules: loading the service's
          // import graph again for every file was the suite's largest cost.
          // Each file still builds its own apps on its own database.
          isolate: false,
        },
      },
      // vi.mock replaces a module for the whole graph that imports it: a fresh one per file.
      { extends: true, test: { name: 'integration-mocks', include: MOCKING, ...withDatabase } },
    ],
  },
});
