/** The error catalogue: route code throws these; the one error handler (plugins/errors.ts) renders the body. */
export type FieldErrors = Record<string, string[]>;

export const ERROR_CODES = {
  400: 'bad_request',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'method_not_allowed',
  409: 'conflict',
  410: 'gone',
  412: 'precondition_failed',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  422: 'validation',
  429: 'rate_limited',
  500: 'internal',
  503: 'service_unavailable',
} as const;
export type ErrorStatus = keyof typeof ERROR_CODES;

export class HttpError extends Error {
  readonly code: (typeof ERROR_CODES)[ErrorStatus];
  constructor(
    readonly statusCode: ErrorStatus,
    message: string,
    readonly fieldErrors?: FieldErrors,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
    this.code = ERROR_CODES[statusCode];
  }
}

export const badRequest = (message: string): HttpError => new HttpError(400, message);
export const unauthorized = (message = 'valid credentials are required'): HttpError =>
  new HttpError(401, message, undefined, { 'www-authenticate': 'Bearer' });
export const invalidToken = (message = 'the access token is malformed, unknown, expired or revoked'): HttpError =>
  new HttpError(401, message, undefined, { 'www-authenticate': 'Bearer error="invalid_token"' });
export const forbidden = (message = 'you are not allowed to do this'): HttpError => new HttpError(403, message);
export const notFound = (message: string): HttpError => new HttpError(404, message);
export const conflict = (message: string, fieldErrors?: FieldErrors): HttpError =>
  new HttpError(409, message, fieldErrors);
export const emailTaken = (): HttpError =>
  conflict('email is already registered', { email: ['is already registered'] });
export const gone = (message: string): HttpError => new HttpError(410, message);
export const preconditionFailed = (message = 'If-Match does not match the current ETag'): HttpError =>
  new HttpError(412, message);
export const validation = (fieldErrors: FieldErrors, message = 'request is invalid'): HttpError =>
  new HttpError(422, message, fieldErrors);
export const serviceUnavailable = (
  message = 'the database is unreachable; try again shortly',
  retryAfterSeconds = 5,
): HttpError => new HttpError(503, message, undefined, { 'retry-after': String(retryAfterSeconds) });
