//! Loading a policies.yml: good policies evaluate with their enforcement,
//! and any bad one stops start-up with a message naming it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{FillingCluster, module_file, pod_create, runtime, scratch_dir};
use futures::FutureExt as _;
use kruise_policy_modules::{LAUNCH_PRIORITY, SIDECARSET};
use std::sync::Arc;
use std::time::Duration;

use kruise_wasm_host::admission::{AdmissionRequest, AdmissionResponse};
use kruise_wasm_host::cluster_fixtures::ClusterReads;
use kruise_wasm_host::policy::{StartupError, load_policies, load_policies_with_cluster};
use kruise_wasm_host::runtime::{DEFAULT_TIMEOUT, block_on};
use serde_json::{Value, json};
use tokio::sync::watch;

fn policies_yml(test_name: &str, yaml: &str) -> PathBuf {
    let path = scratch_dir(test_name).join("policies.yml");
    let yaml = yaml
        .replace(
            "LAUNCH_PRIORITY",
            &module_file(&LAUNCH_PRIORITY).display().to_string(),
        )
        .replace(
            "SIDECARSET",
            &module_file(&SIDECARSET).display().to_string(),
        );
    std::fs::write(&path, yaml).unwrap();
    path
}

fn ordered_pod_create() -> AdmissionRequest {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "annotations": {"apps.kruise.io/container-launch-priority": "Ordered"}},
        "spec": {"containers": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]}});
    AdmissionRequest::from_document(pod_create(&pod)).unwrap()
}

#[test]
fn policies_are_enforced_as_configured() {
    let path = policies_yml(
        "policies-enforced",
        "
mutating:
  module: file://LAUNCH_PRIORITY
  allowedToMutate: true
validating:
  module: file://LAUNCH_PRIORITY
monitored:
  module: file://LAUNCH_PRIORITY
  policyMode: monitor
custom:
  module: file://LAUNCH_PRIORITY
  message: pods must not be ordered here
  timeoutEvalSeconds: 5
injection:
  module: file://SIDECARSET
  allowedToMutate: true
  settings:
    sidecarSets: []
",
    );
    let policies = load_policies(runtime(), &path, Some(DEFAULT_TIMEOUT)).unwrap();
    assert_eq!(policies.len(), 5);
    let request = ordered_pod_create();

    let mutated = block_on(policies["mutating"].validate(&request));
    assert!(mutated.allowed);
    assert!(mutated.patch.is_some());

    let refused = block_on(policies["validating"].validate(&request));
    assert!(!refused.allowed);
    assert_eq!(refused.patch, None);
    assert_eq!(
        refused.status.as_ref().unwrap().message.as_deref(),
        Some(
            "Request rejected by policy validating. The policy attempted to mutate the request, but it is currently configured to not allow mutations."
        )
    );
    // /audit sees the policy's own answer.
    assert!(
        block_on(policies["validating"].audit(&request))
            .patch
            .is_some()
    );

    let monitored = block_on(policies["monitored"].validate(&request));
    assert!(monitored.allowed);
    assert_eq!(monitored.patch, None);

    let custom = serde_json::to_value(block_on(policies["custom"].validate(&request))).unwrap();
    assert_eq!(custom["status"]["message"], "pods must not be ordered here");
    assert!(
        custom["status"]["details"]["causes"][0]["message"]
            .as_str()
            .unwrap()
            .contains("not allow mutations")
    );

    // Without SidecarSets nothing is injected, and the pod passes.
    let injection = block_on(policies["injection"].validate(&request));
    assert!(injection.allowed);
    assert_eq!(injection.patch, None);
}

#[test]
fn a_timeout_past_what_the_clock_counts_is_no_deadline() {
    let path = policies_yml(
        "policies-endless-timeout",
        "forever:\n  module: LAUNCH_PRIORITY\n  allowedToMutate: true\n  timeoutEvalSeconds: 18446744073709551615\n",
    );
    let policies = load_policies(runtime(), &path, Some(DEFAULT_TIMEOUT)).unwrap();
    let answer = block_on(policies["forever"].validate(&ordered_pod_create()));
    assert!(answer.allowed);
    assert!(answer.patch.is_some());
}

fn startup_error(test_name: &str, yaml: &str) -> String {
    load_policies(
        runtime(),
        &policies_yml(test_name, yaml),
        Some(DEFAULT_TIMEOUT),
    )
    .unwrap_err()
    .to_string()
}

#[test]
fn invalid_settings_stop_start_up_naming_the_policy() {
    let error = startup_error(
        "policies-bad-settings",
        "good:\n  module: LAUNCH_PRIORITY\nbad:\n  module: LAUNCH_PRIORITY\n  settings: {priority: 1}\n",
    );
    assert!(
        error.starts_with("policy `bad`: settings are not valid: "),
        "{error}"
    );
    assert!(error.contains("unknown field `priority`"), "{error}");

    let error = startup_error(
        "policies-settings-list",
        "p:\n  module: LAUNCH_PRIORITY\n  settings: [1]\n",
    );
    assert_eq!(error, "policy `p`: settings must be an object, not a list");
}

