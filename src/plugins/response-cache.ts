/**
 * A response cache for the public reads of posts and comments, correct first:
 * a client never reads older data than it wrote, on any instance; nothing is
 * served that a write committed more than RESPONSE_CACHE_MAX_AGE_MS ago (5 s by
 * default) changed; a request that changed nothing evicts nothing.
 *
 * What is cached: the 200 answer (body and its Content-Type, ETag, Link,
 * Cache-Control) of a GET to a route with `config: { cached: true }`, keyed by
 * the URL, in an LRU (lru-cache) whose byte budget counts bodies, URLs, headers
 * and tags. Those reads are public and the same for every viewer. A URL is
 * stored when it is missed a second time soon after the first ("seen twice"
 * doorkeeper: `doorkeeper`), so reads of one-off URLs (random ids, random
 * cursors) cost what they cost without a cache. The hooks before it still run
 * on a hit (rate limit, authentication, request id, security headers, access
 * log); a hit answers If-None-Match
 * with its ETag itself (304).
 *
 * Eviction by tags (src/http/cache-tags.ts): an entry is tagged with what
 * it shows, derived from its route and body; a write records what it changed
 * with `request.changed(how, collection, resource)`; a change evicts the
 * entries sharing one of its tags. A new comment evicts its post and the lists
 * showing that post, not other posts. A new resource or list needs no code here.
 *
 * Only a committed change is announced: after the handler, for a 2xx (or a 5xx,
 * whose commit may have happened) of a request that recorded changes. Rejected
 * requests, idempotent replays and empty PATCHes record none.
 *
 * Announcement and read-your-writes: the writer evicts its own entries, then
 * NOTIFYs the tags (with a unique "fence" id; over 7 900 bytes it says `*`,
 * flush all) on its listening connection, and holds the answer until that
 * notification has come back to it and every live peer (an instance heard
 * from within 2.5 s; heartbeats come every second) has confirmed it with a
 * NOTIFY of its own, sent once it has evicted. Merely having our own
 * notification back is not enough: another instance's backend or event loop
 * may lag (3 stale reads in 60 in the two-instance test). The wait is bounded
 * (1 s): past it the answer goes anyway, and our listener counts as stalled if
 * it was ours that did not come back. Writes arriving while a fence is in
 * flight share the next one. Writes from outside the service are announced by
 * statement triggers (migrations/*_change_notifications.sql) with an empty
 * payload, which flushes everything. An instance with the cache off announces
 * through its pool and waits for no one.
 *
 * Bounded staleness whatever happens to notifications: entries expire after
 * the max age; a heartbeat fence goes round every second, and hits are served
 * only while the last fence that came back was sent less than 2 s ago. An
 * instance whose listener is lost, stalled (no fence back within 1 s) or
 * reconnecting serves from the database and stores nothing; it reconnects
 * every second and starts empty. /health/ready reports this as `cache`.
 * A read that started before an eviction of one of its tags is not stored.
 *
 * Reads on replicas (DATABASE_READ_URL, src/db/replicas.ts): the public reads
 * of posts and comments, the routes marked `cached`, go to a replica within
 * the lag bound, and only while this instance listens (healthy), because two
 * promises ride on the announcements. A change fence also carries the WAL
 * insert position after the write's commit (`!<lsn>`, computed by the NOTIFY
 * statement itself, so no extra round trip) and the writers' user ids
 * (`~<id>`); every instance records "user U wrote up to L" before it
 * confirms, so when U's write answers, every live instance sends U's reads to
 * a replica that has replayed L, or to the primary (read-your-writes on any
 * instance). Records older than twice the lag bound are dropped: by then any
 * replica within the bound has the write. And an answer is stored only if read
 * where every eviction received so far had been replayed (NOTIFY is not
 * replicated: a replica behind the eviction would put the old answer back);
 * an eviction of unknown position (our own before its fence is back, a
 * trigger's, a flush at reconnect) sends storable misses to the primary until
 * a position sampled after it is known (a check interval, 250 ms at most).
 * A 404 read on a replica is read again on the primary before it is sent: a
 * replica within the bound may lack what was just created, and what exists
 * is never a 404.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import fp from 'fastify-plugin';
import pg from 'pg';
import { LRUCache } from 'lru-cache';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { CHANGES_CHANNEL, type Queryable } from '../db/pool.js';
import { parseLsn } from '../db/replicas.js';
import { namesTag } from '../http/conditional.js';
import { changeTags, entryTags, routeShape, type ChangeKind, type RouteShape } from '../http/cache-tags.js';

/** on: hits served; bypassed: listener lost, stalled or reconnecting, reads go to the database; off: RESPONSE_CACHE_MB=0. */
export type CacheState = 'on' | 'bypassed' | 'off';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** This GET route's 200 answers are public and may be served from the response cache. */
    cached?: boolean;
  }
  interface FastifyRequest {
    /**
     * Records that this request wrote `resource` (its representation: `id` and
     * foreign keys such as `authorId`) of `collection` (`posts`): once it has
     * answered 2xx, the entries showing it are evicted on every instance.
     */
    changed<R extends { id: number }>(how: ChangeKind, collection: string, resource: R): void;
    cacheChanges: Set<string> | null;
    /** The eviction count a storable miss started at; null when its answer must not be stored. */
    cacheEpoch: number | null;
    /** Where this request's reads go when not to the primary (`app.db`): set for the cached routes when replicas are configured. */
    reader: Queryable | null;
  }
  interface FastifyInstance {
    responseCache: {
      /** Resolves once every change committed before the call has reached this instance (or the listener is down). */
      sync(): Promise<void>;
      state(): CacheState;
    };
  }
}

