//! Property tests of the SidecarSet update planner: repeated rounds, with
//! kubelet catching up at random between them, never take more than
//! `maxUnavailable` healthy pods out of service, never leave a hot-upgraded
//! pod without a ready twin, and converge to every pod outside the
//! partition on the new sidecar.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sidecarset_update_common;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::SidecarSet;
use kruise_core::cloneset::intorstr::{calculate_partition_replicas, value_from_int_or_percent};
use kruise_core::sidecarset::HASH_ANNOTATION;
use kruise_core::sidecarset::update::{Stage, UpdateInput, plan_update};
use proptest::prelude::*;
use sidecarset_update_common::{
    EMPTY, apply, cold, container_status, counts, hot, kubelet_tick, pod, round, set_pod_ready,
    sidecar_set, strategy,
};

#[derive(Clone, Debug)]
struct Config {
    pods: usize,
    max_unavailable: IntOrString,
    partition: IntOrString,
    hot: bool,
    /// Pods whose app container never becomes ready.
    broken: usize,
    versions: usize,
    seed: u64,
}

fn int_or_percent(min: i32, max_int: i32) -> impl Strategy<Value = IntOrString> {
    prop_oneof![
        (min..=max_int).prop_map(IntOrString::Int),
        (0..=100_i32).prop_map(|p| IntOrString::String(format!("{p}%"))),
    ]
}

fn config() -> impl Strategy<Value = Config> {
    (
        1..10_usize,
        int_or_percent(0, 4),
        int_or_percent(0, 10),
        any::<bool>(),
        0..2_usize,
        1..3_usize,
        any::<u64>(),
    )
        .prop_map(
            |(pods, max_unavailable, partition, hot, broken, versions, seed)| Config {
                broken: broken.min(pods - 1),
                pods,
                max_unavailable,
                partition,
                hot,
                versions,
                seed,
            },
        )
}

fn image(version: usize) -> String {
    format!("sidecar:v{version}")
}

fn set_for(config: &Config, version: usize) -> SidecarSet {
    let container = if config.hot {
        hot("test-sidecar", &image(version))
    } else {
        cold("test-sidecar", &image(version))
    };
    let mut set = sidecar_set(vec![container], &format!("h{version}"), "w");
    set.metadata.resource_version = Some(format!("{}", 100 + version));
    strategy(&mut set).max_unavailable = Some(config.max_unavailable.clone());
    strategy(&mut set).partition = Some(config.partition.clone());
    set
}

fn initial_pods(config: &Config) -> Vec<Pod> {
    (0..config.pods)
        .map(|i| {
            let name = format!("pod-{i}");
            if config.hot {
                sidecarset_update_common::hot_pod(&name, &image(1), "h1", "w")
            } else {
                pod(
                    &name,
                    &[("nginx", "nginx"), ("test-sidecar", &image(1))],
                    "h1",
                    "w",
                )
            }
        })
        .collect()
}

/// [`kubelet_tick`] for one container only.
fn kubelet_tick_container(pod: &mut Pod, name: &str) {
    let mut single = pod.clone();
    kubelet_tick(&mut single);
    let advanced = container_status(&single, name).clone();
    for status in pod
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .iter_mut()
        .flatten()
    {
        if status.name == name {
            *status = advanced.clone();
        }
    }
    set_pod_ready(pod);
}

fn break_app(pod: &mut Pod) {
    for status in pod
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .iter_mut()
        .flatten()
    {
        if status.name == "nginx" {
            status.ready = false;
        }
    }
    set_pod_ready(pod);
}

fn healthy_unavailable(set: &SidecarSet, pods: &[Pod], broken: usize) -> i32 {
    let healthy = &pods[broken..];
    let [matched, _, ready, _] = counts(&round(set, healthy));
    matched - ready
}

fn hot_twin_serving(pod: &Pod) -> bool {
    ["test-sidecar-1", "test-sidecar-2"].iter().any(|twin| {
        let status = container_status(pod, twin);
        status.ready && status.image != EMPTY
    })
}

