/**
 * The seed's demo webhook (`npm run seed`), so that every example of /docs
 * works as offered: the first user's webhook at an address that does not
 * exist, with one delivery recorded as given up, which the retry example sends
 * again (and which fails again). It takes only post.deleted, which a seed never
 * makes, so it stays quiet. Its secret is never shown: it is a demo.
 */
import type { Queryable } from '../../db/pool.js';
import { prepared } from '../../db/sql.js';
import { webhooksRepository } from './repository.js';
import { newSecret, sealSecret } from './secrets.js';

export const DEMO_WEBHOOK_URL = 'https://hooks.example.com/posts-api';

export async function seedWebhook(db: Queryable, userId: number): Promise<void> {
  const webhooks = webhooksRepository(db);
  const id = await webhooks.nextId();
  const fields = {
    url: DEMO_WEBHOOK_URL,
    types: ['post.deleted' as const],
    description: 'demo: an endpoint that does not exist',
  };
  await webhooks.create(id, userId, fields, sealSecret(newSecret().bytes, id, undefined), 1);
  await db.query(
    prepared(
      `INSERT INTO webhook_deliveries (webhook_id, event_id, status, error)
       VALUES ($1, (SELECT coalesce(max(id), 1) FROM events), 'given_up', 'a seeded example, never sent')`,
      [id],
    ),
  );
}
