//! End to end on the dev cluster: container launch priority. The pod
//! webhook gates the containers on `<pod>-barrier` keys, the barrier
//! controller releases them one priority level at a time, and the
//! simulated kubelet creates a container only once its key exists.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_controller_runtime::shared::SharedWatches;
use kruise_core::cloneset::{container_status, has_ready_condition};
use kruise_core::launch_priority::COMPLETED_ANNOTATION;
use kruise_devcluster::simnode::READY_AFTER_SECONDS;
use kruise_devcluster::wait::{eventually, wait_for, wait_gone};
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::{examples, kubectl};

/// An `Ordered` pod whose containers each turn ready `ready_after`
/// seconds after they start, so that every level takes visible time.
fn ordered_pod(name: &str, containers: &[&str], ready_after: u32, labels: &Value) -> Pod {
    let containers: Vec<Value> = containers
        .iter()
        .map(|c| json!({"name": c, "image": "busybox"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "apps.kruise.io/container-launch-priority": "Ordered",
                READY_AFTER_SECONDS: ready_after.to_string(),
            },
        },
        "spec": {"containers": containers},
    }))
    .unwrap()
}

fn container_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| c.name.clone())
        .collect()
}

fn started_at(pod: &Pod, container: &str) -> Option<Timestamp> {
    let running = container_status(pod, container)?
        .state
        .as_ref()?
        .running
        .as_ref()?;
    Some(running.started_at.as_ref()?.0)
}

fn ready(pod: &Pod, container: &str) -> bool {
    container_status(pod, container).is_some_and(|s| s.ready)
}

async fn barrier_keys(config_maps: &Api<ConfigMap>, pod: &str) -> Vec<String> {
    config_maps
        .get(&format!("{pod}-barrier"))
        .await
        .unwrap()
        .data
        .unwrap_or_default()
        .into_keys()
        .collect()
}

/// Polls the pod until it is Ready, checking at every look that no
/// container runs while a container before it (higher priority) is not yet
/// ready; then checks that the start times follow the container order.
async fn starts_strictly_in_order(pods: &Api<Pod>, name: &str) -> Pod {
    let pod = eventually(&format!("{name} is Ready, level by level"), || async {
        let pod = pods.get(name).await.ok()?;
        let names = container_names(&pod);
        for (index, container) in names.iter().enumerate() {
            if started_at(&pod, container).is_some() {
                for higher in &names[..index] {
                    assert!(
                        ready(&pod, higher),
                        "{container} of {name} runs before {higher} is ready: {:#?}",
                        pod.status
                    );
                }
            }
        }
        has_ready_condition(&pod).then_some(pod)
    })
    .await;
    let names = container_names(&pod);
    let starts: Vec<Timestamp> = names.iter().map(|c| started_at(&pod, c).unwrap()).collect();
    assert!(
        starts.windows(2).all(|pair| pair[0] < pair[1]),
        "{name}: {names:?} started at {starts:?}"
    );
    pod
}

#[tokio::test]
async fn ordered_pods_start_one_priority_level_at_a_time() {
    let environment = DevEnvironment::start(DevOptions::default()).await.unwrap();
    let kubeconfig = environment.kubeconfig().to_path_buf();
    let client = environment.client();
    let pods = &Api::<Pod>::namespaced(client.clone(), "default");
    let config_maps = &Api::<ConfigMap>::namespaced(client.clone(), "default");

    // The user's two examples, unchanged: both become Ready, each level's
    // key was added, and the pods are marked completed.
    for example in ["pod-launch-ordered.yaml", "pod-launch-priority-env.yaml"] {
        let path = examples().join(example);
        kubectl(&kubeconfig, &["apply", "-f", path.to_str().unwrap()]);
    }
    for (name, keys, first) in [
        ("ordered", ["p_-1", "p_0"], "sidecar"),
        ("by-priority", ["p_0", "p_1"], "sidecar"),
    ] {
        let pod = wait_for(pods, name, "Ready", |p| {
            has_ready_condition(p).then(|| p.clone())
        })
        .await;
        assert_eq!(barrier_keys(config_maps, name).await, keys);
        assert_eq!(
            pod.annotations()
                .get(COMPLETED_ANNOTATION)
                .map(String::as_str),
            Some("true")
        );
        let other = if first == "sidecar" {
            "main"
        } else {
            "sidecar"
        };
        assert!(started_at(&pod, first).unwrap() <= started_at(&pod, other).unwrap());
        let barrier = config_maps.get(&format!("{name}-barrier")).await.unwrap();
        let owner = &barrier.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Pod", pod.uid().unwrap().as_str())
        );
    }

    // Slow readiness makes the order visible: three levels, one at a time.
    let slow = ordered_pod("slow", &["a", "b", "c"], 2, &json!({}));
    pods.create(&PostParams::default(), &slow).await.unwrap();
    starts_strictly_in_order(pods, "slow").await;
    assert_eq!(
        barrier_keys(config_maps, "slow").await,
        ["p_-1", "p_-2", "p_0"]
    );

    // Both webhooks chained: the SidecarSet's sidecar is injected first
    // (BeforeAppContainer), so under Ordered it starts first.
    let sidecarset = examples().join("sidecarset-scs-demo.yaml");
    kubectl(&kubeconfig, &["apply", "-f", sidecarset.to_str().unwrap()]);
    let chained = ordered_pod("chained", &["app"], 2, &json!({"app": "nginx"}));
    let created = eventually("the SidecarSet reaches the host", || async {
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let pod = pods.create(&dry_run, &chained).await.ok()?;
        (container_names(&pod).len() == 2).then_some(())
    });
    created.await;
    pods.create(&PostParams::default(), &chained).await.unwrap();
    let pod = starts_strictly_in_order(pods, "chained").await;
    assert_eq!(container_names(&pod), ["sidecar1", "app"]);
    assert_eq!(barrier_keys(config_maps, "chained").await, ["p_-1", "p_0"]);

    // kube-system is never sent to the pod webhook (so its pods start
    // even while the host is down): no barrier there.
    let system: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let untouched = system
        .create(&dry_run, &ordered_pod("system", &["a", "b"], 0, &json!({})))
        .await
        .unwrap();
    let gated = untouched.spec.iter().flat_map(|s| &s.containers).any(|c| {
        c.env
            .iter()
            .flatten()
            .any(|e| e.name == kruise_core::launch_priority::BARRIER_ENV)
    });
    assert!(!gated, "a kube-system pod went through the pod webhook");

    // The ConfigMap goes with its pod (the garbage collector follows the
    // owner reference).
    pods.delete("ordered", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(
        config_maps,
        "ordered-barrier",
        "garbage-collected with the pod",
        Duration::from_mins(1),
    )
    .await;
}

