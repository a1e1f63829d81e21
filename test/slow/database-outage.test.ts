/**
 * PostgreSQL stopped or crashed, then started, while requests flow (issue 9), on a private
 * cluster this file starts (never the machine's shared server): reads, writes,
 * authenticated requests and readiness checks answer 503 with Retry-After and
 * the contract's body while it is down, liveness stays 200, nothing is ever a
 * 500, the process recovers by itself once the database is back, and every
 * write that was acknowledged with 201 is in the database afterwards.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { signUp, type SignedUp } from '../helpers/factories.js';
import { MISCOUNTED_POSTS } from '../helpers/database.js';
import { expectContractResponse } from '../helpers/contract.js';
import { startCluster, waitUntil, type Cluster } from '../helpers/processes.js';

let cluster: Cluster;
let app: FastifyInstance;
let ann: SignedUp;
let postId: number;

beforeAll(async () => {
  cluster = await startCluster();
  const config = loadConfig({ LOG_LEVEL: 'silent', RATE_LIMIT_MAX: '1000000', RATE_LIMIT_AUTH_MAX: '1000000' });
  app = (await buildApp({ ...config, databaseUrl: cluster.url })) as unknown as FastifyInstance;
  await app.ready();
  ann = await signUp(app, { name: 'Ann' });
  postId = (
    await app.inject({ method: 'POST', url: '/posts', headers: ann.auth, payload: { title: 't', body: 'b' } })
  ).json().id;
});
afterAll(async () => {
  await app?.close();
  await cluster?.destroy();
});

type Phase = 'up' | 'down' | 'back';
interface Outcome {
  phase: Phase;
  kind: string;
  status: number;
  /** For acknowledged writes: what the client was told exists. */
  created?: { id: number; title: string; table: 'posts' | 'comments' };
}

it.each([
  ['stopped (fast shutdown)', () => cluster.stop()],
  ['crashed (immediate shutdown, crash recovery on start)', () => cluster.crash()],
])(
  '%s: 503 with Retry-After while it is down, full recovery after, no acknowledged write lost',
  async (_how, takeDown) => {
    let phase: Phase = 'up';
    let running = true;
    let serial = 0;
    const outcomes: Outcome[] = [];

    const kinds: Record<string, () => Promise<Outcome>> = {
      'POST /posts': async () => {
        const title = `outage ${(serial += 1)}`;
        const res = await app.inject({
          method: 'POST',
          url: '/posts',
          headers: ann.auth,
          payload: { title, body: 'b' },
        });
        check(res);
        return {
          phase,
          kind: 'POST /posts',
          status: res.statusCode,
          ...(res.statusCode === 201 && { created: { id: res.json().id, title, table: 'posts' as const } }),
        };
      },
      'POST comment': async () => {
        const body = `comment ${(serial += 1)}`;
        const res = await app.inject({
          method: 'POST',
          url: `/posts/${postId}/comments`,
          headers: ann.auth,
          payload: { body },
        });
        check(res);
        return {
          phase,
          kind: 'POST comment',
          status: res.statusCode,
          ...(res.statusCode === 201 && { created: { id: res.json().id, title: body, table: 'comments' as const } }),
        };
      },
      'PATCH /posts/{id}': async () => {
        const res = await app.inject({
          method: 'PATCH',
          url: `/posts/${postId}`,
          headers: ann.auth,
          payload: { title: `patched ${(serial += 1)}` },
        });
        check(res);
        return { phase, kind: 'PATCH /posts/{id}', status: res.statusCode };
      },
      'GET /posts': async () => {
        const res = await app.inject({ url: '/posts?perPage=5&sort=-id' });
        check(res);
        return { phase, kind: 'GET /posts', status: res.statusCode };
      },
      'GET /users/me': async () => {
        const res = await app.inject({ url: '/users/me', headers: ann.auth });
        check(res);
        return { phase, kind: 'GET /users/me', status: res.statusCode };
      },
      'GET /health/ready': async () => {
        const res = await app.inject({ url: '/health/ready' });
        check(res);
        return { phase, kind: 'GET /health/ready', status: res.statusCode };
      },
    };
    function check(res: Awaited<ReturnType<FastifyInstance['inject']>>) {
      // Never a 500; while the database is unreachable, the contract's 503 with Retry-After.
      expectContractResponse(res, { allow5xx: [503] });
      if (res.statusCode === 503) expect(res.json().error).toBe('service_unavailable');
    }
    const ok = (o: Outcome) => o.status < 300;

    const workers = Object.values(kinds).map(async (request) => {
      while (running) {
        outcomes.push(await request());
        await sleep(5); // a steady flow, not a spin while every request fails at once
      }
    });
    const seen = (p: Phase, kind: string, test: (o: Outcome) => boolean) =>
      outcomes.some((o) => o.phase === p && o.kind === kind && test(o));

    try {
      await waitUntil('every kind of request succeeds', () => Object.keys(kinds).every((k) => seen('up', k, ok)));

      phase = 'down';
      await takeDown();
      await waitUntil('every kind of request got a 503', () =>
        Object.keys(kinds).every((k) => seen('down', k, (o) => o.status === 503)),
      );
      // The process itself is fine: liveness does not depend on the database.
      expect((await app.inject({ url: '/health/live' })).statusCode).toBe(200);

      await cluster.start();
      phase = 'back';
      // Recovery without a restart: every kind succeeds again, three times in a row.
      await waitUntil(
        'every kind of request succeeds again',
        () =>
          Object.keys(kinds).every((k) => {
            const last = outcomes.filter((o) => o.phase === 'back' && o.kind === k).slice(-3);
            return last.length === 3 && last.every(ok);
          }),
        400,
      );
    } finally {
      running = false;
      await Promise.all(workers);
    }

    // While it was down, nothing succeeded that needed it, except what was already under way.
    const down = outcomes.filter((o) => o.phase === 'down');
    expect(down.filter((o) => o.status === 503).length).toBeGreaterThan(Object.keys(kinds).length);
    for (const o of down) expect([503, 200, 201]).toContain(o.status);

    // Every acknowledged write is there, as acknowledged.
    const created = outcomes.flatMap((o) => (o.created ? [o.created] : []));
    expect(created.length).toBeGreaterThan(2);
    const posts = await app.db.query<{ id: number; title: string }>('SELECT id, title FROM posts WHERE id = ANY($1)', [
      created.filter((c) => c.table === 'posts').map((c) => c.id),
    ]);
    const comments = await app.db.query<{ id: number; title: string }>(
      'SELECT id, body AS title FROM comments WHERE id = ANY($1)',
      [created.filter((c) => c.table === 'comments').map((c) => c.id)],
    );
    const stored = new Map([...posts.rows, ...comments.rows].map((r) => [`${r.id}:${r.title}`, true]));
    expect(created.filter((c) => !stored.has(`${c.id}:${c.title}`))).toEqual([]);
    // And the counters the triggers keep stayed exact through it.
    const { rows } = await app.db.query<{ n: number }>(MISCOUNTED_POSTS);
    expect(rows[0]!.n).toBe(0);
  },
);
