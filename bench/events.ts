/**
 * `npm run bench:events` — the event log's figures (issue #27, figures, not tests):
 *
 *   1. builds the service (`npm run build`) and loads a database of its own
 *      holding one user, one post and 1 000 000 numbered events (bulk SQL),
 *      reused by later runs while it holds exactly those events;
 *   2. runs `node dist/src/server.js` on it (MAX_STREAMS raised for the run);
 *   3. the feed: GET /events?after=<random id>&limit=100 with autocannon
 *      (32 connections): pages/s, p50/p99, the service's CPU per request;
 *   4. the fan-out: 1 000 open GET /events/stream connections, POST /posts at
 *      200/s through the API, and the time from each write's 201 answer to its
 *      event's receipt on every stream (bench/event-streams.ts);
 *   5. writes the section "Events (issue #27)" of bench/RESULTS.md (a run with
 *      other sizes: bench/out/RESULTS-events.md).
 *
 * Exits non-zero if a request failed or a stream missed an event.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import { exitWithUsage, parseCommandLine, type CommandSpec } from '../src/command-line.js';
import { migrate } from '../src/db/migrate.js';
import { createPool } from '../src/db/pool.js';
import { DEMO_PASSWORD, seed } from '../src/dev/seed.js';
import {
  benchServer,
  cleanUp,
  databaseExists,
  databaseUrl,
  lockDatasets,
  migratesInPlace,
  recreateDatabase,
  withClient,
  type BenchServer,
  type Dataset,
} from './dataset.js';
import { measureFanOut, type FanOut } from './event-streams.js';
import { CONNECTIONS } from './load.js';
import { cpuSeconds, freePort, log, OUT, ROOT, run, startService, type Child } from './processes.js';
import { POST_BODY } from './scenarios.js';

const SPEC = {
  scripts: ['bench:events'],
  synopsis: '[--events N] [--streams N] [--rate N] [--seconds S] [--stream-seconds S]',
  help: `Measures the event feed and its streams (issue #27) and writes the section "Events (issue #27)"
of bench/RESULTS.md (with other sizes than the defaults: bench/out/RESULTS-events.md).

  --events N           events in the database (default 1000000)
  --streams N          open GET /events/stream connections (default 1000)
  --rate N             POST /posts per second during the fan-out (default 200)
  --seconds S          seconds of GET /events load (default 10)
  --stream-seconds S   seconds of writes during the fan-out (default 15)
  -h, --help           print this help and exit

BENCH_DATABASE_URL: a PostgreSQL server to use (default: 127.0.0.1:5432 if it answers, else embedded).`,
  options: {
    events: { type: 'string', default: '1000000' },
    streams: { type: 'string', default: '1000' },
    rate: { type: 'string', default: '200' },
    seconds: { type: 'string', default: '10' },
    'stream-seconds': { type: 'string', default: '15' },
  },
} as const satisfies CommandSpec;
const { values: flags } = parseCommandLine(SPEC, process.argv.slice(2));
// Fewer than a page of events leaves the feed no full page to read.
const EVENTS = Number(flags.events);
const STREAMS = Number(flags.streams);
const RATE = Number(flags.rate);
const SECONDS = Number(flags.seconds);
const STREAM_SECONDS = Number(flags['stream-seconds']);
for (const [name, value] of Object.entries({ EVENTS, STREAMS, RATE, SECONDS, STREAM_SECONDS })) {
  if (!Number.isInteger(value) || value < 1)
    exitWithUsage(SPEC, `${name.toLowerCase().replace('_', '-')}: not a positive whole number`);
}
const FULL = EVENTS === 1_000_000 && STREAMS === 1_000;
const NAME = EVENTS === 1_000_000 ? 'posts_api_bench_events' : `posts_api_bench_events_${EVENTS}`;
/** One user and one post: what the events (all post.created) describe. */
const SIZE = { users: 1, posts: 1, comments: 0 };

/** Whether the database holds exactly the events 1..EVENTS, and nothing else that a run added. */
async function holdsEvents(url: string): Promise<boolean> {
  return withClient(url, async (c) => {
    const { rows } = await c.query<{ n: number | null }>(
      `SELECT CASE WHEN to_regclass('events') IS NOT NULL THEN (SELECT count(*)::float8 FROM events WHERE id <= $1) END AS n`,
      [EVENTS],
    );
    return rows[0]?.n === EVENTS;
  });
}

/** Drops what a run added: posts (their deletion makes events too), tokens, then every event past the loaded ones. */
async function resetEvents(dataset: Dataset): Promise<void> {
  await cleanUp(dataset);
  await withClient(dataset.url, async (c) => {
    await c.query('SET statement_timeout = 0');
    const { rowCount } = await c.query('DELETE FROM events WHERE id > $1', [EVENTS]);
    await c.query('DELETE FROM events_pending');
    await c.query(`SELECT setval(pg_get_serial_sequence('events_pending', 'seq'), $1)`, [EVENTS]);
    if (rowCount) await c.query('VACUUM (ANALYZE) events');
  });
}

