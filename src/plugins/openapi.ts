/**
 * The OpenAPI document from the route schemas, at /openapi.json and /docs (docs/api.md), plus what every
 * operation shares, stated once. The /docs page's assets are not rate limited (dozens per load).
 */
import fp from 'fastify-plugin';
import type { ResourceRegistry } from '../resource.js';
import type { AppConfig } from '../config.js';
import swagger, { type FastifyDynamicSwaggerOptions } from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ErrorSchema, NoQuery } from '../schemas/common.js';
import { VERSION } from '../root.js';
import { JSON_MEDIA_TYPE, PATCH_MEDIA_TYPES } from '../media-types.js';

// Bounds as config.ts allows them: RATE_LIMIT_MAX ≤ 1 000 000, RATE_LIMIT_WINDOW ≤ 86 400 s.
const count = { type: 'integer', format: 'int32', minimum: 0, maximum: 1_000_000 };
const seconds = { type: 'integer', format: 'int32', minimum: 0, maximum: 86_400 };
const text = (pattern: string, maxLength: number) => ({ type: 'string', pattern, maxLength });

const HEADERS = {
  'X-Request-Id': {
    schema: text('^[A-Za-z0-9._:-]{1,128}$', 128),
    description: "the client's X-Request-Id if it was sane, else a generated one",
  },
  'Access-Control-Allow-Origin': {
    schema: text('^(\\*|https?://[^\\t\\n\\r ]+)$', 2048),
    description: "only when CORS_ORIGINS allows the request's Origin (CORS is off by default)",
  },
  'RateLimit-Limit': { schema: count, description: 'requests allowed in the window' },
  'RateLimit-Remaining': { schema: count, description: 'requests left in the window' },
  'RateLimit-Reset': { schema: seconds, description: 'seconds until the window resets' },
  'Retry-After': { schema: seconds, description: 'seconds to wait before trying again' },
  'WWW-Authenticate': {
    schema: text('^Bearer( error="invalid_token")?$', 64),
    description:
      'Bearer; with error="invalid_token" when the request sent a token that is malformed, unknown, expired or revoked',
  },
  Allow: { schema: text('^[A-Z]+(, [A-Z]+)*$', 128), description: 'the methods this path supports' },
} as const;
type HeaderName = keyof typeof HEADERS;
const refs = (...names: HeaderName[]) =>
  Object.fromEntries(names.map((name) => [name, { $ref: `#/components/headers/${name}` }]));

const EVERY_RESPONSE: HeaderName[] = ['X-Request-Id', 'Access-Control-Allow-Origin'];
const RATE_LIMITED = (Object.keys(HEADERS) as HeaderName[]).filter((name) => name.startsWith('RateLimit'));
const BY_STATUS: Record<string, HeaderName[]> = {
  401: ['WWW-Authenticate'],
  429: ['Retry-After'],
  503: ['Retry-After'],
};

const NOT_RATE_LIMITED = 'x-rate-limited';
const PUBLIC = [{}];

type Parameter = { style?: string; explode?: boolean; schema?: { explode?: boolean } };
type Operation = Record<string, unknown> & {
  security?: unknown[];
  parameters?: Parameter[];
  responses?: Record<string, { headers?: object }>;
};

/** The groups of operations that are not a declared resource's (each resource declares its own). */
const OTHER_GROUPS = [
  { name: 'tokens', description: 'log-in (bearer tokens), own tokens, revocation' },
  { name: 'events', description: 'the change feed and its live stream' },
  {
    name: 'webhooks',
    description: 'webhooks: events POSTed to your URL, signed (Standard Webhooks), and their deliveries',
  },
  { name: 'health', description: 'liveness and readiness, not rate limited' },
];

type DocumentObject = Parameters<NonNullable<FastifyDynamicSwaggerOptions['transformObject']>>[0];

