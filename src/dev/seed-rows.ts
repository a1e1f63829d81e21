/** The rows `npm run seed` generates, as SQL over generate_series (docs/architecture.md, "The demo data"). */
export const YEAR_SECONDS = 365 * 86_400;
/** Users signed up during the month before the first post. */
const SIGN_UP_SECONDS = 30 * 86_400;

/** Uniform in [0, 1) from the ordinal `x` and a salt naming the attribute; both constants, never input. */
function rnd(x: string, salt: number): string {
  return `((hashint8extended((${x})::int8, ${salt}) & 4503599627370495)::float8 / 4503599627370496)`;
}

export const FIRST_NAMES = (
  'Ada Alan Grace Linus Margaret Dennis Barbara Ken Frances Edsger Radia Donald Hedy John Katherine Tim ' +
  'Sophie Niklaus Anita Guido Joan Bjarne Shafi James Lynn Yukihiro Mary Leslie Evelyn Rob Adele Brian ' +
  'Jean Larry Carol Ward Fran Whitfield Annie Vint Ruth Tony Kathleen Butler Susan Charles Ida Andrew'
).split(' ');
export const LAST_NAMES = (
  'Lovelace,Turing,Hopper,Torvalds,Hamilton,Ritchie,Liskov,Thompson,Allen,Dijkstra,Perlman,Knuth,Lamarr,' +
  'McCarthy,Johnson,Berners-Lee,Wilson,Wirth,Borg,van Rossum,Clarke,Stroustrup,Goldwasser,Gosling,Conway,' +
  'Matsumoto,Keller,Lamport,Berezin,Pike,Goldberg,Kernighan,Sammet,Wall,Shaw,Cunningham,Diffie,Easley,Cerf,' +
  'Teitelman,Hoare,Booth,Lampson,Kare,Babbage,Rhodes,Tanenbaum,Estrin'
).split(',');
export const ADJECTIVES = (
  'Understanding,Practical,Notes on,Revisiting,A Gentle Guide to,Debugging,Scaling,Testing,' +
  'Why I Stopped Using,Thoughts on,Benchmarking,The Trouble with,Designing,Migrating to,Lessons from,' +
  'Rethinking,Profiling,Securing,Deploying,Learning'
).split(',');
export const NOUNS = (
  'PostgreSQL,Keyset Pagination,Node.js Streams,TypeScript Generics,Connection Pools,Indexes,Rate Limiting,' +
  'JSON Schemas,HTTP Caching,Event Loops,Transactions,Microservices,REST APIs,Background Jobs,' +
  'Observability,Feature Flags,Docker Images,Load Balancers,Unit Tests,Monorepos,Error Handling,Time Zones,' +
  'Unicode,Code Review,Garbage Collection'
).split(',');
const CORPUS_TEXT =
  'The first version worked on my laptop and failed in production within an hour. The database was fine; the ' +
  'pool was not. Every request opened a transaction, waited on a lock held by a slow report, and the queue grew ' +
  'until the load balancer gave up. We measured before changing anything. The flame graph showed most of the time ' +
  'in serialization, not in the queries we had suspected. Moving the date formatting into SQL halved the cost of a ' +
  'list page. Then we looked at pagination. Offset pages are simple and users like page numbers, but the database ' +
  'still walks every skipped row, so page ten thousand costs ten thousand times page one. A cursor remembers where ' +
  'the last page ended and asks only for what follows, using an index that matches the order. Totals were the next ' +
  'surprise: counting a large table on every request is a full scan in disguise. Keeping the count in a small table, ' +
  'updated in the same transaction as the write, makes it exact and cheap. None of this is new. It is written down ' +
  'in old mailing list threads and in the documentation, which rewards a slow reading. What surprised me was how ' +
  'much of the work was deciding what the service promises: which errors a client may see, which fields it may ' +
  'send back, what happens to a cursor when its item is deleted. Once the contract was clear, the code got smaller. ' +
  'Tests against a real database caught more bugs than any mock ever did, and they run in seconds when each file ' +
  'gets a fresh copy of a migrated template. I would do it again, with fewer abstractions and more measurements. ' +
  'If you try this at home, start with the slow query log, keep an eye on the connection count, and remember that ' +
  'the fastest request is the one the cache answers. Questions and corrections are welcome in the comments below; ' +
  'I read all of them, even when I am too slow to reply. Thanks to everyone who reviewed the draft of this post.';
// Doubled, so a substring starting anywhere in the first copy never runs short.
export const CORPUS = `${CORPUS_TEXT} ${CORPUS_TEXT}`;
export const WORD_STARTS = [...CORPUS_TEXT.matchAll(/(?<=^|\. )[A-Z]/g)].map((m) => m.index + 1);

/** Seeded text has no long tail: a few titles end with this word, so a rare-word search has something to find. */
export const RARE_WORD = 'quokka';
const RARE_WORD_SHARE = 1 / 20_000;

/** Distinct bodies per kind; rows pick one by hash, so no text is cut per row. */
const TEXT_VARIANTS = 4096;

/** Each about `length` characters, from a sentence chosen by `pick` to the end of a word. */
const texts = (table: string, pick: string, length: string) => `
  CREATE TEMP TABLE ${table} ON COMMIT DROP AS
  SELECT k, substr($corpus::text, s, l) || split_part(substr($corpus::text, s + l, 40), ' ', 1) AS body
  FROM generate_series(0, ${TEXT_VARIANTS - 1}) k
  CROSS JOIN LATERAL (SELECT ($starts::int4[])[1 + floor(${pick} * cardinality($starts::int4[]))::int4] AS s, ${length} AS l) x`;

