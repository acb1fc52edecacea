// BullMQ, run the way its guide runs recurring jobs: one job scheduler per job
// (`queue.upsertJobScheduler(id, { every }, { name, data })`, guide/job-schedulers) on Redis, and
// `new Worker(queue, processor, opts)` in each worker process (bullmq-worker.mjs).
//
// Settings:
// - default: `new Worker(queue, processor, { connection })`, as the README and the job-scheduler
//   guide write it (concurrency 1; finished jobs kept in Redis);
// - tuned: the guide's throughput knob, a local concurrency factor (guide/workers/concurrency:
//   "choose a high concurrency factor for every worker", its example uses 50), and auto-removal of
//   finished jobs, which guide/going-to-production asks for in production
//   (guide/workers/auto-removal-of-jobs: `{ count: 0 }` removes every job once finished).
//
// A job's due time is the millisecond in its id: the scheduler files each iteration as
// `repeat:<schedulerId>:<millis>` (job-scheduler.js `getSchedulerNextJobId`, and the Lua
// `updateJobScheduler` that adds the next iteration when a worker takes the current one).
// `job.timestamp + job.opts.delay` is not it: the delay is clamped at 0 when an iteration is late.
// With `every` and no offset the first iteration is due at the upsert itself and the next ones an
// interval apart, so each scheduler ticks on a phase of its own (upsert time mod `every`), not on
// the second.

import { Queue } from 'bullmq';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
export const connection = { url: REDIS_URL };

export const SETTINGS = {
  default: { label: 'BullMQ default (concurrency 1)', worker: {} },
  tuned: {
    label: 'BullMQ tuned (concurrency 50, removeOnComplete 0)',
    worker: { concurrency: 50, removeOnComplete: { count: 0 } },
  },
};

/** Upserts this many schedulers at once while setting up. */
const UPSERTS_IN_FLIGHT = 500;

/** The due time of a job a scheduler produced, from its id `repeat:<schedulerId>:<millis>`. */
export function dueMillis(job) {
  return Number(job.id.slice(job.id.lastIndexOf(':') + 1));
}

/**
 * Creates a queue of its own for the run with `jobs` schedulers `j<i>`, each every `period` ms with
 * data `{ job: i }`. Returns what the workers and `teardown` need.
 */
export async function setup({ jobs, period }) {
  const queueName = `peers-${process.pid}-${Date.now()}`;
  const queue = new Queue(queueName, { connection });
  try {
    for (let from = 0; from < jobs; from += UPSERTS_IN_FLIGHT) {
      const batch = [];
      for (let job = from; job < Math.min(jobs, from + UPSERTS_IN_FLIGHT); job++) {
        batch.push(queue.upsertJobScheduler(`j${job}`, { every: period }, { name: 'tick', data: { job } }));
      }
      await Promise.all(batch);
    }
  } finally {
    await queue.close();
  }
  return { queueName };
}

/** Deletes every key of the run's queue, its schedulers and jobs included. */
export async function teardown({ queueName }) {
  const queue = new Queue(queueName, { connection });
  try {
    await queue.obliterate({ force: true });
  } finally {
    await queue.close();
  }
}
