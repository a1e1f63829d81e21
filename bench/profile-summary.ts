/**
 * Where a service's CPU time went: reads a V8 .cpuprofile (from
 * `npm run bench -- --profile`, written to bench/out/profiles/) and prints
 * self time grouped by package (node_modules/<name>, the app's own src/, or
 * Node's internals) and the top functions.
 *
 *   npx tsx bench/profile-summary.ts bench/out/profiles/service.cpuprofile [top]
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const [file, topArg] = process.argv.slice(2);
if (!file) {
  console.error('usage: profile-summary.ts <file.cpuprofile> [top]');
  process.exit(64);
}
const top = Number(topArg ?? 25);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const self = new Map<number, number>();
profile.samples.forEach((id, k) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[k] ?? 0)));
const total = [...self.values()].reduce((a, b) => a + b, 0);

function group(url: string, name: string): string {
  if (!url) return name.startsWith('(') ? name : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return 'node internals';
  if (url.includes('/dist/src/') || url.includes('/src/')) return 'app (src/)';
  return url;
}

/**
 * The step of a request a sample belongs to (issue 47's breakdown), by package and, in the app, by file.
 * App files match as sources (.ts, through tsx) and as built (.js, dist/: what the bench runs).
 * Samples of code compiled at run time (fast-json-stringify's serializers) have no URL: they count as
 * "native and generated", with V8's builtins.
 */
const STEPS: [RegExp, string][] = [
  [/^\((garbage collector)\)$/, 'garbage collection'],
  [/^\((program|idle|root)\)$/, 'outside JavaScript (idle, program)'],
  [/node_modules\/(pg|pg-protocol|pg-pool|pg-types|postgres-[a-z]+|pg-cursor)\//, 'pg driver (protocol, rows)'],
  [/node_modules\/(fast-json-stringify|@fastify\/fast-json-stringify-compiler)\//, 'serialization'],
  [/node_modules\/(pino|sonic-boom|pino-std-serializers|thread-stream)\/|src\/plugins\/request-log\.[jt]s/, 'log line'],
  [/node_modules\/prom-client\/|src\/plugins\/metrics\.[jt]s/, 'metrics'],
  [/node_modules\/@fastify\/rate-limit\/|src\/plugins\/rate-limit\.[jt]s/, 'rate limit'],
  [/node_modules\/(ajv|ajv-formats|fast-uri)\/|src\/validation\.[jt]s/, 'validation'],
  [/src\/(security|plugins\/auth)\.[jt]s|src\/repositories\/tokens\.[jt]s/, 'token check'],
  [/src\/http\/conditional\.[jt]s/, 'ETag, conditional requests'],
  [/src\/http\/snapshots\.[jt]s/, 'snapshot token'],
  [/src\/db\/|src\/http\/lists\.[jt]s/, 'query building, pool (src/db, http/lists)'],
  [/src\//, 'other app code (src/)'],
  [
    /node_modules\/(fastify|find-my-way|avvio|light-my-request|@fastify\/[a-z-]+|fast-querystring)\//,
    'fastify (routing, hooks, reply)',
  ],
  [/^node:/, 'Node (http, net, streams)'],
  [/node_modules\//, 'other packages'],
];
/** Node's native calls that hand bytes to the kernel (their time is mostly the system call). */
const SOCKET_WRITES = new Set(['writev', 'writeString', 'writeBuffer', 'writeUtf8String', 'writeLatin1String']);
/** Who wrote: the first package up the stack that is one of these. */
const WRITERS: [RegExp, string][] = [
  [/node_modules\/fastify\//, 'writes: the answer'],
  [/node_modules\/pg\//, 'writes: statements to PostgreSQL'],
  [/node_modules\/sonic-boom\//, 'writes: the log line'],
];
const parentOf = new Map<number, number>();
for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);
function writerOf(id: number): string {
  for (let at = parentOf.get(id); at !== undefined; at = parentOf.get(at)) {
    const { url } = byId.get(at)!.callFrame;
    const writer = WRITERS.find(([pattern]) => pattern.test(url));
    if (writer) return writer[1];
  }
  return 'writes: other';
}
function stepOf(id: number, url: string, name: string): string {
  const key = url || (name.startsWith('(') ? name : '');
  if (!key) return SOCKET_WRITES.has(name) ? writerOf(id) : 'V8 builtins and generated code';
  return STEPS.find(([pattern]) => pattern.test(key))?.[1] ?? 'other';
}

const groups = new Map<string, number>();
const steps = new Map<string, number>();
const functions = new Map<string, number>();
for (const [id, micros] of self) {
  const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
  const g = group(url, functionName);
  groups.set(g, (groups.get(g) ?? 0) + micros);
  const step = stepOf(id, url, functionName);
  steps.set(step, (steps.get(step) ?? 0) + micros);
  const key = `${functionName || '(anonymous)'} ${url.replace(/^.*node_modules\//, '').replace(/^file:\/\/.*\/dist\//, 'dist/')}:${lineNumber + 1}`;
  functions.set(key, (functions.get(key) ?? 0) + micros);
}

// Shares of the time the process was busy: idle time depends on how long the run waited, not on the requests.
const idle = [...self].reduce((sum, [id, micros]) => {
  const name = byId.get(id)!.callFrame.functionName;
  return name === '(idle)' || name === '(program)' ? sum + micros : sum;
}, 0);
const busy = total - idle;
const show = (title: string, entries: Map<string, number>) => {
  console.log(`\n${title}`);
  for (const [name, micros] of [...entries].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    if (/^\((idle|program)\)/.test(name) || name === STEPS[1]![1]) continue;
    console.log(
      `${((micros / busy) * 100).toFixed(1).padStart(5)} %  ${(micros / 1000).toFixed(0).padStart(7)} ms  ${name}`,
    );
  }
};
console.log(
  `${file}: ${(total / 1e6).toFixed(1)} s sampled, ${(busy / 1e6).toFixed(1)} s busy (shares below are of busy)`,
);
show('self time by step of a request', steps);
show('self time by package', groups);
show('self time by function', functions);
