//! The barrier controller's decisions (OpenKruise's
//! `container_launch_priority_controller_test.go`: TestFindNextPriorities,
//! TestHandle, TestShouldEnqueue, TestReconcile), and a whole launch walked
//! through with a kubelet that starts a container once its key exists.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kruise_core::launch_priority::{
    BarrierPlan, BarrierStep, COMPLETED_ANNOTATION, apply, awaits_barrier, containers_gated_on,
    pending_priorities, plan_barrier,
};
use serde_json::{Value, json};

/// A pod as the webhook leaves it: `containers` are (name, priority env).
fn gated_pod(containers: &[(&str, Option<i64>)]) -> Pod {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(name, priority)| {
            let env: Vec<Value> = priority
                .iter()
                .map(|p| json!({"name": "KRUISE_CONTAINER_PRIORITY", "value": p.to_string()}))
                .collect();
            json!({"name": name, "image": "busybox", "env": env})
        })
        .collect();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "demo", "namespace": "default", "uid": "uid-1"},
        "spec": {"containers": containers},
    }))
    .unwrap();
    apply(&pod, "bbbbb").unwrap().expect("the pod is gated")
}

fn ordered_pod(names: &[&str]) -> Pod {
    let containers: Vec<Value> = names
        .iter()
        .map(|name| json!({"name": name, "image": "busybox"}))
        .collect();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "demo", "namespace": "default", "uid": "uid-1",
            "annotations": {"apps.kruise.io/container-launch-priority": "Ordered"},
        },
        "spec": {"containers": containers},
    }))
    .unwrap();
    apply(&pod, "bbbbb").unwrap().expect("the pod is gated")
}

fn with_ready(mut pod: Pod, ready: &[&str]) -> Pod {
    let statuses: Vec<Value> = pod
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| {
            json!({
                "name": c.name, "image": "busybox", "imageID": "", "restartCount": 0,
                "ready": ready.contains(&c.name.as_str()),
            })
        })
        .collect();
    let all = statuses.iter().all(|s| s["ready"] == true);
    pod.status = Some(
        serde_json::from_value(json!({
            "containerStatuses": statuses,
            "conditions": [{"type": "ContainersReady", "status": if all {"True"} else {"False"}}],
        }))
        .unwrap(),
    );
    pod
}

fn config_map(keys: &[&str], owner_uid: &str) -> ConfigMap {
    let data: BTreeMap<&str, &str> = keys.iter().map(|k| (*k, "true")).collect();
    serde_json::from_value(json!({
        "metadata": {
            "name": "demo-barrier", "namespace": "default", "uid": "cm-uid",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "demo", "uid": owner_uid}],
        },
        "data": data,
    }))
    .unwrap()
}

#[test]
fn next_priorities_are_the_not_ready_gated_containers_ascending() {
    let pod = gated_pod(&[("main", None), ("sidecar", Some(1)), ("log", Some(-5))]);
    assert_eq!(pending_priorities(&pod), [-5, 0, 1]);
    assert_eq!(
        pending_priorities(&with_ready(pod.clone(), &["sidecar"])),
        [-5, 0]
    );
    assert_eq!(
        pending_priorities(&with_ready(pod, &["sidecar", "main", "log"])),
        Vec::<i64>::new()
    );
    // Equal priorities repeat.
    let pod = gated_pod(&[("a", Some(2)), ("b", Some(2)), ("c", None)]);
    assert_eq!(pending_priorities(&pod), [0, 2, 2]);
    assert_eq!(containers_gated_on(&pod, "p_2"), ["a", "b"]);
    assert_eq!(containers_gated_on(&pod, "p_0"), ["c"]);
    assert!(containers_gated_on(&pod, "p_1").is_empty());
}

#[test]
fn handle_adds_the_highest_pending_key() {
    let pod = gated_pod(&[("main", None), ("sidecar", Some(1)), ("log", Some(-5))]);
    assert_eq!(
        plan_barrier(&pod, Some(&config_map(&[], "uid-1"))),
        BarrierPlan::Step(BarrierStep::Release("p_1".into()))
    );
    // p_1 released, sidecar not ready yet: nothing more.
    assert_eq!(
        plan_barrier(&pod, Some(&config_map(&["p_1"], "uid-1"))),
        BarrierPlan::Step(BarrierStep::Wait)
    );
    let sidecar_ready = with_ready(pod, &["sidecar"]);
    assert_eq!(
        plan_barrier(&sidecar_ready, Some(&config_map(&["p_1"], "uid-1"))),
        BarrierPlan::Step(BarrierStep::Release("p_0".into()))
    );
}

#[test]
fn handle_completes_when_one_level_is_left_or_the_lowest_key_exists() {
    let pod = gated_pod(&[("main", None), ("sidecar", Some(1)), ("log", Some(-5))]);
    let only_log = with_ready(pod.clone(), &["sidecar", "main"]);
    assert_eq!(
        plan_barrier(&only_log, Some(&config_map(&["p_1", "p_0"], "uid-1"))),
        BarrierPlan::Step(BarrierStep::ReleaseLast("p_-5".into()))
    );
    // A key for the lowest pending level already there (written by hand, or
    // by a round whose annotation patch failed): done.
    assert_eq!(
        plan_barrier(&pod, Some(&config_map(&["p_-5"], "uid-1"))),
        BarrierPlan::Step(BarrierStep::Complete)
    );
}

