/**
 * Redis lost under the shared rate limit (issue 9): two app instances count one
 * budget in a private redis-server this file starts; it is killed (SIGKILL, as
 * a crash or an OOM kill would) while both serve a steady flow of reads and
 * writes. Requests keep being served — no 5xx, no 429, rate limit headers
 * still sent — and once Redis is back the two instances share one budget again.
 */
import { onTopology } from '../helpers/database.js';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { signUp, startTestApp, type SignedUp, type TestApp } from '../helpers/factories.js';
import { expectContractResponse } from '../helpers/contract.js';
import { startRedis, waitUntil, type RedisServer } from '../helpers/processes.js';

const MAX = 100_000;
let redis: RedisServer;
let t: TestApp;
let second: FastifyInstance;
let ann: SignedUp;

beforeAll(async () => {
  redis = await startRedis();
  const env = { REDIS_URL: redis.url, RATE_LIMIT_MAX: String(MAX), LOG_LEVEL: 'silent' };
  t = await startTestApp(env);
  // A second instance on the same database: the same Redis namespace, so one shared budget.
  second = (await buildApp({
    ...loadConfig({ ...env, RATE_LIMIT_AUTH_MAX: '1000000' }),
    ...onTopology(t.db.url),
  })) as unknown as FastifyInstance;
  await second.ready();
  ann = await signUp(t.app, { name: 'Ann' });
});
afterAll(async () => {
  await second?.close();
  await t?.close();
  await redis?.kill();
});

/** Anonymous requests from one IP: both instances must charge the same counter. */
async function remainingAfter(app: FastifyInstance): Promise<number> {
  const res = await app.inject({ url: '/posts?perPage=1' });
  expect(res.statusCode).toBe(200);
  return Number(res.headers['ratelimit-remaining']);
}

async function expectSharedBudget() {
  const seen: number[] = [];
  for (const app of [t.app, second, t.app, second]) seen.push(await remainingAfter(app));
  // Each request, whichever instance served it, took one from the same budget.
  expect(seen.slice(1).map((n, i) => seen[i]! - n)).toEqual([1, 1, 1]);
}

it('keeps serving while Redis is gone, and shares one budget again once it is back', async () => {
  await expectSharedBudget();

  type Phase = 'up' | 'down' | 'back';
  let phase: Phase = 'up';
  let running = true;
  const outcomes: { phase: Phase; status: number }[] = [];
  const flows = [t.app, second].flatMap((app) => [
    () => app.inject({ url: '/posts?perPage=5' }),
    () => app.inject({ method: 'POST', url: '/posts', headers: ann.auth, payload: { title: 'during', body: 'b' } }),
    () => app.inject({ url: '/users/me', headers: ann.auth }),
  ]);
  const workers = flows.map(async (send) => {
    while (running) {
      const res = await send();
      expectContractResponse(res);
      expect(res.headers['ratelimit-limit']).toBe(String(MAX));
      outcomes.push({ phase, status: res.statusCode });
      await sleep(2);
    }
  });
  const count = (p: Phase) => outcomes.filter((o) => o.phase === p).length;

  try {
    await waitUntil('requests flow', () => count('up') >= 30);
    phase = 'down';
    await redis.kill();
    await waitUntil('many requests were served without Redis', () => count('down') >= 150, 400);
    await redis.start();
    phase = 'back';
    await waitUntil('requests flow after Redis is back', () => count('back') >= 30, 400);
  } finally {
    running = false;
    await Promise.all(workers);
  }
  // Every request of every phase was served: writes created, reads answered.
  expect(outcomes.filter((o) => o.status !== 200 && o.status !== 201)).toEqual([]);

  // The clients reconnect by themselves (retrying at least once a second): the shared budget returns.
  await waitUntil(
    'both instances count in Redis again',
    async () => {
      try {
        await expectSharedBudget();
        return true;
      } catch {
        return false;
      }
    },
    100,
    100,
  );
});
