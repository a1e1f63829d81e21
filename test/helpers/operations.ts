/**
 * The operations of the OpenAPI document the app builds from its routes, and the routes its router holds, for the
 * tests that must reach each one (issue 45). Read from the app rather than listed by hand, they include a new
 * resource's operations the day it is declared: a test built on them fails until the new operations are covered,
 * instead of passing without them.
 */
import type { FastifyInstance } from 'fastify';
import { expect } from 'vitest';

export interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header' | 'cookie';
  required?: boolean;
  schema: { type?: string; enum?: string[] };
}

export interface BodySchema {
  required?: string[];
  minProperties?: number;
}

export interface Operation {
  operationId: string;
  security?: Record<string, string[]>[];
  parameters?: Parameter[];
  requestBody?: { content: Record<string, { schema: BodySchema }> };
  responses: Record<string, unknown>;
}

export interface Document {
  security?: Record<string, string[]>[];
  paths: Record<string, Record<string, Operation>>;
}

/** One operation with where it is: `endpoint` is `PATCH /posts/{postId}`, as docs and test names write it. */
export interface DocumentedOperation {
  method: string;
  path: string;
  endpoint: string;
  operation: Operation;
}

/** The document exactly as a client fetches it. */
export async function openApiDocument(app: FastifyInstance): Promise<Document> {
  const res = await app.inject({ url: '/openapi.json' });
  expect(res.statusCode, res.body.slice(0, 300)).toBe(200);
  return res.json<Document>();
}

// A path item also holds members that are not operations (parameters, summary, servers…).
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

export function operationsOf(doc: Document): DocumentedOperation[] {
  const operations: DocumentedOperation[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, operation] of Object.entries(item)) {
      if (!METHODS.includes(method)) continue;
      const upper = method.toUpperCase();
      operations.push({ method: upper, path, endpoint: `${upper} ${path}`, operation });
    }
  }
  return operations;
}

/** Whether its security requirements (its own, else the document's) name bearerAuth; public ones declare `[{}]`. */
export function needsToken(doc: Document, operation: Operation): boolean {
  const security = operation.security ?? doc.security ?? [];
  return security.some((requirement) => 'bearerAuth' in requirement);
}

export function pathParameters(operation: Operation): string[] {
  return (operation.parameters ?? []).filter((p) => p.in === 'path').map((p) => p.name);
}

export function queryParameter(operation: Operation, name: string): Parameter | undefined {
  return operation.parameters?.find((p) => p.in === 'query' && p.name === name);
}

/** The 2xx statuses it documents, as numbers. */
export function successes(operation: Operation): number[] {
  return Object.keys(operation.responses)
    .filter((status) => /^2\d\d$/.test(status))
    .map(Number);
}

/** `/posts/{postId}` with each parameter replaced by its value in `values`; a parameter without one throws. */
export function fillPath(path: string, values: Record<string, string | number>): string {
  return path.replace(/\{(\w+)\}/g, (_, name: string) => {
    const value = values[name];
    if (value === undefined) throw new Error(`no value for {${name}} of ${path}`);
    return String(value);
  });
}

/**
 * `GET /posts/{postId}`… for every route the router holds, read from app.printRoutes(): what the server answers,
 * independently of what the document says. The HEAD route Fastify adds beside each GET is left out, as the
 * document leaves it out. printRoutes draws a tree, four characters a level, each node's segment continuing its
 * parent's path:
 *
 *   ├── /posts (GET, HEAD, POST)
 *   │   └── /:postId (GET, HEAD, PATCH, PUT, DELETE)
 */
export function registeredRoutes(app: FastifyInstance): string[] {
  const routes: string[] = [];
  /** The full path of the last node seen at each depth: the ancestors of the next line. */
  const ancestors: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const node = /^((?:│ {3}| {4})*)[├└]── (.*?)(?: \(([A-Z, ]+)\))?$/.exec(line);
    if (!node) continue;
    const depth = node[1]!.length / 4;
    const path = `${depth > 0 ? ancestors[depth - 1] : ''}${node[2]}`;
    ancestors[depth] = path;
    ancestors.length = depth + 1;
    const methods = node[3]?.split(', ') ?? [];
    for (const method of methods) {
      if (method !== 'HEAD') routes.push(`${method} ${path.replace(/:(\w+)/g, '{$1}')}`);
    }
  }
  // A tree drawn differently by a newer Fastify would read as no routes: fail loudly rather than compare nothing.
  expect(routes.length, 'routes read from app.printRoutes()').toBeGreaterThan(0);
  return routes;
}
