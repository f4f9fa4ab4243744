//! The Update pass (spec 03 §6.5, §7, §8): first finish what earlier
//! rounds started, then move up to `updateNum` pods toward the target
//! revision within the unavailability budget.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::CloneSetUpdateStrategyType;
use serde_json::Value;

use super::LABEL_SPECIFIED_DELETE;
use super::diffs::{Pass, calculate_diffs};
use super::in_place::{
    awaits_in_place_ready, calculate_in_place_update, is_in_place_update_completed,
};
use super::lifecycle::{hook_configured, is_fully_hooked, is_hooked, readiness_condition};
use super::plan::{
    InPlaceCompletion, InPlaceUpdate, LifecycleChange, Plan, PlanError, ReadinessChange,
};
use super::pod_state::is_specified_delete;
use super::pod_state::{
    LifecycleState, annotation, is_at_revision, is_available, label, lifecycle_state, name,
    node_name, revision_label, short_hash,
};
use super::settings::Settings;
use super::sort::{active_pods_order, scatter, sort_by_priority};
use super::{
    ANNOTATION_IN_PLACE_UPDATE_GRACE, ANNOTATION_IN_PLACE_UPDATE_STATE,
    CONDITION_IN_PLACE_UPDATE_READY, LABEL_POD_TEMPLATE_HASH, Revisions,
};
use kruise_api::CloneSet;

fn has_in_place_gate(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|spec| spec.readiness_gates.iter().flatten())
        .any(|gate| gate.condition_type == CONDITION_IN_PLACE_UPDATE_READY)
}

