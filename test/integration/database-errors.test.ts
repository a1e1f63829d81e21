/**
 * What the API says when PostgreSQL refuses work, each condition produced for
 * real: a lock wait past the statement timeout (57014) or the lock timeout
 * (55P03), a deadlock (40P01), a serialization failure (40001), too many
 * connections (53300), a missing database (3D000), a role the server does not
 * know (28000), a read-only database (25006), nothing listening, every pooled
 * client busy; the conditions no test can make on a shared server (a full
 * disk, a server starting up, a program limit) raised by PostgreSQL itself.
 * Deadlocks and serialization failures are retried by the transaction helper;
 * the rest are 503s whose message names the cause, readiness included. A data
 * exception (class 22) is the request's fault: 422 naming the field, or 400.
 * Broken and idle-failing clients leave the pool.
 */
import { randomBytes } from 'node:crypto';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { createPool, TRANSACTION_ATTEMPTS, withTransaction } from '../../src/db/pool.js';
import { onTopology, testDatabaseName, testDatabaseUrl, type TestDatabase } from '../helpers/database.js';
import { useCleanups, type LoggedApp } from '../helpers/cleanups.js';
import { createPost, signUp, type Tuning } from '../helpers/factories.js';
import { expectError } from '../helpers/expect.js';

// Sessions are ended behind the clients' backs here: closing one may fail, and that says nothing.
const cleanups = useCleanups({ ignoreFailures: true });

/**
 * On the server itself, also when the suite runs through PgBouncer (the scale
 * topology): these conditions are made on particular sessions (a lock held, a
 * role's connection limit, a backend terminated), and through the pooler the
 * session that waits or fails is whichever one it lends.
 */
async function database(): Promise<TestDatabase> {
  const db = await cleanups.database();
  return { ...db, url: onTopology(db.url).databaseListenUrl ?? db.url };
}

async function client(url: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => undefined);
  await c.connect();
  cleanups.defer(() => c.end());
  return c;
}

async function app(url: string, env: Record<string, string> = {}, tuning: Tuning = {}): Promise<LoggedApp> {
  return cleanups.app({ databaseUrl: url }, { LOG_LEVEL: 'info', ...env }, tuning);
}

/**
 * Waits until a session of the API (not the test's own clients) waits on a lock, while `request` runs.
 * `admin` may be inside a transaction, which keeps the sessions of the first pg_stat_activity it reads
 * until it ends (their wait events are read live): each poll clears that snapshot. A request that ends
 * (or throws) first fails the test with its answer.
 */
async function apiWaitsOnLock(admin: pg.Client, request: Promise<{ statusCode: number; body: string }>) {
  let answer: string | undefined;
  request.then(
    (res) => (answer = `${res.statusCode} ${res.body}`),
    (error: unknown) => (answer = `an error: ${String(error)}`),
  );
  for (;;) {
    await admin.query('SELECT pg_stat_clear_snapshot()');
    const { rowCount } = await admin.query(
      `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'posts-api'
       AND wait_event_type = 'Lock'`,
    );
    if (rowCount) return;
    if (answer) throw new Error(`the request ended before it waited on the lock: ${answer}`);
    await sleep(25);
  }
}

