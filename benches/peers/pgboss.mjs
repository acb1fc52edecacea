// pg-boss, run the way its docs run cron jobs (docs/api/scheduling.md): `boss.schedule(queue, cron,
// data, { key })` on PostgreSQL, one schedule per job on one queue (the `key` option: "an optional
// unique key if more than schedule is needed for this queue"), and `boss.work(queue, ...)` in
// each worker process (pgboss-worker.mjs), every worker also running pg-boss's scheduling.
//
// How a cron job reaches a worker (dist/timekeeper.js): every `cronMonitorIntervalSeconds`
// (default 30) one instance wins a claim and runs a pass that reads every schedule, evaluates each
// expression (cron-parser, about 0.1 ms of CPU a schedule here) and files the occurrence of the
// last 60 s as a job on the internal queue `__pgboss__send-it` (deduplicated per schedule and
// minute by a singleton slot). Each instance's send-it worker (batchSize 50, fixed, polling every
// `cronWorkerIntervalSeconds`, default 5) then `send()`s one job per occurrence to the schedule's
// queue, where `work()` picks it up. Precision is a minute: the docs discourage 6-field crons.
//
// Settings:
// - default: `new PgBoss(url)`, `createQueue(queue)`, `work(queue, handler)`: docs/api/workers.md,
//   "The default options for work() is 1 job every 2 seconds" (batchSize 1, pollingIntervalSeconds 2);
// - tuned: what the docs offer to raise throughput and cut latency: `cronWorkerIntervalSeconds: 1`
//   (its minimum; the forwarding above moves at most 50 jobs per instance per interval), and on the
//   worker `batchSize: 100` with `burstWhenBatchFull` (fetch again at once while batches come back
//   full), plus LISTEN/NOTIFY (`useListenNotify: true` and a `notify: true` queue; "Low-latency
//   dispatch with LISTEN/NOTIFY": workers are woken the instant a job is created).
//   `cronMonitorIntervalSeconds` stays at 30: each pass re-evaluates every schedule (10 s of CPU at
//   100,000 schedules), so a shorter interval multiplies that cost and lets passes overlap.
//
// Due time: a forwarded job carries nothing of its occurrence (the send-it handler strips the
// slot before `send()`), so a worker takes its `createdOn` (`includeMetadata: true`, set in both
// settings only to read it) floored to the minute. That is the due minute as long as forwarding
// keeps up; a job forwarded after its minute has ended is counted for a later one. `backlog()`
// reports the jobs still waiting at the window's end, so a run where that happened shows it.

import pg from 'pg';
import { PgBoss } from 'pg-boss';

const POSTGRES_URL = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/';
export const QUEUE = 'peers';
const SEND_IT = '__pgboss__send-it';

export const SETTINGS = {
  default: {
    label: 'pg-boss default (batchSize 1, poll 2 s, cron monitor 30 s, forward 5 s)',
    boss: {},
    queue: {},
    work: {},
  },
  tuned: {
    label: 'pg-boss tuned (batchSize 100 + burst, NOTIFY, cron monitor 30 s, forward 1 s)',
    boss: { cronWorkerIntervalSeconds: 1, useListenNotify: true },
    queue: { notify: true },
    work: { batchSize: 100, burstWhenBatchFull: true },
  },
};

/** Schedules this many at once while setting up. */
const SCHEDULES_IN_FLIGHT = 50;

/** The URL of database `name` on the server. */
function databaseUrl(name) {
  return new URL(name, POSTGRES_URL).href;
}

/** The minute a cron job was due: its creation time floored to the minute (see the header). */
export function dueMinute(job) {
  return Math.floor(job.createdOn.getTime() / 60_000) * 60_000;
}

async function onServer(sql) {
  const client = new pg.Client({ connectionString: databaseUrl('postgres') });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/**
 * Creates a database of its own for the run, pg-boss's schema in it, the queue, and one schedule
 * `* * * * *` per job (key `j<i>`, data `{ job: i }`), from an instance that neither schedules nor
 * supervises. Returns what the workers, `backlog` and `teardown` need.
 */
export async function setup({ jobs, setting }) {
  const database = `peers_${process.pid}_${Date.now()}`;
  await onServer(`CREATE DATABASE ${database}`);
  const url = databaseUrl(database);
  const boss = new PgBoss({ connectionString: url, schedule: false, supervise: false });
  boss.on('error', (err) => console.error(err.message));
  await boss.start();
  try {
    await boss.createQueue(QUEUE, SETTINGS[setting].queue);
    for (let from = 0; from < jobs; from += SCHEDULES_IN_FLIGHT) {
      const batch = [];
      for (let job = from; job < Math.min(jobs, from + SCHEDULES_IN_FLIGHT); job++) {
        batch.push(boss.schedule(QUEUE, '* * * * *', { job }, { key: `j${job}` }));
      }
      await Promise.all(batch);
    }
  } finally {
    await boss.stop({ graceful: false });
  }
  return { database, url };
}

/** Jobs not yet taken by a worker: occurrences still to forward (send-it) and forwarded jobs. */
export async function backlog({ url }) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query(
      `SELECT name, count(*)::int AS n FROM pgboss.job
       WHERE name = ANY($1) AND state IN ('created', 'retry') GROUP BY name`,
      [[SEND_IT, QUEUE]],
    );
    const count = (name) => rows.find((r) => r.name === name)?.n ?? 0;
    return { forwards: count(SEND_IT), jobs: count(QUEUE) };
  } finally {
    await client.end();
  }
}

/** Drops the run's database, closing whatever connection is still on it. */
export async function teardown({ database }) {
  await onServer(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
}
