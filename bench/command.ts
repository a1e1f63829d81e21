/** `npm run bench`'s command line, apart from the harness so that --help and usage errors answer at once. */
import { parseCommandLine, type CommandSpec } from '../src/command-line.js';

const BENCH = {
  scripts: ['bench', 'bench:smoke'],
  synopsis:
    '[--smoke] [--rounds N] [--seconds S] [--only ids] [--variant "name=ref[:cache] [KEY=value]…"]… [--peer | --no-peer] [--profile]',
  help: `Runs the benchmark (figures, not tests) and writes bench/RESULTS.md (a smoke run: bench/out/).

  --smoke              a few thousand rows, one short round, no peer (CI)
  --rounds N           rounds (default 3; smoke 1)
  --seconds S          seconds of load per scenario (default 4; smoke 1)
  --only ids           comma-separated scenario ids (the HTTP ceiling always runs)
  --variant name=ref[:cache]
                       also run that git ref's build with its defaults (repeatable): an ablation
                       table; :cache runs it on the edge's scenarios, straight (a build with its
                       own response cache: --variant incache=b9065ea:cache)
  --peer               run the Platformatic DB peer in a smoke run too
  --no-peer            skip the peer in a full run
  --profile            write a V8 CPU profile of each service to bench/out/profiles/
  --node-flags "..."   extra node flags for the service processes
  -h, --help           print this help and exit

BENCH_DATABASE_URL: a PostgreSQL server to use (default: 127.0.0.1:5432 if it answers, else embedded).`,
  options: {
    smoke: { type: 'boolean', default: false },
    profile: { type: 'boolean', default: false },
    rounds: { type: 'string' },
    seconds: { type: 'string' },
    'node-flags': { type: 'string' },
    only: { type: 'string' },
    peer: { type: 'boolean', default: false },
    'no-peer': { type: 'boolean', default: false },
    variant: { type: 'string', multiple: true },
  },
} as const satisfies CommandSpec;
export const { values: flags } = parseCommandLine(BENCH, process.argv.slice(2));
