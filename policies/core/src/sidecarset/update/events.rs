//! Which pod events wake the SidecarSet controller (spec 02 §3 triggers,
//! `sidecarset_pod_event_handler.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kruise_api::SidecarSet;
use kruise_api::sidecarset::SidecarSetUpdateStrategyType;

use super::consistency::is_consistent_all;
use super::pods::{has_ready_condition, injected_list, selects};
use crate::sidecarset::sidecar_set_name;

/// Seconds to wait before reconciling after a pod's sidecars turned
/// (in)consistent, so kubelet's follow-up status lands first.
const CONSISTENCY_DELAY_SECONDS: u32 = 5;

/// The SidecarSets (names, sorted as given) a pod event concerns: those in
/// the pod's `kruise.io/sidecarset-injected-list` that exist, or, for a pod
/// without that list, those whose scope and selector match it.
pub fn sidecar_sets_of_pod(
    pod: &Pod,
    sidecar_sets: &[SidecarSet],
    namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<String> {
    let listed = injected_list(pod);
    sidecar_sets
        .iter()
        .filter(|set| {
            if listed.is_empty() {
                selects(set, pod, namespace_labels).unwrap_or(false)
            } else {
                listed.contains(sidecar_set_name(set))
            }
        })
        .map(|set| sidecar_set_name(set).to_owned())
        .collect()
}

/// Whether a pod update should reconcile `sidecar_set`, and after how many
/// seconds: `Some(0)` when the pod started terminating, its Ready condition
/// flipped, or its labels changed while a canary `updateStrategy.selector`
/// is set; `Some(5)` when its sidecars turned (in)consistent; `None`
/// otherwise, for an unchanged `resourceVersion`, or for a `NotUpdate`
/// SidecarSet.
pub fn pod_update_enqueue(old: &Pod, new: &Pod, sidecar_set: &SidecarSet) -> Option<u32> {
    if old.metadata.resource_version.is_some()
        && old.metadata.resource_version == new.metadata.resource_version
    {
        return None;
    }
    let strategy = sidecar_set.spec.update_strategy.as_ref();
    if strategy.and_then(|s| s.type_) == Some(SidecarSetUpdateStrategyType::NotUpdate) {
        return None;
    }
    if old.metadata.deletion_timestamp.is_some() {
        return None;
    }
    if new.metadata.deletion_timestamp.is_some()
        || has_ready_condition(old) != has_ready_condition(new)
    {
        return Some(0);
    }
    if is_consistent_all(sidecar_set, old) != is_consistent_all(sidecar_set, new) {
        return Some(CONSISTENCY_DELAY_SECONDS);
    }
    let canary = strategy.is_some_and(|s| s.selector.is_some());
    (canary && old.metadata.labels != new.metadata.labels).then_some(0)
}
