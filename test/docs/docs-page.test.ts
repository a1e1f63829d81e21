/**
 * /docs in a real browser (Debian's chromium, driven by playwright-core): the
 * page loads from a listening server, "Try it out" → "Execute" on GET /posts,
 * POST /users and POST /tokens shows their documented answers, the token
 * authorizes the page, and POST /posts then succeeds. Padlocks: none on public
 * operations, open on the others until the page is authorized, closed after.
 * Skipped where no chromium is installed (.ci/run installs it).
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type Page } from 'playwright-core';
import { seed } from '../../src/dev/seed.js';
import { useTestApp } from '../helpers/factories.js';
import { DEMO_ID } from '../../src/schemas/common.js';

const CHROMIUM = '/usr/bin/chromium';
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

describe.skipIf(!existsSync(CHROMIUM))('the /docs page in chromium', { timeout: 120_000 }, () => {
  const t = useTestApp();
  let browser: Browser;
  let page: Page;
  /** What the browser refused under the page's Content-Security-Policy, through the whole file. */
  const refused: string[] = [];

  beforeAll(async () => {
    await seed(t.app.db, { posts: 20, demo: true });
    const address = await t.app.listen({ port: 0, host: '127.0.0.1' });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
    page = await browser.newPage();
    page.on('console', (message) => {
      if (message.type() === 'error' && /Content Security Policy/i.test(message.text())) refused.push(message.text());
    });
    await page.goto(`${address}/docs`);
    await page.locator('#operations-posts-listPosts').waitFor();
  }, 60_000);
  afterAll(() => browser?.close());

  /** Opens an operation, presses "Try it out" and "Execute", and returns the status and body the page shows. */
  async function tryItOut(id: string): Promise<{ status: number; body: string }> {
    const operation = page.locator(`#${id}`);
    if (!(await operation.locator('.try-out__btn').isVisible()))
      await operation.locator('.opblock-summary').first().click();
    await operation.locator('.try-out__btn').click();
    await operation.locator('button.execute').click();
    const live = operation.locator('.live-responses-table .response');
    await live.waitFor();
    const status = Number(await live.locator('.response-col_status').first().innerText());
    const body = await live.locator('.response-col_description .microlight').first().innerText();
    return { status, body };
  }

  const padlock = (id: string) => page.locator(`#${id} .opblock-summary .authorization__btn`);

  it('shows no padlock on public operations and an open one on the others', async () => {
    for (const id of ['operations-posts-listPosts', 'operations-users-createUser', 'operations-tokens-createToken'])
      await expect.poll(() => padlock(id).count(), { message: id }).toBe(0);
    for (const id of ['operations-posts-createPost', 'operations-users-getMe'])
      expect(await padlock(id).getAttribute('aria-label'), id).toBe('authorization button unlocked');
  });

  it('GET /posts: its examples list the seeded posts', async () => {
    const { status, body } = await tryItOut('operations-posts-listPosts');
    expect(status).toBe(200);
    const page1 = JSON.parse(body) as { data: { id: number; title: string; author: { id: number } }[]; total: number };
    expect(page1.total).toBe(21);
    expect(page1.data[0]).toEqual({
      id: 1,
      title: expect.any(String),
      createdAt: expect.any(String),
      author: { id: 1, name: expect.any(String) },
    });
  });

  it('POST /users signs Ada up; POST /tokens logs the demo account in', async () => {
    const signUp = await tryItOut('operations-users-createUser');
    expect(signUp.status).toBe(201);
    expect(JSON.parse(signUp.body)).toMatchObject({ name: 'Ada', email: 'ada@example.com', role: 'user' });
    const logIn = await tryItOut('operations-tokens-createToken');
    expect(logIn.status).toBe(201);
    const { token, user } = JSON.parse(logIn.body) as { token: string; user: { id: number } };
    expect(user.id).toBe(DEMO_ID);

    await page.locator('.auth-wrapper .authorize').click();
    await page.locator('.modal-ux input[type=text]').fill(token);
    await page.locator('.modal-ux button.authorize').click();
    await page.locator('.modal-ux button.btn-done').click();
    for (const id of ['operations-posts-createPost', 'operations-users-getMe'])
      expect(await padlock(id).getAttribute('aria-label'), id).toBe('authorization button locked');
    await expect.poll(() => padlock('operations-posts-listPosts').count()).toBe(0);

    const post = await tryItOut('operations-posts-createPost');
    expect(post.status).toBe(201);
    expect(JSON.parse(post.body)).toMatchObject({ id: 21, title: 'Hello', body: 'First post', authorId: DEMO_ID });
  });

  it('breaks no rule of its Content-Security-Policy (no console error, on load or on use)', () => {
    expect(refused).toEqual([]);
  });
});
