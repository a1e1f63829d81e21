/**
 * Signing secrets are stored readable (every attempt signs), sealed with AES-256-GCM under WEBHOOK_SECRET_KEY when
 * set, so a dump alone does not reveal them; the webhook id as associated data ties a sealed value to its row.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

const PREFIX = 'whsec_';
const SECRET_BYTES = 24;
const IV_BYTES = 12;
const TAG_BYTES = 16;

interface StoredSecret {
  secret: Buffer;
  sealed: boolean;
}

export function newSecret(): { bytes: Buffer; shown: string } {
  const bytes = randomBytes(SECRET_BYTES);
  return { bytes, shown: PREFIX + bytes.toString('base64') };
}

const associated = (webhookId: number) => Buffer.from(`webhook:${webhookId}`);

export function sealSecret(bytes: Buffer, webhookId: number, key: Buffer | undefined): StoredSecret {
  if (!key) return { secret: bytes, sealed: false };
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, iv).setAAD(associated(webhookId));
  const body = Buffer.concat([cipher.update(bytes), cipher.final()]);
  return { secret: Buffer.concat([iv, body, cipher.getAuthTag()]), sealed: true };
}

export function openSecret(stored: StoredSecret, webhookId: number, key: Buffer | undefined): Buffer {
  if (!stored.sealed) return stored.secret;
  if (!key) throw new Error('the signing secret is sealed but WEBHOOK_SECRET_KEY is not set');
  const { secret } = stored;
  const decipher = createDecipheriv('aes-256-gcm', key, secret.subarray(0, IV_BYTES)).setAAD(associated(webhookId));
  decipher.setAuthTag(secret.subarray(secret.length - TAG_BYTES));
  try {
    return Buffer.concat([decipher.update(secret.subarray(IV_BYTES, secret.length - TAG_BYTES)), decipher.final()]);
  } catch {
    throw new Error('the signing secret does not open with WEBHOOK_SECRET_KEY (another key sealed it)');
  }
}