export const POST_TEXTS = texts('seed_post_texts', rnd('k', 31), `30 + floor(1500 * ${rnd('k', 32)} ^ 3)::int4`);
export const COMMENT_TEXTS = texts('seed_comment_texts', rnd('k', 33), `8 + floor(600 * ${rnd('k', 34)} ^ 3)::int4`);

/** Named placeholders ($name) become positional parameters. */
export function bind(text: string, params: Record<string, unknown>): { text: string; values: unknown[] } {
  const names: string[] = [];
  const out = text.replace(/\$([a-zA-Z]+)/g, (_, name: string) => {
    if (!(name in params)) throw new Error(`seed: no value for $${name}`);
    let i = names.indexOf(name);
    if (i < 0) i = names.push(name) - 1;
    return `$${i + 1}`;
  });
  return { text: out, values: names.map((n) => params[n]) };
}

// Ordinals in this run: u users, i posts, j comments; $n posts, $m comments, $users users; $start the first post's time.
const POST_TIME = `((i + ${rnd('i', 1)}) / $n::int8)`;
/** A comment's position on the timeline, and the post it answers (an ordinal < the posts existing by then). */
const COMMENT_PLAN = `
  generate_series($from::int8, $to::int8 - 1) j
  CROSS JOIN LATERAL (SELECT (j + ${rnd('j', 11)}) / $m::int8 AS tau) t
  CROSS JOIN LATERAL (SELECT LEAST($n::int8, GREATEST(1, floor($n::int8 * t.tau)::int8)) AS avail) a
  CROSS JOIN LATERAL (SELECT CASE
      WHEN j = 0 THEN 0
      WHEN ${rnd('j', 12)} < 0.1 THEN
        floor(floor(${rnd('j', 13)} * (floor((a.avail - 1) * $popular::int8 / $n::int8) + 1)) * $n::int8 / $popular::int8)::int8
      ELSE a.avail - 1 - floor(a.avail * ${rnd('j', 13)} ^ 2)::int8
    END AS p) c`;

export const INSERT_USERS = `
  INSERT INTO users (id, email, name, role, password_hash, created_at, updated_at) OVERRIDING SYSTEM VALUE
  SELECT $userBase::int8 + u, lower(replace(f.first || '.' || f.last, ' ', '')) || '.' || ($userBase::int8 + u) || '@example.com',
    f.first || ' ' || f.last, 'user', $hash::text, f.at, f.at
  FROM generate_series($from::int8, $to::int8 - 1) u
  CROSS JOIN LATERAL (SELECT
    ($first::text[])[1 + floor(${rnd('u', 21)} * cardinality($first::text[]))::int4] AS first,
    ($last::text[])[1 + floor(${rnd('u', 22)} * cardinality($last::text[]))::int4] AS last,
    $start::timestamptz - make_interval(secs => ${rnd('u', 23)} * ${SIGN_UP_SECONDS}) AS at) f`;

export const INSERT_POSTS = `
  INSERT INTO posts (id, author_id, title, body, version, created_at, updated_at) OVERRIDING SYSTEM VALUE
  SELECT $postBase::int8 + i,
    $userBase::int8 + CASE WHEN i = 0 THEN 0 ELSE floor($users::int8 * ${rnd('i', 4)} ^ 2)::int8 END,
    ($adjectives::text[])[1 + floor(${rnd('i', 5)} * cardinality($adjectives::text[]))::int4] || ' ' ||
      ($nouns::text[])[1 + floor(${rnd('i', 6)} * cardinality($nouns::text[]))::int4] ||
      CASE WHEN ${rnd('i', 7)} < 0.3 THEN ', part ' || (1 + floor(${rnd('i', 8)} * 12)::int4) ELSE '' END ||
      CASE WHEN ${rnd('i', 10)} < ${RARE_WORD_SHARE} THEN ' ' || '${RARE_WORD}' ELSE '' END,
    b.body,
    CASE WHEN t.edited THEN 2 ELSE 1 END,
    t.created,
    CASE WHEN t.edited THEN t.created + (now() - t.created) * ${rnd('i', 3)} ^ 2 ELSE t.created END
  FROM generate_series($from::int8, $to::int8 - 1) i
  CROSS JOIN LATERAL (SELECT $start::timestamptz + make_interval(secs => ${POST_TIME} * ${YEAR_SECONDS}) AS created,
    ${rnd('i', 2)} < 0.25 AS edited) t
  JOIN seed_post_texts b ON b.k = floor(${rnd('i', 9)} * ${TEXT_VARIANTS})::int4`;

export const INSERT_COMMENTS = `
  INSERT INTO comments (id, post_id, author_id, body, version, created_at, updated_at) OVERRIDING SYSTEM VALUE
  SELECT $commentBase::int8 + j, $postBase::int8 + c.p,
    $userBase::int8 + CASE WHEN j = 0 THEN 0 ELSE floor($users::int8 * ${rnd('j', 14)})::int8 END,
    b.body,
    CASE WHEN e.edited THEN 2 ELSE 1 END,
    e.created,
    CASE WHEN e.edited THEN e.created + (now() - e.created) * ${rnd('j', 15)} ^ 3 ELSE e.created END
  FROM ${COMMENT_PLAN}
  CROSS JOIN LATERAL (SELECT $start::timestamptz + make_interval(secs =>
      GREATEST(t.tau, ((c.p + ${rnd('c.p', 1)}) / $n::int8)) * ${YEAR_SECONDS}) AS created,
    ${rnd('j', 18)} < 0.1 AS edited) e
  JOIN seed_comment_texts b ON b.k = floor(${rnd('j', 17)} * ${TEXT_VARIANTS})::int4`;
