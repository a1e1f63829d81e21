/**
 * The docs page works as offered (docs/api.md §13): "Try it out" fills in every
 * parameter that has an example or a default, and the request body's example,
 * and "Execute" sends them. Here each operation of /openapi.json is sent that
 * way against a database where the README's walk-through ran first and then
 * `npm run seed` (so the examples cannot lean on ids 1), after logging in with
 * POST /tokens's example and authorizing with its token, as a reader of /docs
 * would; each must answer its documented success. Changes go before creates (the
 * demo webhook's PATCH enables it, as docs/api.md says, before its delivery is
 * retried), deletions last, the token's last of all. Which operations there are
 * is not counted by hand: every route the router holds must have been sent,
 * every declared resource's among them (issue 45).
 */
import { readFileSync } from 'node:fs';
import { beforeAll, expect, it } from 'vitest';
import { seed } from '../../src/dev/seed.js';
import { useTestApp } from '../helpers/factories.js';
import { differences, run, walkThrough } from '../helpers/walk-through.js';
import { registeredRoutes } from '../helpers/operations.js';

interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header';
  required?: boolean;
  example?: unknown;
  examples?: Record<string, { value: unknown }>;
  explode?: boolean;
  schema: { default?: unknown; example?: unknown };
}
interface Operation {
  security: Record<string, string[]>[];
  parameters?: Parameter[];
  requestBody?: { content: Record<string, { example?: unknown; examples?: Record<string, { value: unknown }> }> };
  responses: Record<string, { content?: Record<string, unknown> }>;
}

const t = useTestApp();
let doc: { paths: Record<string, Record<string, Operation>> };
beforeAll(async () => {
  const address = await t.app.listen({ port: 0, host: '127.0.0.1' });
  const steps = walkThrough(readFileSync('README.md', 'utf8'));
  expect(differences(steps, await run(steps, Number(new URL(address).port)))).toEqual([]);
  await seed(t.app.db, { posts: 50, demo: true });
  doc = (await t.app.inject({ url: '/openapi.json' })).json();
}, 60_000);

/** The value Swagger UI puts in a parameter's field: its (first) example, else its schema's, else the default. */
function filledIn(parameter: Parameter): unknown {
  const first = parameter.examples ? Object.values(parameter.examples)[0]?.value : undefined;
  return first ?? parameter.example ?? parameter.schema.example ?? parameter.schema.default;
}

/** As Swagger UI serializes it: arrays with explode false comma-separated, the rest as strings. */
const serialized = (parameter: Parameter, value: unknown): string[] =>
  Array.isArray(value) ? (parameter.explode === false ? [value.join(',')] : value.map(String)) : [String(value)];

/** POST /tokens first (the reader logs in), then reads, changes, creates, deletions (deepest first), the token last. */
function order([path, method]: [string, string, Operation]): number {
  if (path === '/tokens' && method === 'post') return 0;
  const rank = { get: 1, put: 2, patch: 2, post: 3, delete: 4 }[method] ?? 5;
  if (method !== 'delete') return rank;
  return path === '/tokens/{tokenId}' ? 9 : rank + 1 / path.length;
}

it('every operation answers its documented success to what "Try it out" fills in', async () => {
  const operations = Object.entries(doc.paths)
    .flatMap(([path, item]) =>
      Object.entries(item).map(([method, op]) => [path, method, op] as [string, string, Operation]),
    )
    .sort((a, b) => order(a) - order(b));

  let token: string | undefined;
  const failures: string[] = [];
  /** `GET /posts/{postId}`… as each is sent: what the loop really covered, whatever it skips. */
  const sent: string[] = [];
  for (const [path, method, op] of operations) {
    let url = path;
    const query = new URLSearchParams();
    const headers: Record<string, string> = {};
    for (const parameter of op.parameters ?? []) {
      const value = filledIn(parameter);
      if (value === undefined) {
        if (parameter.required) failures.push(`${method} ${path}: required ${parameter.name} has no example`);
        continue;
      }
      const [text = ''] = serialized(parameter, value);
      if (parameter.in === 'path') url = url.replace(`{${parameter.name}}`, encodeURIComponent(text));
      else if (parameter.in === 'query')
        for (const each of serialized(parameter, value)) query.append(parameter.name, each);
      else headers[parameter.name] = text;
    }
    const content = op.requestBody?.content;
    const [mediaType, media] = Object.entries(content ?? {})[0] ?? [];
    const body = media?.examples ? Object.values(media.examples)[0]?.value : media?.example;
    if (op.requestBody && body === undefined) failures.push(`${method} ${path}: the body has no example`);
    if (mediaType) headers['content-type'] = mediaType;
    if (op.security.some((requirement) => 'bearerAuth' in requirement) && token)
      headers.authorization = `Bearer ${token}`;

    const search = query.size ? `?${query.toString()}` : '';
    sent.push(`${method.toUpperCase()} ${path}`);
    const success = Object.keys(op.responses)
      .filter((status) => /^2\d\d$/.test(status))
      .sort()[0]!;
    // An event stream never ends: its answer is taken as it starts.
    const streams = 'text/event-stream' in (op.responses[success]?.content ?? {});
    const res = await t.app.inject({
      method: method.toUpperCase() as 'GET',
      url: `${url}${search}`,
      headers,
      ...(body !== undefined && { payload: JSON.stringify(body) }),
      ...(streams && { payloadAsStream: true }),
    });
    if (streams) {
      res.stream().destroy();
      if (String(res.statusCode) !== success)
        failures.push(`${method.toUpperCase()} ${url}${search}: ${res.statusCode} (documented ${success})`);
      continue;
    }
    if (String(res.statusCode) !== success)
      failures.push(
        `${method.toUpperCase()} ${url}${search} ${JSON.stringify(body) ?? ''}: ${res.statusCode} (documented ${success}) ${res.body.slice(0, 300)}`,
      );
    if (path === '/tokens' && method === 'post') token = (res.json() as { token?: string }).token;
  }
  expect(failures).toEqual([]);

  // The router's routes, not the document's operations: a route the document leaves out is missing from the loop
  // too, and fails here, as does an operation the loop skips. The document itself and the docs page serving it are
  // not operations of the API.
  const notOfTheApi = (route: string) =>
    route === 'GET /openapi.json' || route === 'GET /docs' || route.startsWith('GET /docs/');
  const routes = registeredRoutes(t.app).filter((route) => !notOfTheApi(route));
  expect([...sent].sort(), 'operations sent, against the routes the app registered').toEqual(routes.sort());
  // And each declared resource has its routes: the GET of one item, at the path its declaration gives.
  for (const resource of t.app.resources.resources) {
    expect(sent, resource.name).toContain(`GET ${resource.path.replace(/:(\w+)/g, '{$1}')}`);
  }
});
