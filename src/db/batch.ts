/**
 * Group commit for single-row writes: requests that write the same kind of row
 * at the same moment share one statement, and so one round trip, one plan
 * execution and one commit (one WAL flush), instead of one each
 * (docs/architecture.md, "Group commit").
 *
 * Nothing waits to form a batch: a write goes out at once when no statement
 * of its kind is running on that database handle, and writes arriving while
 * one runs queue for the next (up to MAX_ROWS). Each caller is answered once
 * the statement that carried its row has committed.
 *
 * A shared statement never waits for a row lock held elsewhere: it skips such
 * rows, and each write it did not make runs again alone, beside the queue, in
 * a statement that may wait. So a locked row delays only the writes to it, and
 * no statement holds some rows while it waits for another.
 *
 * When PostgreSQL refuses a shared statement (`REFUSED`), none of it was kept
 * and one bad row would fail its neighbours: each of its writes runs again
 * alone, and only those that fail alone see an error, their own. Any other
 * error (the connection lost, the server shutting down) is every caller's:
 * the statement may have committed before its answer was lost.
 *
 * Keyed by database handle: the pool batches across requests; a transaction's
 * client runs one write at a time, inside that transaction.
 */
import { ROOT_CONTEXT, trace, type SpanContext } from '@opentelemetry/api';
import pg from 'pg';
import type { Queryable } from './pool.js';

export interface BatchedWrite<I, O> {
  /**
   * Writes every input in one statement on `db`; answers each input's row, in
   * the inputs' order, or undefined for an input that wrote nothing (its
   * target missing, a condition not holding). Unless `wait`, rows locked
   * elsewhere are skipped (`SKIP LOCKED`), their inputs writing nothing.
   */
  run(db: Queryable, inputs: readonly I[], wait: boolean): Promise<readonly (O | undefined)[]>;
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

const tracer = trace.getTracer('posts-api');

/** Rows at most per statement. */
const MAX_ROWS = 64;

/**
 * SQLSTATEs that say one of the statement's rows was refused, so none of it was
 * kept: classes 22, 23 and 40. Not a statement timeout (57014): each write run
 * again alone would wait a second timeout, past the bound a request is answered in.
 */
const REFUSED = /^(22|23|40)...$/;
const refused = (error: unknown) => error instanceof pg.DatabaseError && REFUSED.test(error.code ?? '');

interface Waiting<I, O> {
  input: I;
  /** The writer's span, with tracing on: the statement's parent or one of its links. */
  span: SpanContext | undefined;
  resolve(row: O | undefined): void;
  reject(error: unknown): void;
}

interface Lane<I, O> {
  running: boolean;
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

  /** Its own statement, which may wait for a row lock: it holds no other row meanwhile. */
  async function alone(db: Queryable, waiting: Waiting<I, O>): Promise<void> {
    try {
      waiting.resolve((await spec.run(db, [waiting.input], true))[0]);
    } catch (error) {
      waiting.reject(error);
    }
  }

  /** Sends the queue's next statement unless one is running. */
  function next(db: Queryable, lane: Lane<I, O>): void {
    if (lane.queue.length > 0 && !lane.running) void send(db, lane, take(lane));
  }

  async function send(db: Queryable, lane: Lane<I, O>, batch: Waiting<I, O>[]): Promise<void> {
    lane.running = true;
    try {
      // One span per statement, in the first writer's trace, linked to the others'.
      const [first, ...others] = batch.map((waiting) => waiting.span);
      const options = {
        attributes: { 'db.operation.batch.size': batch.length },
        links: others.flatMap((span) => (span ? [{ context: span }] : [])),
      };
      const parent = first ? trace.setSpanContext(ROOT_CONTEXT, first) : ROOT_CONTEXT;
      const rows = await tracer.startActiveSpan('group commit', options, parent, (span) =>
        spec
          .run(
            db,
            batch.map((waiting) => waiting.input),
            false,
          )
          .finally(() => span.end()),
      );
      for (const [i, waiting] of batch.entries()) {
        // Not made: its row may be locked elsewhere, so it runs again alone, outside the lane.
        if (rows[i] === undefined) void alone(db, waiting);
        else waiting.resolve(rows[i]);
      }
    } catch (error) {
      if (batch.length > 1 && refused(error)) for (const waiting of batch) void alone(db, waiting);
      else for (const waiting of batch) waiting.reject(error);
    }
    lane.running = false;
    next(db, lane);
  }

  return (db, input) => {
    let lane = lanes.get(db);
    if (lane === undefined) lanes.set(db, (lane = { running: false, queue: [] }));
    const current = lane;
    return new Promise<O | undefined>((resolve, reject) => {
      current.queue.push({ input, resolve, reject, span: trace.getActiveSpan()?.spanContext() });
      next(db, current);
    });
  };
}
