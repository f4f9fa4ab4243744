//! Evaluations that start from a snapshot taken after `validate_settings`
//! (`Runtime::load_snapshot`, `policy::load_module`): the state the call
//! left is where every evaluation starts, each evaluation still starts
//! from that state alone, and a module that cannot be snapshotted is
//! served as it is. And the cluster snapshots of a policy that reads the
//! cluster (`cluster_snapshot`): fresh while their reads answer the same.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::runtime;
use kruise_wasm_host::admission::{AdmissionRequest, Enforcement, Settings};
use kruise_wasm_host::capabilities::{Grants, PolicyHost};
use kruise_wasm_host::cluster_fixtures::{ClusterFixtures, ClusterReads, GetRequest, ListRequest};
use kruise_wasm_host::cluster_snapshot::{Observation, Timing, keep_fresh};
use kruise_wasm_host::metadata::Metadata;
use kruise_wasm_host::policy::{Policy, load_module};
use kruise_wasm_host::runtime::{
    DEFAULT_TIMEOUT, HostCalls, Limits, LoadError, NoHostCalls, block_on,
};
use serde_json::json;

/// A waPC guest that counts its calls in a global and in memory:
/// `validate_settings` (an operation name of 17 bytes) sets a flag in
/// memory and counts in the global `$prepared`; every call counts in
/// `$calls`. It answers three bytes: `$prepared`, `$calls` (as digits) and
/// the flag.
fn counting_guest(extra: &str) -> Vec<u8> {
    let metadata = json!({
        "protocolVersion": "v1",
        "annotations": {"io.kruise-wasm/snapshot-after-validate-settings": "true"},
    });
    let wat = format!(
        r#"(module
            (import "wapc" "__guest_response" (func $response (param i32 i32)))
            (memory (export "memory") 1)
            (table $t 1 funcref)
            (global $prepared (mut i32) (i32.const 0))
            (global $calls (mut i32) (i32.const 0))
            (data (i32.const 100) "-")
            (func (export "__guest_call") (param $op i32) (param $payload i32) (result i32)
              (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
              (if (i32.eq (local.get $op) (i32.const 17))
                (then
                  {extra}
                  (global.set $prepared (i32.add (global.get $prepared) (i32.const 1)))
                  (i32.store8 (i32.const 100) (i32.const 0x50))))
              (i32.store8 (i32.const 200) (i32.add (i32.const 48) (global.get $prepared)))
              (i32.store8 (i32.const 201) (i32.add (i32.const 48) (global.get $calls)))
              (i32.store8 (i32.const 202) (i32.load8_u (i32.const 100)))
              (call $response (i32.const 200) (i32.const 3))
              (i32.const 1))
            (@custom "io.kubewarden.metadata" "{metadata}"))"#,
        metadata = metadata.to_string().replace('"', "\\\"")
    );
    wat::parse_str(wat).expect("valid WAT")
}

fn limits() -> Limits {
    runtime().limits(Some(DEFAULT_TIMEOUT))
}

fn validate(module: &kruise_wasm_host::runtime::CompiledModule) -> String {
    let answer = block_on(module.call("validate", b"{}", limits(), Arc::new(NoHostCalls)));
    String::from_utf8(answer.unwrap()).unwrap()
}

fn some_settings() -> Settings {
    let mut settings = Settings::new();
    settings.insert("k".to_owned(), json!("v"));
    settings
}

#[test]
fn each_evaluation_starts_from_the_state_validate_settings_left() {
    let wasm = counting_guest("");
    let plain = runtime().load(&wasm).unwrap();
    assert_eq!(validate(&plain), "01-", "the module's own initial state");
    assert_eq!(validate(&plain), "01-", "a fresh instance per evaluation");

    let snapshot = runtime()
        .load_snapshot(&wasm, "validate_settings", b"{}", limits())
        .unwrap();
    // One validate_settings before: its global and its memory write kept.
    assert_eq!(validate(&snapshot), "12P");
    // And nothing of an evaluation reaches the next one.
    assert_eq!(validate(&snapshot), "12P");
}

#[test]
fn a_policy_with_settings_is_loaded_from_its_snapshot_when_its_module_asks() {
    let wasm = counting_guest("");
    let metadata = Metadata::of(&wasm).unwrap();
    let with_settings =
        load_module(runtime(), "p", &wasm, &metadata, &some_settings(), limits()).unwrap();
    assert_eq!(validate(&with_settings), "12P");
    // Without settings there is nothing to prepare.
    let without =
        load_module(runtime(), "p", &wasm, &metadata, &Settings::new(), limits()).unwrap();
    assert_eq!(validate(&without), "01-");
}

/// The snapshot of `wasm` fails with an error that names `cause`, and a
/// policy with settings is served from the module's own initial state.
fn assert_not_snapshotted_but_served(wasm: &[u8], cause: &str) {
    let error = runtime()
        .load_snapshot(wasm, "validate_settings", b"{}", limits())
        .unwrap_err();
    assert!(matches!(error, LoadError::Snapshot(_)), "{error:?}");
    assert!(error.to_string().contains(cause), "{error}");
    let metadata = Metadata::of(wasm).unwrap();
    let served = load_module(runtime(), "p", wasm, &metadata, &some_settings(), limits()).unwrap();
    assert_eq!(validate(&served), "01-");
}

