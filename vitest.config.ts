/**
 * One real PostgreSQL server and one migrated template per run
 * (test/helpers/global-setup.ts), one cloned database per test file that
 * needs one, files in parallel in separate processes.
 */
import { configDefaults, defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Faults, shutdown and long fuzzing run apart: npm run test:slow (vitest.slow.config.ts).
    exclude: [...configDefaults.exclude, 'test/slow/**'],
    globalSetup: ['test/helpers/global-setup.ts'],
    // A child process per file rather than a worker thread: process-wide
    // state (env, singletons, signal handlers) and crashes stay contained.
    pool: 'forks',
    watch: false,
    testTimeout: 20_000,
    // Hooks create databases and build the app, which can crawl on a loaded
    // CI machine; a hook timing out says nothing useful about the code.
    hookTimeout: 120_000,
    // Stopping a container or the embedded server happens after the tests.
    teardownTimeout: 30_000,
  },
});
