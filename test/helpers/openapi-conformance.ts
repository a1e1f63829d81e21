/**
 * Every response a test receives is checked against the OpenAPI document the
 * app publishes (GET /openapi.json), so the document cannot drift from the
 * service without a test failing:
 * - the request's path and method name an operation, and the status is one
 *   that operation lists (a method a known path lacks: 405, as
 *   components.responses.MethodNotAllowed documents; a path the document does
 *   not know: only the error body is checked);
 * - the Content-Type is the documented media type, with charset=utf-8 for JSON;
 * - every header the contract names that the response carries is documented
 *   for that status, and every documented header present matches its schema;
 * - the body matches the documented schema (JSON Schema 2020-12, by Ajv).
 *
 * `checkAgainstDocument(app)` wraps `app.inject` once the app is ready; test
 * helpers that build apps call it, so every integration test is covered.
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import FindMyWay from 'find-my-way';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse as InjectResponse } from 'fastify';
import { expect } from 'vitest';

type AddFormats = (ajv: Ajv2020, formats: string[]) => Ajv2020;
const addFormats =
  (addFormatsModule as unknown as { default?: AddFormats }).default ?? (addFormatsModule as unknown as AddFormats);

interface Header {
  schema: object;
  description?: string;
}
interface DocResponse {
  description: string;
  headers?: Record<string, Header | { $ref: string }>;
  content?: Record<string, { schema: object }>;
}
interface Operation {
  responses: Record<string, DocResponse>;
}
interface Document {
  servers?: { url: string }[];
  paths: Record<string, Record<string, Operation>>;
  components: { headers: Record<string, Header>; responses: Record<string, DocResponse> };
}

/** Response headers the contract names: wherever one is sent, the document must say so. */
const CONTRACT_HEADERS = [
  'allow',
  'etag',
  'idempotent-replayed',
  'link',
  'location',
  'retry-after',
  'www-authenticate',
  'x-request-id',
  'ratelimit-limit',
  'ratelimit-remaining',
  'ratelimit-reset',
];
const JSON_TYPE = 'application/json; charset=utf-8';
type DocumentMethod = 'get' | 'put' | 'post' | 'delete' | 'patch';

