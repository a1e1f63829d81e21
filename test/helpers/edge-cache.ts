/**
 * Debian's nginx in front of a running service as an operator runs it without
 * Compose: deploy/edge-standalone.sh renders the configuration, which includes
 * deploy/edge-cache.conf (the test of the caching contract and the bench use it).
 * Its own prefix folder, port and pid: nothing of the machine's nginx.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { accepts, freePort, runToEnd, waitUntil } from './processes.js';

const RENDER = fileURLToPath(new URL('../../deploy/edge-standalone.sh', import.meta.url));
export const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((path) => existsSync(path));

/** deploy/edge-standalone.sh's output for `upstream` (host:port) and, if given, `listen`; or why it failed. */
export async function renderEdgeConfig(upstream: string, listen?: string): Promise<string> {
  const { code, stdout, stderr } = await runToEnd(RENDER, listen === undefined ? [upstream] : [upstream, listen]);
  if (code !== 0) throw new Error(`${RENDER} exited with ${code}: ${stderr}`);
  return stdout;
}

export interface EdgeCache {
  /** nginx's master process (its workers are its children). */
  pid: number;
  port: number;
  url: string;
  stop(): Promise<void>;
}

/** The edge in front of `upstream` (host:port), one worker per core, on a free port of 127.0.0.1. */
export async function startEdgeCache(upstream: string): Promise<EdgeCache> {
  if (NGINX === undefined) throw new Error('nginx is not installed (apt-get install nginx-light)');
  const port = await freePort();
  const config = await renderEdgeConfig(upstream, `127.0.0.1:${port}`);
  const dir = await mkdtemp(join(tmpdir(), 'posts-api-edge-'));
  // Started as root, nginx runs its workers as nobody, who must reach the cache in here.
  await chmod(dir, 0o755);
  await writeFile(join(dir, 'nginx.conf'), config);
  // In the foreground, so that this process owns it; otherwise as docs/operations.md says.
  const child: ChildProcess = spawn(NGINX, ['-p', dir, '-c', 'nginx.conf', '-g', 'daemon off;'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  try {
    await waitUntil(`nginx on ${port}`, async () => {
      if (child.exitCode !== null) {
        const log = await readFile(join(dir, 'error.log'), 'utf8').catch(() => '');
        throw new Error(`nginx exited: ${stderr}${log}`);
      }
      return accepts(port);
    });
  } catch (error) {
    child.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
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
