//! Helpers shared by the randomised integration tests.

/// The seeds to run: `RINGMQ_SEED=<n>` replays one, `RINGMQ_SEEDS=<n>` runs
/// `0..n`, otherwise `0..default_count`.
///
/// # Panics
/// If `RINGMQ_SEED` is not a number.
pub fn seeds(default_count: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var("RINGMQ_SEED") {
        return vec![seed.parse().expect("RINGMQ_SEED is a number")];
    }
    let count = std::env::var("RINGMQ_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_count);
    (0..count).collect()
}
