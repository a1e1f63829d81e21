/**
 * /webhooks (docs/api.md §12): a user manages their own webhooks, an admin
 * everyone's; another user's webhook is a 403, a missing one a 404 (the
 * ownership rule of src/use-cases/change-owned.ts). The signing secret is in the
 * answer to POST only. Also GET /health/webhooks, the delivery backlog.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox, TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import {
  BODY_ERRORS,
  COMMON_ERRORS,
  Count,
  CursorPage,
  ETag,
  LinkHeader,
  ListEnvelope,
  ListQuery,
  NoContent,
  errorResponses,
} from '../../schemas/common.js';
import { ConditionalGetHeaders, NotModified, WithEtag, listResponses } from '../../schemas/conditional.js';
import { conflict, notFound, validation } from '../../errors.js';
import { loadOwned, type OwnershipRule } from '../../use-cases/change-owned.js';
import { linkTo } from '../../http/links.js';
import { withTransaction } from '../../db/pool.js';
import { PRIVATE } from '../../http/conditional.js';
import { listResponse, pageRequest, sortOf } from '../../http/lists.js';
import { webhooksRepository, type Webhook } from './repository.js';
import {
  CreateWebhookBody,
  CreatedWebhookSchema,
  DeliveryListQuery,
  DeliveryParams,
  DeliverySchema,
  UpdateWebhookBody,
  WEBHOOK_SORT_FIELDS,
  WebhookParams,
  WebhookSchema,
} from './schemas.js';
import { newSecret, sealSecret } from './secrets.js';
import { normalizedUrl, urlProblem, type TargetPolicy } from './targets.js';
import type { Backlog } from './queue.js';

const secured = [{ bearerAuth: [] }];
const tags = ['webhooks'];

const owned: OwnershipRule<Webhook> = {
  missing: 'webhook does not exist',
  owners: (webhook) => [webhook.userId],
  denied: 'only its owner or an admin may see or change this webhook',
};

const BacklogSchema = Type.Object(
  {
    status: Type.Literal('ok'),
    due: { ...Count, description: 'deliveries due now and not in flight' },
    oldestDueSeconds: Type.Number({
      minimum: 0,
      maximum: 1e10,
      description: 'how long the oldest due delivery has waited, s; 0 when none',
    }),
    inFlight: { ...Count, description: 'attempts being sent now, over every instance' },
    eventsBehind: Type.Number({
      minimum: 0,
      maximum: 1e16,
      description: 'numbered events the furthest-behind active webhook has not fanned out yet',
    }),
    disabledWebhooks: Count,
  },
  { additionalProperties: false, description: 'the webhook delivery backlog, for monitoring' },
);

export interface WebhookRoutesOptions {
  targets: TargetPolicy;
  secretKey: Buffer | undefined;
  maxPerUser: number;
}

type Api = Parameters<FastifyPluginAsyncTypebox>[0];
type WebhooksRepository = ReturnType<typeof webhooksRepository>;

const webhookRoutes: FastifyPluginAsyncTypebox<WebhookRoutesOptions> = async (app, options) => {
  const { targets } = options;
  app.addSchema(WebhookSchema);
  app.addSchema(DeliverySchema);
  const webhooks = webhooksRepository(app.db);
  backlogRoute(app);
  await app.register(async (authed) => {
    authed.addHook('onRequest', app.requireUser);
    const r = authed.withTypeProvider<TypeBoxTypeProvider>();
    createRoute(r, webhooks, options);
    readRoutes(r, webhooks);
    changeRoutes(r, webhooks, targets);
    deliveryRoutes(r, webhooks);
  });
};

/** The URL to store (normalized), or a 422. */
function checkUrl<U extends string | undefined>(url: U, targets: TargetPolicy): U {
  const problem = url === undefined ? undefined : urlProblem(url, targets);
  if (problem) throw validation({ url: [problem] }, 'the webhook URL is not allowed');
  return (url === undefined ? url : normalizedUrl(url)) as U;
}

