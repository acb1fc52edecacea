#!/usr/bin/env node
// shedlock against two peer schedulers, BullMQ (Redis) and pg-boss (PostgreSQL), each run the way
// its docs run recurring jobs, in one markdown table.
//
//   npm ci                          # once, in benches/peers (Node 20)
//   node run.mjs                    # every shape below, one run after another (about an hour)
//   node run.mjs --quick            # 200 jobs each, 10 s and 2 min windows (about 30 minutes)
//   node run.mjs --only redis       # or postgres: only the shapes on that store
//   node run.mjs --systems bullmq,pgboss   # leave shedlock out (or any of the three)
//   node run.mjs --seconds 60 --minutes 4  # window of the per-second / per-minute shapes
//   node run.mjs --keep             # keep the records (the path is printed)
//
// Shapes, 4 worker processes each:
// - Redis, N jobs every second, N = 1,000, 5,000, 10,000: shedlock, BullMQ default, BullMQ tuned;
// - PostgreSQL, N jobs every minute, N = 10,000, 100,000: shedlock, pg-boss default, pg-boss tuned;
// - PostgreSQL, 10,000 jobs every second: shedlock alone (pg-boss has minute precision);
// - faults, one worker process SIGKILLed halfway through the window: 1,000 jobs every second on
//   Redis (shedlock, BullMQ tuned) and 1,000 jobs every minute on PostgreSQL (shedlock, pg-boss
//   tuned).
//
// A peer run: the schedulers are created from this process (bullmq.mjs / pgboss.mjs `setup`), then
// 4 workers are spawned (bullmq-worker.mjs / pgboss-worker.mjs) and, once all say they are ready,
// a warm-up of 5 s and up to the next whole second (per-second) or minute (per-minute) starts the
// window [t0, t1). CPU is read at t0 and t1 (the workers', and the server's: every process named
// `redis-server` or `postgres`), the workers get SIGTERM after a drain (5 s; 60 s per-minute, for
// the last minute's jobs), the records are analysed (analyse.mjs) and the run's queue or database
// is removed. A shedlock run is `cargo bench --bench fleet_rate` from the repository root, with
// `--records` for the same record files and its `JSON ` line for the window and CPU; its records go
// through the same analysis. Progress goes to stderr, the table to stdout.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { analyse } from './analyse.mjs';
import * as bullmq from './bullmq.mjs';
import { processCpuSeconds, serverCpuBetween, serverCpuByPid } from './lib/procfs.mjs';
import * as pgboss from './pgboss.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '../..');
const PROCESSES = 4;
const WARMUP_MS = 5_000;
const READY_TIMEOUT_MS = 120_000;
const STOP_TIMEOUT_MS = 10_000;
const SERVER_NAMES = { redis: ['redis-server'], postgres: ['postgres'] };

const PEERS = {
  bullmq: {
    module: bullmq,
    script: 'bullmq-worker.mjs',
    args: ({ queueName }) => ['--queue', queueName],
  },
  pgboss: {
    module: pgboss,
    script: 'pgboss-worker.mjs',
    args: ({ url }) => ['--url', url],
  },
};

const HELP = `Usage: node run.mjs [--quick] [--only redis|postgres] [--systems LIST]
                   [--seconds S] [--minutes M] [--keep] [--help]

Runs shedlock (cargo bench --bench fleet_rate), BullMQ and pg-boss on the same shapes, 4 worker
processes each, and prints one markdown table.

  --quick          200 jobs per shape, windows of 10 s / 2 min (unless given)
  --only STORE     only the shapes on redis or on postgres
  --systems LIST   comma-separated subset of shedlock,bullmq,pgboss (default: all three)
  --seconds S      window of the per-second shapes (default 30; quick 10)
  --minutes M      window of the per-minute shapes, in whole minutes (default 3; quick 2)
  --keep           keep the record files and print where they are
  --help           this text

Environment: REDIS_URL (default redis://127.0.0.1:6379), POSTGRES_URL (default
postgres://postgres@127.0.0.1:5432/; pg-boss runs get a database of their own, dropped after).`;

