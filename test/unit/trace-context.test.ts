import { TraceFlags, type SpanContext } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { beginTransaction, traceparentOf, tracedCte } from '../../src/db/trace-context.js';

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
