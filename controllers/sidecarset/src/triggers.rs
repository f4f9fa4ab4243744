//! Pod events → the SidecarSets to reconcile (spec 02 §3 triggers), with
//! the core's `sidecar_sets_of_pod` and `pod_update_enqueue`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Pod;
use kruise_api::{SidecarSet, Stored};
use kruise_core::sidecarset::update::{PodKey, pod_update_enqueue, sidecar_sets_of_pod};
use kube::runtime::reflector::{ObjectRef, Store};

/// Remembers the last version of every pod seen (the shared watch's own
/// copy, not one more), so an update can be compared with what it
/// replaced.
pub struct PodTriggers {
    sidecar_sets: Store<Stored<SidecarSet>>,
    last_seen: Mutex<HashMap<PodKey, Arc<Pod>>>,
}

impl PodTriggers {
    pub fn new(sidecar_sets: Store<Stored<SidecarSet>>) -> Self {
        Self {
            sidecar_sets,
            last_seen: Mutex::new(HashMap::new()),
        }
    }

    /// The SidecarSets to reconcile for this pod event (an unreadable one
    /// concerns no pod).
    pub fn triggers(&self, pod: &Arc<Pod>) -> Vec<ObjectRef<Stored<SidecarSet>>> {
        let sets: Vec<SidecarSet> = self
            .sidecar_sets
            .state()
            .iter()
            .filter_map(|set| set.object.clone().ok())
            .collect();
        let old = self.remember(pod);
        affected(old.as_deref(), pod, &sets)
            .into_iter()
            .map(|name| ObjectRef::new(&name))
            .collect()
    }

    /// Stores `pod` as the last seen version (a terminating pod is
    /// forgotten: its next event is its deletion) and returns the previous.
    fn remember(&self, pod: &Arc<Pod>) -> Option<Arc<Pod>> {
        let mut last_seen = self
            .last_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let key = PodKey::of(pod);
        if pod.metadata.deletion_timestamp.is_some() {
            last_seen.remove(&key)
        } else {
            last_seen.insert(key, Arc::clone(pod))
        }
    }
}

/// A pod seen for the first time (created, or deleted after its
/// termination was seen) wakes every SidecarSet it concerns; an update only
/// those for which the core says so (any delay it asks for is dropped: the
/// shared store already holds the event when the round reads it).
pub fn affected(old: Option<&Pod>, new: &Pod, sidecar_sets: &[SidecarSet]) -> Vec<String> {
    let names = sidecar_sets_of_pod(new, sidecar_sets, &BTreeMap::new());
    let Some(old) = old else {
        return names;
    };
    names
        .into_iter()
        .filter(|name| {
            sidecar_sets
                .iter()
                .find(|set| set.metadata.name.as_deref() == Some(name.as_str()))
                .is_some_and(|set| pod_update_enqueue(old, new, set).is_some())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    fn set(name: &str, not_update: bool) -> SidecarSet {
        let mut strategy = json!({});
        if not_update {
            strategy = json!({"type": "NotUpdate"});
        }
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "SidecarSet",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": "nginx"}},
                "updateStrategy": strategy,
                "containers": [{"name": format!("{name}-c"), "image": "busybox"}],
            },
        }))
        .unwrap()
    }

    fn pod(rv: &str, ready: bool, injected: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "p", "namespace": "default", "resourceVersion": rv,
                "labels": {"app": "nginx"},
                "annotations": {"kruise.io/sidecarset-injected-list": injected},
            },
            "spec": {"containers": [{"name": "app", "image": "nginx"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }},
            ]},
        }))
        .unwrap()
    }

    #[test]
    fn new_pods_wake_the_sidecar_sets_that_injected_them() {
        let sets = [set("a", false), set("b", false), set("c", true)];
        assert_eq!(affected(None, &pod("1", true, "a,c"), &sets), ["a", "c"]);
    }

    #[test]
    fn updates_wake_only_when_the_core_says_so() {
        let sets = [set("a", false), set("c", true)];
        let old = pod("1", true, "a,c");
        // Nothing the controller cares about changed.
        assert!(affected(Some(&old), &pod("2", true, "a,c"), &sets).is_empty());
        // Ready flipped: not for the NotUpdate SidecarSet.
        assert_eq!(affected(Some(&old), &pod("2", false, "a,c"), &sets), ["a"]);
    }

    #[test]
    fn terminating_pods_are_forgotten() {
        let triggers = PodTriggers::new(kube::runtime::reflector::store::<Stored<SidecarSet>>().0);
        let first = Arc::new(pod("1", true, "a"));
        assert!(triggers.remember(&first).is_none());
        assert!(triggers.remember(&Arc::new(pod("2", true, "a"))).is_some());
        let mut terminating = pod("3", true, "a");
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(triggers.remember(&Arc::new(terminating)).is_some());
        assert!(triggers.remember(&first).is_none());
    }
}