function options() {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      only: { type: 'string' },
      systems: { type: 'string', default: 'shedlock,bullmq,pgboss' },
      seconds: { type: 'string' },
      minutes: { type: 'string' },
      keep: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.log(HELP);
    process.exit(0);
  }
  const systems = values.systems.split(',');
  for (const s of systems) if (!['shedlock', 'bullmq', 'pgboss'].includes(s)) fail(`unknown system ${s}`);
  if (values.only !== undefined && !['redis', 'postgres'].includes(values.only)) fail(`--only ${values.only}`);
  const whole = (v, name) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) fail(`--${name} must be a whole number ≥ 1`);
    return n;
  };
  return {
    quick: values.quick,
    only: values.only,
    systems,
    seconds: values.seconds === undefined ? (values.quick ? 10 : 30) : whole(values.seconds, 'seconds'),
    minutes: values.minutes === undefined ? (values.quick ? 2 : 3) : whole(values.minutes, 'minutes'),
    keep: values.keep,
  };
}

function fail(message) {
  console.error(`run.mjs: ${message}\n\n${HELP}`);
  process.exit(2);
}

/** The runs, in order: `{ system, setting, store, jobs, period, kill }`. */
function plan({ quick, only, systems }) {
  const shapes = quick
    ? [
        { store: 'redis', jobs: 200, period: 1_000, peer: 'bullmq' },
        { store: 'postgres', jobs: 200, period: 60_000, peer: 'pgboss' },
        { store: 'postgres', jobs: 200, period: 1_000, peer: null },
      ]
    : [
        ...[1_000, 5_000, 10_000].map((jobs) => ({ store: 'redis', jobs, period: 1_000, peer: 'bullmq' })),
        ...[10_000, 100_000].map((jobs) => ({ store: 'postgres', jobs, period: 60_000, peer: 'pgboss' })),
        { store: 'postgres', jobs: 10_000, period: 1_000, peer: null },
      ];
  const runs = [];
  for (const { peer, ...shape } of shapes) {
    runs.push({ ...shape, kill: false, system: 'shedlock', setting: null });
    if (peer === null) continue;
    runs.push({ ...shape, kill: false, system: peer, setting: 'default' });
    runs.push({ ...shape, kill: false, system: peer, setting: 'tuned' });
  }
  const faultJobs = quick ? 200 : 1_000;
  for (const [store, period, peer] of [['redis', 1_000, 'bullmq'], ['postgres', 60_000, 'pgboss']]) {
    runs.push({ store, jobs: faultJobs, period, kill: true, system: 'shedlock', setting: null });
    runs.push({ store, jobs: faultJobs, period, kill: true, system: peer, setting: 'tuned' });
  }
  return runs.filter((r) => systems.includes(r.system) && (only === undefined || r.store === only));
}

const sleepUntil = (t) => new Promise((resolve) => setTimeout(resolve, Math.max(0, t - Date.now())));
const alignUp = (t, period) => Math.ceil(t / period) * period;

