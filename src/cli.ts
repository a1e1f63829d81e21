/** Operator commands on DATABASE_URL, else on the embedded development database (the running one, or started). */
import {
  exitWithUsage,
  parseCommandLine,
  usageLine,
  type CommandSpec,
  type ParsedCommandLine,
} from './command-line.js';
import type { Pool } from 'pg';

// The database modules are imported once the arguments and config are read: --help and errors answer at once.
const log = (msg: string) => console.log(msg);

const WITHOUT_DATABASE_URL = `Without DATABASE_URL it works on the embedded development database of \`npm start\`
(EMBEDDED_PG_DATA): the running one, else it starts it for the command and stops it after;
pending migrations are applied to it first.`;

/** What the commands read: another setting's bad value is the server's concern, not theirs. */
const SETTINGS = ['DATABASE_URL', 'DATABASE_LISTEN_URL', 'EMBEDDED_PG_PORT', 'EMBEDDED_PG_DATA'] as const;

/** `migrating`: the work is the migration, so on DATABASE_LISTEN_URL first, and none runs before it. */
async function withDatabase(work: (url: string) => Promise<void>, migrating = false): Promise<void> {
  const config = (await import('./config.js')).readConfiguration(SETTINGS);
  if (config.databaseUrl) return work((migrating && config.databaseListenUrl) || config.databaseUrl);
  const [{ startDevelopmentDatabase }, { migrate }] = await Promise.all([
    import('./dev/embedded.js'),
    import('./db/migrate.js'),
  ]);
  const embedded = await startDevelopmentDatabase(config.embeddedPg, true);
  console.log(
    embedded.reused
      ? `DATABASE_URL is unset: using the running embedded PostgreSQL of ${config.embeddedPg.dataDir}`
      : `DATABASE_URL is unset: started the embedded PostgreSQL of ${config.embeddedPg.dataDir} on port ${config.embeddedPg.port} (stopped when done)`,
  );
  // A signal stops the command; the embedded server's exit hook then stops the server too.
  process.once('SIGINT', () => process.exit(130));
  process.once('SIGTERM', () => process.exit(143));
  try {
    if (!migrating) await migrate(embedded.url, log);
    await work(embedded.url);
  } finally {
    await embedded.stop();
  }
}

const withPool = (work: (pool: Pool) => Promise<void>): Promise<void> =>
  withDatabase(async (url) => {
    const { createPool } = await import('./db/pool.js');
    const pool = createPool(url, 1);
    await work(pool).finally(() => pool.end());
  });

type Command = Omit<CommandSpec, 'scripts' | 'subcommand'> & {
  run(parsed: ParsedCommandLine, spec: CommandSpec): Promise<void>;
};
/** Each is `npm run <name>`, or `cli.ts <name>` without npm. */
const COMMANDS: Record<string, Command> = {
  migrate: {
    help: `Applies pending migrations to DATABASE_LISTEN_URL, else DATABASE_URL (a direct connection:
it holds a session-level advisory lock, so several runs at once queue up); refuses a newer version's database.
${WITHOUT_DATABASE_URL}`,
    run: () => withDatabase(async (url) => (await import('./db/migrate.js')).migrate(url, log), true),
  },
  'admin:grant': {
    synopsis: '<email>',
    positionals: 1,
    help: `Makes the user with that e-mail address an admin.
${WITHOUT_DATABASE_URL}`,
    run: ({ positionals: [email = ''] }, spec) => {
      if (!/^[^@\s]+@[^@\s]+$/.test(email)) exitWithUsage(spec, `'${email}' is not an e-mail address`);
      return withPool(async (pool) => {
        const { usersRepository } = await import('./repositories/users.js');
        const user = await usersRepository(pool).setRole(email, 'admin');
        if (!user) throw new Error(`no user with e-mail ${email}`);
        console.log(`user ${user.id} (${user.email}) is now an admin`);
      });
    },
  },
  seed: {
    synopsis: '--posts N [--comments N] [--users N]',
    options: { posts: { type: 'string' }, comments: { type: 'string' }, users: { type: 'string' } },
    help: `Adds demo data to what is there (nothing is wiped), in one transaction, and prints the
password every seeded user logs in with.
${WITHOUT_DATABASE_URL}

options:
  --posts N      posts to add (required)
  --comments N   comments to add in all (default: 2 per post)
  --users N      users to add (default: one per ten posts, at least 1, at most 1000)
  -h, --help     print this help and exit`,
    run: ({ values }, spec) => {
      const count = (name: string): number | undefined => {
        const raw = values[name];
        if (raw === undefined) return undefined;
        if (typeof raw !== 'string' || !/^[0-9]+$/.test(raw) || !Number.isSafeInteger(Number(raw))) {
          exitWithUsage(spec, `--${name} must be a non-negative integer, not '${String(raw)}'`);
        }
        return Number(raw);
      };
      const posts = count('posts') ?? exitWithUsage(spec, '--posts N is required');
      const options = { posts, comments: count('comments'), users: count('users') };
      return withPool(async (pool) => (await import('./dev/seed.js')).seedCommand(pool, options));
    },
  },
};

const [name, ...args] = process.argv.slice(2);
const command = name !== undefined && Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
if (command === undefined) {
  const usage = usageLine({ scripts: [], synopsis: `<${Object.keys(COMMANDS).join('|')}> [--help]`, help: '' });
  if (name === '--help' || name === '-h') {
    console.log(usage);
    process.exit(0);
  }
  console.error(`${name === undefined ? 'missing command' : `unknown command '${name}'`}\n${usage}`);
  process.exit(64);
}
const spec = { ...command, scripts: [name!], subcommand: name };
command.run(parseCommandLine(spec, args), spec).catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
