/** Password hashing at the production cost (the integration tests lower it: test/helpers/cheap-passwords.ts). */
import { describe, expect, it } from 'vitest';
import { hashPassword, verifyPassword } from '../../src/security.js';

describe('passwords', () => {
  it('are hashed with scrypt N=2^15, r=8, p=3, a salt of their own, and verified against that hash', async () => {
    const hash = await hashPassword('correct horse');
    expect(hash).toMatch(/^scrypt\$32768\$8\$3\$[A-Za-z0-9+/]{22}==\$[A-Za-z0-9+/]{43}=$/);
    expect(await hashPassword('correct horse')).not.toBe(hash);
    expect(await verifyPassword('correct horse', hash)).toBe(true);
    expect(await verifyPassword('correct horsE', hash)).toBe(false);
  });

  it('an unknown account (no stored hash) is refused', async () => {
    expect(await verifyPassword('correct horse', undefined)).toBe(false);
  });
});
