/**
 * `npx tsx bench/replicas.ts [--posts N] [--seconds S] [--rounds R]`: what
 * streaming replicas take off the primary. Starts a throwaway primary with two
 * asynchronous replicas (test/helpers/scale-topology.sh), seeds it (10 000
 * posts by default: a copy of the million-post set would not fit twice more on
 * the bench machine's disk in reasonable time), builds the service and runs it
 * (`node dist/src/server.js`, every read reaching a database) with DATABASE_READ_URL naming 0, 1 and 2 of the replicas, in
 * turn, round after round. Load: autocannon, 32 connections, public reads
 * (a random post, its comments, a random list page). Reports req/s and CPU
 * milliseconds per request of the service process and of each PostgreSQL
 * server (all of its processes, told apart by cluster_name). Figures, not a
 * test; printed, not written anywhere.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import pg from 'pg';
import { parseCommandLine, type CommandSpec } from '../src/command-line.js';
import { migrate } from '../src/db/migrate.js';
import { createPool } from '../src/db/pool.js';
import { seed } from '../src/dev/seed.js';

const REPLICAS = {
  scripts: [],
  synopsis: '[--posts N] [--seconds S] [--rounds R] [--replicas 0,1,2] [--servers a.js,b.js]',
  help: `What streaming replicas take off the primary: req/s and CPU per request of the service and
of each PostgreSQL server, with 0, 1 and 2 replicas in turn. Printed, not written anywhere.

  --posts N            posts to seed (default 10000)
  --seconds S          seconds of load per step (default 10)
  --rounds R           rounds (default 2)
  --replicas list      how many replicas to read from, in turn (default 0,1,2)
  --servers list       builds to compare, comma-separated (default dist/src/server.js)
  -h, --help           print this help and exit`,
  options: {
    posts: { type: 'string', default: '10000' },
    seconds: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '2' },
    replicas: { type: 'string', default: '0,1,2' },
    servers: { type: 'string', default: 'dist/src/server.js' },
  },
} as const satisfies CommandSpec;
const { values: flags } = parseCommandLine(REPLICAS, process.argv.slice(2));
const POSTS = Number(flags.posts);
const SECONDS = Number(flags.seconds);
const ROUNDS = Number(flags.rounds);
const COUNTS = flags.replicas.split(',').map(Number);
const SERVERS = flags.servers.split(',');
const TOPOLOGY = 'test/helpers/scale-topology.sh';

const freePort = () =>
  new Promise<number>((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });

const ticks = (pid: number | string) => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return Number(fields[11]) + Number(fields[12]);
};
const HZ = 100;

/** CPU ticks so far of every PostgreSQL process, summed per cluster_name (`postgres: <name>: …`). */
function serverTicks(): Map<string, number> {
  const sums = new Map<string, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(entry)) continue;
    try {
      const name = /^postgres: ([a-z0-9]+): /.exec(readFileSync(`/proc/${entry}/cmdline`, 'utf8'))?.[1];
      if (name) sums.set(name, (sums.get(name) ?? 0) + ticks(entry));
    } catch {
      // The process ended meanwhile.
    }
  }
  return sums;
}

function env(file: string): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const m = /^export ([A-Z_]+)=(.*)$/.exec(line);
    if (m) vars[m[1]!] = m[2]!;
  }
  return vars;
}

async function caughtUp(primary: string, replicas: string[]): Promise<void> {
  const p = new pg.Client({ connectionString: primary });
  await p.connect();
  const { rows } = await p.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn');
  await p.end();
  for (const url of replicas) {
    const r = new pg.Client({ connectionString: url });
    await r.connect();
    while (
      (await r.query('SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS done', [rows[0]!.lsn])).rows[0].done !== true
    )
      await sleep(200);
    await r.end();
  }
}

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'posts-api-replicas-bench-'));
  execFileSync(TOPOLOGY, ['start', dir, '0', '2'], { stdio: ['ignore', 'ignore', 'inherit'] });
  try {
    const vars = env(join(dir, 'env'));
    const primary = vars.SCALE_PRIMARY_URL!;
    const replicas = vars.SCALE_ASYNC_REPLICA_URLS!.split(',');
    await migrate(primary);
    const pool = createPool(primary, 2, { statementTimeoutMs: 600_000 });
    await seed(pool, { posts: POSTS });
    await pool.query('VACUUM ANALYZE');
    await pool.end();
    await caughtUp(primary, replicas);
    execFileSync('npm', ['run', '--silent', 'build'], { stdio: 'inherit' });

    const table: string[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      for (const count of COUNTS)
        for (const server of SERVERS) {
          const port = await freePort();
          const child = spawn(process.execPath, [server], {
            env: {
              ...process.env,
              DATABASE_URL: primary,
              DATABASE_READ_URL: replicas.slice(0, count).join(','),
              PORT: String(port),
              HOST: '127.0.0.1',
              LOG_LEVEL: 'warn',
              RATE_LIMIT_MAX: '1000000',
            },
            stdio: ['ignore', 'ignore', 'inherit'],
          });
          const url = `http://127.0.0.1:${port}`;
          for (let i = 0; i < 100; i++) {
            if (
              await fetch(`${url}/health/ready`).then(
                (r) => r.ok,
                () => false,
              )
            )
              break;
            await sleep(100);
          }
          const random = (n: number) => 1 + Math.floor(Math.random() * n);
          const paths = [
            () => `/posts/${random(POSTS)}`,
            () => `/posts/${random(POSTS)}/comments`,
            () => `/posts?page=${random(50)}`,
          ];
          const load = (seconds: number) =>
            autocannon({
              url,
              connections: 32,
              duration: seconds,
              requests: [{ setupRequest: (req) => ({ ...req, path: paths[random(paths.length) - 1]!() }) }],
            });
          await load(2);
          const service0 = ticks(child.pid!);
          const servers0 = serverTicks();
          const result = await load(SECONDS);
          const service = ticks(child.pid!) - service0;
          const servers = serverTicks();
          const n = result.requests.total;
          const perRequest = (t: number) => ((t / HZ) * 1000) / n;
          const cpu = [...servers.entries()]
            .sort(([a], [b]) => a.localeCompare(b))
            .map(([name, t]) => `${name} ${perRequest(t - (servers0.get(name) ?? 0)).toFixed(3)}`)
            .join(', ');
          const line = `round ${round} ${SERVERS.length > 1 ? `${server} ` : ''}replicas ${count}: ${(n / SECONDS).toFixed(0)} req/s, non-2xx ${result.non2xx}, p99 ${result.latency.p99} ms; CPU ms/request: service ${perRequest(service).toFixed(3)}, ${cpu}`;
          console.log(line);
          table.push(line);
          child.kill('SIGTERM');
          await new Promise((resolve) => child.once('exit', resolve));
        }
    }
    console.log(table.join('\n'));
  } finally {
    execFileSync(TOPOLOGY, ['stop', dir], { stdio: 'inherit' });
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
