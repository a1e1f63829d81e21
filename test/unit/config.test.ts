import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, EnvSchema, describeConnections, loadConfig, loadEnvFile } from '../../src/config.js';

describe('loadConfig', () => {
  it('applies the documented defaults', () => {
    expect(loadConfig({})).toEqual({
      databaseUrl: undefined,
      databaseListenUrl: undefined,
      databaseReadUrls: [],
      databaseReadMaxLagMs: 1_000,
      host: '127.0.0.1',
      port: 3000,
      metrics: { host: '127.0.0.1', port: 9464 },
      apiPrefix: '',
      logLevel: 'info',
      bodyLimit: 1_048_576,
      tokenTtlSeconds: 86_400,
      rateLimit: { max: 300, authMax: 10, windowSeconds: 60 },
      redisUrl: undefined,
      trustProxy: false,
      corsOrigins: [],
      pgPoolMax: 10,
      pgStatementTimeoutMs: 10_000,
      tombstoneRetentionSeconds: 86_400,
      eventRetentionSeconds: 604_800,
      maxStreams: 1_000,
      eventStreamHeartbeatSeconds: 15,
      sharedCacheSeconds: 1,
      authCacheMs: 1_000,
      pgConnectTimeoutMs: 3_000,
      embeddedPg: { port: 54329, dataDir: '.data/pg' },
      webhooks: {
        allowHttp: false,
        allowPrivate: false,
        concurrency: 10,
        maxPerUser: 20,
        timeoutMs: 10_000,
        retryBaseMs: 10_000,
        giveUpAfterSeconds: 86_400,
        disableAfterSeconds: 86_400,
        pollMs: 1_000,
      },
    });
  });

  it('converts and keeps given values', () => {
    const c = loadConfig({
      DATABASE_URL: 'postgres://u@h/db',
      PORT: '8080',
      API_PREFIX: '/v1',
      TRUST_PROXY: '10.0.0.0/8, 127.0.0.1',
      CORS_ORIGINS: 'https://a.example, https://b.example',
      REDIS_URL: 'redis://127.0.0.1:6379',
      SHARED_CACHE_SECONDS: '5',
    });
    expect(c).toMatchObject({
      databaseUrl: 'postgres://u@h/db',
      port: 8080,
      apiPrefix: '/v1',
      trustProxy: ['10.0.0.0/8', '127.0.0.1'],
      corsOrigins: ['https://a.example', 'https://b.example'],
      redisUrl: 'redis://127.0.0.1:6379',
      sharedCacheSeconds: 5,
    });
    expect(loadConfig({ TRUST_PROXY: 'true' }).trustProxy).toBe(true);
    expect(
      loadConfig({
        DATABASE_LISTEN_URL: 'postgres://u@primary/db',
        DATABASE_READ_URL: 'postgres://u@r1/db, postgresql://u@r2:5433/db',
      }),
    ).toMatchObject({
      databaseListenUrl: 'postgres://u@primary/db',
      databaseReadUrls: ['postgres://u@r1/db', 'postgresql://u@r2:5433/db'],
    });
    expect(() => loadConfig({ DATABASE_READ_URL: 'postgres://u@r1/db,mysql://r2' })).toThrow(/DATABASE_READ_URL/);
    expect(loadConfig({ TRUST_PROXY: '2' }).trustProxy).toBe(2);
  });

  it('treats an empty variable as unset', () => {
    expect(loadConfig({ PORT: '', DATABASE_URL: '' })).toMatchObject({ port: 3000, databaseUrl: undefined });
  });

  it.each([
    ['PORT', 'eighty', 'must be an integer from 0 to 65535'],
    ['PORT', '70000', 'must be an integer from 0 to 65535'],
    ['BODY_LIMIT', '0', 'must be an integer from 1 to 104857600'],
    ['TOKEN_TTL', '-5', 'must be an integer from 1 to 31536000'],
    ['RATE_LIMIT_MAX', '1.5', 'must be an integer from 1 to 1000000'],
    ['LOG_LEVEL', 'loud', 'must be one of fatal, error, warn, info, debug, trace, silent'],
    ['DATABASE_URL', 'mysql://x', 'must be a postgres:// or postgresql:// URL'],
    ['API_PREFIX', 'v1', 'must be empty or a path such as /v1, without a trailing slash'],
    [
      'TRUST_PROXY',
      'maybe',
      'must be false, true, a hop count (e.g. 1), or comma-separated IP addresses or CIDRs of trusted proxies',
    ],
    ['REDIS_URL', 'http://x', 'must be a redis:// or rediss:// URL'],
    ['PG_POOL_MAX', '0', 'must be an integer from 1 to 1000'],
    ['SHARED_CACHE_SECONDS', '6', 'must be an integer from 0 to 5'],
    ['SHARED_CACHE_SECONDS', '1s', 'must be an integer from 0 to 5'],
    ['WEBHOOK_MAX_PER_USER', '0', 'must be an integer from 1 to 10000'],
    [
      'CORS_ORIGINS',
      'foo',
      'must be *, or comma-separated origins scheme://host[:port] without a path (e.g. https://app.example.com)',
    ],
  ])('a bad %s=%s stops start-up naming the variable and what it must be', (name, value, words) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(`${name}=${JSON.stringify(value)}: ${words}`);
  });

  it("takes WEBHOOK_MAX_PER_USER; the contract's time constants are no settings (tests set them through buildApp's config)", () => {
    expect(loadConfig({ WEBHOOK_MAX_PER_USER: '5' }).webhooks.maxPerUser).toBe(5);
    for (const gone of [
      'EVENT_STREAM_HEARTBEAT',
      'WEBHOOK_TIMEOUT_MS',
      'WEBHOOK_RETRY_BASE_MS',
      'WEBHOOK_GIVE_UP_AFTER',
      'WEBHOOK_DISABLE_AFTER',
      'WEBHOOK_POLL_MS',
    ])
      expect(Object.keys(EnvSchema.properties)).not.toContain(gone);
  });

  it('reports every invalid variable at once, in the order of the schema', () => {
    let error: unknown;
    try {
      loadConfig({ LOG_LEVEL: 'loud', PORT: 'x', RATE_LIMIT_MAX: '300', TRUST_PROXY: '/^x$/' });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).problems).toEqual([
      'PORT="x": must be an integer from 0 to 65535',
      'LOG_LEVEL="loud": must be one of fatal, error, warn, info, debug, trace, silent',
      'TRUST_PROXY="/^x$/": must be false, true, a hop count (e.g. 1), or comma-separated IP addresses or CIDRs of trusted proxies',
    ]);
  });

  it('never repeats a password from a rejected URL', () => {
    expect(() =>
      loadConfig({
        DATABASE_URL: 'mysql://app:s3cret@db/x',
        DATABASE_READ_URL: 'postgres://a:pw1@r1/x,mysql://b:pw2@r2/x',
      }),
    ).toThrow(
      new ConfigError([
        'DATABASE_URL="mysql://app:***@db/x": must be a postgres:// or postgresql:// URL',
        'DATABASE_READ_URL="postgres://a:***@r1/x,mysql://b:***@r2/x": must be postgres:// or postgresql:// URLs separated by commas',
      ]),
    );
  });

  it.each([
    ['*', ['*']],
    ['https://app.example.com', ['https://app.example.com']],
    [
      'http://localhost:5173, https://[::1]:8443,https://a.example',
      ['http://localhost:5173', 'https://[::1]:8443', 'https://a.example'],
    ],
    ['', []],
  ])('CORS_ORIGINS=%j are origins', (value, origins) => {
    expect(loadConfig({ CORS_ORIGINS: value }).corsOrigins).toEqual(origins);
  });

  it.each([
    'foo',
    'https://app.example.com/',
    'https://a.example/path',
    'a.example:443',
    '*, https://a.example',
    'https://a.example,',
  ])('CORS_ORIGINS=%j is not an origin list', (value) => {
    expect(() => loadConfig({ CORS_ORIGINS: value })).toThrow(
      `CORS_ORIGINS=${JSON.stringify(value)}: must be *, or comma-separated origins`,
    );
  });
});

