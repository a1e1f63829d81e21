/**
 * Browsers (issue 15): with CORS on, OPTIONS is only a preflight, unknown paths
 * are still 404, every header the contract names is readable by scripts, and
 * the /docs page works over plain HTTP on any host.
 */
import { describe, expect, it } from 'vitest';
import { useTestApp } from '../helpers/factories.js';
import { expectError } from '../helpers/expect.js';

const ORIGIN = 'https://app.example';

const cors = useTestApp({ CORS_ORIGINS: ORIGIN });
const plain = useTestApp();

describe('a plain OPTIONS (no preflight headers) is routed like any method a path lacks', () => {
  it.each([
    ['CORS on', () => cors],
    ['CORS off', () => plain],
  ])('%s: 405 with Allow on a known path, 404 elsewhere, the one error body', async (_what, app) => {
    for (const headers of [{}, { origin: ORIGIN }]) {
      const known = await app().app.inject({ method: 'OPTIONS', url: '/posts', headers });
      expectError(known, 405, 'method_not_allowed', 'OPTIONS is not supported on /posts; use GET, HEAD, POST');
      expect(known.headers.allow).toBe('GET, HEAD, POST');
      expect(known.headers['content-type']).toBe('application/json; charset=utf-8');
      const unknown = await app().app.inject({ method: 'OPTIONS', url: '/nothing/here', headers });
      expectError(unknown, 404, 'not_found', 'no route OPTIONS /nothing/here');
    }
  });

  it('a real preflight still answers 204 with the CORS headers', async () => {
    const res = await cors.app.inject({
      method: 'OPTIONS',
      url: '/posts/1',
      headers: {
        origin: ORIGIN,
        'access-control-request-method': 'PATCH',
        'access-control-request-headers': 'if-match, content-type',
      },
    });
    expect(res.statusCode).toBe(204);
    expect(res.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(res.headers['access-control-allow-methods']).toBe('GET, HEAD, POST, PUT, PATCH, DELETE');
  });
});

describe('with CORS on, unknown paths are 404 and known ones keep their Allow', () => {
  it.each(['GET', 'POST', 'DELETE', 'PATCH'] as const)('%s /nothing is a 404', async (method) => {
    const res = await cors.app.inject({ method, url: '/nothing', headers: { origin: ORIGIN } });
    expectError(res, 404, 'not_found', `no route ${method} /nothing`);
    expect(res.headers.allow).toBeUndefined();
    expect(res.headers['access-control-allow-origin']).toBe(ORIGIN);
  });

  it('DELETE /posts is a 405 listing the methods of /posts only', async () => {
    const res = await cors.app.inject({ method: 'DELETE', url: '/posts', headers: { origin: ORIGIN } });
    expectError(res, 405, 'method_not_allowed', 'DELETE is not supported on /posts; use GET, HEAD, POST');
    expect(res.headers.allow).toBe('GET, HEAD, POST');
  });
});

describe('Access-Control-Expose-Headers', () => {
  it('names every response header of the contract a script may need', async () => {
    const res = await cors.app.inject({ url: '/posts', headers: { origin: ORIGIN } });
    expect(res.statusCode).toBe(200);
    const exposed = String(res.headers['access-control-expose-headers']).split(/,\s*/).sort();
    expect(exposed).toEqual(
      [
        'Allow',
        'ETag',
        'Idempotent-Replayed',
        'Link',
        'Location',
        'Retry-After',
        'WWW-Authenticate',
        'X-Request-Id',
        'RateLimit-Limit',
        'RateLimit-Remaining',
        'RateLimit-Reset',
      ].sort(),
    );
  });
});

describe('/docs over plain HTTP', () => {
  it('the page and its assets carry a CSP without upgrade-insecure-requests, and load the document', async () => {
    for (const url of ['/docs/', '/docs/static/swagger-initializer.js', '/docs/static/swagger-ui.css']) {
      const res = await cors.app.inject({ url, headers: { host: 'api.internal:8080' } });
      expect(res.statusCode, url).toBe(200);
      const csp = String(res.headers['content-security-policy']);
      expect(csp, url).toContain("default-src 'self'");
      expect(csp, url).not.toContain('upgrade-insecure-requests');
    }
    const doc = await cors.app.inject({ url: '/docs/json' });
    expect(doc.statusCode).toBe(200);
    expect(doc.json().openapi).toBe('3.1.0');
  });
});
