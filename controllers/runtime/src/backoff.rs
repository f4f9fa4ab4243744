//! One retry backoff for every controller: per object, doubling from
//! [`BASE`] to a cap ([`MAX`] unless the controller sets its own),
//! forgotten after a good round.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The first retry after a failure; doubled on each further failure.
pub const BASE: Duration = Duration::from_millis(500);
/// The longest wait between retries.
pub const MAX: Duration = Duration::from_mins(5);

/// Consecutive failures per object key (a name, or `namespace/name`).
#[derive(Debug)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
    max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::with_max(MAX)
    }
}

impl Backoff {
    /// Doubling from [`BASE`] up to `max`.
    pub fn with_max(max: Duration) -> Self {
        Self {
            failures: Mutex::new(HashMap::new()),
            max,
        }
    }

    /// One more failure of `key`: how long to wait before the retry.
    pub fn next(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let count = failures.entry(key.to_owned()).or_insert(0);
        let delay = delay_after(*count).min(self.max);
        *count = count.saturating_add(1);
        delay
    }

    /// `key` reconciled without needing a retry.
    pub fn reset(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

/// `BASE * 2^failures`, at most `MAX`.
fn delay_after(failures: u32) -> Duration {
    BASE.checked_mul(2_u32.saturating_pow(failures.min(31)))
        .map_or(MAX, |delay| delay.min(MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        assert_eq!(delay_after(0), Duration::from_millis(500));
        assert_eq!(delay_after(1), Duration::from_secs(1));
        assert_eq!(delay_after(3), Duration::from_secs(4));
        assert_eq!(delay_after(10), MAX);
        assert_eq!(delay_after(u32::MAX), MAX);
    }

    #[test]
    fn each_key_counts_its_own_failures_until_reset() {
        let backoff = Backoff::default();
        assert_eq!(backoff.next("a"), BASE);
        assert_eq!(backoff.next("a"), BASE * 2);
        assert_eq!(backoff.next("b"), BASE);
        backoff.reset("a");
        assert_eq!(backoff.next("a"), BASE);
    }

    #[test]
    fn a_controller_may_cap_lower() {
        let backoff = Backoff::with_max(Duration::from_mins(1));
        for _ in 0..20 {
            backoff.next("s");
        }
        assert_eq!(backoff.next("s"), Duration::from_mins(1));
    }
}