#[test]
fn should_enqueue_only_pods_with_work_left() {
    let pod = gated_pod(&[("a", Some(1)), ("b", None)]);
    assert!(awaits_barrier(&pod));

    let mut completed = pod.clone();
    completed
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(COMPLETED_ANNOTATION.to_owned(), "true".to_owned());
    assert!(!awaits_barrier(&completed));
    assert_eq!(plan_barrier(&completed, None), BarrierPlan::Ignore);

    let all_ready = with_ready(pod, &["a", "b"]);
    assert!(!awaits_barrier(&all_ready));

    let plain: Pod = serde_json::from_value(json!({
        "metadata": {"name": "plain", "uid": "u"},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
    }))
    .unwrap();
    assert!(!awaits_barrier(&plain));
    assert_eq!(plan_barrier(&plain, None), BarrierPlan::Ignore);
}

#[test]
fn reconcile_creates_the_config_map_first() {
    let pod = ordered_pod(&["a", "b", "c"]);
    assert_eq!(plan_barrier(&pod, None), BarrierPlan::Create);
}

#[test]
fn a_config_map_of_an_earlier_pod_of_the_same_name_is_replaced() {
    let pod = ordered_pod(&["a", "b"]);
    // Every key released for the old pod: used as is, it would start both
    // containers of the new pod at once.
    let stale = config_map(&["p_0", "p_-1"], "old-uid");
    assert_eq!(
        plan_barrier(&pod, Some(&stale)),
        BarrierPlan::ReplaceStale {
            uid: "cm-uid".into()
        }
    );
    // A ConfigMap with no pod owner (made by hand) is used as it is.
    let mut by_hand = config_map(&[], "x");
    by_hand.metadata.owner_references = None;
    assert_eq!(
        plan_barrier(&pod, Some(&by_hand)),
        BarrierPlan::Step(BarrierStep::Release("p_0".into()))
    );
}

/// The controller and a kubelet take turns until nothing changes: the
/// containers become ready strictly level by level, highest first, and the
/// ConfigMap ends with exactly one key per level.
fn walk(mut pod: Pod) -> (Vec<Vec<String>>, BTreeMap<String, String>) {
    let mut barrier: Option<ConfigMap> = None;
    let mut ready: Vec<String> = Vec::new();
    let mut started_in_rounds = Vec::new();
    for _ in 0..20 {
        match plan_barrier(&pod, barrier.as_ref()) {
            BarrierPlan::Ignore | BarrierPlan::Step(BarrierStep::Complete) => break,
            BarrierPlan::Create => barrier = Some(config_map(&[], "uid-1")),
            BarrierPlan::ReplaceStale { .. } => barrier = None,
            BarrierPlan::Step(BarrierStep::Wait) => {}
            BarrierPlan::Step(BarrierStep::Release(key) | BarrierStep::ReleaseLast(key)) => {
                let map = barrier.as_mut().unwrap();
                map.data
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key, "true".into());
            }
        }
        // kubelet: a container whose key exists starts and turns ready.
        let keys = barrier
            .as_ref()
            .and_then(|m| m.data.clone())
            .unwrap_or_default();
        let newly: Vec<String> = pod
            .spec
            .as_ref()
            .unwrap()
            .containers
            .iter()
            .filter(|c| !ready.contains(&c.name))
            .filter(|c| {
                c.env.iter().flatten().any(|e| {
                    e.value_from
                        .as_ref()
                        .and_then(|v| v.config_map_key_ref.as_ref())
                        .is_some_and(|r| keys.contains_key(&r.key))
                })
            })
            .map(|c| c.name.clone())
            .collect();
        if !newly.is_empty() {
            ready.extend(newly.iter().cloned());
            started_in_rounds.push(newly);
        }
        let names: Vec<&str> = ready.iter().map(String::as_str).collect();
        pod = with_ready(pod, &names);
    }
    let keys = barrier.and_then(|m| m.data).unwrap_or_default();
    (started_in_rounds, keys)
}

#[test]
fn the_worked_example_starts_level_by_level() {
    let pod = gated_pod(&[("main", None), ("sidecar", Some(1)), ("log", Some(-5))]);
    let (rounds, keys) = walk(pod);
    assert_eq!(rounds, [vec!["sidecar"], vec!["main"], vec!["log"]]);
    assert_eq!(keys.keys().collect::<Vec<_>>(), ["p_-5", "p_0", "p_1"]);
}

#[test]
fn ordered_pods_start_in_container_order_and_equal_levels_together() {
    let (rounds, keys) = walk(ordered_pod(&["a", "b", "c"]));
    assert_eq!(rounds, [vec!["a"], vec!["b"], vec!["c"]]);
    assert_eq!(keys.keys().collect::<Vec<_>>(), ["p_-1", "p_-2", "p_0"]);

    let (rounds, _) = walk(gated_pod(&[("x", Some(3)), ("y", Some(3)), ("z", None)]));
    assert_eq!(rounds, [vec!["x", "y"], vec!["z"]]);
}
