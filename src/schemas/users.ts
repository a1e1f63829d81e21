/** User and token contracts (docs/api.md §3, §4). */
import { Type } from '@sinclair/typebox';
import { Body, Id, ListEnvelope, ListQuery, PathId, Storable, StringEnum, Text, Timestamp } from './common.js';
import { USER_SORT_FIELDS } from '../repositories/users.js';
import { TOKEN_SORT_FIELDS } from '../repositories/tokens.js';

/**
 * The e-mail rule, stated as the pattern it is checked with rather than as
 * `format: email`, whose meaning (RFC 5321 Mailbox) differs between tools and
 * admits what no one can deliver to (`0@com`, quoted local parts, IP literals):
 * a dot-atom local part, then a domain of at least two labels.
 */
const EMAIL_PATTERN =
  "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?$";
const Email = Type.String({
  pattern: EMAIL_PATTERN,
  'x-errorMessage': 'must be a valid e-mail address',
  maxLength: 254,
  description: 'unique, case-insensitively; a dot-atom local part @ a domain of at least two labels',
});
const Password = Type.String({ minLength: 8, maxLength: 200, writeOnly: true, description: 'write-only' });
const Name = Text(100, '1–100 characters, not blank');

export const UserSchema = Type.Object(
  {
    id: Id,
    name: Type.String({ maxLength: 100 }),
    role: StringEnum(['user', 'admin']),
    email: Type.Optional(Type.String({ maxLength: 254, description: 'only shown to the user themself and to admins' })),
    createdAt: Timestamp,
  },
  { $id: 'User', additionalProperties: false },
);

export const CreateUserBody = Body({ name: Name, email: Email, password: Password });
export const UpdateUserBody = Body({ name: Type.Optional(Name), email: Type.Optional(Email), password: Type.Optional(Password) });
export const UserParams = Type.Object({ userId: PathId });
export const UserListQuery = ListQuery(USER_SORT_FIELDS);
export const UserList = ListEnvelope(Type.Ref(UserSchema));

export const TokenSchema = Type.Object(
  { id: Id, createdAt: Timestamp, expiresAt: Timestamp },
  { $id: 'Token', additionalProperties: false, description: 'a token as listed: never its secret' },
);
export const IssuedTokenSchema = Type.Object(
  {
    id: Id,
    token: Type.String({ pattern: '^pat_[A-Za-z0-9_-]{43}$', maxLength: 47, description: 'the secret; shown once, stored only as a hash' }),
    tokenType: Type.Literal('Bearer'),
    expiresAt: Timestamp,
    user: Type.Ref(UserSchema),
  },
  { additionalProperties: false, description: 'the new token, with its secret (shown only here) and its user' },
);
export const CreateTokenBody = Type.Object(
  // No e-mail format here (a failed log-in says nothing either way), but the
  // address is looked up in PostgreSQL, which refuses NUL.
  { email: Type.String({ maxLength: 254, ...Storable }), password: Type.String({ maxLength: 200 }) },
  { additionalProperties: false },
);
export const TokenParams = Type.Object({ tokenId: PathId });
export const TokenListQuery = ListQuery(TOKEN_SORT_FIELDS);
export const TokenList = ListEnvelope(Type.Ref(TokenSchema));
