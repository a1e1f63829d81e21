/**
 * A response cache for the public reads of posts and comments, kept exact by
 * invalidation rather than by expiry: no client ever reads data older than the
 * last write it could know about.
 *
 * What is cached: the 200 answer (body, Content-Type, ETag, Link) of a GET to a
 * route with `config: { cached: true }`, keyed by the request URL. Those reads
 * are public and the same for every viewer. The hooks before it still run on a
 * hit (rate limit, authentication, request id, security headers, access log),
 * so a hit differs from a miss only in the work it skips: validation, SQL,
 * serialization. Requests with If-None-Match, and HEAD, always go through.
 *
 * Invalidation: every write to posts or comments empties the whole cache. Cheap,
 * and sufficient because reads vastly outnumber writes.
 * - Writes through this instance (scopes passed to `trackWrites`) empty it
 *   after their transaction and before their answer is sent, so no answer from
 *   before a write is served once that write has been acknowledged. Before
 *   that answer leaves, the write is also announced to the other instances: a
 *   NOTIFY on the channel they LISTEN on, sent on this instance's listening
 *   connection after the write committed. Sending it inside the write's own
 *   transaction would serialize all commits behind PostgreSQL's notification
 *   lock (pgbench: 691 instead of 1 286 creates/s); sent apart, with synchronous_commit
 *   off (it needs no durability), and shared by the writes that committed
 *   before it started, it costs one short round trip.
 * - Writes from outside the service (psql, a migration) are announced by
 *   statement triggers on posts and comments (migrations/*_change_notifications.sql).
 * - Another instance's write is visible here once its notification arrives,
 *   normally before that writer's client has its answer.
 * - A read that started before an invalidation is not stored (generation check),
 *   so a slow query cannot put back what a write removed.
 * - While the listening connection is down nothing is cached or served; it
 *   reconnects by itself and starts from an empty cache.
 */
import { randomUUID } from 'node:crypto';
import fp from 'fastify-plugin';
import pg from 'pg';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { CHANGES_CHANNEL } from '../db/pool.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** This GET route's 200 answers are public and may be served from the response cache. */
    cached?: boolean;
  }
  interface FastifyRequest {
    /** The cache generation a cacheable miss started in; null when its answer must not be stored. */
    cacheGeneration: number | null;
  }
  interface FastifyInstance {
    responseCache: {
      /** Marks every route of `scope` as a writer of cached data (posts, comments). */
      trackWrites(scope: FastifyInstance): void;
      /**
       * Resolves once every change committed before the call has reached this
       * instance's cache: a fence notification sent after them has come back.
       */
      sync(): Promise<void>;
    };
  }
}

/** One answer larger than this share of the budget is not worth evicting the others for. */
const MAX_ENTRY_SHARE = 8;
const RECONNECT_DELAY_MS = 1_000;
const KEPT_HEADERS = ['content-type', 'etag', 'link'] as const;

interface Entry {
  /** Bytes, so a hit is neither encoded nor measured again. */
  body: Buffer;
  headers: Record<string, string>;
  /** What it counts against the budget: body, key and headers (a URL, and so a Link, can be long: author=000…1). */
  size: number;
}

export interface ResponseCacheOptions {
  connectionString: string;
  /** Budget for the cached answers (bodies, URLs, headers), bytes; 0 turns the cache off. */
  maxBytes: number;
}

