/**
 * Once closing begins, responses say `Connection: close`: Node closes only the connections idle at close(),
 * and one idle later would hold the process past its grace period. New requests get the contract's 503.
 */
import fp from 'fastify-plugin';
import { serviceUnavailable } from '../errors.js';

export default fp(
  async (app) => {
    let closing = false;
    app.addHook('preClose', async () => {
      closing = true;
    });
    // Callback-style hooks: they run on every request, and async ones cost a promise each.
    app.addHook('onRequest', (_request, _reply, done) => {
      done(closing ? serviceUnavailable('the server is shutting down; retry on a new connection') : undefined);
    });
    app.addHook('onSend', (_request, reply, payload, done) => {
      if (closing) reply.header('connection', 'close');
      done(null, payload);
    });
  },
  { name: 'graceful-close', dependencies: ['errors'] },
);