const RECONNECT_DELAY_MS = 1_000;
const HEARTBEAT_MS = 1_000;
/** How long a fence (a write's announcement, a heartbeat) may take to come back. */
const FENCE_TIMEOUT_MS = 1_000;
/** Hits need a fence sent within this: a heartbeat is due every second and has a second to return. */
const SURE_FOR_MS = HEARTBEAT_MS + FENCE_TIMEOUT_MS;
/** A peer not heard from for this long (heartbeats come every second) is no longer waited for. */
const PEER_TTL_MS = 2_500;
/** NOTIFY payloads must stay under 8 000 bytes. */
const MAX_PAYLOAD = 7_900;
const FLUSH_ALL = '*';
/**
 * Ends the fence id of an announcement sent through the pool (cache off, or
 * listener down): its sender waits for no confirmation, so none is sent. Each
 * confirmation is a NOTIFY, about 90 µs of PostgreSQL CPU with its delivery
 * (measured), which the writes of an instance with the cache off paid once
 * per caching instance for nothing.
 */
const UNCONFIRMED = '~';
const KEPT_HEADERS = ['content-type', 'etag', 'link', 'cache-control'] as const;
/** One answer larger than this share of the budget is not worth evicting the others for. */
const MAX_ENTRY_SHARE = 8;
/**
 * What an entry holds beyond its body, URL, header values and tag strings,
 * counted against the budget so that it bounds the memory really used: per
 * entry, its objects and the LRU's slots; per tag, its slot in the tag index
 * (a Set per tag). Measured with the heap after a full GC: a post's entry
 * (one tag) holds about 940 bytes besides its body, a page of 20 posts (22
 * tags) about 5 450; counting 64 bytes per tag and nothing per entry, the
 * budget saw a tenth to a third of what entries held.
 */
const ENTRY_OVERHEAD = 768;
const TAG_OVERHEAD = 200;
/** Evictions remembered to decide whether a miss that started earlier may still be stored. */
const RECENT_EVICTIONS = 256;
/**
 * The doorkeeper's memory: two generations of this many slots, the older
 * dropped each time the newer has taken in half as many misses. A URL is
 * stored when it is missed again within the last 4 096 to 8 192 misses: at
 * 10 000 misses a second, a URL read twice a second or more. A longer memory
 * stored one-off URLs that repeated by chance (a random post among a million
 * came back within 65 536 misses 6.5 % of the time), and storing them made a
 * miss cost 20 % more CPU than no cache (bench, post-by-id): JSON.parse for
 * the tags, a body copy, the LRU's evictions, all for entries never read.
 */
