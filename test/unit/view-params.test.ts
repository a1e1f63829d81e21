/** The query parameters of richer reads as the repositories take them (src/http/view-params.ts). */
import { describe, expect, it } from 'vitest';
import { rangeOf, viewOf } from '../../src/http/view-params.js';

describe('viewOf', () => {
  it('the full view without fields or include; fields in the order asked', () => {
    expect(viewOf({})).toEqual({});
    expect(viewOf({ fields: ['title', 'id'], include: 'author' })).toEqual({ fields: ['title', 'id'], author: true });
  });
});

describe('rangeOf', () => {
  it('keeps the millisecond and whether the bound lies past it', () => {
    expect(rangeOf({ createdAfter: '2026-01-01T00:00:00Z' })).toEqual({ createdAfter: '2026-01-01T00:00:00Z' });
    expect(rangeOf({ createdAfter: '2026-01-01T00:00:00.1Z' }).createdAfter).toBe('2026-01-01T00:00:00.1Z');
    expect(rangeOf({ createdAfter: '2026-01-01T00:00:00.123000000Z' }).createdAfter).toBe('2026-01-01T00:00:00.123Z');
    expect(rangeOf({ createdBefore: '2026-01-01T00:00:00.1230000001+02:00' }).createdBefore).toBe(
      '2026-01-01T00:00:00.1235+02:00',
    );
    expect(rangeOf({ createdBefore: '2026-01-01T00:00:00.999999999Z' }).createdBefore).toBe(
      '2026-01-01T00:00:00.9995Z',
    );
  });
});
