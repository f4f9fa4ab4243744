//! The real node: kubelet on containerd joined to the dev cluster. A pod of
//! the test image from the local registry runs; an in-place image change
//! makes kubelet restart only that container with the new image; a
//! container whose env needs a missing ConfigMap key does not start until
//! the key appears; teardown leaves no shim, mount or process behind.
//!
//! On a machine where containerd cannot run (or a tool is missing) the test
//! prints the exact reason and returns early.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kruise_core::cloneset::container_status as container;
use kruise_devcluster::realnode::{REAL_NODE_LABEL, RealNode, leftovers, pod_on};
use kruise_devcluster::wait::wait_for;
use kruise_devcluster::{DevCluster, Options};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const NAMESPACE: &str = "real";

fn pod(name: &str, node: &str, containers: &serde_json::Value) -> Pod {
    pod_on(
        node,
        json!({"name": name}),
        json!({"containers": containers}),
    )
    .unwrap()
}

fn running(pod: &Pod, name: &str) -> bool {
    container(pod, name)
        .is_some_and(|c| c.ready && c.state.as_ref().and_then(|s| s.running.as_ref()).is_some())
}

/// The CRI log of one attempt of a container, from kubelet's pod logs dir.
/// The log of one run of a container, once `complete` says it is: a
/// container reported running may not have written its lines yet. After
/// 30 s, whatever the log holds (the caller's assertions then show it).
async fn container_log(
    node: &RealNode,
    pod: &Pod,
    container: &str,
    attempt: i32,
    complete: impl Fn(&str) -> bool,
) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap();
    let name = pod.metadata.name.as_deref().unwrap();
    let path = node
        .work_dir
        .join("pod-logs")
        .join(format!("{NAMESPACE}_{name}_{uid}"))
        .join(container)
        .join(format!("{attempt}.log"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        if complete(&log) || tokio::time::Instant::now() > deadline {
            return log;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_node_runs_pods() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("kruise_devcluster=info")
        .with_test_writer()
        .try_init();
    let cluster = DevCluster::start(Options::default()).await.unwrap();
    let client = cluster.client();
    let Some(mut node) = RealNode::start_or_skip(&cluster).await else {
        return;
    };
    let work_dir = node.work_dir.clone();
    let process_ids = node.pids();
    assert_eq!(
        process_ids
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>(),
        ["kubelet", "containerd", "registry"]
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let registered = nodes.get(&node.name).await.unwrap();
    let labels = registered.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get(REAL_NODE_LABEL).map(String::as_str),
        Some("true")
    );

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);

    in_place_image_change(&node, &pods).await;
    config_barrier(&node, &pods, &client).await;

    let left = node.stop().await;
    assert!(left.is_empty(), "teardown left: {left:#?}");
    assert!(nodes.get_opt(&node.name).await.unwrap().is_none());
    drop(node);
    assert_clean(&work_dir, &process_ids);
}

/// v1 runs; changing `app`'s image to v2 in place restarts only `app`.
async fn in_place_image_change(node: &RealNode, pods: &Api<Pod>) {
    let images = &node.images;
    let app = pod(
        "app",
        &node.name,
        &json!([
            {"name": "app", "image": images.v1, "imagePullPolicy": "IfNotPresent"},
            {"name": "sidecar", "image": images.v1, "imagePullPolicy": "IfNotPresent"},
        ]),
    );
    pods.create(&PostParams::default(), &app).await.unwrap();
    let before = wait_for(pods, "app", "both containers running", |p| {
        (running(p, "app") && running(p, "sidecar")).then(|| p.clone())
    })
    .await;
    let app_before = container(&before, "app").unwrap().clone();
    let sidecar_before = container(&before, "sidecar").unwrap().clone();
    // Host network: the pod's IP is the node's.
    let pod_ip = before.status.as_ref().unwrap().pod_ip.clone();
    assert!(pod_ip.is_some(), "no pod IP: {:?}", before.status);
    assert_eq!(app_before.image, images.v1);
    assert_eq!(app_before.restart_count, 0);
    assert!(
        app_before
            .container_id
            .as_deref()
            .unwrap()
            .starts_with("containerd://")
    );
    let log = container_log(node, &before, "app", 0, |log| {
        log.contains("kruise test image v1")
    })
    .await;
    assert!(log.contains("kruise test image v1"), "app's log: {log}");

    let patch = json!({"spec": {"containers": [{"name": "app", "image": images.v2}]}});
    pods.patch("app", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    let after = wait_for(pods, "app", "app restarted with v2", |p| {
        let app = container(p, "app")?;
        (app.image == images.v2 && app.restart_count > 0 && running(p, "app")).then(|| p.clone())
    })
    .await;
    let app_after = container(&after, "app").unwrap();
    assert_eq!(app_after.restart_count, app_before.restart_count + 1);
    assert_ne!(app_after.container_id, app_before.container_id);
    assert_ne!(app_after.image_id, app_before.image_id);
    assert!(app_after.image_id.contains("sha256:"));
    assert_eq!(after.metadata.uid, before.metadata.uid);
    let sidecar_after = container(&after, "sidecar").unwrap();
    assert_eq!(sidecar_after.container_id, sidecar_before.container_id);
    assert_eq!(sidecar_after.restart_count, 0);
    assert_eq!(sidecar_after.image_id, sidecar_before.image_id);
    let v2_printed = |log: &str| log.contains("\nv2") || log.contains(" v2\n");
    let log = container_log(node, &after, "app", 1, |log| {
        log.contains("kruise test image v2") && v2_printed(log)
    })
    .await;
    assert!(log.contains("kruise test image v2"), "app's log: {log}");
    assert!(v2_printed(&log), "app's log: {log}");
}

/// A container whose env needs a missing ConfigMap key waits for it.
async fn config_barrier(node: &RealNode, pods: &Api<Pod>, client: &kube::Client) {
    let post = PostParams::default();
    let barrier = pod(
        "barrier",
        &node.name,
        &json!([
            {"name": "app", "image": node.images.v1, "env": [{"name": "GO", "valueFrom": {"configMapKeyRef": {"name": "barrier", "key": "go"}}}]},
            {"name": "sidecar", "image": node.images.v1},
        ]),
    );
    pods.create(&post, &barrier).await.unwrap();
    let reason = wait_for(pods, "barrier", "app blocked, sidecar running", |p| {
        let waiting = container(p, "app")?.state.as_ref()?.waiting.as_ref()?;
        running(p, "sidecar").then(|| waiting.reason.clone())
    })
    .await;
    assert_eq!(reason.as_deref(), Some("CreateContainerConfigError"));
    // Still blocked a while later: it does not start by itself.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let still = pods.get("barrier").await.unwrap();
    assert!(!running(&still, "app"));
    assert_eq!(container(&still, "app").unwrap().restart_count, 0);

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let config: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "barrier"}, "data": {"go": "yes"}}))
            .unwrap();
    config_maps.create(&post, &config).await.unwrap();
    let started = wait_for(pods, "barrier", "app started once the key exists", |p| {
        running(p, "app").then(|| p.clone())
    })
    .await;
    assert_eq!(container(&started, "app").unwrap().restart_count, 0);
}

/// No process of the node, no shim and no mount under its dir.
fn assert_clean(work_dir: &Path, pids: &[(&str, u32)]) {
    for (name, pid) in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "{name} ({pid}) still runs"
        );
    }
    let dir = work_dir.display().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            !(cmdline.contains("containerd-shim") && cmdline.contains(&dir)),
            "a shim is left: {cmdline}"
        );
    }
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let left: Vec<&str> = mounts.lines().filter(|l| l.contains(&dir)).collect();
    assert!(left.is_empty(), "mounts left: {left:#?}");
    assert!(leftovers(work_dir).is_empty());
    assert!(!work_dir.exists(), "{} was not removed", work_dir.display());
}