describe('statement timeout (57014)', () => {
  it('a lock wait past PG_STATEMENT_TIMEOUT_MS is a 503 that says the database did not answer in time', async () => {
    const db = await database();
    // The data made by another instance: on a loaded machine, only the lock wait may outlast the short timeout.
    const { app: maker } = await app(db.url);
    const author = await signUp(maker);
    const post = await createPost(maker, author);
    const { app: api, lines } = await app(db.url, { PG_STATEMENT_TIMEOUT_MS: '1000' });
    const other = await client(db.url);
    await other.query('BEGIN');
    await other.query('SELECT 1 FROM posts WHERE id = $1 FOR UPDATE', [post.id]);

    const res = await api.inject({
      method: 'PATCH',
      url: `/posts/${post.id}`,
      headers: author.auth,
      payload: { title: 'new' },
    });
    expectError(res, 503, 'service_unavailable', 'the database did not answer in time; try again shortly');
    expect(res.headers['retry-after']).toBe('5');
    expect(lines.some((l) => l.msg === 'the database did not answer in time; try again shortly')).toBe(true);
    expect(lines.some((l) => /unreachable/.test(l.msg ?? ''))).toBe(false);

    await other.query('ROLLBACK');
    const ready = await api.inject({ url: '/health/ready' });
    expect(ready.statusCode).toBe(200);
    const retried = await api.inject({
      method: 'PATCH',
      url: `/posts/${post.id}`,
      headers: author.auth,
      payload: { title: 'new' },
    });
    expect(retried.statusCode).toBe(200);
    expect(retried.json().title).toBe('new');
  });
});

describe('deadlock (40P01)', () => {
  it('the transaction that PostgreSQL aborts is run again and the request succeeds', async () => {
    const db = await database();
    const { app: api } = await app(db.url);
    const user = await signUp(api);
    // A second token: the password change below revokes it (UPDATE tokens), after locking the user.
    const second = await api.inject({
      method: 'POST',
      url: '/tokens',
      payload: { email: user.user.email, password: user.password },
    });
    const secondTokenId = second.json().id as number;

    const other = await client(db.url);
    await other.query('BEGIN');
    // The API's session runs the deadlock check first (1 s), so it is the one aborted.
    await other.query("SET LOCAL deadlock_timeout = '20s'");
    await other.query('SELECT 1 FROM tokens WHERE id = $1 FOR UPDATE', [secondTokenId]);

    const patch = api.inject({
      method: 'PATCH',
      url: `/users/${user.user.id}`,
      headers: user.auth,
      payload: { password: 'a-new-password' },
    });
    await apiWaitsOnLock(other, patch);
    // Now each waits for the other: the API holds the user row and wants the token row.
    await other.query('SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [user.user.id]);
    await other.query('ROLLBACK');

    const res = await patch;
    expect(res.statusCode).toBe(200);
    const login = await api.inject({
      method: 'POST',
      url: '/tokens',
      payload: { email: user.user.email, password: 'a-new-password' },
    });
    expect(login.statusCode).toBe(201);
    const revoked = await api.inject({
      url: '/users/me',
      headers: { authorization: `Bearer ${second.json().token as string}` },
    });
    expect(revoked.statusCode).toBe(401);
  });
});

describe('serialization failure (40001)', () => {
  it('a write that loses a concurrent-update race under REPEATABLE READ is run again on a fresh snapshot', async () => {
    const db = await database();
    const admin = await client(db.url);
    // The API's transactions default to READ COMMITTED, which never fails this way;
    // a database set to REPEATABLE READ (as an operator may) makes them.
    await admin.query(
      `ALTER DATABASE "${new URL(db.url).pathname.slice(1)}" SET default_transaction_isolation = 'repeatable read'`,
    );
    const { app: api } = await app(db.url);
    const author = await signUp(api);
    const post = await createPost(api, author);

    const other = await client(db.url);
    await other.query('BEGIN');
    await other.query("UPDATE posts SET body = 'from elsewhere', version = version + 1 WHERE id = $1", [post.id]);
    // From an instance started after the first poll: sessions opened since then are missing from the
    // snapshot `other`'s transaction keeps (on a loaded machine the pool opened one for the write).
    const patch = sleep(200).then(async () => {
      const { app: writer } = await app(db.url);
      return writer.inject({
        method: 'PATCH',
        url: `/posts/${post.id}`,
        headers: author.auth,
        payload: { title: 'mine' },
      });
    });
    await apiWaitsOnLock(other, patch);
    await other.query('COMMIT');

    const res = await patch;
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ title: 'mine', body: 'from elsewhere' });
  });

  it('gives up after a bounded number of attempts; the API then says the request collided (503, not an outage)', async () => {
    const db = await database();
    const { app: api } = await app(db.url);
    let attempts = 0;
    // A transaction that fails with a real 40001 every time it runs.
    api.post('/test/always-conflicts', async () =>
      withTransaction(api.db, async (tx) => {
        attempts += 1;
        await tx.query(`DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = 'serialization_failure'; END $$`);
      }),
    );
    const res = await api.inject({ method: 'POST', url: '/test/always-conflicts' });
    expect(attempts).toBe(TRANSACTION_ATTEMPTS);
    expectError(
      res,
      503,
      'service_unavailable',
      'the request collided with concurrent changes and changed nothing; send it again',
    );
    expect(res.headers['retry-after']).toBe('1');
  });
});

