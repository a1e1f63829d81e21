/**
 * Proof of docs/architecture.md "Adding a resource": fixture tags on posts, added from outside src/ by the guide's
 * steps (test/fixtures/fixture-tags/: one migration, the schema, the repository and the declaration module),
 * registered through buildApp's `resources` option on the production app. It then behaves as comments do: CRUD,
 * offset and cursor lists past a deleted anchor, conditional requests, idempotent creates, events in the feed, on
 * the stream and to a webhook, redaction after delete, edge caching headers and OpenAPI operations; and nothing
 * in src/ names it.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createTestDatabase, onTopology, type TestDatabase } from '../helpers/database.js';
import { createPost, signUp, testConfig, type SignedUp } from '../helpers/factories.js';
import { checkAgainstDocument } from '../helpers/openapi-conformance.js';
import { expect401, expect404, expect422, expectError } from '../helpers/expect.js';
import { startReceiver } from '../helpers/receivers.js';
import { waitUntil } from '../helpers/processes.js';
import { fixtureTags } from '../fixtures/fixture-tags/resource.js';

const root = (path: string): string => fileURLToPath(new URL(`../../${path}`, import.meta.url));
const [up, down] = readFileSync(root('test/fixtures/fixture-tags/migration.sql'), 'utf8').split('-- Down Migration');

let db: TestDatabase;
let app: FastifyInstance;
let base: string;
let ann: SignedUp;
let bob: SignedUp;
let postId: number;

/** SQL from outside the service, on a session of its own, directly on the server. */
async function sql(text: string, values: unknown[] = []): Promise<pg.QueryResult> {
  const { databaseListenUrl, databaseUrl } = onTopology(db.url);
  const client = new pg.Client({ connectionString: databaseListenUrl ?? databaseUrl });
  await client.connect();
  try {
    return await client.query(text, values);
  } finally {
    await client.end();
  }
}

beforeAll(async () => {
  db = await createTestDatabase();
  await sql(up!);
  const env = { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE: 'true' };
  const config = testConfig(env, { webhooks: { pollMs: 25, retryBaseMs: 100, timeoutMs: 2_000 } });
  app = await buildApp({ ...config, ...onTopology(db.url) }, { resources: [fixtureTags] });
  await checkAgainstDocument(app);
  base = await app.listen({ port: 0, host: '127.0.0.1' });
  ann = await signUp(app);
  bob = await signUp(app);
  postId = (await createPost(app, ann)).id;
});
afterAll(async () => {
  await app?.close();
  await db?.drop();
});

const tags = (id = postId): string => `/posts/${id}/fixture-tags`;
const get = (url: string, headers: Record<string, string> = {}) => app.inject({ url, headers });
const create = (name: string, headers: Record<string, string> = {}, who = ann, post = postId) =>
  app.inject({ method: 'POST', url: tags(post), headers: { ...who.auth, ...headers }, payload: { name } });
const rename = (id: number, name: string, headers: Record<string, string> = {}, who = ann) =>
  app.inject({ method: 'PATCH', url: `${tags()}/${id}`, headers: { ...who.auth, ...headers }, payload: { name } });
const remove = (id: number, who = ann, headers: Record<string, string> = {}) =>
  app.inject({ method: 'DELETE', url: `${tags()}/${id}`, headers: { ...who.auth, ...headers } });
const names = (res: { json(): { data: { name: string }[] } }): string[] => res.json().data.map((tag) => tag.name);

interface FeedEvent {
  id: number;
  type: string;
  resource: { type: string; id: number; path: string };
  data: Record<string, unknown>;
}
/** The whole feed of `post`, numbered (the GET numbers what was written before it). */
async function feed(query: string): Promise<FeedEvent[]> {
  const res = await get(`/events?limit=100&${query}`);
  expect(res.statusCode).toBe(200);
  return res.json<{ data: FeedEvent[] }>().data;
}

it('is named by no file in src/: it came in through buildApp', () => {
  const files = readdirSync(root('src'), { recursive: true, withFileTypes: true }).filter((entry) => entry.isFile());
  const naming = files
    .map((entry) => join(entry.parentPath, entry.name))
    .filter((path) => /fixture/i.test(readFileSync(path, 'utf8')));
  expect(files.length).toBeGreaterThan(50);
  expect(naming).toEqual([]);
});