describe('describeConnections', () => {
  it('names hosts, ports and databases, never users or passwords', () => {
    const config = loadConfig({
      REDIS_URL: 'redis://default:redis-pw@cache.internal:6380/2',
      DATABASE_READ_URL: 'postgres://reader:r1-pw@r1.internal/posts,postgresql://reader:r2-pw@r2.internal:5433/posts',
      SHARED_CACHE_SECONDS: '0',
    });
    const described = describeConnections(config, 'postgres://app:db-pw@db.internal:6432/posts');
    expect(described).toEqual({
      database: 'db.internal:6432/posts',
      rateLimitStore: 'Redis cache.internal:6380',
      sharedCache: 'off',
      replicas: 'r1.internal:5432/posts, r2.internal:5433/posts',
    });
    expect(describeConnections(loadConfig({}), 'postgres:///posts?host=/run/postgresql')).toEqual({
      database: '/run/postgresql:5432/posts',
      rateLimitStore: 'memory',
      sharedCache: 's-maxage=1',
      replicas: 'none',
    });
  });
});

describe('loadEnvFile', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'posts-api-env-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  async function load(text: string, env: Record<string, string | undefined> = {}) {
    const file = join(dir, `${Math.random()}.env`);
    await writeFile(file, text);
    loadEnvFile(file, env);
    return env;
  }

  it('adds the variables of the file; one set in the environment, even empty, wins', async () => {
    const env = await load(
      '# a comment\n\nRATE_LIMIT_MAX=7\nexport LOG_LEVEL=warn\nAPI_PREFIX="/v1" # inline comment\nPORT=4000\nDATABASE_URL=postgres://file/db\n' +
        'CORS_ORIGINS=\'https://a.example\'\nMULTI="two\nlines"\nPOSTGRES_PASSWORD=compose-only\n',
      { PORT: '5000', DATABASE_URL: '' },
    );
    expect(env).toEqual({
      RATE_LIMIT_MAX: '7',
      LOG_LEVEL: 'warn',
      API_PREFIX: '/v1',
      PORT: '5000',
      DATABASE_URL: '',
      CORS_ORIGINS: 'https://a.example',
      MULTI: 'two\nlines',
      POSTGRES_PASSWORD: 'compose-only',
    });
    expect(loadConfig(env)).toMatchObject({
      rateLimit: { max: 7 },
      logLevel: 'warn',
      apiPrefix: '/v1',
      port: 5000,
      databaseUrl: undefined,
    });
  });

  it('takes .env.example as it is, compose-only variables included', async () => {
    const { readFile } = await import('node:fs/promises');
    const env = await load(await readFile(new URL('../../.env.example', import.meta.url), 'utf8'));
    expect(env.POSTGRES_USER).toBe('posts');
    expect(loadConfig(env)).toEqual(loadConfig({}));
  });

  it('is fine without a file', () => {
    const env = {};
    loadEnvFile(join(dir, 'missing.env'), env);
    expect(env).toEqual({});
  });

  it.each([
    ['RATE_LIMIT_MAX=7\nRATE_LIMIT_MAX 8\n', 'line 2: expected NAME=value, found "RATE_LIMIT_MAX 8"'],
    ['PORT\n', 'line 1: expected NAME=value, found "PORT"'],
    ['1PORT=3\n', 'line 1: expected NAME=value, found "1PORT=3"'],
    ['A=1\nB="never closed\nC=3\n', 'line 2: the quote " is never closed'],
  ])('a malformed file is an error naming the line: %j', async (text, message) => {
    await expect(load(text)).rejects.toThrow(ConfigError);
    await expect(load(text)).rejects.toThrow(message);
  });
});
