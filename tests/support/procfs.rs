//! What the benchmarks read from Linux's `/proc`: CPU time of a process and of the machine,
//! and the load average. Clock ticks are 100 per second on Linux.

/// User + system seconds from the fields after `(comm)` of a `/proc/<pid>/stat` line.
pub fn cpu_seconds_of_stat(after_comm: &str) -> f64 {
    after_comm
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse::<f64>().ok())
        .sum::<f64>()
        / 100.0
}

/// CPU time of this process so far (user + system, all threads), in seconds.
pub fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    cpu_seconds_of_stat(stat.rsplit_once(')').map_or("", |(_, rest)| rest))
}

/// The fields of `/proc/stat`'s first line (the machine's jiffies over all cores): user, nice,
/// system, idle, iowait, irq, softirq, steal.
pub fn machine_jiffies() -> Vec<f64> {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    stat.lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect()
}

/// The load averages over 1, 5 and 15 minutes, as `/proc/loadavg` writes them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
