/**
 * Group commit for single-row writes: requests that write the same kind of row
 * at the same moment share one statement, and so one round trip, one plan
 * execution and one commit (one WAL flush), instead of one each. Under 32
 * concurrent creates this cut PostgreSQL's CPU per create and the service's
 * own (one query's protocol work for several); bench/RESULTS.md has the figures.
 *
 * Nothing waits to form a batch: a write goes out at once when no statement
 * of its kind is running on that database handle (one stuck for STUCK_MS no
 * longer counts), so a quiet service answers as before. Only writes that
 * arrive while one runs queue, and the next statement takes all of them (up
 * to MAX_ROWS). One statement at a time beat two and three in the bench
 * (fewer, larger statements; no two of them queueing on the same counter or
 * post rows). Each caller is answered when the statement that carried its row
 * has committed, so an acknowledged write is as durable as before
 * (synchronous_commit on).
 *
 * A statement is atomic, so one bad row (a foreign key gone since it was
 * checked, a constraint) would fail its neighbours: when PostgreSQL refuses a
 * batch of several (`REFUSED`: bad data, a constraint, a deadlock or
 * serialization failure, a statement timeout), each of its writes runs again
 * alone, and only the ones that fail alone see an error, their own; deadlocks
 * and serialization failures then reach the callers' own retries as usual.
 * Any other error (the connection lost, the server shutting down) is every
 * caller's: the statement may have committed before its answer was lost, and
 * running its writes again could make them twice.
 *
 * Keyed by database handle, like perDatabase: the pool batches across
 * requests; a transaction's client runs one write at a time, so its writes go
 * out alone, inside that transaction.
 */
import pg from 'pg';
import type { Queryable } from './pool.js';

export interface BatchedWrite<I, O> {
  /**
   * Writes every input in one statement on `db`; answers each input's row, in
   * the inputs' order, or undefined for an input that wrote nothing (its
   * target is missing, a condition did not hold).
   */
  run(db: Queryable, inputs: readonly I[]): Promise<readonly (O | undefined)[]>;
  /** Inputs with the same key (not undefined) never share a statement (an UPDATE changes a row once per statement). */
  key?(input: I): unknown;
}

/**
 * The inputs as one array per member, in `members`' order: the parameters of
 * a statement over `unnest($1::…[], $2::…[], …)`. A missing member is NULL.
 */
export function columnsOf<I>(inputs: readonly I[], ...members: (keyof I)[]): unknown[][] {
  return members.map((member) => inputs.map((input) => input[member] ?? null));
}

/** Rows at most per statement. */
const MAX_ROWS = 64;

/**
 * A statement running this long is waiting, not working (a batch of 64 rows
 * takes a few milliseconds): the next one may start beside it, so a row lock
 * held elsewhere delays the other writes of its kind by this much, not by as
 * long as it is held.
 */
const STUCK_MS = 50;

/** SQLSTATEs that say the statement was refused, so none of it was kept: classes 22, 23 and 40, and 57014. */
const REFUSED = /^(22|23|40)...$|^57014$/;
const refused = (error: unknown) => error instanceof pg.DatabaseError && REFUSED.test(error.code ?? '');

interface Waiting<I, O> {
  input: I;
  resolve(row: O | undefined): void;
  reject(error: unknown): void;
}

interface Lane<I, O> {
  /** Statements running and not stuck: 0 or 1. */
  running: number;
  queue: Waiting<I, O>[];
}

/** The write `spec` describes, as a function of one input that shares statements with its concurrent peers. */
export function batchedWrite<I, O>(spec: BatchedWrite<I, O>): (db: Queryable, input: I) => Promise<O | undefined> {
  const lanes = new WeakMap<Queryable, Lane<I, O>>();

  /** Takes the next statement's share of the queue: up to MAX_ROWS, one per key, in arrival order. */
  function take(lane: Lane<I, O>): Waiting<I, O>[] {
    if (!spec.key) return lane.queue.splice(0, MAX_ROWS);
    const keys = new Set<unknown>();
    const taken: Waiting<I, O>[] = [];
    const left: Waiting<I, O>[] = [];
    for (const waiting of lane.queue) {
      const key = spec.key(waiting.input);
      if (taken.length < MAX_ROWS && (key === undefined || !keys.has(key))) {
        if (key !== undefined) keys.add(key);
        taken.push(waiting);
      } else left.push(waiting);
    }
    lane.queue = left;
    return taken;
  }

  async function alone(db: Queryable, waiting: Waiting<I, O>): Promise<void> {
    try {
      waiting.resolve((await spec.run(db, [waiting.input]))[0]);
    } catch (error) {
      waiting.reject(error);
    }
  }

  /** Sends the queue's next statement unless one is running. */
  function next(db: Queryable, lane: Lane<I, O>): void {
    if (lane.queue.length > 0 && lane.running === 0) void send(db, lane, take(lane));
  }

  async function send(db: Queryable, lane: Lane<I, O>, batch: Waiting<I, O>[]): Promise<void> {
    lane.running++;
    let counted = true;
    const release = () => {
      if (counted) lane.running--;
      counted = false;
    };
    // Stuck (on a row lock, most likely): it stops holding back the writes queued behind it.
    const stuck = setTimeout(() => {
      release();
      next(db, lane);
    }, STUCK_MS);
    try {
      const rows = await spec.run(db, batch.map((waiting) => waiting.input));
      batch.forEach((waiting, i) => waiting.resolve(rows[i]));
    } catch (error) {
      if (batch.length > 1 && refused(error)) await Promise.all(batch.map((waiting) => alone(db, waiting)));
      else for (const waiting of batch) waiting.reject(error);
    } finally {
      clearTimeout(stuck);
      release();
    }
    next(db, lane);
  }

  return (db, input) => {
    let lane = lanes.get(db);
    if (lane === undefined) lanes.set(db, (lane = { running: 0, queue: [] }));
    const current = lane;
    return new Promise<O | undefined>((resolve, reject) => {
      current.queue.push({ input, resolve, reject });
      next(db, current);
    });
  };
}
