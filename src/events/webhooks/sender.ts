/**
 * One delivery attempt: a POST signed as Standard Webhooks, bounded whole (DNS to answer) by the timeout. Redirects
 * are failures, and nothing is pooled, so every attempt resolves and checks the name again (targets.ts).
 */
import http from 'node:http';
import https from 'node:https';
import { Webhook } from 'standardwebhooks';
import { VERSION } from '../../root.js';
import { guardedLookup, refusedLiteral, RefusedTarget, type TargetPolicy } from './targets.js';

/** Answers are read this far only: their content is never used. */
const MAX_BODY = 64 * 1024;
const USER_AGENT = `posts-api-webhooks/${VERSION} (+Standard Webhooks)`;

/** `messageId`: the event id (webhook-id), the same on every attempt. */
interface Attempt {
  url: string;
  messageId: string;
  body: string;
  secret: Buffer;
}

export interface AttemptResult {
  ok: boolean;
  statusCode: number | null;
  error: string | null;
  durationMs: number;
}

type SendOptions = TargetPolicy & { timeoutMs: number; signal?: AbortSignal };

export async function send(attempt: Attempt, options: SendOptions): Promise<AttemptResult> {
  const started = performance.now();
  const done = (statusCode: number | null, error: string | null): AttemptResult => ({
    ok: error === null,
    statusCode,
    error,
    durationMs: Math.round(performance.now() - started),
  });
  const url = new URL(attempt.url);
  const literal = refusedLiteral(url, options);
  if (literal) return done(null, `refused: ${literal.address} is a ${literal.range} address`);
  try {
    const statusCode = await post(url, attempt, options);
    if (statusCode >= 200 && statusCode < 300) return done(statusCode, null);
    const error = statusCode >= 300 && statusCode < 400 ? 'redirect not followed' : `answered ${statusCode}`;
    return done(statusCode, error);
  } catch (error) {
    if (error instanceof RefusedTarget) return done(null, `refused: ${error.message}`);
    const e = error as NodeJS.ErrnoException;
    return done(null, [e.code, e.message].filter(Boolean).join(' ').slice(0, 500) || 'failed');
  }
}

function post(url: URL, attempt: Attempt, options: SendOptions): Promise<number> {
  const body = Buffer.from(attempt.body);
  const client = url.protocol === 'https:' ? https : http;
  const now = new Date();
  const signer = new Webhook(new Uint8Array(attempt.secret), { format: 'raw' });
  return new Promise((resolve, reject) => {
    // A timer of our own, cleared when settled: AbortSignal.timeout can be garbage-collected unfired (Node issue 57736).
    const timer = setTimeout(() => stop(new Error(`no answer within ${options.timeoutMs} ms`)), options.timeoutMs);
    const abort = () => stop(new Error('interrupted: the instance shut down'));
    options.signal?.addEventListener('abort', abort, { once: true });
    const settle = () => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', abort);
    };
    const stop = (error: Error) => {
      settle();
      reject(error);
      request.destroy();
    };
    const request = client.request(
      url,
      {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'user-agent': USER_AGENT,
          'webhook-id': attempt.messageId,
          'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
          'webhook-signature': signer.sign(attempt.messageId, now, attempt.body),
          'content-length': String(body.length),
        },
        lookup: guardedLookup(options),
        agent: false,
      },
      (response) => {
        let read = 0;
        const answered = () => {
          settle();
          resolve(response.statusCode ?? 0);
        };
        response.on('data', (chunk: Buffer) => {
          read += chunk.length;
          // Enough to know the answer: the rest is not worth the wait or the memory.
          if (read > MAX_BODY) {
            response.destroy();
            answered();
          }
        });
        response.on('end', answered);
        response.on('error', (error) => stop(error));
      },
    );
    request.on('error', (error) => stop(error));
    if (options.signal?.aborted) abort();
    request.end(body);
  });
}
