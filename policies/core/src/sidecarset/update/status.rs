//! The SidecarSet status (spec 02 §5) and the pods' `SidecarSetUpgradable`
//! condition (§9).

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::SidecarSet;
use kruise_api::sidecarset::SidecarSetStatus;
use serde_json::{Map, Value};

use super::UPGRADABLE_CONDITION;
use super::consistency::is_consistent_and_ready;
use super::pods::is_updated;
use crate::sidecarset::sidecar_set_name;

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Spec 02 §5 over the matched pods (see [`super::matching_pods`]):
/// `updatedPods` record the current hash, `readyPods` are consistent and
/// ready, `updatedReadyPods` both. `observedGeneration` is the SidecarSet's
/// generation.
pub fn compute_status(
    sidecar_set: &SidecarSet,
    matched: &[&Pod],
    latest_revision: &str,
    collision_count: Option<i32>,
) -> SidecarSetStatus {
    let mut updated = 0;
    let mut ready = 0;
    let mut updated_ready = 0;
    for pod in matched {
        let is_new = is_updated(sidecar_set, pod);
        let is_ready = is_consistent_and_ready(sidecar_set, pod);
        updated += usize::from(is_new);
        ready += usize::from(is_ready);
        updated_ready += usize::from(is_new && is_ready);
    }
    SidecarSetStatus {
        observed_generation: sidecar_set.metadata.generation,
        matched_pods: count(matched.len()),
        updated_pods: count(updated),
        ready_pods: count(ready),
        updated_ready_pods: count(updated_ready),
        latest_revision: Some(latest_revision.to_owned()).filter(|r| !r.is_empty()),
        collision_count,
    }
}

/// The stored status needs this update (`inconsistentStatus` upstream).
pub(super) fn differs(stored: Option<&SidecarSetStatus>, new: &SidecarSetStatus) -> bool {
    let Some(stored) = stored else {
        return true;
    };
    new.observed_generation.unwrap_or(0) > stored.observed_generation.unwrap_or(0)
        || new.matched_pods != stored.matched_pods
        || new.updated_pods != stored.updated_pods
        || new.ready_pods != stored.ready_pods
        || new.updated_ready_pods != stored.updated_ready_pods
        || new.latest_revision != stored.latest_revision
        || new.collision_count != stored.collision_count
}

/// Spec 02 §9: the pod's `SidecarSetUpgradable` condition once this
/// SidecarSet's verdict is recorded in its message (a JSON map SidecarSet
/// name → bool). `None` when the condition would not change.
pub fn upgradable_condition(
    pod: &Pod,
    sidecar_set: &SidecarSet,
    upgradable: bool,
    now: Timestamp,
) -> Option<PodCondition> {
    let old = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == UPGRADABLE_CONDITION));
    let mut verdicts: Map<String, Value> = old
        .and_then(|c| c.message.as_deref())
        .filter(|m| !m.is_empty())
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or_default();
    verdicts.insert(
        sidecar_set_name(sidecar_set).to_owned(),
        Value::Bool(upgradable),
    );
    let all = verdicts.values().all(|v| v != &Value::Bool(false));
    let (status, reason) = if all {
        ("True", "AllSidecarsetUpgradable")
    } else {
        ("False", "UpdateImmutableField")
    };
    let mut condition = old.cloned().unwrap_or_else(|| PodCondition {
        type_: UPGRADABLE_CONDITION.to_owned(),
        ..PodCondition::default()
    });
    condition.reason = Some(reason.to_owned());
    condition.message = Some(Value::Object(verdicts).to_string());
    if old.is_none_or(|o| o.status != status) {
        status.clone_into(&mut condition.status);
        condition.last_transition_time = Some(Time(seconds(now)));
    }
    (old != Some(&condition)).then_some(condition)
}

/// Kubernetes times are written with whole seconds.
pub(super) fn seconds(now: Timestamp) -> Timestamp {
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}
