/**
 * Operator commands sharing the app's config and repositories:
 *   migrate                 apply pending migrations to DATABASE_LISTEN_URL, else DATABASE_URL
 *   admin:grant <email>     make that user an admin
 *   seed --posts N          fill the database with demo data
 */
import { loadConfig } from './config.js';
import { migrate } from './db/migrate.js';
import { createPool } from './db/pool.js';
import { seedCommand } from './db/seed.js';
import { usersRepository } from './repositories/users.js';

function requireDatabaseUrl(): string {
  const { databaseUrl } = loadConfig();
  if (!databaseUrl) throw new Error('DATABASE_URL must be set for this command');
  return databaseUrl;
}

async function adminGrant(email: string | undefined) {
  if (!email) throw new Error('usage: npm run admin:grant -- <email>');
  const pool = createPool(requireDatabaseUrl(), 1);
  try {
    const user = await usersRepository(pool).setRole(email, 'admin');
    if (!user) throw new Error(`no user with e-mail ${email}`);
    console.log(`user ${user.id} (${user.email}) is now an admin`);
  } finally {
    await pool.end();
  }
}

const commands: Record<string, (args: string[]) => Promise<void>> = {
  // The runner holds a session-level advisory lock: a direct connection, not a pooler in transaction mode.
  migrate: async () => migrate(loadConfig().databaseListenUrl ?? requireDatabaseUrl(), (msg) => console.log(msg)),
  'admin:grant': async ([email]) => adminGrant(email),
  seed: async (args) => {
    const pool = createPool(requireDatabaseUrl(), 1);
    await seedCommand(pool, args).finally(() => pool.end());
  },
};

const [name, ...args] = process.argv.slice(2);
const command = name ? commands[name] : undefined;
if (!command) {
  console.error(`usage: cli.ts <${Object.keys(commands).join('|')}> [args]`);
  process.exit(64);
}
command(args).catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
