/** The user resource: its declaration, and /users: sign-up, profiles, own profile, profile changes (docs/api.md §4). */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { BODY_ERRORS, COMMON_ERRORS, errorResponses, secured } from '../schemas/common.js';
import {
  CreateUserBody,
  UpdateUserBody,
  UserList,
  UserListQuery,
  UserParams,
  UserQuery,
  UserSchema,
  UserViewSchema,
  type UserField,
  type UserSortField,
} from '../schemas/users.js';
import { usersRepository, type User } from '../repositories/users.js';
import { tokensRepository } from '../repositories/tokens.js';
import type { View, Viewed } from '../db/views.js';
import { emailTaken, invalidToken } from '../errors.js';
import { hashPassword } from '../security.js';
import type { ListRequest } from '../http/lists.js';
import { conditionalGet, digest, withEtag } from '../http/conditional.js';
import { CREDENTIALS, PRIVATE } from '../http/route-options.js';
import { missing, type Api, type Resource } from '../resource.js';
import { Created, createRoute, groupOf, itemRoute, listRoute } from './resource-routes.js';
import { changeOwned, loadForChange, type OwnedCheck } from '../use-cases/change-owned.js';
import { keepPrivate } from '../plugins/http-caching.js';
import { ConditionalGetHeaders, ConditionalWriteHeaders, NotModified, WithEtag } from '../schemas/conditional.js';

/** A digest of the view this viewer gets, so the tag betrays no e-mail to one who may not see it. */
export function userEtag(user: { id: number; name: string; role: string; email?: string; createdAt: string }): string {
  const shown = [user.id, user.name, user.role, user.email ?? null, user.createdAt];
  return `"u${user.id}-${digest(JSON.stringify(shown))}"`;
}

export const users: Resource<User> = {
  name: 'user',
  path: '/users/:userId',
  schema: UserSchema,
  group: { name: 'users', description: 'sign-up, profiles, own profile' },
  etag: userEtag,
  unique: { users_email_key: emailTaken },
  routes: (app) => usersRoutes(app),
};

const WITH_EMAIL = 'the user (with e-mail only for the user themself and admins)';
const User = WithEtag(UserSchema, WITH_EMAIL);
const UserView = WithEtag(
  UserViewSchema,
  `${WITH_EMAIL}; with fields, only those, and an ETag that is a digest of them`,
);

/** E-mail addresses are shown only to their owner and to admins, and never to a shared cache. */
function visible<U extends Viewed<User>>(request: FastifyRequest, reply: FastifyReply, user: U): U {
  const viewer = request.user;
  if (!viewer || (viewer.id !== user.id && viewer.role !== 'admin')) {
    const { email: _hidden, ...rest } = user;
    return rest as U;
  }
  if (user.email !== undefined) keepPrivate(reply);
  return user;
}

async function usersRoutes(app: Api): Promise<void> {
  app.addSchema(UserViewSchema);
  const profiles = usersRepository(app.db);

  createRoute(app, users, '/users', {
    operationId: 'createUser',
    summary: 'Sign up',
    security: null,
    config: CREDENTIALS,
    body: CreateUserBody,
    created: Created(UserSchema, 'the new user, with e-mail'),
    errors: [409],
    input: ({ name, email }) => ({ name, email }),
    password: ({ password }) => password,
    precheck: async ({ body }) => {
      if (await profiles.emailTaken(body.email)) throw emailTaken();
    },
    create: async (db, { body: { name, email } }, passwordHash) => {
      const user = await usersRepository(db).create({ name, email, passwordHash: passwordHash! });
      return { id: user.id, etag: userEtag(user), body: user };
    },
  });

  const reads = { config: {}, present: visible };
  listRoute(app, users, '/users', {
    ...reads,
    operationId: 'listUsers',
    summary: 'List users',
    querystring: UserListQuery,
    list: UserList,
    load: (_request, { sort, page, view }: ListRequest<UserSortField, UserField>) => profiles.list(sort, page, view),
  });
  itemRoute(app, users, {
    ...reads,
    operationId: 'getUser',
    summary: 'One user',
    params: UserParams,
    querystring: UserQuery,
    item: UserView,
    find: (request) => profiles.findById(request.params.userId),
    read: (request, view: View<UserField>) => profiles.read(request.params.userId, view),
  });

  await app.register(async (authed) => {
    // /users/me is a path of its own: a method it lacks (PATCH) is its 405, not /users/{userId} with the id "me".
    authed.addHook('onRequest', (request, reply, done) => {
      if ((request.params as { userId?: string }).userId === 'me') reply.callNotFound();
      else done();
    });
    authed.addHook('onRequest', app.requireUser);
    const r = authed.withTypeProvider<TypeBoxTypeProvider>();

    r.get(
      '/users/me',
      {
        config: { cacheControl: PRIVATE },
        schema: {
          tags: groupOf(users),
          operationId: 'getMe',
          summary: 'The authenticated user, with e-mail',
          security: secured,
          headers: ConditionalGetHeaders,
          response: { 200: User, 304: NotModified, ...errorResponses(...COMMON_ERRORS) },
        },
      },
      async (request, reply) => {
        const user = await profiles.findById(request.user!.id);
        // Deleted since its token was checked (trusted for a second): the token names no one.
        if (!user) throw invalidToken();
        return conditionalGet(request, reply, userEtag(user), user);
      },
    );

    r.patch(
      '/users/:userId',
      {
        config: { cacheControl: PRIVATE },
        schema: {
          tags: groupOf(users),
          operationId: 'updateUser',
          summary: 'Change a user (that user or an admin)',
          description: 'Only the given fields change. A new password revokes every other token of that user.',
          security: secured,
          params: UserParams,
          headers: ConditionalWriteHeaders,
          body: UpdateUserBody,
          response: { 200: User, ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 403, 404, 409, 412) },
        },
      },
      async (request, reply) => {
        const id = request.params.userId;
        const { name, email, password } = request.body;
        // The viewer is the user or an admin: both get (and were given the ETag of) the view with e-mail.
        const check: OwnedCheck<User> = {
          rule: {
            missing: missing(users, request.params),
            owners: (user) => [user.id],
            denied: 'you may only change your own profile',
          },
          etag: userEtag,
        };
        // Every cheap check passes before the password is hashed (scrypt: costly by design), then again on the locked row.
        const current = await loadForChange(request, profiles.findById(id), check);
        if (name === undefined && email === undefined && password === undefined)
          return withEtag(reply, userEtag(current), current);
        if (email !== undefined && (await profiles.emailTaken(email, id))) throw emailTaken();
        const passwordHash = password === undefined ? undefined : await hashPassword(password);

        const updated = await changeOwned(request, {
          ...check,
          lock: (tx) => usersRepository(tx).lock(id),
          write: async (tx) => {
            const changed = await usersRepository(tx).update(id, { name, email, passwordHash });
            if (passwordHash !== undefined) await tokensRepository(tx).revokeAllExcept(id, request.user!.tokenId);
            return changed!;
          },
        });
        if (passwordHash !== undefined)
          r.forgetTokens((user) => user.id === id && user.tokenId !== request.user!.tokenId);
        return withEtag(reply, userEtag(updated), updated);
      },
    );
  });
}
