//! Lifecycle hooks (spec 03 §7): a hook holds a pod in a state while the
//! pod carries the hook's labels or finalizers, and a hook with
//! `markPodNotReady` holds it not-ready meanwhile (spec 03 §6.6, §7).

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::{Lifecycle, LifecycleHook};
use serde_json::Value;

use super::pod_state::{LifecycleState, label, lifecycle_state};
use crate::pod_readiness::{self, Holder};

fn has_finalizer(pod: &Pod, finalizer: &str) -> bool {
    pod.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == finalizer)
}

/// Any of the hook's labels (key=value) or finalizers is on the pod.
pub fn is_hooked(hook: Option<&LifecycleHook>, pod: &Pod) -> bool {
    hook.is_some_and(|hook| {
        hook.labels_handler
            .iter()
            .any(|(key, value)| label(pod, key) == Some(value.as_str()))
            || hook
                .finalizers_handler
                .iter()
                .any(|f| has_finalizer(pod, f))
    })
}

/// Every one of the hook's labels and finalizers is on the pod (a missing
/// hook is trivially satisfied).
pub fn is_fully_hooked(hook: Option<&LifecycleHook>, pod: &Pod) -> bool {
    hook.is_none_or(|hook| {
        hook.labels_handler
            .iter()
            .all(|(key, value)| label(pod, key) == Some(value.as_str()))
            && hook
                .finalizers_handler
                .iter()
                .all(|f| has_finalizer(pod, f))
    })
}

/// A hook with nothing to wait on is no hook at all.
pub fn hook_configured(hook: Option<&LifecycleHook>) -> bool {
    hook.is_some_and(|hook| !hook.labels_handler.is_empty() || !hook.finalizers_handler.is_empty())
}

/// The `userAgent` of the holds `markPodNotReady` hooks put in the pod's
/// `KruisePodReady` condition, and their keys (OpenKruise's).
pub const READINESS_USER_AGENT: &str = "Lifecycle";
pub const PRE_DELETE_HOLD: &str = "preDeleteHook";
pub const PRE_UPDATE_HOLD: &str = "preUpdateHook";

/// The hold a move to `to` takes when its hook has `markPodNotReady`.
fn hold_key(to: LifecycleState) -> Option<&'static str> {
    match to {
        LifecycleState::PreparingDelete => Some(PRE_DELETE_HOLD),
        LifecycleState::PreparingUpdate => Some(PRE_UPDATE_HOLD),
        _ => None,
    }
}

/// The `pods/status` patch that holds the pod not-ready before it moves to
/// `to` (written first, so the pod leaves Service endpoints before the
/// hook's owner sees the new state). `None` without the gate, for a state
/// that takes no hold, or when the pod is held already.
pub fn hold_before_move(pod: &Pod, to: LifecycleState, now: Timestamp) -> Option<Value> {
    let key = hold_key(to)?;
    if !pod_readiness::has_gate(pod) {
        return None;
    }
    let holder = Holder {
        user_agent: READINESS_USER_AGENT.to_owned(),
        key: key.to_owned(),
    };
    let condition = pod_readiness::hold(pod, &holder, now)?;
    Some(pod_readiness::status_patch(pod, &condition, now))
}

/// The pod's `KruisePodReady` condition as its lifecycle state wants it,
/// when that differs from what it is: a pod in `PreparingDelete` (or
/// `PreparingUpdate`) whose hook has `markPodNotReady` is held, a hold
/// lasts while the pod stays in that state (through `Updating` for an
/// update, and into `PreparingDelete` if it is scaled in meanwhile) and is
/// let go once it has left, whatever the hook says now. A condition whose
/// status disagrees with its holder list is written again.
/// OpenKruise lets an update's hold go only on the move to `Updated`, so a
/// pod whose hook labels were back before its update finished stayed
/// unready; here it is let go on `Normal` too.
pub fn readiness_condition(
    lifecycle: &Lifecycle,
    pod: &Pod,
    now: Timestamp,
) -> Option<PodCondition> {
    if !pod_readiness::has_gate(pod) {
        return None;
    }
    let state = lifecycle_state(pod);
    let held = |key: &str| {
        pod_readiness::is_held_by(
            pod,
            &Holder {
                user_agent: READINESS_USER_AGENT.to_owned(),
                key: key.to_owned(),
            },
        )
    };
    let marks = |hook: &Option<LifecycleHook>| hook.as_ref().is_some_and(|h| h.mark_pod_not_ready);
    let mut keys = Vec::new();
    if state == Some(LifecycleState::PreparingDelete)
        && (held(PRE_DELETE_HOLD) || marks(&lifecycle.pre_delete))
    {
        keys.push(PRE_DELETE_HOLD);
    }
    let preparing_update = state == Some(LifecycleState::PreparingUpdate);
    // A pod scaled in while its update held it stays held in
    // PreparingDelete (OpenKruise never lets that hold go either).
    let keeps_update_hold = matches!(
        state,
        Some(
            LifecycleState::PreparingUpdate
                | LifecycleState::Updating
                | LifecycleState::PreparingDelete
        )
    );
    if keeps_update_hold
        && (held(PRE_UPDATE_HOLD) || (preparing_update && marks(&lifecycle.in_place_update)))
    {
        keys.push(PRE_UPDATE_HOLD);
    }
    pod_readiness::hold_exactly(pod, READINESS_USER_AGENT, &keys, now)
}
