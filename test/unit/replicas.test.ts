import { describe, expect, it } from 'vitest';
import { checkInterval, parseLsn } from '../../src/db/replicas.js';
import { readRepository } from '../../src/plugins/read-routing.js';
import { perDatabase } from '../../src/db/per-database.js';
import type { Queryable } from '../../src/db/pool.js';

describe('parseLsn', () => {
  it('reads a WAL position as bytes, ordered as PostgreSQL orders them', () => {
    expect(parseLsn('0/0')).toBe(0);
    expect(parseLsn('0/3000148')).toBe(0x3000148);
    expect(parseLsn('16/B374D848')).toBe(0x16 * 2 ** 32 + 0xb374d848);
    expect(parseLsn('1/0')).toBeGreaterThan(parseLsn('0/FFFFFFFF'));
  });
});

describe('checkInterval', () => {
  it('checks four times within the lag bound, and at least every 250 ms', () => {
    expect(checkInterval(1_000)).toBe(250);
    expect(checkInterval(60_000)).toBe(250);
    expect(checkInterval(200)).toBe(50);
  });
});

describe('perDatabase', () => {
  it('makes one value per database, not one per call', () => {
    let made = 0;
    const repo = perDatabase((db) => ({ db, n: ++made }));
    const a = { query: () => undefined } as unknown as Queryable;
    const b = { query: () => undefined } as unknown as Queryable;
    expect(repo(a)).toBe(repo(a));
    expect(repo(b)).not.toBe(repo(a));
    expect(made).toBe(2);
  });

  it('makes a value once even when it is undefined', () => {
    let made = 0;
    const nothing = perDatabase(() => {
      made++;
      return undefined;
    });
    const a = { query: () => undefined } as unknown as Queryable;
    expect(nothing(a)).toBeUndefined();
    expect(nothing(a)).toBeUndefined();
    expect(made).toBe(1);
  });
});

describe('readRepository', () => {
  it("reads on the request's replica when one was chosen, else on the primary, with one repository per database", () => {
    const primary = { query: () => undefined } as unknown as Queryable;
    const replica = { query: () => undefined } as unknown as Queryable;
    const reads = readRepository((db) => ({ db }), primary);
    expect(reads({ replica: null }).db).toBe(primary);
    expect(reads({ replica }).db).toBe(replica);
    expect(reads({ replica })).toBe(reads({ replica }));
  });
});