#[test]
fn a_guest_that_fails_validate_settings_is_not_snapshotted_and_served_as_it_is() {
    assert_not_snapshotted_but_served(&counting_guest("(unreachable)"), "validate_settings");
}

#[test]
fn a_module_wizer_cannot_snapshot_is_served_as_it_is() {
    // Wizer refuses modules that grow tables: tables are not in a snapshot.
    let wasm = counting_guest("(drop (table.grow $t (ref.null func) (i32.const 1)))");
    assert_not_snapshotted_but_served(&wasm, "table.grow");
}

/// Every evaluation from one snapshot draws its own random numbers: the
/// snapshot holds the guest's state after `validate_settings`, the seed of
/// its random source included, and a guest must not draw from that seed
/// alone. The sidecarset policy reads its SidecarSets from the cluster
/// here, with settings (so that it is snapshotted), and a `Partial`
/// revision policy at 50 % gives each pod the old revision on a coin flip:
/// 40 pods must not all land on the same side (odds 2 in 2^40 if fair),
/// from the snapshot as from the module's own initial state.
#[test]
fn evaluations_from_one_snapshot_draw_their_own_random_numbers() {
    let wasm = kruise_policy_modules::SIDECARSET.wasm;
    let settings = json!({"namespaceLabels": null});
    let snapshot = runtime()
        .load_snapshot(
            wasm,
            "validate_settings",
            settings.to_string().as_bytes(),
            limits(),
        )
        .unwrap();
    let plain = runtime().load(wasm).unwrap();
    for (module, started) in [(&snapshot, "a snapshot"), (&plain, "the module")] {
        let images = sidecar_images_of_40_pods(module, &settings);
        assert_eq!(
            images.len(),
            2,
            "from {started}, every pod drew the same: {images:?}"
        );
    }
}

/// How many of 40 pods got each sidecar image from `module`, under a
/// SidecarSet whose `Partial` revision policy flips a coin per pod.
fn sidecar_images_of_40_pods(
    module: &kruise_wasm_host::runtime::CompiledModule,
    settings: &serde_json::Value,
) -> std::collections::BTreeMap<String, usize> {
    let sidecar_set = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "coin", "annotations": {
            "kruise.io/sidecarset-hash": "new", "kruise.io/sidecarset-hash-without-image": "new"}},
        "spec": {
            "selector": {"matchLabels": {"app": "demo"}},
            "containers": [{"name": "sidecar", "image": "sidecar:new"}],
            "updateStrategy": {"partition": "50%"},
            "injectionStrategy": {"revision": {"customVersion": "v1", "policy": "Partial"}},
        },
    });
    let revision = json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": "coin-v1", "namespace": "kruise-system", "labels": {
            "kruise.io/sidecarset-name": "coin",
            "apps.kruise.io/sidecarset-custom-version": "v1"}},
        "revision": 1,
        "data": {"spec": {"$patch": "replace",
            "containers": [{"name": "sidecar", "image": "sidecar:old"}]}},
    });
    let cluster: common::HostFn = Arc::new(move |_, _, operation, payload| {
        let asked: serde_json::Value = serde_json::from_slice(payload).unwrap();
        let items = match (operation, asked["kind"].as_str()) {
            ("list_resources_all", Some("SidecarSet")) => json!([sidecar_set]),
            ("list_resources_by_namespace", Some("ControllerRevision")) => json!([revision]),
            other => return Err(format!("not in this cluster: {other:?}")),
        };
        Ok(
            serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
                .unwrap(),
        )
    });
    let mut images = std::collections::BTreeMap::new();
    for n in 0..40 {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("pod-{n}"), "namespace": "default", "labels": {"app": "demo"}},
            "spec": {"containers": [{"name": "app", "image": "demo"}]}});
        let payload = common::validation_request(&common::pod_create(&pod), settings);
        let answer = block_on(module.call(
            "validate",
            &payload,
            limits(),
            Arc::new(common::FnHost(Arc::clone(&cluster))),
        ))
        .unwrap();
        let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        let containers = answer["mutated_object"]["spec"]["containers"].as_array();
        let image = containers
            .and_then(|containers| containers.iter().find(|c| c["name"] == "sidecar"))
            .and_then(|sidecar| sidecar["image"].as_str())
            .unwrap_or_else(|| panic!("pod-{n} not injected: {answer}"))
            .to_owned();
        *images.entry(image).or_insert(0) += 1;
    }
    images
}

/// A cluster whose objects the test replaces.
#[derive(Debug)]
struct Replaceable(std::sync::Mutex<ClusterFixtures>);

impl Replaceable {
    fn with_sidecar_image(image: &str) -> ClusterFixtures {
        let sidecar_set = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": "scs", "uid": "u1", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "demo"}},
                     "containers": [{"name": "sidecar", "image": image}]},
        });
        ClusterFixtures::from_yaml(&json!([sidecar_set]).to_string()).unwrap()
    }
}