async function ensureEvents(server: BenchServer): Promise<Dataset> {
  const url = databaseUrl(server.adminUrl, NAME);
  const dataset: Dataset = { name: NAME, url, size: SIZE };
  const reusable = (await databaseExists(server, NAME)) && (await holdsEvents(url));
  if (reusable && (await migratesInPlace(migrate, url))) {
    await resetEvents(dataset);
    log(`${NAME}: reusing ${EVENTS} events`);
    return dataset;
  }
  await recreateDatabase(server, NAME);
  await migrate(url);
  const pool = createPool(url, 1);
  await seed(pool, { ...SIZE }).finally(() => pool.end());
  const started = performance.now();
  await withClient(url, async (c) => {
    await c.query('SET statement_timeout = 0');
    // Numbered as the sequencer numbers them (id = seq here); each the post's
    // representation with a title of its own, the size of a real one.
    await c.query(
      `INSERT INTO events (seq, id, type, resource_type, resource_id, post_id, data)
       SELECT g, g, 'post.created', 'post', p.id, p.id, post_event_data(p) || jsonb_build_object('title', 'Event ' || g)
       FROM posts p CROSS JOIN generate_series(1, $1::int) g WHERE p.id = (SELECT min(id) FROM posts)`,
      [EVENTS],
    );
    await c.query(`SELECT setval(pg_get_serial_sequence('events_pending', 'seq'), $1)`, [EVENTS]);
    await c.query('VACUUM (ANALYZE) events');
  });
  log(`${NAME}: ${EVENTS} events loaded in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  return dataset;
}

/** Logs the user in; a 503 (the feed's last requests, given up by autocannon, still hold the pool) is retried for a minute. */
async function logIn(service: Child, dataset: Dataset): Promise<string> {
  const { email } = await withClient(
    dataset.url,
    async (c) => (await c.query<{ email: string }>('SELECT email FROM users ORDER BY id LIMIT 1')).rows[0]!,
  );
  for (let attempt = 0; ; attempt++) {
    const res = await fetch(`${service.url}/tokens`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email, password: DEMO_PASSWORD }),
    });
    if (res.status === 201) return ((await res.json()) as { token: string }).token;
    if (res.status !== 503 || attempt >= 60)
      throw new Error(`log-in as ${email} failed: ${res.status} ${await res.text()}`);
    await res.arrayBuffer();
    await sleep(1000);
  }
}

interface Feed {
  pagesPerSecond: number;
  p50: number;
  p99: number;
  requests: number;
  failed: number;
  statusCodes: Record<string, number>;
  cpuMsPerRequest: number;
}

/** GET /events?after=<random>&limit=100 for `seconds`: every page a full one (after <= EVENTS - 100). */
async function driveFeed(service: Child, seconds: number): Promise<Feed> {
  const check = await fetch(`${service.url}/events?after=${EVENTS - 100}&limit=100`);
  const text = await check.text();
  if (check.status !== 200 || (JSON.parse(text) as { data: unknown[] }).data.length !== 100)
    throw new Error(`GET /events answered ${check.status}: ${text.slice(0, 300)}`);
  const cpu0 = cpuSeconds(service.pid);
  const result = await autocannon({
    url: service.url,
    connections: CONNECTIONS,
    duration: seconds,
    pipelining: 1,
    timeout: 30,
    requests: [
      {
        method: 'GET',
        path: '/events',
        setupRequest: (req) => ({
          ...req,
          path: `/events?after=${Math.floor(Math.random() * (EVENTS - 99))}&limit=100`,
        }),
      },
    ],
  });
  const cpu = cpuSeconds(service.pid) - cpu0;
  const requests = result.requests.total;
  return {
    pagesPerSecond: requests / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requests,
    failed: result.errors + result.non2xx, // its errors count its timeouts
    statusCodes: {
      ...Object.fromEntries(Object.entries(result.statusCodeStats).map(([code, { count }]) => [code, count])),
      errors: result.errors,
      timeouts: result.timeouts,
    },
    cpuMsPerRequest: requests ? (cpu * 1000) / requests : 0,
  };
}

const count = (n: number) => n.toLocaleString('en').replace(/,/g, ' ');
const ms = (x: number) => (Math.abs(x) >= 10 ? x.toFixed(0) : x.toFixed(1));

function section(feed: Feed, fan: FanOut, date: string, machine: string): string {
  const command = FULL ? 'npm run bench:events' : `npm run bench:events -- ${process.argv.slice(2).join(' ')}`;
  return `## Events (issue #27)

\`${command}\`, ${date}. Machine: ${machine}; shared with other work running at the same time
(other helpers' builds and tests), so the figures are one run's, not medians. The load
generators (autocannon, the stream clients, the writer) run in the bench process on the same cores.

Database \`${NAME}\`: ${count(EVENTS)} numbered events (bulk SQL), one user, one post;
the built service (\`node dist/src/server.js\`, production defaults, MAX_STREAMS raised).

**Feed** — \`GET /events?after=<random id>&limit=100\`, ${CONNECTIONS} connections, ${SECONDS} s:

| pages/s | p50 | p99 | service CPU per request | requests | failed |
| ---: | ---: | ---: | ---: | ---: | ---: |
| ${feed.pagesPerSecond.toFixed(0)} | ${feed.p50} ms | ${feed.p99} ms | ${feed.cpuMsPerRequest.toFixed(2)} ms | ${count(feed.requests)} | ${feed.failed} |

Answers: ${JSON.stringify(feed.statusCodes)}.

**Fan-out** — ${count(fan.streams)} open \`GET /events/stream\` connections on one instance (node:http clients
parsing the SSE), \`POST /posts\` at ${RATE}/s for ${STREAM_SECONDS} s (sent ${fan.writes.perSecond.toFixed(1)}/s, answers
${JSON.stringify(fan.writes.statusCodes)}); latency from the write's 201 answer to the event's receipt on each stream:

| from | p50 | p99 | max |
| --- | ---: | ---: | ---: |
| the write's 201 answer | ${ms(fan.fromAnswer.p50)} ms | ${ms(fan.fromAnswer.p99)} ms | ${ms(fan.fromAnswer.max)} ms |
| the write's request (an upper bound of the time from commit) | ${ms(fan.fromSend.p50)} ms | ${ms(fan.fromSend.p99)} ms | ${ms(fan.fromSend.max)} ms |

| events received / expected | streams that missed one | out of order | service CPU per write |
| ---: | ---: | ---: | ---: |
| ${count(fan.received)} / ${count(fan.expected)} | ${fan.short} | ${fan.disordered} | ${fan.serviceCpuMsPerWrite.toFixed(1)} ms |

${count(fan.beforeAnswer)} receipts came before their write's answer did (the event is delivered once committed,
the answer may still be on its way): negative latencies, counted as they are. The service CPU per write
includes the write itself and its delivery to every stream.
`;
}

/** Replaces the section in `file` (from its heading to the next \`## \` heading), or appends it. */
async function writeSection(file: string, text: string): Promise<void> {
  const old = await readFile(file, 'utf8').catch(() => '');
  const start = old.indexOf('## Events (issue #27)');
  if (start < 0) return writeFile(file, `${old.trimEnd()}${old ? '\n\n' : ''}${text}`);
  const next = old.indexOf('\n## ', start + 1);
  await writeFile(file, `${old.slice(0, start)}${text}${next < 0 ? '' : old.slice(next)}`);
}

async function main(): Promise<number> {
  await run('npm', ['run', '-s', 'build']);
  log('built dist/');
  const server = await benchServer(process.env.BENCH_DATABASE_URL || undefined, log);
  log(`database server: ${server.source}`);
  const unlock = await lockDatasets(server, NAME, log);
  let service: Child | undefined;
  let dataset: Dataset | undefined;
  try {
    dataset = await ensureEvents(server);
    service = await startService('service-events', dataset.url, await freePort(), {
      // Loaded events are as old as the database: none is purged during a run.
      env: { MAX_STREAMS: String(STREAMS + 100), EVENT_RETENTION: String(10 * 365 * 86_400) },
    });
    log(`service up: pid ${service.pid}; warm-up 2 s`);
    await driveFeed(service, 2);
    const feed = await driveFeed(service, SECONDS);
    log(
      `feed: ${feed.pagesPerSecond.toFixed(0)} pages/s, p50 ${feed.p50} ms, p99 ${feed.p99} ms, cpu ${feed.cpuMsPerRequest.toFixed(2)} ms/req, failed ${feed.failed}`,
    );
    const token = await logIn(service, dataset);
    log(`fan-out: opening ${STREAMS} streams, then ${RATE} writes/s for ${STREAM_SECONDS} s`);
    const fan = await measureFanOut(service, {
      streams: STREAMS,
      token,
      body: POST_BODY,
      rate: RATE,
      seconds: STREAM_SECONDS,
    });
    const { p50, p99, max } = fan.fromAnswer;
    log(
      `fan-out, from the 201 answer: p50 ${ms(p50)} ms, p99 ${ms(p99)} ms, max ${ms(max)} ms; from the send: p99 ${ms(fan.fromSend.p99)} ms; received ${fan.received}/${fan.expected}, writes ${JSON.stringify(fan.writes.statusCodes)}`,
    );
    const machine = `${execFileSync('nproc').toString().trim()} cores, Node ${process.version}, ${server.source}`;
    await mkdir(OUT, { recursive: true });
    const file = FULL ? join(ROOT, 'bench', 'RESULTS.md') : join(OUT, 'RESULTS-events.md');
    await writeSection(
      file,
      section(feed, fan, new Date().toISOString().slice(0, 16).replace('T', ' ') + ' UTC', machine),
    );
    log(`results written to ${file.slice(ROOT.length + 1)}`);
    const writesFailed = Object.entries(fan.writes.statusCodes).some(([code]) => code !== '201');
    return feed.failed || writesFailed || fan.received !== fan.expected || fan.disordered ? 1 : 0;
  } finally {
    await service?.stop();
    if (dataset) await resetEvents(dataset).catch((e: unknown) => log(`cleaning ${NAME} up: ${String(e)}`));
    await unlock();
    await server.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(`bench:events: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
