/**
 * The tombstones of deleted posts and comments (deleted_posts,
 * deleted_comments: their sort keys, written by the delete triggers) are kept
 * only while a cursor naming a deleted item should stay valid
 * (TOMBSTONE_RETENTION); after that the item is forgotten and such a cursor is
 * a 422 like one that never named an item.
 */
import type { Queryable } from '../db/pool.js';

export const TOMBSTONE_TABLES = ['deleted_posts', 'deleted_comments'] as const;

export function tombstonesRepository(db: Queryable) {
  return {
    /**
     * Deletes up to `batch` tombstones per table older than `retentionSeconds`;
     * returns the most deleted from one table (`batch`: more may be left).
     * SKIP LOCKED lets several instances purge at once.
     */
    async purgeExpired(retentionSeconds: number, batch: number): Promise<number> {
      let most = 0;
      for (const table of TOMBSTONE_TABLES) {
        const { rowCount } = await db.query(
          `DELETE FROM ${table} WHERE id IN (
             SELECT id FROM ${table} WHERE deleted_at <= now() - make_interval(secs => $1)
             LIMIT $2 FOR UPDATE SKIP LOCKED)`,
          [retentionSeconds, batch],
        );
        most = Math.max(most, rowCount ?? 0);
      }
      return most;
    },
  };
}
