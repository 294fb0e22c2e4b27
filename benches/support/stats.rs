//! Percentiles and process statistics read from `/proc` (Linux only, no `libc`).

use std::collections::BTreeMap;
use std::fs;
use std::time::Duration;

/// Nearest-rank percentile (`p` in `0..=100`) of an ascending slice; zero when empty.
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// p50 / p99 / max of a set of durations.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub n: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

pub fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort_unstable();
    Summary {
        n: samples.len(),
        p50: percentile(&samples, 50.0),
        p99: percentile(&samples, 99.0),
        max: samples.last().copied().unwrap_or_default(),
    }
}

/// Jain's fairness index of `shares`: `(sum x)^2 / (n * sum x^2)`, 1 when all are equal,
/// `1/n` when one has everything; zero when there are none or all are zero.
pub fn jain(shares: &[f64]) -> f64 {
    let sum: f64 = shares.iter().sum();
    let squares: f64 = shares.iter().map(|x| x * x).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (shares.len() as f64 * squares)
}

/// CPU time (user + system) consumed so far by every live thread of this process, with
/// nanosecond resolution: the sum of the first field of `/proc/self/task/*/schedstat`.
///
/// Threads that exit are not counted any more, so the bench keeps its runtime's blocking
/// threads alive. Falls back to `/proc/self/stat` (10 ms ticks) without schedstat.
pub fn cpu_time() -> Duration {
    threads_cpu_time("self").unwrap_or_else(stat_cpu_time)
}

/// CPU time used so far by the processes `pids` (e.g. the Redis servers), summed like
/// [`cpu_time`]; processes that are gone count as zero.
pub fn pids_cpu_time(pids: &[u32]) -> Duration {
    pids.iter()
        .filter_map(|pid| threads_cpu_time(&pid.to_string()))
        .sum()
}

/// Sum of the first field of `/proc/<proc>/task/*/schedstat`, if any could be read.
fn threads_cpu_time(proc: &str) -> Option<Duration> {
    let mut total: u64 = 0;
    let mut seen = false;
    if let Ok(dir) = fs::read_dir(format!("/proc/{proc}/task")) {
        for entry in dir.flatten() {
            let Ok(text) = fs::read_to_string(entry.path().join("schedstat")) else {
                continue;
            };
            if let Some(ns) = text
                .split_whitespace()
                .next()
                .and_then(|f| f.parse::<u64>().ok())
            {
                total += ns;
                seen = true;
            }
        }
    }
    seen.then(|| Duration::from_nanos(total))
}

/// utime + stime of the whole process from `/proc/self/stat`, in 1/100 s ticks.
pub fn stat_cpu_time() -> Duration {
    let Ok(stat) = fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the parenthesised command name start at field 3 (state);
    // utime and stime are fields 14 and 15.
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// `VmRSS` and `VmHWM` (peak RSS) of this process, in KiB.
pub fn rss_kib() -> (u64, u64) {
    let text = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// `calls=` per command from `INFO commandstats`, without `info` itself.
pub fn commandstats(conn: &mut redis::Connection) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = (commandstats_all(conn).into_iter())
        .map(|(name, (calls, _))| (name, calls))
        .collect();
    out.remove("info");
    out
}

/// `(calls=, usec=)` per command from `INFO commandstats`, `info` included (the reading
/// itself is counted once it has run: in the next reading).
pub fn commandstats_all(conn: &mut redis::Connection) -> BTreeMap<String, (u64, u64)> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let field = |key: &str| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(key))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        out.insert(name.to_string(), (field("calls="), field("usec=")));
    }
    out
}

/// `used_cpu_sys` + `used_cpu_user` from `INFO cpu`: the server's CPU time so far, as the
/// server itself counts it (all its threads, children not included).
pub fn info_cpu(conn: &mut redis::Connection) -> Duration {
    let text: String = redis::cmd("INFO").arg("cpu").query(conn).expect("INFO cpu");
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Duration::from_secs_f64(field("used_cpu_sys:") + field("used_cpu_user:"))
}

/// Sum of [`commandstats`] over several nodes.
pub fn commandstats_sum(conns: &mut [redis::Connection]) -> BTreeMap<String, u64> {
    let mut total = BTreeMap::new();
    for conn in conns {
        for (name, calls) in commandstats(conn) {
            *total.entry(name).or_insert(0) += calls;
        }
    }
    total
}

/// `after - before` per command, dropping commands that did not change.
pub fn delta(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(name, &a)| {
            let d = a.saturating_sub(before.get(name).copied().unwrap_or(0));
            (d > 0).then(|| (name.clone(), d))
        })
        .collect()
}

/// Milliseconds, fractional.
pub fn ms_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Whole milliseconds, saturating.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `used_memory` (bytes) from `INFO memory`, summed over `conns`.
pub fn used_memory_sum(conns: &mut [redis::Connection]) -> u64 {
    conns
        .iter_mut()
        .map(|conn| {
            let text: String = redis::cmd("INFO")
                .arg("memory")
                .query(conn)
                .expect("INFO memory");
            text.lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}
