/**
 * What the bench sends: every scenario (method, path, body, which instance,
 * its target), each peer twin beside the scenario it is compared with, and
 * the context they read (ids picked from the data set, log-ins, own posts).
 */
import type pg from 'pg';
import { RARE_WORD } from '../src/dev/seed-rows.js';
import type { Child } from './processes.js';
import type { Scenario } from './report.js';
import { nextDoomed, takeSnapshot, topUpDoomed, type Session } from './session.js';

export interface Context extends Session {
  /** The service on the big data set, straight; `edge`: nginx in front of it, as deployed. */
  big: Child;
  edge?: Child;
  small: Child;
  baseline: Child;
  /** Platformatic DB on its copy of the big data set; undefined when the peer is skipped. */
  peer?: Child;
  /** Sessions of instances on another database than big's (the peer, variants); the Context's own otherwise. */
  sessions: Map<Child, Session>;
  /** A connection that watches the bench databases' activity, and their names. */
  monitor: pg.Client;
  databases: string[];
  /** The ids of the logged-in users (the same on every copy of the data set). */
  userIds: number[];
  popularPost: number;
  author: { id: number; page: number };
  deepCursor: number;
  secondCursor: number;
  /** The middle page of the seeded posts (25 001 of 50 000), and their last (the `last` link's, ceil(posts / 20)). */
  deepPage: number;
  lastPage: number;
  /** The most prolific author, their post count and their list's middle and last pages. */
  prolific: { id: number; posts: number; middlePage: number; lastPage: number };
  postIds: [number, number];
  /** The mixed load's hot posts, and the posts its comments go to (never a hot one). */
  hotPostIds: [number, number];
  coldPostIds: [number, number];
  /** The last week of the data set's creation times, as createdAfter/createdBefore. */
  week: { after: string; before: string };
}

export const POST = {
  title: 'Benchmarking the posts API',
  body: 'A post written by the benchmark. It has a couple of sentences, like a short real one would, and is deleted after the run.',
};
export const POST_BODY = JSON.stringify(POST);
const COMMENT = 'A comment written by the benchmark, about as long as a short real one; deleted after the run.';
let edits = 0;
const editedTitle = () => `Edited by the benchmark, edit ${(edits += 1)}`;

export function randomId([lo, hi]: [number, number]): number {
  return lo + Math.floor(Math.random() * (hi - lo + 1));
}
const ownPost = (c: Context, user: number) => {
  const posts = c.ownPosts[user]!;
  return posts[Math.floor(Math.random() * posts.length)]!;
};

/** A background request: a comment by a random logged-in user on a random post of the range. */
const commentOn = (c: Context, posts: [number, number]) => ({
  method: 'POST',
  path: `/posts/${randomId(posts)}/comments`,
  headers: {
    'content-type': 'application/json',
    authorization: `Bearer ${c.tokens[randomId([0, c.tokens.length - 1])]!}`,
  },
  body: JSON.stringify({ body: COMMENT }),
});

