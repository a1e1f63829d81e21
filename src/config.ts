/** Every setting, from environment variables (and `.env`) checked by one schema: a typo fails start-up loudly. */
import { readFileSync } from 'node:fs';
import { parseEnv } from 'node:util';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

const Int = (def: number, minimum: number, maximum: number, description: string) =>
  Type.Integer({ minimum, maximum, default: def, description });
const PositiveInt = (def: number, max: number, description: string) => Int(def, 1, max, description);
const NonEmpty = (def: string, description: string) => Type.String({ minLength: 1, default: def, description });
const Text = (def: string, pattern: string, description: string, errorMessage: string) =>
  Type.String({ pattern, default: def, description, errorMessage });
/** Unset is allowed; a value must match `pattern`. */
const OptionalText = (pattern: string, description: string, errorMessage: string) =>
  Type.Optional(Type.String({ pattern, description, errorMessage }));
const PostgresUrl = (description: string) =>
  OptionalText('^postgres(ql)?://', description, 'must be a postgres:// or postgresql:// URL');
const Choice = <T extends string>(values: T[], def: T, description: string) =>
  Type.Union(
    values.map((v) => Type.Literal(v)),
    { default: def, description },
  );
const Flag = (description: string) => Choice(['true', 'false'], 'false', description);

// scheme://host[:port], what a browser sends in Origin: no path, not even a trailing slash.
const ORIGIN = '[A-Za-z][A-Za-z0-9+.-]*://(\\[[0-9A-Fa-f:.]+\\]|[^\\s/?#,:@\\[\\]]+)(:[0-9]{1,5})?';

export const EnvSchema = Type.Object({
  DATABASE_URL: PostgresUrl('PostgreSQL URL; unset = the embedded development server (EMBEDDED_PG_*)'),
  DATABASE_LISTEN_URL: PostgresUrl(
    'direct PostgreSQL URL (not through a pooler) for LISTEN and migrations; unset = DATABASE_URL',
  ),
  DATABASE_READ_URL: OptionalText(
    '^postgres(ql)?://[^,\\s]+(,\\s*postgres(ql)?://[^,\\s]+)*$',
    'comma-separated URLs of streaming replicas that take the public reads; unset = all reads on DATABASE_URL',
    'must be postgres:// or postgresql:// URLs separated by commas',
  ),
  HOST: NonEmpty('127.0.0.1', 'address to listen on; 0.0.0.0 = every interface'),
  PORT: Int(3000, 0, 65535, 'port to listen on'),
  METRICS_PORT: Int(9464, 0, 65535, 'port of GET /metrics (Prometheus) on HOST, never the API port; 0 = no metrics'),
  API_PREFIX: Text(
    '',
    '^(/[A-Za-z0-9._~-]+)*$',
    'prefix of every path, e.g. /v1; empty = none',
    'must be empty or a path such as /v1, without a trailing slash',
  ),
  LOG_LEVEL: Choice(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
    'info',
    'least severe level logged',
  ),
  BODY_LIMIT: PositiveInt(1_048_576, 100 * 1_048_576, 'largest accepted request body, bytes'),
  TOKEN_TTL: PositiveInt(86_400, 365 * 86_400, 'token lifetime, seconds'),
  RATE_LIMIT_MAX: PositiveInt(300, 1_000_000, 'requests per window per client'),
  RATE_LIMIT_WINDOW: PositiveInt(60, 86_400, 'rate limit window, seconds'),
  RATE_LIMIT_AUTH_MAX: PositiveInt(10, 1_000_000, 'requests per window per client on POST /tokens and POST /users'),
  REDIS_URL: OptionalText(
    '^rediss?://',
    'Redis for rate limit counters shared by every instance; unset = in memory',
    'must be a redis:// or rediss:// URL',
  ),
  TRUST_PROXY: Text(
    'false',
    '^(true|false|[0-9]{1,2}|[0-9A-Fa-f:.]+(/[0-9]{1,3})?(,\\s*[0-9A-Fa-f:.]+(/[0-9]{1,3})?)*)$',
    'whose X-Forwarded-* headers count for the client address',
    'must be false, true, a hop count (e.g. 1), or comma-separated IP addresses or CIDRs of trusted proxies',
  ),
  CORS_ORIGINS: Text(
    '',
    `^(\\*|${ORIGIN}(\\s*,\\s*${ORIGIN})*)?$`,
    'origins allowed by CORS; empty = CORS off',
    'must be *, or comma-separated origins scheme://host[:port] without a path (e.g. https://app.example.com)',
  ),
  PG_POOL_MAX: PositiveInt(10, 1000, 'PostgreSQL connections per instance'),
  PG_STATEMENT_TIMEOUT_MS: Int(
    10_000,
    100,
    600_000,
    'longest a database statement may run (lock waits included), ms; past it the request is a 503',
  ),
  EVENT_RETENTION: PositiveInt(
    604_800,
    10 * 365 * 86_400,
    'how long events are kept (GET /events, its streams, webhooks); an older cursor is a 410, seconds',
  ),
  SHARED_CACHE_SECONDS: Int(
    1,
    0,
    5,
    'how long a shared cache (nginx, a CDN) may keep an anonymous public read, seconds (s-maxage); 0 = no-cache',
  ),
  MAX_STREAMS: PositiveInt(
    1_000,
    100_000,
    'open event streams (GET /events/stream) per instance; past it a new one is a 503',
  ),
  WEBHOOK_ALLOW_HTTP: Flag('accept http:// webhook URLs (tests, private networks); false = https only'),
  WEBHOOK_ALLOW_PRIVATE: Flag(
    'deliver webhooks to private, loopback and link-local addresses (tests, private networks)',
  ),
  WEBHOOK_CONCURRENCY: Int(10, 0, 1000, 'webhook deliveries this instance sends at once; 0 = this instance sends none'),
  WEBHOOK_MAX_PER_USER: PositiveInt(20, 10_000, 'webhooks a user may have; past it creating one is a 409'),
  EMBEDDED_PG_PORT: Int(54329, 1, 65535, 'port of the embedded development PostgreSQL (only without DATABASE_URL)'),
  EMBEDDED_PG_DATA: NonEmpty(
    '.data/pg',
    'data folder of the embedded development PostgreSQL, relative to the working directory',
  ),
});
export type Env = Static<typeof EnvSchema>;

