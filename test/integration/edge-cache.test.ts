/**
 * The caching contract through the edge an operator runs without Compose
 * (docs/api.md §11, docs/operations.md "The edge cache"): Debian's nginx with the
 * configuration deploy/edge-standalone.sh renders, which includes
 * deploy/edge-cache.conf, in front of the service. Anonymous reads are kept at
 * most SHARED_CACHE_SECONDS; a writer, who sends its token, reads its write at
 * once; an answer to a request with a token is never stored.
 * Skipped without nginx (.ci/run installs it).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPost, useTestApp } from '../helpers/factories.js';
import { NGINX, renderEdgeConfig, startEdgeCache, type EdgeCache } from '../helpers/edge-cache.js';
import { runToEnd } from '../helpers/processes.js';

const t = useTestApp();
const ann = t.user();
let upstream: string;
let edge: EdgeCache;

describe.skipIf(NGINX === undefined)('through nginx with deploy/edge-standalone.sh (skipped: no nginx)', () => {
  beforeAll(async () => {
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    upstream = `127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
    edge = await startEdgeCache(upstream);
  });
  afterAll(() => edge?.stop());

  it('renders from the upstream alone a configuration that nginx -t accepts, its paths in its prefix', async () => {
    const config = await renderEdgeConfig(upstream);
    expect(config).toContain(`server ${upstream};`);
    expect(config).toContain('listen 8080;');
    // The caching rules are included from the checkout, not copied; every other path is the prefix's
    // (comments and a location's URI are no paths).
    const snippet = fileURLToPath(new URL('../../deploy/edge-cache.conf', import.meta.url));
    const directives = config.replace(/#.*$/gm, '').replace(/^\s*location\b.*$/gm, '');
    const absolute = directives.match(/(?<=[\s"])\/[^\s;"]*/g);
    expect(absolute).toEqual([snippet]);

    const dir = await mkdtemp(join(tmpdir(), 'posts-api-edge-t-'));
    try {
      await writeFile(join(dir, 'nginx.conf'), config);
      const checked = await runToEnd(NGINX!, ['-t', '-p', dir, '-c', 'nginx.conf']);
      expect(checked.stderr).toContain('test is successful');
      expect(checked.code).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  const read = async (path: string, headers: Record<string, string> = {}) => {
    const res = await fetch(`${edge.url}${path}`, { headers });
    return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
  };
  const rename = async (id: number, title: string) => {
    const res = await fetch(`${edge.url}/posts/${id}`, {
      method: 'PATCH',
      headers: { ...ann.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ title }),
    });
    expect(res.status).toBe(200);
  };

  it('keeps an anonymous read at most s-maxage seconds; the writer reads its write at once', async () => {
    const { id } = await createPost(t.app, ann, { title: 'first' });
    const first = await read(`/posts/${id}`);
    expect(first.status).toBe(200);
    expect(first.headers.get('cache-control')).toBe('public, max-age=0, s-maxage=1');
    expect(first.headers.get('x-cache-status')).toBe('MISS');
    const again = await read(`/posts/${id}`);
    expect(again.headers.get('x-cache-status')).toBe('HIT');
    expect(again.body).toEqual(first.body);

    await rename(id, 'second');
    const writer = await read(`/posts/${id}`, ann.auth);
    expect(writer.body.title).toBe('second');
    expect(writer.headers.get('x-cache-status')).toBe('BYPASS');
    expect(writer.headers.get('cache-control')).toBe('no-cache');

    // Past the bound, the entry has expired: the next anonymous read goes upstream. nginx keeps time
    // in whole seconds (an entry stored at 10.0-10.999 s with s-maxage=1 is fresh through 11.999 s).
    await sleep(2_100);
    const later = await read(`/posts/${id}`);
    expect(later.body.title).toBe('second');
    expect(later.headers.get('x-cache-status')).toBe('EXPIRED');
  });

  it('never stores an answer to a request with a token', async () => {
    const { id } = await createPost(t.app, ann, { title: 'private read first' });
    const path = `/posts/${id}?fields=title`;
    const authed = await read(path, ann.auth);
    expect(authed.status).toBe(200);
    const anonymous = await read(path);
    expect(anonymous.headers.get('x-cache-status')).toBe('MISS');
    expect((await read(path)).headers.get('x-cache-status')).toBe('HIT');
  });

  it('does not keep errors or private data', async () => {
    expect((await read('/posts/999999999')).status).toBe(404);
    expect((await read('/posts/999999999')).headers.get('x-cache-status')).toBe('MISS');
    const me = await read('/users/me', ann.auth);
    expect(me.headers.get('cache-control')).toBe('private, no-store');
    expect((await read('/users/me', ann.auth)).headers.get('x-cache-status')).toBe('BYPASS');
  });
});
