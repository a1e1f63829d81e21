/**
 * Proof of docs/architecture.md "Adding a resource": tags on posts, built by
 * its steps under test/fixtures/tags/ (the migration, schema, repository and
 * route plugin), applied to this file's own database and registered on the
 * production app the way src/app.ts registers a route plugin. It then behaves
 * like comments: an idempotent create replays and forgets a deleted tag
 * (its one trigger function, tags_after_delete), its lists page both ways past a deleted anchor, and its errors
 * follow the contract. The steps that edit a list in src/ the fixture cannot
 * take are checked against the code instead (last describe).
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { TOMBSTONE_TABLES } from '../../src/repositories/tombstones.js';
import { EVENT_TYPES } from '../../src/events/repository.js';
import { createTestDatabase, onTopology, type TestDatabase } from '../helpers/database.js';
import { createPost, signUp, testConfig, type SignedUp } from '../helpers/factories.js';
import { checkAgainstDocument } from '../helpers/openapi-conformance.js';
import { expect401, expect404, expect422, expectError } from '../helpers/expect.js';
import tagsRoutes, { tagEtag } from '../fixtures/tags/routes.js';

const root = (path: string) => fileURLToPath(new URL(`../../${path}`, import.meta.url));
const [up, down] = readFileSync(root('test/fixtures/tags/migration.sql'), 'utf8').split('-- Down Migration');

let db: TestDatabase;
let app: FastifyInstance;
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
  const config = testConfig();
  app = (await buildApp({ ...config, ...onTopology(db.url) })) as unknown as FastifyInstance;
  await app.register(tagsRoutes, { prefix: config.apiPrefix });
  await checkAgainstDocument(app);
  ann = await signUp(app);
  bob = await signUp(app);
  postId = (await createPost(app, ann)).id;
});
afterAll(async () => {
  await app?.close();
  await db?.drop();
});

const tags = (id = postId) => `/posts/${id}/tags`;
const get = (url: string) => app.inject({ url });
const create = (name: string, headers: Record<string, string> = {}, who = ann) =>
  app.inject({ method: 'POST', url: tags(), headers: { ...who.auth, ...headers }, payload: { name } });
const remove = (id: number, who = ann, headers: Record<string, string> = {}) =>
  app.inject({ method: 'DELETE', url: `${tags()}/${id}`, headers: { ...who.auth, ...headers } });
const names = (res: { json(): { data: { name: string }[] } }) => res.json().data.map((tag) => tag.name);

describe('reads and HTTP caching', () => {
  it('gets the public-read policy by construction, and every read sees the latest write', async () => {
    const first = (await create('alpha')).json<{ id: number }>();
    const anonymous = await get(tags());
    expect(anonymous.headers['cache-control']).toBe('public, max-age=0, s-maxage=1');
    expect(anonymous.headers.vary).toBe('Authorization');
    const authed = await app.inject({ url: tags(), headers: ann.auth });
    expect(authed.headers['cache-control']).toBe('no-cache');

    expect((await create('beta')).statusCode).toBe(201);
    expect(names(await get(tags()))).toEqual(['alpha', 'beta']);
    expect((await remove(first.id)).statusCode).toBe(204);
    expect404(await get(`${tags()}/${first.id}`), `tag ${first.id} of post ${postId} does not exist`);
    expect(names(await get(tags()))).toEqual(['beta']);
  });
});

describe('an idempotent create', () => {
  it('replays the first response, then says the tag is gone once deleted (tags_after_delete)', async () => {
    const key = { 'idempotency-key': 'tag-once' };
    const first = await create('delta', key);
    expect(first.statusCode).toBe(201);
    const { id } = first.json<{ id: number }>();
    expect(first.headers.location).toBe(`${tags()}/${id}`);
    expect(first.headers.etag).toBe(tagEtag({ id }));

    const again = await create('delta', key);
    expect(again.statusCode).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toBe(first.body);
    expect((await sql('SELECT count(*)::int AS n FROM tags WHERE name = $1', ['delta'])).rows[0].n).toBe(1);
    expect422(await create('other', key), { 'Idempotency-Key': ['was already used for a different request'] });

    expect((await remove(id)).statusCode).toBe(204);
    expectError(
      await create('delta', key),
      409,
      'conflict',
      `tag ${id}, created by the first request with this Idempotency-Key, has since been deleted`,
      { 'Idempotency-Key': [`was used to create tag ${id}, which has since been deleted`] },
    );
  });
});

describe('its list', () => {
  it('pages by offset with a total, and by cursor past a deleted anchor (deleted_tags)', async () => {
    const post = await createPost(app, ann);
    for (const name of ['d', 'b', 'c', 'a']) {
      const res = await app.inject({ method: 'POST', url: tags(post.id), headers: ann.auth, payload: { name } });
      expect(res.statusCode).toBe(201);
    }
    const offset = await get(`${tags(post.id)}?sort=name&page=2&perPage=3`);
    expect(offset.json()).toMatchObject({ total: 4, page: 2, perPage: 3 });
    expect(names(offset)).toEqual(['d']);

    const page = await get(`${tags(post.id)}?sort=name&limit=2`);
    expect(names(page)).toEqual(['a', 'b']);
    const anchor = page.json<{ nextCursor: number }>().nextCursor;
    const next = new URL(/<([^>]+)>; rel="next"/.exec(page.headers.link as string)![1]!, 'http://x');
    await sql('DELETE FROM tags WHERE id = $1', [anchor]);
    // Without afterKey the anchor's key is read from its tombstone.
    expect(names(await get(`${tags(post.id)}?sort=name&limit=2&after=${anchor}`))).toEqual(['c', 'd']);
    expect(names(await get(next.pathname + next.search))).toEqual(['c', 'd']);
  });
});

describe('its errors', () => {
  it('follow the contract', async () => {
    const { id } = (await create('epsilon')).json<{ id: number }>();
    expect404(await get(tags(999_999)), 'post 999999 does not exist');
    expect404(
      await app.inject({ method: 'POST', url: tags(999_999), headers: ann.auth, payload: { name: 'x' } }),
      'post 999999 does not exist',
    );
    expect401(await app.inject({ method: 'POST', url: tags(), payload: { name: 'x' } }));
    expect422(await create(' '), { name: ['must not be blank'] });
    const patch = await app.inject({ method: 'PATCH', url: `${tags()}/${id}`, headers: ann.auth, payload: {} });
    expect(patch.statusCode).toBe(405);
    expect(patch.headers.allow).toBe('DELETE, GET, HEAD');
    // NoQuery: src/app.ts's hook gives it to a route plugin registered after its own.
    expect422(await get(`${tags()}/${id}?colour=red`), { colour: ['is not allowed'] });
    expect422(await get(`${tags()}?sort=colour`), { sort: [expect.any(String)] });
    expectError(
      await remove(id, bob),
      403,
      'forbidden',
      "only its author, the post's author or an admin may delete this tag",
    );
    expectError(
      await remove(id, ann, { 'if-match': '"t0"' }),
      412,
      'precondition_failed',
      'If-Match does not match the current ETag',
    );
  });

  it('a tag by a user deleted in SQL while the token is trusted is a 401 (tags_author_id_fkey)', async () => {
    const gone = await signUp(app);
    expect((await app.inject({ url: '/posts', headers: gone.auth })).statusCode).toBe(200);
    await sql('DELETE FROM users WHERE id = $1', [gone.user.id]);
    const res = await create('zeta', {}, gone);
    expect(res.statusCode).toBe(401);
    expect(res.headers['www-authenticate']).toBe('Bearer error="invalid_token"');
  });
});

it('is in the OpenAPI document, so every answer above was checked against it', async () => {
  const doc = (await get('/openapi.json')).json<{ paths: Record<string, Record<string, { operationId: string }>> }>();
  const ops = (path: string) => Object.values(doc.paths[path] ?? {}).map((op) => op.operationId);
  expect(ops('/posts/{postId}/tags')).toEqual(['listTags', 'createTag']);
  expect(ops('/posts/{postId}/tags/{tagId}')).toEqual(['getTag', 'deleteTag']);
});

describe('what the fixture cannot take from test/, checked against the code', () => {
  const section = (() => {
    const guide = readFileSync(root('docs/architecture.md'), 'utf8');
    const start = guide.indexOf('## Adding a resource');
    return guide.slice(start, guide.indexOf('\n## ', start + 1));
  })();

  it('every file the guide names exists', () => {
    const paths = [...section.matchAll(/`((?:src|test|migrations|docs)\/[\w./-]+)`/g)].map((m) => m[1]!);
    expect(paths.length).toBeGreaterThan(10);
    const missing = paths.filter((path) => !/tags/.test(path) && !existsSync(root(path)));
    expect(missing).toEqual([]);
  });

  it('TOMBSTONE_TABLES lists every tombstone table but the fixture’s (src/repositories/tombstones.ts)', async () => {
    const { rows } = await sql(
      `SELECT table_name AS name FROM information_schema.tables
       WHERE table_schema = 'public' AND table_name LIKE 'deleted\\_%' ORDER BY 1`,
    );
    expect(rows.map((row: { name: string }) => row.name)).toEqual([...TOMBSTONE_TABLES, 'deleted_tags'].sort());
  });

  it('every resource type of EVENT_TYPES has one trigger per event on its table, and the fixture its one', async () => {
    const types = [...new Set(EVENT_TYPES.map((type) => type.split('.')[0]!))];
    const { rows } = await sql(
      `SELECT DISTINCT event_object_table AS "table", trigger_name AS name FROM information_schema.triggers ORDER BY 1, 2`,
    );
    const expected = types.flatMap((type) =>
      ['insert', 'update', 'delete'].map((op) => `${type}s:${type}s_after_${op}`),
    );
    expect(rows.map((row: { table: string; name: string }) => `${row.table}:${row.name}`).sort()).toEqual(
      [...expected, 'tags:tags_after_delete'].sort(),
    );
  });

  it('the migration goes down cleanly', async () => {
    await sql(down!);
    const { rows } = await sql(`SELECT count(*)::int AS n FROM pg_class WHERE relname IN ('tags', 'deleted_tags')`);
    expect(rows[0].n).toBe(0);
  });
});
