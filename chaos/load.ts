/**
 * The clients: each request's outcome is recorded as the client saw it
 * (status, or cut off, or no answer within the hang limit), with its timing,
 * so the checker can compare what clients were told with what the database
 * holds. Writes carry a unique tag (a post's title, a comment's body).
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { STATEMENT_TIMEOUT_MS } from './procs.js';

/**
 * The longest any request may take by the service's documented bounds: the
 * statement timeout, plus the pool's wait for a connection (3 s), plus 1.5 s
 * of slack for this loaded 2-core machine.
 */
export const BOUND_MS = STATEMENT_TIMEOUT_MS + 3000 + 1500;
/** A request still unanswered after this long is recorded as hung and abandoned. */
const HANG_MS = 30_000;

/** Milliseconds since the run started: one clock for outcomes and faults. */
const T0 = performance.now();
export const now = () => performance.now() - T0;

/** Status 0: the connection failed or was cut; -1: no answer within HANG_MS. */
export interface Outcome {
  method: string;
  route: string;
  instance: string;
  status: number;
  /** The error body's message for 4xx/5xx, or the network error. */
  message?: string;
  start: number;
  end: number;
}

export interface Write extends Outcome {
  kind: 'post' | 'comment';
  /** Index of the client (user) that sent it. */
  client: number;
  tag: string;
  key?: string;
  postId?: number;
  id?: number;
  /** Retries with the same key after an unacknowledged first attempt. */
  retries?: Outcome[];
  retriedId?: number;
  /** The retry's 201 was the stored first answer (Idempotent-Replayed): the first attempt had committed. */
  replayed?: boolean;
}

export interface Answer {
  status: number;
  body: unknown;
  headers: Headers | undefined;
  message?: string;
}

export async function request(
  base: string,
  method: string,
  path: string,
  { token, body, key, timeoutMs = HANG_MS }: { token?: string; body?: unknown; key?: string; timeoutMs?: number } = {},
): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (key) headers['idempotency-key'] = key;
  try {
    const res = await fetch(`${base}${path}`, {
      method,
      headers,
      ...(body !== undefined && { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = text;
    }
    const message =
      res.status >= 400
        ? ((json as { message?: string } | undefined)?.message ?? String(text).slice(0, 120))
        : undefined;
    return { status: res.status, body: json, headers: res.headers, ...(message !== undefined && { message }) };
  } catch (error) {
    const e = error as Error & { cause?: { code?: string; message?: string } };
    if (e.name === 'TimeoutError')
      return { status: -1, body: undefined, headers: undefined, message: `no answer in ${timeoutMs} ms` };
    return { status: 0, body: undefined, headers: undefined, message: e.cause?.code ?? e.cause?.message ?? e.message };
  }
}

export interface Client {
  userId: number;
  token: string;
}

/** Signs up `n` users through the service and logs each in. */
export async function signUpClients(base: string, n: number, label: string): Promise<Client[]> {
  return Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const email = `${label}-${i}-${randomUUID().slice(0, 8)}@chaos.test`;
      const password = 'chaos password';
      const user = await request(base, 'POST', '/users', { body: { name: `${label} ${i}`, email, password } });
      if (user.status !== 201) throw new Error(`sign-up answered ${user.status}: ${user.message}`);
      const token = await request(base, 'POST', '/tokens', { body: { email, password } });
      if (token.status !== 201) throw new Error(`log-in answered ${token.status}: ${token.message}`);
      return { userId: (user.body as { id: number }).id, token: (token.body as { token: string }).token };
    }),
  );
}

export interface LoadOptions {
  /** A unique prefix of every tag this load writes. */
  label: string;
  clients: Client[];
  /** Concurrent writers. */
  writers: number;
  /** Concurrent anonymous readers (GET a post, its comments, the first page). */
  readers?: number;
  /** Which instance (base URL and name) writer or reader `i` talks to now. */
  target(i: number): { name: string; url: string };
  /** Posts that exist for comments (grows with acknowledged post creates). */
  posts: number[];
  /** Share of writes sent with an Idempotency-Key. */
  keyed?: number;
}

/** A running mixed load: half post creates, half comment creates, plus optional readers. */
export class Load {
  readonly writes: Write[] = [];
  readonly reads: Outcome[] = [];
  private running = true;
  private loops: Promise<void>[] = [];
  private serial = 0;

  constructor(private o: LoadOptions) {
    for (let i = 0; i < o.writers; i++) this.loops.push(this.writer(i));
    for (let i = 0; i < (o.readers ?? 0); i++) this.loops.push(this.reader(o.writers + i));
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
  }

