/** All SQL about access tokens. Only SHA-256 hashes of the secrets are stored. */
import type { Queryable } from '../db/pool.js';
import type { Static } from '@sinclair/typebox';
import type { TokenSchema, TokenSortField } from '../schemas/tokens.js';
import {
  type ListResult,
  type ListSource,
  type PageRequest,
  type Sort,
  idColumn,
  runList,
  timestampColumn,
} from '../db/pagination.js';
import { firstRow, sql, written } from '../db/sql.js';

export type Token = Static<typeof TokenSchema>;

export interface AuthUser {
  id: number;
  role: 'user' | 'admin';
  tokenId: number;
}

const COLUMNS = `id, created_at AS "createdAt", expires_at AS "expiresAt"`;
const LIVE = sql`revoked_at IS NULL AND expires_at > now()`;

const list: ListSource<TokenSortField, number> = {
  table: 'tokens',
  columns: COLUMNS,
  sortColumns: { id: idColumn, createdAt: timestampColumn('created_at') },
  // Revoked and expired tokens stay in the table, so they still anchor a cursor.
  scope: (userId) => [sql`user_id = ${userId}`],
  live: [LIVE],
  // A user holds few tokens; counting them through the (user_id, id) index is cheap.
  total: (userId) => sql`SELECT count(*) FROM tokens WHERE user_id = ${userId} AND ${LIVE}`,
};

export interface TokensRepository {
  create(userId: number, hash: Buffer, ttlSeconds: number): Promise<Token>;
  /** The live token's user, and when the token expires. */
  authenticate(hash: Buffer): Promise<(AuthUser & { expiresAtMs: number }) | undefined>;
  /** false when there is none (another user's included). */
  revoke(userId: number, tokenId: number): Promise<boolean>;
  /** After a password change: every other session of that user ends. */
  revokeAllExcept(userId: number, keepTokenId: number): Promise<void>;
  list(userId: number, sort: Sort<TokenSortField>, page: PageRequest): Promise<ListResult<Token>>;
}

export function tokensRepository(db: Queryable): TokensRepository {
  return {
    async create(userId: number, hash: Buffer, ttlSeconds: number): Promise<Token> {
      const text = `INSERT INTO tokens (user_id, token_hash, expires_at)
           VALUES ($1, $2, now() + make_interval(secs => $3)) RETURNING ${COLUMNS}`;
      return (await firstRow<Token>(db, text, [userId, hash, ttlSeconds]))!;
    },

    authenticate: (hash: Buffer) =>
      firstRow<AuthUser & { expiresAtMs: number }>(
        db,
        `SELECT u.id, u.role, t.id AS "tokenId", extract(epoch FROM t.expires_at)::float8 * 1000 AS "expiresAtMs"
           FROM tokens t JOIN users u ON u.id = t.user_id
           WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND t.expires_at > now()`,
        [hash],
      ),

    revoke: async (userId: number, tokenId: number) =>
      (await written(
        db,
        'UPDATE tokens SET revoked_at = now() WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL AND expires_at > now()',
        [tokenId, userId],
      )) === 1,

    async revokeAllExcept(userId: number, keepTokenId: number): Promise<void> {
      const text = 'UPDATE tokens SET revoked_at = now() WHERE user_id = $1 AND id <> $2 AND revoked_at IS NULL';
      await written(db, text, [userId, keepTokenId]);
    },

    list: (userId: number, sort: Sort<TokenSortField>, page: PageRequest) =>
      runList<Token, TokenSortField, number>(db, list, userId, sort, page),
  };
}
