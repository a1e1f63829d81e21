/**
 * Reads on streaming replicas (DATABASE_READ_URL), with a bound on how stale
 * they may be. Every CHECK_MS the primary's WAL insert position is sampled
 * (with the time it was asked) and each replica's replay position is read. A
 * replica that has replayed the position sampled at time t holds every commit
 * made before t: it takes reads while that t is less than the max lag ago.
 * Positions, not pg_last_xact_replay_timestamp(): on a quiet primary the last
 * replayed commit grows old although the replica is fully caught up.
 *
 * A replica that does not answer, or answers with an error that says its
 * connection or its recovery is the trouble, is marked stale until the next
 * check, and the statement runs again on the primary: a read never fails
 * because a replica did.
 */
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import type { Queryable } from './pool.js';

/** How often positions are compared; a fraction of the lag bound, so a healthy replica never drops out between checks. */
export const checkInterval = (maxLagMs: number) => Math.min(250, Math.floor(maxLagMs / 4));
/** Primary samples kept: enough to date a replica up to many check intervals behind. */
const SAMPLES = 64;

/** A WAL position (`16/B374D848`) as a number of bytes: exact up to 2^53 bytes of WAL. */
export function parseLsn(text: string): number {
  const slash = text.indexOf('/');
  return parseInt(text.slice(0, slash), 16) * 2 ** 32 + parseInt(text.slice(slash + 1), 16);
}

/**
 * Errors after which the same read can succeed on the primary: no SQLSTATE
 * (the connection failed), connection exceptions (08), insufficient resources
 * (53), operator intervention other than a statement timeout (57P*, e.g. the
 * replica shutting down), and 40001, which a standby raises when replaying
 * the primary's changes cancels a query (a conflict with recovery).
 */
function worthRetrying(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return true;
  return code.startsWith('08') || code.startsWith('53') || code.startsWith('57P') || code === '40001';
}

interface Replica {
  pool: pg.Pool;
  /** Runs a statement here, or on the primary when this replica fails it. */
  reader: Queryable;
  /** Replay position at the last check; -1 while unknown or unreachable. */
  replayed: number;
  /** performance.now() of the newest primary sample it has replayed. */
  freshAt: number;
}

export interface ReadRouter {
  readonly maxLagMs: number;
  /**
   * Where a read that must see the primary's position `atLeast` (0: any) goes:
   * a replica within the lag bound that has replayed it, else the primary.
   */
  reader(atLeast: number): Queryable;
  /** The primary's position sampled after `time` (performance.now()), once there is one. */
  positionAfter(time: number): number | undefined;
  /** For tests and logs: each replica's state. */
  status(): { replayed: number; lagMs: number }[];
  close(): Promise<void>;
}

/** A replica whose reader runs a statement there, or on the primary when the replica fails it. */
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

/** Reads a replica's replay position and dates it by the newest primary sample it has replayed. */
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
  /**
   * A connection of its own to the primary for the position samples: on a
   * busy request pool they would wait their turn, and the replicas would look
   * stale exactly when they are needed most.
   */
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
  const timer = setInterval(() => void check(), checkInterval(maxLagMs));
  timer.unref();
  void check();

  return {
    maxLagMs,
    reader(atLeast) {
      const now = performance.now();
      for (let i = 0; i < replicas.length; i++) {
        const replica = replicas[(next + i) % replicas.length]!;
        if (now - replica.freshAt <= maxLagMs && replica.replayed >= atLeast) {
          next = (next + i + 1) % replicas.length;
          return replica.reader;
        }
      }
      return primary;
    },
    positionAfter(time) {
      const last = samples[samples.length - 1];
      return last !== undefined && last.at > time ? last.position : undefined;
    },
    status: () => replicas.map((r) => ({ replayed: r.replayed, lagMs: performance.now() - r.freshAt })),
    async close() {
      closed = true;
      clearInterval(timer);
      await Promise.all([options.sampler.end(), ...replicas.map((r) => r.pool.end())]);
    },
  };
}
