/**
 * OpenTelemetry tracing, on only when OTEL_EXPORTER_OTLP_ENDPOINT (or its _TRACES_ form) is
 * set; OpenTelemetry's own variables configure it (docs/operations.md). server.ts imports
 * this first and the app's modules later, so their imports of http, pg and ioredis are hooked.
 * The writes themselves hand their trace context to the events they make (db/trace-context.ts).
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
  stopTracing = () => sdk.shutdown();
}
