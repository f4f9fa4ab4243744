//! Ports of upstream `pkg/util/tools_test.go` (int-or-percent helpers) and
//! `pkg/controller/cloneset/sync/cloneset_sync_utils_test.go::
//! TestCalculateDiffsWithExpectation` (spec 03 §11), as tests of the
//! planner. Upstream runs these with CloneSetPartitionRollback and
//! PreparingUpdateAsUpdate on; so do we unless a case says otherwise.
//! Where a sub-case's exact upstream inputs are not in the spec, the inputs
//! are the spec's (`createTestCloneSet(replicas, partition, maxUnavailable,
//! maxSurge)`) and the expected numbers follow from §6.2.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cloneset_common;

use cloneset_common::{
    REV_A, REV_B, Sim, cloneset, image_revisions, int_or_str, pods, ready_pod, run, set_label, t0,
    unready_pod,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::CloneSet;
use kruise_core::cloneset::intorstr::{
    calculate_partition_replicas, scaled_value_from_int_or_percent, value_from_int_or_percent,
};
use kruise_core::cloneset::{
    Diffs, FeatureGates, LABEL_EXCLUDE_PREPARING_DELETE, LABEL_LIFECYCLE_STATE,
    LABEL_SPECIFIED_DELETE, Pass, Settings, Stage, calculate_diffs,
};

const GATES_ON: FeatureGates = FeatureGates {
    partition_rollback: true,
    preparing_update_as_update: true,
};

fn diffs(cs: &CloneSet, pods: &[Pod], current: &str, gates: FeatureGates) -> Diffs {
    let revisions = image_revisions(current, REV_B);
    let settings = Settings::resolve(cs, &revisions, gates);
    let refs: Vec<&Pod> = pods.iter().collect();
    calculate_diffs(&settings, &refs, t0(), Pass::Scale)
}

fn specified(mut pod: Pod) -> Pod {
    set_label(&mut pod, LABEL_SPECIFIED_DELETE, "true");
    pod
}

// ---- pkg/util/tools_test.go ----

#[test]
fn test_calculate_partition_replicas() {
    let pct = |s: &str| IntOrString::String(s.to_owned());
    let cases: [(Option<i32>, IntOrString, i32); 9] = [
        (Some(9), pct("99%"), 8),
        (Some(10), pct("90%"), 9),
        (Some(10), pct("1%"), 1),
        (Some(99), pct("99%"), 98),
        (Some(99), pct("100%"), 99),
        (Some(0), pct("99%"), 0),
        (None, pct("100%"), 1),
        (None, pct("1%"), 1),
        (Some(10), IntOrString::Int(5), 5),
    ];
    for (replicas, partition, expected) in cases {
        assert_eq!(
            calculate_partition_replicas(Some(&partition), replicas),
            Ok(expected),
            "{replicas:?} {partition:?}"
        );
    }
    assert_eq!(calculate_partition_replicas(None, Some(5)), Ok(0));
    // Clamped into [0, replicas].
    assert_eq!(
        calculate_partition_replicas(Some(&IntOrString::Int(7)), Some(5)),
        Ok(5)
    );
    assert_eq!(
        calculate_partition_replicas(Some(&IntOrString::Int(-1)), Some(5)),
        Ok(0)
    );
    assert!(calculate_partition_replicas(Some(&pct("x")), Some(5)).is_err());
}

#[test]
fn test_get_scaled_value_from_int_or_percent() {
    let pct = |s: &str| IntOrString::String(s.to_owned());
    assert_eq!(
        scaled_value_from_int_or_percent(&IntOrString::Int(3), 10, true),
        Ok(3)
    );
    assert_eq!(
        scaled_value_from_int_or_percent(&pct("50%"), 5, true),
        Ok(3)
    );
    assert_eq!(
        scaled_value_from_int_or_percent(&pct("50%"), 5, false),
        Ok(2)
    );
    assert_eq!(
        scaled_value_from_int_or_percent(&pct("12.5%"), 10, true),
        Ok(2)
    );
    assert_eq!(
        scaled_value_from_int_or_percent(&pct("12.5%"), 10, false),
        Ok(1)
    );
    assert!(scaled_value_from_int_or_percent(&pct("abc"), 10, true).is_err());
    // The k8s helper takes whole percentages only.
    assert_eq!(value_from_int_or_percent(&pct("20%"), 5, true), Ok(1));
    assert_eq!(value_from_int_or_percent(&pct("20%"), 4, true), Ok(1));
    assert_eq!(value_from_int_or_percent(&pct("20%"), 4, false), Ok(0));
    assert!(value_from_int_or_percent(&pct("12.5%"), 10, true).is_err());
    assert!(value_from_int_or_percent(&pct("20"), 10, true).is_err());
}

// ---- TestCalculateDiffsWithExpectation ----

#[test]
fn increase_replicas_to_5_step_1_of_2() {
    let d = diffs(&cloneset(5, "0", "1", "0"), &[], REV_B, GATES_ON);
    assert_eq!(
        d,
        Diffs {
            scale_up_num: 5,
            scale_up_limit: 5,
            ..Diffs::default()
        }
    );
}

#[test]
fn increase_replicas_to_5_step_2_of_2() {
    let created: Vec<Pod> = (0..5)
        .map(|i| unready_pod(&format!("p{i}"), REV_B))
        .collect();
    assert_eq!(
        diffs(&cloneset(5, "0", "1", "0"), &created, REV_B, GATES_ON),
        Diffs::default()
    );
}

#[test]
fn specified_delete_1_pod_all_ready_step_1_of_3() {
    let mut all = pods("p", 5, REV_B);
    all[0] = specified(all[0].clone());
    let d = diffs(&cloneset(5, "0", "1", "0"), &all, REV_B, GATES_ON);
    assert_eq!(
        d,
        Diffs {
            delete_ready_limit: 1,
            ..Diffs::default()
        }
    );
}

#[test]
fn specified_delete_1_pod_all_ready_step_2_of_3() {
    let d = diffs(
        &cloneset(5, "0", "1", "0"),
        &pods("p", 4, REV_B),
        REV_B,
        GATES_ON,
    );
    assert_eq!(
        d,
        Diffs {
            scale_up_num: 1,
            scale_up_limit: 1,
            ..Diffs::default()
        }
    );
}

#[test]
fn specified_delete_1_pod_all_ready_step_3_of_3() {
    let mut all = pods("p", 4, REV_B);
    all.push(unready_pod("p4", REV_B));
    assert_eq!(
        diffs(&cloneset(5, "0", "1", "0"), &all, REV_B, GATES_ON),
        Diffs::default()
    );
}

/// Steps 1/6..6/6: two specified pods go one at a time with maxUnavailable 1.
#[test]
fn specified_delete_2_pods_steps_1_to_6() {
    let mut all = pods("p", 5, REV_B);
    all[0] = specified(all[0].clone());
    all[1] = specified(all[1].clone());
    let mut sim = Sim::new(
        cloneset(5, "0", "1", "0"),
        all,
        image_revisions(REV_B, REV_B),
    );
    let step1 = sim.reconcile();
    assert_eq!(step1.scale_diffs.delete_ready_limit, 1);
    assert_eq!(step1.delete.len(), 1, "step 1/6 deletes one");
    let step2 = sim.reconcile();
    assert_eq!(
        step2.create.iter().map(|c| c.count).sum::<i32>(),
        1,
        "step 2/6 replaces it"
    );
    let step3 = sim.reconcile();
    assert_eq!(
        step3.scale_diffs.delete_ready_limit, 0,
        "step 3/6: replacement not ready"
    );
    assert!(step3.delete.is_empty());
    sim.make_ready(None);
    let step4 = sim.reconcile();
    assert_eq!(step4.delete.len(), 1, "step 4/6 deletes the second");
    let step5 = sim.reconcile();
    assert_eq!(
        step5.create.iter().map(|c| c.count).sum::<i32>(),
        1,
        "step 5/6"
    );
    sim.make_ready(None);
    let step6 = sim.reconcile();
    assert!(!step6.modifies(), "step 6/6 steady");
    assert_eq!(sim.pods.len(), 5);
}

#[test]
fn update_partition_3_step_1_of_3() {
    let d = diffs(
        &cloneset(5, "3", "1", "0"),
        &pods("p", 5, REV_A),
        REV_A,
        GATES_ON,
    );
    assert_eq!(
        d,
        Diffs {
            update_num: 2,
            update_max_unavailable: 1,
            ..Diffs::default()
        }
    );
}

/// Steps 2/3 and 3/3 through the planner: one pod at a time (budget 1).
#[test]
fn update_partition_3_steps_2_and_3() {
    let mut sim = Sim::new(
        cloneset(5, "3", "1", "0"),
        pods("p", 5, REV_A),
        image_revisions(REV_A, REV_B),
    );
    let marked = sim.reconcile();
    assert_eq!(marked.mark_specified_delete.len(), 1);
    assert_eq!(sim.reconcile().delete.len(), 1);
    let created = sim.reconcile();
    assert_eq!(
        created.create,
        vec![kruise_core::cloneset::PodCreation {
            revision: REV_B.into(),
            count: 1
        }]
    );
    // The new pod is not ready: the budget is spent.
    let waiting = sim.reconcile();
    assert_eq!(waiting.update_diffs.map(|d| d.update_num), Some(1));
    assert!(!waiting.modifies());
}

#[test]
fn rollback_partition_4_step_1_of_3() {
    let mut all = pods("n", 4, REV_B);
    all.push(ready_pod("o0", REV_A));
    let d = diffs(&cloneset(5, "4", "1", "0"), &all, REV_A, GATES_ON);
    assert_eq!(
        d,
        Diffs {
            update_num: -3,
            update_max_unavailable: 1,
            ..Diffs::default()
        }
    );
    // The planner rolls one updated pod back (recreate: mark it).
    let plan = run(
        &cloneset(5, "4", "1", "0"),
        &all,
        &image_revisions(REV_A, REV_B),
        GATES_ON,
    );
    assert_eq!(plan.mark_specified_delete.len(), 1);
    assert!(plan.mark_specified_delete[0].starts_with('n'));
}

#[test]
fn rollback_partition_4_steps_2_and_3_recreate_on_current_revision() {
    let mut all = pods("n", 3, REV_B);
    all.push(ready_pod("o0", REV_A));
    let plan = run(
        &cloneset(5, "4", "1", "0"),
        &all,
        &image_revisions(REV_A, REV_B),
        GATES_ON,
    );
    assert_eq!(
        plan.create,
        vec![kruise_core::cloneset::PodCreation {
            revision: REV_A.into(),
            count: 1
        }]
    );
}

#[test]
fn disable_rollback_feature_gate() {
    let mut all = pods("n", 4, REV_B);
    all.push(ready_pod("o0", REV_A));
    let gates = FeatureGates {
        partition_rollback: false,
        ..GATES_ON
    };
    assert_eq!(
        diffs(&cloneset(5, "4", "1", "0"), &all, REV_A, gates),
        Diffs::default()
    );
}

#[test]
fn specified_delete_with_max_surge_step_1_of_4() {
    let mut all = pods("p", 5, REV_B);
    all[0] = specified(all[0].clone());
    let d = diffs(&cloneset(5, "0", "0", "1"), &all, REV_B, GATES_ON);
    assert_eq!(
        d,
        Diffs {
            scale_surge: 1,
            use_surge: 1,
            scale_up_num: 1,
            scale_up_limit: 1,
            ..Diffs::default()
        }
    );
}

/// Steps 2/4..4/4: the surge replacement must be Ready before the
/// specified pod goes.
#[test]
fn specified_delete_with_max_surge_steps_2_to_4() {
    let mut all = pods("p", 5, REV_B);
    all[0] = specified(all[0].clone());
    let mut sim = Sim::new(
        cloneset(5, "0", "0", "1"),
        all,
        image_revisions(REV_B, REV_B),
    );
    assert_eq!(sim.reconcile().create.len(), 1);
    let waiting = sim.reconcile();
    assert_eq!(
        waiting.scale_diffs,
        Diffs {
            scale_surge: 1,
            use_surge: 1,
            ..Diffs::default()
        }
    );
    assert!(!waiting.modifies(), "step 2/4: replacement not ready");
    sim.make_ready(None);
    let deleting = sim.reconcile();
    assert_eq!(deleting.scale_diffs.delete_ready_limit, 1);
    assert_eq!(deleting.delete, vec!["p0".to_owned()], "step 3/4");
    assert!(!sim.reconcile().modifies(), "step 4/4 steady");
}

#[test]
fn update_in_place_partition_3_with_max_surge_step_1_of_4() {
    let d = diffs(
        &cloneset(5, "3", "0", "1"),
        &pods("p", 5, REV_A),
        REV_A,
        GATES_ON,
    );
    assert_eq!(
        d,
        Diffs {
            update_surge: 2,
            use_surge: 1,
            scale_up_num: 1,
            scale_up_limit: 1,
            update_num: 2,
            update_max_unavailable: 0,
            ..Diffs::default()
        }
    );
}

/// The surge choreography of §10 phase 1, diff by diff (the columns are
/// checked by `cloneset_rollout_table`).
#[test]
fn update_recreate_partition_3_with_max_surge_steps_1_to_7() {
    let mut sim = Sim::new(
        cloneset(5, "3", "0", "20%"),
        pods("p", 5, REV_A),
        image_revisions(REV_A, REV_B),
    );
    let s1 = sim.reconcile();
    assert_eq!(
        (
            s1.scale_diffs.use_surge,
            s1.scale_diffs.scale_up_num,
            s1.scale_diffs.scale_up_num_old
        ),
        (1, 1, 0)
    );
    let s2 = sim.reconcile();
    let u2 = s2.update_diffs.unwrap();
    assert_eq!((u2.update_num, u2.update_max_unavailable), (1, 1));
    assert!(!s2.modifies());
    sim.make_ready(None);
    let s3 = sim.reconcile();
    assert_eq!(s3.mark_specified_delete.len(), 1);
    let s4 = sim.reconcile();
    assert_eq!(
        (
            s4.scale_diffs.scale_surge,
            s4.scale_diffs.scale_old_surge,
            s4.scale_diffs.delete_ready_limit
        ),
        (1, 1, 1)
    );
    assert_eq!(s4.delete, s3.mark_specified_delete);
    let s5 = sim.reconcile();
    assert_eq!(
        s5.create,
        vec![kruise_core::cloneset::PodCreation {
            revision: REV_B.into(),
            count: 1
        }]
    );
    let s6 = sim.reconcile();
    assert_eq!(
        (
            s6.scale_diffs.scale_down_num,
            s6.scale_diffs.scale_down_num_old,
            s6.scale_diffs.delete_ready_limit
        ),
        (1, 1, 0)
    );
    assert!(!s6.modifies());
    sim.make_ready(None);
    let s7 = sim.reconcile();
    assert_eq!(s7.delete.len(), 1);
    assert!(
        s7.delete[0].starts_with('p'),
        "the surplus pod comes from the old group"
    );
}

fn resolved(cs: &CloneSet) -> (i32, i32, i32) {
    let s = Settings::resolve(cs, &image_revisions(REV_A, REV_B), GATES_ON);
    (s.partition, s.max_surge, s.max_unavailable)
}

#[test]
fn update_recreate_partition_99pct_with_max_unavailable_3_max_surge_2() {
    let cs = cloneset(5, "99%", "3", "2");
    assert_eq!(resolved(&cs), (4, 2, 3));
    let d = diffs(&cs, &pods("p", 5, REV_A), REV_A, GATES_ON);
    assert_eq!(
        d,
        Diffs {
            update_surge: 1,
            use_surge: 1,
            scale_up_num: 1,
            scale_up_limit: 1,
            update_num: 1,
            update_max_unavailable: 3,
            ..Diffs::default()
        }
    );
}

#[test]
fn update_recreate_partition_99pct_with_max_unavailable_40pct_max_surge_30pct() {
    // maxSurge rounds up (1.5 → 2); with surge > 0 maxUnavailable rounds down.
    let cs = cloneset(5, "99%", "40%", "30%");
    assert_eq!(resolved(&cs), (4, 2, 2));
    assert_eq!(
        diffs(&cs, &pods("p", 5, REV_A), REV_A, GATES_ON).update_max_unavailable,
        2
    );
}

#[test]
fn update_recreate_partition_99pct_with_max_unavailable_30pct_max_surge_30pct() {
    let cs = cloneset(5, "99%", "30%", "30%");
    assert_eq!(resolved(&cs), (4, 2, 1));
    // Without surge the same 30% rounds up.
    assert_eq!(resolved(&cloneset(5, "99%", "30%", "0")), (4, 0, 2));
}

#[test]
fn revision_consistent_1_to_4() {
    let cs = cloneset(5, "0", "1", "0");
    assert_eq!(
        diffs(&cs, &pods("p", 5, REV_B), REV_B, GATES_ON),
        Diffs::default(),
        "1: steady"
    );
    // 2: a partition on a converged set does not roll anything back.
    assert_eq!(
        diffs(
            &cloneset(5, "3", "1", "0"),
            &pods("p", 5, REV_B),
            REV_B,
            GATES_ON
        ),
        Diffs::default()
    );
    assert_eq!(
        diffs(&cs, &pods("p", 4, REV_B), REV_B, GATES_ON),
        Diffs {
            scale_up_num: 1,
            scale_up_limit: 1,
            ..Diffs::default()
        },
        "3: missing pod"
    );
    assert_eq!(
        diffs(&cs, &pods("p", 6, REV_B), REV_B, GATES_ON),
        Diffs {
            scale_down_num: 1,
            delete_ready_limit: 2,
            ..Diffs::default()
        },
        "4: extra pod"
    );
}

#[test]
fn allow_to_update_when_fail_to_scale_out_normally() {
    let mut cs = cloneset(6, "0", "20%", "0");
    cs.spec.scale_strategy = Some(kruise_api::cloneset::CloneSetScaleStrategy {
        max_unavailable: Some(IntOrString::Int(1)),
        ..Default::default()
    });
    let mut all = pods("p", 4, REV_A);
    all.push(unready_pod("p4", REV_A));
    let plan = run(&cs, &all, &image_revisions(REV_A, REV_B), GATES_ON);
    assert_eq!(
        (
            plan.scale_diffs.scale_up_num,
            plan.scale_diffs.scale_up_limit
        ),
        (1, 0)
    );
    assert!(plan.scale_up_limited);
    assert_eq!(plan.stage, Stage::Update);
    assert_eq!(plan.mark_specified_delete, vec!["p4".to_owned()]);
}

#[test]
fn allow_to_update_when_fail_to_scale_in_normally() {
    let mut cs = cloneset(4, "0", "1", "0");
    cs.spec.min_ready_seconds = Some(9999);
    let plan = run(
        &cs,
        &pods("p", 5, REV_A),
        &image_revisions(REV_A, REV_B),
        GATES_ON,
    );
    assert_eq!(
        (
            plan.scale_diffs.scale_down_num,
            plan.scale_diffs.delete_ready_limit
        ),
        (1, 0)
    );
    assert!(plan.delete.is_empty());
    assert_eq!(plan.stage, Stage::Update);
    assert_eq!(plan.mark_specified_delete.len(), 2);
}

fn with_scale_max_unavailable(mut cs: CloneSet, value: &str) -> CloneSet {
    cs.spec.scale_strategy = Some(kruise_api::cloneset::CloneSetScaleStrategy {
        max_unavailable: Some(int_or_str(value)),
        ..Default::default()
    });
    cs
}

#[test]
fn increase_replicas_0_to_5_with_scale_max_unavailable_2() {
    let cs = with_scale_max_unavailable(cloneset(5, "0", "1", "0"), "2");
    let d = diffs(&cs, &[], REV_B, GATES_ON);
    assert_eq!((d.scale_up_num, d.scale_up_limit), (5, 2));
}

#[test]
fn increase_replicas_3_to_6_with_scale_max_unavailable_2_not_ready_pod_1() {
    let cs = with_scale_max_unavailable(cloneset(6, "0", "1", "0"), "2");
    let mut all = pods("p", 2, REV_B);
    all.push(unready_pod("p2", REV_B));
    let d = diffs(&cs, &all, REV_B, GATES_ON);
    assert_eq!((d.scale_up_num, d.scale_up_limit), (3, 1));
}

#[test]
fn increase_replicas_3_to_6_with_scale_max_unavailable_2_not_ready_pod_2() {
    let cs = with_scale_max_unavailable(cloneset(6, "0", "1", "0"), "2");
    let mut all = pods("p", 1, REV_B);
    all.push(unready_pod("p1", REV_B));
    all.push(unready_pod("p2", REV_B));
    let d = diffs(&cs, &all, REV_B, GATES_ON);
    assert_eq!((d.scale_up_num, d.scale_up_limit), (3, 0));
}

fn preparing_delete(mut pod: Pod) -> Pod {
    set_label(&mut pod, LABEL_LIFECYCLE_STATE, "PreparingDelete");
    pod
}

#[test]
fn scaling_exclude_preparing_delete_false() {
    let mut all = pods("p", 5, REV_B);
    all[0] = preparing_delete(all[0].clone());
    let d = diffs(&cloneset(5, "0", "1", "0"), &all, REV_B, GATES_ON);
    // The PreparingDelete pod still counts toward the total.
    assert_eq!(d.scale_up_num, 0);
}

#[test]
fn scaling_exclude_preparing_delete_true() {
    let mut cs = cloneset(5, "0", "1", "0");
    cs.metadata.labels =
        Some([(LABEL_EXCLUDE_PREPARING_DELETE.to_owned(), "true".to_owned())].into());
    let mut all = pods("p", 5, REV_B);
    all[0] = preparing_delete(all[0].clone());
    let d = diffs(&cs, &all, REV_B, GATES_ON);
    // Replaced right away; the unavailable PreparingDelete pod spends the
    // scale budget only when one is set.
    assert_eq!((d.scale_up_num, d.scale_up_limit), (1, 1));
}

#[test]
fn update_strategy_paused_true_surge_is_zero_and_nothing_updates() {
    let mut cs = cloneset(5, "0", "1", "1");
    cs.spec.update_strategy.as_mut().unwrap().paused = true;
    let d = diffs(&cs, &pods("p", 5, REV_A), REV_A, GATES_ON);
    assert_eq!(d.use_surge, 0);
    assert_eq!(d.scale_up_num, 0);
    let plan = run(
        &cs,
        &pods("p", 5, REV_A),
        &image_revisions(REV_A, REV_B),
        GATES_ON,
    );
    assert!(!plan.modifies());
}

#[test]
fn update_strategy_paused_true_still_scales() {
    let mut cs = cloneset(5, "0", "1", "1");
    cs.spec.update_strategy.as_mut().unwrap().paused = true;
    let plan = run(
        &cs,
        &pods("p", 3, REV_A),
        &image_revisions(REV_A, REV_B),
        GATES_ON,
    );
    assert_eq!(
        plan.create,
        vec![kruise_core::cloneset::PodCreation {
            revision: REV_B.into(),
            count: 2
        }]
    );
}

#[test]
fn preparing_update_as_update_when_scaling() {
    let mut all = pods("p", 5, REV_A);
    set_label(&mut all[0], LABEL_LIFECYCLE_STATE, "PreparingUpdate");
    let cs = cloneset(5, "4", "1", "0");
    let revisions = image_revisions(REV_A, REV_B);
    let settings = Settings::resolve(&cs, &revisions, GATES_ON);
    let refs: Vec<&Pod> = all.iter().collect();
    let scale = calculate_diffs(&settings, &refs, t0(), Pass::Scale);
    let update = calculate_diffs(&settings, &refs, t0(), Pass::Update);
    // Scaling sees the PreparingUpdate pod as already updated.
    assert_eq!(scale.update_num, 0);
    assert_eq!(update.update_num, 1);
}

/// Spec §6.2 (like upstream) counts a specified-delete pod in `toDelete`
/// and never in `unavailable`, so an unready pod marked for deletion does
/// not shrink `deleteReadyLimit`. Kept exactly; the availability property
/// allows this slack.
#[test]
fn unready_specified_pod_is_not_in_the_delete_budget() {
    let mut all = pods("p", 5, REV_A);
    all[0] = specified(all[0].clone());
    all[1] = specified(unready_pod("p1", REV_A));
    let plan = run(
        &cloneset(5, "0", "1", "0"),
        &all,
        &image_revisions(REV_A, REV_A),
        GATES_ON,
    );
    assert_eq!(plan.scale_diffs.delete_ready_limit, 1);
    assert_eq!(plan.delete, vec!["p0".to_owned(), "p1".to_owned()]);
}

/// Our one ordering deviation: pods already marked for deletion are taken
/// first by Update, so a held-back deletion does not get a second pod
/// marked for the same slot (which would dip below the partition).
#[test]
fn marked_pods_keep_their_update_slot() {
    let mut all = pods("p", 13, REV_A);
    all[5] = specified(all[5].clone());
    all[0] = unready_pod("p0", REV_A);
    // partition 12: one slot, held by p5 whose deletion the budget blocks.
    let plan = run(
        &cloneset(13, "12", "1", "0"),
        &all,
        &image_revisions(REV_A, REV_B),
        GATES_ON,
    );
    assert_eq!(plan.scale_diffs.delete_ready_limit, 0);
    assert!(plan.delete.is_empty());
    assert!(
        plan.mark_specified_delete.is_empty(),
        "{:?}",
        plan.mark_specified_delete
    );
}
