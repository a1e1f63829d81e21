/**
 * Passwords: scrypt in a self-describing string, so parameters can be raised later. Tokens: 256 random bits, stored
 * as SHA-256 (a fast hash suits a secret of full entropy, and keeps the lookup one indexed equality).
 */
import { createHash, randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

/** scrypt's cost for new hashes. Mutable only so tests can lower it: a hash names its own parameters. */
export const PASSWORD_COST = { N: 2 ** 15, r: 8, p: 3 };
const KEY_LENGTH = 32;

function derive(password: string, salt: Buffer, o: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(password.normalize('NFC'), salt, KEY_LENGTH, { ...o, maxmem: 256 * o.N! * o.r! }, (err, key) =>
      err ? reject(err) : resolve(key),
    );
  });
}

function encode(salt: Buffer, key: Buffer): string {
  const { N, r, p } = PASSWORD_COST;
  return `scrypt$${N}$${r}$${p}$${salt.toString('base64')}$${key.toString('base64')}`;
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  return encode(salt, await derive(password, salt, PASSWORD_COST));
}

// For an unknown e-mail, so a failed log-in takes the same time whether or not the account exists.
const dummyHash = () => encode(Buffer.alloc(16), Buffer.alloc(KEY_LENGTH));

export async function verifyPassword(password: string, stored: string | undefined): Promise<boolean> {
  const [scheme, n, r, p, salt, key] = (stored ?? dummyHash()).split('$');
  if (scheme !== 'scrypt' || !salt || !key) return false;
  const expected = Buffer.from(key, 'base64');
  const actual = await derive(password, Buffer.from(salt, 'base64'), { N: Number(n), r: Number(r), p: Number(p) });
  return stored !== undefined && actual.length === expected.length && timingSafeEqual(actual, expected);
}

const TOKEN_PREFIX = 'pat_';
/** What newToken issues: the prefix, then 32 bytes in unpadded base64url (43 characters). */
const TOKEN_FORMAT = /^pat_[A-Za-z0-9_-]{43}$/;

export function newToken(): { token: string; hash: Buffer } {
  const token = `${TOKEN_PREFIX}${randomBytes(32).toString('base64url')}`;
  return { token, hash: hashToken(token) };
}

export function isWellFormedToken(token: string): boolean {
  return TOKEN_FORMAT.test(token);
}

export function hashToken(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}
