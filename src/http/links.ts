/**
 * Links the API hands out (Location, Link): built from the route that matched
 * and its parsed parameters, never from the request target as sent. A request
 * in absolute form (`POST http://evil.example/posts`) thus still gets links to
 * this service. They are path-absolute references (RFC 3986 §4.2) unless
 * PUBLIC_BASE_URL is set, which then prefixes every one: the Host a client sent
 * is never trusted for them.
 */
import type { FastifyRequest } from 'fastify';

declare module 'fastify' {
  interface FastifyInstance {
    /** PUBLIC_BASE_URL, or '' for path-only links. */
    publicBaseUrl: string;
  }
}

const ORIGIN = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i;

/** The request's path, without the origin of an absolute-form target and without the query. */
export function requestPath(request: FastifyRequest): string {
  return request.url.replace(ORIGIN, '').split('?')[0] || '/';
}

/** A path as quoted in an error message: bounded, however long the URL. */
export const quotedPath = (path: string) => (path.length > 200 ? `${path.slice(0, 200)}…` : path);

/** The matched route's path (prefix included) with its parameters filled in. */
function routePath(request: FastifyRequest): string {
  const params = (request.params ?? {}) as Record<string, string>;
  return (request.routeOptions.url ?? '/').replace(/:([A-Za-z0-9_]+)/g, (_, name: string) =>
    encodeURIComponent(params[name] ?? ''),
  );
}

/** A link to `suffix` under the matched route (e.g. `/{id}` of a created item). */
export function linkTo(request: FastifyRequest, suffix = '', query?: URLSearchParams): string {
  const search = query && query.size > 0 ? `?${query.toString()}` : '';
  return `${request.server.publicBaseUrl}${routePath(request)}${suffix}${search}`;
}
