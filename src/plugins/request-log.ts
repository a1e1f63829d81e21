/**
 * One log line per request, with route, status and duration together (Fastify's own pair is off, app.ts).
 * Headers and bodies are never logged, so no token or password reaches the logs through here.
 */
import { trace } from '@opentelemetry/api';
import fp from 'fastify-plugin';

export default fp(
  async (app) => {
    // With tracing on (src/telemetry.ts), the request's span is named by its route template.
    app.addHook('onRequest', (request, _reply, done) => {
      const route = request.routeOptions.url;
      if (route) trace.getActiveSpan()?.setAttribute('http.route', route).updateName(`${request.method} ${route}`);
      done();
    });
    app.addHook('onResponse', (request, reply, done) => {
      const status = reply.statusCode;
      const line = {
        method: request.method,
        route: request.routeOptions.url ?? null,
        url: request.url.length > 512 ? `${request.url.slice(0, 512)}…` : request.url,
        status,
        durationMs: Math.round(reply.elapsedTime * 100) / 100,
        userId: request.user?.id,
      };
      if (status >= 500) request.log.error(line, 'request failed');
      else request.log.info(line, 'request done');
      done();
    });
  },
  { name: 'request-log', dependencies: ['auth'] },
);
