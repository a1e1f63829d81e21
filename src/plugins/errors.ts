/** Every failure is rendered here and only here, in the one error body (docs/api.md §2). */
import fp from 'fastify-plugin';
import FindMyWay from 'find-my-way';
import type { FastifyError, FastifyReply, FastifyRequest, FastifySchemaValidationError } from 'fastify';
import type { ErrorObject } from 'ajv';
import { ERROR_CODES, HttpError, badRequest, conflict, notFound, serviceUnavailable, validation } from '../errors.js';
import { POOL_EXHAUSTED, codeOf } from '../db/pool.js';
import { toFieldErrors } from '../validation.js';
import { quotedPath, requestPath } from '../http/links.js';

export const MAX_PARAM_LENGTH = 16_384;

/** 503s by SQLSTATE, its class or a Node.js code; retryAfter is long (30) where an operator must act. */
const FAILURES: [codes: string, cause: string, retryAfter: number, advice?: string][] = [
  ['08 ECONNREFUSED ECONNRESET ENOTFOUND ETIMEDOUT EPIPE EAI_AGAIN EHOSTUNREACH', 'the database is unreachable', 5],
  ['3D000', 'the database is missing (it does not exist on the server)', 30],
  ['28000 28P01', "the database refused the service's credentials (authentication failed)", 30],
  ['53300', 'the database has too many connections', 1],
  ['53100', 'the database is out of disk space', 30],
  ['53', 'the database is out of resources (memory or another limit)', 5],
  ['25006', 'the database is read-only (a standby, or a failover under way)', 5],
  ['57P01 57P02 57P03', 'the database is shutting down or starting up', 5],
  ['57014', 'the database did not answer in time', 5],
  ['55P03', 'what the request needs is locked by another transaction (lock not available)', 1],
  ['54', 'the request ran into a limit of the database (program limit exceeded)', 30],
  [
    '42P01 42703 42883',
    "the database's schema is not the one this version of the service needs (run npm run migrate)",
    30,
  ],
  // Outlasted withTransaction's attempts: nothing changed.
  ['40001 40P01', 'the request collided with concurrent changes and changed nothing', 1, 'send it again'],
  [POOL_EXHAUSTED, 'the service is busy (every database connection of this instance is in use)', 1],
];
type Failure = { cause: string; retryAfter: number; advice?: string };
const DATABASE_FAILURES = new Map<string, Failure>(
  FAILURES.flatMap(([codes, cause, retryAfter, advice]) =>
    codes.split(' ').map((code) => [code, { cause, retryAfter, advice }]),
  ),
);

/** node-postgres reports lost or refused connections with plain Errors. */
const LOST_CONNECTION =
  /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Client was closed and is not queryable|connect ECONNREFUSED/i;

function failureOf(error: unknown): Failure | undefined {
  const code = codeOf(error);
  return (
    DATABASE_FAILURES.get(code) ??
    (/^[0-9A-Z]{5}$/.test(code) ? DATABASE_FAILURES.get(code.slice(0, 2)) : undefined) ??
    (LOST_CONNECTION.test((error as Error | null)?.message ?? '') ? DATABASE_FAILURES.get('08') : undefined)
  );
}

export const databaseCause = (error: unknown): string | undefined => failureOf(error)?.cause;

export function databaseFailure(error: unknown): HttpError | undefined {
  const failure = failureOf(error);
  if (!failure) return undefined;
  const advice = failure.advice ?? (failure.retryAfter >= 30 ? 'try again later' : 'try again shortly');
  return serviceUnavailable(`${failure.cause}; ${advice}`, failure.retryAfter);
}

/**
 * A value PostgreSQL could not take (class 22): the request's fault, never in the database's words, which quote SQL
 * values. The schemas refuse every value a route sends that the database cannot take (dates, integers), so no field
 * is blamed here: reaching this means a schema is wider than its column.
 */
const DATA_EXCEPTION = 'a value in the request is out of the range the service accepts';

type AnyError = FastifyError & {
  validationContext?: string;
  constraint?: string;
  fieldErrors?: Record<string, string[]>;
  headers?: Record<string, string>;
};

function isCatalogued(error: AnyError): error is AnyError & HttpError {
  const status = error.statusCode as keyof typeof ERROR_CODES | undefined;
  return status !== undefined && ERROR_CODES[status] === error.code;
}

/**
 * A broken foreign key (23503): a row the write refers to was deleted while the request ran, between its check and
 * its write (a post deleted by SQL, or the user of a token an instance still trusts).
 */
const MISSING_REFERENCE = 'a resource this request refers to does not exist';

const INTERNAL = 'an internal error occurred; quote the requestId when reporting it';
const FASTIFY_MESSAGES: Record<string, string> = {
  FST_ERR_CTP_INVALID_JSON_BODY: 'body is not valid JSON',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'body must not be empty when Content-Type is application/json',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'Content-Type must be application/json',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'Content-Length does not match the body',
  FST_ERR_BAD_URL: 'the URL is malformed',
};

const headerCase = (name: string) => name.replace(/(?:^|-)[a-z]/g, (start) => start.toUpperCase());

