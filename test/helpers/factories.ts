/**
 * Test data through the real API: users are signed up with POST /users and
 * logged in with POST /tokens, so every test exercises the production path.
 */
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { usersRepository } from '../../src/repositories/users.js';
import { createTestDatabase, type TestDatabase , onTopology } from './database.js';
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
export async function startTestApp(env: Record<string, string> = {}): Promise<TestApp> {
  const db = await createTestDatabase();
  const app = await startInstance(db, env);
  return {
    app,
    db,
    close: async () => {
      await app.close();
      await db.drop();
    },
  };
}

/** Another instance of the production app on the database `db` (as several behind a balancer share one). */
export async function startInstance(db: TestDatabase, env: Record<string, string> = {}): Promise<FastifyInstance> {
  const config = loadConfig({ LOG_LEVEL: 'silent', RATE_LIMIT_MAX: '1000000', RATE_LIMIT_AUTH_MAX: '1000000', ...env });
  const app = (await buildApp({ ...config, ...onTopology(db.url) })) as unknown as FastifyInstance;
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
