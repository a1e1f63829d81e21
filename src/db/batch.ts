/**
 * Group commit (docs/architecture.md, "Group commit"): single-row writes arriving while one of
 * their kind runs on a database handle share the next statement. A shared statement skips rows
 * locked elsewhere; those writes, and all of a refused statement's, run again alone.
 */
import { ROOT_CONTEXT, trace, type SpanContext } from '@opentelemetry/api';
import pg from 'pg';
import type { Queryable } from './pool.js';
import { traceparentOf } from './trace-context.js';
import { perDatabase } from './per-database.js';

export interface BatchedWrite<I, O> {
  /**
   * Each input's row in the inputs' order, undefined where nothing was written; unless `wait`, SKIP LOCKED. The
   * statement sets `traceparent` with tracedCte (db/trace-context.ts): its events carry the writer's trace.
   */
  run(db: Queryable, inputs: readonly I[], wait: boolean, traceparent: string): Promise<readonly (O | undefined)[]>;
  /** Inputs with the same key (not undefined) never share a statement (an UPDATE changes a row once per statement). */
  key?(input: I): unknown;
}

/** One array per member: the parameters of `unnest($1::…[], $2::…[], …)`. */
export function columnsOf<I>(inputs: readonly I[], ...members: (keyof I)[]): unknown[][] {
  return members.map((member) => inputs.map((input) => input[member] ?? null));
}

const tracer = trace.getTracer('posts-api');

const MAX_ROWS = 64;

// A row was refused, so nothing was kept. Not a timeout (57014): alone, each would wait another.
const REFUSED = /^(22|23|40)...$/;
const refused = (error: unknown) => error instanceof pg.DatabaseError && REFUSED.test(error.code ?? '');

interface Waiting<I, O> {
  input: I;
  span: SpanContext | undefined;
  resolve(row: O | undefined): void;
  reject(error: unknown): void;
}

interface Lane<I, O> {
  running: boolean;
  queue: Waiting<I, O>[];
}

export function batchedWrite<I, O>(spec: BatchedWrite<I, O>): (db: Queryable, input: I) => Promise<O | undefined> {
  const laneOf = perDatabase((): Lane<I, O> => ({ running: false, queue: [] }));

  /** Up to MAX_ROWS, one per key, in arrival order. */
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
      waiting.resolve((await spec.run(db, [waiting.input], true, traceparentOf(waiting.span)))[0]);
    } catch (error) {
      waiting.reject(error);
    }
  }

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
      const inputs = batch.map((waiting) => waiting.input);
      // The events of the statement's rows name this span: it is in the first writer's trace, linked to the others.
      const rows = await tracer.startActiveSpan('group commit', options, parent, (span) =>
        spec.run(db, inputs, false, traceparentOf(span.spanContext())).finally(() => span.end()),
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
    const lane = laneOf(db);
    return new Promise<O | undefined>((resolve, reject) => {
      lane.queue.push({ input, resolve, reject, span: trace.getActiveSpan()?.spanContext() });
      next(db, lane);
    });
  };
}
