/**
 * Path-absolute links from the matched route, never the target or Host as sent: `POST http://evil.example/posts`
 * links here.
 */
import type { FastifyRequest } from 'fastify';

const ORIGIN = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i;

export function requestPath(request: FastifyRequest): string {
  return request.url.replace(ORIGIN, '').split('?')[0] || '/';
}

/** A path as quoted in an error message: bounded, however long the URL. */
export const quotedPath = (path: string): string => (path.length > 200 ? `${path.slice(0, 200)}…` : path);

function routePath(request: FastifyRequest): string {
  const params = (request.params ?? {}) as Record<string, string>;
  return (request.routeOptions.url ?? '/').replace(/:([A-Za-z0-9_]+)/g, (_, name: string) =>
    encodeURIComponent(params[name] ?? ''),
  );
}

export function linkTo(request: FastifyRequest, suffix = '', query?: URLSearchParams): string {
  const search = query && query.size > 0 ? `?${query.toString()}` : '';
  return `${routePath(request)}${suffix}${search}`;
}
