/**
 * Upgrading from a release (docs/operations.md, "Upgrading from a release"): a database migrated by release
 * FROM's own code and filled through its own running service (users, tokens, posts, comments, events, a webhook
 * with deliveries still pending, idempotency keys), then this checkout's migrations and service on it. Every row
 * is served as before, the old tokens and passwords work, a key replays its answer, the event feed goes on from
 * the old cursor without a gap, and the deliveries the old service left pending go out, signed with the old secret.
 *
 * The release's code is the commit that first added its section to CHANGELOG.md, taken from git history (while
 * HEAD is that commit, the test upgrades from itself). Without that history (a tarball, a shallow clone) it cannot
 * run: with CI set it fails, saying why; elsewhere it is skipped, saying why (docs/architecture.md, "Tests").
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { Webhook } from 'standardwebhooks';
import { beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { checkDatabaseAtStart } from '../../src/plugins/db.js';
import { useCleanups } from '../helpers/cleanups.js';
import { databaseEnv, onTopology } from '../helpers/database.js';
import { freePort, runToEnd, spawnServer, waitUntil } from '../helpers/processes.js';
import { startReceiver } from '../helpers/receivers.js';

/** The release upgraded from. */
const FROM = '1.0.0';
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The commit that first added `## [FROM]` to CHANGELOG.md, or why there is none to be had. */
function releaseCommit(): { commit: string } | { missing: string } {
  const log = spawnSync('git', ['log', '--format=%H', `-S## [${FROM}]`, '--', 'CHANGELOG.md'], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  if (log.status !== 0) return { missing: `no git history here (${log.stderr.trim() || log.error?.message})` };
  const oldest = log.stdout.trim().split('\n').filter(Boolean).at(-1);
  if (oldest === undefined) {
    return { missing: `no commit in this history adds "## [${FROM}]" to CHANGELOG.md (a shallow clone?)` };
  }
  return { commit: oldest };
}

const release = releaseCommit();
const missing = 'missing' in release ? release.missing : undefined;
if (missing !== undefined && process.env.CI) {
  // A test that fails, rather than a set-up: .ci/run's summary then names the file and the reason.
  it(`upgrading from ${FROM} needs the git history`, () => {
    throw new Error(`cannot test the upgrade from ${FROM}: ${missing}`);
  });
} else if (missing !== undefined) {
  console.warn(`upgrade.test.ts is skipped: ${missing}`);
}

interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
}

/** The old service, a real process started from the release's own tree, as `npm start` starts it. */
interface OldService {
  request(method: string, path: string, options?: { token?: string; body?: object; key?: string }): Promise<Answer>;
  /** SIGTERM, and its exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL if still running: after a failed test. */
  kill(): void;
}

/** The release's tree; its node_modules are this checkout's when its lockfile differs at most in the version. */
async function checkOut(commit: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `posts-api-${FROM}-`));
  const archived = await runToEnd('bash', ['-c', 'git archive --format=tar "$1" | tar -x -C "$2"', '_', commit, dir], {
    cwd: ROOT,
  });
  if (archived.code !== 0) throw new Error(`git archive ${commit}: ${archived.stderr}`);
  const dependencies = async (root: string) => {
    const lock = JSON.parse(await readFile(join(root, 'package-lock.json'), 'utf8')) as {
      version?: string;
      packages: Record<string, { version?: string }>;
    };
    delete lock.version;
    delete lock.packages['']?.version;
    return JSON.stringify(lock);
  };
  if ((await dependencies(dir)) === (await dependencies(ROOT))) {
    await symlink(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  } else {
    const installed = await runToEnd('npm', ['ci', '--no-audit', '--no-fund'], { cwd: dir, timeoutMs: 600_000 });
    if (installed.code !== 0) throw new Error(`npm ci in the ${FROM} tree: ${installed.stderr.slice(-2000)}`);
  }
  return dir;
}

const WEBHOOKS_TO_A_TEST_RECEIVER = { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE: 'true' };