#[test]
fn modules_that_cannot_be_served_stop_start_up() {
    let error = startup_error(
        "policies-missing",
        "gone:\n  module: /nonexistent/policy.wasm\n",
    );
    assert!(
        error.starts_with("policy `gone`: cannot read module /nonexistent/policy.wasm"),
        "{error}"
    );

    // policy-server refuses modules without Kubewarden metadata.
    let dir = scratch_dir("policies-unannotated");
    let bare = wat::parse_str(
        r#"(module (memory (export "memory") 1)
             (func (export "__guest_call") (param i32 i32) (result i32) (i32.const 0)))"#,
    )
    .unwrap();
    std::fs::write(dir.join("bare.wasm"), bare).unwrap();
    std::fs::write(dir.join("policies.yml"), "bare:\n  module: bare.wasm\n").unwrap();
    let error = load_policies(runtime(), &dir.join("policies.yml"), None)
        .unwrap_err()
        .to_string();
    assert!(error.starts_with("policy `bare`: module "), "{error}");
    assert!(
        error.contains("no io.kubewarden.metadata section"),
        "{error}"
    );

    let error = startup_error(
        "policies-remote",
        "remote:\n  module: registry://ghcr.io/kubewarden/policies/x:v1\n",
    );
    assert!(error.contains("policy `remote`: module `registry://ghcr.io/kubewarden/policies/x:v1` is not a local file"), "{error}");

    let error = startup_error(
        "policies-group",
        "g:\n  expression: a()\n  message: m\n  policies:\n    a: {module: LAUNCH_PRIORITY}\n",
    );
    assert_eq!(error, "policy `g`: policy groups are not supported yet");

    let missing_file = load_policies(
        runtime(),
        std::path::Path::new("/nonexistent/policies.yml"),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(missing_file, StartupError::Read { .. }),
        "{missing_file:?}"
    );
}

#[test]
fn a_raw_policy_diffs_against_the_whole_request() {
    let policies_file = policies_yml(
        "policies-raw",
        "lp:\n  module: LAUNCH_PRIORITY\n  allowedToMutate: true\n",
    );
    let policies = load_policies(runtime(), &policies_file, None).unwrap();
    // As policy-server does for raw policies: the mutated object is diffed
    // against the request itself, not against `request.object`.
    let raw: Value = serde_json::to_value(ordered_pod_create()).unwrap();
    let response = block_on(policies["lp"].validate_raw(&raw));
    assert_eq!(response.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
    let patch = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        response.patch.unwrap(),
    )
    .unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    assert!(
        patch
            .as_array()
            .unwrap()
            .contains(&json!({"op": "remove", "path": "/operation"})),
        "{patch}"
    );
}

/// A policy granted a kind to read runs its guest only once the host's
/// watch cache of that kind has filled (they fill after the server starts);
/// one that reads nothing never waits. The server waits first, with
/// `wait_for_cluster`, until a deadline; a cache still unfilled then, or
/// whose watch stopped, costs each such request a refusal that says so.
#[test]
fn policies_that_read_the_cluster_wait_for_its_caches() {
    let path = policies_yml(
        "policies-wait-for-caches",
        "
reader:
  module: file://LAUNCH_PRIORITY
  allowedToMutate: true
  contextAwareResources:
    - {apiVersion: v1, kind: Namespace}
blind:
  module: file://LAUNCH_PRIORITY
  allowedToMutate: true
",
    );
    let load = |filled: watch::Receiver<bool>| {
        let cluster: Arc<dyn ClusterReads> = Arc::new(FillingCluster(filled));
        load_policies_with_cluster(runtime(), &path, Some(DEFAULT_TIMEOUT), Some(&cluster)).unwrap()
    };
    let request = ordered_pod_create();
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let _in_tokio = tokio.enter();
    // Far enough not to be reached when a wait works, near enough for a
    // broken one to fail the test rather than hang it.
    let long_after = || tokio::time::Instant::now() + Duration::from_secs(30);
    let refusal = |response: AdmissionResponse| {
        assert!(!response.allowed, "{response:?}");
        response.status.unwrap().message.unwrap()
    };

    let (fill, filled) = watch::channel(false);
    let policies = load(filled);
    let (reader, blind) = (&policies["reader"], &policies["blind"]);
    assert!(
        blind
            .wait_for_cluster(long_after())
            .now_or_never()
            .is_some()
    );
    let answer = block_on(blind.validate(&request));
    assert!(answer.allowed && answer.patch.is_some(), "{answer:?}");
    assert!(
        reader
            .wait_for_cluster(long_after())
            .now_or_never()
            .is_none()
    );
    assert_eq!(
        refusal(block_on(reader.validate(&request))),
        "internal server error: the cache of Namespace has not filled yet"
    );
    // The wait ends when the cache fills, not at its deadline, and the
    // guest then runs.
    let deadline = long_after();
    let filled_when_waited = tokio.block_on(async {
        let waiting = async {
            reader.wait_for_cluster(deadline).await;
            assert!(tokio::time::Instant::now() < deadline);
            *fill.borrow()
        };
        let filling = async {
            tokio::task::yield_now().await;
            fill.send_replace(true);
        };
        tokio::join!(waiting, filling).0
    });
    assert!(filled_when_waited);
    let answer = block_on(reader.validate(&request));
    assert!(answer.allowed && answer.patch.is_some(), "{answer:?}");

    // A cache that never fills: the wait ends at its deadline.
    let (_never, filled) = watch::channel(false);
    let policies = load(filled);
    let soon = tokio::time::Instant::now() + Duration::from_millis(50);
    tokio.block_on(policies["reader"].wait_for_cluster(soon));
    assert!(tokio::time::Instant::now() >= soon);
    assert_eq!(
        refusal(block_on(policies["reader"].validate(&request))),
        "internal server error: the cache of Namespace has not filled yet"
    );

    // A watch that stopped: nothing to wait for.
    let (stop, filled) = watch::channel(false);
    let policies = load(filled);
    drop(stop);
    let reader = &policies["reader"];
    assert!(
        reader
            .wait_for_cluster(long_after())
            .now_or_never()
            .is_some()
    );
    assert_eq!(
        refusal(block_on(reader.validate(&request))),
        "internal server error: the watch of Namespace has stopped"
    );
}
