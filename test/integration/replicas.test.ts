/**
 * Reads on a real, asynchronous streaming replica (DATABASE_READ_URL), its lag
 * made by pausing its replay: anonymous reads may lag by the bound and no
 * more, a writer (who sends a token) reads its write at once on any instance, what exists is
 * never a 404 (a replica's 404 is read again on the primary), a replica that
 * is down is skipped. Needs the scale topology (test/helpers/scale-topology.sh,
 * which .ci/run starts): SCALE_ASYNC_REPLICA_URLS names the replica.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { Client } from 'pg';
import { buildApp } from '../../src/app.js';
import { createTestDatabase, onTopology, type TestDatabase } from '../helpers/database.js';
import { createPost, signUp, testConfig, type SignedUp } from '../helpers/factories.js';

const replicaServer = process.env.SCALE_ASYNC_REPLICA_URLS?.split(',')[0];
const MAX_LAG_MS = 1_500;

describe.skipIf(replicaServer === undefined || replicaServer === '')(
  'reads on an asynchronous replica (skipped: needs the scale topology, test/helpers/scale-topology.sh, SCALE_ASYNC_REPLICA_URLS)',
  () => {
    let db: TestDatabase;
    const apps: FastifyInstance[] = [];
    let replica: Client;

    beforeAll(async () => {
      db = await createTestDatabase();
      replica = new Client({ connectionString: replicaServer });
      await replica.connect();
    });
    afterAll(async () => {
      await replica?.query('SELECT pg_wal_replay_resume()').catch(() => undefined);
      await replica?.end();
      await Promise.all(apps.map((app) => app.close()));
      await db?.drop();
    });

    /** An instance reading from the asynchronous replica (or `readUrl`). */
    async function instance(env: Record<string, string> = {}, readUrl?: string): Promise<FastifyInstance> {
      const topology = onTopology(db.url);
      const replicaUrl = new URL(replicaServer!);
      replicaUrl.pathname = new URL(db.url).pathname;
      const config = testConfig({
        ...env,
      });
      const app = (await buildApp({
        ...config,
        ...topology,
        databaseReadMaxLagMs: MAX_LAG_MS,
        databaseReadUrls: [readUrl ?? replicaUrl.toString()],
      })) as unknown as FastifyInstance;
      await app.ready();
      apps.push(app);
      return app;
    }
    /** Until the replica has replayed everything and the instances' checks have seen it. */
    async function caughtUp(...instances: FastifyInstance[]): Promise<void> {
      for (let i = 0; i < 100; i++) {
        if (instances.every((app) => app.replicas!.status().every((r) => r.lagMs < 300))) return;
        await sleep(50);
      }
      throw new Error('the replica did not catch up');
    }
    const get = (app: FastifyInstance, url: string, who?: SignedUp) =>
      app.inject({ method: 'GET', url, headers: who?.auth ?? {} });

    it('with replay paused: anonymous reads lag by the bound at most, the writer reads its write at once on another instance', async () => {
      const a = await instance();
      const b = await instance();
      const ann = await signUp(a);
      await caughtUp(a, b);

      await replica.query('SELECT pg_wal_replay_pause()');
      try {
        const { id } = await createPost(a, ann);
        // The writer, on the other instance: the primary, since the replica has not replayed the write.
        expect((await get(b, `/posts/${id}`, ann)).statusCode).toBe(200);
        expect((await get(b, `/users/${ann.user.id}/posts`, ann)).json().total).toBe(1);
        // An anonymous reader right away: the replica, within its bound (proof that reads go there; offset pages
        // read the primary, cursor pages may not).
        expect((await get(b, '/posts?limit=20')).json().data).toHaveLength(0);
        // Past the bound (plus a check interval), the lagging replica is skipped.
        await sleep(MAX_LAG_MS + 400);
        expect((await get(b, '/posts?limit=20')).json().data).toHaveLength(1);
        expect((await get(a, '/posts?limit=20')).json().data).toHaveLength(1);
      } finally {
        await replica.query('SELECT pg_wal_replay_resume()');
      }
      await caughtUp(a, b);
    });

    it('offset pages read the primary: their snapshot names what the primary committed', async () => {
      const a = await instance();
      const ann = await signUp(a);
      await caughtUp(a);
      await replica.query('SELECT pg_wal_replay_pause()');
      try {
        const { id } = await createPost(a, ann, { title: 'seen by the snapshot' });
        // The writer's first page, on the primary, hands out a snapshot that holds the post.
        const mine = await get(a, '/posts?sort=-id&perPage=1', ann);
        expect(mine.json().data.map((post: { id: number }) => post.id)).toEqual([id]);
        const first = /<([^>]+)>; rel="first"/.exec(String(mine.headers.link))![1]!;
        // An anonymous cursor page reads the replica, which has not replayed the post...
        const cursor = await get(a, '/posts?sort=-id&limit=1');
        expect(cursor.json().data.map((post: { id: number }) => post.id)).not.toContain(id);
        // ...offset pages the primary: anyone following the snapshot, and a first page.
        expect((await get(a, first)).json().data.map((post: { id: number }) => post.id)).toEqual([id]);
        expect((await get(a, '/posts?sort=-id&perPage=1')).json().data.map((post: { id: number }) => post.id)).toEqual([
          id,
        ]);
      } finally {
        await replica.query('SELECT pg_wal_replay_resume()');
      }
    });

    it('what the replica has not replayed yet is no 404 to an anonymous reader: confirmed on the primary first', async () => {
      const a = await instance();
      const ann = await signUp(a);
      await caughtUp(a);
      const before = (await get(a, '/posts?limit=100')).json().data.length as number;

      await replica.query('SELECT pg_wal_replay_pause()');
      try {
        const { id } = await createPost(a, ann, { title: 'just created' });
        const comment = await a.inject({
          method: 'POST',
          url: `/posts/${id}/comments`,
          headers: ann.auth,
          payload: { body: 'hi' },
        });
        expect(comment.statusCode).toBe(201);
        const commentId = comment.json().id as number;
        const bob = await signUp(a);

        // Anonymous reads go to the replica (its cursor page does not show the post yet)...
        expect((await get(a, '/posts?limit=100')).json().data).toHaveLength(before);
        // ...but none of what exists is a 404.
        const post = await get(a, `/posts/${id}`);
        expect(post.statusCode).toBe(200);
        expect(post.json().title).toBe('just created');
        expect((await get(a, `/posts/${id}?fields=title`)).json()).toEqual({ id, title: 'just created' });
        expect((await a.inject({ method: 'HEAD', url: `/posts/${id}` })).statusCode).toBe(200);
        const read = await get(a, `/posts/${id}/comments/${commentId}`);
        expect(read.statusCode).toBe(200);
        expect(read.json().body).toBe('hi');
        const comments = await get(a, `/posts/${id}/comments`);
        expect(comments.statusCode).toBe(200);
        expect(comments.json().total).toBe(1);
        const bobs = await get(a, `/users/${bob.user.id}/posts`);
        expect(bobs.statusCode).toBe(200);
        expect(bobs.json().total).toBe(0);
        // What does not exist on the primary either is still a 404.
        expect((await get(a, `/posts/${id + 1000}`)).statusCode).toBe(404);
        expect((await get(a, `/posts/${id}/comments/${commentId + 1000}`)).statusCode).toBe(404);
      } finally {
        await replica.query('SELECT pg_wal_replay_resume()');
      }
    });

    it('a replica that is down is skipped: reads go to the primary', async () => {
      // A port nothing listens on: the replica of an operator whose standby is down.
      const down = new URL(replicaServer!);
      down.port = '1';
      down.pathname = new URL(db.url).pathname;
      const app = await instance({}, down.toString());
      const ann = await signUp(app);
      const { id } = await createPost(app, ann);
      for (const url of [`/posts/${id}`, '/posts', `/posts/${id}/comments`])
        expect((await get(app, url)).statusCode).toBe(200);
      expect(app.replicas!.status()).toEqual([expect.objectContaining({ replayed: -1 })]);
      expect((await app.inject({ url: '/health/ready' })).statusCode).toBe(200);
    });
  },
);
