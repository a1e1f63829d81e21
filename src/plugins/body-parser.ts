/**
 * JSON objects in UTF-8 only (docs/api.md §2); bytes that are not UTF-8 are a 400, not U+FFFD stored. An empty
 * DELETE/OPTIONS body is no body, whatever its Content-Type: clients send their default one on every request.
 */
import fp from 'fastify-plugin';
import type { FastifyRequest } from 'fastify';
import { HttpError, badRequest } from '../errors.js';
import { PATCH_MEDIA_TYPES, isUtf8, parametersOf } from '../media-types.js';

// fatal: a malformed sequence throws instead of becoming U+FFFD; a leading BOM is dropped (RFC 8259 allows it).
const utf8 = new TextDecoder('utf-8', { fatal: true });

const unsupported = (message: string) => new HttpError(415, message);

const noBody = (request: FastifyRequest, length: number | string | undefined) =>
  (request.method === 'DELETE' || request.method === 'OPTIONS') && Number(length) === 0;

function decode(request: FastifyRequest, body: Buffer): string | HttpError | undefined {
  if (noBody(request, body.length)) return undefined;
  const contentType = request.headers['content-type'] ?? '';
  if (/^\s*application\/merge-patch\+json/i.test(contentType) && request.method !== 'PATCH')
    return unsupported('application/merge-patch+json is only accepted on PATCH');
  const parameters = parametersOf(contentType);
  if (!parameters)
    return unsupported('Content-Type has a malformed or repeated parameter: send application/json; charset=utf-8');
  if (!isUtf8(parameters.get('charset'))) return unsupported('JSON must be UTF-8: send charset=utf-8 or no charset');
  try {
    return utf8.decode(body);
  } catch {
    return badRequest('body is not valid UTF-8');
  }
}

/**
 * Fastify's parser (secure-json-parse) refuses a `__proto__` or `constructor.prototype` member with the error it gives
 * broken JSON; parsed again without that check, JSON that is valid says what was refused instead.
 */
function refusedJson(text: string): HttpError {
  try {
    // Only to tell the two apart: the value is dropped, so the member it keeps harms nothing.
    JSON.parse(text);
  } catch {
    return badRequest('body is not valid JSON');
  }
  return badRequest('body must not contain a __proto__ or constructor.prototype member');
}

export default fp(
  async (app) => {
    const parseJson = app.getDefaultJsonParser('error', 'error');
    app.removeAllContentTypeParsers();
    app.addContentTypeParser(PATCH_MEDIA_TYPES, { parseAs: 'buffer' }, (request, body, done) => {
      const text = decode(request, body as Buffer);
      if (typeof text !== 'string') return done(text ?? null, undefined);
      // Fastify's parser calls back; the promise its typing adds carries nothing.
      void parseJson(request, text, (error, value: unknown) => {
        if (error) done(refusedJson(text), undefined);
        else if (typeof value !== 'object' || value === null || Array.isArray(value))
          done(badRequest('body must be a JSON object'), undefined);
        else done(null, value);
      });
    });
    // Every other media type, and a body sent without one: refused without reading it.
    app.addContentTypeParser('*', (request, _payload, done) => {
      if (noBody(request, request.headers['content-length'])) done(null, undefined);
      else done(unsupported('Content-Type must be application/json'), undefined);
    });
  },
  { name: 'body-parser', dependencies: ['errors'] },
);
