/** Webhook contracts (docs/api.md §12). */
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { Id, PathId, SmallInt, Storable, StringEnum, Text, Timestamp } from '../../schemas/common.js';

export const WEBHOOK_SORT_FIELDS = ['id', 'createdAt'] as const;
export type WebhookSortField = (typeof WEBHOOK_SORT_FIELDS)[number];
const OrNull = <T extends TSchema>(schema: T, description: string) =>
  Type.Union([schema, Type.Null()], { description });

/**
 * format: uri, so that generated clients and fuzzers send URLs; ajv-formats' uri (RFC 3986) takes every URL the route's
 * own check (targets.ts urlProblem) takes that RFC 3986 writes, and what WHATWG URL stores of it.
 */
const Url = Type.String({
  format: 'uri',
  maxLength: 2000,
  'x-errorMessage':
    'must be an absolute URL as RFC 3986 writes it (spaces, non-ASCII and other characters it does not allow percent-encoded)',
  allOf: [Storable],
  description:
    'where events are POSTed: https, and not a private, loopback or link-local address (unless the operator allows them)',
  examples: ['https://hooks.example.com/posts-api'],
});
const Description = OrNull(Text(500), 'a note for the owner');
const Status = StringEnum(['active', 'disabled'], {
  description: 'disabled: after failing every attempt for 24 h (or by its owner); PATCH status active re-enables it',
});

/** The contracts that name event types: those of the declared resources. */
function contracts(eventTypes: readonly string[]) {
  const Types = Type.Union(
    [
      Type.Array(StringEnum([...eventTypes]), { minItems: 1, maxItems: eventTypes.length, uniqueItems: true }),
      Type.Null(),
    ],
    { description: 'the event types sent; null = every type', examples: [['post.created', 'comment.created']] },
  );

  const webhookProperties = {
    id: Id,
    userId: { ...Id, description: 'the owner' },
    url: Url,
    types: Types,
    description: Description,
    status: Status,
    failingSince: OrNull(Timestamp, 'since when every attempt has failed; null after a success'),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  };

  const WebhookSchema = Type.Object(webhookProperties, {
    $id: 'Webhook',
    additionalProperties: false,
    description: 'a webhook: never its secret',
  });
  const CreatedWebhookSchema = Type.Object(
    {
      ...webhookProperties,
      secret: Type.String({
        pattern: '^whsec_[A-Za-z0-9+/]{32}$',
        maxLength: 38,
        description: 'the signing secret (whsec_ + base64 of 24 random bytes); shown in this answer only',
      }),
    },
    { additionalProperties: false, description: 'the new webhook with its signing secret, shown only here' },
  );

  const CreateWebhookBody = Type.Object(
    { url: Url, types: Type.Optional(Types), description: Type.Optional(Description) },
    {
      additionalProperties: false,
      examples: [{ url: 'https://hooks.example.com/posts-api', types: ['post.created'] }],
    },
  );
  const UpdateWebhookBody = Type.Object(
    {
      url: Type.Optional(Url),
      types: Type.Optional(Types),
      description: Type.Optional(Description),
      status: Type.Optional(Status),
    },
    { additionalProperties: false, minProperties: 1, examples: [{ status: 'active' }] },
  );
  return { WebhookSchema, CreatedWebhookSchema, CreateWebhookBody, UpdateWebhookBody };
}

export const WebhookParams = Type.Object({ webhookId: PathId });
export const DeliveryParams = Type.Object({ webhookId: PathId, deliveryId: PathId });

export const DeliverySchema = Type.Object(
  {
    id: Id,
    webhookId: Id,
    eventId: { ...Id, description: 'the event sent (its webhook-id header)' },
    attempt: SmallInt(0, 1_000_000, { description: 'attempts made so far' }),
    status: StringEnum(['pending', 'delivered', 'failed', 'given_up'], {
      description:
        'pending: not tried yet; failed: the last attempt failed and another is due at nextAttemptAt; given_up: no more attempts',
    }),
    statusCode: OrNull(SmallInt(100, 599), "the last attempt's HTTP status, if it got one"),
    error: OrNull(Type.String({ maxLength: 600 }), 'why the last attempt failed'),
    durationMs: OrNull(SmallInt(0, 3_600_000), 'how long the last attempt took'),
    nextAttemptAt: OrNull(Timestamp, 'when the next attempt is due; null once delivered or given up'),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  },
  { $id: 'WebhookDelivery', additionalProperties: false },
);

export const DeliveryListQuery = Type.Object(
  {
    after: Type.Optional({ ...Id, description: 'id of the last delivery already received (the newest come first)' }),
    limit: Type.Optional(SmallInt(1, 100, { description: 'default 20' })),
  },
  { additionalProperties: false },
);

/** The schemas' types, as TypeBox infers them from `contracts` (writing them out would restate every schema). */
export type WebhookContracts = ReturnType<typeof contracts>;

/** The webhook contracts for the event types of the declared resources (buildApp's registry). */
export function webhookContracts(eventTypes: readonly string[]): WebhookContracts {
  return contracts(eventTypes);
}
export type Webhook = Static<WebhookContracts['WebhookSchema']>;
export type WebhookChanges = Static<WebhookContracts['UpdateWebhookBody']>;
export type Delivery = Static<typeof DeliverySchema>;
