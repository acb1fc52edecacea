// One pg-boss worker process: `node pgboss-worker.mjs --url URL --setting default|tuned --record FILE`.
// A PgBoss instance with scheduling on (the default), working the queue; its handler only records
// each job of the batch, its due minute and the time the batch started (lib/recorder.mjs).

import { PgBoss } from 'pg-boss';

import { dueMinute, QUEUE, SETTINGS } from './pgboss.mjs';
import { announceReady, openRecorder, workerArgs } from './lib/recorder.mjs';

const args = workerArgs();
const setting = SETTINGS[args.setting];
const record = openRecorder(args.record);

const boss = new PgBoss({ connectionString: args.url, ...setting.boss });
boss.on('error', (err) => console.error(err.message));
await boss.start();
await boss.work(QUEUE, { ...setting.work, includeMetadata: true }, async (jobs) => {
  const start = Date.now();
  for (const job of jobs) record(job.data.job, dueMinute(job), start);
});
announceReady();
