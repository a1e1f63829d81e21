/** Reading lists the way a client does: one page's ids, or a cursor walk to the end by the Link header. */
import type { FastifyInstance } from 'fastify';
import { expect } from 'vitest';

/** The ids of one page of `url`, which must answer 200. */
export async function idsOf(app: FastifyInstance, url: string): Promise<number[]> {
  const res = await app.inject({ url });
  expect(res.statusCode).toBe(200);
  return (res.json().data as { id: number }[]).map((item) => item.id);
}

/**
 * Follows the Link header's next URL to the end, checking hasMore, nextCursor
 * and prevCursor on every page; `between(n)` runs after page n (for writes mid-walk).
 */
export async function walk(
  app: FastifyInstance,
  url: string,
  between?: (page: number) => Promise<void>,
): Promise<number[]> {
  const ids: number[] = [];
  let next: string | undefined = url;
  for (let page = 1; next !== undefined; page++) {
    const res = await app.inject({ url: next });
    expect(res.statusCode).toBe(200);
    const body = res.json() as {
      data: { id: number }[];
      hasMore: boolean;
      nextCursor: number | null;
      prevCursor: number | null;
      limit: number;
    };
    ids.push(...body.data.map((item) => item.id));
    const link = res.headers.link as string | undefined;
    // Items precede every page but the first (those already received).
    expect(body.prevCursor).toBe(page > 1 && body.data.length ? body.data[0]!.id : null);
    if (body.prevCursor !== null) expect(link).toContain(`before=${body.prevCursor}`);
    if (body.hasMore) {
      expect(body.data).toHaveLength(body.limit);
      expect(body.nextCursor).toBe(body.data.at(-1)!.id);
      next = /<([^>]+)>; rel="next"/.exec(link ?? '')?.[1];
      expect(next).toContain(`after=${body.nextCursor}`);
    } else {
      expect(body.nextCursor).toBeNull();
      expect(link ?? '').not.toContain('rel="next"');
      next = undefined;
    }
    await between?.(page);
  }
  return ids;
}