/// Starts the barrier controller alone, so the test can stop it.
fn start_controller(client: &Client) -> tokio::task::JoinHandle<()> {
    tokio::spawn(kruise_launchpriority_controller::run(
        client.clone(),
        SharedWatches::new(client.clone()),
    ))
}

#[tokio::test]
async fn the_barrier_ends_right_after_a_restart_a_deleted_config_map_and_a_namesake() {
    let environment = DevEnvironment::start(DevOptions {
        run_controllers: false,
        ..DevOptions::default()
    })
    .await
    .unwrap();
    let client = environment.client();
    let pods = &Api::<Pod>::namespaced(client.clone(), "default");
    let config_maps = &Api::<ConfigMap>::namespaced(client.clone(), "default");
    let post = PostParams::default();

    // Killed after the first level: nothing more is released while it is
    // down; restarted, it carries on and the pod starts in order.
    let controller = start_controller(&client);
    pods.create(
        &post,
        &ordered_pod("restart", &["a", "b", "c"], 2, &json!({})),
    )
    .await
    .unwrap();
    eventually("the first level is released", || async {
        let map = config_maps.get_opt("restart-barrier").await.ok()??;
        map.data
            .is_some_and(|d| d.contains_key("p_0"))
            .then_some(())
    })
    .await;
    controller.abort();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(barrier_keys(config_maps, "restart").await, ["p_0"]);
    let held = pods.get("restart").await.unwrap();
    assert!(
        ready(&held, "a") && started_at(&held, "b").is_none(),
        "{:#?}",
        held.status
    );
    let controller = start_controller(&client);
    starts_strictly_in_order(pods, "restart").await;
    assert_eq!(
        barrier_keys(config_maps, "restart").await,
        ["p_-1", "p_-2", "p_0"]
    );

    // The ConfigMap deleted by hand mid-way: made again (no pod event
    // needed), the running container keeps running, the rest follow.
    pods.create(&post, &ordered_pod("by-hand", &["a", "b"], 4, &json!({})))
        .await
        .unwrap();
    let first = wait_for(pods, "by-hand", "a runs", |p| started_at(p, "a")).await;
    config_maps
        .delete("by-hand-barrier", &DeleteParams::default())
        .await
        .unwrap();
    let pod = wait_for(
        pods,
        "by-hand",
        "Ready after the ConfigMap came back",
        |p| has_ready_condition(p).then(|| p.clone()),
    )
    .await;
    assert_eq!(started_at(&pod, "a"), Some(first));
    assert!(started_at(&pod, "b").unwrap() > first);

    // A ConfigMap left by an earlier pod of the same name, every key
    // released: it goes (replaced by the controller, or deleted by the
    // garbage collector, whichever is first) and the new pod's own
    // ConfigMap releases its levels from the top again. (The pod is kept
    // off the nodes so that no kubelet races the controller.)
    let stale: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": "namesake-barrier",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "namesake", "uid": "4f1c6a52-0000-4000-8000-000000000000"}],
        },
        "data": {"p_0": "true", "p_-1": "true"},
    }))
    .unwrap();
    let stale = config_maps.create(&post, &stale).await.unwrap();
    let mut namesake = ordered_pod("namesake", &["a", "b"], 0, &json!({}));
    namesake.spec.as_mut().unwrap().node_selector = Some(BTreeMap::from([(
        "kruise.io/no-such-node".to_owned(),
        "x".to_owned(),
    )]));
    let namesake = pods.create(&post, &namesake).await.unwrap();
    let replaced = wait_for(config_maps, "namesake-barrier", "replaced", |map| {
        (map.uid() != stale.uid()).then(|| map.clone())
    })
    .await;
    assert_eq!(replaced.owner_references()[0].uid, namesake.uid().unwrap());
    eventually("the top level is released for the new pod", || async {
        let keys = barrier_keys(config_maps, "namesake").await;
        (keys == ["p_0"]).then_some(())
    })
    .await;
    controller.abort();
}
