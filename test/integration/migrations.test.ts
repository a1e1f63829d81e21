/**
 * The migrations' Down sections: rolling every shipped migration back leaves
 * nothing of the schema behind, and migrating again rebuilds the same schema
 * (tables, columns, indexes, constraints, functions, triggers).
 */
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { runner } from 'node-pg-migrate';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { migrate, NOT_MIGRATIONS, shippedMigrations } from '../../src/db/migrate.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';

const MIGRATIONS = fileURLToPath(new URL('../../migrations', import.meta.url));

// Each object of the public schema as PostgreSQL would re-create it, sorted.
const SCHEMA_SQL = `
  SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
         || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
         || COALESCE(' default ' || pg_get_expr(d.adbin, d.adrelid), '') AS def
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
     AND c.relname <> 'pgmigrations'
  UNION ALL
  SELECT 'options ' || relname || ' ' || array_to_string(reloptions, ',') FROM pg_class
   WHERE relnamespace = 'public'::regnamespace AND reloptions IS NOT NULL
  UNION ALL
  SELECT pg_get_indexdef(indexrelid) FROM pg_index JOIN pg_class ON pg_class.oid = indrelid
   WHERE relnamespace = 'public'::regnamespace AND relname <> 'pgmigrations'
  UNION ALL
  SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
   WHERE connamespace = 'public'::regnamespace AND conrelid <> 'pgmigrations'::regclass
  UNION ALL
  SELECT pg_get_functiondef(oid) FROM pg_proc WHERE pronamespace = 'public'::regnamespace
  UNION ALL
  SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL
  SELECT 'text search configuration ' || cfgname FROM pg_ts_config WHERE cfgnamespace = 'public'::regnamespace
  UNION ALL
  SELECT 'extension ' || extname FROM pg_extension WHERE extname <> 'plpgsql'
  ORDER BY 1`;

let db: TestDatabase;
let client: pg.Client;

beforeAll(async () => {
  db = await createTestDatabase();
  client = new pg.Client({ connectionString: db.url });
  await client.connect();
});

afterAll(async () => {
  await client?.end();
  await db?.drop();
});

const schema = async () => (await client.query<{ def: string }>(SCHEMA_SQL)).rows.map((row) => row.def);

it('rolls every migration back to an empty schema, and migrating again rebuilds the same one', async () => {
  const migrated = await schema();
  expect(migrated.length).toBeGreaterThan(0);

  await runner({
    databaseUrl: db.url,
    dir: MIGRATIONS,
    ignorePattern: NOT_MIGRATIONS,
    direction: 'down',
    count: Infinity,
    migrationsTable: 'pgmigrations',
    singleTransaction: true,
    log: () => {},
  });
  expect(await schema()).toEqual([]);
  expect((await client.query('SELECT name FROM pgmigrations')).rows).toEqual([]);

  await migrate(db.url);
  expect(await schema()).toEqual(migrated);
  const applied = await client.query<{ name: string }>('SELECT name FROM pgmigrations ORDER BY name');
  expect(applied.rows.map((row) => row.name)).toEqual(shippedMigrations());
});
