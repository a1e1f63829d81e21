/**
 * OpenTelemetry tracing, on only when OTEL_EXPORTER_OTLP_ENDPOINT (or its _TRACES_ form) is
 * set; OpenTelemetry's own variables configure it (docs/operations.md). server.ts imports
 * this first and the app's modules later, so their imports of http, pg and ioredis are hooked.
 * The writes themselves hand their trace context to the events they make (db/trace-context.ts).
 */
import { register } from 'node:module';
import { loadEnvFile, withoutPassword } from './config.js';
import { querySpanName } from './db/trace-context.js';

try {
  loadEnvFile();
} catch {
  // server.ts reports what is wrong with .env.
}

export let stopTracing = async (): Promise<void> => {};
/** For the start-up log line: `off`, or where spans go. `warn` says a failed export; server.ts gives it its logger. */
export const tracing = { exportsTo: 'off', warn: (message: string): void => console.error(message) };

const { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: tracesEndpoint } = process.env;
if ((endpoint || tracesEndpoint) && process.env.OTEL_SDK_DISABLED?.trim().toLowerCase() !== 'true') {
  const { createAddHookMessageChannel } = await import('import-in-the-middle');
  const { registerOptions, waitForAllMessagesAcknowledged } = createAddHookMessageChannel();
  register('import-in-the-middle/hook.mjs', import.meta.url, registerOptions);
  const { NodeSDK, core } = await import('@opentelemetry/sdk-node');
  const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http');
  const { HttpInstrumentation } = await import('@opentelemetry/instrumentation-http');
  const { PgInstrumentation } = await import('@opentelemetry/instrumentation-pg');
  const { IORedisInstrumentation } = await import('@opentelemetry/instrumentation-ioredis');
  const sdk = new NodeSDK({
    traceExporter: new OTLPTraceExporter(),
    // No OTLP metrics unless OTEL_METRICS_EXPORTER asks: the SDK's default would send them to a collector that
    // may take only traces, and METRICS_PORT serves them anyway.
    metricReaders: process.env.OTEL_METRICS_EXPORTER ? undefined : [],
    instrumentations: [
      new HttpInstrumentation(),
      // Work outside a request or delivery (sequencer, polls, replica checks) makes no trace.
      new PgInstrumentation({
        requireParentSpan: true,
        // Named by what it does (`SELECT posts`), not by its prepared statement's digest.
        requestHook: (span, { query }) => span.updateName(querySpanName(query.text)),
      }),
      new IORedisInstrumentation({ requireParentSpan: true }),
    ],
  });
  // OpenTelemetry tells a failed export (a collector's 404, a refused connection) only to its diag logger, silent
  // unless OTEL_LOG_LEVEL is set. Said once, not per batch: the handler then replaces itself with one saying nothing.
  core.setGlobalErrorHandler((error) => {
    tracing.warn(`tracing: an export failed (${String(error)}); later failures are not logged`);
    core.setGlobalErrorHandler(() => {});
  });
  sdk.start();
  await waitForAllMessagesAcknowledged();
  tracing.exportsTo = withoutPassword(tracesEndpoint || `${endpoint!.replace(/\/$/, '')}/v1/traces`);
  // The shutdown's last export can be refused like any other: said through the same handler, not a failed exit.
  stopTracing = () => sdk.shutdown().catch((error: unknown) => core.globalErrorHandler(error as Error));
}
