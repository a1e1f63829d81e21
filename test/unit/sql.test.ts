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

  it('names each distinct text once, so a connection prepares it once; without parameters too', () => {
    const a = prepared('SELECT $1::int', [1]);
    expect(prepared('SELECT $1::int', [2])).toEqual({ name: a.name, text: 'SELECT $1::int', values: [2] });
    expect(prepared('SELECT $1::text', ['x']).name).not.toBe(a.name);
    expect(prepared('SELECT 1', [])).toEqual({
      name: expect.stringMatching(/^posts_api_[0-9a-f]{16}$/),
      text: 'SELECT 1',
      values: [],
    });
  });

  it('joins nothing to nothing', () => {
    expect(toQuery(sql`x${join([])}y`, false)).toEqual({ text: 'xy', values: [] });
  });

  it('numbers parameters in text order through nested fragments, with any separator', () => {
    const inner = sql`c IN (${join([sql`${'x'}`, sql`${'y'}`])})`;
    const q = toQuery(sql`SELECT 1 WHERE ${join([sql`a = ${1}`, inner, sql`b = ${2}`], ' OR ')} LIMIT ${3}`, false);
    expect(q).toEqual({
      text: 'SELECT 1 WHERE a = $1 OR c IN ($2, $3) OR b = $4 LIMIT $5',
      values: [1, 'x', 'y', 2, 3],
    });
  });

  it('a value that looks like SQL or like a fragment is still a parameter', () => {
    const fake = { strings: ['DROP TABLE users'], values: [] };
    expect(toQuery(sql`SELECT ${fake}, ${'$1'}`, false)).toEqual({ text: 'SELECT $1, $2', values: [fake, '$1'] });
  });

  it('named: false sends the statement unnamed; the same text named is the prepared one', () => {
    const fragment = sql`SELECT * FROM posts WHERE id = ${5}`;
    expect(toQuery(fragment, false)).toEqual({ text: 'SELECT * FROM posts WHERE id = $1', values: [5] });
    expect(toQuery(fragment).name).toBe(prepared('SELECT * FROM posts WHERE id = $1', [5]).name);
  });
});