function fromValidation(errors: readonly FastifySchemaValidationError[], context: string | undefined): HttpError {
  if (context === 'body' && errors.some((e) => e.instancePath === '' && e.keyword === 'type'))
    return badRequest('body must be a JSON object');
  const fieldErrors = toFieldErrors(errors as ErrorObject[]);
  if (context !== 'headers') return validation(fieldErrors);
  return validation(Object.fromEntries(Object.entries(fieldErrors).map(([name, m]) => [headerCase(name), m])));
}

/** Fastify stops at params, but the contract ranks a bad body, query or header above the 404. */
function laterPartFailure(request: FastifyRequest): HttpError | undefined {
  const parts = { body: request.body, querystring: request.query, headers: request.headers };
  for (const [part, data] of Object.entries(parts)) {
    const validate = request.getValidationFunction(part as keyof typeof parts);
    if (typeof validate === 'function' && !validate(data)) return fromValidation(validate.errors ?? [], part);
  }
  return undefined;
}

export function toHttpError(error: AnyError, request: FastifyRequest): HttpError | null {
  if (error.validation) {
    const context = error.validationContext;
    if (context === 'params')
      return laterPartFailure(request) ?? notFound(`${quotedPath(requestPath(request))} does not exist`);
    return fromValidation(error.validation, context);
  }
  if (isCatalogued(error)) return new HttpError(error.statusCode, error.message, error.fieldErrors, error.headers);
  if (error.code === '23505') {
    const declared = error.constraint ? request.server.resources.uniqueViolation(error.constraint) : undefined;
    return declared ?? conflict('the request conflicts with an existing resource');
  }
  if (error.code === '23503') return notFound(MISSING_REFERENCE);
  if (error.code?.startsWith('22') && error.code.length === 5) return badRequest(DATA_EXCEPTION);
  const failure = databaseFailure(error);
  if (failure) return failure;
  const status = error.statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    const message = FASTIFY_MESSAGES[error.code] ?? (status === 413 ? 'body is larger than the limit' : error.message);
    return status in ERROR_CODES ? new HttpError(status as keyof typeof ERROR_CODES, message) : badRequest(message);
  }
  return null;
}

export function sendError(reply: FastifyReply, request: FastifyRequest, e: HttpError): FastifyReply {
  // Set here too, for errors raised before the onRequest hooks (a malformed URL).
  reply.header('x-request-id', request.id);
  if (e.headers) reply.headers(e.headers);
  const { code: error, message, fieldErrors } = e;
  const body = { error, message, ...(fieldErrors && { fieldErrors }), requestId: request.id };
  return reply.code(e.statusCode).type('application/json; charset=utf-8').send(body);
}

export default fp(
  async (app) => {
    app.addHook('onRequest', (request, reply, done) => {
      reply.header('x-request-id', request.id);
      done();
    });

    app.setErrorHandler(async (error: AnyError, request, reply) => {
      const mapped = toHttpError(error, request);
      if (!mapped) {
        request.log.error({ err: error }, 'unhandled error');
        return sendError(reply, request, new HttpError(500, INTERNAL));
      }
      if (mapped.statusCode < 500) request.log.info({ status: mapped.statusCode, code: mapped.code }, mapped.message);
      else {
        // A database failure repeats on every request while it lasts: its cause in a line, not a stack each time.
        const cause = isCatalogued(error) ? undefined : [codeOf(error), error.message].filter(Boolean).join(' ');
        request.log.warn({ status: mapped.statusCode, ...(cause && { cause }) }, mapped.message);
      }
      return sendError(reply, request, mapped);
    });

    // Mirrors every route so a known path's 405 matches parameters as Fastify would (CORS's '*' is no path).
    const paths = FindMyWay({ ignoreTrailingSlash: false, maxParamLength: MAX_PARAM_LENGTH });
    app.addHook('onRoute', (route) => {
      if (route.url === '*') return;
      const known = paths.findRoute('GET', route.url)?.store as { methods: Set<string> } | undefined;
      const methods = known?.methods ?? new Set<string>();
      if (!known) paths.on('GET', route.url, () => undefined, { methods });
      for (const m of [route.method].flat()) methods.add(m);
    });

    const unrouted = (request: FastifyRequest, reply: FastifyReply) => {
      const path = requestPath(request);
      const match = paths.find('GET', path) as { store?: { methods: Set<string> } } | null;
      if (!match?.store) return sendError(reply, request, notFound(`no route ${request.method} ${quotedPath(path)}`));
      const allow = [...match.store.methods].sort().join(', ');
      const message = `${request.method} is not supported on ${quotedPath(path)}; use ${allow}`;
      return sendError(reply.header('allow', allow), request, new HttpError(405, message));
    };

    // Answered before its body is parsed: a body for a route that does not exist is a 405/404, never a 400.
    app.addHook('preParsing', (request, reply, payload, done) => {
      if (request.is404)
        unrouted(request, reply); // answered: the chain stops here
      else done(null, payload);
    });
    app.setNotFoundHandler(unrouted);
  },
  { name: 'errors' },
);
