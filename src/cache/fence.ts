/**
 * The change bus's NOTIFY payloads: a fence id (`~`-ended when unconfirmed), then
 * `~<user>` writers, `!<lsn>`, `@<fence>` confirmations, `@bye`, or cache labels.
 * An empty payload (a trigger's) flushes all.
 */
import { parseLsn } from '../db/replicas.js';
import { FLUSH_ALL } from './store.js';

/** NOTIFY payloads must stay under 8 000 bytes. */
const MAX_PAYLOAD = 7_900;
export const UNCONFIRMED = '~';

/** `*` when the labels would not fit. */
export function fencePayload(id: string, labels: Set<string>, writers: Set<number> = new Set()): string {
  const head = [id, ...[...writers].map((writer) => `~${writer}`)].join(' ');
  const payload = labels.size ? `${head} ${[...labels].join(' ')}` : head;
  return Buffer.byteLength(payload) > MAX_PAYLOAD ? `${head} ${FLUSH_ALL}` : payload;
}

export interface Fence {
  id: string;
  sender: string;
  writers: string[];
  position: number | undefined;
  /** Cache labels, or the peer message (`@…`) as the first word. */
  words: string[];
}

export function parseFence(payload: string): Fence {
  const [id = '', ...rest] = payload.split(' ');
  let position: number | undefined;
  const writers: string[] = [];
  const words: string[] = [];
  for (const word of rest) {
    if (word.startsWith('~')) writers.push(word.slice(1));
    else if (word.startsWith('!')) position = parseLsn(word.slice(1));
    else words.push(word);
  }
  return { id, sender: id.slice(0, id.indexOf('.')), writers, position, words };
}
