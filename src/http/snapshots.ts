/**
 * The `snapshot` of offset pages (docs/api.md §5): a page requested without one hands one out in its links, and a
 * page requested with it is computed as of that moment. The token is opaque to clients, not secret: it carries the
 * moment (the database's snapshot and the largest id then), the list's total then, when it was made, and a digest
 * of the list it belongs to. A forged token only changes the forger's own answer; the database side is
 * attach_snapshots (migrations).
 */
import { createHash } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type { Snapshot, SnapshotPoint } from '../db/pagination.js';
import { gone, validation } from '../errors.js';
import { linkTo } from './links.js';

/** How long a token is honoured: well within the day its deleted items' tombstones are kept. */
export const SNAPSHOT_LIFETIME_MS = 3_600_000;

/** Parameters that change neither which items a list holds nor their order: a walk may change them. */
const NOT_THE_LIST = new Set(['page', 'perPage', 'snapshot', 'fields', 'include']);

/** PostgreSQL's own limit on a snapshot's running transactions is far below this (max_connections). */
const MAX_RUNNING = 1_000;
const TOKEN = /^(\d{13})\.(\d{1,16})\.(\d{1,16})\.([01])\.([\w-]{16})\.(\d{1,19}):(\d{1,19}):([\d,]*)$/;
const XID = /^\d{1,19}$/;

/** The list a token belongs to: its path and the parameters that make it that list, in a fixed order. */
function listDigest(request: FastifyRequest, search: URLSearchParams): string {
  const kept = [...search].filter(([name]) => !NOT_THE_LIST.has(name)).sort(([a], [b]) => (a < b ? -1 : 1));
  const list = `${linkTo(request)}?${new URLSearchParams(kept).toString()}`;
  return createHash('sha256').update(list).digest('base64url').slice(0, 16);
}

export function snapshotToken(
  request: FastifyRequest,
  search: URLSearchParams,
  point: SnapshotPoint,
  total: { total: number; estimated?: boolean | undefined },
): string {
  const estimated = total.estimated ? 1 : 0;
  const text = `${Date.now()}.${point.top}.${total.total}.${estimated}.${listDigest(request, search)}.${point.xids}`;
  return Buffer.from(text).toString('base64url');
}

/** The token as sent: 422 when it is no token of this service or belongs to another list, 410 when too old. */
export function readSnapshot(request: FastifyRequest, search: URLSearchParams, token: string): Snapshot {
  const parts = TOKEN.exec(Buffer.from(token, 'base64url').toString());
  const [, madeAt, top, total, estimated, digest, xmin, xmax, running] = parts ?? [];
  if (!parts || !isSnapshot(BigInt(xmin!), BigInt(xmax!), running!)) {
    throw validation({ snapshot: ['is not a snapshot this service handed out; use the one in a Link header'] });
  }
  if (digest !== listDigest(request, search)) {
    throw validation({
      snapshot: ['belongs to another list: keep the path, filters and sort of the page that handed it out'],
    });
  }
  if (Date.now() - Number(madeAt) > SNAPSHOT_LIFETIME_MS) {
    const first = new URLSearchParams(search);
    for (const name of ['snapshot', 'page']) first.delete(name);
    throw gone(
      `the snapshot is more than an hour old, longer than one is kept; start again at ${linkTo(request, '', first)}`,
    );
  }
  return { xids: `${xmin}:${xmax}:${running}`, top: Number(top), total: Number(total), estimated: estimated === '1' };
}

/** As PostgreSQL reads one: xmin ≤ xmax, the running ones ascending within [xmin, xmax). */
function isSnapshot(xmin: bigint, xmax: bigint, running: string): boolean {
  if (xmin > xmax) return false;
  if (running === '') return true;
  const xids = running.split(',');
  if (xids.length > MAX_RUNNING || !xids.every((xid) => XID.test(xid))) return false;
  let previous = xmin - 1n;
  for (const xid of xids.map(BigInt)) {
    if (xid <= previous || xid >= xmax) return false;
    previous = xid;
  }
  return true;
}