// `on: 'edge'`: through nginx with deploy/edge-cache.conf, as deployed; most
// repeat one URL, which nginx answers from its cache (no pgbench). Each has an
// "-uncached" twin straight to the same service, which shows what a miss costs
// and carries the database ceiling.
export const CEILING: Scenario<Context> = {
  id: 'ceiling',
  title: 'HTTP ceiling: bare Fastify, same 20-post JSON from memory',
  on: 'baseline',
  method: 'GET',
  path: () => '/posts',
};
const CURSOR_RANDOM: Scenario<Context> = {
  id: 'cursor-random-uncached',
  title: 'GET /posts?after={random id}&limit=20',
  on: 'big',
  method: 'GET',
  path: () => '/posts?after=:id&limit=20',
  randomId: (c) => c.postIds,
};
const LIST_FIRST: Scenario<Context> = {
  id: 'list-first',
  title: 'GET /posts?sort=-createdAt (first page, offset mode, with total)',
  on: 'edge',
  method: 'GET',
  path: () => '/posts?sort=-createdAt',
  target: 0.4,
};
const AUTHOR_PAGE: Scenario<Context> = {
  id: 'author-page-20',
  title: "GET /users/{id}/posts?page=20 (one author's page 20)",
  on: 'edge',
  method: 'GET',
  path: (c) => `/users/${c.author.id}/posts?page=${c.author.page}`,
  target: 0.4,
};
const CURSOR_DEEP: Scenario<Context> = {
  id: 'cursor-deep',
  title: 'GET /posts?after={500 000th id}&limit=20 (cursor at the same depth)',
  on: 'edge',
  method: 'GET',
  path: (c) => `/posts?after=${c.deepCursor}&limit=20`,
  target: 0.4,
};
const CURSOR_FIRST: Scenario<Context> = {
  id: 'cursor-first',
  title: 'GET /posts?limit=20 (first cursor page)',
  on: 'edge',
  method: 'GET',
  path: () => '/posts?limit=20',
  target: 0.4,
};
const POPULAR_COMMENTS: Scenario<Context> = {
  id: 'popular-comments',
  title: "GET /posts/{id}/comments (the most commented post's first page)",
  on: 'edge',
  method: 'GET',
  path: (c) => `/posts/${c.popularPost}/comments`,
  target: 0.3,
};
const CREATE_POST: Scenario<Context> = {
  id: 'create-post',
  title: 'POST /posts (8 users, bearer tokens)',
  on: 'edge',
  method: 'POST',
  path: () => '/posts',
  body: () => POST_BODY,
  authenticated: true,
  target: 0.25,
};

/** The same request straight to the service. */
function uncached(s: Scenario<Context>, on: 'big' | 'small' = 'big', id = `${s.id}-uncached`): Scenario<Context> {
  const { target: _, straight: __, straightTarget: ___, variantTarget: ____, ...request } = s;
  return {
    ...request,
    id,
    title: on === 'small' ? 'same, straight, on the 10 000-post database' : 'same, straight to the service',
    on,
  };
}

/** `s` with the peer's closest equivalent as its twin (and a target as a multiple of it). */
function versusPeer(
  s: Scenario<Context>,
  peer: Omit<Scenario<Context>, 'id' | 'on'>,
  twinTarget?: number,
): Scenario<Context> {
  return { ...s, twin: { ...peer, id: `${s.id.replace(/-uncached$/, '')}-platformatic`, on: 'peer' }, twinTarget };
}

/** A post as the peer's POST and PUT take it: every NOT NULL column, defaults or not, but the id and the timestamps it sets itself. */
export const peerPost = (c: Pick<Context, 'userIds'>, user: number) => ({
  ...POST,
  authorId: c.userIds[user],
  commentCount: 0,
});

/** Platformatic's list query: `where.<field>.<op>`, `orderby.<field>`, `limit`/`offset`, `totalCount` (a COUNT(*)). */
const peerList = (entity: string, query: string) => `/${entity}?${query}`;

