// CPU time from Linux's /proc, in seconds (utime + stime, clock ticks of 1/100 s: `getconf CLK_TCK`).

import fs from 'node:fs';

const CLK_TCK = 100;

/** `[comm, utime + stime in seconds]` of `/proc/<pid>/stat`, or null when the process is gone. */
function stat(pid) {
  let text;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  // Fields after `(comm)` start at state (field 3); utime and stime are fields 14 and 15.
  const fields = text.slice(close + 2).split(' ');
  return [text.slice(open + 1, close), (Number(fields[11]) + Number(fields[12])) / CLK_TCK];
}

/** CPU seconds of `pid` so far, or null when it is gone. */
export function processCpuSeconds(pid) {
  return stat(pid)?.[1] ?? null;
}

/** CPU seconds so far of every process whose comm is in `names`, by pid. */
export function serverCpuByPid(names) {
  const byPid = new Map();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const s = stat(entry);
    if (s !== null && names.includes(s[0])) byPid.set(entry, s[1]);
  }
  return byPid;
}

/**
 * The server's CPU seconds between two `serverCpuByPid` snapshots: each process alive at the end,
 * less what it had at the start (nothing for one started in between).
 */
export function serverCpuBetween(before, after) {
  let total = 0;
  for (const [pid, seconds] of after) total += seconds - (before.get(pid) ?? 0);
  return total;
}
