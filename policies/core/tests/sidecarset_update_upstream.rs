//! The upstream unit cases listed at the end of spec 02, as tests of the
//! pure planner (`pkg/controller/sidecarset/*_test.go`,
//! `pkg/control/sidecarcontrol/util_test.go`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::unnecessary_wraps)]

mod sidecarset_update_common;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{EnvVar, Pod, VolumeMount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::SidecarSet;
use kruise_api::common::{
    UpdatePriorityOrderTerm, UpdatePriorityStrategy, UpdatePriorityWeightTerm, UpdateScatterTerm,
};
use kruise_api::sidecarset::SidecarSetUpdateStrategyType;
use kruise_core::sidecarset::HASH_ANNOTATION;
use kruise_core::sidecarset::update::{
    EVENT_NOT_UPGRADABLE_PODS, INPLACE_UPDATE_STATE_ANNOTATION, Stage, UPGRADABLE_CONDITION,
    expand_scatter_terms, is_sidecar_container_update_completed, matching_pods, next_upgrade_pods,
    pod_update_enqueue, sidecar_sets_of_pod,
};
use sidecarset_update_common::*;

const V1: &str = "test-image:v1";
const V2: &str = "test-image:v2";

fn factory_sidecar_set() -> SidecarSet {
    sidecar_set(vec![cold("test-sidecar", V2)], "bbb", "without-aaa")
}

/// `factoryPods(count, upgraded, upgradedAndReady)`: pod-i created at
/// second i; the first `upgraded` carry the v2 spec image and hash `bbb`
/// (kubelet not done yet), the first `ready` of those run v2.
fn factory_pods(count: usize, upgraded: usize, ready: usize) -> Vec<Pod> {
    (0..count)
        .map(|i| {
            let mut pod = cold_pod(&format!("pod-{i}"), V1, "aaa");
            set_created(&mut pod, 1_700_000_000 + i64::try_from(i).unwrap());
            if i < upgraded {
                let spec = pod.spec.as_mut().unwrap();
                spec.containers[1].image = Some(V2.to_owned());
                pod.metadata.annotations.as_mut().unwrap().insert(
                    HASH_ANNOTATION.to_owned(),
                    format!(r#"{{"{SET}":{{"hash":"bbb","sidecarList":["test-sidecar"]}}}}"#),
                );
                record_in_place(&mut pod, "bbb", "test-sidecar", V1);
            }
            if i < ready {
                let status = &mut pod
                    .status
                    .as_mut()
                    .unwrap()
                    .container_statuses
                    .as_mut()
                    .unwrap()[1];
                V2.clone_into(&mut status.image);
                status.image_id = image_id(V2);
            }
            pod
        })
        .collect()
}

fn next(set: &SidecarSet, pods: &[Pod]) -> (Vec<String>, usize) {
    let refs: Vec<&Pod> = pods.iter().collect();
    let next = next_upgrade_pods(set, &refs).unwrap();
    let names = next
        .upgrade
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    (names, next.not_upgradable.len())
}

fn int(n: i32) -> Option<IntOrString> {
    Some(IntOrString::Int(n))
}

fn percent(text: &str) -> Option<IntOrString> {
    Some(IntOrString::String(text.to_owned()))
}

// sidecarset_strategy_test.go::TestGetNextUpgradePods
#[test]
#[allow(clippy::too_many_lines)] // the upstream table, one row per case
fn get_next_upgrade_pods_counts() {
    struct Case {
        name: &'static str,
        pods: (usize, usize, usize),
        max_unavailable: Option<IntOrString>,
        partition: Option<IntOrString>,
        canary: bool,
        not_upgradable_set: bool,
        expected: (usize, usize),
    }
    let case = |name, pods, max_unavailable, partition, expected| Case {
        name,
        pods,
        max_unavailable,
        partition,
        canary: false,
        not_upgradable_set: false,
        expected,
    };
    let cases = [
        case(
            "maxUnavailable 10, 100/30/26",
            (100, 30, 26),
            int(10),
            None,
            (6, 0),
        ),
        case(
            "maxUnavailable 10%, 1000/300/260",
            (1000, 300, 260),
            percent("10%"),
            None,
            (60, 0),
        ),
        case(
            "maxUnavailable 5%, 1000/300/250",
            (1000, 300, 250),
            percent("5%"),
            None,
            (0, 0),
        ),
        case(
            "maxUnavailable 100, 100/30/27",
            (100, 30, 27),
            int(100),
            None,
            (70, 0),
        ),
        case(
            "partition 180",
            (1000, 800, 760),
            int(100),
            int(180),
            (20, 0),
        ),
        case(
            "partition 100",
            (1000, 800, 760),
            int(100),
            int(100),
            (60, 0),
        ),
        case(
            "partition 18%",
            (1000, 800, 760),
            int(100),
            percent("18%"),
            (20, 0),
        ),
        case(
            "partition 10%",
            (1000, 800, 760),
            int(100),
            percent("10%"),
            (60, 0),
        ),
        Case {
            canary: true,
            ..case("selector app=test", (1000, 0, 0), int(100), None, (30, 0))
        },
        Case {
            not_upgradable_set: true,
            ..case("not upgradable", (100, 0, 0), int(100), None, (0, 100))
        },
        case(
            "maxUnavailable 5% of 5",
            (5, 0, 0),
            percent("5%"),
            None,
            (1, 0),
        ),
        case(
            "partition 99% of 5",
            (5, 0, 0),
            int(5),
            percent("99%"),
            (1, 0),
        ),
        case(
            "partition 1% of 5",
            (5, 0, 0),
            int(5),
            percent("1%"),
            (4, 0),
        ),
    ];
    for (seed, case) in cases.into_iter().enumerate() {
        let (count, upgraded, ready) = case.pods;
        let mut pods = factory_pods(count, upgraded, ready);
        let mut set = factory_sidecar_set();
        if case.not_upgradable_set {
            set = sidecar_set(vec![cold("test-sidecar", V2)], "bbb", "without-bbb");
        }
        strategy(&mut set).max_unavailable = case.max_unavailable;
        strategy(&mut set).partition = case.partition;
        if case.canary {
            for pod in &mut pods[..30] {
                pod.metadata
                    .labels
                    .as_mut()
                    .unwrap()
                    .insert("app".into(), "test".into());
            }
            strategy(&mut set).selector = Some(LabelSelector {
                match_labels: Some(map(&[("app", "test")])),
                ..Default::default()
            });
        }
        shuffle(&mut pods, seed as u64);
        let (upgrade, not_upgradable) = next(&set, &pods);
        assert_eq!(
            (upgrade.len(), not_upgradable),
            case.expected,
            "{}",
            case.name
        );
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

// sidecarset_strategy_test.go::TestSortNextUpgradePods
#[test]
fn sort_next_upgrade_pods_newest_first() {
    let mut pods = factory_pods(20, 10, 5);
    shuffle(&mut pods, 7);
    let mut set = factory_sidecar_set();
    strategy(&mut set).max_unavailable = int(10);
    assert_eq!(
        next(&set, &pods).0,
        names(&["pod-19", "pod-18", "pod-17", "pod-16", "pod-15"])
    );
}

#[test]
fn sort_next_upgrade_pods_not_ready_first_and_free() {
    let mut pods = factory_pods(20, 10, 5);
    set_ready(&mut pods[10], false);
    set_ready(&mut pods[13], false);
    shuffle(&mut pods, 11);
    let mut set = factory_sidecar_set();
    strategy(&mut set).max_unavailable = int(10);
    assert_eq!(
        next(&set, &pods).0,
        names(&[
            "pod-13", "pod-10", "pod-19", "pod-18", "pod-17", "pod-16", "pod-15"
        ])
    );
}

#[test]
fn sort_next_upgrade_pods_weight_priority() {
    let mut pods = factory_pods(20, 10, 2);
    pods[15]
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("test-key".into(), "bar".into());
    pods[16]
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("test-key".into(), "foo".into());
    shuffle(&mut pods, 3);
    let mut set = factory_sidecar_set();
    strategy(&mut set).max_unavailable = int(10);
    let term = |weight, value: &str| UpdatePriorityWeightTerm {
        weight,
        match_selector: LabelSelector {
            match_labels: Some(map(&[("test-key", value)])),
            ..Default::default()
        },
    };
    strategy(&mut set).priority_strategy = Some(UpdatePriorityStrategy {
        weight_priority: vec![term(50, "foo"), term(30, "bar")],
        order_priority: Vec::new(),
    });
    assert_eq!(next(&set, &pods).0, names(&["pod-16", "pod-15"]));
}

#[test]
fn sort_next_upgrade_pods_order_priority() {
    let mut pods = factory_pods(20, 10, 2);
    for pod in &mut pods {
        pod.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("key1".into(), "5".into());
    }
    pods[17]
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("key1".into(), "10".into());
    pods[18]
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("key1".into(), "20".into());
    shuffle(&mut pods, 5);
    let mut set = factory_sidecar_set();
    strategy(&mut set).max_unavailable = int(10);
    strategy(&mut set).priority_strategy = Some(UpdatePriorityStrategy {
        weight_priority: Vec::new(),
        order_priority: vec![UpdatePriorityOrderTerm {
            ordered_key: "key1".to_owned(),
        }],
    });
    assert_eq!(next(&set, &pods).0, names(&["pod-18", "pod-17"]));
}

fn term(key: &str, value: &str) -> UpdateScatterTerm {
    UpdateScatterTerm {
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

// sidecarset_strategy_test.go::TestParseUpdateScatterTerms
#[test]
fn parse_update_scatter_terms() {
    let pods = factory_pods(100, 0, 0);
    let refs: Vec<&Pod> = pods.iter().collect();
    let plain = vec![
        term("key-1", "value-1"),
        term("key-2", "value-2"),
        term("key-3", "value-3"),
    ];
    assert_eq!(expand_scatter_terms(&plain, &refs), plain);

    let mut pods = factory_pods(100, 0, 0);
    for (i, value) in [
        "value-4-0",
        "value-4-1",
        "value-4-2",
        "value-4",
        "value-4",
        "value-4",
    ]
    .into_iter()
    .enumerate()
    {
        pods[i]
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("key-4".into(), value.into());
    }
    let refs: Vec<&Pod> = pods.iter().collect();
    let mut with_star = plain.clone();
    with_star.push(term("key-4", "*"));
    let mut expected = plain;
    expected.extend([
        term("key-4", "value-4-0"),
        term("key-4", "value-4-1"),
        term("key-4", "value-4-2"),
        term("key-4", "value-4"),
    ]);
    assert_eq!(expand_scatter_terms(&with_star, &refs), expected);
}

#[test]
fn scatter_spreads_the_upgrade_batch() {
    let mut pods = factory_pods(12, 0, 0);
    for pod in &mut pods[8..] {
        pod.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("zone".into(), "a".into());
    }
    let mut set = factory_sidecar_set();
    strategy(&mut set).max_unavailable = int(12);
    strategy(&mut set).scatter_strategy = vec![term("zone", "*")];
    let (order, _) = next(&set, &pods);
    let zone_a: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, name)| ["pod-8", "pod-9", "pod-10", "pod-11"].contains(&name.as_str()))
        .map(|(i, _)| i)
        .collect();
    // Without scatter they would be the first four (newest first).
    assert_eq!(zone_a, vec![0, 3, 6, 9], "{order:?}");
}

fn demo_pod(name: &str) -> Pod {
    cold_pod(name, V1, "aaa")
}

fn image_after_round(set: &SidecarSet, mut pods: Vec<Pod>) -> (Stage, String) {
    let plan = round(set, &pods);
    apply(&plan, &mut pods);
    (plan.stage, spec_image(&pods[0], "test-sidecar").to_owned())
}

// sidecarset_controller_test.go::TestUpdateWhenUseNotUpdateStrategy
#[test]
fn not_update_strategy_never_changes_the_image() {
    let mut set = factory_sidecar_set();
    strategy(&mut set).type_ = Some(SidecarSetUpdateStrategyType::NotUpdate);
    assert_eq!(
        image_after_round(&set, vec![demo_pod("p")]),
        (Stage::NotUpdate, V1.to_owned())
    );
}

// ::TestUpdateWhenSidecarSetPaused
#[test]
fn paused_never_changes_the_image() {
    let mut set = factory_sidecar_set();
    strategy(&mut set).paused = true;
    assert_eq!(
        image_after_round(&set, vec![demo_pod("p")]),
        (Stage::Paused, V1.to_owned())
    );
}

// ::TestUpdateWhenMaxUnavailableNotZero
#[test]
fn a_pending_pod_is_upgraded() {
    let set = factory_sidecar_set();
    let mut pod = demo_pod("p");
    pod.status.as_mut().unwrap().phase = Some("Pending".to_owned());
    assert_eq!(
        image_after_round(&set, vec![pod]),
        (Stage::Upgrade, V2.to_owned())
    );
}

// ::TestUpdateWhenPartitionFinished
#[test]
fn partition_one_of_one_keeps_the_pod() {
    let mut set = factory_sidecar_set();
    strategy(&mut set).partition = int(1);
    assert_eq!(
        image_after_round(&set, vec![demo_pod("p")]),
        (Stage::Upgrade, V1.to_owned())
    );
}

// ::TestRemoveSidecarSet
#[test]
fn an_updated_pod_keeps_its_hash_annotation() {
    let set = factory_sidecar_set();
    let mut pods = vec![cold_pod("p", V1, "bbb")];
    let before = annotation(&pods[0], HASH_ANNOTATION).unwrap().to_owned();
    let plan = round(&set, &pods);
    assert_eq!(plan.stage, Stage::Finished);
    apply(&plan, &mut pods);
    assert_eq!(annotation(&pods[0], HASH_ANNOTATION).unwrap(), before);
}

// sidecarset_processor_test.go::TestUpdateColdUpgradeSidecar
#[test]
fn cold_upgrade_one_pod_at_a_time() {
    let set = factory_sidecar_set();
    let mut pods: Vec<Pod> = ["test-pod-1", "test-pod-2"]
        .into_iter()
        .map(|name| {
            let mut pod = demo_pod(name);
            let sidecar = &mut pod.spec.as_mut().unwrap().containers[1];
            sidecar.env = Some(vec![EnvVar {
                name: "nginx-env".to_owned(),
                value: Some("nginx-value".to_owned()),
                ..Default::default()
            }]);
            sidecar.volume_mounts = Some(vec![VolumeMount {
                mount_path: "/data/nginx".to_owned(),
                ..Default::default()
            }]);
            pod
        })
        .collect();
    let images = |pods: &[Pod]| {
        pods.iter()
            .map(|p| spec_image(p, "test-sidecar").to_owned())
            .collect::<Vec<_>>()
    };

    let plan = round(&set, &pods);
    assert_eq!(counts(&plan), [2, 0, 2, 0]);
    apply(&plan, &mut pods);
    assert_eq!(images(&pods), [V2, V1]);

    // Kubelet has not restarted test-pod-1's sidecar yet.
    let plan = round(&set, &pods);
    assert_eq!(counts(&plan), [2, 1, 1, 0]);
    assert!(plan.pod_changes.is_empty());

    restart(&mut pods[0], "test-sidecar");
    let plan = round(&set, &pods);
    assert_eq!(counts(&plan), [2, 1, 2, 1]);
    apply(&plan, &mut pods);
    assert_eq!(images(&pods), [V2, V2]);

    let plan = round(&set, &pods);
    assert_eq!(counts(&plan), [2, 2, 1, 1]);
    assert_eq!(plan.stage, Stage::Finished);

    restart(&mut pods[1], "test-sidecar");
    assert_eq!(counts(&round(&set, &pods)), [2, 2, 2, 2]);

    for pod in &pods {
        let sidecar = &pod.spec.as_ref().unwrap().containers[1];
        assert_eq!(sidecar.env.as_ref().unwrap()[0].name, "nginx-env");
        assert_eq!(
            sidecar.volume_mounts.as_ref().unwrap()[0].mount_path,
            "/data/nginx"
        );
        assert_eq!(
            annotation(pod, "kruise.io/sidecarset-injected-list"),
            Some(SET)
        );
        assert_eq!(recorded_hash(pod), "bbb");
        assert_eq!(spec_image(pod, "nginx"), "nginx:1.15.1");
    }
}

// ::TestScopeNamespacePods
#[test]
fn scope_namespace_pods() {
    let mut set = factory_sidecar_set();
    set.spec.namespace = Some("test-ns".to_owned());
    let pods: Vec<Pod> = (0..100)
        .map(|i| {
            let mut pod = demo_pod(&format!("test-pod-{i}"));
            if i >= 50 {
                pod.metadata.namespace = Some("test-ns".to_owned());
            }
            pod
        })
        .collect();
    let pods: Vec<&Pod> = pods.iter().collect();
    let none = BTreeMap::new();
    assert_eq!(matching_pods(&set, &pods, &none).unwrap().len(), 50);

    set.spec.namespace = None;
    set.spec.namespace_selector = Some(LabelSelector {
        match_labels: Some(map(&[("env", "test")])),
        ..Default::default()
    });
    assert_eq!(matching_pods(&set, &pods, &none).unwrap().len(), 0);
    let labels = BTreeMap::from([("test-ns".to_owned(), map(&[("env", "test")]))]);
    assert_eq!(matching_pods(&set, &pods, &labels).unwrap().len(), 50);
}

// ::TestCanUpgradePods
#[test]
fn only_pods_with_the_same_without_image_hash_are_upgraded() {
    let mut set = sidecar_set(vec![cold("test-sidecar", V2)], "bbb", "without-bbb");
    strategy(&mut set).max_unavailable = percent("50%");
    let mut pods: Vec<Pod> = (0..100)
        .map(|i| {
            let without = if i < 50 { "without-aaa" } else { "without-bbb" };
            pod(
                &format!("pod-{i}"),
                &[("nginx", "nginx:1.15.1"), ("test-sidecar", V1)],
                "aaa",
                without,
            )
        })
        .collect();
    let plan = round(&set, &pods);
    assert_eq!(plan.not_upgradable.len(), 50);
    assert_eq!(plan.condition_changes.len(), 50);
    assert_eq!(plan.events.len(), 1);
    assert_eq!(plan.events[0].reason, EVENT_NOT_UPGRADABLE_PODS);
    apply(&plan, &mut pods);
    for (i, pod) in pods.iter().enumerate() {
        let expected = if i < 50 { V1 } else { V2 };
        assert_eq!(spec_image(pod, "test-sidecar"), expected, "pod-{i}");
    }
    let condition = &plan.condition_changes[0].condition;
    assert_eq!(condition.type_, UPGRADABLE_CONDITION);
    assert_eq!(condition.status, "False");
    assert_eq!(condition.reason.as_deref(), Some("UpdateImmutableField"));
    assert_eq!(
        condition.message.as_deref(),
        Some(r#"{"test-sidecarset":false}"#)
    );
    let upgraded = plan.pod_changes[0].upgradable_condition.as_ref().unwrap();
    assert_eq!(upgraded.status, "True");
    assert_eq!(upgraded.reason.as_deref(), Some("AllSidecarsetUpgradable"));
}

fn hot_set() -> SidecarSet {
    sidecar_set(vec![hot("test-sidecar", V2)], "bbb", "111111111")
}

// sidecarset_hotupgrade_test.go::TestUpdateHotUpgradeSidecar
#[test]
fn hot_upgrade_status_table() {
    let set = hot_set();
    let mut pods = vec![hot_pod("liheng-test", V1, "aaa", "111111111")];
    let images = |pods: &[Pod]| {
        (
            spec_image(&pods[0], "test-sidecar-1").to_owned(),
            spec_image(&pods[0], "test-sidecar-2").to_owned(),
        )
    };

    let plan = round(&set, &pods);
    assert_eq!(counts(&plan), [1, 0, 1, 0]);
    apply(&plan, &mut pods);
    assert_eq!(images(&pods), (V1.to_owned(), V2.to_owned()));
    assert_eq!(
        annotation(
            &pods[0],
            "kruise.io/sidecarset-working-hotupgrade-container"
        ),
        Some(r#"{"test-sidecar":"test-sidecar-2"}"#)
    );
    assert_eq!(
        annotation(&pods[0], "version.sidecarset.kruise.io/test-sidecar-2"),
        Some("22")
    );
    assert_eq!(
        annotation(&pods[0], "versionalt.sidecarset.kruise.io/test-sidecar-2"),
        Some("1")
    );
    assert_eq!(
        annotation(&pods[0], "versionalt.sidecarset.kruise.io/test-sidecar-1"),
        Some("22")
    );

    // Kubelet has not restarted test-sidecar-2 yet: nothing happens.
    let plan = round(&set, &pods);
    assert_eq!(counts(&plan), [1, 1, 0, 0]);
    assert!(plan.pod_changes.is_empty());

    restart(&mut pods[0], "test-sidecar-2");
    let plan = round(&set, &pods);
    assert_eq!(counts(&plan), [1, 1, 0, 0]);
    assert_eq!(plan.stage, Stage::ResetHotUpgrade);
    apply(&plan, &mut pods);
    assert_eq!(images(&pods), (EMPTY.to_owned(), V2.to_owned()));
    assert_eq!(
        annotation(&pods[0], "version.sidecarset.kruise.io/test-sidecar-1"),
        Some("0")
    );
    assert_eq!(
        annotation(&pods[0], "versionalt.sidecarset.kruise.io/test-sidecar-2"),
        Some("0")
    );

    restart(&mut pods[0], "test-sidecar-1");
    let plan = round(&set, &pods);
    assert_eq!(counts(&plan), [1, 1, 1, 1]);
    assert!(plan.pod_changes.is_empty());
}

// sidecarset_pod_event_handler_test.go::TestPodEventHandler
#[test]
fn pod_event_handler() {
    let set = factory_sidecar_set();
    let pod = demo_pod("p");
    assert_eq!(
        sidecar_sets_of_pod(&pod, std::slice::from_ref(&set), &BTreeMap::new()),
        vec![SET.to_owned()]
    );

    let mut not_ready = pod.clone();
    not_ready.metadata.resource_version = Some("2".to_owned());
    set_ready(&mut not_ready, false);
    assert_eq!(pod_update_enqueue(&pod, &not_ready, &set), Some(0));

    let mut spec_changed = pod.clone();
    spec_changed.metadata.resource_version = Some("2".to_owned());
    spec_changed.spec.as_mut().unwrap().containers[0].image = Some("nginx:latest".to_owned());
    assert_eq!(pod_update_enqueue(&pod, &spec_changed, &set), None);

    let mut same_version = not_ready;
    same_version.metadata.resource_version = pod.metadata.resource_version.clone();
    assert_eq!(pod_update_enqueue(&pod, &same_version, &set), None);

    // The sidecar turned inconsistent (image changed, kubelet not done).
    let mut upgrading = pod.clone();
    upgrading.metadata.resource_version = Some("3".to_owned());
    upgrading.spec.as_mut().unwrap().containers[1].image = Some(V2.to_owned());
    record_in_place(&mut upgrading, "bbb", "test-sidecar", V1);
    assert_eq!(pod_update_enqueue(&pod, &upgrading, &set), Some(5));

    let mut canary = factory_sidecar_set();
    strategy(&mut canary).selector = Some(LabelSelector::default());
    let mut relabelled = pod.clone();
    relabelled.metadata.resource_version = Some("4".to_owned());
    relabelled
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("x".into(), "y".into());
    assert_eq!(pod_update_enqueue(&pod, &relabelled, &set), None);
    assert_eq!(pod_update_enqueue(&pod, &relabelled, &canary), Some(0));

    let mut not_update = factory_sidecar_set();
    strategy(&mut not_update).type_ = Some(SidecarSetUpdateStrategyType::NotUpdate);
    let mut deleting = pod.clone();
    deleting.metadata.resource_version = Some("5".to_owned());
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    assert_eq!(pod_update_enqueue(&pod, &deleting, &set), Some(0));
    assert_eq!(pod_update_enqueue(&pod, &deleting, &not_update), None);
}

// ::TestGetPodMatchedSidecarSets
#[test]
fn get_pod_matched_sidecar_sets() {
    let sets: Vec<SidecarSet> = [
        "test-sidecarset-1",
        "test-sidecarset-2",
        "test-sidecarset-3",
    ]
    .into_iter()
    .map(|name| {
        let mut set = factory_sidecar_set();
        set.metadata.name = Some(name.to_owned());
        set
    })
    .collect();
    for (list, expected) in [
        ("test-sidecarset-2", 1),
        ("test-sidecarset-1,test-sidecarset-3", 2),
        ("test-sidecarset-4", 0),
    ] {
        let mut pod = demo_pod("p");
        pod.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("kruise.io/sidecarset-injected-list".into(), list.into());
        assert_eq!(
            sidecar_sets_of_pod(&pod, &sets, &BTreeMap::new()).len(),
            expected,
            "{list}"
        );
    }
}

/// `{SET: {lastContainerStatuses: {container: {imageID: id(image)}}}}`.
fn in_place_state(pod: &mut Pod, recorded: &[(&str, &str)]) {
    let last: serde_json::Map<String, serde_json::Value> = recorded
        .iter()
        .map(|(c, image)| {
            (
                (*c).to_owned(),
                serde_json::json!({ "imageID": image_id(image) }),
            )
        })
        .collect();
    let state = serde_json::json!({ SET: { "revision": "bbb", "lastContainerStatuses": last } });
    pod.metadata.annotations.as_mut().unwrap().insert(
        INPLACE_UPDATE_STATE_ANNOTATION.to_owned(),
        state.to_string(),
    );
}

fn set_image(pod: &mut Pod, container: &str, image: &str) {
    for c in &mut pod.spec.as_mut().unwrap().containers {
        if c.name == container {
            c.image = Some(image.to_owned());
        }
    }
}

fn set_image_id(pod: &mut Pod, container: &str, image: &str) {
    for s in pod
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .iter_mut()
        .flatten()
    {
        if s.name == container {
            s.image_id = image_id(image);
        }
    }
}

// pkg/control/sidecarcontrol/util_test.go::TestIsSidecarContainerUpdateCompleted
#[test]
fn is_sidecar_container_update_completed_cases() {
    let base = pod(
        "p",
        &[
            ("nginx", "nginx:1.15.1"),
            ("cold-sidecar", "cold-image:v1"),
            ("hot-sidecar-1", "hot-image:v1"),
            ("hot-sidecar-2", EMPTY),
        ],
        "aaa",
        "without-image-aaa",
    );
    let containers: BTreeSet<String> = ["cold-sidecar", "hot-sidecar-1", "hot-sidecar-2"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    let completed = |pod: &Pod| is_sidecar_container_update_completed(pod, &[SET], &containers);

    // Only injected, never upgraded.
    assert!(completed(&base));

    // Cold sidecar upgraded, kubelet not done.
    let mut pod = base.clone();
    set_image(&mut pod, "cold-sidecar", "cold-sidecar:v2");
    in_place_state(&mut pod, &[("cold-sidecar", "cold-image:v1")]);
    assert!(!completed(&pod));

    // Its imageID changed: done.
    set_image_id(&mut pod, "cold-sidecar", "cold-sidecar:v2");
    assert!(completed(&pod));

    // Hot sidecar: hot-sidecar-2 upgraded, not restarted.
    set_image(&mut pod, "hot-sidecar-2", "hot-sidecar:v2");
    in_place_state(
        &mut pod,
        &[("cold-sidecar", "cold-image:v1"), ("hot-sidecar-2", EMPTY)],
    );
    assert!(!completed(&pod));

    // hot-sidecar-2 restarted, hot-sidecar-1 reset to empty but not restarted.
    set_image_id(&mut pod, "hot-sidecar-2", "hot-sidecar:v2");
    set_image(&mut pod, "hot-sidecar-1", EMPTY);
    in_place_state(
        &mut pod,
        &[
            ("cold-sidecar", "cold-image:v1"),
            ("hot-sidecar-2", EMPTY),
            ("hot-sidecar-1", "hot-image:v1"),
        ],
    );
    assert!(!completed(&pod));

    set_image_id(&mut pod, "hot-sidecar-1", EMPTY);
    assert!(completed(&pod));

    // An unreadable annotation is not complete.
    let mut broken = base;
    broken.metadata.annotations.as_mut().unwrap().insert(
        INPLACE_UPDATE_STATE_ANNOTATION.to_owned(),
        "not json".to_owned(),
    );
    assert!(!completed(&broken));
}
