/**
 * `npm run seed`: the bulk load bypasses the counting triggers, so every total
 * they keep must still equal what COUNT(*) says afterwards, and the data must
 * work through the API like any other (a seeded user logs in with the printed
 * password). Seeding adds to what is there; a second, small seed takes the
 * path that keeps the indexes in place.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { seed, seedCommand, type SeedResult } from '../../src/dev/seed.js';
import { signUp, useTestApp } from '../helpers/factories.js';
import { MISCOUNTED_POSTS } from '../helpers/database.js';
import { DEMO_ID } from '../../src/schemas/common.js';

const t = useTestApp();
const existing = t.user({ name: 'Already Here' });
let printed = '';
let second: SeedResult;
const iso = expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

beforeAll(async () => {
  await seedCommand(t.app.db, { posts: 2000 }, { write: (text: string) => (printed += text) });
  // The demo account again: made once.
  second = await seed(t.app.db, { posts: 100, comments: 150, users: 5, demo: true });
}, 60_000);

async function one<T>(text: string): Promise<T> {
  const { rows } = await t.app.db.query(text);
  return rows[0] as T;
}

describe('npm run seed', () => {
  it('adds users, posts and comments to what was there', async () => {
    expect(printed).toMatch(/^seed: /m);
    expect(printed).toContain('seeded 200 users, 2000 posts, 4000 comments in ');
    // And the demo account's one post and one comment.
    expect(await one('SELECT count(*)::int AS users FROM users')).toEqual({ users: 1 + 200 + 5 + 1 });
    expect(await one('SELECT count(*)::int AS posts FROM posts')).toEqual({ posts: 2101 });
    expect(await one('SELECT count(*)::int AS comments FROM comments')).toEqual({ comments: 4151 });
    expect(second).toMatchObject({ users: 5, posts: 100, comments: 150, userIds: [202, 206], postIds: [2001, 2100] });
    const res = await t.app.inject({ method: 'GET', url: `/users/${existing.user.id}` });
    expect(res.json()).toEqual({
      id: existing.user.id,
      name: 'Already Here',
      role: 'user',
      createdAt: existing.user.createdAt,
    });
  });

  it('leaves every total equal to COUNT(*)', async () => {
    expect(
      await one(`SELECT
        (SELECT n FROM counters WHERE name = 'posts')::int AS "postsCounter", (SELECT count(*) FROM posts)::int AS posts,
        (SELECT n FROM counters WHERE name = 'users')::int AS "usersCounter", (SELECT count(*) FROM users)::int AS users`),
    ).toEqual({ postsCounter: 2101, posts: 2101, usersCounter: 207, users: 207 });
    expect(
      await one(`SELECT count(*)::int AS wrong FROM users u
        WHERE COALESCE((SELECT n FROM author_post_counts a WHERE a.author_id = u.id), 0) <> (SELECT count(*) FROM posts p WHERE p.author_id = u.id)`),
    ).toEqual({ wrong: 0 });
    expect(await one(MISCOUNTED_POSTS)).toEqual({ n: 0 });
    // Not trivially exact: comments are spread unevenly, so the counts vary.
    expect(
      await one(`SELECT EXISTS (SELECT 1 FROM posts p WHERE NOT EXISTS (SELECT 1 FROM comment_counts k WHERE k.post_id = p.id)) AS "someWithout",
        (SELECT max(n) >= 20 FROM comment_counts) AS "somePopular",
        (SELECT max(n) > 2 * min(n) FROM author_post_counts WHERE n > 0) AS "someProlific"`),
    ).toEqual({ someWithout: true, somePopular: true, someProlific: true });
  });

  it('keeps the triggers working afterwards', async () => {
    await signUp(t.app, { name: 'After The Seed' });
    expect(
      await one(
        `SELECT (SELECT n FROM counters WHERE name = 'users')::int AS counter, (SELECT count(*) FROM users)::int AS users`,
      ),
    ).toEqual({ counter: 208, users: 208 });
    expect(await one(`SELECT tgenabled AS enabled FROM pg_trigger WHERE tgname = 'posts_after_insert'`)).toEqual({
      enabled: 'O',
    });
  });

  it('gives unique e-mails and realistic timestamps', async () => {
    expect(await one(`SELECT count(*)::int AS users, count(DISTINCT lower(email))::int AS emails FROM users`)).toEqual({
      users: 208,
      emails: 208,
    });
    expect(
      await one(`SELECT
        count(*) FILTER (WHERE updated_at < created_at)::int AS "editedBeforeCreated",
        count(*) FILTER (WHERE created_at < now() - interval '366 days' OR updated_at > now())::int AS "outsideTheYear",
        count(DISTINCT title) < count(*) / 2 AS "titlesRepeat",
        (max(length(body)) > 10 * min(length(body))) AS "lengthsVary",
        count(*) FILTER (WHERE extract(microseconds FROM created_at)::int % 1000 <> 0) > 0 AS microseconds
        FROM posts`),
    ).toEqual({ editedBeforeCreated: 0, outsideTheYear: 0, titlesRepeat: true, lengthsVary: true, microseconds: true });
    expect(
      await one(`SELECT
        count(*) FILTER (WHERE c.updated_at < c.created_at)::int AS "editedBeforeCreated",
        count(*) FILTER (WHERE c.created_at < p.created_at)::int AS "olderThanPost"
        FROM comments c JOIN posts p ON p.id = c.post_id`),
    ).toEqual({ editedBeforeCreated: 0, olderThanPost: 0 });
  });

  it('prints a password a seeded user logs in with through POST /tokens: the demo account, whatever ran before', async () => {
    const [, password, email] = /password is "([^"]+)"; e\.g\. log in with ([^\s,]+)/.exec(printed) ?? [];
    expect(email).toBe('demo@example.com');
    const res = await t.app.inject({ method: 'POST', url: '/tokens', payload: { email, password } });
    expect(res.statusCode).toBe(201);
    expect(res.json()).toEqual({
      id: expect.any(Number),
      token: expect.any(String),
      tokenType: 'Bearer',
      expiresAt: iso,
      user: { id: DEMO_ID, name: 'Demo User', role: 'user', email, createdAt: iso },
    });
    const wrong = await t.app.inject({ method: 'POST', url: '/tokens', payload: { email, password: `${password}x` } });
    expect(wrong.statusCode).toBe(401);
  });

  it('makes the demo webhook disabled: it sends nothing to its host, which does not answer, until enabled', async () => {
    const hooks = await t.app.inject({ method: 'GET', url: `/webhooks/${DEMO_ID}`, headers: await demoAuth() });
    expect(hooks.json()).toMatchObject({ id: DEMO_ID, userId: DEMO_ID, status: 'disabled' });
    expect(await one(`SELECT count(*)::int AS n FROM webhook_deliveries WHERE next_attempt_at IS NOT NULL`)).toEqual({
      n: 0,
    });
  });
});

async function demoAuth() {
  const res = await t.app.inject({
    method: 'POST',
    url: '/tokens',
    payload: { email: 'demo@example.com', password: 'demo-password' },
  });
  return { authorization: `Bearer ${res.json<{ token: string }>().token}` };
}
