// The one analysis every system's run goes through (shedlock, BullMQ, pg-boss alike).
//
// A run directory holds one file per worker process (`*.rec`), each line `<job> <tick_ms> <start_ms>`:
// the job (0..N-1), the Unix-ms due time the system meant that run for, and when the body started.
// Given the measured window [t0, t1) and the period P:
//
// - each job has a tick grid `offset + k·P`, its offset being (the tick of any of its records) mod P
//   (BullMQ's `every` puts each scheduler on a phase of its own; shedlock and pg-boss use offset 0);
//   a job with no record at all uses offset 0. The expected pairs are its grid points in [t0, t1);
// - executions/s: records whose tick is in the window, over the window's seconds;
// - duplicates: (job, tick) pairs in the window with more than one record;
// - missed: expected pairs with no record (count and % of expected); with a kill time, split into
//   those due before it and those due at or after it ("lost");
// - start lateness (start − tick) over the executions in the window: p50 and p99;
// - last start: per tick (executions grouped by floor(tick / P), across jobs), the worst lateness
//   among them, which for aligned grids is the last start minus the tick; p50 and p99 over ticks;
// - off grid: records in the window whose tick is not on their job's grid (a job's records
//   disagreeing about its phase); they count as executions but cover no expected pair.
//
// Percentiles are nearest-rank: the value at rank ceil(p/100 · n) of the sorted sample.

import fs from 'node:fs';
import path from 'node:path';

/** Every record in the `*.rec` files of `dir`, as `{ job, tick, start }` numbers. */
export function readRecords(dir) {
  const records = [];
  for (const name of fs.readdirSync(dir).filter((n) => n.endsWith('.rec')).sort()) {
    for (const line of fs.readFileSync(path.join(dir, name), 'utf8').split('\n')) {
      if (line === '') continue;
      const [job, tick, start] = line.split(' ').map(Number);
      records.push({ job, tick, start });
    }
  }
  return records;
}

/** Nearest-rank percentile `p` (0..100) of an ascending array; null when empty. */
export function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)];
}

const mod = (a, b) => ((a % b) + b) % b;

/**
 * Counts of one run. `window` is `{ t0, t1, period, jobs, killMs? }` (Unix ms, ms, count).
 * Records of jobs outside 0..jobs-1 are left out.
 */
export function analyseRecords(records, { t0, t1, period, jobs, killMs = null }) {
  const offset = new Array(jobs).fill(null);
  for (const r of records) {
    if (r.job >= 0 && r.job < jobs && offset[r.job] === null) offset[r.job] = mod(r.tick, period);
  }

  // Records per (job, tick) in the window, and lateness per execution and per tick.
  const seen = new Map(); // `${job} ${tick}` -> count
  const lateness = [];
  const worstPerTick = new Map(); // floor(tick / P) -> worst lateness
  let executions = 0;
  let offGrid = 0;
  for (const r of records) {
    if (r.job < 0 || r.job >= jobs || r.tick < t0 || r.tick >= t1) continue;
    executions += 1;
    if (mod(r.tick, period) !== offset[r.job]) offGrid += 1;
    const key = `${r.job} ${r.tick}`;
    seen.set(key, (seen.get(key) ?? 0) + 1);
    const late = r.start - r.tick;
    lateness.push(late);
    const slot = Math.floor(r.tick / period);
    worstPerTick.set(slot, Math.max(worstPerTick.get(slot) ?? -Infinity, late));
  }

  let expected = 0;
  let missed = 0;
  let missedBeforeKill = 0;
  let expectedAfterKill = 0;
  let lostAfterKill = 0;
  for (let job = 0; job < jobs; job++) {
    const phase = offset[job] ?? 0;
    const first = Math.ceil((t0 - phase) / period) * period + phase;
    for (let tick = first; tick < t1; tick += period) {
      expected += 1;
      const after = killMs !== null && tick >= killMs;
      if (after) expectedAfterKill += 1;
      if (seen.has(`${job} ${tick}`)) continue;
      missed += 1;
      if (killMs === null) continue;
      if (after) lostAfterKill += 1;
      else missedBeforeKill += 1;
    }
  }

  let duplicates = 0;
  for (const count of seen.values()) if (count > 1) duplicates += 1;

  lateness.sort((a, b) => a - b);
  const perTick = [...worstPerTick.values()].sort((a, b) => a - b);
  return {
    executions,
    executionsPerSecond: executions / ((t1 - t0) / 1000),
    expected,
    missed,
    missedPercent: expected === 0 ? 0 : (100 * missed) / expected,
    duplicates,
    offGrid,
    latenessP50: percentile(lateness, 50),
    latenessP99: percentile(lateness, 99),
    lastStartP50: percentile(perTick, 50),
    lastStartP99: percentile(perTick, 99),
    kill:
      killMs === null
        ? null
        : {
            missedBefore: missedBeforeKill,
            lostAfter: lostAfterKill,
            expectedAfter: expectedAfterKill,
            lostAfterPercent: expectedAfterKill === 0 ? 0 : (100 * lostAfterKill) / expectedAfterKill,
          },
  };
}

/** `analyseRecords` over the records of a run directory. */
export function analyse(dir, window) {
  return analyseRecords(readRecords(dir), window);
}
