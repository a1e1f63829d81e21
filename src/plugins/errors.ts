/**
 * One error body for everything (docs/api.md §2). Every failure — thrown catalogue
 * errors, schema validation, body parser and plugin errors, PostgreSQL errors,
 * unknown routes and unsupported methods — is rendered here and only here.
 * Anything unrecognised is a 500 whose body says nothing about internals.
 */
import fp from 'fastify-plugin';
import FindMyWay from 'find-my-way';
import type { FastifyError, FastifyReply, FastifyRequest, FastifySchemaValidationError } from 'fastify';
import type { ErrorObject } from 'ajv';
import { ERROR_CODES, HttpError, badRequest, conflict, emailTaken, notFound, serviceUnavailable, validation } from '../errors.js';
import { toFieldErrors } from '../validation.js';
import { quotedPath, requestPath } from '../http/links.js';

interface ErrorBody {
  error: string;
  message: string;
  fieldErrors?: Record<string, string[]>;
  requestId: string;
}

/** The routers' limit on a path parameter's length (app.ts, and the 405 mirror below). */
export const MAX_PARAM_LENGTH = 16_384;

/** Unique indexes whose violation is the client's fault, and the error that blames the field. */
const UNIQUE_VIOLATIONS = new Map<string, () => HttpError>([['users_email_key', emailTaken]]);

/**
 * PostgreSQL failures that are not outages, each said as what it is. All are
 * 503 with Retry-After (the contract's status for "the database cannot serve
 * this now; retry"), but only an unreachable database is reported as one:
 * - 57014: the statement ran past the statement timeout (or was cancelled),
 *   e.g. waiting on a lock; the database itself is up.
 * - 53300: the server (or this role) has no connection slot free.
 * - 40001 / 40P01: a serialization failure or deadlock that outlasted the
 *   transaction helper's retries (src/db/pool.ts); the request changed nothing
 *   and can be sent again as it is.
 */
const collided = 'the request collided with concurrent changes and changed nothing; send it again';
const DATABASE_REFUSALS = new Map<string, () => HttpError>([
  ['57014', () => serviceUnavailable('the database did not answer in time; try again shortly', 5)],
  ['53300', () => serviceUnavailable('the database is busy (no free connection); try again shortly', 1)],
  ['40001', () => serviceUnavailable(collided, 1)],
  ['40P01', () => serviceUnavailable(collided, 1)],
]);

/** SQLSTATE classes and driver errors that mean "the database is not answering". */
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03']);
const UNAVAILABLE_NODE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'ETIMEDOUT', 'EPIPE', 'EAI_AGAIN', 'EHOSTUNREACH']);

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

function isDatabaseUnavailable(error: AnyError): boolean {
  const code = error.code ?? '';
  if (UNAVAILABLE_SQLSTATES.has(code) || code.startsWith('08') || UNAVAILABLE_NODE_CODES.has(code)) return true;
  // node-postgres reports lost or refused connections with plain Errors.
  return /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|connect ECONNREFUSED/i.test(
    error.message ?? '',
  );
}

/** Fastify and plugin errors with a 4xx status get a safe, fixed message. */
const FASTIFY_MESSAGES: Record<string, string> = {
  FST_ERR_CTP_INVALID_JSON_BODY: 'body is not valid JSON',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'body must not be empty when Content-Type is application/json',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'Content-Type must be application/json',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'Content-Length does not match the body',
  FST_ERR_BAD_URL: 'the URL is malformed',
};

/** Header fields arrive lower-cased; errors name them as the contract does (e.g. `Idempotency-Key`). */
const headerCased = (fieldErrors: Record<string, string[]>) =>
  Object.fromEntries(
    Object.entries(fieldErrors).map(([name, messages]) => [
      name.replace(/(^|-)([a-z])/g, (_, dash: string, c: string) => dash + c.toUpperCase()),
      messages,
    ]),
  );

function fromValidation(errors: readonly FastifySchemaValidationError[], context: string | undefined): HttpError {
  const rootType = errors.find((e) => e.instancePath === '' && e.keyword === 'type');
  if (context === 'body' && rootType) return badRequest('body must be a JSON object');
  const fieldErrors = toFieldErrors(errors as ErrorObject[]);
  return validation(context === 'headers' ? headerCased(fieldErrors) : fieldErrors);
}

