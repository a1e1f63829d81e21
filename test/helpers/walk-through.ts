/**
 * The README's walk-through ("A walk through it with curl"): its commands with what the README says
 * each prints, run in one bash session, and the differences. Used by test/docs/readme.test.ts and by
 * deploy/stack-check.ts (the same walk-through through the Compose stack).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

export interface Step {
  command: string;
  status?: number;
  headers: [string, string][];
  body?: string;
}

/** The curl commands of the section "A walk through it with curl", each with what the README says it prints. */
export function walkThrough(readme: string): Step[] {
  const section = /^## A walk through it with curl\n([\s\S]*?)^## /m.exec(readme)?.[1] ?? '';
  const steps: Step[] = [];
  for (const [, block = ''] of section.matchAll(/^```sh\n([\s\S]*?)^```/gm)) {
    let command = '';
    for (const line of block.split('\n')) {
      const step = steps.at(-1);
      if (line.startsWith('#') && step && command === '') {
        const text = line.replace(/^# ?/, '');
        const status = /^HTTP\/[\d.]+ (\d{3})\b/.exec(text);
        const header = /^([a-z][a-z0-9-]*): (.*)$/.exec(text);
        if (status) step.status = Number(status[1]);
        else if (header && step.body === undefined) step.headers.push([header[1]!, header[2]!]);
        else if (text.startsWith(' ') && step.body !== undefined) step.body += text.trimStart();
        else step.body = text;
      } else if (line.trim() !== '') {
        command += `${line}\n`;
        // A command ends where its last line does not continue it (\ or an open $( ).
        const open = (command.match(/\$\(/g) ?? []).length > (command.match(/\)/g) ?? []).length;
        if (!line.endsWith('\\') && !open) {
          steps.push({ command: command.trimEnd(), headers: [] });
          command = '';
        }
      }
    }
  }
  return steps;
}

const TIMESTAMP = /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/g;
/** What the README shows as a pattern: `…` is anything, a timestamp is any timestamp, the rest literal. */
function shown(text: string): RegExp {
  const parts = text.split(/(…|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)/);
  const source = parts
    .map((part) =>
      part === '…'
        ? '.*'
        : TIMESTAMP.test(((TIMESTAMP.lastIndex = 0), part))
          ? TIMESTAMP.source
          : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'),
    )
    .join('');
  return new RegExp(`^${source}$`, 's');
}

/** Runs the commands in one bash session (not blocking: the service answers from this process); returns what each printed. */
export async function run(steps: Step[], port: number, host = 'localhost'): Promise<string[]> {
  const marker = '@@@readme-step@@@';
  const script = steps
    .map((step) => `printf '\\n${marker}\\n'\n${step.command.replaceAll('localhost:3000', `${host}:${port}`)}`)
    .join('\n');
  const { stdout } = await promisify(execFile)('bash', ['-c', script], { encoding: 'utf8', timeout: 60_000 });
  return stdout.split(`\n${marker}\n`).slice(1);
}

/** Differences between what the README shows and what the service printed. */
export function differences(steps: Step[], outputs: string[]): string[] {
  const problems: string[] = [];
  steps.forEach((step, i) => {
    const output = (outputs[i] ?? '').replace(/\r\n/g, '\n');
    const [head, body] =
      step.command.includes(' -si ') || step.command.includes(' -i ') ? splitResponse(output) : ['', output];
    const where = step.command.split('\n')[0];
    if (step.status !== undefined) {
      const status = Number(/^HTTP\/[\d.]+ (\d{3})/.exec(head)?.[1]);
      if (status !== step.status)
        problems.push(`${where}: the README shows ${step.status}, the service answered ${status}`);
    }
    for (const [name, value] of step.headers) {
      const actual = head
        .split('\n')
        .find((line) => line.toLowerCase().startsWith(`${name}: `))
        ?.slice(name.length + 2);
      if (actual === undefined || !shown(value).test(actual))
        problems.push(`${where}: the README shows ${name}: ${value}, the service sent ${actual}`);
    }
    if (step.body !== undefined && !shown(step.body).test(body.trim()))
      problems.push(`${where}: the README shows ${step.body}, the service answered ${body.trim()}`);
  });
  return problems;
}

function splitResponse(output: string): [string, string] {
  const end = output.indexOf('\n\n');
  return end < 0 ? [output, ''] : [output.slice(0, end), output.slice(end + 2)];
}
