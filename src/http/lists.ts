/**
 * The HTTP side of every list: its query taken apart once into a ListRequest (pagination mode, sort, view, filters),
 * the envelope, and the RFC 8288 Link header.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ListResult, PageRequest, Sort } from '../db/pagination.js';
import type { CreatedRange, View } from '../db/views.js';
import { validation } from '../errors.js';
import { JSON_MEDIA_TYPE } from '../media-types.js';
import { linkTo } from './links.js';
import { readSnapshot, snapshotToken } from './snapshots.js';
import { rangeOf, viewOf } from './view-params.js';

type PageQuery = Partial<Record<'page' | 'perPage' | 'after' | 'before' | 'limit', number>> &
  Partial<Record<'sort' | 'afterKey' | 'beforeKey' | 'snapshot', string>>;

/** Every list parameter of docs/api.md §5 and §10, as a list's query schema validated it. */
export type ListQuery = PageQuery & {
  author?: number;
  q?: string;
  createdAfter?: string;
  createdBefore?: string;
  fields?: string[];
  include?: 'author';
};

/** The filters a list may take; each repository reads those its list supports. */
export type ListFilter = { author?: number | undefined; q?: string | undefined } & CreatedRange;

/** A list request, taken apart once from its query; `search` is the query as sent, which its links keep. */
export interface ListRequest<S extends string = string, V extends string = string> {
  page: PageRequest;
  sort: Sort<S>;
  view: View<V>;
  filter: ListFilter;
  search: URLSearchParams;
}

/** The schemas have allow-listed every value; the URL's own spelling is kept for the links (no defaults added). */
export function listRequest<S extends string, V extends string>(
  request: FastifyRequest,
  query: ListQuery,
): ListRequest<S, V> {
  const search = new URLSearchParams(request.url.split('?')[1]);
  const page = pageRequest(query);
  if (page.kind === 'offset' && query.snapshot !== undefined) {
    page.snapshot = readSnapshot(request, search, query.snapshot);
  }
  return {
    page,
    sort: sortOf<S>(query),
    view: viewOf<V>(query),
    filter: { author: query.author, q: query.q, ...rangeOf(query) },
    search,
  };
}

export function pageRequest(query: PageQuery): PageRequest {
  const offset = query.page !== undefined || query.perPage !== undefined || query.snapshot !== undefined;
  const cursorParams = (['after', 'afterKey', 'before', 'beforeKey', 'limit'] as const).filter(
    (name) => query[name] !== undefined,
  );
  if (offset && cursorParams.length) {
    const message = 'cannot be combined with page, perPage or snapshot';
    const fieldErrors = Object.fromEntries(cursorParams.map((name) => [name, [message]]));
    throw validation(fieldErrors, 'use either page/perPage (offset mode) or after/limit (cursor mode)');
  }
  if (query.before !== undefined && query.after !== undefined) {
    throw validation(
      { before: ['cannot be combined with after'] },
      'use after (the next page) or before (the previous page), not both',
    );
  }
  if (cursorParams.length) {
    const { after, afterKey, before, beforeKey } = query;
    return { kind: 'cursor', after, afterKey, before, beforeKey, limit: query.limit ?? 20 };
  }
  return { kind: 'offset', page: query.page ?? 1, perPage: query.perPage ?? 20 };
}

/** The schema's enum has already allow-listed the value. */
export function sortOf<F extends string>(query: PageQuery): Sort<F> {
  const sort = query.sort ?? 'id';
  const descending = sort.startsWith('-');
  return { field: (descending ? sort.slice(1) : sort) as F, descending };
}

/** The request's query with `params` set; those set to null are removed. */
function link(
  request: FastifyRequest,
  search: URLSearchParams,
  params: Record<string, number | string | null>,
  rel: string,
): string {
  const query = new URLSearchParams(search);
  for (const [key, value] of Object.entries(params)) {
    if (value === null) query.delete(key);
    else query.set(key, String(value));
  }
  return `<${linkTo(request, '', query)}>; rel="${rel}"`;
}

export type ListEnvelope<T> =
  | { data: T[]; page: number; perPage: number; total: number; totalPages: number; totalEstimated?: boolean }
  | { data: T[]; limit: number; hasMore: boolean; nextCursor: number | null; prevCursor: number | null };

/** The 200's union would make fast-json-stringify validate the page to pick a branch; the mode is known here. */
function serializeAs(reply: FastifyReply, title: 'OffsetPage' | 'CursorPage'): void {
  const response = reply.request.routeOptions.schema?.response as
    Record<string, { anyOf?: { title?: string }[] }> | undefined;
  const branch = response?.['200']?.anyOf?.find((schema) => schema.title === title);
  if (!branch) return;
  reply.serializer(reply.compileSerializationSchema(branch, '200'));
  // Fastify names the media type only when it serializes itself, not for a custom serializer.
  reply.type(JSON_MEDIA_TYPE);
}

export function listResponse<T>(
  request: FastifyRequest,
  reply: FastifyReply,
  result: Exclude<ListResult<T>, null>,
  list: Pick<ListRequest, 'page' | 'search'>,
): ListEnvelope<T> {
  const { page, search } = list;
  serializeAs(reply, result.kind === 'offset' ? 'OffsetPage' : 'CursorPage');
  const links: string[] = [];
  if (result.kind === 'cursor' && page.kind === 'cursor') {
    const { items: data, hasMore, nextCursor, nextKey, prevCursor, prevKey } = result;
    const { limit } = page;
    // The anchor's key as read travels with it, so the walk stays put when the anchor is edited.
    const cursor = { after: null, afterKey: null, before: null, beforeKey: null, limit };
    if (nextCursor !== null)
      links.push(link(request, search, { ...cursor, after: nextCursor, afterKey: nextKey }, 'next'));
    if (prevCursor !== null)
      links.push(link(request, search, { ...cursor, before: prevCursor, beforeKey: prevKey }, 'prev'));
    if (links.length) reply.header('link', links.join(', '));
    return { data, limit, hasMore, nextCursor, prevCursor };
  }
  if (result.kind !== 'offset' || page.kind !== 'offset') throw new Error('pagination mode mismatch');
  const { perPage } = page;
  const totalPages = Math.ceil(result.total / perPage);
  const last = Math.max(totalPages, 1);
  // A page requested with a snapshot keeps it (it is in `search`); one without hands out the moment it was read at.
  const snapshot = result.made ? snapshotToken(request, search, result.made, result) : search.get('snapshot');
  const to = (pageNumber: number) => ({ page: pageNumber, perPage, snapshot });
  links.push(link(request, search, to(1), 'first'));
  if (page.page > 1) links.push(link(request, search, to(Math.min(page.page - 1, last)), 'prev'));
  if (page.page < totalPages) links.push(link(request, search, to(page.page + 1), 'next'));
  links.push(link(request, search, to(last), 'last'));
  reply.header('link', links.join(', '));
  const envelope = { data: result.items, page: page.page, perPage, total: result.total, totalPages };
  return result.estimated === undefined ? envelope : { ...envelope, totalEstimated: result.estimated };
}
