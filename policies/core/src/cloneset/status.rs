//! CloneSet status (spec 03 §1.3) as a pure function of the pods.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::CloneSet;
use kruise_api::cloneset::{CloneSetCondition, CloneSetStatus};

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

/// The condition a failed Scale pass sets.
pub const CONDITION_FAILED_SCALE: &str = "FailedScale";
/// The condition a failed Update pass sets.
pub const CONDITION_FAILED_UPDATE: &str = "FailedUpdate";

/// Records a failed pass as OpenKruise does (spec 03 §1.3): the
/// `condition` (FailedScale or FailedUpdate) is set True with the message
/// the first time, then left as it is, neither cleared nor refreshed.
pub fn note_failure(status: &mut CloneSetStatus, condition: &str, message: &str, now: Timestamp) {
    let set = status
        .conditions
        .iter()
        .any(|c| c.type_ == condition && c.status == "True");
    if set {
        return;
    }
    status.conditions.retain(|c| c.type_ != condition);
    status.conditions.push(CloneSetCondition {
        type_: condition.to_owned(),
        status: "True".to_owned(),
        last_transition_time: Some(Time(now)),
        message: Some(message.to_owned()),
        ..CloneSetCondition::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(type_: &str, message: &str) -> CloneSetCondition {
        CloneSetCondition {
            type_: type_.to_owned(),
            status: "True".to_owned(),
            message: Some(message.to_owned()),
            ..CloneSetCondition::default()
        }
    }

    /// Set True with the first message; a later failure changes nothing
    /// (OpenKruise neither refreshes nor clears it); other conditions stay.
    #[test]
    fn a_failure_is_noted_once_and_kept() {
        let now = Timestamp::UNIX_EPOCH;
        let mut status = CloneSetStatus {
            conditions: vec![condition("Progressing", "p")],
            ..CloneSetStatus::default()
        };
        note_failure(&mut status, CONDITION_FAILED_SCALE, "quota", now);
        let noted = status.clone();
        assert_eq!(noted.conditions.len(), 2);
        let failed = &noted.conditions[1];
        assert_eq!(
            (failed.type_.as_str(), failed.status.as_str()),
            (CONDITION_FAILED_SCALE, "True")
        );
        assert_eq!(failed.message.as_deref(), Some("quota"));
        assert_eq!(failed.last_transition_time, Some(Time(now)));
        note_failure(&mut status, CONDITION_FAILED_SCALE, "another", now);
        assert_eq!(status, noted);
        note_failure(&mut status, CONDITION_FAILED_UPDATE, "in place", now);
        assert_eq!(status.conditions.len(), 3);
    }
}
