//! Kubewarden's own `kwctl run` runs our context-aware modules unchanged,
//! serving their host calls from the dev cluster: the ContainerRecreateRequest
//! webhook (it reads the pod and the node) and SidecarSet injection (it
//! lists SidecarSets and reads namespaces), and every shared validation case
//! of the CloneSet and SidecarSet validating modules (the latter lists the
//! cluster's SidecarSets), and the SidecarSet defaulting module. They are Kubewarden policies, not ones only our
//! host can run. kwctl is the reference build in ../shared/tools/kubewarden
//! (or `$KRUISE_KWCTL`); without it the test fails and says where it looked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use k8s_openapi::api::core::v1::Pod;
use kruise_core::cloneset::container_status;
use kruise_devcluster::wait::wait_for;
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kruise_policy_modules::fixtures::{self, kruise_request, pod_create};
use kruise_policy_modules::{
    ALL, MUTATE_CRR, MUTATE_DEFAULTS, MUTATE_IMAGEPULL, PolicyModule, SIDECARSET,
    VALIDATE_CLONESET, VALIDATE_SIDECARSET,
};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use support::kubewarden_tool;

fn kwctl() -> PathBuf {
    kubewarden_tool("kwctl", "KRUISE_KWCTL")
}

/// `kwctl run` of the module on `request` (an AdmissionRequest); kwctl's
/// answer.
fn kwctl_run(env: &DevEnvironment, module: &Path, request: Value) -> Value {
    let mut review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
    review["request"] = request;
    let review_path = module.with_extension("review.json");
    std::fs::write(&review_path, review.to_string()).unwrap();
    let mut command = Command::new(kwctl());
    command
        .env("KUBECONFIG", env.kubeconfig())
        .args(["run", "--allow-context-aware", "--request-path"])
        .arg(&review_path)
        .arg(module);
    let stdout = stdout_of(&mut command);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("kwctl's answer: {e}: {stdout}"))
}

/// kwctl's output; the test fails when it exits non-zero.
fn stdout_of(kwctl: &mut Command) -> String {
    let output = kwctl.output().expect("kwctl runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kwctl failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The JSON patch of an accepting answer, applied to `object`.
fn patched(answer: &Value, mut object: Value) -> Value {
    assert_eq!(answer["allowed"], true, "{answer:#}");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(answer["patch"].as_str().expect("a patch"))
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    json_patch::patch(&mut object, &patch).unwrap();
    object
}

fn crr_create(object: &Value) -> Value {
    kruise_request(
        "ContainerRecreateRequest",
        "containerrecreaterequests",
        "CREATE",
        object,
        None,
    )
}

fn crr(name: &str, containers: &[&str]) -> Value {
    let containers: Vec<Value> = containers.iter().map(|c| json!({"name": c})).collect();
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"podName": "target", "containers": containers},
    })
}

