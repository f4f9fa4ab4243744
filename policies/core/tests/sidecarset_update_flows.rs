//! End-to-end flows of the SidecarSet update planner over simulated pods:
//! the seed flow (scs-demo upgraded to busybox:1.35.0), canary, partition,
//! paused, a change that is not image-only, and hot upgrades alternating
//! between the twins. The pods go through real injection first, and a tiny
//! kubelet restarts changed containers between rounds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sidecarset_update_common;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::SidecarSet;
use kruise_api::sidecarset::{PatchPolicy, SidecarSetPatchPodMetadata};
use kruise_core::sidecarset::update::{
    ChangeKind, ExpectedHash, HotUpgradeStep, PodKey, Stage, UPGRADABLE_CONDITION, UpdateInput,
    UpdatePlan, hot_upgrade_step, plan_update,
};
use kruise_core::sidecarset::{InjectionContext, inject, prepare_stored, stamp_hashes};
use sidecarset_update_common::{
    annotation, apply, container_status, image_id, kubelet_tick, now, spec_image,
};

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/examples");

fn example<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let text = std::fs::read_to_string(format!("{EXAMPLES}/{file}")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn stored(file: &str) -> SidecarSet {
    let mut set = prepare_stored(example(file));
    set.metadata.generation = Some(1);
    set.metadata.resource_version = Some("100".to_owned());
    set
}

/// Change the sidecar image as `kubectl patch` would: the webhook re-stamps
/// the hashes, the generation and resourceVersion move.
fn set_image(set: &mut SidecarSet, image: &str) {
    set.spec.containers[0].container.image = Some(image.to_owned());
    stamp_hashes(set);
    bump(set);
}

fn bump(set: &mut SidecarSet) {
    set.metadata.generation = Some(set.metadata.generation.unwrap_or(0) + 1);
    let version: u64 = set
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    set.metadata.resource_version = Some((version + 1).to_string());
}

fn app_pod(name: &str, app: &str, image: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"containers": [{"name": "app", "image": image}]},
    }))
    .unwrap()
}

/// Injected by the webhook, then scheduled and started by kubelet.
fn admitted(pod: &Pod, set: &SidecarSet) -> Pod {
    let ctx = InjectionContext {
        sidecar_sets: std::slice::from_ref(set),
        now: "2026-01-01T00:00:00Z",
        ..Default::default()
    };
    let mut pod = inject(pod, &ctx).unwrap().pod;
    pod.metadata.resource_version = Some("1".to_owned());
    let statuses = pod
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| {
            let image = c.image.clone().unwrap_or_default();
            ContainerStatus {
                name: c.name.clone(),
                image_id: image_id(&image),
                image,
                ready: true,
                ..Default::default()
            }
        })
        .collect();
    pod.status = Some(PodStatus {
        phase: Some("Running".to_owned()),
        conditions: Some(vec![PodCondition {
            type_: "Ready".to_owned(),
            status: "True".to_owned(),
            ..Default::default()
        }]),
        container_statuses: Some(statuses),
        ..Default::default()
    });
    pod
}

fn plan(set: &SidecarSet, pods: &[Pod], expectations: &[ExpectedHash]) -> UpdatePlan {
    let pods: Vec<&Pod> = pods.iter().collect();
    plan_update(&UpdateInput {
        sidecar_set: set,
        pods: &pods,
        namespace_labels: &BTreeMap::new(),
        latest_revision: "rev",
        collision_count: Some(0),
        expectations,
        now: now(),
    })
    .unwrap()
}

fn counts(plan: &UpdatePlan) -> [i32; 4] {
    let s = &plan.status;
    [
        s.matched_pods,
        s.updated_pods,
        s.ready_pods,
        s.updated_ready_pods,
    ]
}

/// Rounds of reconcile + kubelet until nothing changes; returns the status
/// of every round and checks the unavailable budget after every write.
fn converge(set: &SidecarSet, pods: &mut [Pod], max_unavailable: i32) -> Vec<[i32; 4]> {
    let mut history = Vec::new();
    for _ in 0..100 {
        let plan = plan(set, pods, &[]);
        history.push(counts(&plan));
        apply(&plan, pods);
        let after = plan_update_status(set, pods);
        assert!(
            after[0] - after[2] <= max_unavailable,
            "unavailable {} > {max_unavailable}: {after:?}",
            after[0] - after[2]
        );
        let settled = plan.pod_changes.is_empty()
            && pods.iter().all(|p| {
                let spec = &p.spec.as_ref().unwrap().containers;
                spec.iter().all(|c| {
                    let s = container_status(p, &c.name);
                    s.ready && Some(s.image.as_str()) == c.image.as_deref()
                })
            });
        if settled {
            return history;
        }
        for pod in pods.iter_mut() {
            kubelet_tick(pod);
        }
    }
    panic!("no convergence: {history:?}");
}

