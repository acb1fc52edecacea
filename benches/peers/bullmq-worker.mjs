// One BullMQ worker process: `node bullmq-worker.mjs --queue Q --setting default|tuned --record FILE`.
// Its processor only records the job, its due time and the time it started (lib/recorder.mjs).

import { Worker } from 'bullmq';

import { connection, dueMillis, SETTINGS } from './bullmq.mjs';
import { announceReady, openRecorder, workerArgs } from './lib/recorder.mjs';

const args = workerArgs();
const record = openRecorder(args.record);

const worker = new Worker(
  args.queue,
  async (job) => {
    const start = Date.now();
    record(job.data.job, dueMillis(job), start);
  },
  { connection, ...SETTINGS[args.setting].worker },
);
worker.on('error', (err) => console.error(err.message));
await worker.waitUntilReady();
announceReady();