/** A JSON pointer (RFC 6901) to the member of the document the segments name. */
const pointer = (...segments: string[]) =>
  segments.map((s) => `/${s.replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');

export class Conformance {
  private readonly ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
  private readonly router = FindMyWay({ ignoreTrailingSlash: false });
  private readonly validators = new Map<string, ValidateFunction>();
  private readonly prefix: string;

  constructor(private readonly doc: Document) {
    addFormats(this.ajv, ['date-time', 'email', 'uri']);
    this.ajv.addFormat('int32', true).addFormat('int64', true);
    this.ajv.addSchema(doc as object, 'openapi.json');
    const server = doc.servers?.[0]?.url ?? '/';
    this.prefix = server === '/' ? '' : server;
    for (const path of Object.keys(doc.paths)) {
      this.router.on('GET', `${this.prefix}${path.replace(/\{([^}]+)\}/g, ':$1')}`, () => undefined, { path });
    }
  }

  private validator(ref: string): ValidateFunction {
    let validate = this.validators.get(ref);
    if (!validate) {
      validate = this.ajv.compile({ $ref: `openapi.json#${ref}` });
      this.validators.set(ref, validate);
    }
    return validate;
  }

  private header(header: Header | { $ref: string }): Header {
    if ('$ref' in header) return this.doc.components.headers[header.$ref.split('/').pop()!]!;
    return header;
  }

  check(method: string, url: string, res: InjectResponse): void {
    const where = `${method} ${url} → ${res.statusCode} ${(res.body ?? '').slice(0, 300)}`;
    const path = url.split('?')[0] ?? '/';
    const found = this.router.find('GET', path) as { store: { path: string } } | null;
    const docMethod = (method === 'HEAD' ? 'get' : method.toLowerCase()) as DocumentMethod;
    const operation = found ? this.doc.paths[found.store.path]?.[docMethod] : undefined;
    const status = String(res.statusCode);

    let response: DocResponse | undefined;
    let location: string;
    if (operation) {
      response = operation.responses[status];
      location = pointer('paths', found!.store.path, docMethod, 'responses', status);
      expect(
        response,
        `status ${status} is not documented for ${docMethod.toUpperCase()} ${found!.store.path}: ${where}`,
      ).toBeDefined();
    } else if (found && res.statusCode === 405) {
      response = this.doc.components.responses.MethodNotAllowed;
      location = pointer('components', 'responses', 'MethodNotAllowed');
    } else {
      // Not an operation of the document (unknown route, /docs, a method the path lacks
      // answered otherwise, e.g. 429 first): errors still have the one body.
      if (res.statusCode >= 400 && method !== 'HEAD')
        this.body(this.validator('/components/schemas/Error'), res, where);
      return;
    }
    if (!response) return;

    const sent = Object.keys(res.headers).map((h) => h.toLowerCase());
    const documented = new Map(
      Object.entries(response.headers ?? {}).map(([name, h]) => [name.toLowerCase(), this.header(h)]),
    );
    for (const name of sent) {
      if (CONTRACT_HEADERS.includes(name))
        expect(documented.has(name), `header ${name} is not documented at ${location}: ${where}`).toBe(true);
      const header = documented.get(name);
      if (header) this.headerValue(name, header, res.headers[name], where);
    }

    const media = Object.keys(response.content ?? {});
    const hasBody = res.statusCode !== 204 && res.statusCode !== 304;
    if (!hasBody) {
      expect(res.body, where).toBe('');
      return;
    }
    // An event stream (GET /events/stream) never ends: its media type is all there is to check.
    if (media.includes('text/event-stream') && String(res.headers['content-type']).startsWith('text/event-stream'))
      return;
    expect(media, `no content documented at ${location}: ${where}`).toContain('application/json');
    expect(res.headers['content-type'], where).toBe(JSON_TYPE);
    if (method === 'HEAD') return;
    this.body(this.validator(location + pointer('content', 'application/json', 'schema')), res, where);
  }

  private headerValue(name: string, header: Header, value: unknown, where: string) {
    const schema = header.schema as { type?: string };
    const text = String(value);
    const typed = schema.type === 'integer' && /^-?[0-9]+$/.test(text) ? Number(text) : text;
    const key = JSON.stringify(header.schema);
    let validate = this.validators.get(key);
    if (!validate) {
      validate = this.ajv.compile(header.schema);
      this.validators.set(key, validate);
    }
    expect(validate(typed), `header ${name}: ${text} does not match ${JSON.stringify(header.schema)}: ${where}`).toBe(
      true,
    );
  }

  private body(validate: ValidateFunction, res: InjectResponse, where: string) {
    let body: unknown;
    try {
      body = JSON.parse(res.body);
    } catch {
      expect.fail(`body is not JSON: ${where}`);
    }
    const ok = validate(body);
    expect(ok, `body does not match the document: ${JSON.stringify(validate.errors?.slice(0, 3))}: ${where}`).toBe(
      true,
    );
  }
}

/** Replaces `app.inject` by one that checks every response against the app's own document. */
export async function checkAgainstDocument(app: FastifyInstance): Promise<void> {
  await app.ready();
  const inject = app.inject.bind(app) as (options: InjectOptions | string) => Promise<InjectResponse>;
  const conformance = new Conformance(JSON.parse(JSON.stringify(app.swagger())) as Document);
  const checked = async (options: InjectOptions | string) => {
    const res = await inject(options);
    const { method = 'GET', url = '/' } = typeof options === 'string' ? { url: options } : options;
    const target =
      typeof url === 'string'
        ? url
        : `${url.pathname ?? '/'}${url.query ? `?${new URLSearchParams(url.query as Record<string, string>)}` : ''}`;
    conformance.check(method.toUpperCase(), target, res);
    return res;
  };
  Object.defineProperty(app, 'inject', { value: checked, configurable: true, writable: true });
}
