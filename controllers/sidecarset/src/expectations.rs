//! In-memory bookkeeping between rounds: the upgrades the planner asked the
//! controller to remember.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use kruise_core::sidecarset::update::{ExpectedHash, PodKey, Stage, UpdatePlan};

/// Give up waiting for an upgrade to show after this long (OpenKruise's
/// expectation timeout is of the same order): the pod was most likely
/// changed again by someone else, and the next round plans from what is.
const EXPECTATION_TIMEOUT: Duration = Duration::from_mins(1);

#[derive(Debug)]
struct Pending {
    hashes: Vec<ExpectedHash>,
    since: Instant,
}

/// SidecarSet name → upgrades written and not yet confirmed by a round.
#[derive(Debug, Default)]
pub struct Expectations {
    pending: Mutex<HashMap<String, Pending>>,
}

impl Expectations {
    /// What to pass as `UpdateInput::expectations`. Upgrades waited for
    /// longer than the timeout are dropped (with a warning).
    pub fn current(&self, sidecar_set: &str) -> Vec<ExpectedHash> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let expired = pending
            .get(sidecar_set)
            .is_some_and(|p| p.since.elapsed() > EXPECTATION_TIMEOUT);
        if expired {
            if let Some(dropped) = pending.remove(sidecar_set) {
                tracing::warn!(
                    sidecar_set,
                    pods = ?dropped.hashes.iter().map(|e| &e.pod).collect::<Vec<_>>(),
                    "upgraded pods never showed the new hash; planning without waiting for them"
                );
            }
            return Vec::new();
        }
        pending
            .get(sidecar_set)
            .map(|p| p.hashes.clone())
            .unwrap_or_default()
    }

    /// After a round: unless the planner was still waiting, every earlier
    /// expectation was met and is forgotten; the upgrades this round wrote
    /// (`written`) are remembered.
    pub fn record(&self, sidecar_set: &str, plan: &UpdatePlan, written: &[PodKey]) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if plan.stage != Stage::WaitForCache {
            pending.remove(sidecar_set);
        }
        let new: Vec<ExpectedHash> = plan
            .expectations
            .iter()
            .filter(|e| written.contains(&e.pod))
            .cloned()
            .collect();
        if new.is_empty() {
            return;
        }
        let entry = pending
            .entry(sidecar_set.to_owned())
            .or_insert_with(|| Pending {
                hashes: Vec::new(),
                since: Instant::now(),
            });
        entry.since = Instant::now();
        for expected in new {
            entry.hashes.retain(|e| e.pod != expected.pod);
            entry.hashes.push(expected);
        }
    }

    /// The SidecarSet is gone.
    pub fn forget(&self, sidecar_set: &str) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(sidecar_set);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use kruise_api::sidecarset::SidecarSetStatus;

    fn key(name: &str) -> PodKey {
        PodKey {
            namespace: "default".to_owned(),
            name: name.to_owned(),
        }
    }

    fn plan(stage: Stage, pods: &[&str]) -> UpdatePlan {
        UpdatePlan {
            status: SidecarSetStatus::default(),
            status_changed: false,
            stage,
            pod_changes: Vec::new(),
            not_upgradable: Vec::new(),
            condition_changes: Vec::new(),
            events: Vec::new(),
            expectations: pods
                .iter()
                .map(|p| ExpectedHash {
                    pod: key(p),
                    hash: "h2".to_owned(),
                })
                .collect(),
            requeue_after_seconds: None,
        }
    }

    #[test]
    fn only_written_upgrades_are_remembered_until_a_round_stops_waiting() {
        let expectations = Expectations::default();
        expectations.record("s", &plan(Stage::Upgrade, &["a", "b"]), &[key("a")]);
        assert_eq!(expectations.current("s").len(), 1);
        assert_eq!(expectations.current("s")[0].pod, key("a"));
        // Still waiting: kept.
        expectations.record("s", &plan(Stage::WaitForCache, &[]), &[]);
        assert_eq!(expectations.current("s").len(), 1);
        // A round that did not wait saw them all.
        expectations.record("s", &plan(Stage::Finished, &[]), &[]);
        assert!(expectations.current("s").is_empty());
        expectations.record("s", &plan(Stage::Upgrade, &["c"]), &[key("c")]);
        expectations.forget("s");
        assert!(expectations.current("s").is_empty());
        assert!(expectations.current("other").is_empty());
    }
}
