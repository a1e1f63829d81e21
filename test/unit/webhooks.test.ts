/** The pure parts of webhooks: backoff, target rules, secrets. */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createValidatorCompiler } from '../../src/validation.js';
import { webhookContracts } from '../../src/events/webhooks/schemas.js';
import { nextAttemptAt } from '../../src/events/webhooks/worker.js';
import { normalizedUrl, refusedRange, urlProblem } from '../../src/events/webhooks/targets.js';
import { newSecret } from '../../src/events/webhooks/repository.js';

describe('nextAttemptAt', () => {
  const settings = { retryBaseMs: 10_000, giveUpAfterSeconds: 86_400 };
  const created = new Date('2026-11-25T00:00:00Z');
  const after = (attempt: number, random: number, now = created) =>
    nextAttemptAt(attempt, created, now, settings, () => random)!.getTime() - now.getTime();

  it('waits 5–10 s before the first retry, doubling each time, at most an hour', () => {
    expect([after(1, 0), after(1, 1)]).toEqual([5_000, 10_000]);
    expect([after(2, 0), after(2, 1)]).toEqual([10_000, 20_000]);
    expect(after(9, 1)).toBe(2_560_000);
    expect([after(10, 0), after(10, 1), after(60, 1)]).toEqual([1_800_000, 3_600_000, 3_600_000]);
  });

  it('makes the last attempt at the give-up age, then gives up', () => {
    const late = new Date(created.getTime() + 86_400_000 - 1_000);
    expect(nextAttemptAt(20, created, late, settings, () => 1)).toEqual(new Date(created.getTime() + 86_400_000));
    expect(nextAttemptAt(21, created, new Date(created.getTime() + 86_400_000), settings)).toBeNull();
  });
});

describe('targets', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['10.0.0.1', 'private'],
    ['172.16.5.4', 'private'],
    ['192.168.1.1', 'private'],
    ['169.254.169.254', 'linkLocal'],
    ['100.64.0.1', 'carrierGradeNat'],
    ['0.0.0.0', 'unspecified'],
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['fe80::1', 'linkLocal'],
    ['fd00::1', 'uniqueLocal'],
    ['::ffff:10.0.0.1', 'private'],
    ['::ffff:127.0.0.1', 'loopback'],
    // IPv4-compatible (::/96), translated (RFC 6145, RFC 6052) forms: judged by the IPv4 address they carry.
    ['::7f00:1', 'loopback'],
    ['::127.0.0.1', 'loopback'],
    ['::a00:1', 'private'],
    ['::a9fe:a9fe', 'linkLocal'],
    ['::ffff:0:a00:1', 'private'],
    ['64:ff9b::a00:1', 'private'],
    ['64:ff9b::7f00:1', 'loopback'],
    ['64:ff9b::5db8:d822', undefined],
    ['::ffff:5db8:d822', undefined],
    ['64:ff9b:1::a00:1', 'rfc6052'],
    ['2002:a00:1::1', '6to4'],
    ['93.184.216.34', undefined],
    ['2606:4700::1111', undefined],
  ])('%s: %s', (address, range) => {
    expect(refusedRange(address)).toBe(range);
  });

  it('takes https URLs, http ones only when allowed, literal private addresses only when allowed', () => {
    const strict = { allowHttp: false, allowPrivate: false };
    expect(urlProblem('https://hooks.example.com/x?y=1', strict)).toBeUndefined();
    expect(urlProblem('http://hooks.example.com/x', strict)).toBe('must be an https URL');
    expect(urlProblem('http://hooks.example.com/x', { ...strict, allowHttp: true })).toBeUndefined();
    expect(urlProblem('ftp://hooks.example.com/x', { ...strict, allowHttp: true })).toBe(
      'must be an http or https URL',
    );
    expect(urlProblem('https://[fe80::1]/x', strict)).toBe('must not name a linkLocal address');
    expect(urlProblem('https://[fe80::1]/x', { ...strict, allowPrivate: true })).toBeUndefined();
    expect(urlProblem('https://a.example.com/#frag', strict)).toBe('must not hold a fragment');
  });

  it('refuses literal addresses that carry a non-public IPv4 address inside IPv6', () => {
    const strict = { allowHttp: false, allowPrivate: false };
    expect(urlProblem('https://[::7f00:1]/', strict)).toBe('must not name a loopback address');
    expect(urlProblem('https://[::127.0.0.1]/', strict)).toBe('must not name a loopback address');
    expect(urlProblem('https://[::a00:1]/', strict)).toBe('must not name a private address');
    expect(urlProblem('https://[::ffff:a00:1]/', strict)).toBe('must not name a private address');
    expect(urlProblem('https://[64:ff9b::a00:1]/', strict)).toBe('must not name a private address');
  });

  it.each([
    ['https:///x'],
    ['https:/a.example.com/x'],
    ['https:a.example.com'],
    ['https:\\\\a.example.com/x'],
    ['https://a.example.com/x y'],
    ['https://a.example.com/x\r\nX-Injected: 1'],
    ['https://a.example.com/\tx'],
    [' https://a.example.com/'],
    ['https://a.example.com/\u007f'],
  ])('refuses a malformed URL, never stores what WHATWG would repair: %j', (url) => {
    expect(urlProblem(url, { allowHttp: true, allowPrivate: true })).toBe('must be a well-formed absolute URL');
  });

  it('refuses port 0, which nothing can be connected to; takes any other port', () => {
    const loose = { allowHttp: true, allowPrivate: true };
    expect(urlProblem('https://a.example.com:0/', loose)).toBe('must not use port 0');
    for (const port of [22, 443, 8443, 3000, 65535])
      expect(urlProblem(`https://a.example.com:${port}/`, loose)).toBeUndefined();
  });

  it('normalizes a URL as WHATWG URL does: what is stored and sent', () => {
    expect(normalizedUrl('HTTPS://Hooks.Example.COM:443/a/../b?x=1')).toBe('https://hooks.example.com/b?x=1');
    expect(normalizedUrl('https://[::FFFF:8.8.8.8]/')).toBe('https://[::ffff:808:808]/');
    expect(normalizedUrl('https://b\u00fccher.example/')).toBe('https://xn--bcher-kva.example/');
  });
});

describe("the url's format: uri (ajv-formats, as the service validates bodies)", () => {
  const { CreateWebhookBody } = webhookContracts(['post.created']);
  const compile = createValidatorCompiler();
  const validate = compile({ schema: CreateWebhookBody, httpPart: 'body', method: 'POST', url: '/webhooks' });
  const loose = { allowHttp: true, allowPrivate: true };

  it('takes every URL the service takes, as sent and as stored: ports, paths, queries, IPv4 and IPv6 literals', () => {
    const urls = fc.webUrl({
      validSchemes: ['https', 'http'],
      withQueryParameters: true,
      authoritySettings: { withPort: true, withIPv4: true, withIPv6: true, withIPv4Extended: true },
    });
    let taken = 0;
    fc.assert(
      fc.property(urls, (url) => {
        if (urlProblem(url, loose)) return;
        taken += 1;
        expect(validate({ url }), url).toBe(true);
        expect(validate({ url: normalizedUrl(url) }), normalizedUrl(url)).toBe(true);
      }),
      { numRuns: 1_000 },
    );
    // Most of them: the property says something.
    expect(taken).toBeGreaterThan(500);
  });
});

describe('secrets', () => {
  it('shows whsec_ and the base64 of 24 random bytes', () => {
    const { bytes, shown } = newSecret();
    expect(bytes).toHaveLength(24);
    expect(shown).toBe(`whsec_${bytes.toString('base64')}`);
  });
});