/// Seconds until a pending grace period ends (≤ 0: it has ended).
fn grace_remaining(pod: &Pod, now: Timestamp) -> Option<i64> {
    let grace: Value =
        serde_json::from_str(annotation(pod, ANNOTATION_IN_PLACE_UPDATE_GRACE)?).ok()?;
    let state: Value =
        serde_json::from_str(annotation(pod, ANNOTATION_IN_PLACE_UPDATE_STATE)?).ok()?;
    let seconds = grace
        .get("graceSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let started: Timestamp = state.get("updateTimestamp")?.as_str()?.parse().ok()?;
    Some(started.as_second() + seconds - now.as_second())
}

/// The state a finished in-place update leaves: `Updated` while an
/// inPlaceUpdate hook is not fully re-applied, else `Normal`.
fn after_update_state(settings: &Settings, pod: &Pod) -> LifecycleState {
    let hook = settings.lifecycle.in_place_update.as_ref();
    if hook_configured(hook) && !is_fully_hooked(hook, pod) {
        LifecycleState::Updated
    } else {
        LifecycleState::Normal
    }
}

/// §6.5 step 1: per-pod bookkeeping. Returns whether anything was written.
fn refresh(settings: &Settings, pods: &[&Pod], now: Timestamp, plan: &mut Plan) -> bool {
    for pod in pods {
        let pod_name = name(pod).to_owned();
        let state = lifecycle_state(pod);
        if annotation(pod, ANNOTATION_IN_PLACE_UPDATE_GRACE).is_some() {
            match grace_remaining(pod, now) {
                Some(left) if left > 0 => {
                    let requeue = plan.requeue_after_seconds.map_or(left, |r| r.min(left));
                    plan.requeue_after_seconds = Some(requeue);
                }
                // Elapsed, or the annotations cannot be read: waiting on an
                // unreadable timestamp would hold the pod forever.
                _ => plan.apply_graced.push(pod_name.clone()),
            }
        } else if has_in_place_gate(pod) && awaits_in_place_ready(pod) {
            plan.in_place_complete
                .extend(gate_opening(settings, pod, state));
        } else if let Some(to) = lifecycle_step(settings, pod, state) {
            plan.lifecycle.push(LifecycleChange {
                pod: pod_name.clone(),
                to,
                mark_not_ready: false,
                restore_hook: false,
            });
        }
        if let Some(condition) = readiness_condition(&settings.lifecycle, pod, now) {
            plan.readiness.push(ReadinessChange {
                pod: pod_name.clone(),
                condition,
            });
        }
        if label(pod, LABEL_POD_TEMPLATE_HASH).is_none()
            && let Some(revision) = revision_label(pod)
        {
            plan.template_hash_fix
                .push((pod_name, short_hash(revision).to_owned()));
        }
    }
    plan.modifies()
}

/// Whether to set `InPlaceUpdateReady=True` on a gated pod now, and the
/// lifecycle state the same write moves it to. A finished in-place update
/// leaves `Updating`. A new pod (`PreparingNormal`, no preNormal hook)
/// waits until it is scheduled, so that one write both opens its gate and
/// makes it `Normal`; OpenKruise writes the two apart, but an unscheduled
/// pod cannot turn Ready, so waiting costs it nothing.
fn gate_opening(
    settings: &Settings,
    pod: &Pod,
    state: Option<LifecycleState>,
) -> Option<InPlaceCompletion> {
    if !is_in_place_update_completed(pod) {
        return None;
    }
    let to = match state {
        Some(LifecycleState::Updating) => Some(after_update_state(settings, pod)),
        Some(LifecycleState::PreparingNormal) => {
            let to = lifecycle_step(settings, pod, state);
            let waits_for_node = !hook_configured(settings.lifecycle.pre_normal.as_ref());
            if to.is_none() && waits_for_node {
                return None;
            }
            to
        }
        _ => None,
    };
    Some(InPlaceCompletion {
        pod: name(pod).to_owned(),
        to,
    })
}

/// §7 transitions that need no update: `PreparingNormal` → `Normal` once
/// scheduled (or once the preNormal hook is fully applied), `Updated` →
/// `Normal` once the inPlaceUpdate hook is fully back.
fn lifecycle_step(
    settings: &Settings,
    pod: &Pod,
    state: Option<LifecycleState>,
) -> Option<LifecycleState> {
    match state? {
        LifecycleState::PreparingNormal => {
            let hook = settings.lifecycle.pre_normal.as_ref();
            let ready = if hook_configured(hook) {
                is_fully_hooked(hook, pod)
            } else {
                !node_name(pod).is_empty()
            };
            ready.then_some(LifecycleState::Normal)
        }
        LifecycleState::Updated => {
            is_fully_hooked(settings.lifecycle.in_place_update.as_ref(), pod)
                .then_some(LifecycleState::Normal)
        }
        LifecycleState::PreparingUpdate if is_at_revision(pod, &settings.update_revision) => {
            // Rolled back under it: nothing left to update.
            Some(after_update_state(settings, pod))
        }
        _ => None,
    }
}

pub fn plan_update(
    cloneset: &CloneSet,
    settings: &Settings,
    revisions: &Revisions,
    pods: &[&Pod],
    now: Timestamp,
    plan: &mut Plan,
) -> bool {
    let on_delete = settings.strategy == CloneSetUpdateStrategyType::OnDelete;
    if refresh(settings, pods, now, plan) || settings.paused || on_delete {
        return plan.modifies();
    }
    let diffs = calculate_diffs(settings, pods, now, Pass::Update);
    plan.update_diffs = Some(diffs);
    if diffs.update_num == 0 {
        return false;
    }
    let target = if diffs.update_num > 0 {
        &settings.update_revision
    } else {
        &settings.current_revision
    };
    let mut candidates: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|pod| {
            let waits = if diffs.update_num > 0 {
                !is_at_revision(pod, &settings.update_revision)
            } else {
                is_at_revision(pod, &settings.update_revision)
            };
            waits
                && match lifecycle_state(pod) {
                    Some(LifecycleState::PreparingDelete) => false,
                    Some(LifecycleState::Updated) => true,
                    _ => annotation(pod, ANNOTATION_IN_PLACE_UPDATE_GRACE).is_none(),
                }
        })
        .collect();
    crate::ordered::sort_by(&mut candidates, |a, b| active_pods_order(a, b));
    let strategy = cloneset.spec.update_strategy.clone().unwrap_or_default();
    if let Some(priority) = &strategy.priority_strategy {
        sort_by_priority(&mut candidates, priority);
    }
    scatter(&mut candidates, &strategy.scatter_strategy);
    crate::ordered::sort_by_key(&mut candidates, |pod| {
        lifecycle_state(pod) != Some(LifecycleState::PreparingUpdate)
    });
    // Deviation from the upstream order: pods already marked for deletion
    // go first. `updateNum` still counts them (they are active old pods), so
    // if they could sort behind unmarked pods, a round whose deletions were
    // held back by the budget would mark *other* pods for the same slots and
    // push the old revision below the partition (found by the property
    // tests). Taking them first spends those slots without a write.
    crate::ordered::sort_by_key(&mut candidates, |pod| {
        !is_specified_delete(pod, &settings.pods_to_delete)
    });

    for pod in limit_by_budget(settings, pods, &candidates, diffs, target, now) {
        update_one(settings, revisions, pod, target, plan);
    }
    plan.modifies()
}

