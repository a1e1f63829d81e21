import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';

describe('loadConfig', () => {
  it('applies the documented defaults', () => {
    expect(loadConfig({})).toEqual({
      databaseUrl: undefined,
      databaseListenUrl: undefined,
      databaseReadUrls: [],
      databaseReadMaxLagMs: 1_000,
      databasePreparedStatements: true,
      host: '0.0.0.0',
      port: 3000,
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
      publicBaseUrl: undefined,
      tombstoneRetentionSeconds: 86_400,
      responseCacheBytes: 16 * 1_048_576,
      responseCacheMaxAgeMs: 5_000,
      authCacheMs: 1_000,
      embeddedPgPort: 54329,
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
      RESPONSE_CACHE_MAX_AGE_MS: '250',
    });
    expect(c).toMatchObject({
      databaseUrl: 'postgres://u@h/db',
      port: 8080,
      apiPrefix: '/v1',
      trustProxy: ['10.0.0.0/8', '127.0.0.1'],
      corsOrigins: ['https://a.example', 'https://b.example'],
      redisUrl: 'redis://127.0.0.1:6379',
      responseCacheMaxAgeMs: 250,
    });
    expect(loadConfig({ TRUST_PROXY: 'true' }).trustProxy).toBe(true);
    expect(
      loadConfig({
        DATABASE_LISTEN_URL: 'postgres://u@primary/db',
        DATABASE_READ_URL: 'postgres://u@r1/db, postgresql://u@r2:5433/db',
        DATABASE_READ_MAX_LAG_MS: '250',
        DATABASE_PREPARED_STATEMENTS: 'off',
      }),
    ).toMatchObject({
      databaseListenUrl: 'postgres://u@primary/db',
      databaseReadUrls: ['postgres://u@r1/db', 'postgresql://u@r2:5433/db'],
      databaseReadMaxLagMs: 250,
      databasePreparedStatements: false,
    });
    expect(() => loadConfig({ DATABASE_READ_URL: 'postgres://u@r1/db,mysql://r2' })).toThrow(/DATABASE_READ_URL/);
    expect(() => loadConfig({ DATABASE_PREPARED_STATEMENTS: 'auto' })).toThrow(/DATABASE_PREPARED_STATEMENTS/);
    expect(loadConfig({ TRUST_PROXY: '2' }).trustProxy).toBe(2);
  });

  it('treats an empty variable as unset', () => {
    expect(loadConfig({ PORT: '', DATABASE_URL: '' })).toMatchObject({ port: 3000, databaseUrl: undefined });
  });

  it.each([
    ['PORT', 'eighty'],
    ['PORT', '70000'],
    ['BODY_LIMIT', '0'],
    ['TOKEN_TTL', '-5'],
    ['RATE_LIMIT_MAX', '1.5'],
    ['LOG_LEVEL', 'loud'],
    ['DATABASE_URL', 'mysql://x'],
    ['API_PREFIX', 'v1'],
    ['TRUST_PROXY', 'maybe'],
    ['REDIS_URL', 'http://x'],
    ['PG_POOL_MAX', '0'],
    ['RESPONSE_CACHE_MAX_AGE_MS', '0'],
    ['RESPONSE_CACHE_MAX_AGE_MS', '5s'],
    ['AUTH_CACHE_MS', '-1'],
    ['AUTH_CACHE_MS', '60001'],
  ])('a bad %s=%s stops start-up naming the variable', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`^invalid environment variable ${name}=`));
  });
});