async function startOld(dir: string, url: string): Promise<OldService> {
  const port = await freePort();
  const env = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    ...databaseEnv(url),
    HOST: '127.0.0.1',
    PORT: String(port),
    METRICS_PORT: '0',
    LOG_LEVEL: 'warn',
    RATE_LIMIT_MAX: '1000000',
    RATE_LIMIT_AUTH_MAX: '1000000',
    ...WEBHOOKS_TO_A_TEST_RECEIVER,
  };
  const { child, output, exited } = spawnServer(['--import', 'tsx', 'src/server.ts'], { cwd: dir, env });
  const request: OldService['request'] = async (method, path, { token, body, key } = {}) => {
    const headers: Record<string, string> = {};
    if (token) headers.authorization = `Bearer ${token}`;
    if (key) headers['idempotency-key'] = key;
    if (body) headers['content-type'] = 'application/json';
    const res = await fetch(`http://127.0.0.1:${port}${path}`, {
      method,
      headers,
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await res.text();
    return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
  };
  const ready = async () => {
    if (child.exitCode !== null) throw new Error(`the ${FROM} server exited (${child.exitCode}):\n${output()}`);
    return (await request('GET', '/health/ready').catch(() => undefined))?.status === 200;
  };
  await waitUntil(`the ${FROM} server is ready`, ready, 1200);
  return {
    request,
    stop: async () => {
      child.kill('SIGTERM');
      return exited;
    },
    kill: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
}

/** What the old service showed and gave, to hold the new one to. */
interface Snapshot {
  /** Answers to reads, by path (with Ann's token). */
  reads: Map<string, Answer>;
  users: Record<Who, { id: number; email: string }>;
  tokens: Record<Who, string>;
  /** A create sent with an Idempotency-Key, and its answer. */
  keyed: { key: string; body: object; answer: Answer };
  /** The webhook as created (its secret is in that answer only), and as the old service last showed it. */
  webhook: { id: number; secret: string; shown: object };
  /** The feed's cursor at the end, and the ids of the events the webhook is owed. */
  cursor: number;
  owed: number[];
}
type Who = 'ann' | 'bob';
const password = (who: Who): string => `password of ${who}`;

/** Every event the feed lists, in pages from the start; `get` answers a path's body. */
async function feed(get: (path: string) => Promise<unknown>): Promise<{ id: number; type: string }[]> {
  const events: { id: number; type: string }[] = [];
  for (let after = 0; ;) {
    const page = (await get(`/events?limit=100&after=${after}`)) as {
      data: { id: number; type: string }[];
      hasMore: boolean;
      nextCursor: number;
    };
    events.push(...page.data);
    if (!page.hasMore) return events;
    after = page.nextCursor;
  }
}

async function fillThroughOld(old: OldService, hookUrl: string): Promise<Snapshot> {
  const users = {} as Snapshot['users'];
  const tokens = {} as Snapshot['tokens'];
  const signUp = async (who: Who, key?: string) => {
    const email = `${who}@example.com`;
    const user = await old.request('POST', '/users', { body: { name: who, email, password: password(who) }, key });
    expect(user.status).toBe(201);
    users[who] = user.body as { id: number; email: string };
    const token = await old.request('POST', '/tokens', { body: { email, password: password(who) } });
    expect(token.status).toBe(201);
    tokens[who] = (token.body as { token: string }).token;
  };
  await signUp('ann');
  const get = async (path: string) => (await old.request('GET', path, { token: tokens.ann })).body;
  // A webhook receives the events numbered after its creation: Ann's sign-up is numbered first.
  await waitUntil('the sign-up is in the feed', async () => (await feed(get)).length === 1);
  const hook = await old.request('POST', '/webhooks', { token: tokens.ann, body: { url: hookUrl } });
  expect(hook.status).toBe(201);
  const webhook = hook.body as { id: number; secret: string };

  await signUp('bob', 'sign-up-bob');
  const post = async (who: Who, body: object, key?: string) => {
    const created = await old.request('POST', '/posts', { token: tokens[who], body, key });
    expect(created.status).toBe(201);
    return created;
  };
  const keyed = { key: 'upgrade-post', body: { title: 'Kept', body: 'created with an Idempotency-Key' } };
  const first = await post('ann', keyed.body, keyed.key);
  const p1 = (first.body as { id: number }).id;
  const p2 = ((await post('bob', { title: 'Second', body: 'by Bob' })).body as { id: number }).id;
  const edit = await old.request('PATCH', `/posts/${p1}`, { token: tokens.ann, body: { title: 'Kept, edited' } });
  expect(edit.status).toBe(200);
  const comment = async (who: Who, postId: number, body: string) => {
    const created = await old.request('POST', `/posts/${postId}/comments`, { token: tokens[who], body: { body } });
    expect(created.status).toBe(201);
    return created.body as { id: number };
  };
  await comment('bob', p1, 'Nice');
  await comment('ann', p2, 'Thanks');
  const gone = await comment('bob', p2, 'Deleted soon');
  expect((await old.request('DELETE', `/posts/${p2}/comments/${gone.id}`, { token: tokens.bob })).status).toBe(204);

  // Bob's sign-up, two posts, an edit, three comments, a deletion.
  const owedCount = 8;
  await waitUntil('every change is in the feed', async () => (await feed(get)).length === 1 + owedCount);
  const events = await feed(get);
  // The old worker has fanned every event out to the webhook: the deliveries are rows, their attempts hanging.
  const deliveries = `/webhooks/${webhook.id}/deliveries?limit=100`;
  await waitUntil(
    'the deliveries are queued',
    async () => ((await get(deliveries)) as { data: unknown[] }).data.length === owedCount,
    300,
    100,
  );

  const reads = new Map<string, Answer>();
  for (const path of [
    `/posts/${p1}`,
    `/posts/${p2}`,
    `/posts/${p1}/comments`,
    `/posts/${p2}/comments`,
    '/posts?sort=id',
    `/users/${users.ann.id}`,
    `/users/${users.bob.id}`,
    '/users/me',
    '/events?limit=100',
  ]) {
    const answer = await old.request('GET', path, { token: tokens.ann });
    expect([path, answer.status]).toEqual([path, 200]);
    reads.set(path, answer);
  }
  const shown = (await get(`/webhooks/${webhook.id}`)) as object;
  return {
    reads,
    users,
    tokens,
    keyed: { ...keyed, answer: first },
    webhook: { ...webhook, shown },
    cursor: events.at(-1)!.id,
    owed: events.slice(1).map((event) => event.id),
  };
}

describe.skipIf(missing !== undefined)(
  missing === undefined ? `upgrading from ${FROM}` : `upgrading from ${FROM}: skipped, ${missing}`,
  () => {
    const cleanups = useCleanups();
    let app: FastifyInstance;
    let before: Snapshot;
    /** Deliveries answered 204: the new service's (the receiver leaves the old one's attempts hanging). */
    const delivered: { id: number; body: string; headers: Record<string, string> }[] = [];

    const inject = (method: 'GET' | 'POST', url: string, token: string, payload?: object, key?: string) =>
      app.inject({
        method,
        url,
        headers: { authorization: `Bearer ${token}`, ...(key ? { 'idempotency-key': key } : {}) },
        ...(payload ? { payload } : {}),
      });

    beforeAll(async () => {
      if ('missing' in release) return; // never: this describe is skipped then
      const tree = await checkOut(release.commit);
      cleanups.defer(() => rm(tree, { recursive: true, force: true }));
      const db = await cleanups.database({ empty: true });
      let upgraded = false;
      const receiver = await startReceiver((received) => {
        if (!upgraded) return 'hang';
        const headers = received.headers as Record<string, string>;
        delivered.push({ id: Number(headers['webhook-id']), body: received.body, headers });
        return 204;
      });
      cleanups.defer(() => receiver.close());

      // The release's own migrations, by its own command, and its own service.
      const migrated = await runToEnd(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'migrate'], {
        cwd: tree,
        env: { PATH: process.env.PATH, HOME: process.env.HOME, ...databaseEnv(db.url) },
      });
      expect(migrated, migrated.stderr).toMatchObject({ code: 0 });
      const old = await startOld(tree, db.url);
      cleanups.defer(() => old.kill());
      before = await fillThroughOld(old, receiver.url);
      // SIGTERM: it cuts the attempts in flight, due again at once for the next instance.
      expect(await old.stop()).toBe(0);

      // This checkout's migrations, its start-up check and its service, as an operator upgrades.
      upgraded = true;
      const direct = onTopology(db.url).databaseListenUrl ?? db.url;
      await migrate(direct);
      const warnings: string[] = [];
      await checkDatabaseAtStart(direct, (warning) => warnings.push(warning));
      expect(warnings).toEqual([]);
      ({ app } = await cleanups.app(onTopology(db.url), WEBHOOKS_TO_A_TEST_RECEIVER));
    }, 900_000);

    it('serves every row the old service served, as it served it; its ETags still match', async () => {
      for (const [path, old] of before.reads) {
        const now = await inject('GET', path, before.tokens.ann);
        expect([path, now.statusCode]).toEqual([path, 200]);
        // A later version may add members, never drop or change one.
        expect(now.json()).toMatchObject(old.body as object);
      }
      const post = before.keyed.answer.headers.get('location')!;
      const etag = before.reads.get(post)!.headers.get('etag')!;
      const conditional = await app.inject({ url: post, headers: { 'if-none-match': etag } });
      expect(conditional.statusCode).toBe(304);
    });

    it('the old tokens are valid, and the old passwords log in', async () => {
      for (const who of ['ann', 'bob'] as const) {
        const me = await inject('GET', '/users/me', before.tokens[who]);
        expect(me.statusCode).toBe(200);
        expect(me.json()).toMatchObject(before.users[who]);
        const login = await app.inject({
          method: 'POST',
          url: '/tokens',
          payload: { email: before.users[who].email, password: password(who) },
        });
        expect(login.statusCode).toBe(201);
      }
    });

    it('an Idempotency-Key the old service took replays its answer', async () => {
      const { key, body, answer } = before.keyed;
      const replay = await inject('POST', '/posts', before.tokens.ann, body, key);
      expect(replay.statusCode).toBe(answer.status);
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.json()).toEqual(answer.body);
    });

    it('the event feed goes on from the old cursor, without a gap', async () => {
      const created = await inject('POST', '/posts', before.tokens.bob, { title: 'After', body: 'the upgrade' });
      expect(created.statusCode).toBe(201);
      const next = async () => (await inject('GET', `/events?after=${before.cursor}`, before.tokens.ann)).json();
      await waitUntil('the new post is in the feed', async () => (await next()).data.length > 0);
      expect((await next()).data).toMatchObject([{ id: before.cursor + 1, type: 'post.created' }]);
      const all = await feed(async (path) => (await inject('GET', path, before.tokens.ann)).json());
      expect(all.map((event) => event.id)).toEqual(all.map((_, i) => i + 1));
    });

    it('the deliveries the old service left pending go out, signed with the secret it gave', async () => {
      // What the old service owed, and the new post's event.
      const owed = [...before.owed, before.cursor + 1];
      const ids = () => [...new Set(delivered.map((delivery) => delivery.id))].sort((a, b) => a - b);
      await waitUntil('every owed event is delivered', () => ids().length >= owed.length, 300, 100);
      expect(ids()).toEqual(owed);
      const signed = new Webhook(before.webhook.secret);
      for (const { id, body, headers } of delivered) expect(signed.verify(body, headers)).toMatchObject({ id });
      // The webhook is as it was, but for the time its deliveries updated it.
      const hook = await inject('GET', `/webhooks/${before.webhook.id}`, before.tokens.ann);
      expect(hook.json()).toMatchObject({ ...before.webhook.shown, updatedAt: expect.any(String) });
    });
  },
);
