/**
 * Every webhook attempt ends within its timeout whatever the garbage collector
 * does (Node issue 57736: a timeout signal combined by AbortSignal.any can be
 * collected before it fires, and the request is then never aborted). Real
 * endpoints on 127.0.0.1 that accept and never answer; collections forced
 * (--expose-gc, switched on from inside the test).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, expect, it, onTestFinished } from 'vitest';
import { send } from '../../src/events/webhooks/sender.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

let server: Server;
let url: string;

beforeAll(async () => {
  server = createServer(() => undefined);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

it('ends 20 hanging attempts at their 300 ms timeout while collections run', async () => {
  const shutdown = new AbortController();
  const collecting = setInterval(gc, 10);
  // Also when the test times out: collections every 10 ms would slow every file after it in this worker.
  onTestFinished(() => clearInterval(collecting));
  const attempts = Array.from({ length: 20 }, (_, i) =>
    send(
      { url, messageId: String(i + 1), body: '{}', secret: Buffer.alloc(24) },
      { timeoutMs: 300, allowHttp: true, allowPrivate: true, signal: shutdown.signal },
    ),
  );
  // Before the fix none ended at all: the test's own timeout is the bound, not a guess at a loaded machine's pace.
  for (const result of await Promise.all(attempts)) {
    expect(result).toMatchObject({ ok: false, statusCode: null, error: 'no answer within 300 ms' });
    expect(result.durationMs).toBeGreaterThanOrEqual(290);
  }
});

it('a shutdown still cuts an attempt at once', async () => {
  const shutdown = new AbortController();
  const attempt = send(
    { url, messageId: '1', body: '{}', secret: Buffer.alloc(24) },
    { timeoutMs: 60_000, allowHttp: true, allowPrivate: true, signal: shutdown.signal },
  );
  setTimeout(() => shutdown.abort(), 100);
  expect(await attempt).toMatchObject({ ok: false, error: 'interrupted: the instance shut down' });
});
