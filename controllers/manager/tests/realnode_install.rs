//! The install running as pods on the real node (kubelet on containerd):
//! our images, packed by `kruise-manager build-images`'s code and pushed
//! to the node's registry; `kubectl kustomize artifacts/deploy` placed on
//! the node's host network (`kruise_manager::in_cluster`); then the
//! user's seed flows against that deployment alone (no controller or host
//! runs in this process): SidecarSet injection through the deployed
//! webhook, the CloneSet partition rollout by the deployed manager, an
//! ImagePullJob pulled by the deployed node agent through containerd; and
//! an upgrade of the host to a new image while pod creations keep going
//! through its webhook, none refused.
//!
//! The workloads run on simulated nodes (the real node is tainted for
//! them); our pods tolerate it. On a machine where containerd cannot run
//! the test prints the exact reason and returns early, as every real-node
//! test does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Pod;
use kruise_api::{CloneSet, ImagePullJob, NodeImage};
use kruise_devcluster::realnode::{REAL_NODE_LABEL, RealNode};
use kruise_devcluster::simnode::SimNodes;
use kruise_devcluster::wait::wait_for;
use kruise_devcluster::{DevCluster, Options};
use kruise_manager::images;
use kruise_manager::in_cluster::{self, Placement, Ports};
use kruise_policy_modules::ALL;
use kruise_wasm_host::runtime::{Runtime, RuntimeConfig};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::{container_names, examples, kubectl, node_troubles};

const NAMESPACE: &str = "kruise-system";
/// How long the install may take to come up: image pulls from the node's
/// registry and first starts, on a machine busy with other tests.
const INSTALL_DEADLINE: Duration = Duration::from_mins(4);
/// Where the host image reads its compiled modules (webhook-host.yaml).
const HOST_CACHE: &str = "/var/cache/kruise-wasm";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_install_runs_as_pods_on_the_real_node() {
    let mut cluster = DevCluster::start(Options::default()).await.unwrap();
    let client = cluster.client();
    let Some(mut node) = RealNode::start_or_skip(&cluster).await else {
        return;
    };
    let kubeconfig = cluster.kubeconfig.clone();
    kubectl(
        &kubeconfig,
        &[
            "taint",
            "node",
            &node.name,
            &format!("{REAL_NODE_LABEL}=true:NoSchedule"),
        ],
    );
    let mut sim_nodes = SimNodes::start(client.clone(), 2).await.unwrap();

    let work = node.work_dir.join("product-images");
    let manager_binary = Path::new(env!("CARGO_BIN_EXE_kruise-manager"));
    images::manager_image(&work, manager_binary).await.unwrap();
    images::host_image(&work, &host_binary()).await.unwrap();
    let pushed = images::push(&work, &node.registry, "v1").await.unwrap();
    let cache = warm_compile_cache();
    install(&cluster, &node, &pushed, &cache);
    install_is_up(&client, &node).await;

    sidecar_set_injection(&kubeconfig, &client).await;
    host_takes_a_cluster_snapshot(&client, &node).await;
    cloneset_partition_rollout(&kubeconfig, &client).await;
    image_pull_job(&client, &node).await;
    host_upgrade_keeps_answering(&client, &work, &node).await;

    sim_nodes.stop();
    let left = node.stop().await;
    assert!(left.is_empty(), "teardown left: {left:#?}");
    cluster.stop();
}

/// The modules compiled into the host's compile cache (in a second when
/// another test already did). The host pods read it, so that a new host
/// replica is up in seconds rather than compiling for a minute, as a
/// restarted host with its cache volume is.
fn warm_compile_cache() -> PathBuf {
    let cache = kruise_manager::dev::compile_cache().expect("a compile cache directory");
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.clone()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    for module in ALL {
        runtime.load(module.wasm).unwrap();
    }
    cache
}

