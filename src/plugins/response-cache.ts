/** The response cache of the `cached` routes' 200s (docs/architecture.md, "The response cache"). */
import fp from 'fastify-plugin';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { namesEtag } from '../http/conditional.js';
import { entryLabels, routeShape, type RouteShape } from '../cache/labels.js';
import { createResponseStore, doorkeeper, type ResponseStore } from '../cache/store.js';

/** bypassed: the bus is not healthy, reads go to the database. */
export type CacheState = 'on' | 'bypassed' | 'off';

declare module 'fastify' {
  interface FastifyContextConfig {
    cached?: boolean;
  }
  interface FastifyRequest {
    /** null when its answer will not be stored. */
    cacheEpoch: number | null;
  }
  interface FastifyInstance {
    responseCache: {
      sync(): Promise<void>;
      state(): CacheState;
    };
  }
}

const KEPT_HEADERS = ['content-type', 'etag', 'link', 'cache-control'] as const;

export interface ResponseCacheOptions {
  /** 0 turns the cache off. */
  maxBytes: number;
  maxAgeMs: number;
}

export default fp<ResponseCacheOptions>(
  async (app, { maxBytes, maxAgeMs }) => {
    const enabled = maxBytes > 0;
    const bus = app.changeBus;
    app.decorateRequest('cacheEpoch', null);
    app.decorate('responseCache', {
      sync: () => bus.sync(),
      state: (): CacheState => (!enabled ? 'off' : bus.healthy() ? 'on' : 'bypassed'),
    });
    if (!enabled) return;

    const store = createResponseStore({ maxBytes, maxAgeMs });
    bus.subscribe({ evicted: (labels) => store.evict(labels) });
    const seenBefore = doorkeeper();
    const shapes = new Map<string, RouteShape>();
    const shapeOf = (url: string) => {
      let shape = shapes.get(url);
      if (!shape) shapes.set(url, (shape = routeShape(url)));
      return shape;
    };

    app.addHook('onSend', (request, reply, payload, done) => {
      if (request.cacheEpoch !== null && bus.healthy()) put(store, shapeOf, request, reply, payload);
      done(null, payload);
    });

    // X-Cache (hit, miss, bypass) on every cacheable GET: hit rates read off the answers.
    app.addHook('onRequest', (request, reply, done) => {
      if (request.method !== 'GET' || !request.routeOptions.config.cached) return done();
      if (!bus.healthy()) {
        reply.header('x-cache', 'bypass');
        return done();
      }
      const answer = store.get(request.url);
      if (!answer) {
        reply.header('x-cache', 'miss');
        if (seenBefore(request.url)) request.cacheEpoch = store.epoch();
        return done();
      }
      reply.header('x-cache', 'hit');
      const condition = request.headers['if-none-match'];
      const etag = answer.headers.etag;
      if (condition !== undefined && etag !== undefined && namesEtag(condition, etag)) {
        const { 'content-type': _none, ...headers } = answer.headers;
        reply.code(304).headers(headers).send();
        return;
      }
      reply.headers(answer.headers).send(answer.body);
    });

    await bus.listen();
  },
  { name: 'response-cache', dependencies: ['db', 'auth', 'rate-limit', 'http-caching', 'changes'] },
);

/** Parses the body again for its labels: only a URL missed twice gets here. */
function put(
  store: ResponseStore,
  shapeOf: (url: string) => RouteShape,
  request: FastifyRequest,
  reply: FastifyReply,
  payload: unknown,
): void {
  if (reply.statusCode !== 200 || typeof payload !== 'string') return;
  const params = request.params as Record<string, string>;
  const query = request.query as Record<string, unknown>;
  const labels = entryLabels(shapeOf(request.routeOptions.url ?? ''), params, query, JSON.parse(payload));
  if (store.evictedSince(request.cacheEpoch!, labels)) return;
  const headers: Record<string, string> = {};
  for (const name of KEPT_HEADERS) {
    const value = reply.getHeader(name);
    if (typeof value === 'string') headers[name] = value;
  }
  // A body of its own: Buffer.from() puts small strings in a shared slab, which a kept slice would hold whole.
  const body = Buffer.allocUnsafeSlow(Buffer.byteLength(payload));
  body.write(payload);
  store.put(request.url, { body, headers, labels });
}
