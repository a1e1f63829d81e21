import { describe, expect, it } from 'vitest';
import { join, raw, sql, toQuery } from '../../src/db/sql.js';

describe('sql tag', () => {
  it('binds every interpolated value as a parameter, numbering across fragments', () => {
    const name = "Robert'); DROP TABLE users;--";
    const where = join([sql`a = ${1}`, sql`b = ${name}`], ' AND ');
    const q = toQuery(sql`SELECT ${raw('id')} FROM t WHERE ${where} LIMIT ${20}`);
    expect(q).toEqual({ text: 'SELECT id FROM t WHERE a = $1 AND b = $2 LIMIT $3', values: [1, name, 20] });
  });

  it('joins nothing to nothing', () => {
    expect(toQuery(sql`x${join([])}y`)).toEqual({ text: 'xy', values: [] });
  });
});