/** `explode` moves from a parameter's schema, where routes declare it, to the parameter. */
function completeDocument(documentObject: DocumentObject) {
  if (!('openapiObject' in documentObject)) return documentObject.swaggerObject;
  const { openapiObject } = documentObject;
  for (const item of Object.values(openapiObject.paths ?? {})) {
    for (const op of Object.values(item as Record<string, Operation>)) {
      op.security ??= PUBLIC; // Swagger UI showed `[{}, bearerAuth]` as a closed padlock
      for (const parameter of op.parameters ?? []) {
        if (parameter.schema?.explode === undefined) continue;
        Object.assign(parameter, { style: 'form', explode: parameter.schema.explode });
        delete parameter.schema.explode;
      }
      const limited = op[NOT_RATE_LIMITED] !== false;
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        const names = [...EVERY_RESPONSE, ...(limited ? RATE_LIMITED : []), ...(BY_STATUS[status] ?? [])];
        response.headers = { ...refs(...names), ...response.headers };
      }
    }
  }
  openapiObject.components = {
    ...openapiObject.components,
    headers: HEADERS,
    responses: {
      MethodNotAllowed: {
        description: 'method_not_allowed: the path exists, the method does not; Allow lists those it supports',
        headers: refs('Allow', ...EVERY_RESPONSE, ...RATE_LIMITED),
        content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
      },
    },
  } as typeof openapiObject.components;
  return openapiObject;
}

function swaggerOptions(prefix: string, resources: ResourceRegistry): FastifyDynamicSwaggerOptions {
  // Public, not an internal-only deployment (OWASP API9 inventory); a variable, as the typings lack x- fields.
  const server = { url: prefix || '/', 'x-internal': false };
  return {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Posts API',
        version: VERSION,
        description:
          'Posts and their comments. Errors always have the body of the Error schema. ' +
          'A known path answers a method it lacks with 405 and Allow (components.responses.MethodNotAllowed). ' +
          'Reads, sign-up and log-in need no token; one sent there is still checked (a bad one is a 401). ' +
          'The examples fit a database filled by `npm run seed`: log in with the example of POST /tokens, ' +
          "authorize with the token, and every other example works (ids 1000000000 are that demo account's; " +
          'PATCH the demo webhook status active before retrying its delivery).',
      },
      servers: [server],
      tags: [...resources.resources.map((resource) => resource.group), ...OTHER_GROUPS],
      components: {
        securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer', description: 'a token from POST /tokens' } },
      },
    },
    // Shared schemas are named after their $id (Error, User, Post...), not def-0, def-1...
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`),
    },
    // Paths are documented relative to the server URL, which carries API_PREFIX.
    transform: ({ schema, url, route }) => {
      const documented: Record<string, unknown> = { ...schema };
      if (route.config?.rateLimit === false) documented[NOT_RATE_LIMITED] = false;
      if (route.method === 'PATCH' && schema?.body) documented.consumes = PATCH_MEDIA_TYPES;
      return { schema: documented, url: prefix && url.startsWith(prefix) ? url.slice(prefix.length) || '/' : url };
    },
    transformObject: completeDocument,
  };
}

/** The document, written once; http-caching gives it its ETag and answers If-None-Match with a 304. */
function documentServer(document: () => unknown) {
  let json: string | undefined;
  return async (_request: FastifyRequest, reply: FastifyReply) => {
    json ??= JSON.stringify(document());
    return reply.type(JSON_MEDIA_TYPE).send(json);
  };
}

export default fp<{ config: AppConfig }>(
  async (app, { config: { apiPrefix: prefix } }) => {
    app.addSchema(ErrorSchema);
    await app.register(swagger, swaggerOptions(prefix, app.resources));
    const serveDocument = documentServer(() => app.swagger());

    app.get(`${prefix}/openapi.json`, { schema: { hide: true, querystring: NoQuery } }, serveDocument);
    await app.register(async (docs) => {
      docs.addHook('onRoute', (route) => {
        // The page's own copy of the document: the same answer as /openapi.json.
        if (route.url === `${prefix}/docs/json`) route.handler = serveDocument;
        else if (route.url !== `${prefix}/docs/yaml`) route.config = { ...route.config, rateLimit: false };
      });
      await docs.register(swaggerUi, {
        routePrefix: `${prefix}/docs`,
        uiConfig: { deepLinking: true },
        // staticCSP replaces the API's deny-all CSP with one that lets the page load its own assets.
        staticCSP: true,
        // Not upgrade-insecure-requests: over plain HTTP on any host but localhost (the compose
        // deployment behind nginx), the browser would fetch every asset over https and show nothing.
        // Inline styles: Swagger UI's components set style attributes, which hashes cannot allow.
        transformStaticCSP: (header) =>
          header
            .replace(/\s*upgrade-insecure-requests;?/, '')
            .replace(/style-src [^;]*/, "style-src 'self' 'unsafe-inline'"),
      });
    });
  },
  // After errors, whose onRoute hook must see /openapi.json and /docs to answer their other methods with 405.
  { name: 'openapi', dependencies: ['errors'] },
);