// Offset pages at any depth (issue 46), straight to the service, each right
// beside page 1 of the same list: req/s ≥ 1/3 of page 1's. Sorted by id or
// createdAt, a deep page starts where the kept ranks say (post_page_start in
// the migrations); sorted by title or updatedAt (keys that change) it still
// walks OFFSET: reported, not judged. The pages are the seeded list's middle
// and last (the numbers are in the report's context line), so they scale to
// the smoke's data set.
const PAGE_GOAL = 1 / 3;
/** A page number shows in the service's SQL as its offset. */
const PAGE_OFFSET = { value: (page: number) => (page - 1) * 20, expression: '(:id - 1) * 20' };
const postsList = (sort: string | undefined, page?: string) => {
  const query = [...(sort ? [`sort=${sort}`] : []), ...(page ? [`page=${page}`] : [])].join('&');
  return query ? `/posts?${query}` : '/posts';
};
/** Page 1 of `GET /posts` sorted by `sort`: what its deep pages are measured beside. */
const postsPageOne = (sort: string | undefined, name: string): Scenario<Context> => ({
  id: `offset-first${name}-uncached`,
  title: `GET ${postsList(sort)} (page 1, beside its deep pages)`,
  on: 'big',
  method: 'GET',
  path: () => postsList(sort),
});
const POSTS_PAGE_ONE = postsPageOne(undefined, '');
const AUTHOR_PAGE_ONE: Scenario<Context> = {
  id: 'author-first-uncached',
  title: "GET /users/{most prolific}/posts (page 1 of the most prolific author's posts, beside their deep pages)",
  on: 'big',
  method: 'GET',
  path: (c) => `/users/${c.prolific.id}/posts`,
};
/** The middle page of `GET /posts` sorted by `sort`, beside its page 1; `walks`: a sort that still walks OFFSET. */
function middlePage(sort: string | undefined, name: string, walks = false): Scenario<Context> {
  return {
    id: `offset-deep${name}-uncached`,
    title:
      `GET ${postsList(sort, '{middle}')} (the middle page: OFFSET half the posts)` +
      (walks ? ', 8 connections: it walks OFFSET' : ''),
    on: 'big',
    method: 'GET',
    path: (c) => postsList(sort, String(c.deepPage)),
    beside: name === '' ? POSTS_PAGE_ONE : postsPageOne(sort, name),
    // Such a page takes a tenth of a second or more: 32 connections would wait longer for one of
    // the pool's 10 clients than the pool's 3 s (503, by design), measuring the queue; 8 keep the
    // database as busy.
    ...(walks ? { connections: 8 } : { besideTarget: PAGE_GOAL }),
  };
}
const authorPage = (
  s: Pick<Scenario<Context>, 'id' | 'title'> & Partial<Scenario<Context>>,
  page: (c: Context) => string,
): Scenario<Context> => ({
  on: 'big',
  method: 'GET',
  path: (c) => `/users/${c.prolific.id}/posts?page=${page(c)}`,
  beside: AUTHOR_PAGE_ONE,
  besideTarget: PAGE_GOAL,
  ...s,
});
const DEEP_PAGES: Scenario<Context>[] = [
  middlePage(undefined, ''),
  middlePage('id', '-id'),
  middlePage('-id', '-id-desc'),
  middlePage('createdAt', '-created'),
  {
    id: 'offset-last-uncached',
    title: "GET /posts?page={last} (the `last` link's page of the seeded posts: ceil(posts / 20))",
    on: 'big',
    method: 'GET',
    path: (c) => postsList(undefined, String(c.lastPage)),
    beside: POSTS_PAGE_ONE,
    besideTarget: PAGE_GOAL,
  },
  {
    id: 'offset-random-uncached',
    title: 'GET /posts?page={random} (a page drawn from 1 to the last at each request)',
    on: 'big',
    method: 'GET',
    path: () => '/posts?page=:id',
    randomId: (c) => [1, c.lastPage],
    randomIdInSql: PAGE_OFFSET,
    beside: POSTS_PAGE_ONE,
    besideTarget: PAGE_GOAL,
  },
  authorPage(
    {
      id: 'author-deep-uncached',
      title: "GET /users/{most prolific}/posts?page={middle} (the middle of the most prolific author's posts)",
    },
    (c) => String(c.prolific.middlePage),
  ),
  authorPage(
    { id: 'author-last-uncached', title: "GET /users/{most prolific}/posts?page={last} (their list's last page)" },
    (c) => String(c.prolific.lastPage),
  ),
  authorPage(
    {
      id: 'author-random-uncached',
      title: 'GET /users/{most prolific}/posts?page={random} (a page of their list drawn at each request)',
      randomId: (c) => [1, c.prolific.lastPage],
      randomIdInSql: PAGE_OFFSET,
    },
    () => ':id',
  ),
  // The token is the one GET /posts's Link header hands out, taken again right before each window:
  // a page as of a snapshot also walks every post deleted since (their tombstones keep their
  // places), and this run deletes tens of thousands (delete-post-uncached), so a token kept from
  // the setup would cost what the scenarios before it deleted. No pgbench: its recorded SQL would
  // keep the setup's snapshot.
  {
    id: 'offset-deep-snapshot-uncached',
    title:
      'GET /posts?page={middle}&snapshot={token} (the middle page as of a token from the Link header of GET /posts, taken right before each window)',
    on: 'big',
    method: 'GET',
    path: (c) => `/posts?page=${c.deepPage}&snapshot=${encodeURIComponent(c.snapshot?.token ?? '')}`,
    prepare: async (c, url) => {
      if (!c.snapshot)
        throw new Error(`${url}: GET /posts handed out no snapshot token at the setup (a build before issue 46?)`);
      c.snapshot = await takeSnapshot(url);
      if (!c.snapshot) throw new Error(`${url}: GET /posts handed out no snapshot token`);
    },
    pgbench: false,
    beside: POSTS_PAGE_ONE,
    besideTarget: PAGE_GOAL,
  },
  middlePage('title', '-title', true),
  middlePage('-updatedAt', '-updated-desc', true),
];