/// `kubectl kustomize artifacts/deploy`, placed on the real node, applied
/// server-side as a user applies the install.
fn install(cluster: &DevCluster, node: &RealNode, pushed: &[String], cache: &Path) {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../artifacts/deploy");
    let rendered = kubectl(
        &cluster.kubeconfig,
        &["kustomize", deploy.to_str().unwrap()],
    );
    let objects: Vec<Value> = serde_yaml::Deserializer::from_str(&rendered)
        .map(|document| serde::Deserialize::deserialize(document).unwrap())
        .collect();
    let api_port = cluster.server.rsplit_once(':').unwrap().1.parse().unwrap();
    let [host, host_readiness, manager_probes, agent_probes] =
        kruise_devcluster::ports::free_ports(4).unwrap()[..]
    else {
        panic!("four free ports");
    };
    let placement = Placement {
        manager_image: &pushed[0],
        host_image: &pushed[1],
        api_server: ("127.0.0.1", api_port),
        runtime_socket: &node.containerd_socket,
        ports: Ports {
            host,
            host_readiness,
            manager_probes,
            agent_probes,
        },
    };
    let mut placed = in_cluster::place(objects, &placement).unwrap();
    share_compile_cache(&mut placed, cache);
    let file = node.work_dir.join("install.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": placed});
    std::fs::write(&file, serde_json::to_vec(&list).unwrap()).unwrap();
    let applied = kubectl(
        &cluster.kubeconfig,
        &["apply", "--server-side", "-f", file.to_str().unwrap()],
    );
    assert!(
        applied.contains("deployment.apps/kruise-webhook serverside-applied"),
        "{applied}"
    );
}

/// The host pods' cache volume is this machine's compile cache, read-only.
fn share_compile_cache(objects: &mut [Value], cache: &Path) {
    let host = objects
        .iter_mut()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "kruise-webhook")
        .unwrap();
    let spec = &mut host["spec"]["template"]["spec"];
    let volume = spec["volumes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|v| v["name"] == "cache")
        .unwrap();
    *volume = json!({"name": "cache",
                     "hostPath": {"path": cache.display().to_string(), "type": "Directory"}});
    let mount = spec["containers"][0]["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|m| m["name"] == "cache")
        .unwrap();
    assert_eq!(mount["mountPath"], HOST_CACHE);
    mount["readOnly"] = json!(true);
}

/// Both Deployments available and the agent ready, or the test fails with
/// their pods and the end of each container's log.
async fn install_is_up(client: &Client, node: &RealNode) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + INSTALL_DEADLINE;
    loop {
        let mut up = true;
        for name in ["kruise-manager", "kruise-webhook"] {
            let deployment = deployments.get(name).await.unwrap();
            up &= deployment
                .status
                .and_then(|s| s.available_replicas)
                .unwrap_or(0)
                == 1;
        }
        let agent = daemon_sets.get("kruise-node-agent").await.unwrap();
        up &= agent.status.is_some_and(|s| s.number_ready == 1);
        if up {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the install did not come up within {} s:\n{}",
            INSTALL_DEADLINE.as_secs(),
            pods_and_logs(client, node).await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Our pods' phases and container states, and the end of their logs.
async fn pods_and_logs(client: &Client, node: &RealNode) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut report = String::new();
    for pod in pods.list(&ListParams::default()).await.unwrap() {
        let status = pod.status.unwrap_or_default();
        let _ = writeln!(
            report,
            "pod {}: {:?} {:?} {:?} {:#?}",
            pod.metadata.name.unwrap_or_default(),
            status.phase,
            status.reason,
            status.message,
            status.container_statuses
        );
    }
    report.push_str(&node_troubles(client).await);
    for log in logs_under(&node.work_dir.join("pod-logs")) {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        let _ = writeln!(report, "--- {}", log.display());
        for line in tail.iter().rev() {
            report.push_str(line);
            report.push('\n');
        }
    }
    report
}

fn logs_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut logs = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            logs.extend(logs_under(&path));
        } else if path.extension().is_some_and(|e| e == "log") {
            logs.push(path);
        }
    }
    logs
}