export default fp<ResponseCacheOptions>(
  async (app, { connectionString, maxBytes }) => {
    const entries = new Map<string, Entry>();
    let size = 0;
    let generation = 0;
    let listening = false;
    let closing = false;
    let listener: pg.Client | undefined;
    let retry: NodeJS.Timeout | undefined;
    /** sync() calls waiting for their fence notification, by payload. */
    const fences = new Map<string, () => void>();
    const releaseFences = () => {
      for (const release of fences.values()) release();
      fences.clear();
    };

    const invalidate = () => {
      generation += 1;
      entries.clear();
      size = 0;
    };

    function store(key: string, payload: string, reply: FastifyReply): void {
      const body = Buffer.from(payload);
      const headers: Record<string, string> = {};
      let entrySize = body.length + key.length;
      for (const name of KEPT_HEADERS) {
        const value = reply.getHeader(name);
        if (typeof value !== 'string') continue;
        headers[name] = value;
        entrySize += value.length;
      }
      if (entrySize > maxBytes / MAX_ENTRY_SHARE) return;
      const entry = { body, headers, size: entrySize };
      entries.set(key, entry);
      size += entry.size;
      // Map order is insertion order: the oldest entries go first.
      for (const [oldest, { size: freed }] of entries) {
        if (size <= maxBytes) break;
        entries.delete(oldest);
        size -= freed;
      }
    }

    async function listen(): Promise<void> {
      const client = new pg.Client({
        connectionString,
        application_name: 'posts-api-cache',
        connectionTimeoutMillis: 3_000,
        keepAlive: true,
        // Its only writes are announcements (publish()): they need no durability.
        options: '-c synchronous_commit=off',
      });
      let lost = false;
      const onLost = () => {
        if (lost) return;
        lost = true;
        listening = false;
        invalidate();
        // Nothing is served from the cache until it listens again: nothing to wait for.
        releaseFences();
        client.end().catch(() => undefined);
        if (!closing) retry = setTimeout(() => void listen(), RECONNECT_DELAY_MS);
      };
      client.on('error', onLost);
      client.on('end', onLost);
      client.on('notification', ({ processId, payload }) => {
        // Our own announcements: this cache was emptied before they were sent.
        if (processId === (client as unknown as { processID: number | null }).processID) return;
        invalidate();
        if (payload) fences.get(payload)?.();
      });
      try {
        await client.connect();
        await client.query(`LISTEN ${CHANGES_CHANNEL}`);
      } catch {
        onLost();
        return;
      }
      if (closing) {
        await client.end().catch(() => undefined);
        return;
      }
      listener = client;
      // Whatever happened while nobody listened is unknown: start empty.
      invalidate();
      listening = true;
    }

    const announce = async () => {
      try {
        await (listening && listener ? listener : app.db).query('SELECT pg_notify($1, $2)', [CHANGES_CHANNEL, '']);
      } catch (error) {
        // The write has committed; its answer must not fail. Instances whose
        // listener is cut off by the same outage serve nothing from their caches.
        app.log.warn({ err: error }, 'could not announce a change to the other instances');
      }
    };
    /**
     * Announces the writes committed so far. One NOTIFY is in flight at a time;
     * a caller arriving meanwhile needs one that starts after its commit, and
     * every caller arriving during the same flight shares that next one.
     */
    let inFlight: Promise<void> | null = null;
    let queued: Promise<void> | null = null;
    const publish = (): Promise<void> => {
      if (!inFlight) {
        inFlight = announce().finally(() => {
          inFlight = null;
        });
        return inFlight;
      }
      queued ??= inFlight.then(() => {
        queued = null;
        return publish();
      });
      return queued;
    };

    app.decorateRequest('cacheGeneration', null);
    app.decorate('responseCache', {
      trackWrites(scope: FastifyInstance) {
        // Also with this instance's cache off: the others' may be on.
        // After the handler (its transaction has committed) and before the
        // answer leaves: once a client has its answer, no cache holds what was
        // before. Failed writes count too, which is merely wasteful.
        scope.addHook('onSend', async (_request, _reply, payload) => {
          invalidate();
          await publish();
          return payload;
        });
      },
      async sync() {
        if (!listening) return;
        const fence = randomUUID();
        const arrived = new Promise<void>((resolve) => fences.set(fence, resolve));
        try {
          await app.db.query('SELECT pg_notify($1, $2)', [CHANGES_CHANNEL, fence]);
          await arrived;
        } finally {
          fences.delete(fence);
        }
      },
    });

    if (maxBytes === 0) return;

    app.addHook('onRequest', (request, reply, done) => {
      if (request.method !== 'GET' || !request.routeOptions.config.cached || request.headers['if-none-match'] !== undefined || !listening) {
        done();
        return;
      }
      const entry = entries.get(request.url);
      if (entry) {
        reply.headers(entry.headers).send(entry.body);
        return;
      }
      request.cacheGeneration = generation;
      done();
    });

    app.addHook('onSend', (request, reply, payload, done) => {
      if (
        request.cacheGeneration === generation &&
        reply.statusCode === 200 &&
        typeof payload === 'string' &&
        listening
      ) {
        store(request.url, payload, reply);
      }
      done(null, payload);
    });

    app.addHook('onClose', async () => {
      closing = true;
      clearTimeout(retry);
      listening = false;
      releaseFences();
      await listener?.end().catch(() => undefined);
    });

    await listen();
  },
  { name: 'response-cache', dependencies: ['db', 'auth', 'rate-limit'] },
);
