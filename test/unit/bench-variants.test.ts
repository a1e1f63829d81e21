import { describe, expect, it } from 'vitest';
import { parseVariant } from '../../bench/variants.js';

describe('--variant of the bench', () => {
  it('reads a ref, the edge flag and settings of its own', () => {
    expect(parseVariant('incache=b9065ea:cache')).toEqual({ name: 'incache', ref: 'b9065ea', cache: true, env: {} });
    expect(parseVariant('nometrics=HEAD METRICS_PORT=0')).toEqual({
      name: 'nometrics',
      ref: 'HEAD',
      cache: false,
      env: { METRICS_PORT: '0' },
    });
    expect(parseVariant('x=main:cache  A=1 B_2=a=b').env).toEqual({ A: '1', B_2: 'a=b' });
  });

  it('refuses what is not name=ref[:cache] [KEY=value]…', () => {
    for (const bad of ['HEAD', 'Bad=HEAD', 'x=HEAD lower=1', 'x=HEAD:edge', 'x=']) {
      expect(() => parseVariant(bad), bad).toThrow(/expected name=git-ref/);
    }
  });
});
