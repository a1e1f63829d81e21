/** The route shapes resources share; each states only what differs (docs/architecture.md, "Adding a resource"). */
import type { FastifyPluginAsyncTypebox, TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Static, TSchema } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ListResult, PageRequest } from '../db/pagination.js';
import type { Queryable } from '../db/pool.js';
import { isFull, type View } from '../db/views.js';
import { notFound } from '../errors.js';
import { BODY_ERRORS, COMMON_ERRORS, NoContent, errorResponses, secured } from '../schemas/common.js';
import { ConditionalGetHeaders, ConditionalWriteHeaders, NotModified, listResponses } from '../schemas/conditional.js';
import { Created, IdempotentHeaders } from '../schemas/idempotency.js';
import { changeOwned, type OwnershipRule } from '../use-cases/change-owned.js';
import { createOnce, type CreatedResource, type Creation } from '../use-cases/create-once.js';
import { conditionalGet } from '../http/conditional.js';
import { listResponse, pageRequest } from '../http/lists.js';
import { viewOf } from '../http/view-params.js';

export type Api = Parameters<FastifyPluginAsyncTypebox>[0];

/** Routes that need a bearer token, in a scope of their own. */
export async function authenticated(app: Api, routes: (r: Api) => void): Promise<void> {
  await app.register(async (authed) => {
    authed.addHook('onRequest', app.requireUser);
    routes(authed.withTypeProvider<TypeBoxTypeProvider>());
  });
}

interface Operation {
  tags: string[];
  operationId: string;
  summary: string;
  description?: string;
  security?: typeof secured;
}
type Request<P extends TSchema, Q extends TSchema> = FastifyRequest<{ Params: Static<P>; Querystring: Static<Q> }>;
/** What a read answers with, per item: `present` may hide members and set headers; `config` replaces replica reads. */
interface Reads<T> {
  config?: object;
  present?(request: FastifyRequest, reply: FastifyReply, item: NoInfer<T>): NoInfer<T>;
}

/** A list (public unless `security`); with `params`, its parent may not exist (a 404 saying `missing`). */
export function listRoute<P extends TSchema, Q extends TSchema, T>(
  app: Api,
  url: string,
  spec: Operation &
    Reads<T> & {
      params?: P;
      querystring: Q;
      list: TSchema;
      /** null: the parent does not exist. */
      load(request: Request<P, Q>, page: PageRequest): Promise<ListResult<T>>;
      missing?(params: Static<P>): string;
    },
): void {
  const { params, querystring, list, load, missing, config = { readsReplica: true }, present, ...doc } = spec;
  const response = params ? listResponses(list, 404) : listResponses(list);
  app.get(
    url,
    { config, schema: { ...doc, ...(params && { params }), querystring, headers: ConditionalGetHeaders, response } },
    async (request, reply) => {
      const page = pageRequest(request.query as Parameters<typeof pageRequest>[0]);
      const result = await load(request as Request<P, Q>, page);
      if (!result) throw notFound(missing!(request.params as Static<P>));
      const envelope = listResponse(request, reply, result, page);
      return present ? { ...envelope, data: envelope.data.map((item) => present(request, reply, item)) } : envelope;
    },
  );
}

/** One public item with its ETag; with `read`, `fields` and `include` give a representation ETagged by its body. */
export function itemRoute<P extends TSchema, Q extends TSchema, T, F extends string = string>(
  app: Api,
  url: string,
  spec: Operation &
    Reads<T> & {
      params: P;
      querystring?: Q;
      item: TSchema;
      find(request: Request<P, Q>): Promise<T | undefined>;
      read?(request: Request<P, Q>, view: View<F>): Promise<object | undefined>;
      etag(item: NoInfer<T>): string;
      missing(params: Static<P>): string;
    },
): void {
  const { params, querystring, item, find, read, etag, missing, ...reads } = spec;
  const { config = { readsReplica: true }, present, ...doc } = reads;
  app.get(
    url,
    {
      config,
      schema: {
        ...doc,
        params,
        ...(querystring && { querystring }),
        headers: ConditionalGetHeaders,
        response: { 200: item, 304: NotModified, ...errorResponses(...COMMON_ERRORS, 404) },
      },
    },
    async (request, reply) => {
      const typed = request as Request<P, Q>;
      const view = viewOf<F>(request.query as Parameters<typeof viewOf>[0]);
      const partial = read && !isFull(view);
      const found = partial ? await read(typed, view) : await find(typed);
      if (!found) throw notFound(missing(request.params as Static<P>));
      const shown = present ? present(request, reply, found as T) : found;
      return partial ? shown : conditionalGet(request, reply, etag(shown as T), shown);
    },
  );
}

type CreateRequest<P extends TSchema, B extends TSchema> = FastifyRequest<{ Params: Static<P>; Body: Static<B> }>;
/** A create, replayed for a repeated Idempotency-Key; `errors` beyond the common ones. `security: null`: a sign-up. */
export function createRoute<P extends TSchema, B extends TSchema>(
  r: Api,
  url: string,
  spec: Omit<Operation, 'security'> & {
    security?: null;
    config?: object;
    params?: P;
    body: B;
    created: TSchema;
    errors: number[];
    kind: string;
    /** The body members the create uses (what a replay's fingerprint compares). */
    input(body: Static<B>): Creation['input'];
    password?(body: Static<B>): string;
    precheck?(request: CreateRequest<P, B>): Promise<void>;
    create(db: Queryable, request: CreateRequest<P, B>, passwordHash: string | undefined): Promise<CreatedResource>;
  },
): void {
  const { params, body, created, errors, kind, input, password, precheck, create, config, ...doc } = spec;
  const { security = secured, ...operation } = doc;
  r.post(
    url,
    {
      config,
      schema: {
        ...operation,
        ...(security && { security }),
        ...(params && { params }),
        headers: IdempotentHeaders,
        body,
        response: { 201: created, ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, ...errors) },
      },
    },
    async (request, reply) => {
      const typed = request as CreateRequest<P, B>;
      const creation = { kind, input: input(typed.body), password: password?.(typed.body) };
      const prechecked = precheck && (() => precheck(typed));
      return createOnce(request, reply, {
        ...creation,
        precheck: prechecked,
        create: (db, hash) => create(db, typed, hash),
      });
    },
  );
}

/** A delete by its owner (or an admin), honouring If-Match: 204. */
export function deleteRoute<P extends TSchema, T>(
  r: Api,
  url: string,
  spec: Operation & {
    params: P;
    lock(tx: Queryable, params: Static<P>): Promise<T | undefined>;
    rule(params: Static<P>): OwnershipRule<NoInfer<T>>;
    etag(item: NoInfer<T>): string;
    remove(tx: Queryable, params: Static<P>): Promise<unknown>;
  },
): void {
  const { params, lock, rule, etag, remove, ...doc } = spec;
  r.delete(
    url,
    {
      schema: {
        ...doc,
        security: secured,
        params,
        headers: ConditionalWriteHeaders,
        response: { 204: NoContent, ...errorResponses(...COMMON_ERRORS, 403, 404, 412) },
      },
    },
    async (request, reply) => {
      const ids = request.params as Static<P>;
      await changeOwned<T, void>(request, {
        lock: (tx) => lock(tx, ids),
        rule: rule(ids),
        etag,
        write: async (tx) => {
          await remove(tx, ids);
        },
      });
      return reply.code(204).send(null);
    },
  );
}

export { Created };
