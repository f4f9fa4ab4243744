//! The simulated nodes on the real control plane: pods become Ready,
//! readiness gates hold Ready back, an in-place image change restarts just
//! that container, and a missing ConfigMap key keeps a container from
//! starting until the key appears.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kruise_core::cloneset::container_status as container;
use kruise_devcluster::simnode::{READY_AFTER_SECONDS, SimNodes};
use kruise_devcluster::wait::wait_for;
use kruise_devcluster::{DevCluster, Options};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn pod(name: &str, extra: serde_json::Value) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "app", "image": "nginx:1.25"},
                {"name": "sidecar", "image": "busybox:1.34"},
            ],
        },
    });
    merge(&mut pod, extra);
    serde_json::from_value(pod).unwrap()
}

fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
    match (base, extra) {
        (serde_json::Value::Object(base), serde_json::Value::Object(extra)) => {
            for (key, value) in extra {
                merge(base.entry(key).or_insert(serde_json::Value::Null), value);
            }
        }
        (base, extra) => *base = extra,
    }
}

fn condition(pod: &Pod, kind: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.status.clone())
}

#[tokio::test]
async fn simulated_nodes_play_kubelet() {
    let cluster = DevCluster::start(Options::default()).await.unwrap();
    let client = cluster.client();
    let nodes = SimNodes::start(client.clone(), 2).await.unwrap();
    assert_eq!(nodes.names, ["sim-node-1", "sim-node-2"]);
    let node_api: Api<Node> = Api::all(client.clone());
    let node = node_api.get("sim-node-1").await.unwrap();
    let ready = node.status.unwrap().conditions.unwrap();
    assert!(
        ready
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "sim"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "sim");
    let post = PostParams::default();

    // Scheduled by the real scheduler, made Running and Ready by the agent.
    pods.create(&post, &pod("plain", json!({}))).await.unwrap();
    let running = wait_for(&pods, "plain", "Ready", |p| {
        (condition(p, "Ready").as_deref() == Some("True")).then(|| p.clone())
    })
    .await;
    let spec = running.spec.as_ref().unwrap();
    assert!(spec.node_name.as_deref().unwrap().starts_with("sim-node-"));
    let status = running.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(status.pod_ip.is_some());
    let app = container(&running, "app").unwrap();
    assert!(app.ready && app.started == Some(true) && app.restart_count == 0);
    assert!(
        app.container_id
            .as_deref()
            .unwrap()
            .starts_with("containerd://")
    );

    in_place_image_change(&pods, &running).await;
    readiness_gate(&pods).await;
    slow_readiness(&pods).await;
    config_barrier(&pods, &client).await;
    graceful_delete(&pods).await;
}

/// An in-place image change restarts only that container.
async fn in_place_image_change(pods: &Api<Pod>, running: &Pod) {
    let sidecar_before = container(running, "sidecar").unwrap().clone();
    let patch = json!({"spec": {"containers": [{"name": "sidecar", "image": "busybox:1.35"}]}});
    pods.patch("plain", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    let restarted = wait_for(pods, "plain", "sidecar restarted", |p| {
        let sidecar = container(p, "sidecar")?;
        (sidecar.image == "busybox:1.35" && sidecar.ready).then(|| p.clone())
    })
    .await;
    let sidecar = container(&restarted, "sidecar").unwrap();
    assert_eq!(sidecar.restart_count, sidecar_before.restart_count + 1);
    assert_ne!(sidecar.image_id, sidecar_before.image_id);
    assert_ne!(sidecar.container_id, sidecar_before.container_id);
    assert_eq!(container(&restarted, "app"), container(running, "app"));
    assert_eq!(restarted.metadata.uid, running.metadata.uid);
}

/// A readiness gate holds Ready until its condition is True.
async fn readiness_gate(pods: &Api<Pod>) {
    let gated = pod(
        "gated",
        json!({"spec": {"readinessGates": [{"conditionType": "example.com/gate"}]}}),
    );
    pods.create(&PostParams::default(), &gated).await.unwrap();
    wait_for(pods, "gated", "ContainersReady but not Ready", |p| {
        (condition(p, "ContainersReady").as_deref() == Some("True")
            && condition(p, "Ready").as_deref() == Some("False"))
        .then_some(())
    })
    .await;
    let open = json!({"status": {"conditions": [{"type": "example.com/gate", "status": "True"}]}});
    pods.patch_status("gated", &PatchParams::default(), &Patch::Strategic(open))
        .await
        .unwrap();
    wait_for(pods, "gated", "Ready once the gate opens", |p| {
        (condition(p, "Ready").as_deref() == Some("True")).then_some(())
    })
    .await;
}

/// Slow readiness: started at once, ready only after the delay.
async fn slow_readiness(pods: &Api<Pod>) {
    let slow = pod(
        "slow",
        json!({"metadata": {"annotations": {READY_AFTER_SECONDS: "3"}}}),
    );
    pods.create(&PostParams::default(), &slow).await.unwrap();
    let started = wait_for(pods, "slow", "started, not ready", |p| {
        let app = container(p, "app")?;
        (app.started == Some(true)).then_some(app.ready)
    })
    .await;
    assert!(!started, "a slow container must not be ready at once");
    wait_for(pods, "slow", "ready after the delay", |p| {
        container(p, "app")?.ready.then_some(())
    })
    .await;
}

/// A container whose env needs a missing ConfigMap key waits for it.
async fn config_barrier(pods: &Api<Pod>, client: &kube::Client) {
    let post = PostParams::default();
    let barrier = pod(
        "barrier",
        json!({"spec": {"containers": [
            {"name": "app", "image": "nginx:1.25", "env": [{"name": "GO", "valueFrom": {"configMapKeyRef": {"name": "barrier", "key": "go"}}}]},
            {"name": "sidecar", "image": "busybox:1.34"},
        ]}}),
    );
    pods.create(&post, &barrier).await.unwrap();
    let reason = wait_for(pods, "barrier", "app blocked", |p| {
        let app = container(p, "app")?;
        let sidecar = container(p, "sidecar")?;
        let waiting = app.state.as_ref()?.waiting.as_ref()?;
        sidecar.ready.then(|| waiting.reason.clone())
    })
    .await;
    assert_eq!(reason.as_deref(), Some("CreateContainerConfigError"));
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "sim");
    let config: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "barrier"}, "data": {"go": "yes"}}))
            .unwrap();
    config_maps.create(&post, &config).await.unwrap();
    let running = wait_for(pods, "barrier", "app started once the key exists", |p| {
        let app = container(p, "app")?;
        app.ready.then(|| app.container_id.clone())
    })
    .await;
    // As kubelet, the configuration is resolved only to create a
    // container: deleting the ConfigMap leaves the running one alone.
    config_maps
        .delete("barrier", &DeleteParams::default())
        .await
        .unwrap();
    // A pod event makes the agent look at the pod again.
    let touch = Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}}));
    pods.patch("barrier", &PatchParams::default(), &touch)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let pod = pods.get("barrier").await.unwrap();
    let app = container(&pod, "app").unwrap();
    assert!(app.ready, "{app:?}");
    assert_eq!(app.container_id, running);
}

/// Graceful deletion completes: the agent makes kubelet's final delete.
async fn graceful_delete(pods: &Api<Pod>) {
    pods.delete("plain", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while pods.get_opt("plain").await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "pod never went away");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
