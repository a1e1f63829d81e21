/** /tokens: log in (issue a token), list own tokens, revoke one (docs/api.md §4, §6). */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { BODY_ERRORS, COMMON_ERRORS, NoContent, errorResponses, secured } from '../schemas/common.js';
import {
  CreateTokenBody,
  IssuedTokenSchema,
  TokenList,
  TokenListQuery,
  TokenParams,
  TokenSchema,
  type TokenSortField,
} from '../schemas/tokens.js';
import { tokensRepository } from '../repositories/tokens.js';
import { usersRepository } from '../repositories/users.js';
import { notFound, unauthorized } from '../errors.js';
import { newToken, verifyPassword } from '../security.js';
import type { ListRequest } from '../http/lists.js';
import { CREDENTIALS, PRIVATE } from '../http/route-options.js';
import { authenticated, groupOf, listRoute } from './resource-routes.js';
import { missing, type Listed } from '../resource.js';

/** Tokens are listed like resources, but make no events and keep no tombstones: not a declared resource. */
const tokens: Listed = {
  name: 'token',
  path: '/tokens/:tokenId',
  group: { name: 'tokens', description: 'log-in (bearer tokens), own tokens, revocation' },
};

const tokensRoutes: FastifyPluginAsyncTypebox<{ tokenTtlSeconds: number }> = async (app, { tokenTtlSeconds }) => {
  app.addSchema(TokenSchema);
  const issued = tokensRepository(app.db);
  const users = usersRepository(app.db);
  app.post(
    '/tokens',
    {
      config: CREDENTIALS,
      schema: {
        tags: groupOf(tokens),
        operationId: 'createToken',
        summary: 'Log in: exchange e-mail and password for a bearer token',
        body: CreateTokenBody,
        response: { 201: IssuedTokenSchema, ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 404) },
      },
    },
    async (request, reply) => {
      const { email, password } = request.body;
      const credentials = await users.findCredentials(email);
      // A full hash even for an unknown e-mail and the same answer: nothing tells whether the account exists.
      const ok = await verifyPassword(password, credentials?.passwordHash);
      if (!credentials || !ok) throw unauthorized('e-mail or password is wrong');
      const { token, hash } = newToken();
      const created = await issued.create(credentials.id, hash, tokenTtlSeconds);
      const user = await users.findById(credentials.id);
      reply.code(201);
      return { id: created.id, token, tokenType: 'Bearer' as const, expiresAt: created.expiresAt, user: user! };
    },
  );

  await authenticated(app, (r) => {
    listRoute(r, tokens, '/tokens', {
      operationId: 'listTokens',
      summary: 'List own live tokens (never their secrets)',
      security: secured,
      config: { cacheControl: PRIVATE },
      querystring: TokenListQuery,
      list: TokenList,
      load: (request, { sort, page }: ListRequest<TokenSortField>) => issued.list(request.user!.id, sort, page),
    });

    r.delete(
      '/tokens/:tokenId',
      {
        schema: {
          tags: groupOf(tokens),
          operationId: 'revokeToken',
          summary: 'Revoke one of your tokens',
          security: secured,
          params: TokenParams,
          response: { 204: NoContent, ...errorResponses(...COMMON_ERRORS, 404) },
        },
      },
      async (request, reply) => {
        const id = request.params.tokenId;
        // Another user's token is reported as missing: its existence is not ours to reveal.
        if (!(await issued.revoke(request.user!.id, id))) throw notFound(missing(tokens, request.params));
        r.forgetTokens((user) => user.tokenId === id);
        return reply.code(204).send(null);
      },
    );
  });
};

export default tokensRoutes;
