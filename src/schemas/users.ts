/** User contracts (docs/api.md §3, §4). */
import { Type } from '@sinclair/typebox';
import {
  Body,
  FieldsParam,
  Id,
  ListEnvelope,
  ListQuery,
  PathId,
  ReadView,
  StringEnum,
  Text,
  Timestamp,
} from './common.js';

/** What a list of users may be sorted by; the repository maps each to its column. */
export const USER_SORT_FIELDS = ['id', 'createdAt', 'name'] as const;
export type UserSortField = (typeof USER_SORT_FIELDS)[number];

// A pattern, not `format: email` (RFC 5321 Mailbox): tools differ on it, and it admits `0@com` and IP literals.
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

export const USER_FIELDS = ['id', 'name', 'role', 'email', 'createdAt'] as const;
export type UserField = (typeof USER_FIELDS)[number];

export const UserViewSchema = ReadView(UserSchema, 'UserView');

// Not Ann, who signs up in the README's walk-through.
export const CreateUserBody = Body(
  { name: Name, email: Email, password: Password },
  { examples: [{ name: 'Ada', email: 'ada@example.com', password: 'correct horse' }] },
);
export const UpdateUserBody = Body(
  { name: Type.Optional(Name), email: Type.Optional(Email), password: Type.Optional(Password) },
  { examples: [{ name: 'Grace' }] },
);
export const UserParams = Type.Object({ userId: PathId });
const ReadParams = FieldsParam(USER_FIELDS, ['name']);
export const UserQuery = Type.Object(ReadParams, { additionalProperties: false });
export const UserListQuery = ListQuery(USER_SORT_FIELDS, ReadParams);
export const UserList = ListEnvelope(Type.Ref(UserViewSchema));