function loadWebhook(webhooks: WebhooksRepository, request: FastifyRequest<{ Params: { webhookId: number } }>) {
  return loadOwned(webhooks.findById(request.params.webhookId), request.user!, {
    ...owned,
    missing: `webhook ${request.params.webhookId} does not exist`,
  });
}

function backlogRoute(app: Api) {
  app.get(
    '/health/webhooks',
    {
      config: { rateLimit: false, cacheControl: 'no-store' },
      schema: {
        tags: ['health'],
        operationId: 'getWebhookBacklog',
        summary: 'The webhook delivery backlog (200 whatever its size; monitoring decides what is too much)',
        response: { 200: BacklogSchema, ...errorResponses(401, 422, 500, 503) },
      },
    },
    async (): Promise<Backlog & { status: 'ok' }> => ({ status: 'ok', ...(await app.webhooks.backlog()) }),
  );
}

function createRoute(r: Api, webhooks: WebhooksRepository, { targets, secretKey, maxPerUser }: WebhookRoutesOptions) {
  r.post(
    '/webhooks',
    {
      config: { cacheControl: PRIVATE },
      schema: {
        tags,
        operationId: 'createWebhook',
        summary: 'Register a webhook; the answer holds its signing secret, shown only there',
        security: secured,
        body: CreateWebhookBody,
        response: {
          201: {
            ...CreatedWebhookSchema,
            headers: { Location: { type: 'string', maxLength: 2048, description: 'the URL of the new webhook' } },
          },
          ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 409),
        },
      },
    },
    async (request, reply) => {
      const { types = null, description = null } = request.body;
      const url = checkUrl(request.body.url, targets);
      const id = await webhooks.nextId();
      const { bytes, shown } = newSecret();
      const webhook = await withTransaction(r.db, (tx) =>
        webhooksRepository(tx).create(
          id,
          request.user!.id,
          { url, types, description },
          sealSecret(bytes, id, secretKey),
          maxPerUser,
        ),
      );
      if (!webhook)
        throw conflict(
          `you have ${maxPerUser} webhooks, the most a user may have (WEBHOOK_MAX_PER_USER): delete one first`,
        );
      reply.code(201).header('location', linkTo(request, `/${webhook.id}`));
      return { ...webhook, secret: shown };
    },
  );
}

function readRoutes(r: Api, webhooks: WebhooksRepository) {
  r.get(
    '/webhooks',
    {
      config: { cacheControl: PRIVATE },
      schema: {
        tags,
        operationId: 'listWebhooks',
        summary: "List your webhooks (an admin: everyone's)",
        security: secured,
        querystring: ListQuery(WEBHOOK_SORT_FIELDS),
        headers: ConditionalGetHeaders,
        response: listResponses(ListEnvelope(Type.Ref(WebhookSchema))),
      },
    },
    async (request, reply) => {
      const page = pageRequest(request.query);
      const user = request.user!;
      const result = await webhooks.list(user.role === 'admin' ? undefined : user.id, sortOf(request.query), page);
      if (!result) throw new Error('webhooks list has no parent');
      return listResponse(request, reply, result, page);
    },
  );

  r.get(
    '/webhooks/:webhookId',
    {
      config: { cacheControl: PRIVATE },
      schema: {
        tags,
        operationId: 'getWebhook',
        summary: 'One webhook (never its secret)',
        security: secured,
        params: WebhookParams,
        headers: ConditionalGetHeaders,
        response: {
          200: WithEtag(WebhookSchema, 'the webhook'),
          304: NotModified,
          ...errorResponses(...COMMON_ERRORS, 403, 404),
        },
      },
    },
    async (request) => loadWebhook(webhooks, request),
  );
}

