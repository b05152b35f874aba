//! What the benchmark measures with: latency samples, the process's own CPU
//! time and memory, and the server's command counters and CPU time.

use std::time::Duration;

use std::alloc::System;

use redis::aio::ConnectionManager;
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

/// Latencies of one kind of operation.
#[derive(Debug, Default)]
pub(crate) struct Samples(Vec<Duration>);

impl Samples {
    pub(crate) fn with_capacity(n: usize) -> Samples {
        Samples(Vec::with_capacity(n))
    }

    pub(crate) fn push(&mut self, sample: Duration) {
        self.0.push(sample);
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The `q` quantile (0.5 for the median), in microseconds.
    pub(crate) fn quantile_us(&mut self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        self.0.sort_unstable();
        let at = ((self.0.len() - 1) as f64 * q).round() as usize;
        micros(self.0[at])
    }

    pub(crate) fn p50(&mut self) -> f64 {
        self.quantile_us(0.50)
    }

    pub(crate) fn p99(&mut self) -> f64 {
        self.quantile_us(0.99)
    }
}

pub(crate) fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// CPU time this process has used so far, all threads: from the per-thread
/// scheduler statistics (nanoseconds) where Linux has them, else from
/// `/proc/self/stat` (clock ticks); `None` elsewhere.
pub(crate) fn process_cpu() -> Option<Duration> {
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        let mut total = 0u64;
        let mut any = false;
        for task in tasks.flatten() {
            let path = task.path().join("schedstat");
            if let Ok(text) = std::fs::read_to_string(path) {
                if let Some(ns) = text
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                {
                    total += ns;
                    any = true;
                }
            }
        }
        // Threads that have exited are not listed; the runtime's workers
        // live as long as the run, so the sum only ever misses idle ones.
        if any {
            return Some(Duration::from_nanos(total));
        }
    }
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Counts what the process allocates, so that memory per lock or per
/// waiter is measured to the byte rather than read off the resident size,
/// which the allocator's pools blur.
#[global_allocator]
static HEAP: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes on the heap right now. `stats_alloc` already counts a realloc's
/// growth in `bytes_allocated` (and its shrinking in `bytes_deallocated`);
/// its `bytes_reallocated` is the same change again, so it is left out.
pub(crate) fn heap_bytes() -> i64 {
    let stats = HEAP.stats();
    stats.bytes_allocated as i64 - stats.bytes_deallocated as i64
}

/// What the server says of itself at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ServerStats {
    /// EVALSHA calls served (every ferrisson script call is one).
    pub(crate) evalsha_calls: u64,
    /// Time the server spent in them, in µs (`INFO commandstats`: each
    /// script's run, the commands it calls included).
    pub(crate) evalsha_usec: f64,
    /// All commands served.
    pub(crate) commands: u64,
    /// Server CPU time, user plus system, in seconds.
    pub(crate) cpu_secs: f64,
    /// Memory used by the data set, in bytes.
    pub(crate) used_memory: u64,
}

impl ServerStats {
    pub(crate) async fn read(conn: &mut ConnectionManager) -> redis::RedisResult<ServerStats> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("cpu")
            .arg("memory")
            .arg("stats")
            .query_async(conn)
            .await?;
        let mut stats = ServerStats::default();
        for line in info.lines() {
            if let Some(rest) = line.strip_prefix("cmdstat_evalsha:") {
                stats.evalsha_calls = field(rest, "calls").unwrap_or(0.0) as u64;
                stats.evalsha_usec = field(rest, "usec").unwrap_or(0.0);
            } else if let Some(v) = line.strip_prefix("total_commands_processed:") {
                stats.commands = v.trim().parse().unwrap_or(0);
            } else if let Some(v) = line.strip_prefix("used_cpu_user:") {
                stats.cpu_secs += v.trim().parse::<f64>().unwrap_or(0.0);
            } else if let Some(v) = line.strip_prefix("used_cpu_sys:") {
                stats.cpu_secs += v.trim().parse::<f64>().unwrap_or(0.0);
            } else if let Some(v) = line.strip_prefix("used_memory:") {
                stats.used_memory = v.trim().parse().unwrap_or(0);
            }
        }
        Ok(stats)
    }
}

/// `calls=12,usec=34,...` → the value of `name`.
fn field(text: &str, name: &str) -> Option<f64> {
    text.split(',').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then(|| value.trim().parse().ok())?
    })
}

/// A printed table: a title, column heads and rows of cells.
#[derive(Debug)]
pub(crate) struct Table {
    title: String,
    heads: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(title: impl Into<String>, heads: &[&'static str]) -> Table {
        Table {
            title: title.into(),
            heads: heads.to_vec(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Markdown, so that the output can go into `docs/benchmarks.md` as it is.
    pub(crate) fn print(&self) {
        let widths: Vec<usize> = (0..self.heads.len())
            .map(|i| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i).map(String::len))
                    .chain([self.heads[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: Vec<&str>| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            println!("| {} |", padded.join(" | "));
        };
        println!("\n{}\n", self.title);
        line(self.heads.clone());
        println!(
            "|{}|",
            widths
                .iter()
                .map(|w| "-".repeat(w + 2))
                .collect::<Vec<_>>()
                .join("|")
        );
        for row in &self.rows {
            line(row.iter().map(String::as_str).collect());
        }
    }
}

/// A number with `digits` decimals.
pub(crate) fn f(value: f64, digits: usize) -> String {
    format!("{value:.digits$}")
}