const HOT_POSTS: Scenario<Context> = {
  id: 'hot-posts',
  title: 'GET /posts/{id}, ids 1–1 000 at random, alone',
  on: 'edge',
  method: 'GET',
  path: () => '/posts/:id',
  randomId: (c) => c.hotPostIds,
};
// The same reads by logged-in users: nginx passes them by (a token), so the edge costs them a hop.
const HOT_POSTS_AUTH: Scenario<Context> = {
  ...HOT_POSTS,
  id: 'hot-posts-auth',
  title: 'GET /posts/{id}, ids 1–1 000 at random, with a bearer token (8 users)',
  authenticated: true,
};

const ALL_SCENARIOS: Scenario<Context>[] = [
  CEILING,
  { ...HOT_POSTS, straight: uncached(HOT_POSTS), variantTarget: 1.5 },
  { ...HOT_POSTS_AUTH, straight: uncached(HOT_POSTS_AUTH), straightTarget: 0.9 },
  { ...LIST_FIRST, variantTarget: 1.5 },
  versusPeer(
    uncached(LIST_FIRST),
    {
      title: 'GET /posts?orderby.createdAt=desc&orderby.id=desc&limit=20&totalCount=true',
      method: 'GET',
      path: () => peerList('posts', 'orderby.createdAt=desc&orderby.id=desc&limit=20&totalCount=true'),
    },
    1.5,
  ),
  uncached(LIST_FIRST, 'small', 'list-first-10k-uncached'),
  AUTHOR_PAGE,
  versusPeer(
    uncached(AUTHOR_PAGE),
    {
      title: 'GET /posts?where.authorId.eq={id}&orderby.id=asc&limit=20&offset=380&totalCount=true',
      method: 'GET',
      path: (c) =>
        peerList(
          'posts',
          `where.authorId.eq=${c.author.id}&orderby.id=asc&limit=20&offset=${(c.author.page - 1) * 20}&totalCount=true`,
        ),
    },
    1.5,
  ),
  ...DEEP_PAGES,
  CURSOR_DEEP,
  versusPeer(uncached(CURSOR_DEEP), {
    title: 'GET /posts?where.id.gt={500 000th id}&orderby.id=asc&limit=20',
    method: 'GET',
    path: (c) => peerList('posts', `where.id.gt=${c.deepCursor}&orderby.id=asc&limit=20`),
  }),
  CURSOR_FIRST,
  uncached(CURSOR_FIRST),
  {
    id: 'cursor-second-uncached',
    title: 'GET /posts?after={20th id}&limit=20 (second cursor page: resolves its cursor like the deep one)',
    on: 'big',
    method: 'GET',
    path: (c) => `/posts?after=${c.secondCursor}&limit=20`,
  },
  versusPeer(
    CURSOR_RANDOM,
    {
      title: 'GET /posts?where.id.gt={random id}&orderby.id=asc&limit=20',
      method: 'GET',
      path: () => peerList('posts', 'where.id.gt=:id&orderby.id=asc&limit=20'),
      randomId: (c) => c.postIds,
    },
    1.2,
  ),
  {
    id: 'post-by-id',
    title: 'GET /posts/{id} (random ids among a million: nearly all misses)',
    on: 'edge',
    method: 'GET',
    path: () => '/posts/:id',
    randomId: (c) => c.postIds,
    target: 0.4,
  },
  versusPeer(
    {
      id: 'post-by-id-uncached',
      title: 'GET /posts/{random id}',
      on: 'big',
      method: 'GET',
      path: () => '/posts/:id',
      randomId: (c) => c.postIds,
    },
    { title: 'GET /posts/{random id}', method: 'GET', path: () => '/posts/:id', randomId: (c) => c.postIds },
    2,
  ),
  POPULAR_COMMENTS,
  uncached(POPULAR_COMMENTS),
  versusPeer(
    {
      id: 'popular-comments-100-uncached',
      title: 'GET /posts/{most commented}/comments?limit=100 (100 comments, cursor mode)',
      on: 'big',
      method: 'GET',
      path: (c) => `/posts/${c.popularPost}/comments?limit=100`,
    },
    {
      title: 'GET /comments?where.postId.eq={id}&orderby.id=asc&limit=100',
      method: 'GET',
      path: (c) => peerList('comments', `where.postId.eq=${c.popularPost}&orderby.id=asc&limit=100`),
    },
    1.5,
  ),
  CREATE_POST,
  versusPeer(
    uncached(CREATE_POST),
    {
      title: 'POST /posts {title, body, authorId, commentCount: 0} (no authentication: it has none)',
      method: 'POST',
      path: () => '/posts',
      body: (c, user) => JSON.stringify(peerPost(c, user)),
    },
    1,
  ),
  versusPeer(
    {
      id: 'create-comment-uncached',
      title: 'POST /posts/{random id}/comments (8 users, bearer tokens)',
      on: 'big',
      method: 'POST',
      path: () => '/posts/:id/comments',
      body: () => JSON.stringify({ body: COMMENT }),
      randomId: (c) => c.coldPostIds,
      authenticated: true,
    },
    {
      title: 'POST /comments {postId, authorId, body}',
      method: 'POST',
      path: () => '/comments',
      body: (c, user) => JSON.stringify({ postId: randomId(c.coldPostIds), authorId: c.userIds[user], body: COMMENT }),
    },
    1,
  ),
  versusPeer(
    {
      id: 'patch-post-uncached',
      title: 'PATCH /posts/{id} {title} (8 users, each on one of 16 posts of theirs)',
      on: 'big',
      method: 'PATCH',
      path: (c, user) => `/posts/${ownPost(c, user)}`,
      body: () => JSON.stringify({ title: editedTitle() }),
      authenticated: true,
    },
    {
      title:
        'PUT /posts/{id} {title, body, authorId, commentCount} (it has no PATCH; its PUT takes every required field)',
      method: 'PUT',
      path: (c, user) => `/posts/${ownPost(c, user)}`,
      body: (c, user) => JSON.stringify({ ...peerPost(c, user), title: editedTitle() }),
    },
    1,
  ),
  // PostgreSQL CPU per delete (issue 46: each delete keeps a tombstone and the kept ranks).
  // Each request deletes a post of its user's; as many as the window can use are created
  // before it, outside it (bench/session.ts). No pgbench: the recorded delete would find its
  // post gone from the second transaction on.
  {
    id: 'delete-post-uncached',
    title: 'DELETE /posts/{id} (8 users, each deleting posts of theirs created for it before each window)',
    on: 'big',
    method: 'DELETE',
    path: (c, user) => `/posts/${nextDoomed(c.doomed, user)}`,
    authenticated: true,
    prepare: (c, url, seconds) => topUpDoomed(c, url, seconds, POST_BODY),
    pgbench: false,
  },
  {
    ...HOT_POSTS,
    id: 'hot-posts-comments',
    title: 'the same reads while 20 comments per second are written on other posts',
    quiet: HOT_POSTS,
    quietTarget: 0.8,
    background: {
      perSecond: 20,
      title: 'POST /posts/{id > 1 000}/comments, authenticated',
      expect: 201,
      request: (c) => commentOn(c, c.coldPostIds),
    },
  },
  // Issue 47's question: is commentCount cheaper kept in the post row than in a row of its own?
  // Reads that show it (20 posts a page) beside comments that change it, 5 % of the requests.
  {
    ...CURSOR_RANDOM,
    id: 'cursor-random-comments-uncached',
    title:
      'GET /posts?after={random id}&limit=20 while 130 comments per second (about 5 %) are written on random posts',
    quiet: CURSOR_RANDOM,
    background: {
      perSecond: 130,
      title: 'POST /posts/{random id}/comments, authenticated',
      expect: 201,
      request: (c) => commentOn(c, c.postIds),
    },
  },
  {
    ...HOT_POSTS,
    id: 'hot-posts-rejected',
    title: 'the same reads while 20 anonymous POST /posts per second are refused (401)',
    quiet: HOT_POSTS,
    quietTarget: 0.95,
    background: {
      perSecond: 20,
      title: 'POST /posts without a token (401)',
      expect: 401,
      request: () => ({
        method: 'POST',
        path: '/posts',
        headers: { 'content-type': 'application/json' },
        body: POST_BODY,
      }),
    },
  },
];