function changeRoutes(r: Api, webhooks: WebhooksRepository, targets: TargetPolicy) {
  r.patch(
    '/webhooks/:webhookId',
    {
      config: { cacheControl: PRIVATE },
      schema: {
        tags,
        operationId: 'updateWebhook',
        summary: 'Change a webhook; status active re-enables a disabled one',
        description:
          'Only the given fields change; null clears types (every type) or description. Disabling gives up the deliveries still to send; ' +
          're-enabling starts with the events that follow. Also accepts application/merge-patch+json.',
        security: secured,
        params: WebhookParams,
        body: UpdateWebhookBody,
        response: {
          200: Type.Ref(WebhookSchema, { description: 'the webhook as changed' }),
          ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 403, 404),
        },
      },
    },
    async (request) => {
      await loadWebhook(webhooks, request);
      const url = checkUrl(request.body.url, targets);
      const updated = await webhooks.update(request.params.webhookId, { ...request.body, ...(url && { url }) });
      if (!updated) throw notFound(`webhook ${request.params.webhookId} does not exist`);
      return updated;
    },
  );

  r.delete(
    '/webhooks/:webhookId',
    {
      schema: {
        tags,
        operationId: 'deleteWebhook',
        summary: 'Delete a webhook and its deliveries',
        security: secured,
        params: WebhookParams,
        response: { 204: NoContent, ...errorResponses(...COMMON_ERRORS, 403, 404) },
      },
    },
    async (request, reply) => {
      await loadWebhook(webhooks, request);
      await webhooks.delete(request.params.webhookId);
      return reply.code(204).send(null);
    },
  );
}

function deliveryRoutes(r: Api, webhooks: WebhooksRepository) {
  r.get(
    '/webhooks/:webhookId/deliveries',
    {
      config: { cacheControl: PRIVATE },
      schema: {
        tags,
        operationId: 'listWebhookDeliveries',
        summary: "A webhook's deliveries, newest first (cursor list)",
        security: secured,
        params: WebhookParams,
        querystring: DeliveryListQuery,
        headers: ConditionalGetHeaders,
        response: listResponses(
          CursorPage(Type.Ref(DeliverySchema), {
            description: 'a page of deliveries, newest first',
            headers: { ETag, Link: LinkHeader },
          }),
          403,
          404,
        ),
      },
    },
    async (request, reply) => {
      await loadWebhook(webhooks, request);
      const page = {
        kind: 'cursor' as const,
        after: request.query.after,
        afterKey: undefined,
        limit: request.query.limit ?? 20,
      };
      const result = await webhooks.deliveries(request.params.webhookId, page);
      if (!result) throw notFound(`webhook ${request.params.webhookId} does not exist`);
      const envelope = listResponse(request, reply, result, page);
      if (!('limit' in envelope)) throw new Error('a cursor page was expected');
      return envelope;
    },
  );

  r.post(
    '/webhooks/:webhookId/deliveries/:deliveryId/retry',
    {
      config: { cacheControl: PRIVATE },
      schema: {
        tags,
        operationId: 'retryWebhookDelivery',
        summary: 'Send a delivery again now, whatever its state',
        security: secured,
        params: DeliveryParams,
        response: {
          202: Type.Ref(DeliverySchema, { description: 'the delivery, due now' }),
          ...errorResponses(...COMMON_ERRORS, 403, 404, 409),
        },
      },
    },
    async (request, reply) => {
      const webhook = await loadWebhook(webhooks, request);
      if (webhook.status === 'disabled')
        throw conflict('the webhook is disabled: re-enable it with PATCH status active first');
      const { webhookId, deliveryId } = request.params;
      const delivery = await webhooks.retry(webhookId, deliveryId);
      if (delivery === undefined) throw notFound(`delivery ${deliveryId} of webhook ${webhookId} does not exist`);
      if (delivery === null) throw conflict(`delivery ${deliveryId} is being sent now`);
      r.webhooks.wake();
      return reply.code(202).send(delivery);
    },
  );
}

export default webhookRoutes;
