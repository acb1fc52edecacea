// Self-check of analyse.mjs on synthetic records: `node --test analyse.test.mjs` (or `npm test`).

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';

import { analyse, analyseRecords, percentile } from './analyse.mjs';

// Window [10 s, 15 s) at P = 1 s: five ticks for each of three jobs.
//   job 0: aligned (offset 0), every tick run 10 ms late, tick 12000 run twice (2nd at 30 ms);
//   job 1: offset 250 ms, run 100 ms late but 500 ms at 14250, tick 12250 never run, and runs
//          just outside the window (9250, 15250) that must not count;
//   job 2: never run, so offset 0 and all five ticks missed.
const WINDOW = { t0: 10_000, t1: 15_000, period: 1_000, jobs: 3 };
const row = (job, tick, late) => ({ job, tick, start: tick + late });
const RECORDS = [
  ...[10_000, 11_000, 12_000, 13_000, 14_000].map((t) => row(0, t, 10)),
  row(0, 12_000, 30),
  ...[9_250, 10_250, 11_250, 13_250, 15_250].map((t) => row(1, t, 100)),
  row(1, 14_250, 500),
];

test('counts executions, missed pairs on an offset grid, and duplicates', () => {
  const r = analyseRecords(RECORDS, WINDOW);
  assert.equal(r.executions, 10); // 6 of job 0, 4 of job 1 in the window
  assert.equal(r.executionsPerSecond, 2);
  assert.equal(r.expected, 15);
  assert.equal(r.missed, 6); // job 1 at 12250, job 2 at all five
  assert.equal(r.missedPercent, 40);
  assert.equal(r.duplicates, 1); // (0, 12000)
  assert.equal(r.offGrid, 0);
  assert.equal(r.kill, null);
});

test('start lateness per execution and worst lateness per tick', () => {
  const r = analyseRecords(RECORDS, WINDOW);
  // Executions: 10 ×5, 30, 100 ×3, 500.
  assert.equal(r.latenessP50, 10);
  assert.equal(r.latenessP99, 500);
  // Ticks 10..14: 100, 100, 30 (job 1 missing there), 100, 500.
  assert.equal(r.lastStartP50, 100);
  assert.equal(r.lastStartP99, 500);
});

test('splits missed pairs at the kill', () => {
  const r = analyseRecords(RECORDS, { ...WINDOW, killMs: 12_500 });
  assert.equal(r.missed, 6);
  // Before: job 1 at 12250, job 2 at 10000, 11000, 12000. After: job 2 at 13000 and 14000.
  assert.deepEqual(r.kill, { missedBefore: 4, lostAfter: 2, expectedAfter: 6, lostAfterPercent: 100 / 3 });
});

test('flags records off their job grid and ignores unknown jobs', () => {
  const r = analyseRecords([row(0, 10_000, 5), row(0, 10_500, 5), row(7, 10_000, 5)], {
    ...WINDOW,
    jobs: 1,
  });
  assert.equal(r.executions, 2);
  assert.equal(r.offGrid, 1);
  assert.equal(r.missed, 4); // 11000..14000
});

test('reads every .rec file of a run directory', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'peers-analyse-'));
  try {
    const lines = (rs) => rs.map((r) => `${r.job} ${r.tick} ${r.start}\n`).join('');
    fs.writeFileSync(path.join(dir, 'a-0.rec'), lines(RECORDS.slice(0, 6)));
    fs.writeFileSync(path.join(dir, 'a-1.rec'), lines(RECORDS.slice(6)));
    fs.writeFileSync(path.join(dir, 'notes.txt'), 'not records\n');
    assert.deepEqual(analyse(dir, WINDOW), analyseRecords(RECORDS, WINDOW));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('nearest-rank percentile', () => {
  assert.equal(percentile([], 50), null);
  assert.equal(percentile([1, 2, 3, 4], 50), 2);
  assert.equal(percentile([1, 2, 3, 4], 99), 4);
  assert.equal(percentile([7], 1), 7);
});
