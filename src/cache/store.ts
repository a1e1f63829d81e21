/** The response cache's store, a byte-budgeted LRU with a label index. No I/O. */
import { LRUCache } from 'lru-cache';

export interface StoredAnswer {
  body: Buffer;
  headers: Record<string, string>;
  labels: string[];
}

export const FLUSH_ALL = '*';
/** One answer larger than this share of the budget is not worth evicting the others for. */
const MAX_ENTRY_SHARE = 8;
/** Beyond the strings (objects, LRU slots, label index), so the budget bounds the memory really used. */
const ENTRY_OVERHEAD = 768;
const LABEL_OVERHEAD = 200;
const RECENT_EVICTIONS = 256;

export interface ResponseStore {
  get(url: string): StoredAnswer | undefined;
  put(url: string, answer: StoredAnswer): void;
  /** null: all. */
  evict(labels: Iterable<string> | null): void;
  /** A miss notes it when it starts. */
  epoch(): number;
  evictedSince(since: number, labels: string[]): boolean;
}

export function createResponseStore({ maxBytes, maxAgeMs }: { maxBytes: number; maxAgeMs: number }): ResponseStore {
  const byLabel = new Map<string, Set<string>>();
  let clearing = false;
  const answers = new LRUCache<string, StoredAnswer>({
    maxSize: Math.max(maxBytes, 1),
    maxEntrySize: Math.max(Math.floor(maxBytes / MAX_ENTRY_SHARE), 1),
    sizeCalculation: (answer, url) => {
      let size = ENTRY_OVERHEAD + answer.body.length + url.length;
      for (const value of Object.values(answer.headers)) size += value.length;
      for (const label of answer.labels) size += label.length + LABEL_OVERHEAD;
      return size;
    },
    ttl: maxAgeMs,
    dispose: (answer, url) => {
      if (clearing) return;
      for (const label of answer.labels) {
        const urls = byLabel.get(label);
        urls?.delete(url);
        if (urls?.size === 0) byLabel.delete(label);
      }
    },
  });

  let epoch = 0;
  const recent: { epoch: number; labels: Set<string> | null }[] = [];

  return {
    get: (url) => answers.get(url),
    put(url, answer) {
      if (!answers.set(url, answer).has(url)) return;
      for (const label of answer.labels) {
        let urls = byLabel.get(label);
        if (!urls) byLabel.set(label, (urls = new Set()));
        urls.add(url);
      }
    },
    evict(labels) {
      epoch += 1;
      const set = labels === null ? null : new Set(labels);
      recent.push({ epoch, labels: set });
      if (recent.length > RECENT_EVICTIONS) recent.shift();
      if (set === null || set.has(FLUSH_ALL)) {
        clearing = true;
        answers.clear();
        clearing = false;
        byLabel.clear();
        return;
      }
      for (const label of set) {
        const urls = byLabel.get(label);
        if (urls) for (const url of [...urls]) answers.delete(url);
      }
    },
    epoch: () => epoch,
    evictedSince(since, labels) {
      if (since === epoch) return false;
      const oldest = recent[0];
      if (!oldest || oldest.epoch > since + 1) return true;
      for (const eviction of recent) {
        if (eviction.epoch <= since) continue;
        if (
          eviction.labels === null ||
          eviction.labels.has(FLUSH_ALL) ||
          labels.some((label) => eviction.labels!.has(label))
        )
          return true;
      }
      return false;
    },
  };
}

/** "Seen twice" (two generations of fingerprints): one-off URLs, random ids or cursors, are never stored. */
export function doorkeeper(slots = 1 << 13): (url: string) => boolean {
  let current = new Uint32Array(slots);
  let previous = new Uint32Array(slots);
  let taken = 0;
  return (url) => {
    const h = fingerprint(url);
    const slot = h & (slots - 1);
    if (current[slot] === h || previous[slot] === h) return true;
    current[slot] = h;
    if (++taken >= slots / 2) {
      [previous, current] = [current, previous];
      current.fill(0);
      taken = 0;
    }
    return false;
  };
}

/** FNV-1a, with no allocation. */
function fingerprint(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0 || 1;
}