/// §6.5 step 7: pods already unavailable do not spend the global budget.
fn limit_by_budget<'a>(
    settings: &Settings,
    pods: &[&Pod],
    candidates: &[&'a Pod],
    diffs: super::diffs::Diffs,
    target: &str,
    now: Timestamp,
) -> Vec<&'a Pod> {
    let budget = diffs.update_max_unavailable;
    let wanted = usize::try_from(diffs.update_num.unsigned_abs()).unwrap_or(usize::MAX);
    let not_available = |pod: &Pod| !is_available(pod, settings.min_ready_seconds, now);
    let mut unavailable = pods.iter().filter(|pod| not_available(pod)).count();
    let target_unavailable = pods
        .iter()
        .filter(|pod| not_available(pod) && is_at_revision(pod, target))
        .count();
    let budget = usize::try_from(budget).unwrap_or(0);
    let mut chosen = Vec::new();
    for pod in candidates {
        if chosen.len() >= wanted || target_unavailable + chosen.len() >= budget {
            break;
        }
        if !not_available(pod) {
            // Taking an available pod makes it unavailable: the global
            // budget must have room (the walk stops here, like upstream).
            if unavailable >= budget {
                break;
            }
            unavailable += 1;
        }
        chosen.push(*pod);
    }
    chosen
}

/// §6.5 step 8 for one chosen pod.
fn update_one(
    settings: &Settings,
    revisions: &Revisions,
    pod: &Pod,
    target: &str,
    plan: &mut Plan,
) {
    let pod_name = name(pod).to_owned();
    let in_place_wanted = settings.strategy != CloneSetUpdateStrategyType::ReCreate;
    let spec = revision_label(pod)
        .and_then(|from| revisions.template_of(from))
        .zip(revisions.template_of(target))
        .and_then(|(from, to)| {
            calculate_in_place_update(from, to, target, settings.grace_period_seconds)
        });
    match spec {
        Some(spec) if in_place_wanted => {
            let hook = settings.lifecycle.in_place_update.as_ref();
            let state = lifecycle_state(pod);
            let may_hold = matches!(
                state,
                None | Some(LifecycleState::PreparingNormal | LifecycleState::Normal)
            );
            // An Updated pod (its hook's owner has not put the hook back
            // since the last update) gets the hook back with the move, as
            // OpenKruise does, and then waits for the owner like any other.
            // Not on a rollback (partition raised, with its gate): the
            // refresh would take it from PreparingUpdate straight back, a
            // move every round.
            let updated =
                state == Some(LifecycleState::Updated) && target == settings.update_revision;
            if hook_configured(hook) && (updated || (may_hold && is_hooked(hook, pod))) {
                plan.lifecycle.push(LifecycleChange {
                    pod: pod_name,
                    to: LifecycleState::PreparingUpdate,
                    mark_not_ready: hook.is_some_and(|h| h.mark_pod_not_ready),
                    restore_hook: updated,
                });
            } else if state == Some(LifecycleState::PreparingUpdate) && is_hooked(hook, pod) {
                // Still held by the hook's owner: wait.
            } else {
                plan.in_place_update.push(InPlaceUpdate {
                    pod: pod_name,
                    spec,
                });
            }
        }
        _ if settings.strategy == CloneSetUpdateStrategyType::InPlaceOnly => {
            plan.errors
                .push(PlanError::NotInPlaceUpdatable { pod: pod_name });
        }
        // Already labelled: upstream's patch is a no-op too.
        _ if label(pod, LABEL_SPECIFIED_DELETE).is_some() => {}
        _ => plan.mark_specified_delete.push(pod_name),
    }
}
