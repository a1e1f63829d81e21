/**
 * Bearer-token authentication (docs/api.md §6). Every request that sends an
 * Authorization header has it checked, public routes included: a bad token is
 * a 401 anywhere. Routes that need a user live in a plugin scope that adds
 * `app.requireUser` as an onRequest hook, so no hook matches URL strings.
 *
 * A token is checked against the issued format first (src/security.ts), so a
 * malformed one costs no query; a well-formed one is one indexed lookup.
 *
 * `request.authenticate()` is memoized so the rate limiter can key clients by
 * user id with the same single lookup.
 */
import fp from 'fastify-plugin';
import type { FastifyRequest, onRequestAsyncHookHandler } from 'fastify';
import { invalidToken, unauthorized } from '../errors.js';
import { hashToken, isWellFormedToken } from '../security.js';
import { tokensRepository, type AuthUser } from '../repositories/tokens.js';

declare module 'fastify' {
  interface FastifyRequest {
    user: AuthUser | null;
    authenticate(): Promise<AuthUser | null>;
  }
  interface FastifyInstance {
    requireUser: onRequestAsyncHookHandler;
  }
}

const BEARER = /^Bearer +([A-Za-z0-9._~+/-]{1,512}=*) *$/i;
const memo = new WeakMap<FastifyRequest, Promise<AuthUser | null>>();

export default fp(
  async (app) => {
    const tokens = tokensRepository(app.db);

    async function resolve(request: FastifyRequest): Promise<AuthUser | null> {
      const header = request.headers.authorization;
      if (header === undefined) return null;
      const match = BEARER.exec(header);
      if (!match?.[1]) throw invalidToken('the Authorization header must be "Bearer <token>"');
      // A token we could never have issued is unknown without asking the database.
      if (!isWellFormedToken(match[1])) throw invalidToken();
      const user = await tokens.authenticate(hashToken(match[1]));
      if (!user) throw invalidToken();
      return user;
    }

    app.decorateRequest('user', null);
    app.decorateRequest('authenticate', function (this: FastifyRequest) {
      let pending = memo.get(this);
      if (!pending) {
        pending = resolve(this);
        pending.catch(() => undefined); // rejections are observed by whoever awaits
        memo.set(this, pending);
      }
      return pending;
    });

    // Callback-style, so the anonymous majority of reads costs no promise here.
    app.addHook('onRequest', (request, _reply, done) => {
      if (request.headers.authorization === undefined) {
        done();
        return;
      }
      request.authenticate().then((user) => {
        request.user = user;
        done();
      }, done);
    });

    app.decorate('requireUser', async (request: FastifyRequest) => {
      if (!request.user) throw unauthorized('this request needs an access token: POST /tokens to get one');
    });
  },
  { name: 'auth', dependencies: ['db'] },
);
