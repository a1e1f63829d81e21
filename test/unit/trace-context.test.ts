import { TraceFlags, type SpanContext } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { beginTransaction, querySpanName, traceparentOf, tracedCte } from '../../src/db/trace-context.js';

const span = (traceFlags: number, traceId = '4bf92f3577b34da6a3ce929d0e0e4736'): SpanContext => ({
  traceId,
  spanId: '00f067aa0ba902b7',
  traceFlags,
});

describe('traceparentOf', () => {
  it('is empty without tracing: no span is ever active', () => {
    expect(traceparentOf()).toBe('');
  });

  it('writes a valid span as W3C Trace Context version 00, sampled or not', () => {
    expect(traceparentOf(span(TraceFlags.SAMPLED))).toBe('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
    expect(traceparentOf(span(TraceFlags.NONE))).toBe('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00');
  });

  it('is empty for an invalid span or one that is not lower-case hex', () => {
    expect(traceparentOf(span(TraceFlags.SAMPLED, '0'.repeat(32)))).toBe('');
    expect(traceparentOf(span(TraceFlags.SAMPLED, '4BF92F3577B34DA6A3CE929D0E0E4736'))).toBe('');
  });
});

describe('beginTransaction', () => {
  it('is BEGIN alone without a traceparent, as with tracing off', () => {
    expect(beginTransaction()).toBe('BEGIN');
    expect(beginTransaction('')).toBe('BEGIN');
  });

  it("sets a writer's traceparent for the transaction only, in the same query", () => {
    const traceparent = traceparentOf(span(TraceFlags.SAMPLED));
    expect(beginTransaction(traceparent)).toBe(
      `BEGIN; SELECT set_config('posts_api.traceparent', '${traceparent}', true)`,
    );
  });
});

describe('tracedCte', () => {
  it('sets the parameter it names, for the transaction only', () => {
    expect(tracedCte(4)).toBe("traced AS (SELECT set_config('posts_api.traceparent', $4::text, true))");
  });
});

describe('querySpanName', () => {
  // Shapes of the service's own statements.
  it.each([
    [
      'SELECT id, (SELECT n FROM comment_counts WHERE post_id = posts.id) AS "commentCount" FROM posts WHERE id = $1',
      'SELECT posts',
    ],
    [
      'SELECT u.id, extract(epoch FROM t.expires_at) AS "expiresAtMs" FROM tokens t JOIN users u ON u.id = t.user_id',
      'SELECT tokens',
    ],
    ['SELECT EXISTS (SELECT 1 FROM users WHERE lower(email) = lower($1)) AS taken', 'SELECT users'],
    ['SELECT * FROM unnest($1::bigint[]) AS u(id) JOIN posts p USING (id)', 'SELECT posts'],
    ['SELECT id FROM posts WHERE id = $1 FOR UPDATE', 'SELECT posts'],
    [
      "WITH traced AS (SELECT set_config('posts_api.traceparent', $4::text, true)) INSERT INTO users (name) SELECT $1 FROM traced",
      'INSERT users',
    ],
    [
      'WITH locked AS (SELECT id FROM posts FOR NO KEY UPDATE SKIP LOCKED) UPDATE posts SET title = $2 FROM locked',
      'UPDATE posts',
    ],
    [
      'WITH a AS (UPDATE webhook_deliveries d SET x = 1), b AS (UPDATE webhooks w SET y = 2), c AS (UPDATE webhook_deliveries SET z = 3) SELECT 1',
      'UPDATE webhook_deliveries UPDATE webhooks',
    ],
    [
      'INSERT INTO idempotency_keys (key) VALUES ($1) ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key',
      'INSERT idempotency_keys',
    ],
    ['DELETE FROM posts WHERE id = $1', 'DELETE posts'],
    [
      "BEGIN; SELECT set_config('posts_api.traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', true)",
      'BEGIN',
    ],
    ['SELECT number_events() AS numbered', 'SELECT'],
    ['COMMIT', 'COMMIT'],
  ])('%s: %s', (text, name) => {
    expect(querySpanName(text)).toBe(name);
  });
});
