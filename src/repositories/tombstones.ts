/** Tombstones live as long as a cursor naming a deleted item should stay valid (a day; tombstoneRetentionSeconds). */
import type { Queryable } from '../db/pool.js';

export const TOMBSTONE_TABLES = ['deleted_posts', 'deleted_comments'] as const;

export interface TombstonesRepository {
  purgeExpired(retentionSeconds: number, batch: number): Promise<number>;
}

export function tombstonesRepository(db: Queryable): TombstonesRepository {
  return {
    /** Returns the most deleted from one table (`batch`: more may be left). */
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
