/** Liveness (the process answers) and readiness (the database answers). Not rate limited. */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { errorResponses } from '../schemas/common.js';
import { serviceUnavailable } from '../errors.js';

const Status = Type.Object({ status: Type.Literal('ok') }, { additionalProperties: false, description: 'ok' });

const healthRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const exempt = { rateLimit: false } as const;

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
        summary: 'The database answers (503 while it does not)',
        response: { 200: Status, ...errorResponses(401, 422, 500, 503) },
      },
    },
    async () => {
      try {
        await app.db.query('SELECT 1');
      } catch {
        throw serviceUnavailable();
      }
      return { status: 'ok' as const };
    },
  );
};

export default healthRoutes;
