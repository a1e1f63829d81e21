/** What a crash of the embedded development database leaves behind, cleared before it starts again. */
import { readFile, readlink, realpath, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const ORPHAN_STOP_TIMEOUT_MS = 30_000;

/**
 * PostgreSQL ignores a dead PID, but not one reused by another process, nor an orphaned server whose Node parent was
 * killed: stopped, unless a live Node process still owns it (then its PIDs and port are returned).
 */
export async function clearStalePostmaster(
  dataDir: string,
  log: (msg: string) => void,
): Promise<{ pid: number; parent: number; port: number } | undefined> {
  const pidFile = join(dataDir, 'postmaster.pid');
  // Its lines: PID, data folder, start time, port, ...
  let lines: string[];
  try {
    lines = (await readFile(pidFile, 'utf8')).split('\n');
  } catch {
    return; // no file: clean shutdown
  }
  const pid = Number(lines[0]);
  if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) {
    log(`removing stale ${pidFile} (PID ${pid} is not running)`);
    await rm(pidFile, { force: true });
    return;
  }
  // Identifying the process needs /proc; elsewhere PostgreSQL decides alone.
  if (process.platform !== 'linux') return;

  // The postmaster's working directory is its data folder.
  const [exe, cwd, dataReal] = await Promise.all([
    readlink(`/proc/${pid}/exe`).catch(() => ''),
    realpath(`/proc/${pid}/cwd`).catch(() => ''),
    realpath(dataDir),
  ]);
  if (!exe.endsWith('/postgres') || cwd !== dataReal) {
    log(`removing stale ${pidFile} (PID ${pid} is now an unrelated process)`);
    await rm(pidFile, { force: true });
    return;
  }

  const ppid = await parentPid(pid);
  const parentExe = ppid === undefined ? '' : await readlink(`/proc/${ppid}/exe`).catch(() => '');
  if (parentExe !== '' && parentExe === (await realpath(process.execPath).catch(() => process.execPath))) {
    return { pid, parent: ppid!, port: Number(lines[3]) };
  }
  log(`stopping orphaned embedded PostgreSQL (PID ${pid}) left running by an earlier crash`);
  process.kill(pid, 'SIGINT'); // fast shutdown: rolls back open transactions, keeps data
  const deadline = Date.now() + ORPHAN_STOP_TIMEOUT_MS;
  while (isAlive(pid)) {
    if (Date.now() > deadline) throw new Error(`orphaned PostgreSQL PID ${pid} did not stop; kill it and retry`);
    await sleep(100);
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function parentPid(pid: number): Promise<number | undefined> {
  const line = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  // Fields after the parenthesised command name: state, ppid, ...
  const ppid = Number(line.slice(line.lastIndexOf(')') + 2).split(' ')[1]);
  return Number.isInteger(ppid) && ppid > 0 ? ppid : undefined;
}