fn plan_update_status(set: &SidecarSet, pods: &[Pod]) -> [i32; 4] {
    counts(&plan(set, pods, &[]))
}

fn seed_pods(set: &SidecarSet) -> Vec<Pod> {
    let mut pods = vec![admitted(&example("pod-test-pod.yaml"), set)];
    for i in 0..3 {
        pods.push(admitted(
            &app_pod(&format!("nginx-{i}"), "nginx", "nginx:1.7.9"),
            set,
        ));
    }
    pods
}

#[test]
fn seed_flow_upgrades_every_sidecar_in_place_one_at_a_time() {
    let mut set = stored("sidecarset-scs-demo.yaml");
    let mut pods = seed_pods(&set);
    assert_eq!(pods[0].spec.as_ref().unwrap().containers.len(), 2);
    assert_eq!(counts(&plan(&set, &pods, &[])), [4, 4, 4, 4]);

    set_image(&mut set, "busybox:1.35.0");
    let first = plan(&set, &pods, &[]);
    assert_eq!(counts(&first), [4, 0, 4, 0]);
    assert_eq!(first.status.observed_generation, Some(2));
    assert!(first.status_changed);
    assert_eq!(first.pod_changes.len(), 1);
    let change = &first.pod_changes[0];
    assert_eq!(change.kind, ChangeKind::Upgrade);
    assert_eq!(
        change.images,
        BTreeMap::from([("sidecar1".to_owned(), "busybox:1.35.0".to_owned())])
    );
    let patch = change.strategic_merge_patch();
    assert_eq!(patch["spec"]["containers"][0]["name"], "sidecar1");
    assert_eq!(patch["spec"]["containers"][0]["image"], "busybox:1.35.0");
    assert_eq!(patch["metadata"]["resourceVersion"], "1");
    assert!(patch["metadata"]["annotations"]["kruise.io/sidecarset-hash"].is_string());

    let history = converge(&set, &mut pods, 1);
    assert_eq!(history.last(), Some(&[4, 4, 4, 4]));
    // UPDATED only grows, READY dips by at most one.
    for pair in history.windows(2) {
        assert!(pair[1][1] >= pair[0][1], "{history:?}");
    }
    assert!(history.iter().all(|c| c[2] >= 3), "{history:?}");
    for pod in &pods {
        assert_eq!(spec_image(pod, "sidecar1"), "busybox:1.35.0");
        assert_eq!(container_status(pod, "sidecar1").restart_count, 1);
        let app = &pod.spec.as_ref().unwrap().containers[1];
        assert!(app.image.as_deref().unwrap().starts_with("nginx:1.7.9"));
        assert_eq!(container_status(pod, &app.name).restart_count, 0);
        let records: serde_json::Value =
            serde_json::from_str(annotation(pod, "kruise.io/sidecarset-hash").unwrap()).unwrap();
        assert_eq!(
            records["scs-demo"]["hash"],
            set.metadata.annotations.as_ref().unwrap()["kruise.io/sidecarset-hash"]
        );
        assert_eq!(records["scs-demo"]["controllerRevision"], "rev");
        assert_eq!(
            records["scs-demo"]["sidecarList"],
            serde_json::json!(["sidecar1"])
        );
        let state: serde_json::Value = serde_json::from_str(
            annotation(pod, "kruise.io/sidecarset-inplace-update-state").unwrap(),
        )
        .unwrap();
        assert_eq!(
            state["scs-demo"]["lastContainerStatuses"]["sidecar1"]["imageID"],
            image_id("busybox")
        );
    }
}

