/**
 * How instances tell each other what a committed write changed, over
 * LISTEN/NOTIFY; a writer waits, bounded, until every live peer confirmed
 * (docs/architecture.md, "The response cache").
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { FastifyBaseLogger } from 'fastify';
import { CHANGES_CHANNEL } from '../db/pool.js';
import { UNCONFIRMED, fencePayload, parseFence } from './fence.js';

const RECONNECT_DELAY_MS = 1_000;
export const HEARTBEAT_MS = 1_000;
const FENCE_TIMEOUT_MS = 1_000;
/** This instance is sure of what it heard while its last returned fence is younger than this. */
const SURE_FOR_MS = HEARTBEAT_MS + FENCE_TIMEOUT_MS;
const PEER_TTL_MS = 2_500;
const NOTIFY = 'SELECT pg_notify($1, $2)';
/** The WAL position after the commit, computed by the NOTIFY itself: no extra round trip. */
const NOTIFY_CHANGE = "SELECT pg_notify($1, $2 || ' !' || pg_current_wal_insert_lsn()::text)";

export interface ChangeListener {
  /** null: everything is stale. */
  evicted?(labels: string[] | null, position?: number): void;
  /** One of this instance's own changes, evicted here before it was sent, reached `position`. */
  reached?(position: number): void;
  /** Infinity: position unknown. */
  wrote?(writers: string[], position: number): void;
}

interface PendingFence {
  sentAt: number;
  awaiting: Set<string>;
  done(confirmed: boolean): void;
}