const DOORKEEPER_SLOTS = 1 << 13;
const NOTIFY = 'SELECT pg_notify($1, $2)';
/** A change: the WAL insert position once the write has committed goes with it. */
const NOTIFY_CHANGE = "SELECT pg_notify($1, $2 || ' !' || pg_current_wal_insert_lsn()::text)";

interface Entry {
  body: Buffer;
  headers: Record<string, string>;
  tags: string[];
}

/** A fence's NOTIFY payload: its id, the writers (`~<user id>`) and tags, or `*` (flush all) when the tags would not fit. */
export function fencePayload(id: string, tags: Set<string>, writers: Set<number> = new Set()): string {
  const head = [id, ...[...writers].map((writer) => `~${writer}`)].join(' ');
  const payload = tags.size ? `${head} ${[...tags].join(' ')}` : head;
  return Buffer.byteLength(payload) > MAX_PAYLOAD ? `${head} ${FLUSH_ALL}` : payload;
}

/** Whether a URL was missed recently before (then it is worth storing); remembers this miss. */
export function doorkeeper(slots = DOORKEEPER_SLOTS): (url: string) => boolean {
  let current = new Uint32Array(slots);
  let previous = new Uint32Array(slots);
  let taken = 0;
  return (url) => {
    const h = fingerprint(url);
    const slot = h & (slots - 1);
    if (current[slot] === h || previous[slot] === h) return true;
    current[slot] = h;
    if (++taken >= slots / 2) {
      [previous, current] = [current, previous];
      current.fill(0);
      taken = 0;
    }
    return false;
  };
}

/** FNV-1a: the doorkeeper's fingerprint of a URL, with no allocation. */
function fingerprint(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0 || 1;
}