export class ConfigError extends Error {
  override name = 'ConfigError';
  constructor(readonly problems: string[]) {
    super(problems.join('\n'));
  }
}

function mustBe(schema: TSchema): string {
  if (typeof schema.errorMessage === 'string') return schema.errorMessage;
  if (schema.type === 'integer') return `must be an integer from ${schema.minimum} to ${schema.maximum}`;
  if (Array.isArray(schema.anyOf))
    return `must be one of ${(schema.anyOf as TSchema[]).map((s) => s.const as string).join(', ')}`;
  return 'is invalid';
}

export const withoutPassword = (value: string): string => value.replace(/\/\/([^:@/,\s]*):[^@,\s]*@/g, '//$1:***@');

function parseTrustProxy(raw: string): boolean | number | string[] {
  if (raw === 'true' || raw === 'false') return raw === 'true';
  if (/^[0-9]+$/.test(raw)) return Number(raw);
  return raw.split(',').map((s) => s.trim());
}

/** The webhook worker's and routes' settings (docs/operations.md, "Webhooks"). */
export interface WebhookSettings {
  allowHttp: boolean;
  allowPrivate: boolean;
  concurrency: number;
  maxPerUser: number;
  timeoutMs: number;
  retryBaseMs: number;
  giveUpAfterSeconds: number;
  disableAfterSeconds: number;
  pollMs: number;
}

