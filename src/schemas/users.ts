/** User contracts (docs/api.md §3, §4). */
import { Type } from '@sinclair/typebox';
import { Body, Id, PathId, Resource, StringEnum, Text, Timestamp } from './common.js';

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

const User = Resource(
  'User',
  {
    id: Id,
    name: Type.String({ maxLength: 100 }),
    role: StringEnum(['user', 'admin']),
    email: Type.Optional(Type.String({ maxLength: 254, description: 'only shown to the user themself and to admins' })),
    createdAt: Timestamp,
  },
  { sortFields: ['id', 'createdAt', 'name'], example: ['name'] },
);
/** What a list of users may be sorted by; the repository maps each to its column. */
export type UserSortField = (typeof User.sortFields)[number];
export type UserField = (typeof User.fields)[number];
export const { schema: UserSchema, view: UserViewSchema, query: UserQuery, list: UserList } = User;

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
export const UserListQuery = User.listQuery({});