/** Closes a client's socket at once, without waiting for the server. */
const destroy = (client: pg.Client) => (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();

/** `promise`'s value, or false once `ms` have passed. */
async function within(promise: Promise<boolean>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => (timer = setTimeout(resolve, ms, false)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export interface ResponseCacheOptions {
  connectionString: string;
  /** Budget for the cached answers (bodies, URLs, headers, tags), bytes; 0 turns the cache off. */
  maxBytes: number;
  /** No entry is served older than this. */
  maxAgeMs: number;
}

export default fp<ResponseCacheOptions>(
  async (app, { connectionString, maxBytes, maxAgeMs }) => {
    const enabled = maxBytes > 0;
    const reads = app.reads;
    // Replicas need the announcements even with the cache off (read-your-writes).
    const listens = enabled || reads !== null;
    const instance = randomBytes(6).toString('base64url');
    let seq = 0;

    // --- the store and its tag index ---
    const byTag = new Map<string, Set<string>>();
    let clearing = false;
    const entries = new LRUCache<string, Entry>({
      maxSize: Math.max(maxBytes, 1),
      maxEntrySize: Math.max(Math.floor(maxBytes / MAX_ENTRY_SHARE), 1),
      sizeCalculation: (entry, key) => {
        let size = ENTRY_OVERHEAD + entry.body.length + key.length;
        for (const value of Object.values(entry.headers)) size += value.length;
        for (const tag of entry.tags) size += tag.length + TAG_OVERHEAD;
        return size;
      },
      ttl: maxAgeMs,
      dispose: (entry, key) => {
        if (clearing) return;
        for (const tag of entry.tags) {
          const keys = byTag.get(tag);
          keys?.delete(key);
          if (keys?.size === 0) byTag.delete(tag);
        }
      },
    });
    const seenBefore = doorkeeper();

    // --- what replicas must have replayed (see the header) ---
    /** The highest WAL position of an eviction received. */
    let evictedUpTo = 0;
    /** performance.now() of the latest eviction whose position is unknown, until a later position is sampled. */
    let unknownSince: number | null = null;
    /** Per writer: the position of their latest write and when this instance heard of it. */
    const written = new Map<number, { position: number; at: number }>();
    function wrote(writers: string[], position: number): void {
      // Only reads on replicas need to know (readerFor); without them every read is on the primary.
      if (reads === null) return;
      const at = performance.now();
      for (const writer of writers) {
        const id = Number(writer);
        written.set(id, { position: Math.max(position, written.get(id)?.position ?? 0), at });
      }
    }
    function forgetOldWrites(): void {
      const oldest = performance.now() - 2 * (reads?.maxLagMs ?? 0);
      for (const [id, write] of written) if (write.at < oldest) written.delete(id);
    }
    /** Where a read of a cached route goes: a replica that has what this reader must see, or null (the primary). */
    function readerFor(request: FastifyRequest, storable: boolean): Queryable | null {
      if (reads === null || !healthy()) return null;
      let atLeast = request.user ? (written.get(request.user.id)?.position ?? 0) : 0;
      if (storable) {
        if (unknownSince !== null) {
          const position = reads.positionAfter(unknownSince);
          if (position === undefined) return null;
          evictedUpTo = Math.max(evictedUpTo, position);
          unknownSince = null;
        }
        atLeast = Math.max(atLeast, evictedUpTo);
      }
      const reader = reads.reader(atLeast);
      return reader === app.db ? null : reader;
    }

    let epoch = 0;
    const recent: { epoch: number; tags: Set<string> | null }[] = [];
    /** `position`: the WAL position the eviction's write reached, when known. */
    function evict(tags: Iterable<string> | null, position?: number): void {
      if (position === undefined) unknownSince = performance.now();
      else evictedUpTo = Math.max(evictedUpTo, position);
      epoch += 1;
      const set = tags === null ? null : new Set(tags);
      recent.push({ epoch, tags: set });
      if (recent.length > RECENT_EVICTIONS) recent.shift();
      if (set === null || set.has(FLUSH_ALL)) {
        clearing = true;
        entries.clear();
        clearing = false;
        byTag.clear();
        return;
      }
      for (const tag of set) {
        const keys = byTag.get(tag);
        if (keys) for (const key of [...keys]) entries.delete(key);
      }
    }
    /** Whether an eviction since `since` may have touched an answer with these tags. */
    function evictedSince(since: number, tags: string[]): boolean {
      if (since === epoch) return false;
      const oldest = recent[0];
      if (!oldest || oldest.epoch > since + 1) return true;
      for (const eviction of recent) {
        if (eviction.epoch <= since) continue;
        if (eviction.tags === null || eviction.tags.has(FLUSH_ALL) || tags.some((tag) => eviction.tags!.has(tag))) return true;
      }
      return false;
    }

    // --- the listening connection ---
    let listener: pg.Client | undefined;
    let listening = false;
    let closing = false;
    let retry: NodeJS.Timeout | undefined;
    /** performance.now() when the last fence that came back was sent: every change committed before it has been heard. */
    let sureAt = -Infinity;
    interface Fence {
      sentAt: number;
      /** This instance (its own notification has not come back) and the peers that have not confirmed it. */
      awaiting: Set<string>;
      done(confirmed: boolean): void;
    }
    const fences = new Map<string, Fence>();
    const releaseFences = () => {
      for (const fence of fences.values()) fence.done(false);
      fences.clear();
    };
    /** Other caching instances, by id: when their last notification (a heartbeat at least) arrived. */
    const peers = new Map<string, number>();
    const livePeers = () => {
      const now = performance.now();
      for (const [peer, seen] of peers) if (now - seen > PEER_TTL_MS) peers.delete(peer);
      return peers.keys();
    };
    const healthy = () => listening && performance.now() - sureAt < SURE_FOR_MS;

    function confirmed(id: string, by: string): void {
      const fence = fences.get(id);
      if (!fence) return;
      if (by === instance) sureAt = Math.max(sureAt, fence.sentAt);
      fence.awaiting.delete(by);
      if (fence.awaiting.size === 0) fence.done(true);
    }

    /**
     * Payloads: `<fence>` (heartbeat), `<fence> <tag>…` (changes; `*` flushes
     * all), `<fence> @<fence>` (a peer confirms it has evicted what that fence
     * named), `<fence> @bye` (a peer stops), `` (a trigger: flush all). A fence
     * id is `<instance>.<sequence>`, followed by `~` when sent through the pool
     * (no one is waiting for confirmations of it).
     */
    function onNotification(client: pg.Client, payload: string): void {
      if (payload === '') return evict(null);
      const [id = '', ...words] = payload.split(' ');
      const sender = id.slice(0, id.indexOf('.'));
      // A change's writers (~) and position (!), then its tags.
      let position: number | undefined;
      const writers: string[] = [];
      const tags: string[] = [];
      for (const word of words) {
        if (word.startsWith('~')) writers.push(word.slice(1));
        else if (word.startsWith('!')) position = parseLsn(word.slice(1));
        else tags.push(word);
      }
      // Sent through the pool by an instance that does not listen: no position, so none of the writers' reads may go to a replica.
      if (writers.length) wrote(writers, position ?? Infinity);
      // Our own fences: their tags were evicted here before they were sent.
      if (sender === instance) {
        if (position !== undefined && tags.length) evictedUpTo = Math.max(evictedUpTo, position);
        return confirmed(id, instance);
      }
      const first = tags[0];
      // Peers are the instances that listen: they send heartbeats and confirmations, while an
      // instance with the cache off (or its listener down) announces through its pool and confirms nothing.
      if (first === undefined) {
        peers.set(sender, performance.now());
      } else if (first === '@bye') {
        peers.delete(sender);
      } else if (first.startsWith('@')) {
        peers.set(sender, performance.now());
        confirmed(first.slice(1), sender);
      } else {
        evict(tags, position);
        if (!id.endsWith(UNCONFIRMED)) client.query(NOTIFY, [CHANGES_CHANNEL, `${instance}.${++seq} @${id}`]).catch(() => undefined);
      }
    }

    function drop(client: pg.Client, why: string): void {
      if (client !== listener) return;
      listener = undefined;
      if (listening && !closing) app.log.warn(`response cache ${why}: serving from the database until it listens again`);
      listening = false;
      evict(null);
      releaseFences();
      // end() waits for the server, which a stalled connection never answers.
      destroy(client);
      client.end().catch(() => undefined);
      if (!closing) retry = setTimeout(() => void listen(), RECONNECT_DELAY_MS);
    }

    async function listen(): Promise<void> {
      const client = new pg.Client({
        connectionString,
        application_name: 'posts-api-cache',
        connectionTimeoutMillis: 3_000,
        keepAlive: true,
        // Its only writes are announcements: they need no durability.
        options: '-c synchronous_commit=off',
      });
      listener = client;
      client.on('error', () => drop(client, 'listener lost'));
      client.on('end', () => drop(client, 'listener lost'));
      client.on('notification', ({ payload = '' }) => onNotification(client, payload));
      try {
        await client.connect();
        await client.query(`LISTEN ${CHANGES_CHANNEL}`);
      } catch {
        drop(client, 'listener could not connect');
        return;
      }
      if (closing || client !== listener) {
        await client.end().catch(() => undefined);
        return;
      }
      // Whatever happened while nobody listened is unknown: start empty.
      evict(null);
      sureAt = performance.now();
      listening = true;
      // Let the other instances know at once that they have one more to wait for.
      void publish([]);
    }

    /**
     * NOTIFYs `tags` and waits, a second at most, until the notification is back
     * on this instance's listener and every live peer has confirmed it (for
     * changes), or merely until it is sent when this instance does not listen.
     */
    async function sendFence(tags: Set<string>, writers: Set<number>): Promise<void> {
      const client = listening ? listener : undefined;
      const id = `${instance}.${++seq}${client ? '' : UNCONFIRMED}`;
      const payload = fencePayload(id, tags, writers);
      if (!client) {
        if (tags.size === 0) return;
        const sent = app.db.query(NOTIFY, [CHANGES_CHANNEL, payload]).then(
          () => true,
          (error: unknown) => {
            // The write has committed; its answer must not fail. Instances whose
            // listener is cut off by the same outage serve nothing from their caches.
            app.log.warn({ err: error }, 'could not announce a change to the other instances');
            return true;
          },
        );
        if (!(await within(sent, FENCE_TIMEOUT_MS))) app.log.warn('announcing a change timed out');
        return;
      }
      const awaiting = new Set([instance, ...(tags.size ? livePeers() : [])]);
      const back = new Promise<boolean>((done) => fences.set(id, { sentAt: performance.now(), awaiting, done }));
      client.query(tags.size ? NOTIFY_CHANGE : NOTIFY, [CHANGES_CHANNEL, payload]).catch(() => fences.get(id)?.done(false));
      const complete = await within(back, FENCE_TIMEOUT_MS);
      fences.delete(id);
      if (complete) return;
      if (awaiting.has(instance)) drop(client, 'listener stalled');
      else app.log.warn({ peers: [...awaiting] }, 'instances did not confirm a change in time; they may serve it stale until their max age');
    }

    /**
     * One fence in flight at a time; tags arriving meanwhile need one sent after
     * their commit, and all of them share the next.
     */
    let next: { tags: Set<string>; writers: Set<number>; done: Promise<void>; resolve: () => void } | null = null;
    let flying = false;
    async function drain(): Promise<void> {
      flying = true;
      while (next) {
        const batch = next;
        next = null;
        await sendFence(batch.tags, batch.writers);
        batch.resolve();
      }
      flying = false;
    }
    function publish(tags: Iterable<string>, writer?: number): Promise<void> {
      if (!next) {
        let resolve!: () => void;
        const done = new Promise<void>((r) => (resolve = r));
        next = { tags: new Set(), writers: new Set(), done, resolve };
      }
      for (const tag of tags) next.tags.add(tag);
      if (writer !== undefined) next.writers.add(writer);
      const { done } = next;
      if (!flying) void drain();
      return done;
    }

    app.decorateRequest('cacheChanges', null);
    app.decorateRequest('cacheEpoch', null);
    app.decorateRequest('reader', null);
    app.decorateRequest('changed', function (this: FastifyRequest, how: ChangeKind, collection: string, resource: { id: number }) {
      this.cacheChanges ??= new Set();
      for (const tag of changeTags(how, collection, resource)) this.cacheChanges.add(tag);
    });
    app.decorate('responseCache', {
      sync: () => (listening ? publish([]) : Promise.resolve()),
      state: (): CacheState => (!enabled ? 'off' : healthy() ? 'on' : 'bypassed'),
    });

    const shapes = new Map<string, RouteShape>();
    const shapeOf = (url: string) => {
      let shape = shapes.get(url);
      if (!shape) shapes.set(url, (shape = routeShape(url)));
      return shape;
    };

    /**
     * Stores a storable miss's 200. Its tags come from the body as sent, parsed
     * again here: only a URL missed twice gets this far, so parsing the few
     * answers stored costs less than a preSerialization hook on every answer.
     */
    function store(request: FastifyRequest, reply: FastifyReply, since: number, payload: unknown): void {
      if (reply.statusCode !== 200 || typeof payload !== 'string' || !healthy()) return;
      const params = request.params as Record<string, string>;
      const query = request.query as Record<string, unknown>;
      const tags = entryTags(shapeOf(request.routeOptions.url ?? ''), params, query, JSON.parse(payload));
      if (evictedSince(since, tags)) return;
      const headers: Record<string, string> = {};
      for (const name of KEPT_HEADERS) {
        const value = reply.getHeader(name);
        if (typeof value === 'string') headers[name] = value;
      }
      // A body of its own: Buffer.from() puts small strings in a shared 8 KiB slab, which a kept
      // slice holds entirely (6.7 KiB held per 573-byte post, measured), unseen by the budget.
      const body = Buffer.allocUnsafeSlow(Buffer.byteLength(payload));
      body.write(payload);
      const entry = { body, headers, tags };
      if (entries.set(request.url, entry).has(request.url)) {
        for (const tag of tags) {
          let keys = byTag.get(tag);
          if (!keys) byTag.set(tag, (keys = new Set()));
          keys.add(request.url);
        }
      }
    }

    // One onSend hook for both jobs, so an answer that is neither (most) pays for one hook.
    // Announce committed changes (also with this instance's cache off: the others' may be on).
    // A 5xx after changes were recorded may follow a commit whose answer was lost: announce it too.
    app.addHook('onSend', (request, reply, payload, done) => {
      const changes = request.cacheChanges;
      if (changes === null) {
        // cacheEpoch is set only with the cache on (the onRequest hook below).
        if (request.cacheEpoch !== null) store(request, reply, request.cacheEpoch, payload);
        return done(null, payload);
      }
      const status = reply.statusCode;
      if (status >= 300 && status < 500) return done(null, payload);
      if (enabled) evict(changes);
      void publish(changes, request.user?.id).then(() => done(null, payload));
    });

    const heartbeat = setInterval(() => {
      if (listening && !flying) void publish([]);
      forgetOldWrites();
    }, HEARTBEAT_MS);
    heartbeat.unref();

    app.addHook('onClose', async () => {
      closing = true;
      clearInterval(heartbeat);
      clearTimeout(retry);
      listening = false;
      releaseFences();
      const client = listener;
      listener = undefined;
      if (!client) return;
      // Bounded: a stalled connection answers neither.
      const bye = client.query(NOTIFY, [CHANGES_CHANNEL, `${instance}.${++seq} @bye`]).then(() => client.end());
      if (!(await within(bye.then(() => true, () => true), FENCE_TIMEOUT_MS))) {
        destroy(client);
      }
    });

    if (listens) await listen();

    // A replica within the lag bound may not have replayed what an anonymous reader asks for
    // yet: a 404 read there is read again on the primary, so what exists is never a 404.
    if (reads !== null) {
      app.addHook('onRoute', (route) => {
        if (!route.config?.cached) return;
        const handler = route.handler;
        route.handler = async function (this: typeof app, request, reply) {
          try {
            return await handler.call(this, request, reply);
          } catch (error) {
            if (request.reader === null || (error as { statusCode?: unknown }).statusCode !== 404) throw error;
            request.reader = null;
            return handler.call(this, request, reply);
          }
        };
      });
    }

    if (!enabled) {
      // No cache, but replicas: the cached routes' reads are routed all the same.
      if (reads !== null) {
        app.addHook('onRequest', (request, _reply, done) => {
          if (request.method === 'GET' && request.routeOptions.config.cached) request.reader = readerFor(request, false);
          done();
        });
      }
      return;
    }

    // X-Cache (hit, miss, bypass) on every cacheable GET: operators and the
    // bench read hit rates off the answers without a metrics endpoint.
    app.addHook('onRequest', (request, reply, done) => {
      if (request.method !== 'GET' || !request.routeOptions.config.cached) return done();
      if (!healthy()) {
        reply.header('x-cache', 'bypass');
        return done();
      }
      const entry = entries.get(request.url);
      if (!entry) {
        reply.header('x-cache', 'miss');
        if (seenBefore(request.url)) request.cacheEpoch = epoch;
        if (reads !== null) request.reader = readerFor(request, request.cacheEpoch !== null);
        return done();
      }
      reply.header('x-cache', 'hit');
      const condition = request.headers['if-none-match'];
      const etag = entry.headers.etag;
      if (condition !== undefined && etag !== undefined && namesTag(condition, etag)) {
        const { 'content-type': _none, ...headers } = entry.headers;
        reply.code(304).headers(headers).send();
        return;
      }
      reply.headers(entry.headers).send(entry.body);
    });
  },
  { name: 'response-cache', dependencies: ['db', 'auth', 'rate-limit', 'http-caching'] },
);
