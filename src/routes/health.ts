/** Liveness and readiness (docs/operations.md). An event backlog leaves an instance ready: a 503 would take all out. */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { errorResponses } from '../schemas/common.js';
import { serviceUnavailable, type HttpError } from '../errors.js';
import { databaseFailure } from '../plugins/errors.js';
import { schemaState, shippedMigrations } from '../db/migrate.js';
import { PROBE } from '../http/route-options.js';
import { VERSION } from '../root.js';

const schemaBehind = (missing: readonly string[]) =>
  serviceUnavailable(
    `the database schema is behind this version of the service (${missing.length} migration${missing.length === 1 ? '' : 's'} not applied): run \`npm run migrate\``,
    30,
  );

const Status = Type.Object(
  {
    status: Type.Literal('ok'),
    version: Type.String({
      maxLength: 64,
      pattern: '^[0-9]+\\.[0-9]+\\.[0-9]+',
      description: "the service's version (semantic versioning)",
    }),
  },
  { additionalProperties: false, description: 'ok' },
);

const healthRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const shipped = shippedMigrations();

  app.get(
    '/health/live',
    // A bad token is a 401 even here (docs/api.md §6); no database, so never a 503.
    {
      config: PROBE,
      schema: {
        tags: ['health'],
        operationId: 'getLiveness',
        summary: 'The process is up',
        response: { 200: Status, ...errorResponses(401, 422, 500) },
      },
    },
    async () => ({ status: 'ok' as const, version: VERSION }),
  );

  app.get(
    '/health/ready',
    {
      config: PROBE,
      schema: {
        tags: ['health'],
        operationId: 'getReadiness',
        summary: 'The database answers (503 while it does not)',
        response: { 200: Status, ...errorResponses(401, 422, 500, 503) },
      },
    },
    async () => {
      let failure: HttpError | undefined;
      try {
        const { missing } = await schemaState(app.db, shipped);
        if (missing.length) failure = schemaBehind(missing);
      } catch (error) {
        failure = databaseFailure(error) ?? serviceUnavailable();
      }
      if (failure) throw failure;
      return { status: 'ok' as const, version: VERSION };
    },
  );
};

export default healthRoutes;
