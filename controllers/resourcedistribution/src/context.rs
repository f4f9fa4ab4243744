//! What every reconcile shares: the client, the event recorder and the
//! retry backoff per distribution.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

use crate::CONTROLLER_NAME;

/// The first retry after a failure; doubled on each further failure.
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// The longest wait between retries.
const BACKOFF_MAX: Duration = Duration::from_mins(5);

pub(crate) struct Context {
    pub client: Client,
    pub recorder: Recorder,
    /// Consecutive failed reconciles, per distribution name.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(client: Client) -> Self {
        let reporter = Reporter {
            controller: CONTROLLER_NAME.to_owned(),
            instance: None,
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// One more failure of `name`: how long to wait before the retry.
    pub fn next_backoff(&self, name: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let count = failures.entry(name.to_owned()).or_insert(0);
        let delay = backoff(*count);
        *count = count.saturating_add(1);
        delay
    }

    /// `name` reconciled without needing a retry.
    pub fn reset_backoff(&self, name: &str) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}

/// `BACKOFF_BASE * 2^failures`, at most `BACKOFF_MAX`.
fn backoff(failures: u32) -> Duration {
    BACKOFF_BASE
        .checked_mul(2_u32.saturating_pow(failures.min(31)))
        .map_or(BACKOFF_MAX, |delay| delay.min(BACKOFF_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(10), BACKOFF_MAX);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }
}
