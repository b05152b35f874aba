//! One seeded pseudo-random generator for the tests that draw at random
//! (cancellation points, fuzzing, jitter): a failure can be replayed.

/// Xorshift: small, fast, and the same sequence for the same seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from `FERRISSON_SEED` when set, else at random.
    /// The seed is printed (the test harness shows it when the test fails),
    /// with the line that replays it.
    pub fn from_env(test: &str) -> Rng {
        Rng::new(announced_seed(test))
    }

    /// A generator for `seed` (any value; zero is moved off, as xorshift
    /// needs).
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// The next number.
    // Not an `Iterator`: the generator never ends, and the tests call
    // `next` for a number, not an `Option`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The seed of `test`: `FERRISSON_SEED` when set (a number), else a random
/// one; printed with the line that replays it (the harness shows a failed
/// test's output, so the seed of a failure is never lost).
pub fn announced_seed(test: &str) -> u64 {
    let seed = seed();
    println!("{test}: seed {seed} (FERRISSON_SEED={seed} replays it)");
    seed
}

/// `FERRISSON_SEED` when set (a number), else a random seed.
fn seed() -> u64 {
    std::env::var("FERRISSON_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| uuid::Uuid::new_v4().as_u64_pair().0)
}
