/**
 * Graceful close, the app's half of server.ts's close-with-grace: once
 * app.close() begins (preClose, before the listener closes), requests already
 * running finish normally, but their responses say `Connection: close`, so each
 * connection ends with its last response. Node closes only the connections idle
 * at the moment of close(); one whose response ended later would otherwise
 * idle in keep-alive and hold the process past its grace period.
 *
 * A request that still arrives on an open connection gets the contract's 503
 * (with Retry-After and X-Request-Id) from the one error handler, not Fastify's
 * own closing body (app.ts turns return503OnClosing off for that).
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
