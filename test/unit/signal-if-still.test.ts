/**
 * Leftover processes are signalled by PID long after they were started; by then the PID may name another
 * process (pid_max is 32 768 here). One CI run saw the tests' PostgreSQL restart in the middle of the suite
 * ("the database system is in recovery mode") after a test's cleanup sent SIGQUIT to a recorded PID.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { expect, it } from 'vitest';
import { alive, signalIfStill } from '../helpers/processes.js';

it('signals a PID only while its process is the one started (its environment or command line names the marker)', async () => {
  const marker = `/tmp/posts-api-devdb-${process.pid}-${Date.now()}`;
  const stranger = spawn('sleep', ['30'], { stdio: 'ignore', env: { PATH: process.env.PATH, OTHER: '/tmp/else' } });
  const ours = spawn('sleep', ['30'], {
    stdio: 'ignore',
    env: { PATH: process.env.PATH, EMBEDDED_PG_DATA: `${marker}/pg` },
  });
  try {
    expect(await signalIfStill(stranger.pid!, 'SIGKILL', marker)).toBe(false);
    expect(alive(stranger.pid!)).toBe(true);
    const ended = once(ours, 'exit');
    expect(await signalIfStill(ours.pid!, 'SIGKILL', marker)).toBe(true);
    expect(await ended).toEqual([null, 'SIGKILL']);
    // Gone: nothing is signalled.
    expect(await signalIfStill(ours.pid!, 'SIGKILL', marker)).toBe(false);
  } finally {
    stranger.kill('SIGKILL');
    ours.kill('SIGKILL');
  }
});
