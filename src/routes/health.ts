/** Liveness and readiness (docs/operations.md). An event backlog leaves an instance ready: a 503 would take all out. */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { MAX_ID, errorResponses } from '../schemas/common.js';
import { serviceUnavailable, type HttpError } from '../errors.js';
import { databaseFailure } from '../plugins/errors.js';
import { schemaState, shippedMigrations } from '../db/migrate.js';
import { codeOf } from '../db/pool.js';
import { eventsRepository } from '../events/repository.js';
import { PROBE } from '../http/route-options.js';

const schemaBehind = (missing: readonly string[]) =>
  serviceUnavailable(
    `the database schema is behind this version of the service (${missing.length} migration${missing.length === 1 ? '' : 's'} not applied): run \`npm run migrate\``,
    30,
  );

const ok = { status: Type.Literal('ok') };
const Status = Type.Object(ok, { additionalProperties: false, description: 'ok' });
const Backlog = Type.Object(
  {
    events: Type.Integer({
      format: 'int64',
      minimum: 0,
      maximum: MAX_ID,
      description: 'committed events not numbered yet',
    }),
    oldestSeconds: Type.Number({
      minimum: 0,
      maximum: 1e12,
      description: 'age of the oldest of them, seconds (0 when none)',
    }),
  },
  { additionalProperties: false, description: 'the event log: near zero unless events stop being numbered' },
);
const Ready = Type.Object({ ...ok, eventBacklog: Backlog }, { additionalProperties: false, description: 'ok' });

const healthRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const exempt = PROBE;
  const shipped = shippedMigrations();
  const events = eventsRepository(app.db);
  let verdict = 'ready';
  const report = (failure: HttpError | undefined, cause?: unknown) => {
    const now = failure?.message ?? 'ready';
    if (now === verdict) return;
    verdict = now;
    if (!failure) app.log.info('ready again');
    else
      app.log.warn(
        { ...(cause instanceof Error && { cause: [codeOf(cause), cause.message].filter(Boolean).join(' ') }) },
        `not ready: ${now}`,
      );
  };

  app.get(
    '/health/live',
    // A bad token is a 401 even here (docs/api.md §6); no database, so never a 503.
    {
      config: exempt,
      schema: {
        tags: ['health'],
        operationId: 'getLiveness',
        summary: 'The process is up',
        response: { 200: Status, ...errorResponses(401, 422, 500) },
      },
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
        summary: 'The database answers (503 while it does not); the event backlog',
        response: { 200: Ready, ...errorResponses(401, 422, 500, 503) },
      },
    },
    async () => {
      let failure: HttpError | undefined;
      let cause: unknown;
      let backlog = { unnumbered: 0, oldestSeconds: 0 };
      try {
        const { missing } = await schemaState(app.db, shipped);
        if (missing.length) failure = schemaBehind(missing);
        else backlog = await events.backlog();
      } catch (error) {
        cause = error;
        failure = databaseFailure(error) ?? serviceUnavailable();
      }
      report(failure, cause);
      if (failure) throw failure;
      return {
        status: 'ok' as const,
        eventBacklog: { events: backlog.unnumbered, oldestSeconds: backlog.oldestSeconds },
      };
    },
  );
};

export default healthRoutes;
