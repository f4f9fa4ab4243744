//! OpenKruise's `KruisePodReady` readiness gate, shared by whoever needs a
//! pod held not-ready for a while: the condition's message is a JSON list
//! of `{userAgent, key}` holders, and the condition is False while the list
//! is not empty (OpenKruise's `pkg/util/podreadiness`).

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The readiness gate's condition type.
pub const KRUISE_POD_READY: &str = "KruisePodReady";

/// One reason the pod is held not-ready.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    pub user_agent: String,
    pub key: String,
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
        return None;
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
