//! What the manager's end-to-end tests share: the user's examples and
//! kubectl against the dev cluster. Each test binary uses some of these.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use kruise_api::ContainerRecreateRequest;
use kruise_api::containerrecreaterequest::ContainerRecreateRequestPhase;
use kruise_devcluster::realnode::RealNode;
use kruise_manager::agents::NodeAgents;
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kube::Api;

pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/fixtures/examples")
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
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} did not complete: {:#?}",
            current.status
        );
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