/** Spawns a worker, forwarding its stderr with a prefix; resolves once it prints `ready`. */
function spawnWorker(script, args, label) {
  const child = spawn(process.execPath, [path.join(HERE, script), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  readline.createInterface({ input: child.stderr }).on('line', (l) => console.error(`  [${label}] ${l}`));
  const ready = new Promise((resolve, reject) => {
    readline.createInterface({ input: child.stdout }).on('line', (l) => l === 'ready' && resolve());
    child.on('exit', (code, signal) => reject(new Error(`${label} exited (${code ?? signal}) before ready`)));
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  return { child, ready, exited };
}

/** SIGTERM (the workers flush their records and exit), then SIGKILL whatever is still up. */
async function stopWorkers(workers) {
  for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGTERM');
  const timeout = new Promise((resolve) => setTimeout(resolve, STOP_TIMEOUT_MS).unref());
  await Promise.race([Promise.all(workers.map((w) => w.exited)), timeout]);
  for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
}

async function runPeer(run, { dir, windowMs }) {
  const peer = PEERS[run.system];
  const ctx = await peer.module.setup({ jobs: run.jobs, period: run.period, setting: run.setting });
  const workers = [];
  try {
    for (let i = 0; i < PROCESSES; i++) {
      const record = path.join(dir, `${run.system}-${i}.rec`);
      const args = [...peer.args(ctx), '--setting', run.setting, '--record', record];
      workers.push(spawnWorker(peer.script, args, `${run.system} ${i}`));
    }
    await Promise.race([
      Promise.all(workers.map((w) => w.ready)),
      new Promise((_, reject) => {
        setTimeout(() => reject(new Error('workers not ready in time')), READY_TIMEOUT_MS).unref();
      }),
    ]);
    const t0 = alignUp(Date.now() + WARMUP_MS, run.period);
    const t1 = t0 + windowMs;
    const pids = workers.map((w) => w.child.pid);

    await sleepUntil(t0);
    const cpu0 = pids.map(processCpuSeconds);
    const server0 = serverCpuByPid(SERVER_NAMES[run.store]);
    let killed = null;
    let killMs = null;
    if (run.kill) {
      await sleepUntil(t0 + killAfterMs(windowMs));
      killed = 0;
      killMs = Date.now();
      workers[killed].child.kill('SIGKILL');
    }
    await sleepUntil(t1);
    const cpu1 = pids.map(processCpuSeconds);
    const server1 = serverCpuByPid(SERVER_NAMES[run.store]);
    const backlog = peer.module.backlog ? await peer.module.backlog(ctx) : null;

    await sleepUntil(t1 + (run.period === 1_000 ? 5_000 : 60_000));
    await stopWorkers(workers);
    const seconds = windowMs / 1000;
    return {
      analysis: analyse(dir, { t0, t1, period: run.period, jobs: run.jobs, killMs }),
      // A process killed (or gone) in the window has no figure.
      cpuPercent: cpu0.map((c, i) => (i === killed || cpu1[i] === null ? null : (100 * (cpu1[i] - c)) / seconds)),
      serverPercent: (100 * serverCpuBetween(server0, server1)) / seconds,
      killMs,
      t0,
      backlog,
    };
  } finally {
    await stopWorkers(workers);
    await peer.module.teardown(ctx);
  }
}

/** When the fault runs kill a worker: halfway through the window, in whole seconds. */
const killAfterMs = (windowMs) => Math.floor(windowMs / 2000) * 1000;

/** shedlock's fleet_rate bench, its `JSON ` line parsed; its own output goes to stderr. */
async function runShedlock(run, { dir, windowMs }) {
  const args = [
    'bench', '--bench', 'fleet_rate', '--',
    '--backend', run.store, '--path', 'readme', '--processes', String(PROCESSES),
    '--jobs', String(run.jobs), '--every', run.period === 1_000 ? 'second' : 'minute',
    '--seconds', String(windowMs / 1000), '--warmup', String(WARMUP_MS / 1000), '--records', dir,
  ];
  if (run.kill) args.push('--kill-after', String(killAfterMs(windowMs) / 1000));
  const child = spawn('cargo', args, { cwd: REPO, stdio: ['ignore', 'pipe', 'inherit'] });
  let json = null;
  readline.createInterface({ input: child.stdout }).on('line', (line) => {
    if (line.startsWith('JSON ')) json = JSON.parse(line.slice(5));
    else console.error(`  [shedlock] ${line}`);
  });
  const code = await new Promise((resolve) => child.on('close', resolve));
  if (code !== 0) throw new Error(`cargo bench exited with ${code}`);
  if (json === null) throw new Error('cargo bench printed no JSON line');
  const t0 = json.window_start_ms;
  const t1 = json.window_end_ms;
  const seconds = (t1 - t0) / 1000;
  const killMs = json.killed === null ? null : t0 + killAfterMs(windowMs);
  return {
    analysis: analyse(dir, { t0, t1, period: json.period_ms, jobs: json.jobs, killMs }),
    cpuPercent: json.cpu_process_seconds.map((c) => (c === null ? null : (100 * c) / seconds)),
    serverPercent: json.cpu_server_seconds === null ? null : (100 * json.cpu_server_seconds) / seconds,
    killMs,
    t0,
    backlog: null,
  };
}

// ---- the table -------------------------------------------------------------------------------

const int = (n) => Math.round(n).toLocaleString('en-US');
const pct = (n) => `${n < 10 ? n.toFixed(2) : n.toFixed(1)} %`;
const rate = (n) => (n >= 100 ? int(n) : n.toFixed(1));
const ms = (v) => {
  if (v === null) return '—';
  if (Math.abs(v) < 1_000) return `${int(v)} ms`;
  return `${(v / 1000).toFixed(Math.abs(v) < 10_000 ? 2 : 1)} s`;
};

function label(run) {
  if (run.system === 'shedlock') return 'shedlock (README path)';
  return PEERS[run.system].module.SETTINGS[run.setting].label;
}

function row(run, result) {
  const head = [label(run), run.store, int(run.jobs), run.period === 1_000 ? '1 s' : '1 min', String(PROCESSES)];
  if (result.error) return [...head, `failed: ${result.error}`, '', '', '', '', '', '', ''];
  const a = result.analysis;
  const cpus = result.cpuPercent.filter((c) => c !== null);
  const cpu = cpus.length === 0 ? '—' : `avg ${pct(cpus.reduce((s, c) => s + c, 0) / cpus.length)}, max ${pct(Math.max(...cpus))}`;
  const fault = a.kill === null
    ? '—'
    : `SIGKILL p0 at +${((result.killMs - result.t0) / 1000).toFixed(0)} s: lost ${int(a.kill.lostAfter)} ` +
      `(${pct(a.kill.lostAfterPercent)}) after, missed ${int(a.kill.missedBefore)} before`;
  return [
    ...head,
    rate(a.executionsPerSecond),
    `${int(a.missed)} (${pct(a.missedPercent)})`,
    `${ms(a.latenessP50)} / ${ms(a.latenessP99)}`,
    ms(a.lastStartP99),
    int(a.duplicates),
    cpu,
    result.serverPercent === null ? '—' : pct(result.serverPercent),
    fault,
  ];
}

function notes(run, result) {
  const out = [];
  if (result.error) return out;
  const name = `${label(run)}, ${int(run.jobs)} jobs`;
  if (result.analysis.offGrid > 0) out.push(`${name}: ${int(result.analysis.offGrid)} executions off their job's tick grid.`);
  const b = result.backlog;
  if (b && b.forwards + b.jobs > 0) {
    let note = `${name}: at the window's end ${int(b.forwards)} occurrences were still to be forwarded ` +
      `and ${int(b.jobs)} jobs queued.`;
    if (b.forwards > 0) {
      note += ' pg-boss jobs carry no due time and are dated by their creation minute, so a job ' +
        'forwarded after its minute counts for a later one: lateness is understated, missed and duplicates are not exact.';
    }
    out.push(note);
  }
  return out;
}

function table(rows) {
  const header = ['system (setting)', 'store', 'jobs', 'period', 'processes', 'executions/s', 'missed (n, %)',
    'start lateness p50 / p99', 'last start p99', 'duplicates', 'CPU per process', 'server CPU', 'fault'];
  const line = (cells) => `| ${cells.join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n');
}

// ---- main ------------------------------------------------------------------------------------

async function main() {
  const opts = options();
  const runs = plan(opts);
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'shedlock-peers-'));
  const rows = [];
  const allNotes = [];
  for (const [i, run] of runs.entries()) {
    const windowMs = run.period === 1_000 ? opts.seconds * 1000 : opts.minutes * 60_000;
    const dir = path.join(base, `${i}-${run.system}-${run.setting ?? 'readme'}-${run.store}-${run.jobs}`);
    fs.mkdirSync(dir);
    console.error(`[${i + 1}/${runs.length}] ${label(run)} · ${run.store} · ${int(run.jobs)} jobs every ` +
      `${run.period === 1_000 ? 'second' : 'minute'}${run.kill ? ' · kill -9 of one process' : ''}`);
    let result;
    try {
      result = await (run.system === 'shedlock' ? runShedlock : runPeer)(run, { dir, windowMs });
    } catch (err) {
      console.error(`  failed: ${err.stack ?? err}`);
      result = { error: err.message };
    }
    rows.push(row(run, result));
    allNotes.push(...notes(run, result));
  }
  console.log(table(rows));
  if (allNotes.length > 0) console.log(`\n${allNotes.map((n) => `- ${n}`).join('\n')}`);
  if (opts.keep) console.error(`records kept in ${base}`);
  else fs.rmSync(base, { recursive: true, force: true });
}

await main();