impl ClusterReads for Replaceable {
    fn list(&self, request: &ListRequest) -> Result<Vec<u8>, String> {
        self.0.lock().unwrap().list(request)
    }
    fn get(&self, request: &GetRequest) -> Result<Vec<u8>, String> {
        self.0.lock().unwrap().get(request)
    }
}

/// The sidecarset policy without settings (reading the cluster through
/// `host`), from the module's own initial state.
fn sidecarset_policy(host: Arc<dyn HostCalls>) -> Policy {
    Policy::new(
        "sidecarset",
        runtime()
            .load(kruise_policy_modules::SIDECARSET.wasm)
            .unwrap(),
        &Settings::new(),
        Enforcement::kwctl_run("sidecarset"),
        limits(),
        host,
    )
}

/// The sidecar image `policy` injects into a pod of the SidecarSet.
fn injected_image(policy: &Policy) -> String {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "demo"}},
        "spec": {"containers": [{"name": "app", "image": "demo"}]}});
    let request = AdmissionRequest::from_document(json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": common::pod_create(&pod)}))
    .unwrap();
    let response = block_on(policy.validate(&request));
    let patch = response
        .patch
        .as_ref()
        .unwrap_or_else(|| panic!("not injected: {response:?}"));
    let patch = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .unwrap();
    let patch: serde_json::Value = serde_json::from_slice(&patch).unwrap();
    let text = patch.to_string();
    ["sidecar:1", "sidecar:2"]
        .into_iter()
        .find(|image| text.contains(image))
        .unwrap_or_else(|| panic!("no sidecar image in {text}"))
        .to_owned()
}

/// A policy that reads the cluster's SidecarSets evaluates from a snapshot
/// taken after `read_cluster` once its caches have filled (by the thread
/// the server starts, `keep_fresh`); the snapshot
/// is fresh while the reads it made answer the same. When the SidecarSet
/// changes, evaluations from the stale snapshot read the new one (a stale
/// snapshot costs a read, not a wrong answer), and a new snapshot holds it.
#[test]
fn a_cluster_snapshot_is_fresh_until_its_reads_answer_otherwise() {
    let wasm = kruise_policy_modules::SIDECARSET.wasm;
    let metadata = Metadata::of(wasm).unwrap();
    let cluster = Arc::new(Replaceable(
        Replaceable::with_sidecar_image("sidecar:1").into(),
    ));
    let host = PolicyHost {
        policy_id: "sidecarset".to_owned(),
        grants: Grants {
            host_capabilities: vec!["kubernetes/*".to_owned()],
            context_aware_resources: metadata.context_aware_resources.clone(),
        },
        cluster: Some(Arc::clone(&cluster) as Arc<dyn ClusterReads>),
    };
    let policy = sidecarset_policy(Arc::new(host))
        .with_cluster_reads(cluster.clone(), metadata.context_aware_resources)
        .with_cluster_snapshot(runtime(), wasm);
    assert_eq!(
        policy.observe_cluster_snapshot(),
        Some((Observation::NotTaken, true))
    );
    assert_eq!(injected_image(&policy), "sidecar:1", "from the module");
    let loaded = policy.module_digest();

    // The server's thread takes the first one as soon as it can; this one
    // never takes another within the test.
    let policy = Arc::new(policy);
    let once = Timing {
        check_every: Duration::from_millis(50),
        settle: Duration::from_hours(1),
        min_interval: Duration::from_hours(1),
    };
    keep_fresh(&policy, once).unwrap();
    let deadline = Instant::now() + Duration::from_mins(10);
    while policy.observe_cluster_snapshot() != Some((Observation::Fresh, true)) {
        assert!(Instant::now() < deadline, "no snapshot taken");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(injected_image(&policy), "sidecar:1", "from the snapshot");
    let first = policy.module_digest();
    assert_ne!(first, loaded, "evaluations start from the snapshot");

    *cluster.0.lock().unwrap() = Replaceable::with_sidecar_image("sidecar:2");
    assert!(matches!(
        policy.observe_cluster_snapshot(),
        Some((Observation::Stale(_), true))
    ));
    assert_eq!(
        injected_image(&policy),
        "sidecar:2",
        "from the stale snapshot"
    );

    policy.take_cluster_snapshot().unwrap();
    assert_eq!(
        policy.observe_cluster_snapshot(),
        Some((Observation::Fresh, true))
    );
    assert_eq!(
        injected_image(&policy),
        "sidecar:2",
        "from the new snapshot"
    );
    assert_ne!(policy.module_digest(), first, "a new snapshot is in use");
}

/// A policy that reads no cluster takes no cluster snapshot.
#[test]
fn only_a_policy_that_reads_the_cluster_takes_cluster_snapshots() {
    let wasm = kruise_policy_modules::SIDECARSET.wasm;
    let policy = sidecarset_policy(Arc::new(NoHostCalls)).with_cluster_snapshot(runtime(), wasm);
    assert!(!policy.takes_cluster_snapshots());
    assert_eq!(policy.observe_cluster_snapshot(), None);
    assert!(policy.take_cluster_snapshot().is_err());
}