// Richer reads (docs/api.md §10), straight, each beside the plain page it
// refines: its p50 should stay within 2× of that page's. The seeded texts come
// from one corpus of ~300 words, each in at least 2 % of the posts, plus one
// rare word in one title of 20 000 (RARE_WORD, ~50 posts of a million): the
// rare search is that word, the common one `the` (84 %, its total capped at 10 000).
const LIST_FIRST_UNCACHED = uncached(LIST_FIRST);
const LIST_100: Scenario<Context> = {
  id: 'list-100-uncached',
  title: 'GET /posts?sort=-createdAt&perPage=100 (the plain 100-post page)',
  on: 'big',
  method: 'GET',
  path: () => '/posts?sort=-createdAt&perPage=100',
};
const besidePlain = (
  s: Omit<Scenario<Context>, 'on' | 'method' | 'p50Versus'>,
  plain = LIST_FIRST_UNCACHED,
  max = 2,
): Scenario<Context> => ({
  ...s,
  on: 'big',
  method: 'GET',
  p50Versus: { id: plain.id, max },
});
const RICHER_READS: Scenario<Context>[] = [
  besidePlain({
    id: 'search-rare-uncached',
    title: `GET /posts?q=${RARE_WORD} (a word in 1 post of 20 000; first page with total)`,
    path: () => `/posts?q=${RARE_WORD}`,
  }),
  besidePlain({
    id: 'search-common-uncached',
    title: 'GET /posts?q=the (a word in 84 % of the posts; first page, total capped at 10 000)',
    path: () => '/posts?q=the',
  }),
  besidePlain({
    id: 'week-uncached',
    title: "GET /posts?sort=-createdAt&createdAfter=…&createdBefore=… (the last week's posts, first page with total)",
    path: (c) => `/posts?sort=-createdAt&createdAfter=${c.week.after}&createdBefore=${c.week.before}`,
  }),
  // Within 3×, not 2×: the hour floors that made it as cheap as a plain page were retired for a simpler rule.
  besidePlain(
    {
      id: 'week-by-id-uncached',
      title: "GET /posts?createdAfter=…&createdBefore=… (the last week's posts in id order, first page with total)",
      path: (c) => `/posts?createdAfter=${c.week.after}&createdBefore=${c.week.before}`,
    },
    LIST_FIRST_UNCACHED,
    3,
  ),
  besidePlain(
    {
      id: 'include-author-100-uncached',
      title: 'GET /posts?sort=-createdAt&perPage=100&include=author (100 posts with their authors)',
      path: () => '/posts?sort=-createdAt&perPage=100&include=author',
    },
    LIST_100,
  ),
];
ALL_SCENARIOS.push(LIST_100, ...RICHER_READS);

/** The scenarios of a run: all, or those named (`--only`) and the ceiling; a scenario compared with another brings it along. */
export function selectScenarios(only: string[] | undefined): Scenario<Context>[] {
  if (!only) return ALL_SCENARIOS;
  const wanted = new Set([
    ...only,
    ...ALL_SCENARIOS.filter((s) => only.includes(s.id) && s.p50Versus).map((s) => s.p50Versus!.id),
  ]);
  return ALL_SCENARIOS.filter((s) => s.id === 'ceiling' || wanted.has(s.id));
}
