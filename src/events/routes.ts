/** GET /events and GET /events/stream and their contracts (docs/api.md §12). Public, rate limited as reads. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type, type TObject } from '@sinclair/typebox';
import type { Socket } from 'node:net';
import {
  COMMON_ERRORS,
  ErrorSchema,
  ETag,
  errorResponses,
  Id,
  LinkHeader,
  SmallInt,
  StringEnum,
  Timestamp,
} from '../schemas/common.js';
import { ConditionalGetHeaders, listResponses } from '../schemas/conditional.js';
import { listRequest, listResponse } from '../http/lists.js';
import { NO_STORE } from '../http/route-options.js';
import { JSON_MEDIA_TYPE } from '../media-types.js';
import { gone, serviceUnavailable, validation } from '../errors.js';
import { eventsRepository, toEvent, type EventObject } from './repository.js';
import { CHANGES, type ResourceRegistry } from '../resource.js';

/**
 * One schema per event type, named after it (`post.created`…), which the Event union's discriminator maps to by that
 * name: a generated client narrows `data` by `type` (the title is what /docs shows for it, rather than `object`). `data` is the resource as a public GET shows it or, in its
 * `*.deleted` and in its earlier events once it is deleted (docs/api.md §12), only its ids, as attach_resource
 * writes them (migrations/1795800000000_events.sql).
 */
function eventVariants(resources: ResourceRegistry): TObject[] {
  const createdAt = { ...Timestamp, description: 'when the change was written' };
  const path = Type.String({
    pattern: '^(/[A-Za-z0-9._~-]+)+$',
    maxLength: 200,
    description: "the resource's path, e.g. /posts/1/comments/2",
    examples: ['/posts/1'],
  });
  return resources.resources.flatMap((resource) => {
    const of = Type.Object({ type: Type.Literal(resource.name), id: Id, path }, { additionalProperties: false });
    const gone = Type.Object(resource.parent ? { id: Id, postId: Id } : { id: Id }, {
      additionalProperties: false,
      description: `the ${resource.name}'s ids only: it has been deleted`,
    });
    const shown = Type.Union([Type.Ref(resource.schema), gone], {
      description: `the ${resource.name} as a public GET shows it after the change (only its ids once it is deleted)`,
    });
    return CHANGES.map((change) => {
      const type = `${resource.name}.${change}`;
      const data = change === 'deleted' ? gone : shown;
      const properties = { id: Id, type: Type.Literal(type), createdAt, resource: of, data };
      return Type.Object(properties, { $id: type, title: type, additionalProperties: false });
    });
  });
}

