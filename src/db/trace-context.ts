/**
 * A write's trace context, for the events it makes: events_pending.traceparent defaults to the session's
 * `posts_api.traceparent` setting (migrations/1796000000000_event-traceparent.sql), and a webhook delivery's span links
 * to the span stored there. Each write sets it itself, local to its own transaction, in a round trip it makes anyway:
 * a transaction with its BEGIN (withTransaction), a single statement that writes outside one in a CTE of its own.
 * Being local, it never outlives the write on a pooled connection, and behind a pooler it reaches the server
 * connection that runs the write. With tracing off no span is ever active, so the setting stays empty and the
 * default NULL.
 */
import { isSpanContextValid, trace, type SpanContext } from '@opentelemetry/api';

/** Version 00 as W3C Trace Context writes it, lower-case hex only. */
const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/;

/** The W3C traceparent of a span, by default the active one; '' without a valid span (tracing off, or no request). */
export function traceparentOf(context: SpanContext | undefined = trace.getActiveSpan()?.spanContext()): string {
  if (context === undefined || !isSpanContextValid(context)) return '';
  const traceparent = `00-${context.traceId}-${context.spanId}-0${context.traceFlags & 1}`;
  return TRACEPARENT.test(traceparent) ? traceparent : '';
}

/**
 * BEGIN, followed for a traced writer by the setting, in one simple query: one round trip, as BEGIN alone. The
 * traceparent is written into the text (a simple query takes no parameters); TRACEPARENT let only hex digits and
 * dashes through.
 */
export function beginTransaction(traceparent: string = traceparentOf()): string {
  if (traceparent === '') return 'BEGIN';
  return `BEGIN; SELECT set_config('posts_api.traceparent', '${traceparent}', true)`;
}

/**
 * The CTE `traced` for a statement that writes outside withTransaction: it heads the statement's WITH, and the
 * statement joins it in its FROM, so that it runs before any row is written (an unused CTE would never run) and
 * so before the statement's triggers. `$parameter` carries traceparentOf(); '' sets nothing that shows.
 */
export function tracedCte(parameter: number): string {
  return `traced AS (SELECT set_config('posts_api.traceparent', $${parameter}::text, true))`;
}

// A write to a table: its verb and the table. Not a read's row lock (FOR [NO KEY] UPDATE), nor ON CONFLICT DO UPDATE.
const WRITE = /\b(INSERT\s+INTO|(?<!(?:FOR\s+(?:NO\s+KEY\s+)?|DO\s+))UPDATE|DELETE\s+FROM)\s+(\w+)/gi;
// A table read, not a function's rows (unnest(…), `[]` once parenthesised text is left out) or extract(epoch FROM t.at).
const READ = /\b(?:FROM|JOIN)\s+(\w+)\b(?!\s*[.([])/i;

/**
 * A query span's name, as OpenTelemetry's database conventions summarise a query: each table it writes, with the
 * verb (`INSERT posts`, `UPDATE webhook_deliveries UPDATE webhooks`); one that writes none, by the table it reads
 * (`SELECT posts`), or by its first word (`BEGIN`). The name a prepared statement has is a digest of its text.
 */
export function querySpanName(text: string): string {
  const writes = [...text.matchAll(WRITE)].map(([, verb, table]) => `${verb!.split(/\s/)[0]!.toUpperCase()} ${table}`);
  if (writes.length > 0) return [...new Set(writes)].join(' ');
  // The statement's own table first, not a subquery's in its select list: parenthesised text left out.
  let outer = text;
  while (/\([^()]*\)/.test(outer)) outer = outer.replace(/\([^()]*\)/g, '[]');
  const read = READ.exec(outer) ?? READ.exec(text);
  if (read) return `SELECT ${read[1]}`;
  return /^\s*(\w*)/.exec(text)![1]!.toUpperCase();
}