describe('reads and HTTP caching', () => {
  it('gets the public-read policy by construction, and every read sees the latest write', async () => {
    const first = (await create('alpha')).json<{ id: number }>();
    const anonymous = await get(tags());
    expect(anonymous.headers['cache-control']).toBe('public, max-age=0, s-maxage=1');
    expect(anonymous.headers.vary).toBe('Authorization');
    expect((await get(tags(), ann.auth)).headers['cache-control']).toBe('no-cache');

    expect((await create('beta')).statusCode).toBe(201);
    expect(names(await get(tags()))).toEqual(['alpha', 'beta']);
    expect((await remove(first.id)).statusCode).toBe(204);
    expect404(await get(`${tags()}/${first.id}`), `fixture_tag ${first.id} of post ${postId} does not exist`);
    expect(names(await get(tags()))).toEqual(['beta']);
  });
});

describe('conditional requests', () => {
  it('ETag and 304 on reads; If-Match on a change: 412 when stale, then the new version', async () => {
    const created = await create('gamma');
    const { id } = created.json<{ id: number }>();
    const etag = created.headers.etag as string;
    expect(etag).toBe(`"ft${id}-1"`);
    const read = await get(`${tags()}/${id}`);
    expect(read.headers.etag).toBe(etag);
    expect((await get(`${tags()}/${id}`, { 'if-none-match': etag })).statusCode).toBe(304);

    const renamed = await rename(id, 'gamma2', { 'if-match': etag });
    expect(renamed.statusCode).toBe(200);
    expect(renamed.json()).toEqual({ id, postId, authorId: ann.user.id, name: 'gamma2' });
    expect(renamed.headers.etag).toBe(`"ft${id}-2"`);
    expectError(
      await rename(id, 'gamma3', { 'if-match': etag }),
      412,
      'precondition_failed',
      'If-Match does not match the current ETag',
    );
    expectError(
      await rename(id, 'theirs', {}, bob),
      403,
      'forbidden',
      'only its author or an admin may rename this tag',
    );
    expect((await get(`${tags()}/${id}`)).json()).toMatchObject({ name: 'gamma2' });
  });
});

describe('an idempotent create', () => {
  it('replays the first response, then says the tag is gone once deleted (its attached delete trigger)', async () => {
    const key = { 'idempotency-key': 'tag-once' };
    const first = await create('delta', key);
    expect(first.statusCode).toBe(201);
    const { id } = first.json<{ id: number }>();
    expect(first.headers.location).toBe(`${tags()}/${id}`);

    const again = await create('delta', key);
    expect(again.statusCode).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toBe(first.body);
    expect((await sql('SELECT count(*)::int AS n FROM fixture_tags WHERE name = $1', ['delta'])).rows[0].n).toBe(1);
    expect422(await create('other', key), { 'Idempotency-Key': ['was already used for a different request'] });

    expect((await remove(id)).statusCode).toBe(204);
    expectError(
      await create('delta', key),
      409,
      'conflict',
      `fixture_tag ${id}, created by the first request with this Idempotency-Key, has since been deleted`,
      { 'Idempotency-Key': [`was used to create fixture_tag ${id}, which has since been deleted`] },
    );
  });
});

describe('its list', () => {
  it('pages by offset with a total, and by cursor past a deleted anchor (its tombstones)', async () => {
    const post = await createPost(app, ann);
    for (const name of ['d', 'b', 'c', 'a']) expect((await create(name, {}, ann, post.id)).statusCode).toBe(201);
    const offset = await get(`${tags(post.id)}?sort=name&page=2&perPage=3`);
    expect(offset.json()).toMatchObject({ total: 4, page: 2, perPage: 3 });
    expect(names(offset)).toEqual(['d']);

    const page = await get(`${tags(post.id)}?sort=name&limit=2`);
    expect(names(page)).toEqual(['a', 'b']);
    const anchor = page.json<{ nextCursor: number }>().nextCursor;
    const next = new URL(/<([^>]+)>; rel="next"/.exec(page.headers.link as string)![1]!, 'http://x');
    await sql('DELETE FROM fixture_tags WHERE id = $1', [anchor]);
    // Without afterKey the anchor's key is read from its tombstone.
    expect(names(await get(`${tags(post.id)}?sort=name&limit=2&after=${anchor}`))).toEqual(['c', 'd']);
    expect(names(await get(next.pathname + next.search))).toEqual(['c', 'd']);
  });
});