/** The settings as the code uses them: the environment's, and the contract's constants tests may change. */
export interface Config {
  /** Undefined: the embedded development database. */
  databaseUrl: string | undefined;
  databaseListenUrl: string | undefined;
  databaseReadUrls: string[];
  databaseReadMaxLagMs: number;
  host: string;
  port: number;
  /** Null: no metrics (METRICS_PORT=0). */
  metrics: { host: string; port: number } | null;
  apiPrefix: string;
  logLevel: Env['LOG_LEVEL'];
  bodyLimit: number;
  tokenTtlSeconds: number;
  rateLimit: { max: number; authMax: number; windowSeconds: number };
  redisUrl: string | undefined;
  trustProxy: boolean | number | string[];
  corsOrigins: string[];
  pgPoolMax: number;
  pgStatementTimeoutMs: number;
  tombstoneRetentionSeconds: number;
  eventRetentionSeconds: number;
  maxStreams: number;
  sharedCacheSeconds: number;
  eventStreamHeartbeatSeconds: number;
  authCacheMs: number;
  pgConnectTimeoutMs: number;
  embeddedPg: { port: number; dataDir: string };
  webhooks: WebhookSettings;
}

/** `only`: the settings a caller uses; the others take their defaults, whatever they are set to. */
export function loadConfig(
  source: Record<string, string | undefined> = process.env,
  only?: readonly (keyof Env)[],
): Config {
  const raw: Record<string, unknown> = {};
  const problems: string[] = [];
  for (const [key, schema] of Object.entries(EnvSchema.properties) as [keyof Env, TSchema][]) {
    const value = only && !only.includes(key) ? undefined : source[key];
    // Empty counts as unset (as in docker compose's `VAR=`), except where empty means something.
    if (value === undefined || (value === '' && key !== 'API_PREFIX' && key !== 'CORS_ORIGINS')) continue;
    // Only plain integers: Number() would take "1e3" or " 7", and TypeBox's Convert truncates "1.5".
    const converted = schema.type === 'integer' && /^-?[0-9]+$/.test(value) ? Number(value) : value;
    if (Value.Check(schema, converted)) raw[key] = converted;
    else problems.push(`${key}=${JSON.stringify(withoutPassword(value))}: ${mustBe(schema)}`);
  }
  if (problems.length > 0) throw new ConfigError(problems);
  const e = Value.Default(EnvSchema, raw) as Env;
  return {
    databaseUrl: e.DATABASE_URL,
    databaseListenUrl: e.DATABASE_LISTEN_URL,
    databaseReadUrls: e.DATABASE_READ_URL === undefined ? [] : e.DATABASE_READ_URL.split(',').map((s) => s.trim()),
    databaseReadMaxLagMs: 1_000,
    host: e.HOST,
    port: e.PORT,
    metrics: e.METRICS_PORT === 0 ? null : { host: e.HOST, port: e.METRICS_PORT },
    apiPrefix: e.API_PREFIX,
    logLevel: e.LOG_LEVEL,
    bodyLimit: e.BODY_LIMIT,
    tokenTtlSeconds: e.TOKEN_TTL,
    rateLimit: { max: e.RATE_LIMIT_MAX, authMax: e.RATE_LIMIT_AUTH_MAX, windowSeconds: e.RATE_LIMIT_WINDOW },
    redisUrl: e.REDIS_URL,
    trustProxy: parseTrustProxy(e.TRUST_PROXY),
    corsOrigins: e.CORS_ORIGINS === '' ? [] : e.CORS_ORIGINS.split(',').map((s) => s.trim()),
    pgPoolMax: e.PG_POOL_MAX,
    pgStatementTimeoutMs: e.PG_STATEMENT_TIMEOUT_MS,
    tombstoneRetentionSeconds: 86_400,
    eventRetentionSeconds: e.EVENT_RETENTION,
    maxStreams: e.MAX_STREAMS,
    sharedCacheSeconds: e.SHARED_CACHE_SECONDS,
    // The contract's constants (docs/api.md §2, §12); tests change them through buildApp's config.
    eventStreamHeartbeatSeconds: 15,
    authCacheMs: 1_000,
    pgConnectTimeoutMs: 3_000,
    embeddedPg: { port: e.EMBEDDED_PG_PORT, dataDir: e.EMBEDDED_PG_DATA },
    webhooks: {
      allowHttp: e.WEBHOOK_ALLOW_HTTP === 'true',
      allowPrivate: e.WEBHOOK_ALLOW_PRIVATE === 'true',
      concurrency: e.WEBHOOK_CONCURRENCY,
      maxPerUser: e.WEBHOOK_MAX_PER_USER,
      timeoutMs: 10_000,
      retryBaseMs: 10_000,
      giveUpAfterSeconds: 86_400,
      disableAfterSeconds: 86_400,
      pollMs: 1_000,
    },
  };
}

