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
import { readFileSync } from 'node:fs';
import { beforeAll, expect, it } from 'vitest';
import { useTestApp } from '../helpers/factories.js';
import { differences, run, walkThrough, type Step } from '../helpers/walk-through.js';

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
