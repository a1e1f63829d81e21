import { describe, expect, it } from 'vitest';
import { join, prepared, raw, sql, toQuery } from '../../src/db/sql.js';

describe('sql tag', () => {
  it('binds every interpolated value as a parameter, numbering across fragments', () => {
    const name = "Robert'); DROP TABLE users;--";
    const where = join([sql`a = ${1}`, sql`b = ${name}`], ' AND ');
    const q = toQuery(sql`SELECT ${raw('id')} FROM t WHERE ${where} LIMIT ${20}`);
    expect(q).toEqual({
      name: expect.stringMatching(/^posts_api_[0-9a-f]{16}$/),
      text: 'SELECT id FROM t WHERE a = $1 AND b = $2 LIMIT $3',
      values: [1, name, 20],
    });
  });

  it('names each distinct text once, so a connection prepares it once; no name without parameters', () => {
    const a = prepared('SELECT $1::int', [1]);
    expect(prepared('SELECT $1::int', [2])).toEqual({ name: a.name, text: 'SELECT $1::int', values: [2] });
    expect(prepared('SELECT $1::text', ['x']).name).not.toBe(a.name);
    expect(prepared('SELECT 1', [])).toEqual({ text: 'SELECT 1', values: [] });
  });

  it('joins nothing to nothing', () => {
    expect(toQuery(sql`x${join([])}y`)).toEqual({ text: 'xy', values: [] });
  });
});
