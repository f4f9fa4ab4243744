//! The `KruisePodReady` gate (spec 00 §1.5): which pods the webhook gives
//! it to, the readiness controller's first write, and the holds CloneSet
//! lifecycle hooks with `markPodNotReady` take and let go (spec 03 §6.6,
//! §7).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cloneset_common;

use cloneset_common::{REV_A, REV_B, cloneset, image_revisions, ready_pod, run, set_label, t0};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kruise_api::cloneset::{CloneSetUpdateStrategyType, Lifecycle, LifecycleHook};
use kruise_core::cloneset::{
    FeatureGates, LABEL_LIFECYCLE_STATE, LifecycleState, PRE_DELETE_HOLD, PRE_UPDATE_HOLD,
    READINESS_USER_AGENT, ReadinessChange, Stage, hold_before_move, readiness_condition,
};
use kruise_core::pod_readiness::{
    Holder, KRUISE_POD_READY, add_gate_for_workload, first_condition, hold, hold_exactly, holders,
    left_to_workload, owned_by_kruise,
};
use serde_json::json;

const NO_GATES: FeatureGates = FeatureGates {
    partition_rollback: false,
    preparing_update_as_update: false,
};

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn owned_by(api_version: &str, controller: bool) -> Pod {
    pod(json!({
        "metadata": {"name": "p", "ownerReferences": [{
            "apiVersion": api_version, "kind": "CloneSet", "name": "cs", "uid": "u",
            "controller": controller,
        }]},
        "spec": {"containers": [{"name": "app"}]},
    }))
}

fn gates(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .map(|g| g.condition_type.clone())
        .collect()
}

fn holder(user_agent: &str, key: &str) -> Holder {
    Holder {
        user_agent: user_agent.into(),
        key: key.into(),
    }
}

fn lifecycle(key: &str) -> Holder {
    holder(READINESS_USER_AGENT, key)
}

/// A pod with the gate whose condition is `condition` (absent if `None`).
fn gated(condition: Option<PodCondition>) -> Pod {
    let mut pod = ready_pod("p0", REV_A);
    pod.metadata.resource_version = Some("7".into());
    pod.spec.as_mut().unwrap().readiness_gates = Some(vec![
        serde_json::from_value(json!({"conditionType": KRUISE_POD_READY})).unwrap(),
    ]);
    if let Some(condition) = condition {
        let status = pod.status.get_or_insert_with(Default::default);
        status
            .conditions
            .get_or_insert_with(Vec::new)
            .push(condition);
    }
    pod
}

fn held_by(keys: &[Holder]) -> Pod {
    let mut pod = gated(None);
    for key in keys {
        let condition = hold(&pod, key, t0()).unwrap();
        pod = gated(Some(condition));
    }
    pod
}

fn in_state(mut pod: Pod, state: LifecycleState) -> Pod {
    set_label(&mut pod, LABEL_LIFECYCLE_STATE, state.as_str());
    pod
}

fn marking() -> LifecycleHook {
    LifecycleHook {
        labels_handler: [("hook".to_owned(), "true".to_owned())].into(),
        mark_pod_not_ready: true,
        ..Default::default()
    }
}

fn both_marking() -> Lifecycle {
    Lifecycle {
        pre_delete: Some(marking()),
        in_place_update: Some(marking()),
        ..Default::default()
    }
}

#[test]
fn only_pods_an_openkruise_workload_controls_are_owned_by_kruise() {
    assert!(owned_by_kruise(&owned_by("apps.kruise.io/v1alpha1", true)));
    assert!(owned_by_kruise(&owned_by("apps.kruise.io/v1beta1", true)));
    assert!(!owned_by_kruise(&owned_by(
        "apps.kruise.io/v1alpha1",
        false
    )));
    assert!(!owned_by_kruise(&owned_by("apps/v1", true)));
    assert!(!owned_by_kruise(&owned_by("apps.kruise.io", true)));
    assert!(!owned_by_kruise(&owned_by("apps.kruise.io/v1/x", true)));
    assert!(!owned_by_kruise(&pod(json!({"metadata": {"name": "p"}}))));
}

