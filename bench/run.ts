/**
 * `npm run bench` — the benchmark (figures, not tests):
 *
 *   1. builds the service for production (`npm run build`);
 *   2. loads the data set (1 000 000 posts, 2 000 000 comments, 1 000 users)
 *      into a database of its own with the seed's bulk SQL, plus a 10 000-post
 *      one, reusing both when a previous run left them at the right size;
 *   3. runs `node dist/src/server.js` on each as a child process, Debian's nginx
 *      with deploy/edge-cache.conf in front of the first (the edge, as deployed),
 *      and the bare Fastify baseline (the HTTP ceiling); the peer, Platformatic
 *      DB v3, with its own Node 22 on its own plain schema in its own database,
 *      holding a copy of the million posts (bench/peer.ts, installed on first use);
 *   4. drives them with autocannon from this process (32 connections),
 *      scenario after scenario, interleaved over several rounds, each right
 *      after what it is compared with (the HTTP ceiling, its twin on the peer,
 *      the same reads straight or without background writes), and after each scenario runs
 *      pgbench with the service's own SQL for it (the database ceiling);
 *   5. writes bench/RESULTS.md (between its markers, keeping the hand-written
 *      text around them): medians of req/s, p50/p99, CPU per request of the
 *      service process (/proc/<pid>/stat) and its peak RSS (VmHWM), as
 *      ratios to the ceilings and the peer measured in the same run, the edge's
 *      hit rates (`X-Cache-Status` answers), and the targets.
 *
 * `npm run bench -- --smoke`: a few thousand rows and one short round, for CI,
 * without the peer (`--peer` adds it; its database is loaded either way);
 * writes bench/out/ instead of RESULTS.md.
 * Either mode exits non-zero if any request timed out, got a non-2xx answer or
 * lost its connection
 * (or a background request another status than expected), and prints a
 * one-line summary.
 * `--variant name=git-ref[:cache]` (repeatable) also runs that ref's build
 * beside the main one, each scenario of its kind between runs of the main
 * instance and the peer, and adds an ablation table (bench/variants.ts, bench/ablation.ts);
 * `:cache`: its kind is the edge's scenarios (a build with an in-process cache:
 * `--variant incache=b9065ea:cache` measures the edge against it).
 * `--profile` also writes a V8 CPU profile of each service to bench/out/profiles/.
 * BENCH_DATABASE_URL: a PostgreSQL server to use (its maintenance database);
 * default: the local one on 127.0.0.1:5432 if it answers, else an embedded one.
 */
// The command line first (--help and usage errors exit there), the harness after.
import './command.js';

await import('./harness.js');
