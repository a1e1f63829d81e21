/**
 * The response cache's labels, derived from routes and bodies without per-route
 * code (docs/architecture.md, "The response cache").
 */

export type ChangeKind = 'created' | 'updated' | 'deleted';

/** Foreign keys whose name is not their collection's singular. */
const REFERENCES: Record<string, string> = { authorId: 'users' };
/** Sort fields no write changes. */
const IMMUTABLE_SORT = new Set(['id', 'createdAt']);
/** Parameters no write changes the meaning of (`q` is not one: an edit changes what matches). */
const STABLE_QUERY = new Set([
  'page',
  'perPage',
  'after',
  'before',
  'limit',
  'author',
  'createdAfter',
  'createdBefore',
  'fields',
  'include',
]);
const UPDATED = '#updated';
function references(resource: object): [string, number][] {
  const refs: [string, number][] = [];
  for (const [key, value] of Object.entries(resource)) {
    if (key.length > 2 && key.endsWith('Id') && typeof value === 'number')
      refs.push([REFERENCES[key] ?? `${key.slice(0, -2)}s`, value]);
  }
  return refs;
}

export function changeLabels(how: ChangeKind, collection: string, resource: { id: number }): string[] {
  const item = `${collection}/${resource.id}`;
  const refs = references(resource);
  const scopes = [collection, ...refs.map(([c, id]) => `${c}/${id}/${collection}`)];
  if (how === 'updated') return [item, ...scopes.map((scope) => scope + UPDATED)];
  const labels = [item, ...scopes, ...refs.map(([c, id]) => `${c}/${id}`)];
  if (how === 'deleted') labels.push(`${item}/*`);
  return labels;
}

export interface RouteShape {
  /** (collection, path parameter) pairs: /posts/:postId/comments → [posts, postId]. */
  pairs: { collection: string; param: string }[];
  /** The last segment is a parameter: one resource, not a list. */
  single: boolean;
  collection: string;
}

export function routeShape(url: string): RouteShape {
  const segments = url.split('/').filter(Boolean);
  const pairs: RouteShape['pairs'] = [];
  segments.forEach((segment, i) => {
    if (segment.startsWith(':') && i > 0) pairs.push({ collection: segments[i - 1]!, param: segment.slice(1) });
  });
  const single = segments.at(-1)?.startsWith(':') ?? false;
  return { pairs, single, collection: (single ? segments.at(-2) : segments.at(-1)) ?? '' };
}

export function entryLabels(
  shape: RouteShape,
  params: Record<string, string>,
  query: Record<string, unknown>,
  body: unknown,
): string[] {
  const label = (pair: RouteShape['pairs'][number]) => `${pair.collection}/${Number(params[pair.param])}`;
  const parents = shape.single ? shape.pairs.slice(0, -1) : shape.pairs;
  const labels = parents.map((pair) => `${label(pair)}/*`);
  if (shape.single) {
    labels.push(label(shape.pairs.at(-1)!), ...authorLabels([body]));
    return labels;
  }
  const parent = parents.at(-1);
  const scope = parent ? `${label(parent)}/${shape.collection}` : shape.collection;
  labels.push(scope);
  const sort = typeof query.sort === 'string' ? query.sort.split(',').map((f) => f.replace(/^-/, '')) : [];
  if (
    sort.some((f) => !IMMUTABLE_SORT.has(f)) ||
    Object.keys(query).some((k) => k !== 'sort' && !STABLE_QUERY.has(k))
  ) {
    labels.push(scope + UPDATED);
  }
  const items = (body as { data?: { id?: unknown }[] }).data ?? [];
  for (const item of items) labels.push(`${shape.collection}/${String(item.id)}`);
  labels.push(...authorLabels(items));
  return labels;
}

function authorLabels(items: unknown[]): string[] {
  const ids = new Set<number>();
  for (const item of items) {
    const author = (item as { author?: { id?: unknown } } | null)?.author;
    if (typeof author?.id === 'number') ids.add(author.id);
  }
  return [...ids].map((id) => `users/${id}`);
}
