import { describe, expect, it } from 'vitest';
import { pageRequest, sortOf } from '../../src/http/lists.js';
import { HttpError } from '../../src/errors.js';

describe('pageRequest', () => {
  it('defaults to offset mode, page 1 of 20', () => {
    expect(pageRequest({})).toEqual({ kind: 'offset', page: 1, perPage: 20 });
  });
  it('after or limit selects cursor mode', () => {
    expect(pageRequest({ limit: 5 })).toEqual({ kind: 'cursor', after: undefined, limit: 5 });
    expect(pageRequest({ after: 7 })).toEqual({ kind: 'cursor', after: 7, limit: 20 });
  });
  it('before selects cursor mode too; with after it is a 422 naming before', () => {
    expect(pageRequest({ before: 9, limit: 5 })).toEqual({ kind: 'cursor', before: 9, limit: 5 });
    try {
      pageRequest({ before: 9, after: 3 });
      expect.unreachable();
    } catch (error) {
      expect((error as HttpError).statusCode).toBe(422);
      expect((error as HttpError).fieldErrors).toEqual({ before: ['cannot be combined with after'] });
    }
  });
  it('a key travels with its anchor into cursor mode', () => {
    expect(pageRequest({ after: 7, afterKey: 'k', limit: 3 })).toEqual({
      kind: 'cursor',
      after: 7,
      afterKey: 'k',
      limit: 3,
    });
    expect(pageRequest({ before: 7, beforeKey: 'k' })).toEqual({
      kind: 'cursor',
      before: 7,
      beforeKey: 'k',
      limit: 20,
    });
  });
  it('mixing the modes names every cursor parameter sent', () => {
    try {
      pageRequest({ page: 2, after: 3, afterKey: 'k', limit: 5 });
      expect.unreachable();
    } catch (error) {
      expect((error as HttpError).message).toBe('use either page/perPage (offset mode) or after/limit (cursor mode)');
      const message = ['cannot be combined with page, perPage or snapshot'];
      expect((error as HttpError).fieldErrors).toEqual({ after: message, afterKey: message, limit: message });
    }
  });
  it('mixing the modes is a 422 naming the cursor parameters', () => {
    try {
      pageRequest({ perPage: 5, after: 3 });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(HttpError);
      expect((error as HttpError).statusCode).toBe(422);
      expect((error as HttpError).fieldErrors).toEqual({
        after: ['cannot be combined with page, perPage or snapshot'],
      });
    }
  });
});

describe('sortOf', () => {
  it('reads a leading - as descending, defaults to id', () => {
    expect(sortOf({})).toEqual({ field: 'id', descending: false });
    expect(sortOf({ sort: '-createdAt' })).toEqual({ field: 'createdAt', descending: true });
  });
});
