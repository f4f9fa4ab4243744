//! Launch priority on the real node: the dev environment's pod webhook and
//! barrier controller with kubelet on containerd. Under `Ordered`, the
//! second container is not even created until the first is ready.
//!
//! On a machine where containerd cannot run the test prints the exact
//! reason (`SKIPPED: ...`) and returns early, as the real-node test of the
//! dev cluster does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use k8s_openapi::api::core::v1::Pod;
use kruise_core::cloneset::{container_status, has_ready_condition};
use kruise_devcluster::realnode::pod_on;
use kruise_devcluster::wait::wait_for;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::real_node_environment;

fn running(pod: &Pod, name: &str) -> bool {
    container_status(pod, name)
        .is_some_and(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_containers_are_created_one_after_another_by_kubelet() {
    let Some((mut environment, node)) = real_node_environment().await else {
        return;
    };
    let (node_name, image) = (node.name.clone(), node.images.v1.clone());
    environment.real_node = Some(node);
    let pods: Api<Pod> = Api::namespaced(environment.client(), "default");

    // `first` runs but is not ready for a few seconds (its probe waits):
    // all that while, `second` must not exist as a container.
    let probe =
        json!({"exec": {"command": ["true"]}, "initialDelaySeconds": 4, "periodSeconds": 1});
    let pod = pod_on(
        &node_name,
        json!({
            "name": "ordered",
            "annotations": {"apps.kruise.io/container-launch-priority": "Ordered"},
        }),
        json!({"containers": [
            {"name": "first", "image": image, "readinessProbe": probe},
            {"name": "second", "image": image},
        ]}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let held = wait_for(&pods, "ordered", "first runs, not ready yet", |p| {
        let first = container_status(p, "first")?;
        (running(p, "first") && !first.ready).then(|| p.clone())
    })
    .await;
    let second = container_status(&held, "second").unwrap();
    let waiting = second.state.as_ref().and_then(|s| s.waiting.as_ref());
    assert_eq!(
        waiting.and_then(|w| w.reason.as_deref()),
        Some("CreateContainerConfigError"),
        "{second:?}"
    );
    assert!(second.container_id.is_none(), "{second:?}");

    let ready = wait_for(&pods, "ordered", "Ready", |p| {
        has_ready_condition(p).then(|| p.clone())
    })
    .await;
    let started = |name: &str| {
        let status = container_status(&ready, name).unwrap();
        status
            .state
            .as_ref()
            .unwrap()
            .running
            .as_ref()
            .unwrap()
            .started_at
            .clone()
            .unwrap()
            .0
    };
    assert!(started("first") < started("second"));
    environment.shutdown().await;
}