describe('its errors', () => {
  it('follow the contract', async () => {
    const { id } = (await create('epsilon')).json<{ id: number }>();
    expect404(await get(tags(999_999)), 'post 999999 does not exist');
    expect404(await create('x', {}, ann, 999_999), 'post 999999 does not exist');
    expect401(await app.inject({ method: 'POST', url: tags(), payload: { name: 'x' } }));
    expect422(await create(' '), { name: ['must not be blank'] });
    const put = await app.inject({ method: 'PUT', url: `${tags()}/${id}`, headers: ann.auth, payload: {} });
    expect(put.statusCode).toBe(405);
    expect(put.headers.allow).toBe('DELETE, GET, HEAD, PATCH');
    expect422(await get(`${tags()}/${id}?colour=red`), { colour: ['is not allowed'] });
    expect422(await get(`${tags()}?sort=colour`), { sort: [expect.any(String)] });
    expectError(
      await remove(id, bob),
      403,
      'forbidden',
      "only its author, the post's author or an admin may delete this tag",
    );
  });

  it('a tag by a user deleted in SQL while the token is trusted is a 404 (a foreign key to users), not a 500', async () => {
    const gone = await signUp(app);
    const checked = performance.now();
    expect((await get('/posts', gone.auth)).statusCode).toBe(200);
    await sql('DELETE FROM users WHERE id = $1', [gone.user.id]);
    const res = await create('zeta', {}, gone);
    // Trusted for a second (authCacheMs): past it, on a loaded machine, the token itself is refused.
    if (performance.now() - checked < 1_000) expect404(res, 'a resource this request refers to does not exist');
    else expectError(res, 401, 'unauthorized', 'the access token is malformed, unknown, expired or revoked');
    const { rows } = await sql('SELECT count(*)::int AS n FROM fixture_tags WHERE author_id = $1', [gone.user.id]);
    expect(rows[0].n).toBe(0);
  });
});

describe('its events', () => {
  it('are in the feed with its path, filter by type and post, and are redacted once it is deleted', async () => {
    const post = await createPost(app, ann);
    const { id } = (await create('eta', {}, ann, post.id)).json<{ id: number }>();
    const path = `/posts/${post.id}/fixture-tags/${id}`;
    expect(
      (await app.inject({ method: 'PATCH', url: path, headers: ann.auth, payload: { name: 'eta2' } })).statusCode,
    ).toBe(200);
    // A change that changes nothing a GET shows makes no event.
    await sql('UPDATE fixture_tags SET name = name WHERE id = $1', [id]);

    const mine = (events: FeedEvent[]) => events.filter((event) => event.resource.type === 'fixture_tag');
    const created = { type: 'fixture_tag', id, path };
    expect(mine(await feed(`post=${post.id}`))).toEqual([
      expect.objectContaining({
        type: 'fixture_tag.created',
        resource: created,
        data: { id, postId: post.id, authorId: ann.user.id, name: 'eta' },
      }),
      expect.objectContaining({
        type: 'fixture_tag.updated',
        resource: created,
        data: { id, postId: post.id, authorId: ann.user.id, name: 'eta2' },
      }),
    ]);
    const byType = await feed('type=fixture_tag.updated');
    expect(byType.map((event) => event.type)).toEqual(byType.map(() => 'fixture_tag.updated'));
    expect(byType.map((event) => event.resource.id)).toContain(id);

    expect((await app.inject({ method: 'DELETE', url: path, headers: ann.auth })).statusCode).toBe(204);
    const redacted = { id, postId: post.id };
    expect(mine(await feed(`post=${post.id}`)).map(({ type, data }) => ({ type, data }))).toEqual([
      { type: 'fixture_tag.created', data: redacted },
      { type: 'fixture_tag.updated', data: redacted },
      { type: 'fixture_tag.deleted', data: redacted },
    ]);
  });

  it('reach an open stream', async () => {
    let text = '';
    const response = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = httpRequest(
        `${base}/events/stream?type=fixture_tag.created`,
        { headers: { accept: 'text/event-stream' } },
        resolve,
      );
      req.on('error', reject);
      req.end();
    });
    try {
      expect(response.statusCode).toBe(200);
      response.on('data', (chunk: Buffer) => (text += chunk.toString()));
      const { id } = (await create('theta')).json<{ id: number }>();
      await waitUntil('the event reaches the stream', () =>
        text.includes(`"path":"/posts/${postId}/fixture-tags/${id}"`),
      );
      expect(text).toContain('event: fixture_tag.created\n');
    } finally {
      response.destroy();
    }
  });

  it('are delivered to a webhook that asks for them', async () => {
    const receiver = await startReceiver();
    try {
      const hook = await app.inject({
        method: 'POST',
        url: '/webhooks',
        headers: ann.auth,
        payload: { url: receiver.url, types: ['fixture_tag.created'] },
      });
      expect(hook.statusCode).toBe(201);
      const { id } = (await create('iota')).json<{ id: number }>();
      const [delivery] = await receiver.waitFor(1);
      expect(JSON.parse(delivery!.body)).toMatchObject({
        type: 'fixture_tag.created',
        resource: { type: 'fixture_tag', id, path: `/posts/${postId}/fixture-tags/${id}` },
        data: { id, postId, authorId: ann.user.id, name: 'iota' },
      });
    } finally {
      await receiver.close();
    }
  });
});

