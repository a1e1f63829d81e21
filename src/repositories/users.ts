/** All SQL about users. */
import type { Queryable } from '../db/pool.js';
import type { Static } from '@sinclair/typebox';
import type { UserField, UserSchema, UserSortField } from '../schemas/users.js';
import { type Columns, type View, type Viewed, listView, readView, selectList } from '../db/views.js';
import {
  type ListResult,
  type ListSource,
  type PageRequest,
  type Sort,
  counter,
  idColumn,
  runList,
  textColumn,
  timestampColumn,
} from '../db/pagination.js';
import { firstRow, join, raw, sql, toQuery } from '../db/sql.js';
import { traceparentOf, tracedCte } from '../db/trace-context.js';

/** With e-mail: the schema's is optional, for the views that hide it. */
export type User = Static<typeof UserSchema> & { email: string };

const FIELDS: Columns<UserField> = {
  id: 'id',
  name: 'name',
  role: 'role',
  email: 'email',
  createdAt: 'created_at AS "createdAt"',
};
const COLUMNS = selectList(FIELDS);

const list: ListSource<UserSortField, void> = {
  table: 'users',
  columns: COLUMNS,
  sortColumns: { id: idColumn, createdAt: timestampColumn('created_at'), name: textColumn('name') },
  scope: () => [],
  total: () => raw(counter('users')),
};

export interface UsersRepository {
  create(user: { name: string; email: string; passwordHash: string }): Promise<User>;
  findById(id: number): Promise<User | undefined>;
  read(id: number, view: View<UserField>): Promise<Viewed<User> | undefined>;
  lock(id: number): Promise<User | undefined>;
  findCredentials(email: string): Promise<{ id: number; passwordHash: string } | undefined>;
  /** Compared as the unique index does. */
  emailTaken(email: string, exceptId?: number): Promise<boolean>;
  /** A change to the values already stored writes nothing (a new password hash always differs). */
  update(id: number, changes: { name?: string; email?: string; passwordHash?: string }): Promise<User | undefined>;
  setRole(email: string, role: User['role']): Promise<User | undefined>;
  list(sort: Sort<UserSortField>, page: PageRequest, view?: View<UserField>): Promise<ListResult<User>>;
}

export function usersRepository(db: Queryable): UsersRepository {
  const findById = (id: number, lock = '') =>
    firstRow<User>(db, `SELECT ${COLUMNS} FROM users WHERE id = $1${lock}`, [id]);

  return {
    async create({ name, email, passwordHash }: { name: string; email: string; passwordHash: string }) {
      // Outside a transaction when the sign-up has no Idempotency-Key: the statement carries its trace context.
      const text = `WITH ${tracedCte(4)}
        INSERT INTO users (name, email, password_hash) SELECT $1, $2, $3 FROM traced RETURNING ${COLUMNS}`;
      return (await firstRow<User>(db, text, [name, email, passwordHash, traceparentOf()]))!;
    },

    findById: (id: number) => findById(id),

    read: (id: number, view: View<UserField>) => readView<User, UserField>(db, FIELDS, 'users', view, 'id = $1', [id]),

    lock: (id: number) => findById(id, ' FOR NO KEY UPDATE'),

    findCredentials: (email: string) =>
      firstRow<{ id: number; passwordHash: string }>(
        db,
        'SELECT id, password_hash AS "passwordHash" FROM users WHERE lower(email) = lower($1)',
        [email],
      ),

    async emailTaken(email: string, exceptId = 0): Promise<boolean> {
      const text = 'SELECT EXISTS (SELECT 1 FROM users WHERE lower(email) = lower($1) AND id <> $2) AS taken';
      return (await firstRow<{ taken: boolean }>(db, text, [email, exceptId]))!.taken;
    },

    async update(id: number, changes: { name?: string; email?: string; passwordHash?: string }) {
      const columns = { name: changes.name, email: changes.email, password_hash: changes.passwordHash };
      const fields = Object.entries(columns).filter((field): field is [string, string] => field[1] !== undefined);
      if (fields.length === 0) return findById(id);
      const sets = fields.map(([column, value]) => sql`${raw(column)} = ${value}`);
      const differs = fields.map(([column, value]) => sql`${raw(column)} IS DISTINCT FROM ${value}`);
      const { rows } = await db.query<User>(
        toQuery(sql`UPDATE users SET ${join([...sets, sql`version = version + 1`, sql`updated_at = now()`])}
          WHERE id = ${id} AND (${join(differs, ' OR ')}) RETURNING ${raw(COLUMNS)}`),
      );
      return rows[0] ?? findById(id);
    },

    setRole: (email: string, role: 'user' | 'admin') =>
      firstRow<User>(
        db,
        `UPDATE users SET role = $2, version = version + 1, updated_at = now() WHERE lower(email) = lower($1) RETURNING ${COLUMNS}`,
        [email, role],
      ),

    list: (sort: Sort<UserSortField>, page: PageRequest, view: View<UserField> = {}) =>
      runList<User, UserSortField, void>(db, list, undefined, sort, page, listView(FIELDS, 'users', view)),
  };
}
