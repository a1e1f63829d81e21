/**
 * The event log as the database writes it (docs/api.md §12): every write
 * route makes exactly its event, with the public GET representation as data;
 * a rejected or no-op write, a rolled-back transaction, makes none; SQL run
 * directly makes its event too. Events are read straight from the table here
 * (numbered or not); the feed's numbering is events-feed.test.ts's subject.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import { signUp, startTestApp, type SignedUp, type TestApp } from '../helpers/factories.js';

let t: TestApp;
let sql: pg.Client;
let ann: SignedUp;
let bob: SignedUp;
let mark = 0;

interface LoggedEvent {
  type: string;
  resourceType: string;
  resourceId: number;
  postId: number | null;
  data: Record<string, unknown>;
}

beforeAll(async () => {
  t = await startTestApp();
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
  ann = await signUp(t.app, { name: 'Ann' });
  bob = await signUp(t.app, { name: 'Bob' });
});
afterAll(async () => {
  await sql.end();
  await t.close();
});
/** Events written from now on are the test's (sequence values may skip: a rollback uses some up). */
async function markNow(): Promise<void> {
  mark = Number(
    (await sql.query('SELECT greatest((SELECT max(seq) FROM events), (SELECT max(seq) FROM events_pending), 0) AS m'))
      .rows[0].m,
  );
}
beforeEach(markNow);

/** The events written since the test began, numbered or not, in insertion order. */
async function newEvents(): Promise<LoggedEvent[]> {
  const { rows } = await sql.query(
    `SELECT type, resource_type AS "resourceType", resource_id::int AS "resourceId", post_id::int AS "postId", data
     FROM (SELECT seq, type, resource_type, resource_id, post_id, data FROM events
           UNION ALL SELECT seq, type, resource_type, resource_id, post_id, data FROM events_pending) e
     WHERE seq > $1 ORDER BY seq`,
    [mark],
  );
  return rows;
}

const send = (method: 'POST' | 'PATCH' | 'PUT' | 'DELETE', url: string, who: SignedUp, payload?: object) =>
  t.app.inject({ method, url, headers: who.auth, ...(payload ? { payload } : {}) });

async function newPost(title = 'a post') {
  const res = await send('POST', '/posts', ann, { title, body: 'its body' });
  expect(res.statusCode).toBe(201);
  return res.json() as { id: number };
}

describe('write routes make exactly their event', () => {
  it('POST /users: user.created with public fields only (no e-mail)', async () => {
    const cat = await signUp(t.app, { name: 'Cat' });
    const { email: _email, ...shown } = cat.user;
    expect(await newEvents()).toEqual([
      { type: 'user.created', resourceType: 'user', resourceId: cat.user.id, postId: null, data: shown },
    ]);
    expect(JSON.stringify(await newEvents())).not.toContain('@example.com');
  });

  it('PATCH /users/{id}: user.updated; a no-op PATCH none; nor an e-mail change (a private field)', async () => {
    const res = await send('PATCH', `/users/${ann.user.id}`, ann, { name: 'Ann B' });
    expect(res.statusCode).toBe(200);
    const { email: _email, ...shown } = res.json();
    expect(await newEvents()).toEqual([
      { type: 'user.updated', resourceType: 'user', resourceId: ann.user.id, postId: null, data: shown },
    ]);

    await markNow();
    expect((await send('PATCH', `/users/${ann.user.id}`, ann, { name: 'Ann B' })).statusCode).toBe(200);
    expect(await newEvents()).toEqual([]);

    expect((await send('PATCH', `/users/${ann.user.id}`, ann, { email: 'ann.b@example.com' })).statusCode).toBe(200);
    expect(await newEvents()).toEqual([]);
  });

  it('POST /posts: post.created with the GET body', async () => {
    const post = await newPost();
    const shown = (await t.app.inject({ method: 'GET', url: `/posts/${post.id}` })).json();
    expect(await newEvents()).toEqual([
      { type: 'post.created', resourceType: 'post', resourceId: post.id, postId: post.id, data: shown },
    ]);
  });

  it('PATCH and PUT /posts/{id}: post.updated each; a no-op PATCH and PUT none', async () => {
    const post = await newPost();
    await markNow();
    const patched = await send('PATCH', `/posts/${post.id}`, ann, { title: 'patched' });
    expect(patched.statusCode).toBe(200);
    const put = await send('PUT', `/posts/${post.id}`, ann, { title: 'put', body: 'new body' });
    expect(put.statusCode).toBe(200);
    expect(await newEvents()).toEqual([
      { type: 'post.updated', resourceType: 'post', resourceId: post.id, postId: post.id, data: patched.json() },
      { type: 'post.updated', resourceType: 'post', resourceId: post.id, postId: post.id, data: put.json() },
    ]);

    await markNow();
    expect((await send('PATCH', `/posts/${post.id}`, ann, { title: 'put' })).statusCode).toBe(200);
    expect((await send('PUT', `/posts/${post.id}`, ann, { title: 'put', body: 'new body' })).statusCode).toBe(200);
    expect(await newEvents()).toEqual([]);
  });

  it('DELETE /posts/{id}: post.deleted with its id', async () => {
    const post = await newPost();
    await markNow();
    expect((await send('DELETE', `/posts/${post.id}`, ann)).statusCode).toBe(204);
    expect(await newEvents()).toEqual([
      { type: 'post.deleted', resourceType: 'post', resourceId: post.id, postId: post.id, data: { id: post.id } },
    ]);
  });

  it("comments: created, updated, deleted, each exactly once (the post's commentCount moves no post event); the delete leaves their ids only", async () => {
    const post = await newPost();
    await markNow();
    const created = await send('POST', `/posts/${post.id}/comments`, bob, { body: 'first' });
    expect(created.statusCode).toBe(201);
    const comment = created.json();
    const patched = await send('PATCH', `/posts/${post.id}/comments/${comment.id}`, bob, { body: 'edited' });
    expect(patched.statusCode).toBe(200);
    expect((await send('PATCH', `/posts/${post.id}/comments/${comment.id}`, bob, { body: 'edited' })).statusCode).toBe(
      200,
    );
    expect((await send('DELETE', `/posts/${post.id}/comments/${comment.id}`, bob)).statusCode).toBe(204);
    const resource = { resourceType: 'comment', resourceId: comment.id, postId: post.id };
    const ids = { id: comment.id, postId: post.id };
    expect(await newEvents()).toEqual([
      { type: 'comment.created', ...resource, data: ids },
      { type: 'comment.updated', ...resource, data: ids },
      { type: 'comment.deleted', ...resource, data: ids },
    ]);
  });

  it('deleting a post deletes its comments: post.deleted, then one comment.deleted for each', async () => {
    const post = await newPost();
    const c1 = (await send('POST', `/posts/${post.id}/comments`, bob, { body: 'one' })).json();
    const c2 = (await send('POST', `/posts/${post.id}/comments`, bob, { body: 'two' })).json();
    await markNow();
    expect((await send('DELETE', `/posts/${post.id}`, ann)).statusCode).toBe(204);
    const events = await newEvents();
    expect(events.map((e) => [e.type, e.resourceId])).toEqual([
      ['post.deleted', post.id],
      ['comment.deleted', c1.id],
      ['comment.deleted', c2.id],
    ]);
  });
});