/// `kwctl inspect` reads every module's metadata as we wrote it (the
/// io.kubewarden.metadata section policies/modules/build.rs appends).
#[test]
fn kwctl_inspect_reads_every_modules_metadata() {
    let dir = std::env::temp_dir().join(format!("kruise-kwctl-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for module in ALL {
        let path = dir.join(format!("{}.wasm", module.name));
        std::fs::write(&path, module.wasm).unwrap();
        let stdout = stdout_of(
            Command::new(kwctl())
                .args(["inspect", "--output", "yaml"])
                .arg(format!("file://{}", path.display())),
        );
        let mut theirs: Value = serde_yaml::from_str(&stdout).unwrap();
        let mut ours = kruise_policy_modules::metadata(module).unwrap();
        // kwctl holds the context-aware resources as a set (none at all
        // may be written as no list).
        for metadata in [&mut theirs, &mut ours] {
            let mut resources: Vec<Value> = metadata["contextAwareResources"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            resources.sort_by_key(Value::to_string);
            metadata["contextAwareResources"] = json!(resources);
        }
        for key in [
            "rules",
            "mutating",
            "backgroundAudit",
            "contextAwareResources",
            "executionMode",
            "policyType",
            "annotations",
        ] {
            assert_eq!(theirs[key], ours[key], "{}: {key}: {stdout}", module.name);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kwctl_runs_our_context_aware_modules_against_the_dev_cluster() {
    let env = DevEnvironment::start(DevOptions::default()).await.unwrap();
    the_crr_webhook(&env).await;
    sidecarset_injection(&env);
    validation_cases(&env, &VALIDATE_CLONESET, "CloneSet", "clonesets", 20);
    validation_cases(&env, &VALIDATE_SIDECARSET, "SidecarSet", "sidecarsets", 20);
    validation_cases(&env, &MUTATE_IMAGEPULL, "ImagePullJob", "imagepulljobs", 15);
    validation_cases(&env, &MUTATE_IMAGEPULL, "NodeImage", "nodeimages", 6);
    sidecar_set_defaults(&env);
    env.shutdown().await;
}

/// The defaulting module under kwctl: the user's SidecarSet comes back
/// defaulted, with the hash annotations of its defaulted spec.
fn sidecar_set_defaults(env: &DevEnvironment) {
    let module = env.cluster.work_dir.join("kwctl-mutate-defaults.wasm");
    std::fs::write(&module, MUTATE_DEFAULTS.wasm).unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../policies/fixtures/examples/sidecarset-scs-demo.yaml");
    let object: Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let request = kruise_request("SidecarSet", "sidecarsets", "CREATE", &object, None);
    let stored = patched(&kwctl_run(env, &module, request), object);
    assert_eq!(stored["spec"]["updateStrategy"]["type"], "RollingUpdate");
    let parsed: kruise_api::SidecarSet = serde_json::from_value(stored.clone()).unwrap();
    let (hash, without_image) = kruise_core::sidecarset::sidecarset_hashes(&parsed.spec);
    let annotations = &stored["metadata"]["annotations"];
    assert_eq!(
        annotations["kruise.io/sidecarset-hash"],
        hash.as_str(),
        "{stored:#}"
    );
    assert_eq!(
        annotations["kruise.io/sidecarset-hash-without-image"],
        without_image.as_str()
    );
}

async fn the_crr_webhook(env: &DevEnvironment) {
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "target"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let running = wait_for(&pods, "target", "app has a container", |p| {
        container_status(p, "app")?.container_id.as_ref()?;
        Some(p.clone())
    })
    .await;
    let module = env.cluster.work_dir.join("kwctl-mutate-crr.wasm");
    std::fs::write(&module, MUTATE_CRR.wasm).unwrap();

    let request = crr("r", &["app"]);
    let answer = kwctl_run(env, &module, crr_create(&request));
    let mutated = patched(&answer, request);
    let labels = &mutated["metadata"]["labels"];
    assert_eq!(
        labels["crr.apps.kruise.io/pod-uid"],
        json!(running.metadata.uid)
    );
    assert_eq!(
        labels["crr.apps.kruise.io/node-name"],
        json!(running.spec.as_ref().unwrap().node_name)
    );
    assert_eq!(
        mutated["spec"]["containers"][0]["statusContext"]["containerID"],
        json!(container_status(&running, "app").unwrap().container_id)
    );

    let refused = kwctl_run(env, &module, crr_create(&crr("bad", &["app", "nope"])));
    assert_eq!(refused["allowed"], false, "{refused:#}");
    let message = refused["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("nope"), "{refused:#}");
}

/// The user's scs-demo SidecarSet, stored in the cluster, injected by the
/// module into the user's test pod as kwctl runs it.
fn sidecarset_injection(env: &DevEnvironment) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/fixtures/examples");
    let sidecar_set = examples.join("sidecarset-scs-demo.yaml");
    let applied = Command::new("kubectl")
        .env("KUBECONFIG", env.kubeconfig())
        .args(["apply", "-f"])
        .arg(&sidecar_set)
        .output()
        .expect("kubectl runs");
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let module = env.cluster.work_dir.join("kwctl-sidecarset.wasm");
    std::fs::write(&module, SIDECARSET.wasm).unwrap();
    let text = std::fs::read_to_string(examples.join("pod-test-pod.yaml")).unwrap();
    let mut pod: Value = serde_yaml::from_str(&text).unwrap();
    pod["metadata"]["namespace"] = json!("default");
    let answer = kwctl_run(env, &module, pod_create(&pod));
    let injected = patched(&answer, pod);
    let names: Vec<&str> = injected["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["sidecar1", "app"], "{injected:#}");
}

/// Every shared validation case of `kind` (at least `min_cases`, from
/// `policies/fixtures/<kind>/validation.yaml`) refused by kwctl (422)
/// naming the field, and the base admitted.
fn validation_cases(
    env: &DevEnvironment,
    module: &PolicyModule,
    kind: &str,
    resource: &str,
    min_cases: usize,
) {
    let path = env
        .cluster
        .work_dir
        .join(format!("kwctl-{}.wasm", module.name));
    std::fs::write(&path, module.wasm).unwrap();
    let (base, cases) = fixtures::validation_cases(&kind.to_lowercase()).unwrap();
    let create = |object: &Value| kruise_request(kind, resource, "CREATE", object, None);
    let accepted = kwctl_run(env, &path, create(&base));
    assert_eq!(accepted["allowed"], true, "{kind} base: {accepted:#}");
    assert!(cases.len() >= min_cases, "{kind}: {} cases", cases.len());
    for case in cases {
        let answer = kwctl_run(env, &path, create(&case.object));
        assert_eq!(answer["allowed"], false, "{}: {answer:#}", case.name);
        assert_eq!(answer["status"]["code"], 422, "{}: {answer:#}", case.name);
        let message = answer["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!(": {}:", case.refused)),
            "{}: {message}",
            case.name
        );
    }
}
