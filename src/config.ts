/**
 * All settings come from environment variables, validated by one TypeBox schema.
 * A bad value stops start-up with a message naming the variable, so a typo in a
 * deployment fails loudly instead of running with a surprising default.
 * This is the only module that reads process.env.
 */
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

const PositiveInt = (def: number, max: number, description: string) =>
  Type.Integer({ minimum: 1, maximum: max, default: def, description });

export const EnvSchema = Type.Object({
  DATABASE_URL: Type.Optional(
    Type.String({ pattern: '^postgres(ql)?://', description: 'PostgreSQL URL; unset = embedded server under .data/' }),
  ),
  DATABASE_LISTEN_URL: Type.Optional(
    Type.String({
      pattern: '^postgres(ql)?://',
      description: 'direct PostgreSQL URL (not through a pooler) for LISTEN and migrations; unset = DATABASE_URL',
    }),
  ),
  DATABASE_READ_URL: Type.Optional(
    Type.String({
      pattern: '^postgres(ql)?://[^,\\s]+(,\\s*postgres(ql)?://[^,\\s]+)*$',
      description: 'comma-separated URLs of streaming replicas that take the public reads; unset = all reads on DATABASE_URL',
    }),
  ),
  DATABASE_READ_MAX_LAG_MS: Type.Integer({
    minimum: 100,
    maximum: 600_000,
    default: 1_000,
    description: 'most a replica may lag behind the primary and still take reads, ms; past it reads go to the primary',
  }),
  DATABASE_PREPARED_STATEMENTS: Type.Union([Type.Literal('on'), Type.Literal('off')], {
    default: 'on',
    description: 'named prepared statements; off behind PgBouncer < 1.21 (or without max_prepared_statements) in transaction mode',
  }),
  HOST: Type.String({ minLength: 1, default: '0.0.0.0' }),
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 3000 }),
  API_PREFIX: Type.String({ pattern: '^(/[A-Za-z0-9._~-]+)*$', default: '', description: 'e.g. /v1; empty = none' }),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l)),
    { default: 'info' },
  ),
  BODY_LIMIT: PositiveInt(1_048_576, 100 * 1_048_576, 'largest accepted request body, bytes'),
  TOKEN_TTL: PositiveInt(86_400, 365 * 86_400, 'token lifetime, seconds'),
  RATE_LIMIT_MAX: PositiveInt(300, 1_000_000, 'requests per window per client'),
  RATE_LIMIT_WINDOW: PositiveInt(60, 86_400, 'rate limit window, seconds'),
  RATE_LIMIT_AUTH_MAX: PositiveInt(10, 1_000_000, 'requests per window per client on POST /tokens and POST /users'),
  REDIS_URL: Type.Optional(Type.String({ pattern: '^rediss?://' })),
  TRUST_PROXY: Type.String({
    pattern: '^(true|false|[0-9]{1,2}|[0-9A-Fa-f:.]+(/[0-9]{1,3})?(,\\s*[0-9A-Fa-f:.]+(/[0-9]{1,3})?)*)$',
    default: 'false',
    description: 'false, true, a hop count, or comma-separated addresses/CIDRs of trusted proxies',
  }),
  CORS_ORIGINS: Type.String({ default: '', description: 'comma-separated origins, or *; empty = CORS off' }),
  PG_POOL_MAX: PositiveInt(10, 1000, 'PostgreSQL connections per instance'),
  PG_STATEMENT_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 600_000,
    default: 10_000,
    description: 'longest a database statement may run (lock waits included), ms; past it the request is a 503',
  }),
  PUBLIC_BASE_URL: Type.Optional(
    Type.String({
      pattern: '^https?://[^/?#\\s]+(/[^?#\\s]*[^/?#\\s])?$',
      description: 'scheme, host and path prefix clients reach the service at, no trailing slash; unset = relative links',
    }),
  ),
  TOMBSTONE_RETENTION: PositiveInt(
    86_400,
    365 * 86_400,
    'how long the sort keys of deleted posts and comments are kept (cursors naming them stay valid), seconds',
  ),
  RESPONSE_CACHE_MB: Type.Integer({
    minimum: 0,
    maximum: 4096,
    default: 16,
    description: 'memory for cached answers of public post and comment reads, MiB; 0 = off',
  }),
  RESPONSE_CACHE_MAX_AGE_MS: PositiveInt(
    5_000,
    3_600_000,
    'oldest cached answer served, ms: bounds staleness should change notifications be lost',
  ),
  AUTH_CACHE_MS: Type.Integer({
    minimum: 0,
    maximum: 60_000,
    default: 1_000,
    description:
      'how long an instance trusts a token it has checked, ms (0 = ask the database every time): ' +
      'the bound on how long another instance may still accept a token after it was revoked',
  }),
  EMBEDDED_PG_PORT: Type.Integer({ minimum: 1, maximum: 65535, default: 54329 }),
});
export type Env = Static<typeof EnvSchema>;