/**
 * Fastify validates params first and stops there, but the contract ranks a bad
 * body, query or header (400/422) above the 404 of a path id that names nothing.
 */
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
    // A path id that is not a positive integer names no resource.
    if (context === 'params') return laterPartFailure(request) ?? notFound(`${quotedPath(requestPath(request))} does not exist`);
    return fromValidation(error.validation, context);
  }
  if (isCatalogued(error)) return new HttpError(error.statusCode, error.message, error.fieldErrors, error.headers);
  if (error.code === '23505') {
    const unique = error.constraint ? UNIQUE_VIOLATIONS.get(error.constraint) : undefined;
    return unique ? unique() : conflict('the request conflicts with an existing resource');
  }
  const refusal = DATABASE_REFUSALS.get(error.code);
  if (refusal) return refusal();
  if (isDatabaseUnavailable(error)) return serviceUnavailable();
  const status = error.statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    const known = ERROR_CODES[status as keyof typeof ERROR_CODES];
    const message = FASTIFY_MESSAGES[error.code] ?? (status === 413 ? 'body is larger than the limit' : error.message);
    if (known) return new HttpError(status as keyof typeof ERROR_CODES, message);
    return badRequest(message);
  }
  return null;
}

/** Renders the contract's error body; also used for errors raised before routing (app.ts frameworkErrors). */
export function sendError(reply: FastifyReply, request: FastifyRequest, e: HttpError) {
  // Set here too: errors raised before the onRequest hooks (a malformed URL) still carry it.
  reply.header('x-request-id', request.id);
  const body: ErrorBody = { error: e.code, message: e.message, requestId: request.id };
  if (e.fieldErrors) body.fieldErrors = e.fieldErrors;
  if (e.headers) reply.headers(e.headers);
  return reply.code(e.statusCode).type('application/json; charset=utf-8').send(body);
}

export default fp(
  async (app) => {
    // Every response carries the request id (the client's if it sent a sane one, see app.ts genReqId).
    app.addHook('onRequest', (request, reply, done) => {
      reply.header('x-request-id', request.id);
      done();
    });

    app.setErrorHandler((error: AnyError, request, reply) => {
      const mapped = toHttpError(error, request);
      if (mapped && mapped.statusCode < 500) {
        request.log.info({ status: mapped.statusCode, code: mapped.code }, mapped.message);
        return sendError(reply, request, mapped);
      }
      if (mapped) {
        request.log.warn({ err: error }, mapped.message);
        return sendError(reply, request, mapped);
      }
      request.log.error({ err: error }, 'unhandled error');
      return sendError(reply, request, new HttpError(500, 'an internal error occurred; quote the requestId when reporting it'));
    });

    // Known paths answer 405 with Allow for the methods they lack; the router below
    // mirrors every registered route so path parameters match as Fastify would.
    // The CORS plugin's catch-all OPTIONS route (for preflights) is no path of the API.
    const paths = FindMyWay({ ignoreTrailingSlash: false, maxParamLength: MAX_PARAM_LENGTH });
    const methodsByPath = new Map<string, Set<string>>();
    app.addHook('onRoute', (route) => {
      if (route.url === '*') return;
      const methods = Array.isArray(route.method) ? route.method : [route.method];
      let set = methodsByPath.get(route.url);
      if (!set) {
        set = new Set();
        methodsByPath.set(route.url, set);
        const store = set;
        paths.on('GET', route.url, () => undefined, { methods: store });
      }
      for (const m of methods) set.add(m);
    });

    const unrouted = (request: FastifyRequest, reply: FastifyReply) => {
      const path = requestPath(request);
      const match = paths.find('GET', path) as { store?: { methods: Set<string> } } | null;
      if (match?.store) {
        const allow = [...match.store.methods].sort().join(', ');
        reply.header('allow', allow);
        return sendError(reply, request, new HttpError(405, `${request.method} is not supported on ${quotedPath(path)}; use ${allow}`));
      }
      return sendError(reply, request, notFound(`no route ${request.method} ${quotedPath(path)}`));
    };

    // An unrouted request is answered before its body is parsed (preParsing runs
    // after every onRequest hook: rate limit, authentication): whatever it
    // carries, or lacks (QUERY without Content-Type), is the body of a method
    // or path that does not exist, so the answer is 405 or 404, never a 400.
    app.addHook('preParsing', (request, reply, payload, done) => {
      if (request.is404) unrouted(request, reply); // answered: the chain stops here
      else done(null, payload);
    });
    app.setNotFoundHandler(unrouted);
  },
  { name: 'errors' },
);
