//! OpenKruise's `KruisePodReady` readiness gate, shared by whoever needs a
//! pod held not-ready for a while: the condition's message is a JSON list
//! of `{userAgent, key}` holders, and the condition is False while the list
//! is not empty (OpenKruise's `pkg/util/podreadiness`). The pod webhook
//! gives the gate to every pod an OpenKruise workload creates, and the
//! readiness controller writes the condition True once, when it is absent.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodReadinessGate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The readiness gate's condition type.
pub const KRUISE_POD_READY: &str = "KruisePodReady";

/// One reason the pod is held not-ready.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    pub user_agent: String,
    pub key: String,
}

/// The API group of the workloads whose pods get the gate.
const KRUISE_GROUP: &str = "apps.kruise.io";

/// Whether the pod's controller is an OpenKruise workload: its controller
/// reference's `apiVersion` is `apps.kruise.io/<version>`.
pub fn owned_by_kruise(pod: &Pod) -> bool {
    let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
    else {
        return false;
    };
    let mut parts = owner.api_version.split('/');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(KRUISE_GROUP), Some(_), None)
    )
}

/// The pod webhook's first step (spec 00 §1.5): a pod created by an
/// OpenKruise workload gets the gate, once. Returns whether it changed.
pub fn add_gate_for_workload(pod: &mut Pod) -> bool {
    if !owned_by_kruise(pod) || has_gate(pod) {
        return false;
    }
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.readiness_gates
        .get_or_insert_with(Vec::new)
        .push(PodReadinessGate {
            condition_type: KRUISE_POD_READY.to_owned(),
        });
    true
}

/// The readiness controller's one write: True for a pod that has the gate
/// but no condition yet (nobody holds it). `None` for any other pod,
/// including one being deleted.
pub fn first_condition(pod: &Pod, now: Timestamp) -> Option<PodCondition> {
    let wanted =
        has_gate(pod) && condition(pod).is_none() && pod.metadata.deletion_timestamp.is_none();
    wanted.then(|| PodCondition {
        type_: KRUISE_POD_READY.to_owned(),
        status: "True".to_owned(),
        last_transition_time: Some(Time(now)),
        ..PodCondition::default()
    })
}

/// Whether the readiness controller leaves the first condition to the
/// pod's workload: a pod whose `InPlaceUpdateReady` gate (every CloneSet
/// pod's) has no condition yet gets both in the one write that opens that
/// gate (`cloneset::in_place_apply::ready_status_patch`). Once that gate
/// has a condition, a pod still without this one is the controller's.
pub fn left_to_workload(pod: &Pod) -> bool {
    let gate = crate::cloneset::CONDITION_IN_PLACE_UPDATE_READY;
    let gated = pod
        .spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .any(|g| g.condition_type == gate);
    let opened = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == gate));
    gated && !opened
}

/// The pod declares the `KruisePodReady` readiness gate.
pub fn has_gate(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .any(|g| g.condition_type == KRUISE_POD_READY)
}

/// The holders the pod's condition lists; a message that is not such a
/// list (written by another tool) counts as none.
pub fn holders(pod: &Pod) -> Vec<Holder> {
    condition(pod)
        .and_then(|c| c.message.as_deref())
        .filter(|m| !m.is_empty())
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or_default()
}

pub fn is_held_by(pod: &Pod, holder: &Holder) -> bool {
    holders(pod).contains(holder)
}

/// The condition with `holder` added (False), or `None` when it already
/// holds the pod.
pub fn hold(pod: &Pod, holder: &Holder, now: Timestamp) -> Option<PodCondition> {
    let mut list = holders(pod);
    if list.contains(holder) {
        // Listed but True (a write without a resourceVersion merged over
        // the hold): written False again, as OpenKruise's addNotReadyKey
        // does.
        return (!matches_list(pod, &list)).then(|| written(&list, now));
    }
    list.push(holder.clone());
    crate::ordered::sort(&mut list);
    Some(written(&list, now))
}

/// The condition with `holder` removed (True once nobody holds it), or
/// `None` when it did not hold the pod.
pub fn release(pod: &Pod, holder: &Holder, now: Timestamp) -> Option<PodCondition> {
    let mut list = holders(pod);
    let before = list.len();
    list.retain(|h| h != holder);
    (list.len() != before).then(|| written(&list, now))
}

/// The condition with exactly `keys` held for `user_agent` (other holders
/// kept), or `None` when that is what it holds already. For a writer that
/// derives its holds from state, so a hold whose write was lost is taken
/// again and one whose reason has gone is let go.
pub fn hold_exactly(
    pod: &Pod,
    user_agent: &str,
    keys: &[&str],
    now: Timestamp,
) -> Option<PodCondition> {
    let before = holders(pod);
    let mut list: Vec<Holder> = before
        .iter()
        .filter(|h| h.user_agent != user_agent)
        .cloned()
        .collect();
    list.extend(keys.iter().map(|key| Holder {
        user_agent: user_agent.to_owned(),
        key: (*key).to_owned(),
    }));
    crate::ordered::sort(&mut list);
    let mut sorted_before = before;
    crate::ordered::sort(&mut sorted_before);
    (list != sorted_before || !matches_list(pod, &list)).then(|| written(&list, now))
}

/// Whether the pod's condition, if any, has the status its holder list
/// gives: False while anyone holds the pod, True once nobody does. A
/// condition True with holders listed, or False with none (an older
/// controller of ours wrote False with no list; a message that is no list
/// reads as none), does not, and is written again.
fn matches_list(pod: &Pod, list: &[Holder]) -> bool {
    let wanted = if list.is_empty() { "True" } else { "False" };
    condition(pod).is_none_or(|c| c.status == wanted)
}

/// The `pods/status` patch that writes `condition`, on the version of the
/// pod it was computed from (a write in between, such as another holder's,
/// makes it a conflict rather than lost). A hold turns `Ready` False with
/// it, as the kubelet would on its next sync, so the pod leaves Service
/// endpoints now.
pub fn status_patch(pod: &Pod, condition: &PodCondition, now: Timestamp) -> Value {
    let mut conditions = vec![serde_json::to_value(condition).unwrap_or_default()];
    if condition.status == "False" {
        conditions.push(json!({
            "type": "Ready",
            "status": "False",
            "reason": "ReadinessGatesNotReady",
            "message": format!("the status of pod readiness gate \"{KRUISE_POD_READY}\" is not \"True\", but False"),
            "lastTransitionTime": now.to_string(),
        }));
    }
    json!({
        "metadata": {"resourceVersion": pod.metadata.resource_version},
        "status": {"conditions": conditions},
    })
}

fn condition(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == KRUISE_POD_READY)
}

fn written(list: &[Holder], now: Timestamp) -> PodCondition {
    PodCondition {
        type_: KRUISE_POD_READY.to_owned(),
        status: if list.is_empty() { "True" } else { "False" }.to_owned(),
        message: Some(serde_json::to_string(list).unwrap_or_default()),
        last_transition_time: Some(Time(now)),
        ..PodCondition::default()
    }
}
