import { describe, expect, it } from 'vitest';
import { loadOwned, type OwnershipRule } from '../../src/use-cases/change-owned.js';
import { HttpError } from '../../src/errors.js';

interface Thing {
  authorId: number;
  parentAuthorId: number;
}
const rule: OwnershipRule<Thing> = {
  missing: 'thing 7 does not exist',
  owners: (t) => [t.authorId, t.parentAuthorId],
  denied: 'not yours',
};
const thing: Thing = { authorId: 1, parentAuthorId: 2 };
const user = (id: number, role: 'user' | 'admin' = 'user') => ({ id, role, tokenId: 99 });

async function failure(promise: Promise<unknown>): Promise<HttpError> {
  const error = await promise.then(
    () => expect.unreachable(),
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(HttpError);
  return error as HttpError;
}

describe('loadOwned', () => {
  it('returns the resource to any of its owners', async () => {
    await expect(loadOwned(Promise.resolve(thing), user(1), rule)).resolves.toBe(thing);
    await expect(loadOwned(Promise.resolve(thing), user(2), rule)).resolves.toBe(thing);
  });

  it('returns it to an admin who owns nothing', async () => {
    await expect(loadOwned(Promise.resolve(thing), user(3, 'admin'), rule)).resolves.toBe(thing);
  });

  it('403 for anyone else', async () => {
    const error = await failure(loadOwned(Promise.resolve(thing), user(3), rule));
    expect([error.statusCode, error.code, error.message]).toEqual([403, 'forbidden', 'not yours']);
  });

  it('404 when missing, before any ownership question', async () => {
    for (const who of [user(3), user(1), user(3, 'admin')]) {
      const error = await failure(loadOwned(Promise.resolve(undefined), who, rule));
      expect([error.statusCode, error.code, error.message]).toEqual([404, 'not_found', 'thing 7 does not exist']);
    }
  });
});
