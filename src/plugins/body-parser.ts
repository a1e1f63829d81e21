/**
 * The only accepted request bodies are JSON objects (docs/api.md §2): anything that
 * is not parseable JSON, or is JSON but not an object, is a 400; any other media
 * type is a 415. PATCH also takes application/merge-patch+json (RFC 7396).
 * Fastify's own parser does the parsing, keeping its __proto__ poisoning guard.
 *
 * JSON is UTF-8 (RFC 8259 §8.1): a declared charset other than UTF-8 is a 415,
 * and bytes that are not UTF-8 are a 400, where decoding leniently would store
 * U+FFFD in place of what the client meant.
 */
import fp from 'fastify-plugin';
import { HttpError, badRequest } from '../errors.js';

// fatal: a malformed sequence throws instead of becoming U+FFFD; a leading BOM is dropped (RFC 8259 allows ignoring it).
const utf8 = new TextDecoder('utf-8', { fatal: true });

export default fp(
  async (app) => {
    const parseJson = app.getDefaultJsonParser('error', 'error');
    app.removeAllContentTypeParsers();
    app.addContentTypeParser(
      ['application/json', 'application/merge-patch+json'],
      { parseAs: 'buffer' },
      (request, body, done) => {
        const [type, ...parameters] = (request.headers['content-type'] ?? '').split(';');
        const mediaType = type?.trim().toLowerCase();
        if (mediaType === 'application/merge-patch+json' && request.method !== 'PATCH') {
          done(new HttpError(415, 'application/merge-patch+json is only accepted on PATCH'), undefined);
          return;
        }
        const charset = parameters.map((p) => /^\s*charset\s*=\s*"?([^"]*)"?\s*$/i.exec(p)?.[1]).find((c) => c !== undefined);
        if (charset !== undefined && charset.toLowerCase() !== 'utf-8') {
          done(new HttpError(415, 'JSON must be UTF-8: send charset=utf-8 or no charset'), undefined);
          return;
        }
        let text: string;
        try {
          text = utf8.decode(body as Buffer);
        } catch {
          done(badRequest('body is not valid UTF-8'), undefined);
          return;
        }
        parseJson(request, text, (error, value: unknown) => {
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
