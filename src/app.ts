/** The whole HTTP application. It never listens and never exits; server.ts and the tests do that. */
import { randomUUID } from 'node:crypto';
import { trace } from '@opentelemetry/api';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type RawReplyDefaultExpression,
  type RawRequestDefaultExpression,
  type RawServerDefault,
} from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { DestinationStream } from 'pino';
import type { AppConfig } from './config.js';
import { createValidatorCompiler } from './validation.js';
import errors, { MAX_PARAM_LENGTH, sendError, toHttpError } from './plugins/errors.js';
import gracefulClose from './plugins/graceful-close.js';
import { badRequest } from './errors.js';
import { NoQuery } from './schemas/common.js';
import httpSecurity from './plugins/http-security.js';
import requestLog from './plugins/request-log.js';
import bodyParser from './plugins/body-parser.js';
import db from './plugins/db.js';
import rateLimit from './plugins/rate-limit.js';
import auth from './plugins/auth.js';
import httpCaching from './plugins/http-caching.js';
import readRouting from './plugins/read-routing.js';
import openapi from './plugins/openapi.js';
import retention from './plugins/retention.js';
import events from './events/plugin.js';
import eventsRoutes from './events/routes.js';
import healthRoutes from './routes/health.js';
import { users } from './routes/users.js';
import tokensRoutes from './routes/tokens.js';
import { posts } from './routes/posts.js';
import { comments } from './routes/comments.js';
import { resourceRegistry, type Resource } from './resource.js';
import webhookWorker from './events/webhooks/worker.js';
import webhookRoutes from './events/webhooks/routes.js';
import metrics from './plugins/metrics.js';

/** The service's own resources, parents before what lives under them. */
export const CORE_RESOURCES: readonly Resource<never>[] = [posts, comments, users];

export interface BuildOptions {
  logStream?: DestinationStream;
  /** Resources beyond the core ones, each declared as src/routes/comments.ts declares comments (and migrated). */
  resources?: readonly Resource<never>[];
}

/** The application as buildApp makes it: routes see their TypeBox schemas as types. */
export type App = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>;

// Short and plain, so a client's X-Request-Id can neither forge log lines nor bloat them.
const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export async function buildApp(config: AppConfig, options: BuildOptions = {}): Promise<App> {
  const registry = resourceRegistry([...CORE_RESOURCES, ...(options.resources ?? [])], config.apiPrefix);
  const validator = createValidatorCompiler();
  const app = Fastify({
    logger: {
      level: config.logLevel,
      ...(options.logStream && { stream: options.logStream }),
      // With tracing on (src/telemetry.ts), each line of a request names its trace.
      mixin: () => {
        const context = trace.getActiveSpan()?.spanContext();
        return context ? { traceId: context.traceId, spanId: context.spanId } : {};
      },
      // Credentials never reach the logs, whatever a future serializer includes.
      redact: {
        paths: ['req.headers.authorization', 'req.headers.cookie', '*.password', '*.token', 'body.password'],
        censor: '[redacted]',
      },
    },
    // Our own single line per request (plugins/request-log.ts) replaces Fastify's pair.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'requestId' }),
    bodyLimit: config.bodyLimit,
    // A hop count is valid at runtime (proxy-addr), not in the typings.
    trustProxy: config.trustProxy as boolean | string[],
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && SANE_REQUEST_ID.test(given) ? given : randomUUID();
    },
    // Slow or stalled clients cannot hold connections forever.
    connectionTimeout: 30_000,
    requestTimeout: 30_000,
    keepAliveTimeout: 72_000,
    return503OnClosing: false, // plugins/graceful-close.ts answers the contract's 503
    // Past Node's 16 KiB header limit: the router never answers an overlong id by itself.
    routerOptions: { ignoreTrailingSlash: false, maxParamLength: MAX_PARAM_LENGTH },
    // A URL that cannot be decoded (e.g. /%zz) goes through the one error handler.
    frameworkErrors: (error, request, reply) =>
      void sendError(reply, request, toHttpError(error, request) ?? badRequest('the request is malformed')),
    ajv: { customOptions: {} },
    // setValidatorCompiler would give way to Ajv's default in scopes that add shared schemas. Fastify's typings
    // expect Ajv's compile signature; it calls our compiler as a schema compiler.
    schemaController: { compilersFactory: { buildValidator: (() => validator) as never } },
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.decorate('resources', registry);
  await registerPlugins(app, config);

  // Unknown query parameters are a 422 on every route registered from here on, not only where a query is declared.
  app.addHook('onRoute', (route) => {
    route.schema = { ...route.schema, querystring: route.schema?.querystring ?? NoQuery };
  });
  await app.register(
    async (api) => {
      await api.register(healthRoutes);
      // Once, for every scope: a resource's routes, tokens' (its user) and the events' (their data) refer to them.
      for (const resource of registry.resources) api.addSchema(resource.schema);
      for (const resource of registry.resources) {
        await api.register(async (scope) => resource.routes(scope, resource));
      }
      await api.register(tokensRoutes, { tokenTtlSeconds: config.tokenTtlSeconds });
      await api.register(eventsRoutes, { maxStreams: config.maxStreams });
      await api.register(webhookRoutes, { ...config.webhooks, targets: config.webhooks });
    },
    { prefix: config.apiPrefix },
  );

  return app;
}

/**
 * The cross-cutting plugins, before any route: their onRoute hooks must see every route. Each declares the ones it
 * needs before it (fastify-plugin `dependencies`), so Fastify refuses another order at start
 * (test/integration/check-order.test.ts); the order here is one that satisfies them all.
 */
async function registerPlugins(app: FastifyInstance, config: AppConfig): Promise<void> {
  await app.register(errors);
  await app.register(gracefulClose);
  await app.register(httpSecurity, { corsOrigins: config.corsOrigins });
  await app.register(bodyParser);
  await app.register(db, { config });
  await app.register(rateLimit, { config });
  await app.register(auth, { cacheMs: config.authCacheMs });
  await app.register(httpCaching, { config });
  await app.register(readRouting);
  await app.register(requestLog);
  await app.register(openapi, { config });
  await app.register(retention, { config });
  await app.register(events, {
    listenUrl: config.databaseListenUrl ?? config.databaseUrl,
    heartbeatMs: config.eventStreamHeartbeatSeconds * 1_000,
  });
  await app.register(webhookWorker, { ...config.webhooks, resources: app.resources });
  if (config.metrics) await app.register(metrics, { config });
}
