//! What the manager's end-to-end tests share: the user's examples and
//! kubectl against the dev cluster. Each test binary uses some of these.

#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kruise_api::containerrecreaterequest::ContainerRecreateRequestPhase;
use kruise_api::{CloneSet, ContainerRecreateRequest};
use kruise_devcluster::realnode::RealNode;
use kruise_devcluster::wait::wait_for;
use kruise_manager::agents::NodeAgents;
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kube::Api;
use kube::api::ListParams;

pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/fixtures/examples")
}

/// The names of a pod's containers, in order.
pub fn container_names(pod: &k8s_openapi::api::core::v1::Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|spec| &spec.containers)
        .map(|c| c.name.clone())
        .collect()
}

/// Runs kubectl and fails the test on a non-zero exit; its stdout.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = kubectl_output(kubeconfig, args);
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `kubectl apply` of `text` (YAML or JSON), written to a file of its own;
/// kubectl's output, whether it succeeded or not.
pub fn apply_text(kubeconfig: &Path, text: &str) -> Output {
    static FILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = std::env::temp_dir().join(format!("kruise-apply-{}-{n}.yaml", std::process::id()));
    std::fs::write(&file, text).unwrap();
    let applied = kubectl_output(kubeconfig, &["apply", "-f", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    applied
}

/// Applies the user's CloneSet example `demo` (5 replicas, surge and
/// partition) and waits until all five pods are ready.
pub async fn demo_cloneset_ready(kubeconfig: &Path, client: &kube::Client) {
    let demo = examples().join("cloneset-surge-partition.yaml");
    kubectl(kubeconfig, &["apply", "-f", demo.to_str().unwrap()]);
    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), "default");
    wait_for(&clonesets, "demo", "5 ready replicas", |c| {
        c.status
            .as_ref()
            .filter(|s| s.ready_replicas == 5)
            .map(drop)
    })
    .await;
}

/// One of Kubewarden's reference tools (`kwctl`, `policy-server`): the
/// build in ../shared/tools/kubewarden, or the path in `variable`. Missing,
/// the test fails and says where it looked.
pub fn kubewarden_tool(name: &str, variable: &str) -> PathBuf {
    let path = std::env::var_os(variable).map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/tools/kubewarden")
                .join(name)
        },
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "{name} is expected at {} (set {variable})",
        path.display()
    );
    path
}

pub fn kubectl_output(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs")
}

/// Polls the request until its phase is Completed, for at most `within`.
pub async fn completed(
    requests: &Api<ContainerRecreateRequest>,
    name: &str,
    within: Duration,
) -> ContainerRecreateRequest {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let current = requests.get(name).await.expect("the request can be read");
        let phase = current.status.as_ref().map(|s| s.phase);
        if phase == Some(ContainerRecreateRequestPhase::Completed) {
            return current;
        }
        if tokio::time::Instant::now() >= deadline {
            let troubles = node_troubles(&requests.clone().into_client()).await;
            panic!("{name} did not complete: {:#?}\n{troubles}", current.status);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The dev environment with no simulated nodes and a real node whose
/// agent runs on its containerd; `None` (after `SKIPPED: ...`) on a
/// machine that cannot host a real node.
pub async fn real_node_environment() -> Option<(DevEnvironment, RealNode)> {
    let mut environment = DevEnvironment::start(DevOptions {
        sim_nodes: 0,
        ..DevOptions::default()
    })
    .await
    .expect("the dev environment starts");
    let node = RealNode::start_or_skip(&environment.cluster).await?;
    environment.agents = NodeAgents::start(
        &environment.client(),
        &[],
        Some((node.name.as_str(), node.containerd_socket.as_path())),
    )
    .await
    .expect("the real node's agent starts");
    Some((environment, node))
}

/// The nodes' conditions that say a node is in trouble (under pressure,
/// or not ready), one line each; empty when there are none. A test that
/// times out prints them, so that a full disk (kubelet's DiskPressure) is
/// told apart from a defect in the code.
pub async fn node_troubles(client: &kube::Client) -> String {
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes = match nodes.list(&ListParams::default()).await {
        Ok(nodes) => nodes,
        Err(e) => return format!("the nodes could not be listed: {e}"),
    };
    let mut troubles = String::new();
    for node in nodes {
        let name = node.metadata.name.unwrap_or_default();
        let conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
        for condition in conditions {
            let healthy = if condition.type_ == "Ready" {
                "True"
            } else {
                "False"
            };
            if condition.status != healthy {
                let _ = writeln!(
                    troubles,
                    "node {name}: {} is {}: {}",
                    condition.type_,
                    condition.status,
                    condition.message.unwrap_or_default()
                );
            }
        }
    }
    troubles
}
