//! ferrisson against the Redis round-trip limit, in one run.
//!
//! `cargo run --release --example bench [-- --quick] [--latched] [--json PATH] [--only 1,2,..]`
//!
//! Starts a throwaway `redis-server` (or uses `REDIS_URL`), then runs eleven
//! scenarios (8 and 9 start servers of their own). Each measures ferrisson and, in the same run and over the
//! same kind of connection (one multiplexed RESP3 `ConnectionManager`), the
//! raw baseline it is compared with: EVALSHA of a trivial script (and, in
//! scenarios 2 and 4, the simplest safe lock: `SET NX PX` and a
//! compare-and-delete script). The
//! figures are printed as Markdown tables, then the targets of
//! `docs/benchmarks.md` are checked and printed.
//!
//! Exits with status 1 when a scenario breaks a promise rather than being
//! slow: a lost update under the lock, a lease lost by the watchdog, more
//! than one subscription for one lock name. Slowness is printed, never a
//! failure.

#[path = "../support/mod.rs"]
mod support;

mod deployments;
mod holding;
mod idle;
mod measure;
mod scenarios;
mod server_time;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, ProtocolVersion};
use serde_json::{json, Value};

/// What the command line asked for.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The smaller, faster run (`--quick`).
    pub(crate) quick: bool,
    /// Whether the ferrisson clients send the lean protocol (the default,
    /// see `ClientBuilder::lean`), or the latched one only (`--latched`).
    /// `--lean`, the default said out loud, is still taken.
    pub(crate) lean: bool,
    /// Whether scenario 5 splits each hand-off at the unlock message, with
    /// subscribers of the bench's own on the lock's channel, and scenario
    /// 11 measures a `ConnectionManager`'s hand-on with one more
    /// (`--split`; they load the machine, so its figures are not those of
    /// a run without).
    pub(crate) split: bool,
    json: Option<String>,
    only: Option<Vec<usize>>,
    /// `--pairs N WHAT`: only N lock + unlock pairs (or raw pairs) of one
    /// task, for an instruction count (see [`pairs`]).
    pairs: Option<(usize, Pairs)>,
}

/// What `--pairs` runs.
#[derive(Debug, Clone, Copy)]
enum Pairs {
    /// Two EVALSHA of `return 1`, as scenario 1 sends them.
    Raw,
    /// `lock()` and `unlock()` of one lock.
    Watchdog,
    /// `lock_with_lease(10 s)` and `unlock()` of one lock.
    Lease,
}

