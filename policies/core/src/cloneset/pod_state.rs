//! What the planner reads off a pod (spec 03 §6.1, §7; index §1.3).

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;

use super::{
    ANNOTATION_DELETION_COST, CONDITION_IN_PLACE_UPDATE_READY, LABEL_LIFECYCLE_STATE,
    LABEL_REVISION, LABEL_SPECIFIED_DELETE,
};

/// Lifecycle states carried in `lifecycle.apps.kruise.io/state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LifecycleState {
    PreparingNormal,
    Normal,
    PreparingUpdate,
    Updating,
    Updated,
    PreparingDelete,
}

impl LifecycleState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreparingNormal => "PreparingNormal",
            Self::Normal => "Normal",
            Self::PreparingUpdate => "PreparingUpdate",
            Self::Updating => "Updating",
            Self::Updated => "Updated",
            Self::PreparingDelete => "PreparingDelete",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::PreparingNormal,
            Self::Normal,
            Self::PreparingUpdate,
            Self::Updating,
            Self::Updated,
            Self::PreparingDelete,
        ]
        .into_iter()
        .find(|state| state.as_str() == text)
    }
}

pub fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

/// Unknown state values behave like "no state" (they are not `Normal` but
/// the planner cannot act on them either).
pub fn lifecycle_state(pod: &Pod) -> Option<LifecycleState> {
    label(pod, LABEL_LIFECYCLE_STATE).and_then(LifecycleState::parse)
}

/// k8s `IsPodActive`: not finished and not being deleted.
pub fn is_active(pod: &Pod) -> bool {
    let phase = phase(pod);
    phase != "Succeeded" && phase != "Failed" && pod.metadata.deletion_timestamp.is_none()
}

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
        .unwrap_or_default()
}

pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The status kubelet reports for the container `name`.
pub fn container_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == name)
}

/// The Ready condition is True (the k8s notion, used by the sort orders).
pub fn has_ready_condition(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

/// When the pod last became Ready, if it is Ready.
pub fn ready_since(pod: &Pod) -> Option<Timestamp> {
    condition(pod, "Ready")
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// Status `readyReplicas`: Running, Ready, and not held by an in-place update.
pub fn is_running_and_ready(pod: &Pod) -> bool {
    phase(pod) == "Running"
        && has_ready_condition(pod)
        && condition(pod, CONDITION_IN_PLACE_UPDATE_READY).is_none_or(|c| c.status == "True")
}

/// Spec §6.1 `available(p, mrs)`: lifecycle "" or Normal, Running and Ready
/// (in-place gate open) for at least `min_ready_seconds`. With a positive
/// `min_ready_seconds` a Ready condition without a transition time does not
/// count, because the readiness age cannot be proven.
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    if !matches!(lifecycle_state(pod), None | Some(LifecycleState::Normal))
        || !is_running_and_ready(pod)
    {
        return false;
    }
    if min_ready_seconds <= 0 {
        return true;
    }
    ready_since(pod)
        .is_some_and(|since| now.as_second() - since.as_second() >= i64::from(min_ready_seconds))
}

/// Spec §6.1 `ready(p)`: the predicate the deletion and update budgets use.
pub fn is_ready_for_limits(pod: &Pod, now: Timestamp) -> bool {
    is_available(pod, 0, now)
}

/// The `apps.kruise.io/specified-delete` label (any value) or a name listed
/// in `scaleStrategy.podsToDelete`.
pub fn is_specified_delete(pod: &Pod, pods_to_delete: &[String]) -> bool {
    label(pod, LABEL_SPECIFIED_DELETE).is_some()
        || pods_to_delete.iter().any(|listed| listed == name(pod))
}

pub fn revision_label(pod: &Pod) -> Option<&str> {
    label(pod, LABEL_REVISION)
}

/// The hash part of a revision name: the suffix after the last `-`.
pub fn short_hash(revision: &str) -> &str {
    revision.rsplit('-').next().unwrap_or(revision)
}

/// `EqualToRevisionHash`: the pod's label names the revision in full or by
/// the same short hash (the `CloneSetShortHash` gate writes only the hash).
pub fn is_at_revision(pod: &Pod, revision: &str) -> bool {
    revision_label(pod).is_some_and(|value| {
        !value.is_empty() && (value == revision || short_hash(value) == short_hash(revision))
    })
}

/// `controller.kubernetes.io/pod-deletion-cost`; absent or invalid is 0.
pub fn deletion_cost(pod: &Pod) -> i32 {
    annotation(pod, ANNOTATION_DELETION_COST)
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

pub fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .unwrap_or_default()
}

pub fn max_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.iter().map(|s| s.restart_count).max())
        .unwrap_or(0)
}

pub fn created_at(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn container_statuses_and_conditions_are_found_by_name() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": "a", "image": "a:1", "imageID": "", "ready": true, "restartCount": 2},
                ],
            },
        }))
        .unwrap();
        assert_eq!(container_status(&pod, "a").unwrap().restart_count, 2);
        assert!(container_status(&pod, "b").is_none());
        assert!(container_status(&Pod::default(), "a").is_none());
        assert!(has_ready_condition(&pod));
        assert!(condition(&pod, "PodScheduled").is_none());
    }
}