describe('too many connections (53300)', () => {
  it('is a 503 saying the database has too many connections, and the API recovers once a slot is free', async () => {
    const db = await database();
    const role = `api_limited_${randomBytes(4).toString('hex')}`;
    const admin = await client(db.url);
    // A password too: the embedded fallback server asks for one (trust auth is not a given).
    const password = randomBytes(12).toString('hex');
    // Three slots, all held below: once freed, the event log's listener (which retries on its own)
    // takes one and the request pool still finds one (with one slot, a loaded machine let the
    // listener win it and every request kept its 503).
    await admin.query(`CREATE ROLE ${role} LOGIN CONNECTION LIMIT 3 PASSWORD '${password}'`);
    // Roles belong to the whole server: dropped last, once the database (and its sessions) are gone.
    cleanups.deferLast(async () => {
      const server = new pg.Client({ connectionString: inject('databaseAdminUrl') });
      await server.connect();
      await server.query(`DROP ROLE IF EXISTS ${role}`).finally(() => server.end());
    });
    await admin.query(`GRANT pg_read_all_data, pg_write_all_data TO ${role}`);
    const url = new URL(db.url);
    url.username = role;
    url.password = password;

    const holders = [await client(url.toString()), await client(url.toString()), await client(url.toString())];
    const { app: api } = await app(url.toString());
    const res = await api.inject({ url: '/posts' });
    expectError(res, 503, 'service_unavailable', 'the database has too many connections; try again shortly');
    expect(res.headers['retry-after']).toBe('1');

    // The server frees a slot when its holder's backend has exited, a moment after end() returns
    // (seen against a server in a container: the next request still a 503).
    await Promise.all(holders.map((h) => h.end()));
    // The listener reconnects by itself, every second: let it take its slot first, as it did on a loaded machine.
    const listening = `SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = $1 AND application_name = 'posts-api-events'`;
    await expect.poll(async () => (await admin.query(listening, [role])).rows[0].n).toBe(1);
    await expect.poll(async () => (await api.inject({ url: '/posts' })).statusCode).toBe(200);
  });
});

