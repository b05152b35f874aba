//! A `redis-server` whose wall clock a test steps, as NTP or an operator
//! steps a server's: `clock_shim.c`, built here with the C compiler (`cc`,
//! or `$CC`) and preloaded into the server, adds to the server's wall
//! clock the ms a file holds, read at every call. Its monotonic clocks are
//! left alone, as a step leaves them. Linux (and glibc) only.

use std::ffi::OsString;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crate::server::{redis_binary, unique_dir, RedisServer};

/// The shim's source.
const SHIM: &str = include_str!("clock_shim.c");

/// The variable naming the shim's offset file.
const OFFSET_FILE_ENV: &str = "FERRISSON_CLOCK_OFFSET_FILE";

/// The wall clock of one server: [`ServerClock::step_ahead`] moves it.
#[derive(Debug)]
pub struct ServerClock {
    /// The file whose ms the shim adds.
    file: PathBuf,
    /// The ms written so far.
    ahead_ms: AtomicU64,
}

impl ServerClock {
    /// Steps the server's wall clock forward by `by`, at once (what its
    /// `TIME` says, and when its keys expire).
    pub fn step_ahead(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap();
        let ahead = self.ahead_ms.fetch_add(by, Ordering::SeqCst) + by;
        write_offset(&self.file, ahead);
    }
}

impl Drop for ServerClock {
    fn drop(&mut self) {
        if let Some(dir) = self.file.parent() {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// Starts the suite's `redis-server` with a wall clock the returned
/// [`ServerClock`] steps (on time until then).
///
/// # Panics
/// When the shim cannot be built (no C compiler), or the server does not
/// come up.
pub fn start_with_steppable_clock() -> (RedisServer, ServerClock) {
    // In a directory of its own, removed with the clock.
    let file = unique_dir().join("clock-offset-ms");
    write_offset(&file, 0);
    let env = vec![
        ("LD_PRELOAD".to_owned(), OsString::from(shim())),
        (OFFSET_FILE_ENV.to_owned(), OsString::from(&file)),
    ];
    let server = RedisServer::start_with_env(redis_binary(), &[], env);
    let clock = ServerClock {
        file,
        ahead_ms: AtomicU64::new(0),
    };
    (server, clock)
}

/// Writes `ms` to the offset file whole: a new file renamed over it, so
/// that the shim never reads half of it.
fn write_offset(file: &Path, ms: u64) {
    let next = file.with_extension("next");
    fs::write(&next, ms.to_string()).unwrap();
    fs::rename(&next, file).unwrap();
}

/// The shim, built once per test process.
fn shim() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        // Kept in the temp dir under a name its source decides, so that
        // the suite's test processes build it once: each builds it under
        // a name of its own and renames it into place.
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        SHIM.hash(&mut hasher);
        let name = format!("ferrisson-clock-shim-{:016x}.so", hasher.finish());
        let built = std::env::temp_dir().join(name);
        if built.exists() {
            return built;
        }
        let dir = unique_dir();
        let (source, object) = (dir.join("clock_shim.c"), dir.join("clock_shim.so"));
        fs::write(&source, SHIM).unwrap();
        let cc = std::env::var_os("CC").unwrap_or_else(|| OsString::from("cc"));
        let status = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&object)
            .arg(&source)
            .status()
            .unwrap_or_else(|err| {
                panic!(
                    "could not run the C compiler {}: {err} (a test that steps a \
                     server's clock builds a small preloaded library; install cc or set CC)",
                    Path::new(&cc).display()
                )
            });
        assert!(status.success(), "building the clock shim failed: {status}");
        fs::rename(&object, &built).unwrap();
        let _ = fs::remove_dir_all(&dir);
        built
    })
}