/// The deployed host compiles the sidecarset module again while serving,
/// for its cluster snapshot, and stays within its memory limit doing so:
/// the snapshot is logged and the host container never restarted.
async fn host_takes_a_cluster_snapshot(client: &Client, node: &RealNode) {
    let deadline = Instant::now() + INSTALL_DEADLINE;
    while !host_logged(node, "evaluations start from a new cluster snapshot") {
        assert!(
            Instant::now() < deadline,
            "the host took no cluster snapshot:\n{}",
            pods_and_logs(client, node).await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let restarts: i32 = host_pods(client)
        .await
        .iter()
        .flat_map(|pod| {
            pod.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
        })
        .map(|container| container.restart_count)
        .sum();
    assert_eq!(
        restarts,
        0,
        "the host restarted:\n{}",
        pods_and_logs(client, node).await
    );
}

/// The webhook host's pods.
async fn host_pods(client: &Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/name=kruise-webhook"))
        .await
        .unwrap()
        .items
}

fn host_logged(node: &RealNode, line: &str) -> bool {
    logs_under(&node.work_dir.join("pod-logs"))
        .iter()
        .filter(|log| log.to_string_lossy().contains("kruise-webhook"))
        .any(|log| std::fs::read_to_string(log).is_ok_and(|text| text.contains(line)))
}

/// The README's SidecarSet flow: the SidecarSet validated and defaulted by
/// the deployed host, the user's pod injected by it.
async fn sidecar_set_injection(kubeconfig: &Path, client: &Client) {
    let sidecar_set = examples().join("sidecarset-scs-demo.yaml");
    kubectl(kubeconfig, &["apply", "-f", sidecar_set.to_str().unwrap()]);
    let stored = kubectl(kubeconfig, &["get", "sidecarset", "scs-demo", "-o", "json"]);
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(
        stored["spec"]["containers"][0]["podInjectPolicy"],
        "BeforeAppContainer"
    );
    // The host's watch cache sees the new SidecarSet shortly after.
    let test_pod = examples().join("pod-test-pod.yaml");
    let pod: Pod = serde_yaml::from_str(&std::fs::read_to_string(&test_pod).unwrap()).unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    kruise_devcluster::wait::eventually("the host injects scs-demo", || async {
        let created = pods.create(&dry_run(), &pod).await.ok()?;
        (container_names(&created) == ["sidecar1", "app"]).then_some(())
    })
    .await;
    kubectl(kubeconfig, &["apply", "-f", test_pod.to_str().unwrap()]);
    let injected = pods.get("test-pod").await.unwrap();
    assert_eq!(container_names(&injected), ["sidecar1", "app"]);
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

/// The README's CloneSet flow: 5 pods; a new image stops at the
/// partition (3 old, 2 new, never fewer than 5 available); partition 0
/// finishes it. The CloneSet is written as v1alpha1 and stored as
/// v1beta1, so every read here also goes through the deployed host's
/// conversion.
async fn cloneset_partition_rollout(kubeconfig: &Path, client: &Client) {
    support::demo_cloneset_ready(kubeconfig, client).await;
    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), "default");
    let new_image = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "nginx:1.9.1"}]}}}});
    clonesets
        .patch("demo", &PatchParams::default(), &Patch::Merge(&new_image))
        .await
        .unwrap();
    let updated = |count: i32| {
        move |c: &CloneSet| {
            let generation = c.metadata.generation?;
            let status = c.status.as_ref()?;
            (status.observed_generation == Some(generation)
                && status.updated_ready_replicas == count
                && status.ready_replicas == 5
                && status.replicas == 5)
                .then_some(())
        }
    };
    wait_for(&clonesets, "demo", "2 pods updated, 3 kept", updated(2)).await;
    let release = json!({"spec": {"updateStrategy": {"partition": 0}}});
    clonesets
        .patch("demo", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    wait_for(&clonesets, "demo", "all 5 pods updated", updated(5)).await;
}

