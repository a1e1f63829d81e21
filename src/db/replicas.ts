/**
 * Reads on replicas within a lag bound: one that replayed the primary's position sampled at t holds
 * every commit before t (a replay timestamp grows old on a quiet primary). Failed reads go to the primary.
 */
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { codeOf, type Queryable } from './pool.js';

/** A fraction of the lag bound, so a healthy replica never drops out between checks. */
export const checkInterval = (maxLagMs: number): number => Math.min(250, Math.floor(maxLagMs / 4));
const SAMPLES = 64;

/** `16/B374D848` as a number of bytes. */
export function parseLsn(text: string): number {
  const slash = text.indexOf('/');
  return parseInt(text.slice(0, slash), 16) * 2 ** 32 + parseInt(text.slice(slash + 1), 16);
}

/** The replica's trouble, not the statement's (40001 on a standby: a conflict with recovery). */
function worthRetrying(error: unknown): boolean {
  const code = codeOf(error);
  if (!/^[0-9A-Z]{5}$/.test(code)) return true;
  return code.startsWith('08') || code.startsWith('53') || code.startsWith('57P') || code === '40001';
}

interface Replica {
  pool: pg.Pool;
  reader: Queryable;
  /** -1 while unknown or unreachable. */
  replayed: number;
  /** performance.now() of the newest primary sample it has replayed. */
  freshAt: number;
}

export interface ReadRouter {
  readonly maxLagMs: number;
  reader(): Queryable;
  status(): { replayed: number; lagMs: number }[];
  close(): Promise<void>;
}

function replicaOn(pool: pg.Pool, primary: pg.Pool): Replica {
  const replica: Replica = { pool, replayed: -1, freshAt: -Infinity, reader: primary };
  const run = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
  const fallback = primary.query.bind(primary) as (...args: unknown[]) => Promise<unknown>;
  replica.reader = {
    query: (...args: unknown[]) =>
      run(...args).catch((error: unknown) => {
        if (!worthRetrying(error)) throw error;
        replica.replayed = -1;
        replica.freshAt = -Infinity;
        return fallback(...args);
      }),
  } as unknown as Queryable;
  return replica;
}

async function checkReplica(
  replica: Replica,
  samples: { at: number; position: number }[],
  onError: (error: unknown) => void,
): Promise<void> {
  try {
    const result = await replica.pool.query<{ r: string | null }>('SELECT pg_last_wal_replay_lsn()::text AS r');
    const replayed = result.rows[0]?.r;
    // NULL: not a standby (or not streaming yet); never trusted with reads.
    replica.replayed = replayed ? parseLsn(replayed) : -1;
  } catch (error) {
    replica.replayed = -1;
    onError(error);
  }
  replica.freshAt = -Infinity;
  for (const sample of samples)
    if (sample.position <= replica.replayed) replica.freshAt = Math.max(replica.freshAt, sample.at);
}

export function createReadRouter(options: {
  primary: pg.Pool;
  /** Its own connection: on the busy request pool, samples would wait and replicas look stale under load. */
  sampler: pg.Pool;
  replicas: pg.Pool[];
  maxLagMs: number;
  onCheckError?: (error: unknown, replica: number) => void;
}): ReadRouter {
  const { primary, maxLagMs } = options;
  const samples: { at: number; position: number }[] = [];
  const replicas = options.replicas.map((pool) => replicaOn(pool, primary));

  let next = 0;
  let checking = false;
  let closed = false;
  async function check(): Promise<void> {
    if (checking || closed) return;
    checking = true;
    try {
      const at = performance.now();
      const { rows } = await options.sampler.query<{ p: string }>('SELECT pg_current_wal_insert_lsn()::text AS p');
      samples.push({ at, position: parseLsn(rows[0]!.p) });
      if (samples.length > SAMPLES) samples.shift();
      await Promise.all(
        replicas.map((replica, i) => checkReplica(replica, samples, (error) => options.onCheckError?.(error, i))),
      );
    } catch (error) {
      // The primary did not answer: nothing can be dated, so no replica is trusted.
      for (const replica of replicas) replica.freshAt = -Infinity;
      if (!closed) options.onCheckError?.(error, -1);
    } finally {
      checking = false;
    }
  }
  const timer = setInterval(() => void check(), checkInterval(maxLagMs)).unref();
  void check();

  return {
    maxLagMs,
    reader() {
      const now = performance.now();
      for (let i = 0; i < replicas.length; i++) {
        const replica = replicas[(next + i) % replicas.length]!;
        if (now - replica.freshAt <= maxLagMs) {
          next = (next + i + 1) % replicas.length;
          return replica.reader;
        }
      }
      return primary;
    },
    status: () => replicas.map((r) => ({ replayed: r.replayed, lagMs: performance.now() - r.freshAt })),
    async close() {
      closed = true;
      clearInterval(timer);
      await Promise.all([options.sampler.end(), ...replicas.map((r) => r.pool.end())]);
    },
  };
}