#[test]
fn the_gate_is_added_once_and_only_to_workload_pods() {
    let mut owned = owned_by("apps.kruise.io/v1alpha1", true);
    assert!(add_gate_for_workload(&mut owned));
    assert_eq!(gates(&owned), vec![KRUISE_POD_READY]);
    assert!(!add_gate_for_workload(&mut owned));
    assert_eq!(gates(&owned), vec![KRUISE_POD_READY]);

    let mut other = owned_by("apps/v1", true);
    assert!(!add_gate_for_workload(&mut other));
    assert!(gates(&other).is_empty());
}

#[test]
fn the_first_condition_is_written_once_for_a_gated_pod() {
    let condition = first_condition(&gated(None), t0()).unwrap();
    assert_eq!(
        (condition.type_.as_str(), condition.status.as_str()),
        (KRUISE_POD_READY, "True")
    );
    assert_eq!(condition.message, None);
    assert_eq!(condition.last_transition_time, Some(Time(t0())));

    let present = gated(Some(condition));
    assert_eq!(first_condition(&present, t0()), None);
    assert_eq!(first_condition(&ready_pod("p0", REV_A), t0()), None);
    let mut deleting = gated(None);
    deleting.metadata.deletion_timestamp = Some(Time(t0()));
    assert_eq!(first_condition(&deleting, t0()), None);
    // Held before the controller came to it: not made True.
    let held = held_by(&[holder("CRR", "x")]);
    assert_eq!(first_condition(&held, t0()), None);
}

#[test]
fn a_pod_whose_in_place_gate_is_still_closed_is_left_to_its_workload() {
    let with = |gates: serde_json::Value, conditions: serde_json::Value| {
        pod(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "app"}], "readinessGates": gates},
            "status": {"conditions": conditions},
        }))
    };
    let ours = json!({"conditionType": KRUISE_POD_READY});
    let in_place = json!({"conditionType": "InPlaceUpdateReady"});
    assert!(!left_to_workload(&with(json!([ours]), json!([]))));
    assert!(left_to_workload(&with(json!([ours, in_place]), json!([]))));
    let opened = json!([{"type": "InPlaceUpdateReady", "status": "True"}]);
    assert!(
        !left_to_workload(&with(json!([ours, in_place]), opened)),
        "opened without ours: the controller's"
    );
}

#[test]
fn holding_exactly_keeps_other_writers_holds() {
    let crr = holder("ContainerRecreateRequest", "r1");
    let pod = held_by(std::slice::from_ref(&crr));
    let condition = hold_exactly(&pod, READINESS_USER_AGENT, &[PRE_UPDATE_HOLD], t0()).unwrap();
    let pod = gated(Some(condition));
    // Listed in order: user agent, then key.
    assert_eq!(holders(&pod), vec![crr.clone(), lifecycle(PRE_UPDATE_HOLD)]);
    assert_eq!(
        hold_exactly(&pod, READINESS_USER_AGENT, &[PRE_UPDATE_HOLD], t0()),
        None
    );
    let released = hold_exactly(&pod, READINESS_USER_AGENT, &[], t0()).unwrap();
    assert_eq!(released.status, "False", "the other writer still holds it");
    let pod = gated(Some(released));
    assert_eq!(holders(&pod), vec![crr]);
}

