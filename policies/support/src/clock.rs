//! The time a guest takes from WASI (the host's clock); natively, the
//! machine's.

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
