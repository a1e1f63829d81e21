import { describe, expect, it } from 'vitest';
import { forgivenResets } from '../../bench/report.js';

describe('the bench counts failed requests', () => {
  it('forgives at most one connection reset per 10 000 answers', () => {
    expect(forgivenResets(1, 0, 16_964)).toBe(1);
    expect(forgivenResets(2, 0, 20_000)).toBe(2);
    expect(forgivenResets(3, 0, 20_000)).toBe(0);
    expect(forgivenResets(1, 0, 9_999)).toBe(0);
  });

  it('never forgives a timeout (autocannon counts it among its errors too)', () => {
    expect(forgivenResets(1, 1, 100_000)).toBe(0);
    expect(forgivenResets(2, 1, 100_000)).toBe(1);
  });
});
