//! ContainerRecreateRequest on the real node: the node agent stops the
//! containers through containerd's CRI socket (after running the preStop
//! exec hook in the container), kubelet starts new ones in the same pod
//! sandbox, and the pod keeps its UID, IP and emptyDir data.
//!
//! On a machine where containerd cannot run the test prints the exact
//! reason (`SKIPPED: ...`) and returns early, as the real-node test of the
//! dev cluster does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::ContainerRecreateRequest;
use kruise_api::containerrecreaterequest::ContainerRecreateRequestPhase as Phase;
use kruise_core::cloneset::container_status;
use kruise_devcluster::realnode::{RealNode, pod_on};
use kruise_devcluster::wait::wait_for;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::{completed, examples, kubectl, real_node_environment};

const RECREATE_TIMEOUT: Duration = Duration::from_mins(2);

/// Each start of a container appends a line to `/data/<name>-starts`; the
/// preStop hook of `app` appends to `/data/app-prestop`. Both stop on
/// SIGTERM within a second.
fn container(name: &str, image: &str, pre_stop: bool) -> serde_json::Value {
    let script = format!(
        "echo started >> /data/{name}-starts; trap 'exit 0' TERM; while true; do sleep 1; done"
    );
    let mut container = json!({
        "name": name, "image": image,
        "command": ["sh", "-c", script],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    });
    if pre_stop {
        container["lifecycle"] = json!({"preStop": {"exec": {"command":
            ["sh", "-c", "date +%s >> /data/app-prestop"]}}});
    }
    container
}

fn empty_dir(node: &RealNode, pod: &Pod) -> PathBuf {
    let uid = pod.metadata.uid.clone().unwrap();
    node.work_dir
        .join("kubelet/root/pods")
        .join(uid)
        .join("volumes/kubernetes.io~empty-dir/data")
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |text| text.lines().count())
}

fn instance(pod: &Pod, name: &str) -> (String, i32) {
    let status = container_status(pod, name).unwrap();
    (
        status.container_id.clone().unwrap_or_default(),
        status.restart_count,
    )
}

fn started_at(pod: &Pod, name: &str) -> Timestamp {
    container_status(pod, name)
        .and_then(|s| s.state.clone()?.running?.started_at)
        .unwrap()
        .0
}

fn last_finished_at(pod: &Pod, name: &str) -> Timestamp {
    container_status(pod, name)
        .and_then(|s| s.last_state.clone()?.terminated?.finished_at)
        .unwrap()
        .0
}

fn all_succeeded(request: &ContainerRecreateRequest) {
    let status = request.status.as_ref().unwrap();
    assert_eq!(status.message, None, "{status:#?}");
    assert_eq!(status.container_recreate_states.len(), 2, "{status:#?}");
    for state in &status.container_recreate_states {
        assert_eq!(state.phase, Phase::Succeeded, "{status:#?}");
        assert!(state.is_killed, "{status:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_are_recreated_through_cri_in_the_same_pod() {
    let Some((mut environment, node)) = real_node_environment().await else {
        return;
    };
    let client = environment.client();
    let image = node.images.v1.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let requests: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), "default");

    let pod = pod_on(
        &node.name,
        json!({"name": "pod-name"}),
        json!({
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [container("app", &image, true), container("sidecar", &image, false)],
        }),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let before = wait_for(&pods, "pod-name", "both containers ready", |p| {
        let ready = ["app", "sidecar"]
            .iter()
            .all(|c| container_status(p, c).is_some_and(|s| s.ready));
        ready.then(|| p.clone())
    })
    .await;
    let data = empty_dir(&node, &before);
    assert_eq!(lines(&data.join("app-starts")), 1, "{}", data.display());

    // The user's example, as written: both containers, side by side.
    let example = examples().join("crr-demo.yaml");
    kubectl(
        environment.kubeconfig(),
        &["apply", "-f", example.to_str().unwrap()],
    );
    let demo = completed(&requests, "crr-demo", RECREATE_TIMEOUT).await;
    all_succeeded(&demo);
    let after = pods.get("pod-name").await.unwrap();
    for name in ["app", "sidecar"] {
        let (old_id, old_restarts) = instance(&before, name);
        let (new_id, new_restarts) = instance(&after, name);
        assert_ne!(old_id, new_id, "{name}: a new container");
        assert_eq!(new_restarts, old_restarts + 1, "{name}");
        assert_eq!(
            lines(&data.join(format!("{name}-starts"))),
            2,
            "{name}: emptyDir kept"
        );
    }
    assert_eq!(after.metadata.uid, before.metadata.uid);
    let ip = |p: &Pod| p.status.as_ref().and_then(|s| s.pod_ip.clone());
    assert_eq!(ip(&after), ip(&before));
    // The preStop hook ran in the old container, before it stopped.
    let hook_ran: i64 = std::fs::read_to_string(data.join("app-prestop"))
        .expect("the preStop hook wrote its file")
        .trim()
        .parse()
        .unwrap();
    assert!(
        hook_ran <= last_finished_at(&after, "app").as_second(),
        "hook before the stop"
    );

    one_after_the_other(&pods, &requests, &after).await;
    environment.real_node = Some(node);
    environment.shutdown().await;
}

/// Ordered: sidecar is stopped only after app's new instance is up.
async fn one_after_the_other(
    pods: &Api<Pod>,
    requests: &Api<ContainerRecreateRequest>,
    after: &Pod,
) {
    let ordered: ContainerRecreateRequest = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": "one-by-one", "namespace": "default"},
        "spec": {"podName": "pod-name", "containers": [{"name": "app"}, {"name": "sidecar"}],
                 "strategy": {"orderedRecreate": true}},
    }))
    .unwrap();
    requests
        .create(&PostParams::default(), &ordered)
        .await
        .unwrap();
    all_succeeded(&completed(requests, "one-by-one", RECREATE_TIMEOUT).await);
    let last = pods.get("pod-name").await.unwrap();
    assert_eq!(instance(&last, "app").1, instance(after, "app").1 + 1);
    assert_eq!(
        instance(&last, "sidecar").1,
        instance(after, "sidecar").1 + 1
    );
    let (app_up, sidecar_stopped) = (started_at(&last, "app"), last_finished_at(&last, "sidecar"));
    assert!(
        app_up <= sidecar_stopped,
        "app's new instance ({app_up}) started before sidecar was stopped ({sidecar_stopped})"
    );
}
