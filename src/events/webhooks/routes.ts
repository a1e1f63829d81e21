/**
 * /webhooks (docs/api.md §12): a user manages their own webhooks, an admin everyone's, by the ownership rule of
 * use-cases/change-owned.ts. The signing secret is in the answer to POST only.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox, TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import {
  BODY_ERRORS,
  COMMON_ERRORS,
  CursorPage,
  ETag,
  LinkHeader,
  ListEnvelope,
  ListQuery,
  NoContent,
  errorResponses,
  secured,
} from '../../schemas/common.js';
import { ConditionalGetHeaders, NotModified, WithEtag, listResponses } from '../../schemas/conditional.js';
import { conflict, notFound, validation } from '../../errors.js';
import { loadOwned } from '../../use-cases/change-owned.js';
import { linkTo } from '../../http/links.js';
import { withTransaction } from '../../db/pool.js';
import { NO_STORE, PRIVATE } from '../../http/route-options.js';
import { listRequest, listResponse } from '../../http/lists.js';
import { webhooksRepository } from './repository.js';
import {
  DeliveryListQuery,
  DeliveryParams,
  DeliverySchema,
  WEBHOOK_SORT_FIELDS,
  WebhookParams,
  type WebhookSortField,
  webhookContracts,
} from './schemas.js';
import { normalizedUrl, urlProblem, type TargetPolicy } from './targets.js';

const webhookRoutes: FastifyPluginAsyncTypebox<{
  targets: TargetPolicy;
  maxPerUser: number;
}> = async (app, { targets, maxPerUser }) => {
  const { WebhookSchema, CreatedWebhookSchema, CreateWebhookBody, UpdateWebhookBody } = webhookContracts(
    app.resources.eventTypes,
  );
  app.addSchema(WebhookSchema);
  app.addSchema(DeliverySchema);
  const webhooks = webhooksRepository(app.db);

  /** The URL to store (normalized), or a 422. */
  function checkUrl<U extends string | undefined>(url: U): U {
    const problem = url === undefined ? undefined : urlProblem(url, targets);
    if (problem) throw validation({ url: [problem] }, 'the webhook URL is not allowed');
    return (url === undefined ? url : normalizedUrl(url)) as U;
  }

  const loadWebhook = ({ params: { webhookId }, user }: FastifyRequest<{ Params: { webhookId: number } }>) =>
    loadOwned(webhooks.findById(webhookId), user!, {
      missing: `webhook ${webhookId} does not exist`,
      owners: (webhook) => [webhook.userId],
      denied: 'only its owner or an admin may see or change this webhook',
    });

  await app.register(async (authed) => {
    authed.addHook('onRequest', app.requireUser);
    // Every route here is a signed-in user's own data.
    authed.addHook('onRoute', (route) => {
      route.schema = { tags: ['webhooks'], security: secured, ...route.schema };
      route.config = { cacheControl: PRIVATE, ...route.config };
    });
    const r = authed.withTypeProvider<TypeBoxTypeProvider>();

    r.post(
      '/webhooks',
      {
        schema: {
          operationId: 'createWebhook',
          summary: 'Register a webhook; the answer holds its signing secret, shown only there',
          body: CreateWebhookBody,
          response: {
            201: {
              ...CreatedWebhookSchema,
              headers: { Location: { type: 'string', maxLength: 2048, description: 'the URL of the new webhook' } },
            },
            ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 404, 409),
          },
        },
      },
      async (request, reply) => {
        const { types = null, description = null } = request.body;
        const fields = { url: checkUrl(request.body.url), types, description };
        const webhook = await withTransaction(r.db, (tx) =>
          webhooksRepository(tx).create(request.user!.id, fields, maxPerUser),
        );
        if (!webhook)
          throw conflict(
            `you have ${maxPerUser} webhooks, the most a user may have (WEBHOOK_MAX_PER_USER): delete one first`,
          );
        return reply
          .code(201)
          .header('location', linkTo(request, `/${webhook.id}`))
          .send(webhook);
      },
    );

    r.get(
      '/webhooks',
      {
        schema: {
          operationId: 'listWebhooks',
          summary: "List your webhooks (an admin: everyone's)",
          querystring: ListQuery(WEBHOOK_SORT_FIELDS),
          headers: ConditionalGetHeaders,
          response: listResponses(ListEnvelope(Type.Ref(WebhookSchema)), 410),
        },
      },
      async (request, reply) => {
        const list = listRequest<WebhookSortField, never>(request, request.query);
        const { id, role } = request.user!;
        const result = await webhooks.list(role === 'admin' ? undefined : id, list.sort, list.page);
        return listResponse(request, reply, result!, list);
      },
    );

    r.get(
      '/webhooks/:webhookId',
      {
        schema: {
          operationId: 'getWebhook',
          summary: 'One webhook (never its secret)',
          params: WebhookParams,
          headers: ConditionalGetHeaders,
          response: {
            200: WithEtag(WebhookSchema, 'the webhook'),
            304: NotModified,
            ...errorResponses(...COMMON_ERRORS, 403, 404),
          },
        },
      },
      loadWebhook,
    );

    r.patch(
      '/webhooks/:webhookId',
      {
        schema: {
          operationId: 'updateWebhook',
          summary: 'Change a webhook; status active re-enables a disabled one',
          description:
            'Only the given fields change; null clears types (every type) or description. Disabling gives up the deliveries still to send; ' +
            're-enabling starts with the events that follow. Also accepts application/merge-patch+json.',
          params: WebhookParams,
          body: UpdateWebhookBody,
          response: {
            200: Type.Ref(WebhookSchema, { description: 'the webhook as changed' }),
            ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 403, 404),
          },
        },
      },
      async (request) => {
        await loadWebhook(request);
        const url = checkUrl(request.body.url);
        const updated = await webhooks.update(request.params.webhookId, { ...request.body, ...(url && { url }) });
        if (!updated) throw notFound(`webhook ${request.params.webhookId} does not exist`);
        return updated;
      },
    );

    r.delete(
      '/webhooks/:webhookId',
      {
        config: { cacheControl: NO_STORE },
        schema: {
          operationId: 'deleteWebhook',
          summary: 'Delete a webhook and its deliveries',
          params: WebhookParams,
          response: { 204: NoContent, ...errorResponses(...COMMON_ERRORS, 403, 404) },
        },
      },
      async (request, reply) => {
        await loadWebhook(request);
        await webhooks.delete(request.params.webhookId);
        return reply.code(204).send(null);
      },
    );

    r.get(
      '/webhooks/:webhookId/deliveries',
      {
        schema: {
          operationId: 'listWebhookDeliveries',
          summary: "A webhook's deliveries, newest first (cursor list)",
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
        await loadWebhook(request);
        // Always a cursor page, even with neither after nor limit.
        const list = listRequest(request, { ...request.query, limit: request.query.limit ?? 20 });
        const result = await webhooks.deliveries(request.params.webhookId, list.page);
        if (!result) throw notFound(`webhook ${request.params.webhookId} does not exist`);
        const envelope = listResponse(request, reply, result, list);
        if (!('limit' in envelope)) throw new Error('a cursor page was expected');
        return envelope;
      },
    );

    r.post(
      '/webhooks/:webhookId/deliveries/:deliveryId/retry',
      {
        schema: {
          operationId: 'retryWebhookDelivery',
          summary: 'Send a delivery again now, whatever its state',
          params: DeliveryParams,
          response: {
            202: Type.Ref(DeliverySchema, { description: 'the delivery, due now' }),
            ...errorResponses(...COMMON_ERRORS, 403, 404, 409),
          },
        },
      },
      async (request, reply) => {
        const webhook = await loadWebhook(request);
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
  });
};

export default webhookRoutes;
