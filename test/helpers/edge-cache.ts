/**
 * Debian's nginx in front of a running service with deploy/edge-cache.conf,
 * as the deployed edge caches (the test of the caching contract and the bench
 * use it). Its own prefix folder, ports and pid: nothing of the machine's nginx.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { accepts, freePort, waitUntil } from './processes.js';

const SNIPPET = fileURLToPath(new URL('../../deploy/edge-cache.conf', import.meta.url));
export const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((path) => existsSync(path));

export interface EdgeCache {
  /** nginx's master process (its workers are its children). */
  pid: number;
  port: number;
  url: string;
  stop(): Promise<void>;
}

export async function startEdgeCache(upstreamPorts: number[], workers = 1): Promise<EdgeCache> {
  if (NGINX === undefined) throw new Error('nginx is not installed (apt-get install nginx-light)');
  const dir = await mkdtemp(join(tmpdir(), 'posts-api-edge-'));
  await chmod(dir, 0o755);
  const port = await freePort();
  const conf = join(dir, 'nginx.conf');
  await writeFile(
    conf,
    `user root;
worker_processes ${workers};
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  # nginx closes a client's connection after 1 000 requests by default; autocannon sends its next
  # request on it anyway and counts a reset (11 in 78 000 answers at 19 000 req/s).
  keepalive_requests 1000000;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  proxy_cache_path ${dir}/cache keys_zone=edge:10m max_size=256m inactive=1m;
  upstream api {
${upstreamPorts.map((p) => `    server 127.0.0.1:${p};`).join('\n')}
    keepalive 64;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://api;
      include ${SNIPPET};
    }
  }
}
`,
  );
  const child: ChildProcess = spawn(NGINX, ['-p', dir, '-c', conf, '-g', 'daemon off;'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  try {
    await waitUntil(`nginx on ${port}`, async () => {
      if (child.exitCode !== null) throw new Error(`nginx exited: ${stderr}`);
      return accepts(port);
    });
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  return {
    pid: child.pid!,
    port,
    url: `http://127.0.0.1:${port}`,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGQUIT');
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