/** The feed's contracts, whose event types are those of the declared resources. */
function eventContracts(resources: ResourceRegistry) {
  const { eventTypes } = resources;
  const variants = eventVariants(resources);
  const EventSchema = Type.Unsafe<EventObject>({
    $id: 'Event',
    oneOf: variants.map((variant) => Type.Ref(variant)),
    discriminator: { propertyName: 'type' },
  });

  const TypesParam = Type.Array(StringEnum([...eventTypes]), {
    minItems: 1,
    maxItems: eventTypes.length,
    uniqueItems: true,
    explode: true,
    'x-errorMessage': `must be a comma-separated list of distinct event types among ${eventTypes.join(', ')}`,
    description: 'only events of these types, comma-separated or the parameter repeated',
    examples: [['post.created', 'comment.created']],
  });

  // checkCursor's answers, named where a client reads about the cursor.
  const CURSOR_REFUSALS = 'older than the oldest event kept: 410; beyond the newest event: 422';
  const After = (description: string) =>
    Type.Optional({ ...Id, minimum: 0, description: `${description}; ${CURSOR_REFUSALS}` });
  const filters = {
    type: Type.Optional(TypesParam),
    post: Type.Optional({ ...Id, description: "only this post's events and its comments'" }),
  };

  const EventListQuery = Type.Object(
    {
      ...filters,
      after: After('the id of the last event already received (nextCursor); 0 or none: from the oldest event kept'),
      limit: Type.Optional(SmallInt(1, 100, { description: 'default 20' })),
    },
    { additionalProperties: false },
  );

  const EventStreamQuery = Type.Object(
    {
      ...filters,
      after: After(
        'resume after this event id (Last-Event-ID wins); 0: from the oldest event kept; without either, only new events',
      ),
    },
    { additionalProperties: false },
  );

  const EventStreamHeaders = Type.Object({
    'last-event-id': Type.Optional(
      Type.String({
        pattern: '^(0|[1-9][0-9]{0,15})$',
        maxLength: 16,
        'x-errorMessage': 'must be an event id',
        description:
          'set by EventSource on a reconnection: resume after it (0: from the oldest event kept, as after=0); ' +
          CURSOR_REFUSALS,
      }),
    ),
  });

  const EventPage = Type.Object(
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
  return { variants, EventSchema, EventListQuery, EventStreamQuery, EventStreamHeaders, EventPage };
}

/**
 * The feed's 422, in place of a list's (which names page, perPage and before, none of which the feed takes) and of
 * the generic one: its own parameters, and checkCursor's refusal of a cursor ahead of the feed.
 */
const feedValidationError = (parameters: string) =>
  Type.Ref(ErrorSchema, {
    description:
      `validation: see fieldErrors; a bad ${parameters}, or an unknown query parameter; ` +
      'also a cursor beyond the newest event ever numbered ("the cursor is ahead of the feed": the feed was reset, ' +
      'or it is not a cursor the feed gave), to be resynchronised from the lists',
  });

/** Seconds a client refused for MAX_STREAMS waits, and the reconnection delay streams ask EventSource for (ms). */
const STREAMS_FULL_RETRY_SECONDS = 5;
const RECONNECT_MS = 1_000;

/** What the stream writes (stream.ts), frame by frame. */
const EventStream = Type.String({
  description:
    `Server-Sent Events (UTF-8), each frame ended by a blank line: first \`retry: ${RECONNECT_MS}\` (the ms ` +
    'EventSource waits to reconnect after a drop, sending Last-Event-ID), then one frame per event: `id:` its id, ' +
    '`event:` its type, `data:` the event (the Event schema) as JSON on one line; on an idle stream, a `: heartbeat` ' +
    'comment every 15 s. The stream does not end: it is read as it comes.',
  examples: [
    `retry: ${RECONNECT_MS}\n\nid: 43\nevent: comment.deleted\ndata: {"id":43,"type":"comment.deleted","createdAt":"2026-11-22T10:00:00.000Z","resource":{"type":"comment","id":9,"path":"/posts/7/comments/9"},"data":{"id":9,"postId":7}}\n\n: heartbeat\n\n`,
  ],
});

const eventsRoutes: FastifyPluginAsyncTypebox<{ maxStreams: number }> = async (app, options) => {
  const { maxStreams } = options;
  const { sequencer, hub } = app.events;
  const { variants, EventSchema, EventListQuery, EventStreamQuery, EventStreamHeaders, EventPage } = eventContracts(
    app.resources,
  );
  for (const schema of [...variants, EventSchema]) app.addSchema(schema);
  const events = eventsRepository(app.db);

  /**
   * A cursor before the oldest kept event has missed purged ones (410); one beyond the newest ever given comes from
   * another feed, e.g. a reset database (422). 0: from the oldest. `field` names the cursor in fieldErrors.
   */
  async function checkCursor(after: number | undefined, field = 'after'): Promise<void> {
    if (!after) return;
    const { floor, head } = await events.bounds();
    if (after < floor) {
      throw gone(
        `events up to ${floor} have been purged (EVENT_RETENTION); event ${after} is older: resynchronise from the lists`,
      );
    }
    if (after > head) {
      throw validation(
        { [field]: [`is beyond the newest event (${head}): the feed was reset, or this is not a cursor it gave`] },
        'the cursor is ahead of the feed: resynchronise from the lists',
      );
    }
  }

  app.get(
    '/events',
    {
      schema: {
        tags: ['events'],
        operationId: 'listEvents',
        summary: 'The change feed: every committed change of a post, comment or user, in id order',
        description:
          'Follow nextCursor (or the next link): every event once, in id order, with no gaps. ' +
          'hasMore false means none more now: ask again later from nextCursor.',
        querystring: EventListQuery,
        headers: ConditionalGetHeaders,
        response: { ...listResponses(EventPage, 410), 422: feedValidationError('after, limit, type or post') },
      },
    },
    async (request, reply) => {
      const { after, limit = 20 } = request.query;
      // What this client wrote a moment ago is numbered by now.
      await sequencer.run();
      const rows = await events.page(after ?? 0, limit + 1, request.query);
      // After the read: a purge in between is seen too.
      await checkCursor(after);
      const page = rows.slice(0, limit);
      const result = {
        kind: 'cursor' as const,
        items: page.map((row) => toEvent(row, app.resources)),
        hasMore: rows.length > limit,
        nextCursor: page.length > 0 ? page[page.length - 1]!.id : after || null,
        nextKey: null,
        prevCursor: null,
        prevKey: null,
      };
      // A cursor page always: its nextCursor and Link as any list's, prevCursor null.
      const list = listRequest(request, { after, limit });
      // The events are built whole here. fast-json-stringify would validate each against the union to pick its
      // variant: a 500 for a type the document does not name (a newer instance's resource, data of an older shape).
      reply.serializer(JSON.stringify).type(JSON_MEDIA_TYPE);
      return listResponse(request, reply, result, list) as typeof EventPage.static;
    },
  );

  app.get(
    '/events/stream',
    {
      config: { cacheControl: NO_STORE },
      schema: {
        tags: ['events'],
        operationId: 'streamEvents',
        summary: 'The change feed live, as Server-Sent Events',
        description:
          'Resumes after Last-Event-ID (or after=); without either, only new events. Each event reaches every open stream ' +
          `within a second of its commit. A comment line keeps idle streams open. Past MAX_STREAMS on an instance: 503 with Retry-After.`,
        querystring: EventStreamQuery,
        headers: EventStreamHeaders,
        response: {
          200: {
            description: 'the stream, open until either side closes it',
            content: { 'text/event-stream': { schema: EventStream } },
          },
          ...errorResponses(...COMMON_ERRORS, 410),
          422: feedValidationError('after, type, post or Last-Event-ID'),
        },
      },
    },
    async (request, reply) => {
      // Taken before any await: a burst of requests cannot all pass the check first.
      if (!hub.reserve(maxStreams)) {
        throw serviceUnavailable(
          `this instance serves its most event streams (${maxStreams}); retry shortly`,
          STREAMS_FULL_RETRY_SECONDS,
        );
      }
      let position: number;
      try {
        const resumeAt = request.headers['last-event-id'];
        const after = resumeAt === undefined ? request.query.after : Number(resumeAt);
        await checkCursor(after, resumeAt === undefined ? 'after' : 'Last-Event-Id');
        position = after ?? (await events.head());
      } catch (error) {
        hub.release();
        throw error;
      }
      reply.hijack();
      // Fastify's connectionTimeout is for requests: a stream's heartbeat is its keep-alive (inject has no socket).
      (request.raw.socket as Partial<Socket>).setTimeout?.(0);
      reply.raw.writeHead(200, {
        ...(reply.getHeaders() as Record<string, string>),
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-store',
        // Proxies such as nginx would otherwise hold events back in their buffer.
        'x-accel-buffering': 'no',
      });
      reply.raw.write(`retry: ${RECONNECT_MS}\n\n`);
      hub.open(reply.raw, request.query, position);
    },
  );
};

export default eventsRoutes;
