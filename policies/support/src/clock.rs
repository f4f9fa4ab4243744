//! The time and randomness a guest takes from WASI (the host's clock and
//! `random_get`); natively, the machine's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Now, to the second.
pub fn now() -> Time {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let seconds = i64::try_from(seconds).unwrap_or(i64::MAX);
    Time(Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Now, to the second, as Kubernetes writes times.
pub fn now_rfc3339() -> String {
    now().0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A uniform draw from `[0, 1)`; std's hasher keys come from the
/// platform's randomness.
pub fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    // 53 random bits fill an f64's mantissa exactly.
    #[allow(clippy::cast_precision_loss)]
    let unit = (bits >> 11) as f64 / (1u64 << 53) as f64;
    unit
}
