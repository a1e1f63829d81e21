/**
 * `npm run chaos` — fault scenarios against the built service (`node
 * dist/src/server.js`, as production runs it), driven over HTTP as a black box,
 * with a checker that compares what clients were told with what PostgreSQL
 * holds (plain SQL). Every PostgreSQL, Redis, PgBouncer and proxy it kills,
 * slows or fills is its own, on free ports of 127.0.0.1, under a temporary
 * folder; all of it is cleaned up at the end, on failure and on Ctrl-C.
 *
 *   1  PostgreSQL killed (kill -9) under group-committed writes, restarted
 *   2  one of two instances killed (kill -9), restarted
 *   3  failover to a synchronous (3a) and an asynchronous (3b) replica through PgBouncer
 *   4  slow, lossy network to PostgreSQL (4a) and Redis (4b); the LISTEN connection partitioned (4c)
 *   5  exhaustion: connection slots (5a), pool saturated by slow statements (5b), WAL disk full (5c)
 *   6  soak: mixed load with a fault every minute (10 min)
 *
 * `--short`: each in seconds, the soak one minute (CI). `--only 1,2`: those
 * scenarios. Writes chaos/RESULTS.md between its markers (a short run writes
 * chaos/out/RESULTS.md) and exits non-zero when any check failed: a lost or
 * duplicated acknowledged write, a 500, a request past its bound, no recovery.
 * Needs root (PostgreSQL runs as the postgres user, tmpfs mounts), PostgreSQL
 * 15's server binaries, redis-server and pgbouncer.
 */
// The command line first (--help and usage errors exit there), the harness after.
import './command.js';

await import('./harness.js');
