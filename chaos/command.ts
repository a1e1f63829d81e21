/** `npm run chaos`'s command line, apart from the harness so that --help and usage errors answer at once. */
import { parseCommandLine, type CommandSpec } from '../src/command-line.js';

const CHAOS = {
  scripts: ['chaos'],
  synopsis: '[--short] [--only ids] [--no-build]',
  help: `Fault scenarios against the built service, with a checker of acknowledged writes; writes
chaos/RESULTS.md (a short run: chaos/out/RESULTS.md). Needs root, PostgreSQL's server binaries,
redis-server and pgbouncer. Exits non-zero when any check failed.

  --short       each scenario in seconds, the soak one minute (CI)
  --only ids    comma-separated scenario ids: 1, 2, 3a, 3b, 4, 5, 6
  --no-build    use the existing dist/ instead of building it
  -h, --help    print this help and exit`,
  options: {
    short: { type: 'boolean', default: false },
    only: { type: 'string' },
    'no-build': { type: 'boolean', default: false },
  },
} as const satisfies CommandSpec;
export const { values: flags } = parseCommandLine(CHAOS, process.argv.slice(2));
