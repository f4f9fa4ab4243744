//! Ports of upstream `cloneset_update_test.go` (TestUpdate,
//! TestSortUpdateIndexes, TestCalculateUpdateCount), `cloneset_scale_test.go`
//! (TestCreatePods, TestDeletePods, TestScale), `pod_sorter_test.go`,
//! `inplace_update_test.go` / `inplace_update_defaults_test.go` and the
//! status computation, as tests of the planner (spec 03 §11). The writes
//! themselves (patches, status updates, events, names) are the controller's
//! I/O: here we check what the planner asks for.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cloneset_common;

use std::collections::BTreeMap;

use cloneset_common::{
    REV_A, REV_B, Sim, cloneset, env_revisions, image_revisions, pods, ready_pod, run,
    set_condition, set_label, t0, template, unready_pod,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
use kruise_api::CloneSet;
use kruise_api::cloneset::{CloneSetUpdateStrategyType, Lifecycle, LifecycleHook};
use kruise_api::common::{
    UpdatePriorityOrderTerm, UpdatePriorityStrategy, UpdatePriorityWeightTerm, UpdateScatterTerm,
};
use kruise_core::cloneset::{
    ANNOTATION_IN_PLACE_UPDATE_GRACE, ANNOTATION_IN_PLACE_UPDATE_STATE, FeatureGates,
    InPlaceCompletion, LABEL_LIFECYCLE_STATE, LifecycleChange, LifecycleState, PlanError,
    PodCreation, Revisions, Stage, active_pods_order, calculate_in_place_update, compute_status,
    is_in_place_update_completed, scatter, sort_by_priority, sort_for_scale_in,
};
use serde_json::json;

const NO_GATES: FeatureGates = FeatureGates {
    partition_rollback: false,
    preparing_update_as_update: false,
};

fn names(pods: &[&Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect()
}

fn with_type(mut cs: CloneSet, type_: CloneSetUpdateStrategyType) -> CloneSet {
    cs.spec.update_strategy.as_mut().unwrap().type_ = Some(type_);
    cs
}

fn with_lifecycle(mut cs: CloneSet, lifecycle: Lifecycle) -> CloneSet {
    cs.spec.lifecycle = Some(lifecycle);
    cs
}

/// One pod, updated in place if possible, its update hooked by `hook`.
fn hooked_in_place(partition: &str, hook: LifecycleHook) -> CloneSet {
    with_lifecycle(
        with_type(
            cloneset(1, partition, "1", "0"),
            CloneSetUpdateStrategyType::InPlaceIfPossible,
        ),
        Lifecycle {
            in_place_update: Some(hook),
            ..Default::default()
        },
    )
}

fn label_hook(key: &str) -> LifecycleHook {
    LifecycleHook {
        labels_handler: [(key.to_owned(), "true".to_owned())].into(),
        ..Default::default()
    }
}

// ---- TestUpdate ----

#[test]
fn recreate_update_1_of_2() {
    let plan = run(
        &cloneset(1, "0", "1", "0"),
        &pods("p", 1, REV_A),
        &image_revisions(REV_A, REV_B),
        NO_GATES,
    );
    assert_eq!(plan.stage, Stage::Update);
    assert_eq!(plan.mark_specified_delete, vec!["p0".to_owned()]);
}

/// 2/2: the marked pod is deleted by the next Scale pass, then recreated.
#[test]
fn recreate_update_2_of_2() {
    let mut sim = Sim::new(
        cloneset(1, "0", "1", "0"),
        pods("p", 1, REV_A),
        image_revisions(REV_A, REV_B),
    );
    sim.reconcile();
    assert_eq!(sim.reconcile().delete, vec!["p0".to_owned()]);
    assert_eq!(
        sim.reconcile().create,
        vec![PodCreation {
            revision: REV_B.into(),
            count: 1
        }]
    );
}

/// OnDelete (v1beta1, OpenKruise v1.9): no pod is updated, with or
/// without surge or partition written beside it; a pod that goes is made
/// again at the update revision; the status expects every pod updated.
#[test]
fn on_delete_updates_no_pod_and_remakes_at_the_new_revision() {
    // 10 pods: the scale pass's 20 % (2 pods) would leave an update room.
    let cs = with_type(
        cloneset(10, "1", "1", "1"),
        CloneSetUpdateStrategyType::OnDelete,
    );
    let revisions = image_revisions(REV_A, REV_B);
    let all = pods("p", 10, REV_A);
    let plan = run(&cs, &all, &revisions, NO_GATES);
    assert!(plan.create.is_empty(), "no surge: {plan:?}");
    assert!(plan.in_place_update.is_empty() && plan.mark_specified_delete.is_empty());
    assert!(plan.delete.is_empty());
    let plan = run(&cs, &all[..9], &revisions, NO_GATES);
    assert_eq!(
        plan.create,
        vec![PodCreation {
            revision: REV_B.into(),
            count: 1
        }]
    );
    let status = compute_status(&cs, &all, &revisions, None, t0());
    assert_eq!(status.expected_updated_replicas, Some(10));
}

#[test]
fn inplace_update() {
    let cs = with_type(
        cloneset(1, "0", "1", "0"),
        CloneSetUpdateStrategyType::InPlaceIfPossible,
    );
    let plan = run(
        &cs,
        &pods("p", 1, REV_A),
        &image_revisions(REV_A, REV_B),
        NO_GATES,
    );
    assert_eq!(plan.in_place_update.len(), 1);
    let update = &plan.in_place_update[0];
    assert_eq!(update.pod, "p0");
    assert_eq!(update.spec.revision, REV_B);
    assert_eq!(
        update.spec.container_images,
        BTreeMap::from([("app".to_owned(), "nginx:1.1".to_owned())])
    );
    assert_eq!(update.spec.grace_seconds, 0);
    // Applying it (simulator): same pod, new image, InPlaceUpdateReady=False.
    let mut sim = Sim::new(cs, pods("p", 1, REV_A), image_revisions(REV_A, REV_B));
    sim.reconcile();
    assert!(!kruise_core::cloneset::is_running_and_ready(&sim.pods[0]));
}

#[test]
fn inplace_update_with_grace_period() {
    let mut cs = with_type(
        cloneset(1, "0", "1", "0"),
        CloneSetUpdateStrategyType::InPlaceIfPossible,
    );
    cs.spec
        .update_strategy
        .as_mut()
        .unwrap()
        .in_place_update_strategy = Some(kruise_api::cloneset::InPlaceUpdateStrategy {
        grace_period_seconds: 3600,
        ..Default::default()
    });
    let plan = run(
        &cs,
        &pods("p", 1, REV_A),
        &image_revisions(REV_A, REV_B),
        NO_GATES,
    );
    assert_eq!(plan.in_place_update[0].spec.grace_seconds, 3600);
}

fn in_grace(started_seconds_ago: i64) -> Pod {
    let mut pod = ready_pod("p0", REV_B);
    set_condition(&mut pod, "InPlaceUpdateReady", "False");
    set_label(&mut pod, LABEL_LIFECYCLE_STATE, "Updating");
    let started = t0() - SignedDuration::from_secs(started_seconds_ago);
    let annotations = pod.metadata.annotations.get_or_insert_default();
    annotations.insert(
        ANNOTATION_IN_PLACE_UPDATE_STATE.to_owned(),
        json!({"revision": REV_B, "updateTimestamp": started.to_string()}).to_string(),
    );
    annotations.insert(
        ANNOTATION_IN_PLACE_UPDATE_GRACE.to_owned(),
        json!({"revision": REV_B, "containerImages": {"app": "nginx:1.1"}, "graceSeconds": 3600})
            .to_string(),
    );
    pod
}

#[test]
fn inplace_update_during_grace_period() {
    let cs = with_type(
        cloneset(1, "0", "1", "0"),
        CloneSetUpdateStrategyType::InPlaceIfPossible,
    );
    let plan = run(
        &cs,
        &[in_grace(10)],
        &image_revisions(REV_A, REV_B),
        NO_GATES,
    );
    assert!(!plan.modifies());
    assert_eq!(plan.requeue_after_seconds, Some(3590));
}

#[test]
fn inplace_update_continuously_after_grace_period() {
    let cs = with_type(
        cloneset(1, "0", "1", "0"),
        CloneSetUpdateStrategyType::InPlaceIfPossible,
    );
    let plan = run(
        &cs,
        &[in_grace(3601)],
        &image_revisions(REV_A, REV_B),
        NO_GATES,
    );
    assert_eq!(plan.apply_graced, vec!["p0".to_owned()]);
    assert_eq!(plan.stage, Stage::Refresh);
}

#[test]
fn inplace_only_rejects_non_image_changes() {
    let cs = with_type(
        cloneset(1, "0", "1", "0"),
        CloneSetUpdateStrategyType::InPlaceOnly,
    );
    let plan = run(
        &cs,
        &pods("p", 1, REV_A),
        &env_revisions(REV_A, REV_B),
        NO_GATES,
    );
    assert_eq!(
        plan.errors,
        vec![PlanError::NotInPlaceUpdatable { pod: "p0".into() }]
    );
    assert!(!plan.modifies());
}

#[test]
fn inplace_if_possible_falls_back_to_recreate() {
    let cs = with_type(
        cloneset(1, "0", "1", "0"),
        CloneSetUpdateStrategyType::InPlaceIfPossible,
    );
    let plan = run(
        &cs,
        &pods("p", 1, REV_A),
        &env_revisions(REV_A, REV_B),
        NO_GATES,
    );
    assert_eq!(plan.mark_specified_delete, vec!["p0".to_owned()]);
}

#[test]
fn create_preparing_normal_to_normal_without_hook() {
    let mut pod = ready_pod("p0", REV_B);
    set_label(&mut pod, LABEL_LIFECYCLE_STATE, "PreparingNormal");
    let plan = run(
        &cloneset(1, "0", "1", "0"),
        &[pod],
        &image_revisions(REV_B, REV_B),
        NO_GATES,
    );
    assert_eq!(
        plan.lifecycle,
        vec![LifecycleChange {
            pod: "p0".into(),
            to: LifecycleState::Normal,
            mark_not_ready: false,
            restore_hook: false,
        }]
    );
}

#[test]
fn create_preparing_normal_pod_is_not_scheduled_should_stay_at_preparing_normal() {
    let mut pod = unready_pod("p0", REV_B);
    set_label(&mut pod, LABEL_LIFECYCLE_STATE, "PreparingNormal");
    pod.spec.as_mut().unwrap().node_name = None;
    let plan = run(
        &cloneset(1, "0", "1", "0"),
        &[pod],
        &image_revisions(REV_B, REV_B),
        NO_GATES,
    );
    assert!(plan.lifecycle.is_empty());
    assert!(!plan.modifies());
}

/// One pod, with a preNormal hook on the label `key`.
fn with_pre_normal_hook(key: &str) -> CloneSet {
    with_lifecycle(
        cloneset(1, "0", "1", "0"),
        Lifecycle {
            pre_normal: Some(label_hook(key)),
            ..Default::default()
        },
    )
}

#[test]
fn create_preparing_normal_with_pre_normal_hook_waits_for_all_hook_labels() {
    let cs = with_pre_normal_hook("ready-hook");
    let mut pod = ready_pod("p0", REV_B);
    set_label(&mut pod, LABEL_LIFECYCLE_STATE, "PreparingNormal");
    assert!(
        run(
            &cs,
            std::slice::from_ref(&pod),
            &image_revisions(REV_B, REV_B),
            NO_GATES
        )
        .lifecycle
        .is_empty()
    );
    set_label(&mut pod, "ready-hook", "true");
    let plan = run(&cs, &[pod], &image_revisions(REV_B, REV_B), NO_GATES);
    assert_eq!(plan.lifecycle[0].to, LifecycleState::Normal);
}

/// A pod as the controller creates it: `PreparingNormal`, its
/// `InPlaceUpdateReady` gate not yet opened, not yet scheduled.
fn new_unscheduled_pod(name: &str) -> Pod {
    let mut pod = unready_pod(name, REV_B);
    set_label(&mut pod, LABEL_LIFECYCLE_STATE, "PreparingNormal");
    pod.spec.as_mut().unwrap().node_name = None;
    if let Some(conditions) = pod.status.as_mut().unwrap().conditions.as_mut() {
        conditions.retain(|c| c.type_ != "InPlaceUpdateReady");
    }
    pod
}

/// The one write that opens pod `p0`'s gate, moving it `to` a state.
fn opens_gate_of_p0(to: Option<LifecycleState>) -> Vec<InPlaceCompletion> {
    vec![InPlaceCompletion {
        pod: "p0".into(),
        to,
    }]
}

#[test]
fn new_pod_opens_its_gate_and_turns_normal_in_one_write_once_scheduled() {
    let cs = cloneset(1, "0", "1", "0");
    let revisions = image_revisions(REV_B, REV_B);
    let mut pod = new_unscheduled_pod("p0");
    let waiting = run(&cs, std::slice::from_ref(&pod), &revisions, NO_GATES);
    assert!(!waiting.modifies(), "nothing to write before scheduling");

    pod.spec.as_mut().unwrap().node_name = Some("node-1".into());
    let plan = run(&cs, &[pod], &revisions, NO_GATES);
    assert_eq!(
        plan.in_place_complete,
        opens_gate_of_p0(Some(LifecycleState::Normal))
    );
    assert!(
        plan.lifecycle.is_empty(),
        "the label rides on the same write"
    );
}

#[test]
fn new_pod_with_pre_normal_hook_opens_its_gate_without_waiting_for_the_hook() {
    let cs = with_pre_normal_hook("ready-hook");
    let revisions = image_revisions(REV_B, REV_B);
    let mut pod = new_unscheduled_pod("p0");
    let plan = run(&cs, std::slice::from_ref(&pod), &revisions, NO_GATES);
    assert_eq!(plan.in_place_complete, opens_gate_of_p0(None));

    set_label(&mut pod, "ready-hook", "true");
    let plan = run(&cs, &[pod], &revisions, NO_GATES);
    assert_eq!(
        plan.in_place_complete,
        opens_gate_of_p0(Some(LifecycleState::Normal))
    );
}

/// A hooked pod moves to PreparingUpdate instead of being updated; so
/// does a pod left `Updated` by its last update (the hook's owner has not
/// put the hook back), with the hook restored in the same write, as
/// OpenKruise's `UpdatePodLifecycleWithHandler` does.
#[test]
fn in_place_update_normal_to_preparing_update_pod_does_hook() {
    let mut hook = label_hook("upgrade-hook");
    hook.mark_pod_not_ready = true;
    let cs = hooked_in_place("0", hook);
    let mut hooked = ready_pod("p0", REV_A);
    set_label(&mut hooked, "upgrade-hook", "true");
    let mut updated = ready_pod("p0", REV_A);
    set_label(&mut updated, LABEL_LIFECYCLE_STATE, "Updated");
    for (pod, restore_hook) in [(hooked, false), (updated, true)] {
        let plan = run(&cs, &[pod], &image_revisions(REV_A, REV_B), NO_GATES);
        assert_eq!(
            plan.lifecycle,
            vec![LifecycleChange {
                pod: "p0".into(),
                to: LifecycleState::PreparingUpdate,
                mark_not_ready: true,
                restore_hook,
            }]
        );
        assert!(plan.in_place_update.is_empty());
    }
}

/// A rollback (partition raised, with its gate) of an `Updated` pod is
/// made in place at once: moved to PreparingUpdate, the refresh would take
/// it straight back (it is at the update revision), every round.
#[test]
fn in_place_rollback_of_an_updated_pod_restores_no_hook() {
    let cs = hooked_in_place("1", label_hook("upgrade-hook"));
    let mut pod = ready_pod("p0", REV_B);
    set_label(&mut pod, LABEL_LIFECYCLE_STATE, "Updated");
    let gates = FeatureGates {
        partition_rollback: true,
        ..NO_GATES
    };
    let plan = run(&cs, &[pod], &image_revisions(REV_A, REV_B), gates);
    assert!(plan.lifecycle.is_empty(), "{:?}", plan.lifecycle);
    assert_eq!(plan.in_place_update.len(), 1);
    assert_eq!(plan.in_place_update[0].spec.revision, REV_A);
}

#[test]
fn in_place_update_preparing_update_to_updating_when_unhooked() {
    let cs = hooked_in_place("0", label_hook("upgrade-hook"));
    let mut pod = unready_pod("p0", REV_A);
    set_label(&mut pod, LABEL_LIFECYCLE_STATE, "PreparingUpdate");
    let plan = run(&cs, &[pod], &image_revisions(REV_A, REV_B), NO_GATES);
    assert_eq!(plan.in_place_update.len(), 1);
}

#[test]
fn in_place_update_updated_to_normal_once_hook_is_back() {
    let cs = with_lifecycle(
        cloneset(1, "0", "1", "0"),
        Lifecycle {
            in_place_update: Some(label_hook("upgrade-hook")),
            ..Default::default()
        },
    );
    let mut pod = ready_pod("p0", REV_B);
    set_label(&mut pod, LABEL_LIFECYCLE_STATE, "Updated");
    assert!(
        run(
            &cs,
            std::slice::from_ref(&pod),
            &image_revisions(REV_B, REV_B),
            NO_GATES
        )
        .lifecycle
        .is_empty()
    );
    set_label(&mut pod, "upgrade-hook", "true");
    assert_eq!(
        run(&cs, &[pod], &image_revisions(REV_B, REV_B), NO_GATES).lifecycle[0].to,
        LifecycleState::Normal
    );
}

// ---- TestSortUpdateIndexes ----

#[test]
fn test_sort_update_indexes_weight_priority() {
    let mut all = pods("p", 4, REV_A);
    set_label(&mut all[1], "test-key", "bar");
    set_label(&mut all[3], "test-key", "foo");
    let strategy = UpdatePriorityStrategy {
        weight_priority: vec![
            UpdatePriorityWeightTerm {
                weight: 50,
                match_selector: serde_json::from_value(json!({"matchLabels": {"test-key": "foo"}}))
                    .unwrap(),
            },
            UpdatePriorityWeightTerm {
                weight: 30,
                match_selector: serde_json::from_value(json!({"matchLabels": {"test-key": "bar"}}))
                    .unwrap(),
            },
        ],
        order_priority: vec![],
    };
    let mut refs: Vec<&Pod> = all.iter().collect();
    sort_by_priority(&mut refs, &strategy);
    assert_eq!(names(&refs), ["p3", "p1", "p0", "p2"]);
}

#[test]
fn test_sort_update_indexes_order_priority() {
    let mut all = pods("p", 4, REV_A);
    set_label(&mut all[0], "key1", "5");
    set_label(&mut all[1], "key1", "10");
    set_label(&mut all[2], "key1", "sts-20");
    let strategy = UpdatePriorityStrategy {
        weight_priority: vec![],
        order_priority: vec![UpdatePriorityOrderTerm {
            ordered_key: "key1".into(),
        }],
    };
    let mut refs: Vec<&Pod> = all.iter().collect();
    sort_by_priority(&mut refs, &strategy);
    // No key at all sorts first (level -1), then bigger numbers first.
    assert_eq!(names(&refs), ["p3", "p2", "p1", "p0"]);
}

#[test]
fn test_sort_update_indexes_scatter() {
    let mut all = pods("p", 6, REV_A);
    set_label(&mut all[0], "zone", "a");
    set_label(&mut all[1], "zone", "a");
    let mut refs: Vec<&Pod> = all.iter().collect();
    scatter(
        &mut refs,
        &[UpdateScatterTerm {
            key: "zone".into(),
            value: "a".into(),
        }],
    );
    assert_eq!(names(&refs), ["p0", "p2", "p3", "p1", "p4", "p5"]);
}

#[test]
fn test_sort_update_indexes_priority_applied_by_planner() {
    let mut cs = cloneset(4, "0", "1", "0");
    cs.spec.update_strategy.as_mut().unwrap().priority_strategy = Some(UpdatePriorityStrategy {
        weight_priority: vec![UpdatePriorityWeightTerm {
            weight: 10,
            match_selector: serde_json::from_value(json!({"matchLabels": {"first": "yes"}}))
                .unwrap(),
        }],
        order_priority: vec![],
    });
    let mut all = pods("p", 4, REV_A);
    set_label(&mut all[2], "first", "yes");
    let plan = run(&cs, &all, &image_revisions(REV_A, REV_B), NO_GATES);
    assert_eq!(plan.mark_specified_delete, vec!["p2".to_owned()]);
}

// ---- TestCalculateUpdateCount (the §6.5 step 7 budget walk) ----

#[test]
fn test_calculate_update_count() {
    let revisions = image_revisions(REV_A, REV_B);
    // All available, budget 2: two pods.
    let plan = run(
        &cloneset(10, "0", "2", "0"),
        &pods("p", 10, REV_A),
        &revisions,
        NO_GATES,
    );
    assert_eq!(plan.mark_specified_delete.len(), 2);
    // Two old pods already unavailable: they go first (in list order, they
    // tie otherwise) and spend no global budget.
    let mut all = pods("p", 10, REV_A);
    all[4] = unready_pod("p4", REV_A);
    all[7] = unready_pod("p7", REV_A);
    let plan = run(&cloneset(10, "0", "2", "0"), &all, &revisions, NO_GATES);
    assert_eq!(
        plan.mark_specified_delete,
        vec!["p4".to_owned(), "p7".to_owned()]
    );
    // One unavailable pod already on the target revision uses one slot.
    let mut all = pods("p", 9, REV_A);
    all.push(unready_pod("n0", REV_B));
    let plan = run(&cloneset(10, "0", "2", "0"), &all, &revisions, NO_GATES);
    assert_eq!(plan.mark_specified_delete.len(), 1);
}

// ---- TestScale / TestDeletePods / TestCreatePods ----

#[test]
fn test_scale_replicas_3_min_ready_seconds_9999_pods_5_to_3() {
    let mut cs = cloneset(3, "0", "20%", "0");
    cs.spec.min_ready_seconds = Some(9999);
    let all: Vec<Pod> = (0..5)
        .map(|i| unready_pod(&format!("p{i}"), REV_B))
        .collect();
    let plan = run(&cs, &all, &image_revisions(REV_B, REV_B), NO_GATES);
    assert_eq!(plan.delete.len(), 2, "not-ready pods are always deletable");
    // Ready but not yet available pods exhaust the budget: nothing goes.
    let plan = run(
        &cs,
        &pods("p", 5, REV_B),
        &image_revisions(REV_B, REV_B),
        NO_GATES,
    );
    assert_eq!(plan.scale_diffs.delete_ready_limit, 0);
    assert!(plan.delete.is_empty());
}

#[test]
fn test_scale_specified_delete_pod_0() {
    let mut cs = cloneset(5, "0", "1", "0");
    cs.spec.scale_strategy = Some(kruise_api::cloneset::CloneSetScaleStrategy {
        pods_to_delete: vec!["p0".into(), "gone".into()],
        ..Default::default()
    });
    let plan = run(
        &cs,
        &pods("p", 5, REV_B),
        &image_revisions(REV_B, REV_B),
        NO_GATES,
    );
    assert_eq!(plan.delete, vec!["p0".to_owned()]);
}

#[test]
fn test_delete_pods_pre_delete_hook_to_preparing_delete() {
    let hook = LifecycleHook {
        finalizers_handler: vec!["example.com/hook".into()],
        mark_pod_not_ready: true,
        ..Default::default()
    };
    let cs = with_lifecycle(
        cloneset(2, "0", "1", "0"),
        Lifecycle {
            pre_delete: Some(hook),
            ..Default::default()
        },
    );
    let mut all = pods("p", 3, REV_B);
    all[0].metadata.finalizers = Some(vec!["example.com/hook".into()]);
    all[0] = {
        let mut p = all[0].clone();
        set_condition(&mut p, "Ready", "False");
        p
    };
    let plan = run(&cs, &all, &image_revisions(REV_B, REV_B), NO_GATES);
    assert_eq!(
        plan.lifecycle,
        vec![LifecycleChange {
            pod: "p0".into(),
            to: LifecycleState::PreparingDelete,
            mark_not_ready: true,
            restore_hook: false,
        }]
    );
    assert!(plan.delete.is_empty());
    // Once the hook's finalizer is gone the PreparingDelete pod is deleted.
    set_label(&mut all[0], LABEL_LIFECYCLE_STATE, "PreparingDelete");
    all[0].metadata.finalizers = None;
    let plan = run(&cs, &all, &image_revisions(REV_B, REV_B), NO_GATES);
    assert_eq!(plan.delete, vec!["p0".to_owned()]);
}

#[test]
fn test_scale_regret_preparing_delete_when_replicas_grow_back() {
    let mut all = pods("p", 3, REV_B);
    set_label(&mut all[0], LABEL_LIFECYCLE_STATE, "PreparingDelete");
    let plan = run(
        &cloneset(3, "0", "1", "0"),
        &all,
        &image_revisions(REV_B, REV_B),
        NO_GATES,
    );
    assert_eq!(plan.lifecycle[0].to, LifecycleState::PreparingNormal);
    assert_eq!(plan.stage, Stage::Scale);
}

/// The planner's part of TestCreatePods: how many pods on which revision.
/// Names, instance ids and PVCs are chosen by the controller.
#[test]
fn test_create_pods_revisions() {
    let plan = run(
        &cloneset(5, "3", "1", "0"),
        &[],
        &image_revisions(REV_A, REV_B),
        NO_GATES,
    );
    assert_eq!(
        plan.create,
        vec![
            PodCreation {
                revision: REV_A.into(),
                count: 3
            },
            PodCreation {
                revision: REV_B.into(),
                count: 2
            }
        ]
    );
}

// ---- pod_sorter_test.go ----

#[test]
#[allow(clippy::large_stack_arrays)] // seven pods, in a test
fn test_sorting_active_pods() {
    let mut unscheduled = unready_pod("unscheduled", REV_A);
    unscheduled.spec.as_mut().unwrap().node_name = None;
    unscheduled.status.as_mut().unwrap().phase = Some("Pending".into());
    let mut pending = unready_pod("pending", REV_A);
    pending.status.as_mut().unwrap().phase = Some("Pending".into());
    let not_ready = unready_pod("not-ready", REV_A);
    let mut costly = ready_pod("costly", REV_A);
    costly.metadata.annotations = Some(
        [(
            "controller.kubernetes.io/pod-deletion-cost".to_owned(),
            "100".to_owned(),
        )]
        .into(),
    );
    let mut restarted = ready_pod("restarted", REV_A);
    restarted
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .as_mut()
        .unwrap()[0]
        .restart_count = 3;
    let old = ready_pod("old", REV_A);
    let mut recent = ready_pod("recent", REV_A);
    set_condition(&mut recent, "Ready", "True");
    recent
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()
        .last_mut()
        .unwrap()
        .last_transition_time = Some(Time(t0()));
    let all = [
        old,
        costly,
        restarted,
        recent,
        not_ready,
        pending,
        unscheduled,
    ];
    let mut refs: Vec<&Pod> = all.iter().collect();
    kruise_core::ordered::sort_by(&mut refs, |a, b| active_pods_order(a, b));
    assert_eq!(
        names(&refs),
        [
            "unscheduled",
            "pending",
            "not-ready",
            "recent",
            "restarted",
            "old",
            "costly"
        ]
    );
    // Scale-in ranking puts deletion cost before readiness age.
    let mut refs: Vec<&Pod> = all.iter().collect();
    sort_for_scale_in(&mut refs, 0, t0());
    assert_eq!(
        names(&refs),
        [
            "unscheduled",
            "pending",
            "not-ready",
            "recent",
            "restarted",
            "old",
            "costly"
        ]
    );
}

#[test]
fn test_same_node_ranker() {
    let mut all = pods("p", 4, REV_A);
    all[3].spec.as_mut().unwrap().node_name = Some("node-2".into());
    let mut refs: Vec<&Pod> = all.iter().collect();
    sort_for_scale_in(&mut refs, 0, t0());
    // Crowded node-1 loses pods first; the pod alone on node-2 goes last.
    assert_eq!(refs.last().unwrap().metadata.name.as_deref(), Some("p3"));
    let plan = run(
        &cloneset(2, "0", "2", "0"),
        &all,
        &image_revisions(REV_A, REV_A),
        NO_GATES,
    );
    assert_eq!(plan.delete.len(), 2);
    assert!(!plan.delete.contains(&"p3".to_owned()));
}

// ---- inplace_update_test.go / inplace_update_defaults_test.go ----

#[test]
fn test_calculate_in_place_update_spec() {
    let (a, b) = (template("nginx:1.0"), template("nginx:1.1"));
    let spec = calculate_in_place_update(&a, &b, REV_B, 0).unwrap();
    assert_eq!(spec.container_images["app"], "nginx:1.1");
    assert!(spec.labels.is_empty());
    // Metadata-only change: in place, no images.
    let mut relabelled = a.clone();
    relabelled
        .metadata
        .as_mut()
        .unwrap()
        .labels
        .as_mut()
        .unwrap()
        .insert("tier".into(), "web".into());
    let spec = calculate_in_place_update(&a, &relabelled, REV_B, 0).unwrap();
    assert!(spec.container_images.is_empty());
    assert_eq!(spec.labels["tier"], Some("web".into()));
    // Env change, added container: not in place.
    let revisions = env_revisions(REV_A, REV_B);
    assert!(calculate_in_place_update(&a, &revisions.templates[REV_B], REV_B, 0).is_none());
    let mut two = b.clone();
    two.spec
        .as_mut()
        .unwrap()
        .containers
        .push(serde_json::from_value(json!({"name": "side", "image": "busybox"})).unwrap());
    assert!(calculate_in_place_update(&a, &two, REV_B, 0).is_none());
}

#[test]
fn test_default_calculate_in_place_update_spec_env_from_metadata() {
    let mut a = template("nginx:1.0");
    a.spec.as_mut().unwrap().containers[0].env = Some(vec![serde_json::from_value(json!({
        "name": "VERSION", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['version']"}}
    })).unwrap()]);
    let mut b = a.clone();
    b.metadata
        .as_mut()
        .unwrap()
        .labels
        .as_mut()
        .unwrap()
        .insert("version".into(), "2".into());
    let spec = calculate_in_place_update(&a, &b, REV_B, 0).unwrap();
    assert_eq!(spec.env_from_metadata_containers, vec!["app".to_owned()]);
}

fn updating_pod(old_image_id: &str, status_image: &str, status_image_id: &str) -> Pod {
    let mut pod = ready_pod("p0", REV_B);
    pod.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.1".into());
    let status = &mut pod
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .as_mut()
        .unwrap()[0];
    status.image = status_image.into();
    status.image_id = status_image_id.into();
    pod.metadata.annotations = Some(
        [(
            ANNOTATION_IN_PLACE_UPDATE_STATE.to_owned(),
            json!({"revision": REV_B, "lastContainerStatuses": {"app": {"imageID": old_image_id}}})
                .to_string(),
        )]
        .into(),
    );
    pod
}

#[test]
fn test_check_in_place_update_completed() {
    assert!(
        !is_in_place_update_completed(&updating_pod("id-a", "nginx:1.0", "id-a")),
        "imageID not changed"
    );
    assert!(is_in_place_update_completed(&updating_pod(
        "id-a",
        "nginx:1.1",
        "id-b"
    )));
    // Same imageID but the status already shows the spec image (same digest).
    assert!(is_in_place_update_completed(&updating_pod(
        "id-a",
        "nginx:1.1",
        "id-a"
    )));
    let mut graced = updating_pod("id-a", "nginx:1.1", "id-b");
    graced
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANNOTATION_IN_PLACE_UPDATE_GRACE.into(), "{}".into());
    assert!(!is_in_place_update_completed(&graced));
    let mut next = updating_pod("id-a", "nginx:1.1", "id-b");
    next.metadata.annotations.as_mut().unwrap().insert(
        ANNOTATION_IN_PLACE_UPDATE_STATE.into(),
        json!({"lastContainerStatuses": {}, "nextContainerImages": {"side": "x"}}).to_string(),
    );
    assert!(
        !is_in_place_update_completed(&next),
        "a next batch is pending"
    );
}

#[test]
fn test_refresh_sets_in_place_update_ready() {
    let mut pod = updating_pod("id-a", "nginx:1.1", "id-b");
    set_label(&mut pod, LABEL_LIFECYCLE_STATE, "Updating");
    set_condition(&mut pod, "InPlaceUpdateReady", "False");
    let plan = run(
        &cloneset(1, "0", "1", "0"),
        &[pod],
        &image_revisions(REV_B, REV_B),
        NO_GATES,
    );
    assert_eq!(plan.stage, Stage::Refresh);
    assert_eq!(plan.in_place_complete.len(), 1);
    assert_eq!(plan.in_place_complete[0].to, Some(LifecycleState::Normal));
}

// ---- status (cloneset_status.go, §1.3) ----

#[test]
fn test_status_computation() {
    let mut cs = cloneset(5, "40%", "1", "0");
    cs.spec.min_ready_seconds = Some(60);
    let mut all = pods("o", 3, REV_A);
    all.push(ready_pod("n0", REV_B));
    let mut fresh = ready_pod("n1", REV_B);
    set_condition(&mut fresh, "Ready", "True");
    fresh
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()
        .last_mut()
        .unwrap()
        .last_transition_time = Some(Time(t0() - SignedDuration::from_secs(10)));
    all.push(fresh);
    let mut gone = ready_pod("x", REV_A);
    gone.metadata.deletion_timestamp = Some(Time(t0()));
    all.push(gone);
    let revisions = Revisions {
        current: REV_A.into(),
        ..image_revisions(REV_A, REV_B)
    };
    let status = compute_status(&cs, &all, &revisions, None, t0());
    assert_eq!(status.replicas, 5);
    assert_eq!(status.ready_replicas, 5);
    assert_eq!(status.available_replicas, 4, "n1 is ready for 10s < 60s");
    assert_eq!(status.updated_replicas, 2);
    assert_eq!(status.updated_ready_replicas, 2);
    assert_eq!(status.updated_available_replicas, Some(1));
    assert_eq!(status.expected_updated_replicas, Some(3));
    assert_eq!(status.current_revision.as_deref(), Some(REV_A));
    assert_eq!(status.update_revision.as_deref(), Some(REV_B));
    assert_eq!(status.label_selector.as_deref(), Some("app=demo"));
    assert_eq!(status.observed_generation, Some(1));
    // Converged (readiness not required): currentRevision follows.
    let converged: Vec<Pod> = (0..5)
        .map(|i| unready_pod(&format!("n{i}"), REV_B))
        .collect();
    let status = compute_status(&cs, &converged, &revisions, None, t0());
    assert_eq!(status.current_revision.as_deref(), Some(REV_B));
}

#[test]
fn min_ready_seconds_requeue() {
    let mut cs = cloneset(1, "0", "1", "0");
    cs.spec.min_ready_seconds = Some(30);
    let mut pod = ready_pod("p0", REV_B);
    set_condition(&mut pod, "Ready", "True");
    pod.status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()
        .last_mut()
        .unwrap()
        .last_transition_time = Some(Time(t0() - SignedDuration::from_secs(10)));
    let plan = run(&cs, &[pod], &image_revisions(REV_B, REV_B), NO_GATES);
    assert_eq!(plan.requeue_after_seconds, Some(20));
}

// ---- e2e cases replayed on the simulator (test/e2e/apps/v1alpha1/cloneset.go) ----

fn converge(sim: &mut Sim, rounds: usize) {
    for _ in 0..rounds {
        sim.reconcile();
        sim.make_ready(None);
    }
}

#[test]
fn e2e_cloneset_partition_99pct_replicas_4_make_sure_one_pod_is_upgraded() {
    let mut sim = Sim::new(
        cloneset(4, "99%", "1", "0"),
        pods("p", 4, REV_A),
        image_revisions(REV_A, REV_B),
    );
    converge(&mut sim, 20);
    let c = sim.columns();
    assert_eq!((c.total, c.updated, c.updated_ready), (4, 1, 1));
}

#[test]
fn e2e_scales_in_normal_cases() {
    let mut sim = Sim::new(
        cloneset(3, "0", "1", "0"),
        vec![],
        image_revisions(REV_B, REV_B),
    );
    converge(&mut sim, 5);
    assert_eq!(sim.columns().ready, 3);
    sim.cloneset.spec.replicas = Some(1);
    converge(&mut sim, 5);
    assert_eq!((sim.columns().total, sim.columns().ready), (1, 1));
}

#[test]
fn e2e_pods_should_be_ready_when_paused_true() {
    let mut cs = cloneset(3, "0", "1", "0");
    cs.spec.update_strategy.as_mut().unwrap().paused = true;
    let mut sim = Sim::new(cs, vec![], image_revisions(REV_B, REV_B));
    converge(&mut sim, 5);
    assert_eq!(sim.columns().ready, 3);
}

#[test]
fn e2e_specific_delete_a_pod_when_scaling_exclude_preparing_delete_is_disabled() {
    let hook = LifecycleHook {
        finalizers_handler: vec!["example.com/hook".into()],
        ..Default::default()
    };
    let mut cs = with_lifecycle(
        cloneset(3, "0", "1", "0"),
        Lifecycle {
            pre_delete: Some(hook),
            ..Default::default()
        },
    );
    cs.spec.scale_strategy = Some(kruise_api::cloneset::CloneSetScaleStrategy {
        pods_to_delete: vec!["p0".into()],
        ..Default::default()
    });
    let mut all = pods("p", 3, REV_B);
    all[0].metadata.finalizers = Some(vec!["example.com/hook".into()]);
    let mut sim = Sim::new(cs, all, image_revisions(REV_B, REV_B));
    converge(&mut sim, 5);
    // p0 waits in PreparingDelete and still counts: no replacement yet.
    let c = sim.columns();
    assert_eq!(c.total, 3);
    assert_eq!(
        sim.pods[0].metadata.labels.as_ref().unwrap()[LABEL_LIFECYCLE_STATE],
        "PreparingDelete"
    );
}

#[test]
fn e2e_creates_with_lifecycle_pre_normal_finalizer() {
    let hook = LifecycleHook {
        finalizers_handler: vec!["example.com/ready".into()],
        ..Default::default()
    };
    let cs = with_lifecycle(
        cloneset(1, "0", "1", "0"),
        Lifecycle {
            pre_normal: Some(hook),
            ..Default::default()
        },
    );
    let mut pod = ready_pod("p0", REV_B);
    set_label(&mut pod, LABEL_LIFECYCLE_STATE, "PreparingNormal");
    let mut sim = Sim::new(cs, vec![pod], image_revisions(REV_B, REV_B));
    sim.reconcile();
    assert_eq!(sim.columns().total, 1);
    assert!(
        !kruise_core::cloneset::is_available(&sim.pods[0], 0, t0()),
        "held in PreparingNormal"
    );
    sim.pods[0].metadata.finalizers = Some(vec!["example.com/ready".into()]);
    let plan = sim.reconcile();
    assert_eq!(plan.lifecycle[0].to, LifecycleState::Normal);
}
