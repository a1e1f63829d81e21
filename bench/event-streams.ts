/**
 * The stream fan-out measurement of `npm run bench:events`: many open
 * GET /events/stream connections (plain node:http clients parsing the SSE),
 * posts written through the API at a fixed rate, and for each event the time
 * from its write's 201 answer to its receipt on each stream.
 */
import { request, type IncomingMessage } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { cpuSeconds, type Child } from './processes.js';

interface Reader {
  res: IncomingMessage;
  /** Events of the run's posts this stream received, and whether their ids always grew. */
  received: number;
  lastId: number;
  disordered: number;
}

/** Receipt times (performance.now()) of each post's event, over all streams. */
type Receipts = Map<number, number[]>;

function openStream(url: string, receipts: Receipts): Promise<Reader> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/events/stream`, { agent: false, headers: { accept: 'text/event-stream' } }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        reject(new Error(`GET /events/stream answered ${res.statusCode}`));
        return;
      }
      const reader: Reader = { res, received: 0, lastId: 0, disordered: 0 };
      let buffered = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        const at = performance.now();
        buffered += chunk;
        const blocks = buffered.split('\n\n');
        buffered = blocks.pop()!;
        for (const block of blocks) receive(reader, block, at, receipts);
      });
      res.on('error', () => undefined);
      resolve(reader);
    });
    req.on('error', reject);
    req.end();
  });
}

// An event's block: `id:`, `event:`, then `data:` with the resource's id early on. The
// clients share the machine with the service: patterns, not JSON.parse, of every event.
const EVENT_BLOCK = /^id: (\d+)\nevent: ([a-z.]+)\ndata: .*?"resource":\{"type":"[a-z]+","id":(\d+)/;

/** One SSE block: comments (heartbeats) and `retry:` are not events. */
function receive(reader: Reader, block: string, at: number, receipts: Receipts): void {
  const match = EVENT_BLOCK.exec(block);
  if (!match) return;
  const id = Number(match[1]);
  if (id <= reader.lastId) reader.disordered += 1;
  reader.lastId = id;
  if (match[2] !== 'post.created') return;
  const post = Number(match[3]);
  const times = receipts.get(post);
  if (times === undefined) receipts.set(post, [at]);
  else times.push(at);
  reader.received += 1;
}

interface Writes {
  /** Send and 201 answer times of each post created, by id. */
  acked: Map<number, { sentAt: number; at: number }>;
  statusCodes: Record<string, number>;
  perSecond: number;
}

/** `rate` × `seconds` POST /posts at `rate` per second, each without waiting for the previous one. */
async function write(url: string, token: string, body: string, rate: number, seconds: number): Promise<Writes> {
  const acked: Writes['acked'] = new Map();
  const statusCodes: Record<string, number> = {};
  const send = async () => {
    let status = 'error';
    const sentAt = performance.now();
    try {
      const res = await fetch(`${url}/posts`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body,
        signal: AbortSignal.timeout(30_000),
      });
      const at = performance.now();
      status = String(res.status);
      const created = (await res.json()) as { id: number };
      if (res.status === 201) acked.set(created.id, { sentAt, at });
    } catch {
      // counted as "error"
    }
    statusCodes[status] = (statusCodes[status] ?? 0) + 1;
  };
  const pending: Promise<void>[] = [];
  const started = performance.now();
  for (let k = 0; k < rate * seconds; k++) {
    pending.push(send());
    // Scheduled from the start, so timer lateness does not accumulate.
    await sleep(Math.max(0, started + ((k + 1) * 1000) / rate - performance.now()));
  }
  const elapsed = (performance.now() - started) / 1000;
  await Promise.all(pending);
  return { acked, statusCodes, perSecond: pending.length / elapsed };
}

export interface FanOut {
  streams: number;
  writes: Writes;
  expected: number;
  received: number;
  disordered: number;
  /** Streams that missed at least one event. */
  short: number;
  /** Receipt minus 201 answer, ms; negative when the event arrived before the answer did. */
  fromAnswer: Quantiles;
  /** Receipt minus the write's send: an upper bound of the time from commit. */
  fromSend: Quantiles;
  beforeAnswer: number;
  serviceCpuMsPerWrite: number;
}

export interface Quantiles {
  p50: number;
  p99: number;
  max: number;
}

function quantiles(values: number[]): Quantiles {
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
  return { p50: at(0.5), p99: at(0.99), max: sorted.at(-1) ?? NaN };
}

/** Opens `streams` streams on `service`, writes, waits for every event (at most `graceSeconds`), measures. */
export async function measureFanOut(
  service: Child,
  {
    streams,
    token,
    body,
    rate,
    seconds,
    graceSeconds = 15,
  }: { streams: number; token: string; body: string; rate: number; seconds: number; graceSeconds?: number },
): Promise<FanOut> {
  const receipts: Receipts = new Map();
  const readers: Reader[] = [];
  // A hundred at a time: each stream's first queries (head, catch-up page) share the service's pool.
  for (let k = 0; k < streams; k += 100) {
    readers.push(
      ...(await Promise.all(
        Array.from({ length: Math.min(100, streams - k) }, () => openStream(service.url, receipts)),
      )),
    );
  }
  await sleep(1000);
  try {
    const cpu0 = cpuSeconds(service.pid);
    const writes = await write(service.url, token, body, rate, seconds);
    const expected = writes.acked.size * streams;
    const deadline = performance.now() + graceSeconds * 1000;
    const ours = () => readers.reduce((n, r) => n + r.received, 0);
    while (ours() < expected && performance.now() < deadline) await sleep(100);
    const cpu = cpuSeconds(service.pid) - cpu0;
    const latencies: number[] = [];
    const sinceSend: number[] = [];
    for (const [id, { sentAt, at: ackedAt }] of writes.acked) {
      for (const at of receipts.get(id) ?? []) {
        latencies.push(at - ackedAt);
        sinceSend.push(at - sentAt);
      }
    }
    return {
      streams,
      writes,
      expected,
      received: latencies.length,
      disordered: readers.reduce((n, r) => n + r.disordered, 0),
      short: readers.filter((r) => r.received < writes.acked.size).length,
      fromAnswer: quantiles(latencies),
      fromSend: quantiles(sinceSend),
      beforeAnswer: latencies.filter((ms) => ms < 0).length,
      serviceCpuMsPerWrite: writes.acked.size ? (cpu * 1000) / writes.acked.size : 0,
    };
  } finally {
    for (const r of readers) r.res.destroy();
  }
}