#[test]
fn a_move_to_a_preparing_state_holds_the_pod_first() {
    let pod = gated(None);
    let patch = hold_before_move(&pod, LifecycleState::PreparingDelete, t0()).unwrap();
    assert_eq!(patch["metadata"]["resourceVersion"], "7");
    let conditions = patch["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions[0]["type"], KRUISE_POD_READY);
    assert_eq!(conditions[0]["status"], "False");
    assert_eq!(
        conditions[0]["message"],
        r#"[{"userAgent":"Lifecycle","key":"preDeleteHook"}]"#
    );
    assert_eq!(conditions[1]["type"], "Ready");
    assert_eq!(conditions[1]["status"], "False");

    let patch = hold_before_move(&pod, LifecycleState::PreparingUpdate, t0()).unwrap();
    assert_eq!(
        patch["status"]["conditions"][0]["message"],
        r#"[{"userAgent":"Lifecycle","key":"preUpdateHook"}]"#
    );
    assert_eq!(hold_before_move(&pod, LifecycleState::Normal, t0()), None);
    let ungated = ready_pod("p0", REV_A);
    assert_eq!(
        hold_before_move(&ungated, LifecycleState::PreparingDelete, t0()),
        None
    );
    let held = held_by(&[lifecycle(PRE_DELETE_HOLD)]);
    assert_eq!(
        hold_before_move(&held, LifecycleState::PreparingDelete, t0()),
        None
    );
}

#[test]
fn a_hold_lost_on_the_way_is_taken_in_its_state() {
    let marks = both_marking();
    let condition = |pod: &Pod| readiness_condition(&marks, pod, t0()).map(|c| c.message);
    let expected = |key: &str| {
        Some(Some(format!(
            r#"[{{"userAgent":"Lifecycle","key":"{key}"}}]"#
        )))
    };
    let deleting = in_state(gated(None), LifecycleState::PreparingDelete);
    assert_eq!(condition(&deleting), expected(PRE_DELETE_HOLD));
    let preparing = in_state(gated(None), LifecycleState::PreparingUpdate);
    assert_eq!(condition(&preparing), expected(PRE_UPDATE_HOLD));
    // Too late once the update runs: the pod is unready for it anyway.
    let updating = in_state(gated(None), LifecycleState::Updating);
    assert_eq!(condition(&updating), None);
    // Without markPodNotReady no hold is taken.
    let none = Lifecycle::default();
    assert_eq!(readiness_condition(&none, &deleting, t0()), None);
    assert_eq!(readiness_condition(&none, &preparing, t0()), None);
    // Nor without the gate.
    let ungated = in_state(ready_pod("p0", REV_A), LifecycleState::PreparingDelete);
    assert_eq!(readiness_condition(&marks, &ungated, t0()), None);
}

#[test]
fn a_hold_lasts_through_its_state_and_goes_when_the_pod_leaves_it() {
    let none = Lifecycle::default();
    let update_held = held_by(&[lifecycle(PRE_UPDATE_HOLD)]);
    for state in [LifecycleState::PreparingUpdate, LifecycleState::Updating] {
        let pod = in_state(update_held.clone(), state);
        assert_eq!(readiness_condition(&none, &pod, t0()), None, "{state:?}");
    }
    for state in [LifecycleState::Updated, LifecycleState::Normal] {
        let pod = in_state(update_held.clone(), state);
        let released = readiness_condition(&none, &pod, t0()).unwrap();
        assert_eq!(
            (released.status.as_str(), released.message.as_deref()),
            ("True", Some("[]")),
            "{state:?}"
        );
    }
    let no_state = update_held.clone();
    assert!(readiness_condition(&none, &no_state, t0()).is_some());

    let delete_held = held_by(&[lifecycle(PRE_DELETE_HOLD), holder("Other", "k")]);
    let waiting = in_state(delete_held.clone(), LifecycleState::PreparingDelete);
    assert_eq!(readiness_condition(&none, &waiting, t0()), None);
    // A scale-in regretted (the hook no longer marks): back in service.
    let regretted = in_state(delete_held, LifecycleState::PreparingNormal);
    let released = readiness_condition(&none, &regretted, t0()).unwrap();
    assert_eq!(released.status, "False", "the other holder keeps it");
    assert_eq!(
        released.message.as_deref(),
        Some(r#"[{"userAgent":"Other","key":"k"}]"#)
    );
}

#[test]
fn an_update_hold_stays_when_the_pod_is_scaled_in_meanwhile() {
    let only_update = Lifecycle {
        in_place_update: Some(marking()),
        ..Default::default()
    };
    let pod = in_state(
        held_by(&[lifecycle(PRE_UPDATE_HOLD)]),
        LifecycleState::PreparingDelete,
    );
    assert_eq!(readiness_condition(&only_update, &pod, t0()), None);
}

#[test]
fn a_status_that_disagrees_with_its_holders_is_written_again() {
    let crr = holder("ContainerRecreateRequest", "default/r1");
    let mut opened_over = held_by(std::slice::from_ref(&crr));
    for c in opened_over
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()
    {
        if c.type_ == KRUISE_POD_READY {
            c.status = "True".into();
        }
    }
    // The holder is listed but the pod was turned True: held again.
    let again = hold(&opened_over, &crr, t0()).unwrap();
    assert_eq!(again.status, "False");
    assert_eq!(holders(&gated(Some(again))), vec![crr]);
    let none = Lifecycle::default();
    let normal = in_state(opened_over, LifecycleState::Normal);
    let kept = readiness_condition(&none, &normal, t0()).unwrap();
    assert_eq!(kept.status, "False", "the request still holds it");

    // False with nobody listed (an older controller of ours wrote that):
    // back to True once the pod's state wants no hold.
    let stale: PodCondition =
        serde_json::from_value(json!({"type": KRUISE_POD_READY, "status": "False"})).unwrap();
    let normal = in_state(gated(Some(stale)), LifecycleState::Normal);
    let healed = readiness_condition(&none, &normal, t0()).unwrap();
    assert_eq!(healed.status, "True");
    // True and nobody listed: as it should be.
    let fine = in_state(
        gated(Some(first_condition(&gated(None), t0()).unwrap())),
        LifecycleState::Normal,
    );
    assert_eq!(readiness_condition(&none, &fine, t0()), None);
}

#[test]
fn a_finished_update_lets_its_hold_go_in_the_refresh() {
    let cs = {
        let mut cs = cloneset(1, "0", "1", "0");
        cs.spec.update_strategy.as_mut().unwrap().type_ =
            Some(CloneSetUpdateStrategyType::InPlaceIfPossible);
        cs.spec.lifecycle = Some(both_marking());
        cs
    };
    let mut pod = in_state(
        held_by(&[lifecycle(PRE_UPDATE_HOLD)]),
        LifecycleState::Updated,
    );
    pod.metadata.name = Some("p0".into());
    let plan = run(&cs, &[pod], &image_revisions(REV_B, REV_B), NO_GATES);
    assert_eq!(plan.stage, Stage::Refresh);
    assert_eq!(plan.readiness.len(), 1);
    let ReadinessChange { pod, condition } = &plan.readiness[0];
    assert_eq!((pod.as_str(), condition.status.as_str()), ("p0", "True"));
}

#[test]
fn a_pre_normal_hook_marking_not_ready_does_not_stop_a_regret() {
    let cs = {
        let mut cs = cloneset(3, "0", "1", "0");
        cs.spec.lifecycle = Some(Lifecycle {
            pre_normal: Some(marking()),
            ..Default::default()
        });
        cs
    };
    let mut all = cloneset_common::pods("p", 3, REV_B);
    set_label(&mut all[0], LABEL_LIFECYCLE_STATE, "PreparingDelete");
    let plan = run(&cs, &all, &image_revisions(REV_B, REV_B), NO_GATES);
    assert_eq!(plan.lifecycle[0].to, LifecycleState::PreparingNormal);

    let mut marked = cs.clone();
    marked.spec.lifecycle = Some(both_marking());
    let plan = run(&marked, &all, &image_revisions(REV_B, REV_B), NO_GATES);
    assert!(plan.lifecycle.is_empty(), "{:?}", plan.lifecycle);
}
