/**
 * Named statements that a pooler in transaction mode loses (src/db/pool.ts):
 * PostgreSQL's own 26000 ("does not exist") and 42P05 ("already exists") are
 * made here on a direct connection by DEALLOCATE and PREPARE behind the
 * client's back, which is what PgBouncer < 1.21 does to it by moving it
 * between server connections. The pool goes on unnamed, says so once, and the
 * statement that met the loss still answers: sent again on its own, or, in a
 * transaction, the whole transaction run again. Through a real PgBouncer 1.18
 * (the scale topology) the API answers every request.
 */
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { createPool, withTransaction } from '../../src/db/pool.js';
import { prepared } from '../../src/db/sql.js';
import { useCleanups } from '../helpers/cleanups.js';
import { onTopology, type TestDatabase } from '../helpers/database.js';
import { signUp } from '../helpers/factories.js';

let db: TestDatabase;
/** The server itself, also in the scale topology: these tests act on one session. */
let direct: string;
const cleanups = useCleanups({ ignoreFailures: true });

beforeAll(async () => {
  db = await cleanups.database();
  direct = onTopology(db.url).databaseListenUrl ?? db.url;
});

const TEXT = 'SELECT $1::int AS n';
const statement = (n: number) => prepared(TEXT, [n]);
const quoted = (name: string | undefined) => `"${name!}"`;

function pool() {
  const lost: Error[] = [];
  // One client, so every query below runs on the same session.
  const p = createPool(direct, 1, { onStatementNamesLost: (error) => lost.push(error) });
  cleanups.defer(() => p.end());
  return { pool: p, lost };
}

describe('a statement without values (the first page of a list)', () => {
  it('is named too: PostgreSQL parses and plans it once per session, not at every run', async () => {
    const { pool: p } = pool();
    const first = prepared('SELECT 42 AS n', []);
    expect(first.name).toMatch(/^posts_api_[0-9a-f]{16}$/);
    for (let run = 0; run < 3; run++) expect((await p.query<{ n: number }>(first)).rows).toEqual([{ n: 42 }]);
    const { rows } = await p.query('SELECT statement FROM pg_prepared_statements WHERE name = $1', [first.name]);
    expect(rows).toEqual([{ statement: 'SELECT 42 AS n' }]);
  });
});

describe('a named statement the session lost (26000)', () => {
  it('is sent again unnamed and answers; the pool says so once and names nothing from then on', async () => {
    const { pool: p, lost } = pool();
    expect((await p.query<{ n: number }>(statement(1))).rows).toEqual([{ n: 1 }]);
    await p.query(`DEALLOCATE ${quoted(statement(1).name)}`);

    expect((await p.query<{ n: number }>(statement(2))).rows).toEqual([{ n: 2 }]);
    expect(lost.map((e) => (e as { code?: string }).code)).toEqual(['26000']);
    // Unnamed from now on: nothing more is prepared on the session.
    await p.query(statement(3));
    const { rows } = await p.query<{ count: number }>('SELECT count(*)::int AS count FROM pg_prepared_statements');
    expect(rows[0]!.count).toBe(0);
    expect(lost).toHaveLength(1);
  });

  it('inside a transaction: the transaction runs again whole, its first attempt leaves nothing', async () => {
    const { pool: p, lost } = pool();
    await p.query('CREATE TEMP TABLE IF NOT EXISTS marks (n int)');
    await p.query(statement(1));
    await p.query(`DEALLOCATE ${quoted(statement(1).name)}`);

    let attempts = 0;
    const n = await withTransaction(p, async (tx) => {
      attempts += 1;
      await tx.query('INSERT INTO marks VALUES (1)');
      return (await tx.query<{ n: number }>(statement(7))).rows[0]!.n;
    });
    expect(n).toBe(7);
    expect(attempts).toBe(2);
    expect(lost).toHaveLength(1);
    expect((await p.query<{ count: number }>('SELECT count(*)::int AS count FROM marks')).rows[0]!.count).toBe(1);
  });
});

describe('a named statement the session already has (42P05)', () => {
  it('is sent again unnamed and answers', async () => {
    const { pool: p, lost } = pool();
    await p.query(`PREPARE ${quoted(statement(1).name)} (int) AS SELECT $1 AS n`);
    expect((await p.query<{ n: number }>(statement(4))).rows).toEqual([{ n: 4 }]);
    expect(lost.map((e) => (e as { code?: string }).code)).toEqual(['42P05']);
  });
});

const bouncer = process.env.SCALE_BOUNCER_URL;

describe.skipIf(!bouncer)('through PgBouncer 1.18 in transaction mode (skipped: needs the scale topology)', () => {
  /** A second client of the same PgBouncer pool: its open transaction holds the server connection PgBouncer would lend next. */
  async function holdServerConnection(): Promise<void> {
    const url = new URL(bouncer!);
    url.pathname = new URL(db.url).pathname;
    const holder = new pg.Client({ connectionString: url.toString() });
    holder.on('error', () => undefined);
    await holder.connect();
    cleanups.defer(() => holder.end());
    await holder.query('BEGIN');
    await holder.query('SELECT 1');
    cleanups.defer(() => holder.query('ROLLBACK'));
  }

  it('answers every request, in autocommit and in a transaction, and warns once', async () => {
    const url = new URL(bouncer!);
    url.pathname = new URL(db.url).pathname;
    // One client, cached tokens, no webhook worker polling on the pool: which
    // statement runs where is known.
    const env = {
      LOG_LEVEL: 'info',
      PG_POOL_MAX: '1',
      RATE_LIMIT_MAX: '100000',
      RATE_LIMIT_AUTH_MAX: '100000',
      WEBHOOK_CONCURRENCY: '0',
    };
    const { app, lines } = await cleanups.app({ databaseUrl: url.toString() }, env, { authCacheMs: 60_000 });
    const ann = await signUp(app);
    const created = await app.inject({
      method: 'POST',
      url: '/posts',
      headers: ann.auth,
      payload: { title: 'T', body: 'B' },
    });
    const id = created.json().id as number;
    const read = await app.inject({ url: `/posts/${id}` });
    expect(read.statusCode).toBe(200);

    // PgBouncer lends the most recently used server connection first: with the three most recent held (the
    // sequencer's background work may have used one since the read), the next statement lands on another one.
    for (let i = 0; i < 3; i++) await holdServerConnection();
    const again = await app.inject({ url: `/posts/${id}` });
    expect(again.statusCode).toBe(200);
    expect(again.json().title).toBe('T');
    const patched = await app.inject({
      method: 'PATCH',
      url: `/posts/${id}`,
      headers: { ...ann.auth, 'if-match': read.headers.etag as string },
      payload: { title: 'U' },
    });
    expect(patched.statusCode).toBe(200);
    expect(patched.json().title).toBe('U');

    const warnings = lines.filter((l) => l.msg?.includes('lost a named prepared statement'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.level).toBe(40);
  });
});
