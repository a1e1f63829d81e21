/** Arguments (usage: exit 64) and --help, named as the user typed the command; nothing heavy is imported here. */
import { relative } from 'node:path';
import { parseArgs, type ParseArgsConfig } from 'node:util';

type Options = NonNullable<ParseArgsConfig['options']>;

/** What parseArgs makes of a command's arguments: its options' values by name, and the positionals. */
export type ParsedCommandLine<O extends Options = Options> = ReturnType<
  typeof parseArgs<{ args: string[]; options: O; allowPositionals: true; strict: true }>
>;

export interface CommandSpec {
  scripts: readonly string[];
  /** Its word after the entry file when run without npm (`cli.js seed`). */
  subcommand?: string;
  synopsis?: string;
  help: string;
  options?: Options;
  positionals?: number;
}

function invocation(spec: CommandSpec): string {
  const script = process.env.npm_lifecycle_event;
  if (script !== undefined && spec.scripts.includes(script))
    return script === 'start' ? 'npm start' : `npm run ${script}`;
  const entry = relative(process.cwd(), process.argv[1] ?? '');
  return [entry.endsWith('.ts') ? 'npx tsx' : 'node', entry, spec.subcommand].filter(Boolean).join(' ');
}

export function usageLine(spec: CommandSpec): string {
  const command = invocation(spec);
  if (!spec.synopsis) return `usage: ${command}`;
  // npm passes on only what follows `--`.
  return `usage: ${command}${command.startsWith('npm ') ? ' --' : ''} ${spec.synopsis}`;
}

export function exitWithUsage(spec: CommandSpec, reason: string): never {
  console.error(`${reason}\n${usageLine(spec)}\n(--help for more)`);
  process.exit(64);
}

export function parseCommandLine<const O extends Options = Options>(
  spec: CommandSpec & { options?: O },
  args: string[],
): ParsedCommandLine<O> {
  if (args.includes('--help') || args.includes('-h')) {
    console.log(`${usageLine(spec)}\n\n${spec.help.trimEnd()}`);
    process.exit(0);
  }
  try {
    const parsed = parseArgs({ args, options: (spec.options ?? {}) as O, allowPositionals: true, strict: true });
    const given = parsed.positionals.length;
    const expected = spec.positionals ?? 0;
    if (given > expected) exitWithUsage(spec, `unexpected argument '${parsed.positionals[expected]}'`);
    if (given < expected) exitWithUsage(spec, `missing argument: ${spec.synopsis ?? ''}`.trim());
    return parsed;
  } catch (error) {
    // parseArgs' errors (unknown option, missing value): the first sentence is the reason, the rest about `--`.
    if (!String((error as { code?: unknown }).code).startsWith('ERR_PARSE_ARGS')) throw error;
    exitWithUsage(spec, (error as Error).message.split('. ')[0]!);
  }
}
