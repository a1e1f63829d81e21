/**
 * The route shapes resources share; each states only what differs, and takes its group, path, ETag, 404 message and
 * Idempotency-Key record from the resource's declaration (docs/architecture.md, "Adding a resource").
 */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Static, TSchema } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ListResult } from '../db/pagination.js';
import type { Queryable } from '../db/pool.js';
import { isFull, type View } from '../db/views.js';
import { notFound } from '../errors.js';
import { BODY_ERRORS, COMMON_ERRORS, NoContent, errorResponses, secured } from '../schemas/common.js';
import { ConditionalGetHeaders, ConditionalWriteHeaders, NotModified, listResponses } from '../schemas/conditional.js';
import { Created, IdempotentHeaders } from '../schemas/idempotency.js';
import { changeOwned, type OwnershipRule } from '../use-cases/change-owned.js';
import { createOnce, type CreatedResource, type Creation } from '../use-cases/create-once.js';
import { conditionalGet } from '../http/conditional.js';
import { listRequest, listResponse, type ListQuery, type ListRequest } from '../http/lists.js';
import { viewOf } from '../http/view-params.js';
import { PUBLIC_READ } from '../http/route-options.js';
import { missing as missingOf, type Api, type Listed, type Named, type Resource } from '../resource.js';

export type { Api };

/** Routes that need a bearer token, in a scope of their own. */
export async function authenticated(app: Api, routes: (r: Api) => void): Promise<void> {
  await app.register(async (authed) => {
    authed.addHook('onRequest', app.requireUser);
    routes(authed.withTypeProvider<TypeBoxTypeProvider>());
  });
}

/** The OpenAPI group of a resource's operations. */
export const groupOf = (resource: Listed): string[] => [resource.group.name];

interface Operation {
  operationId: string;
  summary: string;
  description?: string;
  security?: typeof secured;
}
/** What a read answers with, per item: `present` may hide members and set headers; `config` replaces replica reads. */
interface Reads<T> {
  config?: object;
  present?(request: FastifyRequest, reply: FastifyReply, item: NoInfer<T>): NoInfer<T>;
}

/**
 * A list of `resource` (public unless `security`) at `url`; with `params`, what it lives under may not exist: a 404
 * naming it (`under`, by default the resource's parent).
 */
/** A list's request: its query is what every list's schema allows (ListQuery), taken apart once by listRequest. */
type ListOf<P extends TSchema> = FastifyRequest<{ Params: Static<P>; Querystring: ListQuery }>;
/** What an item's query may hold (docs/api.md §10): the representation asked for. */
type ViewQuery = { fields?: string[]; include?: 'author' };
type ItemOf<P extends TSchema> = FastifyRequest<{ Params: Static<P>; Querystring: ViewQuery }>;

export function listRoute<
  P extends TSchema,
  Q extends TSchema & { static: ListQuery },
  T,
  S extends string = string,
  V extends string = string,
>(
  app: Api,
  resource: Listed,
  url: string,
  spec: Operation &
    Reads<T> & {
      params?: P;
      querystring: Q;
      list: TSchema;
      /** null: what it lives under does not exist. */
      load(request: ListOf<P>, list: ListRequest<S, V>): Promise<ListResult<T>>;
      under?: Named;
    },
): void {
  const { params, querystring, list, load, under = resource.parent, config = PUBLIC_READ, present, ...doc } = spec;
  // 410: a snapshot too old.
  const response = params ? listResponses(list, 404, 410) : listResponses(list, 410);
  const schema = { ...doc, tags: groupOf(resource), ...(params && { params }), querystring };
  const handler = async (request: ListOf<P>, reply: FastifyReply): Promise<object> => {
    const parsed = listRequest<S, V>(request, request.query);
    // An offset page's snapshot must name what the primary committed: a standby's pg_current_snapshot() omits the
    // transactions running on the primary, and a replica may not have replayed what a snapshot saw.
    if (parsed.page.kind === 'offset') request.replica = null;
    const result = await load(request, parsed);
    if (!result) throw notFound(missingOf(under!, request.params));
    const envelope = listResponse(request, reply, result, parsed);
    return present ? { ...envelope, data: envelope.data.map((item) => present(request, reply, item)) } : envelope;
  };
  app.get(url, { config, schema: { ...schema, headers: ConditionalGetHeaders, response } }, handler);
}

/**
 * One public item of `resource` at its path, with its ETag; with `read`, `fields` and `include` give a representation
 * ETagged by its body.
 */
