/**
 * The contract's promises about any response, checked without knowing what the
 * response should have been: used by the fuzz, authorization, concurrency and
 * fault suites, where inputs are generated and only the rules are fixed
 * (docs/api.md §2: one error body, exact members, requestId equal to X-Request-Id,
 * the status's own error code and headers; and never a 500).
 */
import { expect } from 'vitest';
import { ERROR_CODES } from '../../src/errors.js';

export interface AnyResponse {
  statusCode: number;
  headers: Record<string, string | string[] | number | undefined>;
  body: string;
}

/** Short enough for an assertion message, long enough to see what went wrong. */
export function describeResponse(res: AnyResponse, request?: unknown): string {
  let req = '';
  try {
    if (request !== undefined)
      req = ` for ${JSON.stringify(request, (_k, v: unknown) => (typeof v === 'string' && v.length > 300 ? `${v.slice(0, 300)}…(${v.length})` : v)).slice(0, 1000)}`;
  } catch {
    req = ' for a request too deep to print';
  }
  return `${res.statusCode} ${res.body.slice(0, 500)}${req}`;
}

/**
 * Every response: no 5xx unless `allow5xx` lists it (503 while the database is
 * down), an X-Request-Id, and for errors exactly the contract's body.
 * Returns the parsed error body (undefined for successes and HEAD).
 */
export function expectContractResponse(
  res: AnyResponse,
  options: { request?: unknown; allow5xx?: number[]; method?: string } = {},
): { error: string; message: string; fieldErrors?: Record<string, string[]>; requestId: string } | undefined {
  const context = describeResponse(res, options.request);
  if (res.statusCode >= 500) expect(options.allow5xx ?? [], context).toContain(res.statusCode);
  const requestId = res.headers['x-request-id'];
  expect(typeof requestId === 'string' && requestId.length > 0, `X-Request-Id missing: ${context}`).toBe(true);
  if (res.statusCode < 400) return undefined;

  expect(res.headers['content-type'], context).toBe('application/json; charset=utf-8');
  if (options.method === 'HEAD') return undefined;
  const body = JSON.parse(res.body) as Record<string, unknown>;
  const code = ERROR_CODES[res.statusCode as keyof typeof ERROR_CODES];
  expect(code, `a status the contract does not name: ${context}`).toBeDefined();
  const members = ['error', 'message', 'requestId'];
  if (res.statusCode === 422) members.push('fieldErrors');
  if (res.statusCode === 409 && 'fieldErrors' in body) members.push('fieldErrors');
  expect(Object.keys(body).sort(), context).toEqual(members.sort());
  expect(body.error, context).toBe(code);
  expect(typeof body.message === 'string' && body.message.length > 0, context).toBe(true);
  expect(body.requestId, context).toBe(requestId);
  if ('fieldErrors' in body) {
    const fieldErrors = body.fieldErrors as Record<string, unknown>;
    expect(Object.keys(fieldErrors).length, context).toBeGreaterThan(0);
    for (const messages of Object.values(fieldErrors)) {
      expect(
        Array.isArray(messages) && messages.length > 0 && messages.every((m) => typeof m === 'string' && m !== ''),
        context,
      ).toBe(true);
    }
  }
  if (res.statusCode === 401) expect(String(res.headers['www-authenticate']), context).toMatch(/^Bearer/);
  if (res.statusCode === 405) expect(res.headers.allow, context).toBeDefined();
  if (res.statusCode === 429 || res.statusCode === 503)
    expect(String(res.headers['retry-after']), context).toMatch(/^[0-9]+$/);
  return body as ReturnType<typeof expectContractResponse>;
}
