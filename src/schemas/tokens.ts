/** Token contracts (docs/api.md §4, §6). */
import { Type } from '@sinclair/typebox';
import { DEMO_EMAIL, Id, ListEnvelope, ListQuery, PathId, Storable, Timestamp } from './common.js';
import { UserSchema } from './users.js';

/** What a list of tokens may be sorted by; the repository maps each to its column. */
export const TOKEN_SORT_FIELDS = ['id', 'createdAt'] as const;
export type TokenSortField = (typeof TOKEN_SORT_FIELDS)[number];

export const TokenSchema = Type.Object(
  { id: Id, createdAt: Timestamp, expiresAt: Timestamp },
  { $id: 'Token', additionalProperties: false, description: 'a token as listed: never its secret' },
);
export const IssuedTokenSchema = Type.Object(
  {
    id: Id,
    token: Type.String({
      pattern: '^pat_[A-Za-z0-9_-]{43}$',
      maxLength: 47,
      description: 'the secret; shown once, stored only as a hash',
    }),
    tokenType: Type.Literal('Bearer'),
    expiresAt: Timestamp,
    user: Type.Ref(UserSchema),
  },
  { additionalProperties: false, description: 'the new token, with its secret (shown only here) and its user' },
);
export const CreateTokenBody = Type.Object(
  // No e-mail format (a failed log-in says nothing either way), but PostgreSQL refuses NUL.
  { email: Type.String({ maxLength: 254, ...Storable }), password: Type.String({ maxLength: 200 }) },
  // The demo account of `npm run seed` (src/dev/seed.ts), who owns what the other examples name.
  { additionalProperties: false, examples: [{ email: DEMO_EMAIL, password: 'demo-password' }] },
);
export const TokenParams = Type.Object({ tokenId: PathId });
export const TokenListQuery = ListQuery(TOKEN_SORT_FIELDS);
export const TokenList = ListEnvelope(Type.Ref(TokenSchema));
