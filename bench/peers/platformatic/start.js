/**
 * Starts Platformatic DB v3 as the benchmark's peer (bench/peer.ts spawns it
 * with the Node 22 installed beside this file): the REST API it generates
 * from the tables of schema.sql, on 127.0.0.1:$PORT, over $DATABASE_URL (a
 * database of its own, loaded by bench/peer.ts).
 *
 * No migrations and no generated types, so it creates nothing in the
 * database (not even its `versions` table); GraphQL off (the bench sends
 * only REST); logging at warn, so it writes no line per request, while the
 * service runs with its production defaults (a line per request).
 * Pool size and everything else are its defaults.
 */
import { create } from '@platformatic/db'

const { DATABASE_URL, PORT } = process.env
if (!DATABASE_URL || !PORT) {
  console.error('usage: DATABASE_URL=... PORT=... node start.js')
  process.exit(64)
}

const app = await create(import.meta.dirname, {
  $schema: 'https://schemas.platformatic.dev/@platformatic/db/3.0.0.json',
  server: { hostname: '127.0.0.1', port: Number(PORT), logger: { level: 'warn' } },
  db: {
    connectionString: DATABASE_URL,
    graphql: false,
    openapi: true
  }
})
await app.init()
// Platformatic forces 0.0.0.0 when it detects a container (@platformatic/service's
// transform); the bench's servers listen on the loopback only.
app.serverConfig.hostname = '127.0.0.1'
await app.start({ listen: true })
process.once('SIGTERM', () => void app.stop().then(() => process.exit(0)))
