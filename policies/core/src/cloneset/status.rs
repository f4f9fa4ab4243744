//! CloneSet status (spec 03 §1.3) as a pure function of the pods.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::CloneSet;
use kruise_api::cloneset::CloneSetStatus;

use super::pod_state::{is_active, is_at_revision, is_available, is_running_and_ready};
use super::progress::{CONDITION_PROGRESSING, find_progressing, progressing_condition};
use super::settings::Settings;
use super::{FeatureGates, Revisions};
use crate::selector::to_selector_string;

/// The status to write after this round. `revisions.current` is the
/// current revision as resolved by the caller (the previous status value if
/// that revision still exists, else the update revision); it becomes the
/// update revision once every desired pod carries it (readiness not
/// required). Conditions come from `previous`: FailedScale/FailedUpdate are
/// kept as they are (upstream never clears them) and Progressing is
/// re-evaluated (§9.2).
pub fn compute_status(
    cloneset: &CloneSet,
    pods: &[Pod],
    revisions: &Revisions,
    previous: Option<&CloneSetStatus>,
    now: Timestamp,
) -> CloneSetStatus {
    let settings = Settings::resolve(cloneset, revisions, FeatureGates::default());
    let active: Vec<&Pod> = pods.iter().filter(|pod| is_active(pod)).collect();
    let count = |keep: &dyn Fn(&Pod) -> bool| {
        i32::try_from(active.iter().filter(|pod| keep(pod)).count()).unwrap_or(i32::MAX)
    };
    let updated = |pod: &Pod| is_at_revision(pod, &revisions.update);
    let available = |pod: &Pod| is_available(pod, settings.min_ready_seconds, now);
    let replicas = count(&|_| true);
    let updated_replicas = count(&updated);
    let current = if updated_replicas == replicas && replicas == settings.replicas {
        revisions.update.clone()
    } else {
        revisions.current.clone()
    };
    let mut status = CloneSetStatus {
        observed_generation: cloneset.metadata.generation,
        replicas,
        ready_replicas: count(&is_running_and_ready),
        available_replicas: count(&available),
        updated_replicas,
        updated_ready_replicas: count(&|pod| updated(pod) && is_running_and_ready(pod)),
        updated_available_replicas: Some(count(&|pod| updated(pod) && available(pod))),
        expected_updated_replicas: Some(settings.replicas - settings.partition),
        update_revision: Some(revisions.update.clone()),
        current_revision: Some(current),
        collision_count: previous.and_then(|p| p.collision_count),
        label_selector: Some(to_selector_string(&cloneset.spec.selector)),
        conditions: Vec::new(),
    };
    let previous_progress = previous.and_then(find_progressing);
    let progress = progressing_condition(cloneset, &status, previous_progress, now);
    status.conditions = previous
        .iter()
        .flat_map(|p| &p.conditions)
        .filter(|c| c.type_ != CONDITION_PROGRESSING)
        .cloned()
        .chain(progress)
        .collect();
    status
}
