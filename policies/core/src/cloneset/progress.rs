//! The `Progressing` condition (spec 03 §9.2), a pure function of the new
//! status, the previous condition and the time.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::CloneSet;
use kruise_api::cloneset::{CloneSetCondition, CloneSetStatus};

pub const CONDITION_PROGRESSING: &str = "Progressing";
pub const REASON_AVAILABLE: &str = "CloneSetAvailable";
pub const REASON_PAUSED: &str = "CloneSetPaused";
pub const REASON_PARTITION_AVAILABLE: &str = "ProgressPartitionAvailable";
pub const REASON_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
pub const REASON_UPDATED: &str = "CloneSetUpdated";

/// The deadline in seconds, if the condition is maintained at all
/// (`progressDeadlineSeconds` set and not MaxInt32).
pub fn progress_deadline(cloneset: &CloneSet) -> Option<i32> {
    cloneset
        .spec
        .progress_deadline_seconds
        .filter(|d| *d != i32::MAX)
}

pub fn find_progressing(status: &CloneSetStatus) -> Option<&CloneSetCondition> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_PROGRESSING)
}

/// `(status, reason)` the condition should have now.
fn evaluate(
    cloneset: &CloneSet,
    status: &CloneSetStatus,
    previous: Option<&CloneSetCondition>,
    deadline: i32,
    now: Timestamp,
) -> (&'static str, &'static str) {
    let desired = cloneset.spec.replicas.unwrap_or(1);
    let updated_available = status.updated_available_replicas.unwrap_or(0);
    let expected = status.expected_updated_replicas.unwrap_or(desired);
    if status.current_revision == status.update_revision
        && status.replicas == desired
        && status.updated_replicas == desired
        && updated_available == desired
    {
        return ("True", REASON_AVAILABLE);
    }
    if cloneset
        .spec
        .update_strategy
        .as_ref()
        .is_some_and(|s| s.paused)
    {
        return ("True", REASON_PAUSED);
    }
    if expected < desired && expected <= updated_available {
        return ("True", REASON_PARTITION_AVAILABLE);
    }
    // The deadline counts from when progress started to be reported (the
    // `CloneSetUpdated` condition's lastUpdateTime, which SetCondition does
    // not advance while the reason stays).
    let exceeded = previous.is_some_and(|c| {
        c.reason.as_deref() == Some(REASON_DEADLINE_EXCEEDED)
            || (c.reason.as_deref() == Some(REASON_UPDATED)
                && c.last_update_time
                    .as_ref()
                    .is_some_and(|t| t.0.as_second() + i64::from(deadline) < now.as_second()))
    });
    if exceeded {
        ("False", REASON_DEADLINE_EXCEEDED)
    } else {
        ("True", REASON_UPDATED)
    }
}

/// The Progressing condition to store, applying SetCondition's rules: an
/// unchanged status and reason keeps the old condition as is; an unchanged
/// status keeps its lastTransitionTime. `None` (no deadline) removes it.
pub fn progressing_condition(
    cloneset: &CloneSet,
    status: &CloneSetStatus,
    previous: Option<&CloneSetCondition>,
    now: Timestamp,
) -> Option<CloneSetCondition> {
    let deadline = progress_deadline(cloneset)?;
    let (state, reason) = evaluate(cloneset, status, previous, deadline, now);
    if let Some(old) = previous
        && old.status == state
    {
        if old.reason.as_deref() == Some(reason) {
            return Some(old.clone());
        }
        return Some(CloneSetCondition {
            reason: Some(reason.to_owned()),
            last_update_time: Some(Time(now)),
            message: None,
            ..old.clone()
        });
    }
    Some(CloneSetCondition {
        type_: CONDITION_PROGRESSING.to_owned(),
        status: state.to_owned(),
        last_transition_time: Some(Time(now)),
        last_update_time: Some(Time(now)),
        reason: Some(reason.to_owned()),
        message: None,
    })
}

/// Whether the status write is needed for the condition: its status or
/// reason changed (or it appeared / disappeared).
pub fn has_progressing_condition_changed(old: &CloneSetStatus, new: &CloneSetStatus) -> bool {
    let key =
        |s: &CloneSetStatus| find_progressing(s).map(|c| (c.status.clone(), c.reason.clone()));
    key(old) != key(new)
}

/// Seconds until a `CloneSetUpdated` condition hits the deadline, so the
/// controller can come back then; `None` for any other condition.
pub fn requeue_seconds_from_condition(
    condition: Option<&CloneSetCondition>,
    deadline: i32,
    now: Timestamp,
) -> Option<i64> {
    let condition = condition.filter(|c| c.reason.as_deref() == Some(REASON_UPDATED))?;
    let updated = condition.last_update_time.as_ref()?.0.as_second();
    Some((updated + i64::from(deadline) - now.as_second()).max(0))
}
