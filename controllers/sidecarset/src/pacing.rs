//! At most one round per SidecarSet every [`ROUND_INTERVAL`]. A rollout's
//! pod events come in bursts (each upgraded pod changes several times as
//! its container restarts and turns ready), and every round reads all the
//! SidecarSet's pods and writes its status when a count moved: at 2,000
//! pods a round per event was ~11 rounds and status writes a second
//! (docs/benchmarks.md). An event arriving sooner is not lost: its round
//! is put off until the interval is over and then sees every change since.
//! A lone event after a quiet spell still starts a round at once.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The shortest time between the starts of two rounds of one SidecarSet.
pub const ROUND_INTERVAL: Duration = Duration::from_secs(1);

/// When each SidecarSet's last round started.
#[derive(Debug)]
pub struct Pacing {
    interval: Duration,
    last_start: Mutex<HashMap<String, Instant>>,
}

impl Default for Pacing {
    fn default() -> Self {
        Self::with_interval(ROUND_INTERVAL)
    }
}

impl Pacing {
    /// Rounds at least `interval` apart ([`ROUND_INTERVAL`] by default).
    pub fn with_interval(interval: Duration) -> Self {
        Self {
            interval,
            last_start: Mutex::default(),
        }
    }

    /// None: a round of `sidecar_set` may start `now` (and is noted as
    /// started); else how long until one may.
    pub fn start(&self, sidecar_set: &str, now: Instant) -> Option<Duration> {
        let mut last_start = self
            .last_start
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let wait = wait_after(last_start.get(sidecar_set).copied(), now, self.interval);
        if wait.is_none() {
            last_start.insert(sidecar_set.to_owned(), now);
        }
        wait
    }

    /// A SidecarSet that is gone.
    pub fn forget(&self, sidecar_set: &str) {
        self.last_start
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(sidecar_set);
    }
}

/// How long after `now` a round may start, given the last one's start.
fn wait_after(last_start: Option<Instant>, now: Instant, interval: Duration) -> Option<Duration> {
    let next = last_start? + interval;
    next.checked_duration_since(now)
        .filter(|wait| !wait.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HALF: Duration = Duration::from_millis(500);

    #[test]
    fn a_first_round_starts_at_once() {
        assert_eq!(Pacing::default().start("a", Instant::now()), None);
    }

    #[test]
    fn a_round_within_the_interval_waits_for_the_rest_of_it() {
        let pacing = Pacing::default();
        let t0 = Instant::now();
        assert_eq!(pacing.start("a", t0), None);
        assert_eq!(
            pacing.start("a", t0 + HALF),
            Some(ROUND_INTERVAL.saturating_sub(HALF))
        );
        // Waiting does not move the interval: the next round starts once
        // it is over, not an interval after the last refusal.
        assert_eq!(pacing.start("a", t0 + ROUND_INTERVAL), None);
        assert_eq!(
            pacing.start("a", t0 + ROUND_INTERVAL + HALF),
            Some(ROUND_INTERVAL.saturating_sub(HALF))
        );
    }

    #[test]
    fn sidecar_sets_are_paced_apart() {
        let pacing = Pacing::default();
        let t0 = Instant::now();
        assert_eq!(pacing.start("a", t0), None);
        assert_eq!(pacing.start("b", t0), None);
        assert!(pacing.start("a", t0).is_some());
    }

    #[test]
    fn a_forgotten_sidecar_set_starts_at_once() {
        let pacing = Pacing::default();
        let t0 = Instant::now();
        assert_eq!(pacing.start("a", t0), None);
        pacing.forget("a");
        assert_eq!(pacing.start("a", t0 + HALF), None);
    }
}
