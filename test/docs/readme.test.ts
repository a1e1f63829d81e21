/**
 * The README's walk-through, run as a reader pastes it: its curl commands, in
 * order, in one bash session (TOKEN carries over), against a freshly started
 * service on an empty database. Under each command the README shows what comes
 * back in `# ` lines (a continuation line starts with `#  `); each must hold:
 * a status line, header lines (`name: value`), a body. `…` stands for anything
 * and any timestamp for any timestamp; the rest must match the service byte
 * for byte. Only the port differs (the README's 3000 may be taken here).
 * A vitest test rather than a script under .ci/: it starts the production app
 * on a fresh database like every other test, and runs in `npm test`, so a
 * drift shows before CI does.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { readFileSync } from 'node:fs';
import { beforeAll, expect, it } from 'vitest';
import { useTestApp } from '../helpers/factories.js';

interface Step {
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
async function run(steps: Step[], port: number): Promise<string[]> {
  const marker = '@@@readme-step@@@';
  const script = steps
    .map((step) => `printf '\\n${marker}\\n'\n${step.command.replaceAll('localhost:3000', `localhost:${port}`)}`)
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

const t = useTestApp();
let steps: Step[];
let outputs: string[];
beforeAll(async () => {
  const address = await t.app.listen({ port: 0, host: '127.0.0.1' });
  steps = walkThrough(readFileSync('README.md', 'utf8'));
  outputs = await run(steps, Number(new URL(address).port));
});

it('the walk-through parses into commands, each with what it prints', () => {
  expect(steps.length).toBeGreaterThanOrEqual(9);
  expect(steps[0]).toMatchObject({ command: expect.stringMatching(/^curl -si localhost:3000\/users /), status: 201 });
  expect(steps.filter((step) => step.body !== undefined).length).toBeGreaterThanOrEqual(7);
});

it('the service prints what the README shows, command by command', () => {
  expect(differences(steps, outputs)).toEqual([]);
});

it('a README that shows another status, header or body than the service fails the check', () => {
  const readme = readFileSync('README.md', 'utf8');
  for (const [shownThere, instead, problem] of [
    ['# HTTP/1.1 201 Created', '# HTTP/1.1 200 OK', /the README shows 200, the service answered 201/],
    [
      '# location: /users/1',
      '# location: /users/2',
      /the README shows location: \/users\/2, the service sent \/users\/1/,
    ],
    ['"hasMore":false', '"hasMore":true', /the README shows \{"data":\[…\],"limit":10,"hasMore":true/],
  ] as const) {
    expect(readme).toContain(shownThere);
    const changed = walkThrough(readme.replace(shownThere, instead));
    expect(differences(changed, outputs), instead).toEqual([expect.stringMatching(problem)]);
  }
});
