/**
 * The HTTP ceiling: a bare Fastify route answering GET /posts with the same
 * 20-post JSON the service sends for its first list page, already serialized
 * and held in memory. No database, validation, hooks, headers or logging, so
 * whatever the service achieves is read as a fraction of what Node and
 * Fastify can do at all on this machine for that payload.
 *
 *   node --import tsx bench/baseline-server.ts <payload.json> <port>
 *
 * Prints `listening <port>` once ready; exits on SIGTERM.
 */
import { readFileSync } from 'node:fs';
import Fastify from 'fastify';

const [file, port] = process.argv.slice(2);
if (!file || !port) {
  console.error('usage: baseline-server.ts <payload.json> <port>');
  process.exit(64);
}
const payload = readFileSync(file, 'utf8');

const app = Fastify({ logger: false });
app.get('/posts', (_request, reply) => {
  reply.header('content-type', 'application/json; charset=utf-8').send(payload);
});
process.once('SIGTERM', () => void app.close().then(() => process.exit(0)));
await app.listen({ host: '127.0.0.1', port: Number(port) });
console.log(`listening ${port}`);
