//! Our images on the real node (kubelet on containerd): the manager and
//! host binaries packed by `kruise-manager build-images`'s code and pushed
//! to the node's registry; the manager image runs the node agent as a pod
//! (the node's CRI socket mounted, as the DaemonSet mounts it), which pulls
//! its NodeImage's tag through containerd and reports it; the host image
//! starts and answers.
//!
//! On a machine where containerd cannot run the test prints the exact
//! reason and returns early, as every real-node test does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_api::NodeImage;
use kruise_devcluster::realnode::{RealNode, pod_on};
use kruise_devcluster::wait::{eventually, wait_for};
use kruise_devcluster::{DevCluster, Options};
use kruise_manager::images;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const NAMESPACE: &str = "kruise-system";

/// Our CRDs, converting by apiVersion only: no host runs here to convert.
async fn install_crds(client: &Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for generated in kruise_api::crd::all().unwrap() {
        let mut crd = generated.crd;
        crd["spec"]["conversion"] = json!({"strategy": "None"});
        let name = crd["metadata"]["name"].as_str().unwrap().to_owned();
        api.patch(
            &name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap();
        eventually(&format!("{name} is established"), || async {
            let crd = api.get(&name).await.ok()?;
            let conditions = crd.status?.conditions?;
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        })
        .await;
    }
}

/// A pod of ours on the real node.
fn pod(name: &str, node: &RealNode, spec: Value) -> Pod {
    pod_on(
        &node.name,
        json!({"name": name, "namespace": NAMESPACE}),
        spec,
    )
    .unwrap()
}

fn parent(path: &Path) -> String {
    path.parent().unwrap().display().to_string()
}

/// The node agent from the manager image, as the DaemonSet runs it (root,
/// the CRI socket's directory from the host), with the dev cluster's
/// kubeconfig: no cluster network or DNS here for in-cluster config.
fn agent_pod(node: &RealNode, image: &str, kubeconfig: &Path) -> Pod {
    let socket = node.containerd_socket.display().to_string();
    let kubeconfig_name = kubeconfig.file_name().unwrap().to_str().unwrap();
    let probe_port = kruise_devcluster::ports::free_ports(1).unwrap()[0];
    pod(
        "node-agent",
        node,
        json!({
            "securityContext": {"runAsUser": 0},
            "containers": [{
                "name": "agent",
                "image": image,
                "args": ["node-agent", format!("--kubeconfig=/kube/{kubeconfig_name}"),
                         format!("--runtime-endpoint={socket}"),
                         format!("--probe-address=127.0.0.1:{probe_port}")],
                "env": [{"name": "NODE_NAME", "value": node.name}],
                "volumeMounts": [
                    {"name": "kubeconfig", "mountPath": "/kube", "readOnly": true},
                    {"name": "runtime-socket", "mountPath": parent(&node.containerd_socket)},
                ],
            }],
            "volumes": [
                {"name": "kubeconfig", "hostPath": {"path": parent(kubeconfig), "type": "Directory"}},
                {"name": "runtime-socket",
                 "hostPath": {"path": parent(&node.containerd_socket), "type": "Directory"}},
            ],
        }),
    )
}

/// `reference` (`host:port/repo:tag`) as a NodeImage's image and tag.
fn split_reference(reference: &str) -> (&str, &str) {
    reference.rsplit_once(':').unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_images_run_on_the_real_node() {
    let mut cluster = DevCluster::start(Options::default()).await.unwrap();
    let client = cluster.client();
    let Some(mut node) = RealNode::start_or_skip(&cluster).await else {
        return;
    };
    install_crds(&client).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();

    let work: PathBuf = node.work_dir.join("product-images");
    let manager_binary = Path::new(env!("CARGO_BIN_EXE_kruise-manager"));
    images::manager_image(&work, manager_binary).await.unwrap();
    // The host binary is another package's: `cargo test --workspace`
    // builds it beside the manager; built here when missing.
    let host_binary = host_binary();
    images::host_image(&work, &host_binary).await.unwrap();
    let pushed = images::push(&work, &node.registry, "test").await.unwrap();
    let (manager_image, host_image) = (&pushed[0], &pushed[1]);

    let (image, tag) = split_reference(&node.images.v1);
    let node_images: Api<NodeImage> = Api::all(client.clone());
    let node_image: NodeImage = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
        "metadata": {"name": node.name},
        "spec": {"images": {image: {"tags": [{"tag": tag}]}}},
    }))
    .unwrap();
    node_images
        .create(&PostParams::default(), &node_image)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let agent = agent_pod(&node, manager_image, &cluster.kubeconfig);
    pods.create(&PostParams::default(), &agent).await.unwrap();
    wait_for(
        &node_images,
        &node.name,
        "its tag pulled by the agent pod",
        |ni| {
            ni.status
                .as_ref()
                .filter(|status| status.succeeded == 1)
                .map(|_| ())
        },
    )
    .await;

    let host = pod(
        "host-version",
        &node,
        json!({"restartPolicy": "Never",
               "containers": [{"name": "host", "image": host_image, "args": ["--version"]}]}),
    );
    pods.create(&PostParams::default(), &host).await.unwrap();
    wait_for(
        &pods,
        "host-version",
        "the host image ran and exited 0",
        |pod| {
            let phase = pod.status.as_ref()?.phase.clone()?;
            assert_ne!(phase, "Failed", "{pod:#?}");
            (phase == "Succeeded").then_some(())
        },
    )
    .await;

    let left = node.stop().await;
    assert!(left.is_empty(), "teardown left: {left:#?}");
    cluster.stop();
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
