/**
 * Credentials. Passwords: scrypt (memory-hard, built into Node, so no native
 * addon to build) at OWASP's N=2^15, r=8, p=3 (32 MiB per hash), in a
 * self-describing string so parameters can be raised later without breaking
 * old hashes. Tokens: 256 random bits; only their SHA-256 is stored — a fast
 * hash is right here because the secret has full entropy, and it keeps the
 * per-request lookup to one indexed equality.
 */
import { createHash, randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

const PARAMS = { N: 2 ** 15, r: 8, p: 3 };
const KEY_LENGTH = 32;

function derive(password: string, salt: Buffer, o: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(password.normalize('NFC'), salt, KEY_LENGTH, { ...o, maxmem: 256 * o.N! * o.r! }, (err, key) =>
      err ? reject(err) : resolve(key),
    );
  });
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(password, salt, PARAMS);
  return `scrypt$${PARAMS.N}$${PARAMS.r}$${PARAMS.p}$${salt.toString('base64')}$${key.toString('base64')}`;
}

// Verified against when the e-mail is unknown, so a failed log-in takes the same
// time whether or not the account exists.
const DUMMY_HASH = `scrypt$${PARAMS.N}$${PARAMS.r}$${PARAMS.p}$${Buffer.alloc(16).toString('base64')}$${Buffer.alloc(KEY_LENGTH).toString('base64')}`;

export async function verifyPassword(password: string, stored: string | undefined): Promise<boolean> {
  const [scheme, n, r, p, salt, key] = (stored ?? DUMMY_HASH).split('$');
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

/** Whether a presented token could have been issued by newToken: anything else is refused without a lookup. */
export function isWellFormedToken(token: string): boolean {
  return TOKEN_FORMAT.test(token);
}

export function hashToken(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}
