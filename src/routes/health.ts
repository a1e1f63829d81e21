/**
 * Liveness (the process answers) and readiness (the database answers). Not rate
 * limited, never stored by caches.
 *
 * Readiness also reports the response cache: `on`, `off`, or `bypassed` when its
 * listener is lost, stalled or reconnecting. A bypassed cache leaves the instance
 * ready (200): it answers correctly from the database, only slower, and a 503
 * would take every instance out of rotation at once when PostgreSQL's
 * notifications fail for all of them. Monitoring alerts on `bypassed`.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { errorResponses } from '../schemas/common.js';
import { serviceUnavailable } from '../errors.js';

const Status = Type.Object({ status: Type.Literal('ok') }, { additionalProperties: false, description: 'ok' });
const Ready = Type.Object(
  {
    status: Type.Literal('ok'),
    cache: Type.Union([Type.Literal('on'), Type.Literal('bypassed'), Type.Literal('off')], {
      description: 'the response cache: bypassed while its change listener is lost, stalled or reconnecting',
    }),
  },
  { additionalProperties: false, description: 'ok' },
);

const healthRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const exempt = { rateLimit: false, cacheControl: 'no-store' } as const;

  app.get(
    '/health/live',
    // A bad token is a 401 even here (docs/api.md §6); no database, so never a 503.
    {
      config: exempt,
      schema: { tags: ['health'], operationId: 'getLiveness', summary: 'The process is up', response: { 200: Status, ...errorResponses(401, 422, 500) } },
    },
    async () => ({ status: 'ok' as const }),
  );

  app.get(
    '/health/ready',
    {
      config: exempt,
      schema: {
        tags: ['health'],
        operationId: 'getReadiness',
        summary: 'The database answers (503 while it does not); the state of the response cache',
        response: { 200: Ready, ...errorResponses(401, 422, 500, 503) },
      },
    },
    async () => {
      try {
        await app.db.query('SELECT 1');
      } catch {
        throw serviceUnavailable();
      }
      return { status: 'ok' as const, cache: app.responseCache.state() };
    },
  );
};

export default healthRoutes;
