/**
 * Typed consumers get types (issue 48 §3): the types openapi-typescript generates from the document the live
 * service serves are enough for a strict client (test/fixtures/typed-consumer/consumer.ts) to create a user, its
 * token and posts, page /posts by cursor to its end and read /events, narrowing each event by its type to its data.
 * The types are generated into a temporary folder, the consumer is compiled against them (--strict, no emit) and
 * then run against the service. Before Event became a union by type, `event.data` was an open object, and the
 * consumer's narrowing to a post's title did not compile.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createPost, useTestApp } from '../helpers/factories.js';

const CONSUMER = fileURLToPath(new URL('../fixtures/typed-consumer/consumer.ts', import.meta.url));

/** What consumer.ts exports (it cannot be imported statically: its types exist only once generated). */
interface Consumer {
  consume(
    baseUrl: string,
    email: string,
  ): Promise<{
    userId: number;
    keptId: number;
    goneId: number;
    postIds: number[];
    pages: number;
    titles: string[];
    redacted: number[];
    deleted: number[];
  }>;
}

const t = useTestApp();
const author = t.user();
let base: string;
let generated: string;

beforeAll(async () => {
  base = await t.app.listen({ port: 0, host: '127.0.0.1' });
  generated = await mkdtemp(join(tmpdir(), 'typed-consumer-'));
  const document = await (await fetch(`${base}/openapi.json`)).text();
  // A .ts file rather than a .d.ts: skipLibCheck (for node_modules) would skip checking it.
  await writeFile(join(generated, 'api.ts'), astToString(await openapiTS(document)));
});
afterAll(async () => {
  if (generated) await rm(generated, { recursive: true, force: true });
});

/** tsc --strict --noEmit on the consumer; rootDirs lets its `./api.js` be the generated file. */
function compile(): string {
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    noUnusedLocals: true,
    target: ts.ScriptTarget.ES2023,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    lib: ['lib.es2023.d.ts', 'lib.dom.d.ts'],
    types: [],
    skipLibCheck: true,
    rootDirs: [dirname(CONSUMER), generated],
  };
  const program = ts.createProgram([CONSUMER], options);
  const host = ts.createCompilerHost(options);
  return ts.formatDiagnostics(ts.getPreEmitDiagnostics(program), host);
}

it('the consumer holds no cast: no `as`, no `<T>x`, no `!`', async () => {
  const source = ts.createSourceFile(CONSUMER, await readFile(CONSUMER, 'utf8'), ts.ScriptTarget.ES2023);
  const casts: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isAsExpression(node) || ts.isTypeAssertionExpression(node) || ts.isNonNullExpression(node))
      casts.push(node.getText(source));
    ts.forEachChild(node, visit);
  };
  visit(source);
  expect(casts).toEqual([]);
});

it('compiles with --strict against the types generated from the document', () => {
  expect(compile()).toBe('');
});

it('runs against the live service: posts paged to the end, events narrowed by type', async () => {
  const before = [];
  for (const title of ['First', 'Second', 'Third']) before.push(await createPost(t.app, author, { title }));
  const { consume } = (await import(pathToFileURL(CONSUMER).href)) as Consumer;
  const consumed = await consume(base, `typed-${process.pid}@example.com`);

  const { keptId, goneId } = consumed;
  expect(consumed.postIds).toEqual([...before.map((post) => post.id), keptId]);
  expect(consumed.pages).toBe(2);
  expect(consumed.titles).toEqual([...before.map((post) => post.title), 'Kept']);
  expect(consumed.redacted).toEqual([goneId]);
  expect(consumed.deleted).toEqual([goneId]);
});