#[test]
fn max_unavailable_percent_and_larger_budgets() {
    let mut set = stored("sidecarset-scs-demo.yaml");
    let mut pods = seed_pods(&set);
    set.spec.update_strategy.as_mut().unwrap().max_unavailable =
        Some(IntOrString::String("50%".to_owned()));
    set_image(&mut set, "busybox:1.35.0");
    assert_eq!(plan(&set, &pods, &[]).pod_changes.len(), 2);
    converge(&set, &mut pods, 2);
    assert!(
        pods.iter()
            .all(|p| spec_image(p, "sidecar1") == "busybox:1.35.0")
    );
}

#[test]
fn canary_selector_upgrades_only_labelled_pods() {
    let mut set = stored("sidecarset-canary.yaml");
    set_image(&mut set, "busybox:1.34.0");
    let mut pods: Vec<Pod> = (0..4)
        .map(|i| {
            let mut pod = app_pod(&format!("nginx-{i}"), "nginx", "nginx:1.7.9");
            if i % 2 == 0 {
                pod.metadata
                    .labels
                    .as_mut()
                    .unwrap()
                    .insert("canary.release".into(), "true".into());
            }
            admitted(&pod, &set)
        })
        .collect();
    set_image(&mut set, "busybox:1.35.0");
    let history = converge(&set, &mut pods, 1);
    assert_eq!(history.last(), Some(&[4, 2, 4, 2]));
    for (i, pod) in pods.iter().enumerate() {
        let expected = if i % 2 == 0 {
            "busybox:1.35.0"
        } else {
            "busybox:1.34.0"
        };
        assert_eq!(spec_image(pod, "sidecar1"), expected, "nginx-{i}");
    }
}

#[test]
fn partition_keeps_pods_on_the_old_version() {
    for (partition, kept) in [
        (IntOrString::Int(2), 2),
        (IntOrString::String("40%".to_owned()), 2),
        (IntOrString::String("100%".to_owned()), 5),
        (IntOrString::Int(0), 0),
    ] {
        let mut set = stored("sidecarset-scs-demo.yaml");
        let mut pods: Vec<Pod> = (0..5)
            .map(|i| admitted(&app_pod(&format!("p-{i}"), "nginx", "nginx"), &set))
            .collect();
        let strategy = set.spec.update_strategy.as_mut().unwrap();
        strategy.partition = Some(partition.clone());
        strategy.max_unavailable = Some(IntOrString::Int(5));
        set_image(&mut set, "busybox:1.35.0");
        converge(&set, &mut pods, 5);
        let old = pods
            .iter()
            .filter(|p| spec_image(p, "sidecar1") == "busybox")
            .count();
        assert_eq!(old, kept, "{partition:?}");
    }
}

#[test]
fn paused_leaves_pods_until_resumed() {
    let mut set = stored("sidecarset-scs-demo.yaml");
    let mut pods = seed_pods(&set);
    set.spec.update_strategy.as_mut().unwrap().paused = true;
    set_image(&mut set, "busybox:1.35.0");
    let paused = plan(&set, &pods, &[]);
    assert_eq!(paused.stage, Stage::Paused);
    assert!(paused.pod_changes.is_empty());
    assert_eq!(counts(&paused), [4, 0, 4, 0]);

    set.spec.update_strategy.as_mut().unwrap().paused = false;
    bump(&mut set);
    converge(&set, &mut pods, 1);
    assert!(
        pods.iter()
            .all(|p| spec_image(p, "sidecar1") == "busybox:1.35.0")
    );
}