/// An ImagePullJob for the real node: its tag pulled by the deployed node
/// agent through containerd.
async fn image_pull_job(client: &Client, node: &RealNode) {
    // The manager makes each Ready node's NodeImage some seconds after it
    // is Ready (its labels settle); a job for a node without one has
    // nothing to pull and completes at once.
    let node_images: Api<NodeImage> = Api::all(client.clone());
    wait_for(
        &node_images,
        &node.name,
        "the real node's NodeImage",
        |_| Some(()),
    )
    .await;
    let jobs: Api<ImagePullJob> = Api::namespaced(client.clone(), "default");
    let job: ImagePullJob = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
        "metadata": {"name": "pull-on-the-real-node"},
        "spec": {"image": node.images.v1, "selector": {"names": [node.name]},
                 "completionPolicy": {"type": "Always"}},
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    wait_for(
        &jobs,
        "pull-on-the-real-node",
        "pulled on the real node",
        |job| {
            let status = job.status.as_ref()?;
            (status.succeeded == 1 && status.completion_time.is_some()).then_some(())
        },
    )
    .await;
}

/// The host Deployment moved to a new image: the new replica starts beside
/// the old (sharing its port), the old one stops; pods created all the
/// while are each injected, none refused.
async fn host_upgrade_keeps_answering(client: &Client, work: &Path, node: &RealNode) {
    let pushed = images::push(work, &node.registry, "v2").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut pod: Pod = serde_yaml::from_str(
        &std::fs::read_to_string(examples().join("pod-test-pod.yaml")).unwrap(),
    )
    .unwrap();
    pod.metadata.name = Some("during-the-upgrade".to_owned());
    let stop = Arc::new(AtomicBool::new(false));
    let creating = tokio::spawn({
        let stop = Arc::clone(&stop);
        async move {
            let (mut injected, mut refused) = (0, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match pods.create(&dry_run(), &pod).await {
                    Ok(created) if container_names(&created) == ["sidecar1", "app"] => {
                        injected += 1;
                    }
                    Ok(created) => refused.push(format!("not injected: {created:?}")),
                    Err(error) => refused.push(error.to_string()),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (injected, refused)
        }
    });

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let before = deployments.get("kruise-webhook").await.unwrap();
    let new_image = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "host", "image": pushed[1]}]}}}});
    let patched = deployments
        .patch(
            "kruise-webhook",
            &PatchParams::default(),
            &Patch::Strategic(&new_image),
        )
        .await
        .unwrap();
    assert!(patched.metadata.generation > before.metadata.generation);
    let generation = patched.metadata.generation.unwrap();
    let deadline = Instant::now() + INSTALL_DEADLINE;
    loop {
        let deployment = deployments.get("kruise-webhook").await.unwrap();
        let status = deployment.status.unwrap_or_default();
        let pods = host_pods(client).await;
        let done = status.observed_generation == Some(generation)
            && status.updated_replicas == Some(1)
            && status.available_replicas == Some(1)
            && pods.len() == 1
            && pods[0].spec.as_ref().unwrap().containers[0]
                .image
                .as_deref()
                == Some(pushed[1].as_str());
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the host's rollout did not finish: {status:#?}\n{}",
            pods_and_logs(client, node).await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Past the old replica's exit: its last requests are answered too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let (injected, refused) = creating.await.unwrap();
    eprintln!(
        "during the upgrade: {injected} pods injected, {} refused",
        refused.len()
    );
    assert!(
        refused.is_empty(),
        "{} of {} pod creations refused during the upgrade: {refused:#?}",
        refused.len(),
        injected + refused.len()
    );
    assert!(
        injected > 20,
        "only {injected} pods created during the upgrade"
    );
}

/// `kruise-wasm`, from the target directory the manager was built in.
fn host_binary() -> PathBuf {
    let beside = Path::new(env!("CARGO_BIN_EXE_kruise-manager")).with_file_name("kruise-wasm");
    if !beside.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let status = std::process::Command::new(cargo)
            .args([
                "build",
                "--locked",
                "-p",
                "kruise-wasm-host",
                "--bin",
                "kruise-wasm",
            ])
            .status()
            .unwrap();
        assert!(status.success(), "cannot build kruise-wasm");
    }
    beside
}
