/** Event contracts (docs/api.md §12). */
import { Type } from '@sinclair/typebox';
import { ETag, Id, LinkHeader, SmallInt, StringEnum, Timestamp } from '../schemas/common.js';
import { EVENT_TYPES, RESOURCE_TYPES } from './repository.js';

export const EventSchema = Type.Object(
  {
    id: Id,
    type: StringEnum([...EVENT_TYPES]),
    createdAt: { ...Timestamp, description: 'when the change was written' },
    resource: Type.Object(
      {
        type: StringEnum([...RESOURCE_TYPES]),
        id: Id,
        path: Type.String({
          maxLength: 200,
          description: "the resource's path, e.g. /posts/1/comments/2",
          examples: ['/posts/1'],
        }),
      },
      { additionalProperties: false },
    ),
    data: Type.Object(
      {},
      {
        additionalProperties: true,
        description:
          'after a creation or update, the resource as its GET shows it (a Post, a Comment, or the public fields of a User: ' +
          'never the e-mail); after a deletion, its ids: { id }, or { id, postId } for a comment',
        examples: [
          {
            id: 1,
            title: 'Hello',
            body: 'First post',
            authorId: 1,
            commentCount: 0,
            createdAt: '2026-11-22T10:00:00.000Z',
            updatedAt: '2026-11-22T10:00:00.000Z',
          },
        ],
      },
    ),
  },
  { $id: 'Event', additionalProperties: false },
);

const TypesParam = Type.Array(StringEnum([...EVENT_TYPES]), {
  minItems: 1,
  maxItems: EVENT_TYPES.length,
  uniqueItems: true,
  explode: true,
  'x-errorMessage': `must be a comma-separated list of distinct event types among ${EVENT_TYPES.join(', ')}`,
  description: 'only events of these types, comma-separated or the parameter repeated',
  examples: [['post.created', 'comment.created']],
});

const filters = {
  type: Type.Optional(TypesParam),
  post: Type.Optional({ ...Id, description: "only this post's events and its comments'" }),
};

export const EventListQuery = Type.Object(
  {
    ...filters,
    after: Type.Optional({
      ...Id,
      minimum: 0,
      description: 'the id of the last event already received (nextCursor); 0 or none: from the oldest event kept',
    }),
    limit: Type.Optional(SmallInt(1, 100, { description: 'default 20' })),
  },
  { additionalProperties: false },
);

export const EventStreamQuery = Type.Object(
  {
    ...filters,
    after: Type.Optional({
      ...Id,
      minimum: 0,
      description:
        'resume after this event id (Last-Event-ID wins); 0: from the oldest event kept; without either, only new events',
    }),
  },
  { additionalProperties: false },
);

export const EventStreamHeaders = Type.Object({
  'last-event-id': Type.Optional(
    Type.String({
      pattern: '^(0|[1-9][0-9]{0,15})$',
      maxLength: 16,
      'x-errorMessage': 'must be an event id',
      description: 'set by EventSource on a reconnection: resume after it (0: from the oldest event kept, as after=0)',
    }),
  ),
});

export const EventPage = Type.Object(
  {
    data: Type.Array(Type.Ref(EventSchema), { maxItems: 100 }),
    limit: SmallInt(1, 100),
    hasMore: Type.Boolean({ description: 'more events follow at once; false: read again later from nextCursor' }),
    nextCursor: Type.Union([Id, Type.Null()], {
      description:
        'the after of the next request: the last event returned, else the after sent (null only on an empty feed read from its start)',
    }),
    prevCursor: Type.Null({ description: 'always null: the feed is read forward' }),
  },
  {
    additionalProperties: false,
    description: 'a page of the feed',
    headers: { ETag, Link: { ...LinkHeader, description: 'RFC 8288: next, with after=nextCursor' } },
  },
);

export const EventStream = Type.String({
  description:
    'text/event-stream: per event `id:` its id, `event:` its type, `data:` the event JSON; a `: heartbeat` comment line when idle',
});