impl Options {
    fn parse() -> Result<Options, String> {
        let mut options = Options {
            quick: false,
            lean: true,
            split: false,
            json: None,
            only: None,
            pairs: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => options.quick = true,
                "--lean" => options.lean = true,
                "--latched" => options.lean = false,
                "--split" => options.split = true,
                "--json" => {
                    options.json = Some(args.next().ok_or("--json needs a file path")?);
                }
                "--pairs" => {
                    let n = args
                        .next()
                        .and_then(|n| n.parse::<usize>().ok())
                        .ok_or("--pairs needs a count, then raw, watchdog or lease")?;
                    let what = match args.next().as_deref() {
                        Some("raw") => Pairs::Raw,
                        Some("watchdog") => Pairs::Watchdog,
                        Some("lease") => Pairs::Lease,
                        _ => return Err("--pairs N needs raw, watchdog or lease after it".into()),
                    };
                    options.pairs = Some((n, what));
                }
                "--only" => {
                    let list = args
                        .next()
                        .ok_or("--only needs scenario numbers, e.g. 1,2")?;
                    let numbers = list
                        .split(',')
                        .map(|n| match n.trim().parse::<usize>() {
                            Ok(n @ 1..=11) => Ok(n),
                            _ => Err(format!("--only: `{n}` is not a scenario number (1 to 11)")),
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    options.only = Some(numbers);
                }
                "-h" | "--help" => {
                    println!(
                        "usage: bench [--quick] [--latched] [--split] [--json PATH] [--only 1,2,..]\n\n\
                         --quick      smaller sizes and shorter runs (under 30 s)\n\
                         --latched    ferrisson's clients send the latched protocol only\n\
                         \x20            (lean(false); the default is the lean one)\n\
                         --split      scenario 5 splits each hand-off at the unlock message,\n\
                         \x20            11 times a ConnectionManager's hand-on (more subscribers)\n\
                         --json PATH  also write every figure to PATH as JSON\n\
                         --only LIST  run only these scenarios (1-11); the round trip\n\
                         \x20            (scenario 1) is always measured, as the unit\n\
                         --pairs N raw|watchdog|lease\n\
                         \x20            no scenario: N pairs of one task on one thread, for\n\
                         \x20            callgrind (two counts' difference over the pairs)"
                    );
                    std::process::exit(0);
                }
                other => return Err(format!("unknown argument `{other}` (try --help)")),
            }
        }
        Ok(options)
    }

    fn runs(&self, scenario: usize) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.contains(&scenario))
    }

    /// `full` in a full run, `quick` with `--quick`.
    pub(crate) fn pick<T>(&self, full: T, quick: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

/// One target of `docs/benchmarks.md`, as measured.
#[derive(Debug)]
pub(crate) struct Check {
    pub(crate) target: &'static str,
    pub(crate) measured: String,
    pub(crate) met: bool,
}

/// What the scenarios share.
#[derive(Debug)]
pub(crate) struct Bench {
    pub(crate) options: Options,
    pub(crate) url: String,
    /// The raw baseline's connection: the same kind as a client's.
    pub(crate) raw: ConnectionManager,
    /// For INFO, counters and clean-up; never timed.
    pub(crate) admin: ConnectionManager,
    /// p50 of one raw EVALSHA round trip, in microseconds: the unit.
    pub(crate) rtt_us: f64,
    pub(crate) checks: Vec<Check>,
    /// Broken promises: the run fails when there is any.
    pub(crate) failures: Vec<String>,
}

impl Bench {
    /// A ferrisson client with the default settings but `watchdog`.
    pub(crate) async fn client(&self, watchdog: Duration) -> ferrisson::Client {
        ferrisson::Client::builder(self.url.as_str())
            .watchdog_timeout(watchdog)
            .lean(self.options.lean)
            .build()
            .await
            .expect("connect a ferrisson client")
    }

    pub(crate) fn check(&mut self, target: &'static str, measured: String, met: bool) {
        self.checks.push(Check {
            target,
            measured,
            met,
        });
    }

    pub(crate) fn fail(&mut self, failure: String) {
        eprintln!("FAILURE: {failure}");
        self.failures.push(failure);
    }
}

/// A connection like the ones a ferrisson client opens: RESP3, multiplexed,
/// reconnecting, with the client's default timeouts.
pub(crate) async fn connection(url: &str) -> redis::RedisResult<ConnectionManager> {
    let info = url.into_connection_info()?;
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(ferrisson::config::DEFAULT_RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(ferrisson::config::DEFAULT_CONNECTION_TIMEOUT));
    connection_with(info.set_redis_settings(resp3), config).await
}

/// [`connection`] with its own settings; as a ferrisson client's, with no
/// Nagle delay.
pub(crate) async fn connection_with(
    info: redis::ConnectionInfo,
    config: ConnectionManagerConfig,
) -> redis::RedisResult<ConnectionManager> {
    let nodelay = redis::io::tcp::TcpSettings::default().set_nodelay(true);
    redis::Client::open(info.set_tcp_settings(nodelay))?
        .get_connection_manager_with_config(config)
        .await
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    json!({ "cpu": cpu, "cores": cores, "os": std::env::consts::OS })
}

fn main() {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("bench: {message}");
            std::process::exit(2);
        }
    };
    // ferrisson's warnings (a renewal that failed, a lease lost) belong in
    // the output; RUST_LOG overrides.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    if cfg!(debug_assertions) {
        println!("note: a debug build; figures are only meaningful with --release");
    }
    // The server outlives the runtime: what the scenarios' clients left
    // running (a latch's close, say) is finished at the runtime's end,
    // and needs it.
    let (url, server) = support::redis_url();
    if let Some((n, what)) = options.pairs {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(pairs(&url, n, what, options.lean));
        drop(runtime);
        drop(server);
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let code = runtime.block_on(run(options, url));
    drop(runtime);
    drop(server);
    std::process::exit(code);
}

