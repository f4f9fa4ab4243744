//! `calculateDiffsWithExpectation` (spec 03 §6.2): how far the pods are from
//! the desired counts, and how much of that may be closed this round.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::pod_state::{
    LifecycleState, is_at_revision, is_available, is_specified_delete, lifecycle_state,
};
use super::settings::Settings;

/// The numbers Scale and Update act on. All zero means "nothing to do".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Diffs {
    pub scale_surge: i32,
    pub scale_old_surge: i32,
    pub update_surge: i32,
    pub update_old_surge: i32,
    pub use_surge: i32,
    pub use_surge_old: i32,
    pub scale_up_num: i32,
    pub scale_up_num_old: i32,
    pub scale_up_limit: i32,
    pub scale_down_num: i32,
    pub scale_down_num_old: i32,
    pub delete_ready_limit: i32,
    pub update_num: i32,
    pub update_max_unavailable: i32,
}

/// Which definition of "updated" the caller wants: Scale counts pods in
/// `PreparingUpdate` as updated when the `PreparingUpdateAsUpdate` gate is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    Scale,
    Update,
}

#[derive(Default)]
struct Bucket {
    count: i32,
    pre_deleting: i32,
    active: i32,
    to_delete: i32,
    unavailable: i32,
}

pub fn is_updated(pod: &Pod, settings: &Settings, pass: Pass) -> bool {
    is_at_revision(pod, &settings.update_revision)
        || (pass == Pass::Scale
            && settings.gates.preparing_update_as_update
            && lifecycle_state(pod) == Some(LifecycleState::PreparingUpdate))
}

/// Port of the upstream computation over the active owned `pods`.
pub fn calculate_diffs(settings: &Settings, pods: &[&Pod], now: Timestamp, pass: Pass) -> Diffs {
    let replicas = settings.replicas;
    let partition = settings.partition;
    let max_surge = settings.max_surge;
    let max_unavailable = settings.max_unavailable;

    let (mut old, mut new) = (Bucket::default(), Bucket::default());
    for pod in pods {
        let bucket = if is_updated(pod, settings, pass) {
            &mut new
        } else {
            &mut old
        };
        bucket.count += 1;
        if lifecycle_state(pod) == Some(LifecycleState::PreparingDelete) {
            bucket.pre_deleting += 1;
        } else {
            bucket.active += 1;
            if is_specified_delete(pod, &settings.pods_to_delete) {
                bucket.to_delete += 1;
            } else if !is_available(pod, settings.min_ready_seconds, now) {
                bucket.unavailable += 1;
            }
        }
    }

    let mut update_old_diff = old.active - partition;
    let mut update_new_diff = new.active - (replicas - partition);
    let total_unavailable = new.pre_deleting + old.pre_deleting + new.unavailable + old.unavailable;
    // Without the rollback gate (or with nothing to roll back to) pods never
    // move back to the current revision.
    if settings.update_revision == settings.current_revision || !settings.gates.partition_rollback {
        update_old_diff = update_old_diff.max(0);
        update_new_diff = update_new_diff.min(0);
    }

    let mut diffs = Diffs::default();
    if max_surge > 0 {
        let to_delete = new.to_delete + old.to_delete;
        if to_delete > 0 {
            diffs.scale_surge = (total_unavailable + to_delete - max_unavailable)
                .max(0)
                .min(to_delete);
            if diffs.scale_surge > new.to_delete {
                diffs.scale_old_surge = diffs.scale_surge - new.to_delete;
            }
        }
        let opposite = (update_old_diff > 0 && update_new_diff < 0)
            || (update_old_diff < 0 && update_new_diff > 0);
        if opposite {
            if update_old_diff.abs() <= update_new_diff.abs() {
                diffs.update_surge = update_old_diff.abs();
                if update_old_diff < 0 {
                    diffs.update_old_surge = diffs.update_surge;
                }
            } else {
                diffs.update_surge = update_new_diff.abs();
                if update_new_diff > 0 {
                    diffs.update_old_surge = diffs.update_surge;
                }
            }
        }
        if diffs.scale_surge >= diffs.update_surge {
            diffs.use_surge = max_surge.min(diffs.scale_surge);
            diffs.use_surge_old = diffs.use_surge.min(diffs.scale_old_surge);
        } else {
            diffs.use_surge = max_surge.min(diffs.update_surge);
            diffs.use_surge_old = diffs.use_surge.min(diffs.update_old_surge);
        }
    }

    let all = old.count + new.count;
    let (mut cur_total, mut cur_old) = (all, old.count);
    if settings.exclude_preparing_delete {
        cur_total -= old.pre_deleting + new.pre_deleting;
        cur_old -= old.pre_deleting;
    }
    let exp_total = replicas + diffs.use_surge;
    let exp_old = partition + diffs.use_surge_old;

    if exp_total - cur_total > 0 {
        diffs.scale_up_num = exp_total - cur_total;
        diffs.scale_up_num_old = (exp_old - cur_old).max(0);
        diffs.scale_up_limit = diffs
            .scale_up_num
            .min((settings.scale_max_unavailable - total_unavailable).max(0));
    }
    let surplus = cur_total - old.to_delete - new.to_delete - exp_total;
    if surplus > 0 {
        diffs.scale_down_num = surplus;
        diffs.scale_down_num_old = (cur_old - old.to_delete - exp_old).max(0);
    }
    if old.to_delete + new.to_delete > 0 || diffs.scale_down_num > 0 {
        diffs.delete_ready_limit = (max_unavailable + (all - replicas) - total_unavailable).max(0);
    }
    diffs.update_num = if update_old_diff.abs() <= update_new_diff.abs() {
        update_old_diff
    } else {
        -update_new_diff
    };
    if diffs.update_num != 0 {
        // Negative when pods are missing: upstream does not clamp it.
        diffs.update_max_unavailable = max_unavailable + all - replicas;
    }
    diffs
}
