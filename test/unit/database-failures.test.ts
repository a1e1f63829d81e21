/** Database failures as the contract's 503 (src/plugins/errors.ts): by SQLSTATE, its class, a Node.js code or a message. */
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { databaseCause, databaseFailure } from '../../src/plugins/errors.js';
import { POOL_EXHAUSTED } from '../../src/db/pool.js';

const failing = (code: string, message = 'x') => Object.assign(new Error(message), { code });

describe('databaseFailure', () => {
  it('a lost connection: 503, Retry-After 5, "try again shortly"', () => {
    const error = databaseFailure(failing('ECONNREFUSED'));
    expect(error).toMatchObject({
      statusCode: 503,
      code: 'service_unavailable',
      message: 'the database is unreachable; try again shortly',
      headers: { 'retry-after': '5' },
    });
  });

  it('a code of its own wins over its class; other codes of a known class take the class', () => {
    expect(databaseCause(failing('53300'))).toBe('the database has too many connections');
    expect(databaseCause(failing('53100'))).toBe('the database is out of disk space');
    expect(databaseCause(failing('53200'))).toBe('the database is out of resources (memory or another limit)');
    expect(databaseCause(failing('08006'))).toBe('the database is unreachable');
  });

  it('where an operator must act: Retry-After 30 and "try again later"', () => {
    expect(databaseFailure(failing('28P01'))).toMatchObject({
      message: "the database refused the service's credentials (authentication failed); try again later",
      headers: { 'retry-after': '30' },
    });
  });

  it('a serialization failure or deadlock changed nothing: "send it again"', () => {
    for (const code of ['40001', '40P01']) {
      expect(databaseFailure(failing(code))).toMatchObject({
        message: 'the request collided with concurrent changes and changed nothing; send it again',
        headers: { 'retry-after': '1' },
      });
    }
  });

  it("node-postgres's plain errors for lost connections", () => {
    expect(databaseCause(new Error('Connection terminated unexpectedly'))).toBe('the database is unreachable');
    expect(databaseCause(new Error('timeout exceeded when trying to connect'))).toBe('the database is unreachable');
  });

  it('a table, column or function gone is the schema changed under the service', () => {
    for (const code of ['42P01', '42703', '42883']) {
      expect(databaseCause(failing(code))).toBe(
        "the database's schema is not the one this version of the service needs (run npm run migrate)",
      );
    }
  });

  it('the pool running out of connections is this instance being busy', () => {
    expect(databaseFailure(failing(POOL_EXHAUSTED))).toMatchObject({
      statusCode: 503,
      headers: { 'retry-after': '1' },
    });
  });

  it("no failure of the database: the request's fault or a bug", () => {
    for (const error of [
      failing('23505'),
      failing('22007'),
      failing('42601'),
      failing('0800'),
      new Error('boom'),
      null,
      'text',
    ]) {
      expect(databaseFailure(error)).toBeUndefined();
    }
  });
});

describe('the docs', () => {
  // One code per entry of the table in src/plugins/errors.ts (a new entry adds its code here).
  const codes = [
    ...'08006 3D000 28000 53300 53100 53200 25006 57P01 57014 55P03 54000 42P01 40001'.split(' '),
    POOL_EXHAUSTED,
  ];
  const messages = new Set(codes.map((code) => databaseFailure(failing(code))?.message));

  it.each(['docs/api.md', 'docs/operations.md', 'README.md'])(
    '%s quotes only the 503 messages the service sends',
    (file) => {
      const quoted = [...readFileSync(file, 'utf8').matchAll(/`([^`]*; try again (?:shortly|later))`/g)].map(
        (m) => m[1],
      );
      expect(quoted.filter((message) => !messages.has(message))).toEqual([]);
    },
  );
});