/// `n` pairs of `what`, one after the other on one task of a
/// current-thread runtime, with nothing else in the process: what
/// `valgrind --tool=callgrind` counts for two values of `n`, whose
/// difference over the pairs between them is the instructions one pair
/// takes in this process (the server runs in another).
async fn pairs(url: &str, n: usize, what: Pairs, lean: bool) {
    let client = ferrisson::Client::builder(url)
        .lean(lean)
        .build()
        .await
        .expect("connect a ferrisson client");
    let lock = client.lock("bench:pairs");
    let mut raw = connection(url).await.expect("connect to Redis");
    for _ in 0..n {
        match what {
            Pairs::Raw => scenarios::raw_pair(&mut raw, lock.name()).await,
            Pairs::Watchdog => lock
                .lock()
                .await
                .expect("lock")
                .unlock()
                .await
                .expect("unlock"),
            Pairs::Lease => lock
                .lock_with_lease(Duration::from_secs(10))
                .await
                .expect("lock")
                .unlock()
                .await
                .expect("unlock"),
        }
    }
}

/// Runs the scenarios `options` asks for on the Redis at `url`; the
/// process's exit code.
async fn run(options: Options, url: String) -> i32 {
    let raw = connection(&url).await.expect("connect to Redis");
    let mut admin = connection(&url).await.expect("connect to Redis");
    let version: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut admin)
        .await
        .map(|info: String| {
            info.lines()
                .find_map(|l| l.strip_prefix("redis_version:"))
                .unwrap_or("unknown")
                .trim()
                .to_owned()
        })
        .expect("INFO server");
    let machine = machine();
    println!(
        "ferrisson bench ({} run{}): {} cores, {}; redis {version}",
        if options.quick { "quick" } else { "full" },
        if options.lean {
            ""
        } else {
            ", latched protocol"
        },
        machine["cores"],
        machine["cpu"].as_str().unwrap_or("unknown"),
    );

    let started = std::time::Instant::now();
    let mut bench = Bench {
        options: options.clone(),
        url,
        raw,
        admin,
        rtt_us: f64::NAN,
        checks: Vec::new(),
        failures: Vec::new(),
    };
    let mut report = serde_json::Map::new();
    report.insert("round_trip".into(), scenarios::round_trip(&mut bench).await);
    if options.runs(2) {
        report.insert(
            "uncontended".into(),
            scenarios::uncontended(&mut bench).await,
        );
    }
    if options.runs(3) {
        report.insert("reentrancy".into(), scenarios::reentrancy(&mut bench).await);
    }
    if options.runs(4) {
        report.insert("throughput".into(), scenarios::throughput(&mut bench).await);
    }
    if options.runs(5) {
        report.insert("handoff".into(), scenarios::handoff(&mut bench).await);
    }
    if options.runs(6) {
        report.insert("watchdog".into(), holding::watchdog(&mut bench).await);
    }
    if options.runs(7) {
        report.insert("waiters".into(), holding::waiters(&mut bench).await);
    }
    if options.runs(8) {
        report.insert(
            "replica_sync".into(),
            deployments::replica_sync(&mut bench).await,
        );
    }
    if options.runs(9) {
        report.insert(
            "multilock_vs_redisson".into(),
            deployments::multilock_vs_redisson(&mut bench).await,
        );
    }
    if options.runs(10) {
        report.insert(
            "server_time".into(),
            server_time::server_time(&mut bench).await,
        );
    }
    if options.runs(11) {
        report.insert(
            "handoff_from_idle".into(),
            idle::handoff_from_idle(&mut bench).await,
        );
    }
    let elapsed = started.elapsed();

    println!("\nTargets (docs/benchmarks.md)\n");
    for check in &bench.checks {
        println!(
            "- [{}] {}: {}",
            if check.met { "met" } else { "MISSED" },
            check.target,
            check.measured
        );
    }
    println!(
        "\nexclusion and lease failures: {}; ran in {:.1} s",
        bench.failures.len(),
        elapsed.as_secs_f64()
    );

    if let Some(path) = &options.json {
        let checks: Vec<Value> = bench
            .checks
            .iter()
            .map(|c| json!({ "target": c.target, "measured": c.measured, "met": c.met }))
            .collect();
        let document = json!({
            "mode": if options.quick { "quick" } else { "full" },
            "lean": options.lean,
            "machine": machine,
            "redis_version": version,
            "seconds": elapsed.as_secs_f64(),
            "round_trip_p50_us": bench.rtt_us,
            "scenarios": Value::Object(report),
            "targets": checks,
            "failures": bench.failures,
        });
        let text = serde_json::to_string_pretty(&document).expect("JSON of plain values");
        if let Err(err) = std::fs::write(path, text + "\n") {
            eprintln!("bench: cannot write {path}: {err}");
            return 2;
        }
        println!("figures written to {path}");
    }
    if bench.failures.is_empty() {
        0
    } else {
        1
    }
}
