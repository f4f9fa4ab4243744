//! Random draws for names, TTL spreads and simulated failures.

use std::hash::{BuildHasher, RandomState};

/// A random u64 from the platform's randomness. Should that fail, std's
/// hasher gives one: its keys are drawn from the platform once per thread
/// and then only counted up, so its draws are harder to tell apart but
/// not guessable.
pub fn random_u64() -> u64 {
    getrandom::u64().unwrap_or_else(|_| RandomState::new().hash_one(0u8))
}

/// A uniform draw from `[0, 1)`.
pub fn random_unit() -> f64 {
    // 53 random bits fill an f64's mantissa exactly.
    #[allow(clippy::cast_precision_loss)]
    let unit = (random_u64() >> 11) as f64 / (1u64 << 53) as f64;
    unit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_fall_in_the_unit_interval_and_differ() {
        let draws: Vec<f64> = (0..64).map(|_| random_unit()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let ids: std::collections::BTreeSet<u64> = (0..64).map(|_| random_u64()).collect();
        assert!(ids.len() > 60, "{} distinct of 64", ids.len());
    }
}