/// Kubelet advances each container on its own schedule.
fn advance_kubelet(pods: &mut [Pod], broken: usize, coin: &mut impl FnMut() -> bool) {
    for (i, pod) in pods.iter_mut().enumerate() {
        let names: Vec<String> = pod
            .spec
            .as_ref()
            .unwrap()
            .containers
            .iter()
            .map(|c| c.name.clone())
            .collect();
        for name in names {
            if coin() {
                kubelet_tick_container(pod, &name);
            }
        }
        if i < broken {
            break_app(pod);
        }
    }
}

fn check_serving(config: &Config, pods: &[Pod]) -> Result<(), TestCaseError> {
    if config.hot {
        for pod in &pods[config.broken..] {
            prop_assert!(
                hot_twin_serving(pod),
                "no serving twin in {:?}",
                pod.metadata.name
            );
        }
    }
    Ok(())
}

fn check(config: &Config) -> Result<(), TestCaseError> {
    let mut pods = initial_pods(config);
    for pod in &mut pods[..config.broken] {
        break_app(pod);
    }
    let mut rng = config.seed | 1;
    let mut coin = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        !rng.is_multiple_of(3)
    };
    let total = i32::try_from(config.pods).unwrap();
    let budget = value_from_int_or_percent(&config.max_unavailable, total, true).unwrap();
    let kept = calculate_partition_replicas(Some(&config.partition), Some(total)).unwrap();

    for version in 2..=config.versions + 1 {
        let set = set_for(config, version);
        let mut converged = false;
        for _ in 0..400 {
            let plan = round(&set, &pods);
            if budget == 0 {
                prop_assert!(
                    plan.pod_changes.iter().all(|c| {
                        let pod = pods
                            .iter()
                            .find(|p| p.metadata.name.as_deref() == Some(&c.pod.name))
                            .unwrap();
                        config.broken > 0 && pod.metadata.name.as_deref() == Some("pod-0")
                    }),
                    "maxUnavailable 0 upgraded a ready pod"
                );
            }
            apply(&plan, &mut pods);
            let unavailable = healthy_unavailable(&set, &pods, config.broken);
            prop_assert!(
                unavailable <= budget.max(0),
                "{unavailable} healthy pods unavailable, budget {budget}"
            );
            check_serving(config, &pods)?;
            let [matched, updated, ready, _] = counts(&plan);
            let settled_images = pods.iter().all(|p| {
                p.spec.as_ref().unwrap().containers.iter().all(|c| {
                    Some(container_status(p, &c.name).image.as_str()) == c.image.as_deref()
                })
            });
            if plan.pod_changes.is_empty()
                && settled_images
                && matched - ready == i32::try_from(config.broken).unwrap()
                && (updated == total - kept || plan.stage == Stage::Finished)
            {
                converged = true;
                break;
            }
            advance_kubelet(&mut pods, config.broken, &mut coin);
            check_serving(config, &pods)?;
        }
        let stuck = budget <= i32::try_from(config.broken).unwrap();
        if !stuck {
            prop_assert!(converged, "no convergence to v{version}");
            let upgraded = pods
                .iter()
                .filter(|p| {
                    let records: serde_json::Value = serde_json::from_str(
                        p.metadata.annotations.as_ref().unwrap()[HASH_ANNOTATION].as_str(),
                    )
                    .unwrap();
                    records["test-sidecarset"]["hash"] == format!("h{version}")
                })
                .count();
            prop_assert_eq!(i32::try_from(upgraded).unwrap(), total - kept);
        } else if !converged {
            // Broken pods use up the budget, as upstream: stop here.
            return Ok(());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn rounds_respect_max_unavailable_and_converge(config in config()) {
        check(&config)?;
    }
}

/// Hot upgrades whose image changes again (newer or back) before the
/// previous one finished: no pod is ever without a ready, serving twin, and
/// the last image ends up working with the other twin on the empty image.
fn check_mid_flight(
    pods_count: usize,
    max_unavailable: i32,
    targets: &[(usize, usize)],
    seed: u64,
) -> Result<(), TestCaseError> {
    let config = Config {
        pods: pods_count,
        max_unavailable: IntOrString::Int(max_unavailable),
        partition: IntOrString::Int(0),
        hot: true,
        broken: 0,
        versions: 1,
        seed,
    };
    let mut pods = initial_pods(&config);
    let mut rng = seed | 1;
    let mut coin = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        !rng.is_multiple_of(3)
    };
    let (last, _) = targets[targets.len() - 1];
    for (index, &(version, hold)) in targets.iter().enumerate() {
        let set = set_for(&config, version);
        let final_target = index + 1 == targets.len();
        let rounds = if final_target { 400 } else { hold };
        for _ in 0..rounds {
            let plan = round(&set, &pods);
            apply(&plan, &mut pods);
            check_serving(&config, &pods)?;
            let [matched, updated, ready, _] = counts(&plan);
            if final_target && plan.pod_changes.is_empty() && matched == updated && ready == matched
            {
                break;
            }
            advance_kubelet(&mut pods, 0, &mut coin);
            check_serving(&config, &pods)?;
        }
    }
    for pod in &pods {
        let map: std::collections::BTreeMap<String, String> = serde_json::from_str(
            &pod.metadata.annotations.as_ref().unwrap()
                ["kruise.io/sidecarset-working-hotupgrade-container"],
        )
        .unwrap();
        let working = &map["test-sidecar"];
        let idle = if working == "test-sidecar-1" {
            "test-sidecar-2"
        } else {
            "test-sidecar-1"
        };
        prop_assert_eq!(container_status(pod, working).image.clone(), image(last));
        prop_assert_eq!(container_status(pod, idle).image.as_str(), EMPTY);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn hot_upgrades_changed_mid_flight_keep_a_twin_serving(
        pods_count in 1..6_usize,
        max_unavailable in 1..4_i32,
        targets in proptest::collection::vec((1..4_usize, 0..6_usize), 1..5),
        seed in any::<u64>(),
    ) {
        check_mid_flight(pods_count, max_unavailable, &targets, seed)?;
    }
}

/// Numbers a stored SidecarSet may hold although the webhook refuses them.
fn hostile_int_or_percent() -> impl Strategy<Value = IntOrString> {
    prop_oneof![
        Just(IntOrString::Int(i32::MIN)),
        Just(IntOrString::Int(i32::MAX)),
        Just(IntOrString::Int(-1)),
        Just(IntOrString::String("9000000000000000000%".to_owned())),
        Just(IntOrString::String("-9000000000000000000%".to_owned())),
        Just(IntOrString::String("1e309%".to_owned())),
        Just(IntOrString::String("-5%".to_owned())),
        Just(IntOrString::String("lots".to_owned())),
        (0..=100_i32).prop_map(|p| IntOrString::String(format!("{p}%"))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the numbers: no panic or overflow; a value that is not a
    /// number is refused with the field named, and otherwise no more pods
    /// are upgraded than there are.
    #[test]
    fn hostile_numbers_are_refused_or_clamped(
        pods in 0..5_usize,
        max_unavailable in hostile_int_or_percent(),
        partition in hostile_int_or_percent(),
    ) {
        let config = Config { pods, max_unavailable, partition, hot: false, broken: 0, versions: 1, seed: 1 };
        let initial = initial_pods(&config);
        let initial: Vec<&Pod> = initial.iter().collect();
        let set = set_for(&config, 2);
        let namespaces = BTreeMap::new();
        let planned = plan_update(&UpdateInput {
            sidecar_set: &set,
            pods: &initial,
            namespace_labels: &namespaces,
            latest_revision: "test-sidecarset-rev",
            collision_count: Some(0),
            expectations: &[],
            now: sidecarset_update_common::now(),
        });
        match planned {
            Ok(plan) => prop_assert!(plan.pod_changes.len() <= 2 * pods, "{:?}", plan.pod_changes),
            Err(error) => {
                let message = error.to_string();
                prop_assert!(message.contains("spec.updateStrategy."), "{message}");
            }
        }
    }
}
