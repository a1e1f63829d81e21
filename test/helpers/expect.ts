/** Shared assertions for responses: the one error body, and the contract's timestamp format. */
import { expect } from 'vitest';
import type { TestApp } from './factories.js';

export type Response = Awaited<ReturnType<TestApp['app']['inject']>>;

/** An ISO 8601 UTC timestamp with milliseconds, as the contract renders every time. */
export const iso = expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

/** The whole error body: exactly these members, requestId equal to the X-Request-Id header. */
export function expectError(res: Response, status: number, error: string, message: string, fieldErrors?: object) {
  expect(res.statusCode).toBe(status);
  expect(res.json()).toEqual({
    error,
    message,
    ...(fieldErrors && { fieldErrors }),
    requestId: res.headers['x-request-id'],
  });
}
export const expect422 = (res: Response, fieldErrors: object, message = 'request is invalid') =>
  expectError(res, 422, 'validation', message, fieldErrors);
export const expect404 = (res: Response, message: string) => expectError(res, 404, 'not_found', message);
export const expect401 = (res: Response) =>
  expectError(res, 401, 'unauthorized', 'this request needs an access token: POST /tokens to get one');

/**
 * An offset page's Link header without its snapshot token, after checking that every link carries one, the same
 * (docs/api.md §5: a page requested without one hands one out, a page with one keeps it).
 */
export function offsetLinks(link: unknown): string {
  const header = String(link);
  const links = header.split(', ');
  const tokens = new Set(links.map((link) => /[?&]snapshot=([\w-]+)/.exec(link)?.[1]));
  expect(
    [...tokens].every((token) => token !== undefined && token.length > 0),
    header,
  ).toBe(true);
  expect(tokens.size, header).toBe(1);
  return header.replace(/&snapshot=[\w-]+/g, '');
}
