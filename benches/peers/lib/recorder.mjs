// The record a worker process keeps of the bodies it ran: lines `<job> <tick_ms> <start_ms>\n`
// appended to its own file, buffered in memory and written with fs.writeSync every 20 ms and on
// SIGTERM, after which the process exits (the orchestrator stops workers that way).

import fs from 'node:fs';

const FLUSH_MS = 20;

/** Opens `file` for appending and returns `record(job, tickMs, startMs)`. */
export function openRecorder(file) {
  const fd = fs.openSync(file, 'a');
  let buffer = [];
  const flush = () => {
    if (buffer.length === 0) return;
    fs.writeSync(fd, buffer.join(''));
    buffer = [];
  };
  setInterval(flush, FLUSH_MS);
  process.on('SIGTERM', () => {
    flush();
    process.exit(0);
  });
  return (job, tickMs, startMs) => {
    buffer.push(`${job} ${tickMs} ${startMs}\n`);
  };
}

/** The worker's command line, `--name value` pairs, as an object of strings. */
export function workerArgs(argv = process.argv.slice(2)) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) args[argv[i].replace(/^--/, '')] = argv[i + 1];
  return args;
}

/** Tells the orchestrator this worker is running (it waits for the line before its warm-up). */
export function announceReady() {
  process.stdout.write('ready\n');
}
