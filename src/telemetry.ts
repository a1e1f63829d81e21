/**
 * OpenTelemetry tracing, on only when OTEL_EXPORTER_OTLP_ENDPOINT (or its _TRACES_ form) is
 * set; OpenTelemetry's own variables configure it (docs/operations.md). server.ts imports
 * this first and the app's modules later, so their imports of http, pg and ioredis are hooked.
 */
import { register } from 'node:module';
import { loadEnvFile } from './config.js';

try {
  loadEnvFile();
} catch {
  // server.ts reports what is wrong with .env.
}

export let stopTracing = async (): Promise<void> => {};

if (process.env.OTEL_EXPORTER_OTLP_ENDPOINT || process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) {
  const { createAddHookMessageChannel } = await import('import-in-the-middle');
  const { registerOptions, waitForAllMessagesAcknowledged } = createAddHookMessageChannel();
  register('import-in-the-middle/hook.mjs', import.meta.url, registerOptions);
  const { NodeSDK } = await import('@opentelemetry/sdk-node');
  const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http');
  const { HttpInstrumentation } = await import('@opentelemetry/instrumentation-http');
  const { PgInstrumentation } = await import('@opentelemetry/instrumentation-pg');
  const { IORedisInstrumentation } = await import('@opentelemetry/instrumentation-ioredis');
  const sdk = new NodeSDK({
    traceExporter: new OTLPTraceExporter(),
    instrumentations: [
      new HttpInstrumentation(),
      // Work outside a request or delivery (sequencer, polls, replica checks) makes no trace.
      new PgInstrumentation({ requireParentSpan: true }),
      new IORedisInstrumentation({ requireParentSpan: true }),
    ],
  });
  sdk.start();
  await waitForAllMessagesAcknowledged();
  await recordWritersTrace();
  stopTracing = () => sdk.shutdown();
}

/**
 * Before a write made under a span, tells the session that span's traceparent: an event the write makes stores it
 * (the events_pending default), and its webhook deliveries link to it. A session setting, not a transaction's: most
 * writes are single statements. One round trip more per write, only with tracing on.
 */
async function recordWritersTrace(): Promise<void> {
  const { default: pg } = await import('pg');
  const { trace, isSpanContextValid } = await import('@opentelemetry/api');
  const query = pg.Client.prototype.query as (...args: unknown[]) => unknown;
  const WRITE = /^\s*(INSERT|UPDATE|DELETE|WITH)\b/i;
  pg.Client.prototype.query = function (this: object, ...args: unknown[]) {
    const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: unknown } | undefined)?.text;
    const span = trace.getActiveSpan()?.spanContext();
    if (typeof text === 'string' && WRITE.test(text) && span && isSpanContextValid(span)) {
      const traceparent = `00-${span.traceId}-${span.spanId}-0${span.traceFlags & 1}`;
      void (
        query.call(this, "SELECT set_config('posts_api.traceparent', $1, false)", [traceparent]) as Promise<unknown>
      ).catch(() => undefined);
    }
    return query.apply(this, args);
  } as typeof pg.Client.prototype.query;
}
