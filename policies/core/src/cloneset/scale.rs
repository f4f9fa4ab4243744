//! The Scale pass (spec 03 §6.3, §6.6): create missing pods, delete
//! specified and surplus ones. It runs before Update; if it writes
//! anything, Update waits for the next round.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::diffs::{Pass, calculate_diffs, is_updated};
use super::lifecycle::{hook_configured, is_hooked};
use super::plan::{LifecycleChange, Plan, PodCreation};
use super::pod_state::{
    LifecycleState, is_ready_for_limits, is_specified_delete, lifecycle_state, name,
};
use super::settings::Settings;
use super::sort::sort_for_scale_in;

/// §6.6 for one pod: a pod held by the preDelete hook moves to
/// `PreparingDelete` (once) instead of being deleted. Returns whether
/// anything was written.
fn delete_or_prepare(pod: &Pod, settings: &Settings, plan: &mut Plan) -> bool {
    let hook = settings.lifecycle.pre_delete.as_ref();
    if hook_configured(hook) && is_hooked(hook, pod) {
        if lifecycle_state(pod) == Some(LifecycleState::PreparingDelete) {
            return false;
        }
        plan.lifecycle.push(LifecycleChange {
            pod: name(pod).to_owned(),
            to: LifecycleState::PreparingDelete,
            mark_not_ready: hook.is_some_and(|h| h.mark_pod_not_ready),
            restore_hook: false,
        });
        return true;
    }
    plan.delete.push(name(pod).to_owned());
    true
}

/// OpenKruise's `IsLifecycleMarkPodNotReady`: the preDelete or the
/// inPlaceUpdate hook (preNormal's flag holds nothing).
fn any_hook_marks_not_ready(settings: &Settings) -> bool {
    let lifecycle = &settings.lifecycle;
    [&lifecycle.pre_delete, &lifecycle.in_place_update]
        .into_iter()
        .flatten()
        .any(|hook| hook.mark_pod_not_ready)
}

/// Fills `plan` with this round's scaling writes; returns whether Scale
/// modified anything (then Update is skipped).
pub fn plan_scale(settings: &Settings, pods: &[&Pod], now: Timestamp, plan: &mut Plan) -> bool {
    let is_preparing_delete =
        |pod: &&Pod| lifecycle_state(pod) == Some(LifecycleState::PreparingDelete);
    let specified: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|pod| is_specified_delete(pod, &settings.pods_to_delete))
        .collect();
    let preparing: Vec<&Pod> = pods.iter().copied().filter(is_preparing_delete).collect();
    let num_to_delete = pods
        .iter()
        .filter(|pod| {
            is_preparing_delete(pod) || is_specified_delete(pod, &settings.pods_to_delete)
        })
        .count();
    let num_to_delete = i32::try_from(num_to_delete).unwrap_or(i32::MAX);
    let total = i32::try_from(pods.len()).unwrap_or(i32::MAX);

    // Regret a scale-in: replicas grew back while pods wait in
    // PreparingDelete, so return them to service rather than create anew.
    if !any_hook_marks_not_ready(settings) {
        let wanted_back = usize::try_from(settings.replicas - total + num_to_delete).unwrap_or(0);
        let regrets: Vec<LifecycleChange> = preparing
            .iter()
            .filter(|pod| !is_specified_delete(pod, &settings.pods_to_delete))
            .take(wanted_back)
            .map(|pod| LifecycleChange {
                pod: name(pod).to_owned(),
                to: LifecycleState::PreparingNormal,
                mark_not_ready: false,
                restore_hook: false,
            })
            .collect();
        if !regrets.is_empty() {
            plan.lifecycle.extend(regrets);
            return true;
        }
    }

    let diffs = calculate_diffs(settings, pods, now, Pass::Scale);
    plan.scale_diffs = diffs;
    plan.scale_up_limited = diffs.scale_up_num > diffs.scale_up_limit;

    if diffs.scale_up_num > 0 {
        let limit = diffs.scale_up_limit;
        let from_current = limit.min(diffs.scale_up_num_old);
        let from_update = limit - from_current;
        for (revision, count) in [
            (&settings.current_revision, from_current),
            (&settings.update_revision, from_update),
        ] {
            if count > 0 {
                plan.create.push(PodCreation {
                    revision: revision.clone(),
                    count,
                });
            }
        }
        // Scale stops here even when nothing could be created, so a
        // throttled scale-out still lets Update run.
        return limit > 0;
    }

    let mut modified = false;
    for pod in &preparing {
        modified |= delete_or_prepare(pod, settings, plan);
    }
    if modified {
        return true;
    }

    let mut ready_budget = diffs.delete_ready_limit;
    for pod in specified.iter().filter(|pod| !is_preparing_delete(pod)) {
        if !is_ready_for_limits(pod, now) {
            modified |= delete_or_prepare(pod, settings, plan);
        } else if ready_budget > 0 {
            ready_budget -= 1;
            modified |= delete_or_prepare(pod, settings, plan);
        }
    }
    if modified {
        return true;
    }

    if diffs.scale_down_num > 0 {
        if num_to_delete > 0 {
            return false;
        }
        for pod in choose_scale_in(
            settings,
            pods,
            diffs.scale_down_num,
            diffs.scale_down_num_old,
            now,
        )
        .into_iter()
        .filter(|pod| {
            if !is_ready_for_limits(pod, now) {
                return true;
            }
            if ready_budget > 0 {
                ready_budget -= 1;
                return true;
            }
            false
        }) {
            modified |= delete_or_prepare(pod, settings, plan);
        }
    }
    modified
}

/// §6.3 step 8 / §6.4: old-revision pods first when the old group is over
/// its expectation, then the ranking within each group.
fn choose_scale_in<'a>(
    settings: &Settings,
    pods: &[&'a Pod],
    count: i32,
    old_count: i32,
    now: Timestamp,
) -> Vec<&'a Pod> {
    let (mut updated, mut old): (Vec<&Pod>, Vec<&Pod>) = pods
        .iter()
        .copied()
        .partition(|pod| is_updated(pod, settings, Pass::Scale));
    let take = |group: &mut Vec<&'a Pod>, n: i32| -> Vec<&'a Pod> {
        let n = usize::try_from(n).unwrap_or(0);
        if n < group.len() {
            sort_for_scale_in(group, settings.min_ready_seconds, now);
        }
        group.iter().copied().take(n).collect()
    };
    if old_count >= count {
        take(&mut old, count)
    } else if old_count > 0 {
        let mut chosen = take(&mut old, old_count);
        chosen.extend(take(&mut updated, count - old_count));
        chosen
    } else {
        take(&mut updated, count)
    }
}