export function itemRoute<P extends TSchema, T, F extends string = string>(
  app: Api,
  resource: Resource<T>,
  spec: Operation &
    Reads<T> & {
      params: P;
      querystring?: TSchema & { static: ViewQuery };
      item: TSchema;
      find(request: ItemOf<P>): Promise<T | undefined>;
      read?(request: ItemOf<P>, view: View<F>): Promise<object | undefined>;
    },
): void {
  const { params, querystring, item, find, read, ...reads } = spec;
  const { config = PUBLIC_READ, present, ...doc } = reads;
  const handler = async (request: ItemOf<P>, reply: FastifyReply): Promise<unknown> => {
    const view = viewOf<F>(request.query);
    const partial = read && !isFull(view);
    const found = partial ? await read(request, view) : await find(request);
    if (!found) throw notFound(missingOf(resource, request.params));
    const shown = present ? present(request, reply, found as T) : found;
    return partial ? shown : conditionalGet(request, reply, resource.etag(shown as T), shown);
  };
  const schema = { ...doc, tags: groupOf(resource), params, ...(querystring && { querystring }) };
  const response = { 200: item, 304: NotModified, ...errorResponses(...COMMON_ERRORS, 404) };
  app.get(resource.path, { config, schema: { ...schema, headers: ConditionalGetHeaders, response } }, handler);
}

type CreateRequest<P extends TSchema, B extends TSchema> = FastifyRequest<{ Params: Static<P>; Body: Static<B> }>;
/**
 * A create of `resource` at `url`, replayed for a repeated Idempotency-Key; `errors` beyond the common ones.
 * `security: null`: a sign-up.
 */
export function createRoute<P extends TSchema, B extends TSchema>(
  r: Api,
  resource: Resource<never>,
  url: string,
  spec: Omit<Operation, 'security'> & {
    security?: null;
    config?: object;
    params?: P;
    body: B;
    created: TSchema;
    errors: number[];
    /** The body members the create uses (what a replay's fingerprint compares). */
    input(body: Static<B>): Creation['input'];
    password?(body: Static<B>): string;
    precheck?(request: CreateRequest<P, B>): Promise<void>;
    create(db: Queryable, request: CreateRequest<P, B>, passwordHash: string | undefined): Promise<CreatedResource>;
  },
): void {
  const { params, body, created, errors, input, password, precheck, create, config, ...doc } = spec;
  const { security = secured, ...operation } = doc;
  r.post(
    url,
    {
      config,
      schema: {
        ...operation,
        tags: groupOf(resource),
        ...(security && { security }),
        ...(params && { params }),
        headers: IdempotentHeaders,
        body,
        response: { 201: created, ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, ...errors) },
      },
    },
    async (request, reply) => {
      const typed = request as CreateRequest<P, B>;
      const creation = { kind: resource.name, input: input(typed.body), password: password?.(typed.body) };
      const prechecked = precheck && (() => precheck(typed));
      return createOnce(request, reply, {
        ...creation,
        precheck: prechecked,
        create: (db, hash) => create(db, typed, hash),
      });
    },
  );
}

/** A delete of `resource` at its path by an owner (or an admin), honouring If-Match: 204. */
export function deleteRoute<P extends TSchema, T, L extends T>(
  r: Api,
  resource: Resource<T>,
  spec: Operation & {
    params: P;
    lock(tx: Queryable, params: Static<P>): Promise<L | undefined>;
    owners(item: L): readonly number[];
    denied: string;
    remove(tx: Queryable, params: Static<P>): Promise<unknown>;
  },
): void {
  const { params, lock, owners, denied, remove, ...doc } = spec;
  r.delete(
    resource.path,
    {
      schema: {
        ...doc,
        tags: groupOf(resource),
        security: secured,
        params,
        headers: ConditionalWriteHeaders,
        response: { 204: NoContent, ...errorResponses(...COMMON_ERRORS, 403, 404, 412) },
      },
    },
    async (request, reply) => {
      const ids = request.params as Static<P>;
      const rule: OwnershipRule<L> = { missing: missingOf(resource, ids), owners, denied };
      await changeOwned<L, void>(request, {
        lock: (tx) => lock(tx, ids),
        rule,
        etag: resource.etag,
        write: async (tx) => {
          await remove(tx, ids);
        },
      });
      return reply.code(204).send(null);
    },
  );
}

export { Created };
