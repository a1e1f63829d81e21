/**
 * The only accepted request bodies are JSON objects (API.md §2): anything that
 * is not parseable JSON, or is JSON but not an object, is a 400; any other media
 * type is a 415. PATCH also takes application/merge-patch+json (RFC 7396).
 * Fastify's own parser does the parsing, keeping its __proto__ poisoning guard.
 */
import fp from 'fastify-plugin';
import { HttpError, badRequest } from '../errors.js';

export default fp(
  async (app) => {
    const parseJson = app.getDefaultJsonParser('error', 'error');
    app.removeAllContentTypeParsers();
    app.addContentTypeParser(
      ['application/json', 'application/merge-patch+json'],
      { parseAs: 'string' },
      (request, body, done) => {
        const mediaType = (request.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
        if (mediaType === 'application/merge-patch+json' && request.method !== 'PATCH') {
          done(new HttpError(415, 'application/merge-patch+json is only accepted on PATCH'), undefined);
          return;
        }
        parseJson(request, body as string, (error, value: unknown) => {
          if (error) done(badRequest('body is not valid JSON'), undefined);
          else if (typeof value !== 'object' || value === null || Array.isArray(value))
            done(badRequest('body must be a JSON object'), undefined);
          else done(null, value);
        });
      },
    );
  },
  { name: 'body-parser' },
);
