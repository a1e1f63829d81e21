/** GET /events and GET /events/stream (docs/api.md §12). Public, rate limited as reads. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Socket } from 'node:net';
import { COMMON_ERRORS, errorResponses } from '../schemas/common.js';
import { ConditionalGetHeaders, listResponses } from '../schemas/conditional.js';
import { listResponse } from '../http/lists.js';
import { gone, serviceUnavailable, validation } from '../errors.js';
import { eventsRepository, toEvent, type EventType } from './repository.js';
import {
  EventListQuery,
  EventPage,
  EventSchema,
  EventStream,
  EventStreamHeaders,
  EventStreamQuery,
} from './schemas.js';

/** Seconds a client refused for MAX_STREAMS waits, and the reconnection delay streams ask EventSource for (ms). */
const STREAMS_FULL_RETRY_SECONDS = 5;
const RECONNECT_MS = 1_000;

const filterOf = (query: { type?: EventType[] | undefined; post?: number | undefined }) => ({
  types: query.type,
  post: query.post,
});

/** `apiPrefix`, for the events' resource paths: not `prefix`, which Fastify would add to the routes' own. */
const eventsRoutes: FastifyPluginAsyncTypebox<{ apiPrefix: string; maxStreams: number }> = async (app, options) => {
  const { apiPrefix, maxStreams } = options;
  const { sequencer, hub } = app.events;
  app.addSchema(EventSchema);
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
        response: listResponses(EventPage, 410),
      },
    },
    async (request, reply) => {
      const { after, limit = 20 } = request.query;
      // What this client wrote a moment ago is numbered by now.
      await sequencer.run();
      const rows = await events.page(after ?? 0, limit + 1, filterOf(request.query));
      // After the read: a purge in between is seen too.
      await checkCursor(after);
      const page = rows.slice(0, limit);
      const result = {
        kind: 'cursor' as const,
        items: page.map((row) => toEvent(row, apiPrefix)),
        hasMore: rows.length > limit,
        nextCursor: page.length > 0 ? page[page.length - 1]!.id : after || null,
        nextKey: null,
        prevCursor: null,
        prevKey: null,
      };
      // A cursor page always: its nextCursor and Link as any list's, prevCursor null.
      const cursor = { kind: 'cursor' as const, after, afterKey: undefined, limit };
      return listResponse(request, reply, result, cursor) as typeof EventPage.static;
    },
  );

  app.get(
    '/events/stream',
    {
      config: { cacheControl: 'no-store' },
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
      hub.open(reply.raw, filterOf(request.query), position);
    },
  );
};

export default eventsRoutes;