/** Closes a client's socket at once: end() waits for the server, which a stalled connection never answers. */
const destroy = (client: pg.Client) =>
  (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();

async function within(promise: Promise<boolean>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => (timer = setTimeout(resolve, ms, false)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export interface ChangeBusOptions {
  /** A session of its own for LISTEN: never through a pooler in transaction mode. */
  connectionString: string;
  pool: pg.Pool;
  log: FastifyBaseLogger;
}

export class ChangeBus {
  private readonly instance = randomBytes(6).toString('base64url');
  private seq = 0;
  private readonly listeners: ChangeListener[] = [];
  private started = false;
  private listener: pg.Client | undefined;
  private listening = false;
  private closing = false;
  private retry: NodeJS.Timeout | undefined;
  private sureAt = -Infinity;
  private readonly fences = new Map<string, PendingFence>();
  private readonly peers = new Map<string, number>();
  /** One fence in flight at a time; changes arriving meanwhile share the next one. */
  private next: { labels: Set<string>; writers: Set<number>; done: Promise<void>; resolve: () => void } | null = null;
  private flying = false;
  private readonly heartbeat: NodeJS.Timeout;
  private readonly options: ChangeBusOptions;

  constructor(options: ChangeBusOptions) {
    this.options = options;
    this.heartbeat = setInterval(() => {
      if (this.listening && !this.flying) void this.publish([], []);
    }, HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  /** Starts listening (once); until then, and while the listener is down, changes are announced through the pool. */
  async listen(): Promise<void> {
    if (this.started) return;
    this.started = true;
    await this.connect();
  }

  subscribe(listener: ChangeListener): void {
    this.listeners.push(listener);
  }

  healthy(): boolean {
    return this.listening && performance.now() - this.sureAt < SURE_FOR_MS;
  }

  announce(labels: Set<string>, writer?: number): Promise<void> {
    this.evicted([...labels]);
    return this.publish(labels, writer === undefined ? [] : [writer]);
  }

  sync(): Promise<void> {
    return this.listening ? this.publish([], []) : Promise.resolve();
  }

  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.heartbeat);
    clearTimeout(this.retry);
    this.listening = false;
    this.releaseFences();
    const client = this.listener;
    this.listener = undefined;
    if (!client) return;
    // Bounded: a stalled connection answers neither.
    const bye = client.query(NOTIFY, [CHANGES_CHANNEL, `${this.instance}.${++this.seq} @bye`]).then(() => client.end());
    if (
      !(await within(
        bye.then(
          () => true,
          () => true,
        ),
        FENCE_TIMEOUT_MS,
      ))
    )
      destroy(client);
  }

  private evicted(labels: string[] | null, position?: number): void {
    for (const listener of this.listeners) listener.evicted?.(labels, position);
  }

  private releaseFences(): void {
    for (const fence of this.fences.values()) fence.done(false);
    this.fences.clear();
  }

  private livePeers(): Iterable<string> {
    const now = performance.now();
    for (const [peer, seen] of this.peers) if (now - seen > PEER_TTL_MS) this.peers.delete(peer);
    return this.peers.keys();
  }

  private confirmed(id: string, by: string): void {
    const fence = this.fences.get(id);
    if (!fence) return;
    if (by === this.instance) this.sureAt = Math.max(this.sureAt, fence.sentAt);
    fence.awaiting.delete(by);
    if (fence.awaiting.size === 0) fence.done(true);
  }

  private onNotification(client: pg.Client, payload: string): void {
    if (payload === '') return this.evicted(null);
    const { id, sender, writers, position, words } = parseFence(payload);
    // From an instance that does not listen: no position, so the writers' reads stay on the primary.
    if (writers.length) for (const l of this.listeners) l.wrote?.(writers, position ?? Infinity);
    if (sender === this.instance) {
      if (position !== undefined && words.length) for (const l of this.listeners) l.reached?.(position);
      return this.confirmed(id, this.instance);
    }
    const first = words[0];
    if (first === undefined) {
      this.peers.set(sender, performance.now());
    } else if (first === '@bye') {
      this.peers.delete(sender);
    } else if (first.startsWith('@')) {
      this.peers.set(sender, performance.now());
      this.confirmed(first.slice(1), sender);
    } else {
      this.evicted(words, position);
      if (!id.endsWith(UNCONFIRMED)) {
        client.query(NOTIFY, [CHANGES_CHANNEL, `${this.instance}.${++this.seq} @${id}`]).catch(() => undefined);
      }
    }
  }

  private drop(client: pg.Client, why: string): void {
    if (client !== this.listener) return;
    this.listener = undefined;
    if (this.listening && !this.closing)
      this.options.log.warn(`response cache ${why}: serving from the database until it listens again`);
    this.listening = false;
    this.evicted(null);
    this.releaseFences();
    destroy(client);
    client.end().catch(() => undefined);
    if (!this.closing) this.retry = setTimeout(() => void this.connect(), RECONNECT_DELAY_MS);
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({
      connectionString: this.options.connectionString,
      application_name: 'posts-api-cache',
      connectionTimeoutMillis: 3_000,
      keepAlive: true,
      // Its only writes are announcements: they need no durability.
      options: '-c synchronous_commit=off',
    });
    this.listener = client;
    client.on('error', () => this.drop(client, 'listener lost'));
    client.on('end', () => this.drop(client, 'listener lost'));
    client.on('notification', ({ payload = '' }) => this.onNotification(client, payload));
    try {
      await client.connect();
      await client.query(`LISTEN ${CHANGES_CHANNEL}`);
    } catch {
      this.drop(client, 'listener could not connect');
      return;
    }
    if (this.closing || client !== this.listener) {
      await client.end().catch(() => undefined);
      return;
    }
    // Whatever happened while nobody listened is unknown: start empty.
    this.evicted(null);
    this.sureAt = performance.now();
    this.listening = true;
    // The other instances learn at once that they have one more to wait for.
    void this.publish([], []);
  }

  private async sendUnconfirmed(labels: Set<string>, writers: Set<number>): Promise<void> {
    if (labels.size === 0) return;
    const { pool, log } = this.options;
    const payload = fencePayload(`${this.instance}.${++this.seq}${UNCONFIRMED}`, labels, writers);
    const sent = pool.query(NOTIFY, [CHANGES_CHANNEL, payload]).then(
      () => true,
      (error: unknown) => {
        // The write has committed; its answer must not fail. Instances cut off by the same outage serve nothing cached.
        log.warn({ err: error }, 'could not announce a change to the other instances');
        return true;
      },
    );
    if (!(await within(sent, FENCE_TIMEOUT_MS))) log.warn('announcing a change timed out');
  }

  private async sendFence(labels: Set<string>, writers: Set<number>): Promise<void> {
    const client = this.listening ? this.listener : undefined;
    if (!client) return this.sendUnconfirmed(labels, writers);
    const id = `${this.instance}.${++this.seq}`;
    const awaiting = new Set([this.instance, ...(labels.size ? this.livePeers() : [])]);
    const back = new Promise<boolean>((done) => this.fences.set(id, { sentAt: performance.now(), awaiting, done }));
    const payload = fencePayload(id, labels, writers);
    client
      .query(labels.size ? NOTIFY_CHANGE : NOTIFY, [CHANGES_CHANNEL, payload])
      .catch(() => this.fences.get(id)?.done(false));
    const complete = await within(back, FENCE_TIMEOUT_MS);
    this.fences.delete(id);
    if (complete) return;
    if (awaiting.has(this.instance)) this.drop(client, 'listener stalled');
    else
      this.options.log.warn(
        { peers: [...awaiting] },
        'instances did not confirm a change in time; they may serve it stale until their max age',
      );
  }

  private async drain(): Promise<void> {
    this.flying = true;
    while (this.next) {
      const batch = this.next;
      this.next = null;
      await this.sendFence(batch.labels, batch.writers);
      batch.resolve();
    }
    this.flying = false;
  }

  private publish(labels: Iterable<string>, writers: Iterable<number>): Promise<void> {
    if (!this.next) {
      let resolve!: () => void;
      const done = new Promise<void>((r) => (resolve = r));
      this.next = { labels: new Set(), writers: new Set(), done, resolve };
    }
    for (const label of labels) this.next.labels.add(label);
    for (const writer of writers) this.next.writers.add(writer);
    const { done } = this.next;
    if (!this.flying) void this.drain();
    return done;
  }
}
