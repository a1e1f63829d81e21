/**
 * What tests open (databases, instances of the app, clients, servers), closed after them, the last opened first, so
 * that no file keeps its own list of closers and hooks to empty it. A file calls useCleanups once, at its top (or a
 * describe's), like useTestApp.
 */
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeEach } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createTestDatabase, type onTopology, type TestDatabase } from './database.js';
import { testConfig, type Tuning } from './factories.js';

export type Undo = () => unknown;

/** One line the app logged, parsed. */
export interface LogLine {
  msg?: string;
  level?: number;
  [key: string]: unknown;
}

/** Where an instance's database is: onTopology(url), or `{ databaseUrl }` for that server alone. */
export type DatabaseSettings = ReturnType<typeof onTopology> | { databaseUrl: string };

export interface LoggedApp {
  app: FastifyInstance;
  /** What it logged so far, at its LOG_LEVEL (silent unless the env says otherwise). */
  lines: LogLine[];
}

export interface Cleanups {
  /** Runs `undo` after the test that calls it; called from a beforeAll, after the last test. */
  defer(undo: Undo): void;
  /** The same, after everything else deferred then (e.g. a server-wide role, once the sessions using it are gone). */
  deferLast(undo: Undo): void;
  /** A fresh migrated database (`empty`: one no migration touched), dropped afterwards. */
  database(options?: { empty?: boolean }): Promise<TestDatabase>;
  /** The production app on `database`, with testConfig(env, tuning), closed afterwards. */
  app(database: DatabaseSettings, env?: Record<string, string>, tuning?: Tuning): Promise<LoggedApp>;
}

/** A stream for buildApp's logStream, and the lines written to it, parsed. */
export function logLines(): { stream: Writable; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  return { stream, lines };
}

/**
 * Cleanups for the tests of this file (or describe). With `ignoreFailures`, an undo that fails is passed over: in
 * files that break connections on purpose, closing one may fail. Otherwise the others still run, then the first
 * failure fails the test.
 */
export function useCleanups({ ignoreFailures = false } = {}): Cleanups {
  const undos: Undo[] = [];
  // Undos from index `ownFrom` on are the running test's; those below it wait for afterAll.
  let ownFrom = 0;
  let inTest = false;

  async function undoDownTo(index: number): Promise<void> {
    const failures: unknown[] = [];
    while (undos.length > index) {
      try {
        await undos.pop()!();
      } catch (error) {
        failures.push(error);
      }
    }
    if (failures.length > 0 && !ignoreFailures) throw failures[0];
  }

  beforeEach(() => {
    ownFrom = undos.length;
    inTest = true;
  });
  afterEach(async () => {
    inTest = false;
    await undoDownTo(ownFrom);
  });
  afterAll(() => undoDownTo(0));

  const cleanups: Cleanups = {
    defer(undo) {
      undos.push(undo);
    },
    deferLast(undo) {
      const bottom = inTest ? ownFrom : 0;
      undos.splice(bottom, 0, undo);
    },
    async database(options = {}) {
      const db = await createTestDatabase(undefined, options);
      cleanups.defer(() => db.drop());
      return db;
    },
    async app(database, env = {}, tuning = {}) {
      const { stream, lines } = logLines();
      const app = (await buildApp(
        { ...testConfig(env, tuning), ...database },
        { logStream: stream },
      )) as unknown as FastifyInstance;
      cleanups.defer(() => app.close());
      return { app, lines };
    },
  };
  return cleanups;
}
