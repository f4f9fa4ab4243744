//! The Kubernetes host capabilities answered from a fixtures file: the
//! sidecarset module without sidecarSets in its settings reads them from
//! the "cluster", within its policies.yml allow-lists.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use common::{fixtures, module_file, pod_create, runtime, scratch_dir};
use kruise_policy_modules::SIDECARSET;
use kruise_wasm_host::admission::AdmissionRequest;
use kruise_wasm_host::cluster_fixtures::{ClusterFixtures, ClusterReads};
use kruise_wasm_host::policy::load_policies_with_cluster;
use kruise_wasm_host::runtime::block_on;
use serde_json::{Value, json};

fn example(name: &str) -> Value {
    let path = fixtures().join("examples").join(name);
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// scs-demo and the pod's namespace, as a cluster would hold them.
fn cluster_file(dir: &std::path::Path) -> PathBuf {
    let objects = json!([
        example("sidecarset-scs-demo.yaml"),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}},
    ]);
    let path = dir.join("cluster.yaml");
    std::fs::write(&path, serde_yaml::to_string(&objects).unwrap()).unwrap();
    path
}

fn test_pod_request() -> AdmissionRequest {
    serde_json::from_value(pod_create(&example("pod-test-pod.yaml"))).unwrap()
}

fn injected_containers(patched: &Value) -> Vec<String> {
    patched["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn sidecarsets_are_read_from_the_fixtures_within_the_allow_lists() {
    let dir = scratch_dir("cluster-policies");
    let cluster: Arc<dyn ClusterReads> = Arc::new(
        ClusterFixtures::from_yaml(&std::fs::read_to_string(cluster_file(&dir)).unwrap()).unwrap(),
    );
    let kinds = json!([
        {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet"},
        {"apiVersion": "v1", "kind": "Namespace"},
        {"apiVersion": "apps/v1", "kind": "ControllerRevision"},
    ]);
    let policies = json!({
        "granted": {"module": module_file(&SIDECARSET), "allowedToMutate": true,
                    "contextAwareResources": kinds, "hostCapabilities": ["kubernetes/*"]},
        "no-kinds": {"module": module_file(&SIDECARSET), "allowedToMutate": true,
                     "hostCapabilities": ["kubernetes/*"]},
        "no-capabilities": {"module": module_file(&SIDECARSET), "allowedToMutate": true,
                            "contextAwareResources": kinds},
    });
    let path = dir.join("policies.yml");
    std::fs::write(&path, serde_yaml::to_string(&policies).unwrap()).unwrap();
    let loaded = load_policies_with_cluster(runtime(), &path, None, Some(&cluster)).unwrap();
    let request = test_pod_request();

    let granted = block_on(loaded["granted"].validate(&request));
    assert!(granted.allowed, "{granted:?}");
    let mut pod = request.object.clone().unwrap();
    kruise_wasm_host::chain::apply_base64_patch(&mut pod, granted.patch.as_ref().unwrap()).unwrap();
    assert_eq!(injected_containers(&pod), ["sidecar1", "app"]);

    let message = |id: &str| {
        let response = block_on(loaded[id].validate(&request));
        assert!(!response.allowed, "{id}: {response:?}");
        response.status.unwrap().message.unwrap()
    };
    assert!(
        message("no-kinds").contains(
            "Policy has not been granted access to Kubernetes apps.kruise.io/v1alpha1/SidecarSet resources"
        ),
        "{}",
        message("no-kinds")
    );
    assert!(
        message("no-capabilities").contains(
            "Policy has not been granted access to the 'kubernetes/list_resources_all' host capability"
        ),
        "{}",
        message("no-capabilities")
    );
}

#[test]
fn run_reads_the_cluster_fixtures() {
    let dir = scratch_dir("cluster-run");
    let request = dir.join("request.json");
    std::fs::write(
        &request,
        pod_create(&example("pod-test-pod.yaml")).to_string(),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_kruise-wasm"))
            .args(["run", "--module"])
            .arg(module_file(&SIDECARSET))
            .arg("--request")
            .arg(&request)
            .args(extra)
            .env("KRUISE_WASM_CACHE_DIR", common::cache_dir())
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice::<Value>(&output.stdout).unwrap()
    };
    let cluster = cluster_file(&dir);
    let with_cluster = run(&["--cluster-fixtures", cluster.to_str().unwrap()]);
    assert_eq!(with_cluster["allowed"], true, "{with_cluster}");
    assert!(with_cluster["patch"].is_string());
    // Without fixtures, kwctl run's answer: no kind granted.
    let without = run(&[]);
    assert_eq!(without["allowed"], false, "{without}");
}