#[test]
fn a_change_beyond_the_image_leaves_pods_alone_as_not_upgradable() {
    let mut set = stored("sidecarset-scs-demo.yaml");
    let pods = seed_pods(&set);
    set.spec.containers[0].container.command = Some(vec!["sleep".into(), "1d".into()]);
    set.spec.containers[0].container.image = Some("busybox:1.35.0".to_owned());
    stamp_hashes(&mut set);
    bump(&mut set);
    let plan = plan(&set, &pods, &[]);
    assert_eq!(counts(&plan), [4, 0, 4, 0]);
    assert!(plan.pod_changes.is_empty());
    assert_eq!(plan.not_upgradable.len(), 4);
    assert_eq!(plan.events[0].reason, "NotUpgradablePods");
    assert!(
        plan.events[0]
            .message
            .contains("detected 4 not upgradable pod(s)")
    );
    for change in &plan.condition_changes {
        assert_eq!(change.condition.type_, UPGRADABLE_CONDITION);
        assert_eq!(change.condition.status, "False");
        assert_eq!(
            change.condition.message.as_deref(),
            Some(r#"{"scs-demo":false}"#)
        );
        assert_eq!(
            change.status_patch()["status"]["conditions"][0]["reason"],
            "UpdateImmutableField"
        );
    }
}

#[test]
fn patch_pod_metadata_is_applied_again_on_upgrade() {
    let mut set = stored("sidecarset-scs-demo.yaml");
    let mut pods = seed_pods(&set);
    pods[0]
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("retained".into(), "pod".into());
    set.spec.patch_pod_metadata = vec![
        SidecarSetPatchPodMetadata {
            annotations: BTreeMap::from([
                ("retained".to_owned(), "set".to_owned()),
                ("added".to_owned(), "set".to_owned()),
            ]),
            patch_policy: Some(PatchPolicy::Retain),
        },
        SidecarSetPatchPodMetadata {
            annotations: BTreeMap::from([("overwritten".to_owned(), "v2".to_owned())]),
            patch_policy: Some(PatchPolicy::Overwrite),
        },
    ];
    // patchPodMetadata alone does not change the hash: nothing to do.
    assert_eq!(plan(&set, &pods, &[]).stage, Stage::Finished);

    set.spec.update_strategy.as_mut().unwrap().max_unavailable = Some(IntOrString::Int(4));
    set_image(&mut set, "busybox:1.35.0");
    let upgrade = plan(&set, &pods, &[]);
    apply(&upgrade, &mut pods);
    assert_eq!(annotation(&pods[0], "retained"), Some("pod"));
    assert_eq!(annotation(&pods[0], "added"), Some("set"));
    assert_eq!(annotation(&pods[0], "overwritten"), Some("v2"));
    assert_eq!(annotation(&pods[1], "retained"), Some("set"));
}

#[test]
fn unobserved_upgrades_hold_the_next_round() {
    let mut set = stored("sidecarset-scs-demo.yaml");
    let pods = seed_pods(&set);
    set_image(&mut set, "busybox:1.35.0");
    let first = plan(&set, &pods, &[]);
    // The cache still shows the pod before the write.
    let held = plan(&set, &pods, &first.expectations);
    assert_eq!(held.stage, Stage::WaitForCache);
    assert_eq!(held.requeue_after_seconds, Some(1));
    assert!(held.pod_changes.is_empty());
    let mut seen = pods.clone();
    apply(&first, &mut seen);
    assert_eq!(plan(&set, &seen, &first.expectations).stage, Stage::Upgrade);
    // A pod that went away needs no waiting.
    let gone = ExpectedHash {
        pod: PodKey {
            namespace: "default".into(),
            name: "gone".into(),
        },
        hash: "x".into(),
    };
    assert_ne!(plan(&set, &pods, &[gone]).stage, Stage::WaitForCache);
}

#[test]
fn not_update_still_reports_status() {
    let mut set = stored("sidecarset-scs-demo.yaml");
    let pods = seed_pods(&set);
    set.spec.update_strategy.as_mut().unwrap().type_ =
        Some(kruise_api::sidecarset::SidecarSetUpdateStrategyType::NotUpdate);
    set_image(&mut set, "busybox:1.35.0");
    let plan = plan(&set, &pods, &[]);
    assert_eq!(plan.stage, Stage::NotUpdate);
    assert_eq!(counts(&plan), [4, 0, 4, 0]);
    assert!(plan.pod_changes.is_empty());
}

#[test]
fn pods_without_the_injected_list_or_sidecars_are_invisible() {
    let set = stored("sidecarset-scs-demo.yaml");
    let mut pods = seed_pods(&set);
    pods[0]
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove("kruise.io/sidecarset-injected-list");
    pods[1]
        .spec
        .as_mut()
        .unwrap()
        .containers
        .retain(|c| c.name != "sidecar1");
    pods[2].metadata.labels = None;
    assert_eq!(counts(&plan(&set, &pods, &[])), [1, 1, 1, 1]);
}

fn twins_ready_and_serving(pod: &Pod, empty: &str) -> bool {
    ["sidecar-1", "sidecar-2"].iter().any(|twin| {
        let status = container_status(pod, twin);
        status.ready && status.image != empty
    })
}

fn working(pod: &Pod) -> String {
    let map: BTreeMap<String, String> = serde_json::from_str(
        annotation(pod, "kruise.io/sidecarset-working-hotupgrade-container").unwrap(),
    )
    .unwrap();
    map["sidecar"].clone()
}

#[test]
fn hot_upgrades_alternate_twins_and_never_leave_none_ready() {
    let mut set = stored("sidecarset-hotupgrade.yaml");
    set.spec.update_strategy.as_mut().unwrap().max_unavailable = Some(IntOrString::Int(2));
    let empty = "openkruise/hotupgrade-sample:empty";
    let mut pods: Vec<Pod> = (0..3)
        .map(|i| admitted(&app_pod(&format!("hot-{i}"), "hotupgrade", "nginx"), &set))
        .collect();
    assert!(pods.iter().all(|p| working(p) == "sidecar-1"));
    assert_eq!(
        hot_upgrade_step(&set, "sidecar", &pods[0]),
        Some(HotUpgradeStep::Settled)
    );

    let mut expected_working = "sidecar-1";
    for version in ["sidecarv2", "sidecarv3", "sidecarv4", "sidecarv5"] {
        let image = format!("openkruise/hotupgrade-sample:{version}");
        set_image(&mut set, &image);
        let idle = if expected_working == "sidecar-1" {
            "sidecar-2"
        } else {
            "sidecar-1"
        };
        assert_eq!(
            hot_upgrade_step(&set, "sidecar", &pods[0]),
            Some(HotUpgradeStep::Upgrade {
                twin: idle.to_owned(),
                replaces: expected_working.to_owned(),
            })
        );
        expected_working = idle;
        let mut rounds = 0;
        loop {
            rounds += 1;
            assert!(rounds < 50, "no convergence for {version}");
            let plan = plan(&set, &pods, &[]);
            for change in &plan.pod_changes {
                if change.kind == ChangeKind::ResetHotUpgrade {
                    let pod = pods
                        .iter()
                        .find(|p| p.metadata.name.as_deref() == Some(&change.pod.name))
                        .unwrap();
                    assert!(matches!(
                        hot_upgrade_step(&set, "sidecar", pod),
                        Some(HotUpgradeStep::Reset { .. })
                    ));
                }
            }
            apply(&plan, &mut pods);
            for pod in &pods {
                assert!(twins_ready_and_serving(pod, empty), "{version}: {pod:?}");
            }
            if plan.pod_changes.is_empty() && counts(&plan) == [3, 3, 3, 3] {
                break;
            }
            for pod in &mut pods {
                kubelet_tick(pod);
                assert!(twins_ready_and_serving(pod, empty), "{version}: {pod:?}");
            }
        }
        for pod in &pods {
            assert_eq!(working(pod), expected_working, "{version}");
            assert_eq!(spec_image(pod, expected_working), image);
            let other = if expected_working == "sidecar-1" {
                "sidecar-2"
            } else {
                "sidecar-1"
            };
            assert_eq!(spec_image(pod, other), empty);
            assert_eq!(
                annotation(
                    pod,
                    &format!("version.sidecarset.kruise.io/{expected_working}")
                ),
                set.metadata.resource_version.as_deref()
            );
            assert_eq!(
                annotation(pod, &format!("version.sidecarset.kruise.io/{other}")),
                Some("0")
            );
            assert_eq!(
                hot_upgrade_step(&set, "sidecar", pod),
                Some(HotUpgradeStep::Settled)
            );
            assert_eq!(container_status(pod, "app").restart_count, 0);
        }
    }
}

#[test]
fn hot_upgrade_waits_for_the_new_twin_before_reset() {
    let mut set = stored("sidecarset-hotupgrade.yaml");
    let mut pods = vec![admitted(&app_pod("hot-0", "hotupgrade", "nginx"), &set)];
    set_image(&mut set, "openkruise/hotupgrade-sample:sidecarv2");
    let plan1 = plan(&set, &pods, &[]);
    apply(&plan1, &mut pods);
    assert_eq!(
        hot_upgrade_step(&set, "sidecar", &pods[0]),
        Some(HotUpgradeStep::Wait)
    );
    // Kubelet restarted the new twin but it is not ready yet.
    kubelet_tick(&mut pods[0]);
    assert_eq!(
        hot_upgrade_step(&set, "sidecar", &pods[0]),
        Some(HotUpgradeStep::Wait)
    );
    assert!(plan(&set, &pods, &[]).pod_changes.is_empty());
    kubelet_tick(&mut pods[0]);
    assert_eq!(
        hot_upgrade_step(&set, "sidecar", &pods[0]),
        Some(HotUpgradeStep::Reset {
            twin: "sidecar-1".to_owned()
        })
    );
    let reset = plan(&set, &pods, &[]);
    assert_eq!(reset.stage, Stage::ResetHotUpgrade);
    assert_eq!(
        reset.pod_changes[0].images,
        BTreeMap::from([(
            "sidecar-1".to_owned(),
            "openkruise/hotupgrade-sample:empty".to_owned()
        )])
    );
}

/// Reconcile and tick kubelet until the pods settle, checking after every
/// step that some twin of every pod is ready and not on the empty image.
fn settle_hot(set: &SidecarSet, pods: &mut [Pod], empty: &str) {
    for _ in 0..50 {
        let plan = plan(set, pods, &[]);
        apply(&plan, pods);
        assert!(pods.iter().all(|p| twins_ready_and_serving(p, empty)));
        if plan.pod_changes.is_empty() && plan.stage == Stage::Finished {
            let [matched, updated, ready, _] = counts(&plan);
            if matched == updated && matched == ready {
                return;
            }
        }
        for pod in pods.iter_mut() {
            kubelet_tick(pod);
            assert!(twins_ready_and_serving(pod, empty));
        }
    }
    panic!("hot upgrade did not settle");
}

#[test]
fn hot_upgrade_changed_again_mid_flight_settles_on_the_newest_image() {
    let empty = "openkruise/hotupgrade-sample:empty";
    for (second, label) in [("sidecarv3", "newer"), ("sidecarv1", "rollback")] {
        let mut set = stored("sidecarset-hotupgrade.yaml");
        let mut pods = vec![admitted(&app_pod("hot-0", "hotupgrade", "nginx"), &set)];
        set_image(&mut set, "openkruise/hotupgrade-sample:sidecarv2");
        let first = plan(&set, &pods, &[]);
        apply(&first, &mut pods);
        kubelet_tick(&mut pods[0]);
        // The SidecarSet changes again before the new twin is ready.
        let image = format!("openkruise/hotupgrade-sample:{second}");
        set_image(&mut set, &image);
        settle_hot(&set, &mut pods, empty);
        let working = working(&pods[0]);
        assert_eq!(spec_image(&pods[0], &working), image, "{label}");
        let other = if working == "sidecar-1" {
            "sidecar-2"
        } else {
            "sidecar-1"
        };
        assert_eq!(spec_image(&pods[0], other), empty, "{label}");
    }
}

#[test]
fn legacy_hash_records_are_upgraded_to_the_current_form() {
    let mut set = stored("sidecarset-scs-demo.yaml");
    let mut pods = vec![admitted(&example("pod-test-pod.yaml"), &set)];
    let without =
        set.metadata.annotations.as_ref().unwrap()["kruise.io/sidecarset-hash-without-image"]
            .clone();
    let annotations = pods[0].metadata.annotations.as_mut().unwrap();
    annotations.insert(
        "kruise.io/sidecarset-hash".into(),
        r#"{"scs-demo":"old-hash","other":"x"}"#.into(),
    );
    annotations.insert(
        "kruise.io/sidecarset-hash-without-image".into(),
        format!(r#"{{"scs-demo":"{without}"}}"#),
    );
    set_image(&mut set, "busybox:1.35.0");
    let plan = plan(&set, &pods, &[]);
    assert_eq!(plan.pod_changes.len(), 1);
    apply(&plan, &mut pods);
    let records: serde_json::Value =
        serde_json::from_str(annotation(&pods[0], "kruise.io/sidecarset-hash").unwrap()).unwrap();
    assert_eq!(
        records["scs-demo"]["hash"],
        set.metadata.annotations.as_ref().unwrap()["kruise.io/sidecarset-hash"]
    );
    assert_eq!(
        records["scs-demo"]["updateTimestamp"],
        "2026-01-02T03:04:05Z"
    );
    assert_eq!(records["other"]["hash"], "x");
    // The without-image record is only written at injection.
    assert_eq!(
        annotation(&pods[0], "kruise.io/sidecarset-hash-without-image"),
        Some(format!(r#"{{"scs-demo":"{without}"}}"#).as_str())
    );
}