describe('writes that change nothing make nothing', () => {
  it('rejected writes: 422, 403, 404, 412 make no event', async () => {
    const post = await newPost();
    await markNow();
    expect((await send('POST', '/posts', ann, { title: '' })).statusCode).toBe(422);
    expect((await send('PATCH', `/posts/${post.id}`, bob, { title: 'not yours' })).statusCode).toBe(403);
    expect((await send('DELETE', `/posts/${post.id}`, bob)).statusCode).toBe(403);
    expect((await send('POST', '/posts/999999/comments', bob, { body: 'nowhere' })).statusCode).toBe(404);
    const stale = await t.app.inject({
      method: 'PATCH',
      url: `/posts/${post.id}`,
      headers: { ...ann.auth, 'if-match': '"stale"' },
      payload: { title: 'late' },
    });
    expect(stale.statusCode).toBe(412);
    expect(
      (
        await t.app.inject({
          method: 'POST',
          url: '/users',
          payload: { name: 'Dup', email: bob.user.email, password: 'long enough' },
        })
      ).statusCode,
    ).toBe(409);
    expect(await newEvents()).toEqual([]);
  });

  it('a rolled-back transaction makes none', async () => {
    await sql.query('BEGIN');
    await sql.query("INSERT INTO posts (author_id, title, body) VALUES ($1, 'rolled back', 'x')", [ann.user.id]);
    await sql.query('UPDATE users SET name = $2 WHERE id = $1', [bob.user.id, 'Bobby']);
    await sql.query('ROLLBACK');
    expect(await newEvents()).toEqual([]);
  });

  it('an SQL UPDATE to equal values makes none', async () => {
    await sql.query('UPDATE posts SET title = title');
    await sql.query('UPDATE comments SET body = body');
    await sql.query('UPDATE users SET name = name');
    expect(await newEvents()).toEqual([]);
  });
});

describe('SQL run directly', () => {
  it("makes one event per changed row, in the same shape as the API's", async () => {
    const post = await newPost('by sql');
    await markNow();
    const { rows } = await sql.query(
      "INSERT INTO posts (author_id, title, body) VALUES ($1, 'sql one', 'x'), ($1, 'sql two', 'y') RETURNING id::int",
      [bob.user.id],
    );
    await sql.query("UPDATE posts SET title = title || '!', updated_at = now() WHERE id = ANY($1)", [
      [post.id, rows[0].id],
    ]);
    await sql.query('DELETE FROM posts WHERE id = $1', [rows[1].id]);
    const events = await newEvents();
    expect(events.map((e) => [e.type, e.resourceId])).toEqual([
      ['post.created', rows[0].id],
      ['post.created', rows[1].id],
      ['post.updated', post.id],
      ['post.updated', rows[0].id],
      ['post.deleted', rows[1].id],
    ]);
    const shown = (await t.app.inject({ method: 'GET', url: `/posts/${post.id}` })).json();
    expect(events[2]!.data).toEqual(shown);
  });
});

describe('trace context', () => {
  it('without tracing, events store none: a create, a PATCH, a sign-up and a transaction leave traceparent NULL', async () => {
    const post = await newPost('untraced');
    expect((await send('PATCH', `/posts/${post.id}`, ann, { title: 'untraced again' })).statusCode).toBe(200);
    await signUp(t.app, { name: 'Dan' });
    expect((await send('DELETE', `/posts/${post.id}`, ann)).statusCode).toBe(204);
    const { rows } = await sql.query(
      `SELECT type, traceparent FROM (SELECT seq, type, traceparent FROM events
         UNION ALL SELECT seq, type, traceparent FROM events_pending) e WHERE seq > $1 ORDER BY seq`,
      [mark],
    );
    expect(rows).toEqual([
      { type: 'post.created', traceparent: null },
      { type: 'post.updated', traceparent: null },
      { type: 'user.created', traceparent: null },
      { type: 'post.deleted', traceparent: null },
    ]);
  });
});
