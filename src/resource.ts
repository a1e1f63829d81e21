/**
 * A resource is declared once, in the module of its routes (docs/architecture.md, "Adding a resource"); everything
 * that names resources is derived here from the declarations: the change feed's types and paths, the tombstone
 * tables retention purges, the OpenAPI groups, the 404 messages, and the conflicts a write can break.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { TSchema } from '@sinclair/typebox';
import type { HttpError } from './errors.js';

/** The Fastify instance a route plugin gets, typed by the TypeBox provider. */
export type Api = Parameters<FastifyPluginAsyncTypebox>[0];

export const CHANGES = ['created', 'updated', 'deleted'] as const;
/** An event's type: `post.created`, `comment.deleted`… */
export type EventType = `${string}.${(typeof CHANGES)[number]}`;

export interface Resource<T = never> {
  /** Singular, lower case: its events' resource type, an Idempotency-Key's record, the noun of its 404s. */
  name: string;
  /** The path of one item, every parameter named (`/posts/:postId/comments/:commentId`); the last names its id. */
  path: string;
  /** What it lives under: its path starts with the parent's, and its events carry the parent's id as their post. */
  parent?: Resource<never>;
  /** Its read schema (with an `$id`): what its GET shows, and so its events' data in the OpenAPI document. */
  schema: TSchema;
  /** The OpenAPI group its operations are listed in. */
  group: { name: string; description: string };
  /** Its strong ETag (docs/api.md §8), from the row as the repository reads it. */
  etag(item: T): string;
  /** The table keeping deleted items' sort keys, so a cursor naming one keeps its place (purged by retention). */
  tombstones?: string;
  /** The unique indexes a request can break, by name: the 409 each answers. */
  unique?: Record<string, () => HttpError>;
  /** Its routes, registered under the API prefix; they read their facts from `resource`. */
  routes(app: Api, resource: Resource<T>): Promise<void>;
}

/** What names an item in messages: a resource, or a path outside this service's resources. */
export type Named = Pick<Resource<never>, 'name' | 'path' | 'parent'>;
/** What lists take from a resource: also the OpenAPI group. */
export type Listed = Named & Pick<Resource<never>, 'group'>;

/** The parameter that names one item: the last of its path. */
export function idParam(resource: Named): string {
  const params = [...resource.path.matchAll(/:(\w+)/g)].map((match) => match[1]!);
  return params[params.length - 1]!;
}

/** `post 7 does not exist`, `comment 3 of post 7 does not exist`, from a request's path parameters. */
export function missing(resource: Named, params: unknown): string {
  const values = params as Record<string, number | string | undefined>;
  const item = `${resource.name} ${values[idParam(resource)]}`;
  const { parent } = resource;
  if (!parent) return `${item} does not exist`;
  return `${item} of ${parent.name} ${values[idParam(parent)]} does not exist`;
}

export interface ResourceRegistry {
  readonly resources: readonly Resource<never>[];
  /** The change feed's types, three per resource (docs/api.md §12). */
  readonly eventTypes: readonly EventType[];
  readonly tombstoneTables: readonly string[];
  /** The path of an event's resource, API prefix included. */
  eventPath(resourceType: string, id: number, postId: number | null): string;
  /** The answer to a broken unique index, when a resource declares it. */
  uniqueViolation(constraint: string): HttpError | undefined;
}

/** Checks the declarations against each other and derives what the service lists by resource. Throws at start-up. */
export function resourceRegistry(declared: readonly Resource<never>[], apiPrefix: string): ResourceRegistry {
  const byName = new Map<string, Resource<never>>();
  for (const resource of declared) {
    if (!/^[a-z][a-z0-9_]*$/.test(resource.name)) {
      throw new Error(`resource name "${resource.name}" must be lower case letters, digits and _ (it names events)`);
    }
    if (byName.has(resource.name)) throw new Error(`resource "${resource.name}" is declared twice`);
    checkParent(resource, byName);
    byName.set(resource.name, resource);
  }
  const unique = new Map(declared.flatMap((resource) => Object.entries(resource.unique ?? {})));

  return {
    resources: declared,
    eventTypes: declared.flatMap((resource) => CHANGES.map((change): EventType => `${resource.name}.${change}`)),
    tombstoneTables: declared.flatMap((resource) => (resource.tombstones ? [resource.tombstones] : [])),
    eventPath(resourceType, id, postId) {
      const resource = byName.get(resourceType);
      // An event of a resource this instance does not serve (a newer instance's): its type names it.
      if (!resource) return `${apiPrefix}/${resourceType}/${id}`;
      const own = idParam(resource);
      // checkParent allowed no other parameter than these two.
      const path = resource.path.replace(/:(\w+)/g, (_, name: string) => String(name === own ? id : postId));
      return `${apiPrefix}${path}`;
    },
    uniqueViolation: (constraint) => unique.get(constraint)?.(),
  };
}

/**
 * Events carry one parent id, their post's (events.post_id, what the feed's `post=` filters on): so a resource is
 * top-level, or lives directly under posts, declared before it, and its path continues the post's.
 */
function checkParent(resource: Resource<never>, known: Map<string, Resource<never>>): void {
  const params = [...resource.path.matchAll(/:(\w+)/g)];
  const { parent } = resource;
  if (!parent) {
    if (params.length !== 1) throw new Error(`${resource.name}: a top-level path has one parameter (${resource.path})`);
    return;
  }
  if (known.get(parent.name) !== parent) {
    throw new Error(`${resource.name}: its parent ${parent.name} must be declared before it`);
  }
  if (parent.name !== 'post')
    throw new Error(`${resource.name}: only posts have resources under them (events.post_id)`);
  if (!resource.path.startsWith(`${parent.path}/`) || params.length !== 2) {
    throw new Error(`${resource.name}: its path must be one level under ${parent.path} (${resource.path})`);
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The declared resources and what derives from them (buildApp). */
    resources: ResourceRegistry;
  }
}
