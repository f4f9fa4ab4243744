//! Ports of upstream `cloneset_status_test.go` (TestSyncProgressingStatus,
//! TestHasProgressingConditionChanged, TestGetRequeueSecondsFromCondition):
//! the Progressing condition of spec 03 §9.2.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cloneset_common;

use cloneset_common::{REV_A, REV_B, cloneset, t0};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
use kruise_api::CloneSet;
use kruise_api::cloneset::{CloneSetCondition, CloneSetStatus};
use kruise_core::cloneset::progress::{
    CONDITION_PROGRESSING, REASON_AVAILABLE, REASON_DEADLINE_EXCEEDED, REASON_PARTITION_AVAILABLE,
    REASON_PAUSED, REASON_UPDATED, has_progressing_condition_changed, progressing_condition,
    requeue_seconds_from_condition,
};

fn with_deadline(seconds: i32) -> CloneSet {
    let mut cs = cloneset(5, "0", "1", "0");
    cs.spec.progress_deadline_seconds = Some(seconds);
    cs
}

fn status(
    current: &str,
    replicas: i32,
    updated: i32,
    updated_available: i32,
    expected: i32,
) -> CloneSetStatus {
    CloneSetStatus {
        replicas,
        updated_replicas: updated,
        updated_available_replicas: Some(updated_available),
        expected_updated_replicas: Some(expected),
        current_revision: Some(current.into()),
        update_revision: Some(REV_B.into()),
        ..CloneSetStatus::default()
    }
}

fn condition(status: &str, reason: &str, seconds_ago: i64) -> CloneSetCondition {
    let at = Time(t0() - SignedDuration::from_secs(seconds_ago));
    CloneSetCondition {
        type_: CONDITION_PROGRESSING.into(),
        status: status.into(),
        last_transition_time: Some(at.clone()),
        last_update_time: Some(at),
        reason: Some(reason.into()),
        message: None,
    }
}

fn reason(c: &CloneSetCondition) -> (&str, &str) {
    (c.status.as_str(), c.reason.as_deref().unwrap())
}

#[test]
fn test_sync_progressing_status() {
    let cs = with_deadline(600);
    let eval = |s: &CloneSetStatus, prev: Option<&CloneSetCondition>| {
        progressing_condition(&cs, s, prev, t0()).unwrap()
    };
    // Available.
    let c = eval(&status(REV_B, 5, 5, 5, 5), None);
    assert_eq!(reason(&c), ("True", REASON_AVAILABLE));
    // Paused.
    let mut paused = cs.clone();
    paused.spec.update_strategy.as_mut().unwrap().paused = true;
    let c = progressing_condition(&paused, &status(REV_A, 5, 1, 0, 5), None, t0()).unwrap();
    assert_eq!(reason(&c), ("True", REASON_PAUSED));
    // Partition reached: 2 expected, 2 updated and available.
    let c = eval(&status(REV_A, 5, 2, 2, 2), None);
    assert_eq!(reason(&c), ("True", REASON_PARTITION_AVAILABLE));
    // In progress, fresh.
    let c = eval(&status(REV_A, 5, 1, 0, 5), None);
    assert_eq!(reason(&c), ("True", REASON_UPDATED));
    // In progress for longer than the deadline.
    let old = condition("True", REASON_UPDATED, 601);
    let c = eval(&status(REV_A, 5, 1, 0, 5), Some(&old));
    assert_eq!(reason(&c), ("False", REASON_DEADLINE_EXCEEDED));
    // Still within the deadline: the old condition is kept untouched.
    let recent = condition("True", REASON_UPDATED, 300);
    assert_eq!(eval(&status(REV_A, 5, 1, 0, 5), Some(&recent)), recent);
    // Exceeded stays exceeded until progress completes.
    let exceeded = condition("False", REASON_DEADLINE_EXCEEDED, 10);
    assert_eq!(
        reason(&eval(&status(REV_A, 5, 1, 0, 5), Some(&exceeded))),
        ("False", REASON_DEADLINE_EXCEEDED)
    );
    let c = eval(&status(REV_B, 5, 5, 5, 5), Some(&exceeded));
    assert_eq!(reason(&c), ("True", REASON_AVAILABLE));
    // Same status, new reason: lastTransitionTime kept, lastUpdateTime now.
    let c = eval(&status(REV_A, 5, 2, 2, 2), Some(&recent));
    assert_eq!(c.last_transition_time, recent.last_transition_time);
    assert_eq!(c.last_update_time, Some(Time(t0())));
    // No deadline (or MaxInt32): no condition.
    assert!(
        progressing_condition(
            &cloneset(5, "0", "1", "0"),
            &status(REV_A, 5, 1, 0, 5),
            None,
            t0()
        )
        .is_none()
    );
    assert!(
        progressing_condition(
            &with_deadline(i32::MAX),
            &status(REV_A, 5, 1, 0, 5),
            None,
            t0()
        )
        .is_none()
    );
}

#[test]
fn test_has_progressing_condition_changed() {
    let with = |c: Option<CloneSetCondition>| CloneSetStatus {
        conditions: c.into_iter().collect(),
        ..Default::default()
    };
    let a = with(Some(condition("True", REASON_UPDATED, 10)));
    let a_later = with(Some(condition("True", REASON_UPDATED, 1)));
    let b = with(Some(condition("True", REASON_AVAILABLE, 10)));
    let c = with(Some(condition("False", REASON_DEADLINE_EXCEEDED, 10)));
    assert!(
        !has_progressing_condition_changed(&a, &a_later),
        "times alone do not count"
    );
    assert!(has_progressing_condition_changed(&a, &b));
    assert!(has_progressing_condition_changed(&a, &c));
    assert!(has_progressing_condition_changed(&a, &with(None)));
    assert!(!has_progressing_condition_changed(&with(None), &with(None)));
}

#[test]
fn test_get_requeue_seconds_from_condition() {
    let updated = condition("True", REASON_UPDATED, 100);
    assert_eq!(
        requeue_seconds_from_condition(Some(&updated), 600, t0()),
        Some(500)
    );
    let late = condition("True", REASON_UPDATED, 700);
    assert_eq!(
        requeue_seconds_from_condition(Some(&late), 600, t0()),
        Some(0)
    );
    let available = condition("True", REASON_AVAILABLE, 100);
    assert_eq!(
        requeue_seconds_from_condition(Some(&available), 600, t0()),
        None
    );
    assert_eq!(requeue_seconds_from_condition(None, 600, t0()), None);
}

#[test]
fn status_carries_failed_conditions_and_reevaluates_progressing() {
    let cs = with_deadline(600);
    let failed = CloneSetCondition {
        type_: "FailedUpdate".into(),
        status: "True".into(),
        message: Some("boom".into()),
        ..CloneSetCondition::default()
    };
    let previous = CloneSetStatus {
        conditions: vec![failed.clone(), condition("True", REASON_UPDATED, 10)],
        ..Default::default()
    };
    let revisions = cloneset_common::image_revisions(REV_B, REV_B);
    let pods = cloneset_common::pods("p", 5, REV_B);
    let status =
        kruise_core::cloneset::compute_status(&cs, &pods, &revisions, Some(&previous), t0());
    assert_eq!(status.conditions[0], failed);
    assert_eq!(reason(&status.conditions[1]), ("True", REASON_AVAILABLE));
}