  private async writer(i: number): Promise<void> {
    const clientIndex = i % this.o.clients.length;
    const client = this.o.clients[clientIndex]!;
    while (this.running) {
      const target = this.o.target(i);
      const kind = Math.random() < 0.5 || this.o.posts.length === 0 ? 'post' : 'comment';
      const tag = `${this.o.label}-${i}-${(this.serial += 1)}`;
      const key = Math.random() < (this.o.keyed ?? 0.5) ? randomUUID() : undefined;
      const postId = kind === 'comment' ? this.o.posts[Math.floor(Math.random() * this.o.posts.length)] : undefined;
      const write: Write = {
        kind,
        client: clientIndex,
        tag,
        method: 'POST',
        route: kind === 'post' ? '/posts' : '/posts/{id}/comments',
        instance: target.name,
        status: 0,
        start: now(),
        end: 0,
        ...(key && { key }),
        ...(postId && { postId }),
      };
      const answer = await send(target.url, write, client.token);
      write.end = now();
      write.status = answer.status;
      if (answer.message !== undefined) write.message = answer.message;
      if (answer.status === 201) {
        write.id = (answer.body as { id: number }).id;
        if (kind === 'post') this.o.posts.push(write.id);
      }
      this.writes.push(write);
      // A failing instance answers at once: no spin while it does.
      if (answer.status !== 201) await sleep(20);
    }
  }

  private async reader(i: number): Promise<void> {
    while (this.running) {
      const target = this.o.target(i);
      const post = this.o.posts[Math.floor(Math.random() * this.o.posts.length)];
      const choice = Math.random();
      const [route, path] =
        post === undefined || choice < 0.2
          ? ['/posts', '/posts?perPage=20&sort=-id']
          : choice < 0.6
            ? ['/posts/{id}', `/posts/${post}`]
            : ['/posts/{id}/comments', `/posts/${post}/comments?perPage=20`];
      const start = now();
      const answer = await request(target.url, 'GET', path);
      this.reads.push({
        method: 'GET',
        route,
        instance: target.name,
        status: answer.status,
        start,
        end: now(),
        ...(answer.message !== undefined && { message: answer.message }),
      });
      if (answer.status !== 200) await sleep(20);
    }
  }
}

function bodyOf(write: Write): { title: string; body: string } | { body: string } {
  return write.kind === 'post' ? { title: write.tag, body: `chaos body of ${write.tag}` } : { body: write.tag };
}

function send(base: string, write: Write, token: string): Promise<Answer> {
  const path = write.kind === 'post' ? '/posts' : `/posts/${write.postId}/comments`;
  return request(base, 'POST', path, { token, body: bodyOf(write), ...(write.key && { key: write.key }) });
}

/**
 * A client's retry of every keyed write that was not acknowledged, with the
 * same key and body, until it is answered 201 (a replay or the first
 * creation) or `attempts` run out; a 409 (the first request still in flight)
 * is retried a moment later, as the contract says.
 */
export async function retryKeyed(
  writes: Write[],
  clients: Client[],
  base: (w: Write) => string,
  attempts = 20,
): Promise<void> {
  const pending = writes.filter((w) => w.key && w.status !== 201);
  // A service that hangs every retry must not hold the run: what is left after this is reported unresolved.
  const deadline = now() + 60_000;
  await Promise.all(
    chunk(pending, 8).map(async (group) => {
      for (const w of group) {
        w.retries = [];
        for (let attempt = 0; attempt < attempts && now() < deadline; attempt++) {
          const start = now();
          const answer = await send(base(w), w, clients[w.client]!.token);
          w.retries.push({
            method: 'POST',
            route: w.route,
            instance: 'retry',
            status: answer.status,
            start,
            end: now(),
            ...(answer.message !== undefined && { message: answer.message }),
          });
          if (answer.status === 201) {
            w.retriedId = (answer.body as { id: number }).id;
            w.replayed = answer.headers?.get('idempotent-replayed') === 'true';
            break;
          }
          if (answer.status !== 409 && answer.status < 500 && answer.status > 0) break;
          await sleep(250);
        }
      }
    }),
  );
}

function chunk<T>(items: T[], n: number): T[][] {
  const groups: T[][] = Array.from({ length: n }, () => []);
  items.forEach((item, i) => groups[i % n]!.push(item));
  return groups.filter((g) => g.length);
}

export function percentile(values: number[], p: number): number | undefined {
  if (!values.length) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}