/** What the app runs with: the settings and the database they resolved to (the embedded one when DATABASE_URL is unset). */
export type AppConfig = Config & { databaseUrl: string };

// A line of a .env file: blank, a comment, or NAME=value (`export ` allowed, as shells write it).
const ENV_LINE = /^\s*(#.*)?$|^\s*(export\s+)?[A-Za-z_][A-Za-z0-9_]*\s*=/;

/** A variable already set, even to empty, wins. Lines are checked first: Node's parser skips what it cannot read. */
export function loadEnvFile(path = '.env', env: Record<string, string | undefined> = process.env): void {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw new ConfigError([`cannot read ${path}: ${(error as Error).message}`]);
  }
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (!ENV_LINE.test(line))
      throw new ConfigError([`${path} line ${i + 1}: expected NAME=value, found ${JSON.stringify(line)}`]);
    // A quoted value may span lines: skip to its closing quote.
    const open = /=\s*(["'`])(.*)$/.exec(line);
    if (open && !open[2]!.includes(open[1]!)) {
      const end = lines.findIndex((l, j) => j > i && l.includes(open[1]!));
      if (end === -1) throw new ConfigError([`${path} line ${i + 1}: the quote ${open[1]} is never closed`]);
      i = end;
    }
  }
  for (const [key, value] of Object.entries(parseEnv(text))) if (env[key] === undefined) env[key] = value;
}

/** host:port/database of a PostgreSQL URL: nothing about who connects. */
function databaseTarget(url: string): string {
  if (!URL.canParse(url)) return 'an unparsable URL';
  const u = new URL(url);
  return `${u.hostname || u.searchParams.get('host') || 'localhost'}:${u.port || 5432}${decodeURIComponent(u.pathname)}`;
}

/** What the start-up log line says the service connects to. */
export interface Connections {
  database: string;
  rateLimitStore: string;
  sharedCache: string;
  replicas: string;
}

/** What the service connects to, for the start-up log: hosts, ports and names, never a user or password. */
export function describeConnections(config: Config, databaseUrl: string): Connections {
  const redis = config.redisUrl === undefined ? undefined : new URL(config.redisUrl);
  return {
    database: databaseTarget(databaseUrl),
    rateLimitStore: redis ? `Redis ${redis.hostname}:${redis.port || 6379}` : 'memory',
    sharedCache: config.sharedCacheSeconds > 0 ? `s-maxage=${config.sharedCacheSeconds}` : 'off',
    replicas: config.databaseReadUrls.length > 0 ? config.databaseReadUrls.map(databaseTarget).join(', ') : 'none',
  };
}

/** A setting's default as --help shows it: an empty one must not read as a missing word. */
function shownDefault(value: unknown): string {
  if (value === undefined) return 'unset';
  if (value === '') return 'empty';
  return String(value);
}

export function describeSettings(): string {
  return Object.entries(EnvSchema.properties as Record<string, TSchema>)
    .map(([key, schema]) => `  ${key} (${shownDefault(schema.default)}): ${schema.description ?? ''}`)
    .join('\n');
}

/** .env and the environment (`only` those settings), or every problem on stderr and exit 78. */
export function readConfiguration(only?: readonly (keyof Env)[]): Config {
  try {
    loadEnvFile();
    return loadConfig(process.env, only);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    console.error(`configuration error (environment variables and .env):\n  ${error.problems.join('\n  ')}`);
    process.exit(78);
  }
}
