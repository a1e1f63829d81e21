/** ETags and their comparison (src/http/conditional.ts, docs/api.md §8). */
import type { FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { bodyEtag, namesEtag, requireMatch } from '../../src/http/conditional.js';
import { postEtag } from '../../src/routes/posts.js';
import { commentEtag } from '../../src/routes/comments.js';
import { userEtag } from '../../src/routes/users.js';
import { HttpError } from '../../src/errors.js';

describe('tags', () => {
  it('a post: id, version and commentCount, so a comment write changes it', () => {
    expect(postEtag({ id: 7, version: 2, commentCount: 3 })).toBe('"p7-2-3"');
    expect(postEtag({ id: 7, version: 2, commentCount: 4 })).not.toBe(postEtag({ id: 7, version: 2, commentCount: 3 }));
  });

  it('a comment: id and version', () => {
    expect(commentEtag({ id: 9, version: 1 })).toBe('"c9-1"');
  });

  it('a user: the public view and the one with e-mail never share a tag; only public fields move the public one', () => {
    const user = { id: 3, name: 'Ann', role: 'user', createdAt: '2026-01-01T00:00:00.000Z' };
    const publicTag = userEtag(user);
    expect(publicTag).toMatch(/^"u3-[A-Za-z0-9_-]{22}"$/);
    expect(userEtag({ ...user, email: 'ann@example.com' })).not.toBe(publicTag);
    expect(userEtag({ ...user, email: 'ann@example.com' })).not.toBe(userEtag({ ...user, email: 'ann@example.org' }));
    expect(userEtag({ ...user, name: 'Anne' })).not.toBe(publicTag);
    expect(userEtag({ ...user })).toBe(publicTag);
  });

  it('a body: a digest of the bytes, equal for equal bodies', () => {
    expect(bodyEtag('{"data":[]}')).toMatch(/^"b[A-Za-z0-9_-]{22}"$/);
    expect(bodyEtag('{"data":[]}')).toBe(bodyEtag('{"data":[]}'));
    expect(bodyEtag('{"data":[1]}')).not.toBe(bodyEtag('{"data":[]}'));
  });
});

describe('namesEtag (If-None-Match: weak comparison)', () => {
  it('names the tag alone, in a list, as W/, or by *', () => {
    expect(namesEtag('"p7-2-3"', '"p7-2-3"')).toBe(true);
    expect(namesEtag('"x", "p7-2-3" ,"y"', '"p7-2-3"')).toBe(true);
    expect(namesEtag('W/"p7-2-3"', '"p7-2-3"')).toBe(true);
    expect(namesEtag(' * ', '"p7-2-3"')).toBe(true);
  });
  it('names nothing else: another tag, an unquoted one, a malformed value', () => {
    expect(namesEtag('"p7-2-4"', '"p7-2-3"')).toBe(false);
    expect(namesEtag('p7-2-3', '"p7-2-3"')).toBe(false);
    expect(namesEtag('"p7-2', '"p7-2-3"')).toBe(false);
    expect(namesEtag('', '"p7-2-3"')).toBe(false);
  });
});

describe('requireMatch (If-Match: strong comparison)', () => {
  const request = (ifMatch?: string) =>
    ({ headers: ifMatch === undefined ? {} : { 'if-match': ifMatch } }) as FastifyRequest;
  const outcome = (ifMatch?: string) => {
    try {
      requireMatch(request(ifMatch), '"c9-1"');
      return 'passes';
    } catch (error) {
      expect(error).toBeInstanceOf(HttpError);
      expect(error).toMatchObject({ statusCode: 412, code: 'precondition_failed' });
      return 412;
    }
  };
  it('passes without If-Match, with the tag, in a list, or *', () => {
    expect([outcome(), outcome('"c9-1"'), outcome('"c9-0", "c9-1"'), outcome('*')]).toEqual([
      'passes',
      'passes',
      'passes',
      'passes',
    ]);
  });
  it('a weak tag never matches strongly, nor does another tag or a malformed value: 412', () => {
    expect([outcome('W/"c9-1"'), outcome('"c9-0"'), outcome('c9-1'), outcome('')]).toEqual([412, 412, 412, 412]);
  });
});
