/**
 * Test data through the real API: users are signed up with POST /users and
 * logged in with POST /tokens, posts and comments created with POST, so every
 * test exercises the production path. useTestApp is a test file's set-up.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll } from 'vitest';
import { buildApp } from '../../src/app.js';
import { loadConfig, type AppConfig } from '../../src/config.js';
import { usersRepository } from '../../src/repositories/users.js';
import type { Comment } from '../../src/repositories/comments.js';
import type { Post } from '../../src/repositories/posts.js';
import { createTestDatabase, onTopology, type TestDatabase } from './database.js';
import { checkAgainstDocument } from './openapi-conformance.js';

export interface TestApp {
  app: FastifyInstance;
  db: TestDatabase;
  close(): Promise<void>;
}

/**
 * The production app on a fresh database; rate limits high unless a test sets
 * them. Every response it gives a test is checked against its OpenAPI document.
 */
export async function startTestApp(env: Record<string, string> = {}, tuning: Tuning = {}): Promise<TestApp> {
  const db = await createTestDatabase();
  const app = await startInstance(db, env, tuning);
  return {
    app,
    db,
    close: async () => {
      await app.close();
      await db.drop();
    },
  };
}

/** The contract's time constants a test may change (they are not settings): buildApp's config, not env. */
export type Tuning = Partial<Omit<AppConfig, 'webhooks'>> & { webhooks?: Partial<AppConfig['webhooks']> };

/**
 * The app's config from `env`, with `tuning` applied. A connection may take a loaded machine longer to open than
 * the production 3 s (a CI run's first sign-up answered 503 "unreachable"): a test about that wait sets it back.
 */
export function testConfig(env: Record<string, string> = {}, tuning: Tuning = {}) {
  const config = loadConfig({ LOG_LEVEL: 'silent', RATE_LIMIT_MAX: '1000000', RATE_LIMIT_AUTH_MAX: '1000000', ...env });
  return { ...config, pgConnectTimeoutMs: 30_000, ...tuning, webhooks: { ...config.webhooks, ...tuning.webhooks } };
}

/** Another instance of the production app on the database `db` (as several behind a balancer share one). */
export async function startInstance(
  db: TestDatabase,
  env: Record<string, string> = {},
  tuning: Tuning = {},
): Promise<FastifyInstance> {
  const app = (await buildApp({ ...testConfig(env, tuning), ...onTopology(db.url) })) as unknown as FastifyInstance;
  await checkAgainstDocument(app);
  return app;
}

let counter = 0;

export interface SignedUp {
  user: { id: number; name: string; role: string; email: string; createdAt: string };
  token: string;
  tokenId: number;
  password: string;
  auth: { authorization: string };
}

export async function signUp(
  app: FastifyInstance,
  overrides: { name?: string; email?: string; password?: string } = {},
): Promise<SignedUp> {
  counter += 1;
  const password = overrides.password ?? `password-${counter}`;
  const body = {
    name: overrides.name ?? `User ${counter}`,
    email: overrides.email ?? `user${counter}-${process.pid}@example.com`,
    password,
  };
  const created = await app.inject({ method: 'POST', url: '/users', payload: body });
  if (created.statusCode !== 201) throw new Error(`sign-up failed: ${created.statusCode} ${created.body}`);
  const login = await app.inject({ method: 'POST', url: '/tokens', payload: { email: body.email, password } });
  if (login.statusCode !== 201) throw new Error(`log-in failed: ${login.statusCode} ${login.body}`);
  const { token, id: tokenId, user } = login.json();
  return { user, token, tokenId, password, auth: { authorization: `Bearer ${token}` } };
}

/** The same thing the operator command `admin:grant` does. */
export async function makeAdmin(app: FastifyInstance, email: string): Promise<void> {
  await usersRepository(app.db).setRole(email, 'admin');
}

/** A post by `who` (a title and body of its own unless given); anything but 201 throws. */
export async function createPost(
  app: FastifyInstance,
  who: SignedUp,
  fields: { title?: string; body?: string } = {},
): Promise<Post> {
  const payload = { title: fields.title ?? 'A post', body: fields.body ?? 'text' };
  const res = await app.inject({ method: 'POST', url: '/posts', headers: who.auth, payload });
  if (res.statusCode !== 201) throw new Error(`creating a post failed: ${res.statusCode} ${res.body}`);
  return res.json();
}

/** A comment by `who` under post `postId`; anything but 201 throws. */
export async function createComment(
  app: FastifyInstance,
  who: SignedUp,
  postId: number,
  body = 'a comment',
): Promise<Comment> {
  const res = await app.inject({
    method: 'POST',
    url: `/posts/${postId}/comments`,
    headers: who.auth,
    payload: { body },
  });
  if (res.statusCode !== 201) throw new Error(`creating a comment failed: ${res.statusCode} ${res.body}`);
  return res.json();
}

type SignUpOverrides = Parameters<typeof signUp>[1];

export interface TestFile extends TestApp {
  /** A user signed up before the file's first test (filled in then: use it in tests and hooks). */
  user(overrides?: SignUpOverrides): SignedUp;
  /** The same, then made an admin. */
  admin(overrides?: SignUpOverrides): SignedUp;
}

/**
 * A test file's set-up: startTestApp(env) before its first test (or the
 * describe's, when called in one), the users it asked for signed up in the order
 * asked, and everything closed after its last. The objects returned are filled
 * in by that hook, so a file names them at its top, like its own variables.
 */
export function useTestApp(env: Record<string, string> = {}, tuning: Tuning = {}): TestFile {
  const wanted: { who: SignedUp; overrides: SignUpOverrides; admin: boolean }[] = [];
  const want =
    (admin: boolean) =>
    (overrides: SignUpOverrides = {}) => {
      const who = {} as SignedUp;
      wanted.push({ who, overrides, admin });
      return who;
    };
  const file = { user: want(false), admin: want(true) } as TestFile;
  beforeAll(async () => {
    Object.assign(file, await startTestApp(env, tuning));
    for (const { who, overrides, admin } of wanted) {
      Object.assign(who, await signUp(file.app, overrides));
      if (admin) await makeAdmin(file.app, who.user.email);
    }
  });
  afterAll(() => file.close?.());
  return file;
}