it('is in the OpenAPI document, in a group of its own, its event types with the others', async () => {
  interface Variant {
    properties: { data: { anyOf?: object[]; properties?: object } };
  }
  const doc = (await get('/openapi.json')).json<{
    tags: { name: string }[];
    paths: Record<string, Record<string, { operationId: string; tags: string[] }>>;
    components: { schemas: { Event: { oneOf: { $ref: string }[] } } & Record<string, Variant> };
  }>();
  const ops = (path: string) => Object.values(doc.paths[path] ?? {}).map((op) => [op.operationId, op.tags]);
  const group = ['fixture tags'];
  expect(ops('/posts/{postId}/fixture-tags')).toEqual([
    ['listFixtureTags', group],
    ['createFixtureTag', group],
  ]);
  expect(ops('/posts/{postId}/fixture-tags/{fixtureTagId}')).toEqual([
    ['getFixtureTag', group],
    ['renameFixtureTag', group],
    ['deleteFixtureTag', group],
  ]);
  expect(doc.tags.map((tag) => tag.name)).toContain('fixture tags');
  const { schemas } = doc.components;
  expect(schemas.Event.oneOf.map((variant) => variant.$ref.split('/').pop())).toEqual(
    expect.arrayContaining(['post.created', 'fixture_tag.created', 'fixture_tag.updated', 'fixture_tag.deleted']),
  );
  // Its data: the tag as its GET shows it, or its ids once deleted (attach_resource's, under a post).
  const ids = { id: expect.any(Object), postId: expect.any(Object) };
  expect(schemas['fixture_tag.updated']!.properties.data.anyOf).toEqual([
    { $ref: '#/components/schemas/FixtureTag' },
    expect.objectContaining({ properties: ids }),
  ]);
  expect(schemas['fixture_tag.deleted']!.properties.data.properties).toEqual(ids);
});

describe('the declarations and the database agree', () => {
  it('every declared resource has its three attached triggers; posts commit in id order and move between ranks', async () => {
    const { rows } = await sql(
      `SELECT event_object_table AS "table", trigger_name AS name FROM information_schema.triggers`,
    );
    const found = new Set(rows.map((row: { table: string; name: string }) => `${row.table}:${row.name}`));
    // The table of each declared resource, as its migration's attach_resource() names it (a new one is added here).
    const tables: Record<string, string> = {
      post: 'posts',
      comment: 'comments',
      user: 'users',
      fixture_tag: 'fixture_tags',
    };
    const declared = app.resources.resources.map((resource) => resource.name);
    expect(Object.keys(tables).sort()).toEqual([...declared].sort());
    const expected = [
      ...declared.flatMap((name) =>
        ['insert', 'update', 'delete'].map((event) => `${tables[name]}:${tables[name]}_after_${event}`),
      ),
      'posts:posts_before_insert',
      'posts:posts_rerank',
    ];
    expect(expected.filter((trigger) => !found.has(trigger))).toEqual([]);
    expect([...found].sort()).toEqual([...new Set(expected)].sort());
  });

  it('every tombstone table is a declared resource’s, and retention purges them all', async () => {
    const { rows } = await sql(
      `SELECT table_name AS name FROM information_schema.tables
       WHERE table_schema = 'public' AND table_name LIKE 'deleted\\_%' ORDER BY 1`,
    );
    expect(rows.map((row: { name: string }) => row.name)).toEqual([...app.resources.tombstoneTables].sort());
  });

  it('the migration goes down cleanly', async () => {
    await app.close();
    await sql(down!);
    const { rows } = await sql(
      `SELECT count(*)::int AS n FROM pg_class WHERE relname IN ('fixture_tags', 'deleted_fixture_tags')`,
    );
    expect(rows[0].n).toBe(0);
    const { rows: functions } = await sql(`SELECT count(*)::int AS n FROM pg_proc WHERE proname LIKE 'fixture_tag%'`);
    expect(functions[0].n).toBe(0);
  });
});
