//! The randomness a guest takes from WASI (`random_get`, asked on every
//! draw); natively, the machine's.

/// 64 random bits, asked of the platform (WASI `random_get` in a module)
/// on every call; `None` when it has no randomness to give.
///
/// Not from std's `RandomState`: its keys are drawn once per thread and
/// then only counted up, and a module's one thread may have drawn them
/// before the host snapshotted it (waPC's registry is a `HashMap`): every
/// instance started from that snapshot would then draw the same numbers.
pub fn random_u64() -> Option<u64> {
    getrandom::u64().ok()
}

/// A uniform draw from `[0, 1)`, as [`random_u64`].
pub fn random_unit() -> Option<f64> {
    let bits = random_u64()?;
    // 53 random bits fill an f64's mantissa exactly.
    #[allow(clippy::cast_precision_loss)]
    let unit = (bits >> 11) as f64 / (1u64 << 53) as f64;
    Some(unit)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    /// Natively only the range and the spread can be seen here; that a
    /// module asks the host anew on every draw, even when started from a
    /// snapshot, is host/tests/snapshot.rs's
    /// `evaluations_from_one_snapshot_draw_their_own_random_numbers`.
    #[test]
    fn draws_are_in_the_unit_interval_and_differ() {
        let draws: Vec<f64> = (0..64).map(|_| super::random_unit().unwrap()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)), "{draws:?}");
        let mut distinct = draws.clone();
        distinct.sort_by(f64::total_cmp);
        distinct.dedup();
        assert!(distinct.len() > 60, "{draws:?}");
    }
}