/** A TCP proxy to `url`'s server that lets each connection through after `delayMs`; its URL. */
async function delayingProxy(url: string, delayMs: number): Promise<string> {
  const target = new URL(url);
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.pause();
    setTimeout(() => {
      if (socket.destroyed) return;
      const upstream = connect(Number(target.port || 5432), target.hostname);
      sockets.add(upstream);
      socket.pipe(upstream).pipe(socket);
      socket.resume();
      socket.on('error', () => upstream.destroy());
      upstream.on('error', () => socket.destroy());
    }, delayMs);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.defer(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  const proxied = new URL(url);
  proxied.host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return proxied.toString();
}

/** A 503 with its Retry-After, from a request and from readiness alike. */
async function expectUnavailable(api: FastifyInstance, request: InjectOptions, message: string, retryAfter: string) {
  for (const res of [await api.inject(request), await api.inject({ url: '/health/ready' })]) {
    expectError(res, 503, 'service_unavailable', message);
    expect(res.headers['retry-after']).toBe(retryAfter);
  }
}

describe('a database that cannot serve: 503 naming the cause, in answers and in readiness', () => {
  it('unreachable (nothing listens)', async () => {
    const url = new URL(inject('databaseAdminUrl'));
    url.port = '1';
    const { app: api } = await app(url.toString());
    await expectUnavailable(api, { url: '/posts' }, 'the database is unreachable; try again shortly', '5');
  });

  it('slow to open a connection: unreachable past the connect timeout, served within it', async () => {
    const slow = await delayingProxy((await database()).url, 600);
    const { app: impatient } = await app(slow, {}, { pgConnectTimeoutMs: 200 });
    await expectUnavailable(impatient, { url: '/posts' }, 'the database is unreachable; try again shortly', '5');
    // Test apps wait 30 s, not 3: on a loaded machine a CI run's first sign-up answered this 503.
    const { app: patient } = await app(slow);
    expect((await patient.inject({ url: '/posts' })).statusCode).toBe(200);
  });

  it('missing database (3D000)', async () => {
    const missing = testDatabaseUrl(testDatabaseName());
    const { app: api, lines } = await app(onTopology(missing).databaseListenUrl ?? missing);
    await expectUnavailable(
      api,
      { url: '/posts' },
      'the database is missing (it does not exist on the server); try again later',
      '30',
    );
    // The request's log line names the cause without a stack.
    const logged = lines.filter(
      (l) => l.msg === 'the database is missing (it does not exist on the server); try again later' && 'cause' in l,
    );
    expect(logged).toEqual([
      expect.objectContaining({ status: 503, cause: expect.stringMatching(/^3D000 database ".*" does not exist$/) }),
    ]);
    expect(JSON.stringify(logged)).not.toContain('stack');
  });

  it('authentication refused (28000: a role the server does not know)', async () => {
    const db = await database();
    const url = new URL(db.url);
    url.username = `nobody_${randomBytes(4).toString('hex')}`;
    const { app: api } = await app(url.toString());
    await expectUnavailable(
      api,
      { url: '/posts' },
      "the database refused the service's credentials (authentication failed); try again later",
      '30',
    );
  });

  /** Signs a user up, then sets `setting` on the database: the app returned opens its sessions after that. */
  async function afterSetting(setting: string) {
    const db = await database();
    const first = await app(db.url);
    const author = await signUp(first.app);
    const post = await createPost(first.app, author);
    await first.app.close();
    const admin = await client(db.url);
    await admin.query(`ALTER DATABASE "${new URL(db.url).pathname.slice(1)}" SET ${setting}`);
    const { app: api } = await app(db.url);
    return { db, api, author, post };
  }

  it('read-only (25006): writes are 503s, reads still served', async () => {
    const { api, author } = await afterSetting('default_transaction_read_only = on');
    const res = await api.inject({
      method: 'POST',
      url: '/posts',
      headers: author.auth,
      payload: { title: 'T', body: 'B' },
    });
    expectError(
      res,
      503,
      'service_unavailable',
      'the database is read-only (a standby, or a failover under way); try again shortly',
    );
    expect(res.headers['retry-after']).toBe('5');
    expect((await api.inject({ url: '/posts' })).statusCode).toBe(200);
  });

  it('lock not available (55P03): a lock wait past lock_timeout', async () => {
    const { db, api, author, post } = await afterSetting("lock_timeout = '200ms'");
    const other = await client(db.url);
    await other.query('BEGIN');
    await other.query('SELECT 1 FROM posts WHERE id = $1 FOR UPDATE', [post.id]);
    const res = await api.inject({
      method: 'PATCH',
      url: `/posts/${post.id}`,
      headers: author.auth,
      payload: { title: 'new' },
    });
    expectError(
      res,
      503,
      'service_unavailable',
      'what the request needs is locked by another transaction (lock not available); try again shortly',
    );
    expect(res.headers['retry-after']).toBe('1');
    await other.query('ROLLBACK');
  });

  it('the pool exhausted while the database answers: the service is busy, not an outage', async () => {
    const db = await database();
    // The production wait (docs/api.md §2); the pool's one connection is opened first, a loaded machine may take longer.
    const { app: api } = await app(db.url, { PG_POOL_MAX: '1' }, { pgConnectTimeoutMs: 3_000 });
    await expect.poll(async () => (await api.inject({ url: '/posts' })).statusCode).toBe(200);
    const held = await api.db.connect();
    try {
      await expectUnavailable(
        api,
        { url: '/posts' },
        'the service is busy (every database connection of this instance is in use); try again shortly',
        '1',
      );
    } finally {
      held.release();
    }
    expect((await api.inject({ url: '/posts' })).statusCode).toBe(200);
  });

  it.each([
    ['53100', 'disk_full', 'the database is out of disk space; try again later', '30'],
    ['53200', 'out_of_memory', 'the database is out of resources (memory or another limit); try again shortly', '5'],
    ['57P01', 'admin_shutdown', 'the database is shutting down or starting up; try again shortly', '5'],
    ['57P03', 'cannot_connect_now', 'the database is shutting down or starting up; try again shortly', '5'],
    [
      '54000',
      'program_limit_exceeded',
      'the request ran into a limit of the database (program limit exceeded); try again later',
      '30',
    ],
  ])('%s (%s), raised by PostgreSQL', async (code, name, message, retryAfter) => {
    const db = await database();
    const { app: api } = await app(db.url);
    api.get('/test/raise', async () =>
      api.db.query(`DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '${name}'; END $$`),
    );
    const res = await api.inject({ url: '/test/raise' });
    expectError(res, 503, 'service_unavailable', message);
    expect(res.headers['retry-after']).toBe(retryAfter);
    expect(code).toHaveLength(5);
  });
});

describe('the schema changed under a running service', () => {
  it.each([
    ['42P01 (a table gone)', 'ALTER TABLE comments RENAME TO comments_moved'],
    ['42703 (a column gone)', 'ALTER TABLE comments RENAME COLUMN body TO body_moved'],
  ])('%s: a 503 naming npm run migrate, not a 500', async (_name, change) => {
    const { db, api, post } = await schemaAltered();
    const admin = await client(db.url);
    await admin.query(change);
    const res = await api.inject({ url: `/posts/${post.id}/comments` });
    expectError(
      res,
      503,
      'service_unavailable',
      "the database's schema is not the one this version of the service needs (run npm run migrate); try again later",
    );
    expect(res.headers['retry-after']).toBe('30');
  });

  async function schemaAltered() {
    const db = await database();
    const { app: api } = await app(db.url);
    const author = await signUp(api);
    return { db, api, post: await createPost(api, author) };
  }
});

describe('a connection closed under a query', () => {
  it("node-postgres's 'Client was closed' is the database unreachable (503), not a 500", async () => {
    const db = await database();
    const { app: api } = await app(db.url);
    api.get('/test/closed', async () => {
      const closed = new pg.Client({ connectionString: db.url });
      await closed.connect();
      await closed.end();
      return closed.query('SELECT 1');
    });
    expectError(
      await api.inject({ url: '/test/closed' }),
      503,
      'service_unavailable',
      'the database is unreachable; try again shortly',
    );
  });
});

describe('a post deleted between the check and the insert (23503 on comments.post_id)', () => {
  it('a comment on it is a 404, not a 500, and nothing is written', async () => {
    const db = await database();
    const { app: api } = await app(db.url);
    const author = await signUp(api);
    const post = await createPost(api, author);
    const admin = await client(db.url);
    // Deleting the post as the comment goes in, as an operator's SQL could: the foreign key refuses the insert.
    await admin.query(`CREATE FUNCTION vanish() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN SET session_replication_role = replica; DELETE FROM posts WHERE id = NEW.post_id;
            SET session_replication_role = DEFAULT; RETURN NEW; END $$`);
    await admin.query('CREATE TRIGGER vanish BEFORE INSERT ON comments FOR EACH ROW EXECUTE FUNCTION vanish()');
    const res = await api.inject({
      method: 'POST',
      url: `/posts/${post.id}/comments`,
      headers: author.auth,
      payload: { body: 'hi' },
    });
    expectError(res, 404, 'not_found', 'a resource this request refers to does not exist');
    await admin.query('DROP TRIGGER vanish ON comments');
    expect((await admin.query('SELECT count(*)::int AS n FROM comments')).rows[0].n).toBe(0);
    expect((await admin.query('SELECT count(*)::int AS n FROM posts WHERE id = $1', [post.id])).rows[0].n).toBe(1);
  });
});

describe('data exceptions (class 22)', () => {
  it("a date-time PostgreSQL cannot take is a 400, without the database's words", async () => {
    const db = await database();
    const { app: api } = await app(db.url);
    // The posts schema refuses year 0 itself; a route whose schema takes any RFC 3339
    // date-time lets one reach PostgreSQL, which has no year 0 (22008).
    api.get(
      '/test/at',
      { schema: { querystring: { type: 'object', properties: { at: { type: 'string', format: 'date-time' } } } } },
      async (request) => api.db.query('SELECT $1::timestamptz', [(request.query as { at: string }).at]),
    );
    const res = await api.inject({ url: '/test/at?at=0000-01-01T00:00:00Z' });
    expectError(res, 400, 'bad_request', 'a value in the request is out of the range the service accepts');
    // An offset beyond PostgreSQL's (22009) never reaches it: the schema names the field.
    const offset = await api.inject({ url: '/posts?createdAfter=2020-01-01T00:00:00%2B19:26' });
    expect(offset.statusCode).toBe(422);
    expect(Object.keys(offset.json().fieldErrors)).toEqual(['createdAfter']);
  });

  it('a value no request field holds: 400', async () => {
    const db = await database();
    const { app: api } = await app(db.url);
    api.get('/test/overflow', async () => api.db.query("SELECT '99999-99-99'::timestamptz"));
    const res = await api.inject({ url: '/test/overflow' });
    expectError(res, 400, 'bad_request', 'a value in the request is out of the range the service accepts');
  });
});

describe('broken clients', () => {
  it('errors of idle pooled clients are logged, and the pool replaces them', async () => {
    const db = await database();
    const { app: api, lines } = await app(db.url);
    expect((await api.inject({ url: '/posts' })).statusCode).toBe(200);
    const admin = await client(db.url);
    // Terminated again until it catches a connection idle in the pool: in a full run on a loaded machine one
    // terminate caught none (seen once; the test waited 30 s for a log line that never came).
    for (let i = 0; i < 150 && !lines.some((l) => l.msg?.startsWith('an idle database connection failed')); i++) {
      await admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()
         AND application_name = 'posts-api' AND state = 'idle'`,
      );
      await sleep(200);
    }
    expect(
      lines.filter((l) => l.msg === 'an idle database connection failed; the pool replaces it').length,
    ).toBeGreaterThan(0);
    expect((await api.inject({ url: '/posts' })).statusCode).toBe(200);
  });

  it('a client whose ROLLBACK failed is destroyed, not handed out again', async () => {
    const db = await database();
    const pool = createPool(db.url, 1);
    cleanups.defer(() => pool.end());
    let pid = 0;
    await expect(
      withTransaction(pool, async (tx) => {
        pid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
        // The connection dies under the transaction, so the ROLLBACK that follows fails.
        await tx.query('SELECT pg_terminate_backend(pg_backend_pid())').catch(() => undefined);
        throw new Error('the work failed');
      }),
    ).rejects.toThrow('the work failed');
    expect(pool.totalCount).toBe(0);
    const { rows } = await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    expect(rows[0]!.pid).not.toBe(pid);
  });
});