export class ConfigError extends Error {
  override name = 'ConfigError';
}

function parseTrustProxy(raw: string): boolean | number | string[] {
  if (raw === 'true') return true;
  if (raw === 'false') return false;
  if (/^[0-9]+$/.test(raw)) return Number(raw);
  return raw.split(',').map((s) => s.trim());
}

export function loadConfig(source: Record<string, string | undefined> = process.env) {
  // Only our own keys, and empty strings count as unset (as in docker compose's `VAR=`).
  const raw: Record<string, unknown> = {};
  for (const key of Object.keys(EnvSchema.properties)) {
    const value = source[key];
    if (value !== undefined && value !== '') raw[key] = value;
  }
  // API_PREFIX and CORS_ORIGINS may legitimately be set to empty.
  for (const key of ['API_PREFIX', 'CORS_ORIGINS'] as const) if (source[key] === '') raw[key] = '';

  // Value.Convert would truncate "1.5" to 1: integer settings must be written as integers.
  for (const [key, schema] of Object.entries(EnvSchema.properties)) {
    const value = raw[key];
    if ((schema as { type?: string }).type === 'integer' && typeof value === 'string' && !/^-?[0-9]+$/.test(value)) {
      throw new ConfigError(`invalid environment variable ${key}=${JSON.stringify(value)}: expected an integer`);
    }
  }
  const env = Value.Convert(EnvSchema, Value.Default(EnvSchema, raw));
  const first = Value.Errors(EnvSchema, env).First();
  if (first) {
    const name = first.path.replace(/^\//, '');
    throw new ConfigError(`invalid environment variable ${name}=${JSON.stringify(raw[name] ?? '')}: ${first.message}`);
  }
  const e = env as Env;
  return {
    databaseUrl: e.DATABASE_URL,
    databaseListenUrl: e.DATABASE_LISTEN_URL,
    databaseReadUrls: e.DATABASE_READ_URL === undefined ? [] : e.DATABASE_READ_URL.split(',').map((s) => s.trim()),
    databaseReadMaxLagMs: e.DATABASE_READ_MAX_LAG_MS,
    databasePreparedStatements: e.DATABASE_PREPARED_STATEMENTS === 'on',
    host: e.HOST,
    port: e.PORT,
    apiPrefix: e.API_PREFIX,
    logLevel: e.LOG_LEVEL,
    bodyLimit: e.BODY_LIMIT,
    tokenTtlSeconds: e.TOKEN_TTL,
    rateLimit: { max: e.RATE_LIMIT_MAX, authMax: e.RATE_LIMIT_AUTH_MAX, windowSeconds: e.RATE_LIMIT_WINDOW },
    redisUrl: e.REDIS_URL,
    trustProxy: parseTrustProxy(e.TRUST_PROXY),
    corsOrigins: e.CORS_ORIGINS === '' ? [] : e.CORS_ORIGINS.split(',').map((s) => s.trim()).filter(Boolean),
    pgPoolMax: e.PG_POOL_MAX,
    pgStatementTimeoutMs: e.PG_STATEMENT_TIMEOUT_MS,
    publicBaseUrl: e.PUBLIC_BASE_URL,
    tombstoneRetentionSeconds: e.TOMBSTONE_RETENTION,
    responseCacheBytes: e.RESPONSE_CACHE_MB * 1_048_576,
    responseCacheMaxAgeMs: e.RESPONSE_CACHE_MAX_AGE_MS,
    authCacheMs: e.AUTH_CACHE_MS,
    embeddedPgPort: e.EMBEDDED_PG_PORT,
  };
}

export type Config = ReturnType<typeof loadConfig>;
