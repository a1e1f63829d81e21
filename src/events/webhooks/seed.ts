/**
 * The seed's demo webhook (`npm run seed`), so that every example of /docs
 * works as offered: the demo account's webhook at an address that does not
 * exist, with one delivery recorded as given up, which the retry example sends
 * again (and which fails again). Made disabled, so that it sends nothing until
 * enabled (PATCH status active, the example of PATCH /webhooks/{webhookId}).
 * Its secret is never shown: it is a demo.
 */
import type { Queryable } from '../../db/pool.js';
import { prepared } from '../../db/sql.js';
import { webhooksRepository } from './repository.js';
import { newSecret, sealSecret } from './secrets.js';

export const DEMO_WEBHOOK_URL = 'https://hooks.example.com/posts-api';

/** Once: webhook and delivery `id`, owned by user `id`. */
export async function seedWebhook(db: Queryable, id: number): Promise<void> {
  const webhooks = webhooksRepository(db);
  if (await webhooks.findById(id)) return;
  const fields = {
    url: DEMO_WEBHOOK_URL,
    types: ['post.deleted' as const],
    description: 'demo: an endpoint that does not exist',
  };
  await webhooks.create(id, id, fields, sealSecret(newSecret().bytes, id, undefined), Number.MAX_SAFE_INTEGER);
  await webhooks.update(id, { status: 'disabled' });
  await db.query(
    prepared(
      `INSERT INTO webhook_deliveries (id, webhook_id, event_id, status, error) OVERRIDING SYSTEM VALUE
       VALUES ($1, $1, (SELECT coalesce(max(id), 1) FROM events), 'given_up', 'a seeded example, never sent')`,
      [id],
    ),
  );
}
