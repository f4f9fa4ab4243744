//! The sidecarset module on every injection golden case: SidecarSets given
//! inline in the settings, and read from a cluster through Kubewarden host
//! calls. The module must answer exactly as the native policy (and so as the
//! core) does; only `updateTimestamp`, which comes from the clock, is
//! normalised.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guest;

use std::collections::BTreeMap;

use guest::{Guest, custom_sections, validation_request};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kruise_policy_modules::SIDECARSET;
use kruise_policy_sidecarset::{Cluster, Environment, NoCluster, Settings, evaluate};
use serde_json::{Value, json};

fn cases() -> Vec<(String, Value)> {
    guest::golden_cases("injection")
}

fn request(case: &Value) -> Value {
    let mut request = guest::pod_create(&case["pod"]);
    if let Some(namespace) = case["namespace"].as_str() {
        request["namespace"] = json!(namespace);
    }
    request
}

fn pod_namespace(case: &Value) -> String {
    case["pod"]["metadata"]["namespace"]
        .as_str()
        .or(case["namespace"].as_str())
        .unwrap_or("default")
        .to_owned()
}

fn inline_settings(case: &Value) -> Value {
    let mut settings = json!({"sidecarSets": case["sidecarSets"]});
    if !case["namespaceLabels"].is_null() {
        settings["namespaceLabels"] = json!({ pod_namespace(case): case["namespaceLabels"] });
    }
    settings
}

/// The cluster a case describes, answering as Kubewarden's host would.
#[derive(Clone)]
struct CaseCluster {
    case: Value,
}

impl CaseCluster {
    fn host_call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, String> {
        assert_eq!((binding, namespace), ("kubewarden", "kubernetes"));
        let asked: Value = serde_json::from_slice(payload).unwrap();
        let answer = match (operation, asked["kind"].as_str().unwrap()) {
            ("list_resources_all", "SidecarSet") => {
                json!({"apiVersion": "v1", "kind": "List", "items": self.case["sidecarSets"]})
            }
            ("get_resource", "Namespace") => json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": asked["name"], "labels": self.case["namespaceLabels"]}}),
            ("list_resources_by_namespace", "ControllerRevision") => {
                assert_eq!(asked["namespace"], "kruise-system");
                let items: Vec<Value> = self.case["revisions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                json!({"apiVersion": "v1", "kind": "List", "items": items})
            }
            other => return Err(format!("unexpected host call {other:?}")),
        };
        Ok(serde_json::to_vec(&answer).unwrap())
    }
}

impl Cluster for CaseCluster {
    fn sidecar_sets_answer(&self) -> Result<Vec<u8>, String> {
        self.host_call(
            "kubewarden",
            "kubernetes",
            "list_resources_all",
            br#"{"kind":"SidecarSet"}"#,
        )
    }
    fn namespace_labels(&self, _: &str) -> Result<BTreeMap<String, String>, String> {
        Ok(serde_json::from_value(self.case["namespaceLabels"].clone()).unwrap_or_default())
    }
    fn sidecar_set_revisions(&self, _: &str) -> Result<Vec<ControllerRevision>, String> {
        let items = self.case["revisions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(items
            .into_iter()
            .map(|r| serde_json::from_value(r).unwrap())
            .collect())
    }
}

/// Hash records carry the evaluation time; set it to one value.
fn normalise(response: &mut Value) {
    if let Some(metadata) = response.pointer_mut("/mutated_object/metadata") {
        kruise_policy_modules::fixtures::blank_hash_timestamps(metadata).unwrap();
    }
}

fn native<C: Cluster>(case: &Value, settings: &Value, cluster: &C, draw: f64) -> Value {
    let text = request(case).to_string();
    let request = serde_json::from_str(&text).unwrap();
    let settings: Settings = serde_json::from_value(settings.clone()).unwrap();
    let environment = Environment {
        now: "2026-11-29T10:00:00Z",
        random_draw: Some(draw),
        cluster,
    };
    let mut response =
        serde_json::to_value(evaluate(&request, &settings, &environment).into_response()).unwrap();
    normalise(&mut response);
    response
}

fn wasm(guest: &Guest, case: &Value, settings: &Value) -> Value {
    let mut response = guest.call_json("validate", &validation_request(&request(case), settings));
    normalise(&mut response);
    response
}

/// The module's answer must be the native one; with the `Partial` revision
/// policy the module's coin is its own, so either side of it will do.
fn assert_same(name: &str, mode: &str, wasm: &Value, natives: &[Value]) {
    assert!(
        natives.contains(wasm),
        "{name} ({mode}): the module answered\n{wasm:#}\nnatively\n{:#}",
        serde_json::to_value(natives).unwrap()
    );
}

fn draws(case: &Value) -> Vec<f64> {
    let partial = case["sidecarSets"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["spec"]["injectionStrategy"]["revision"]["policy"] == "Partial");
    if partial {
        vec![0.0, 0.999_999]
    } else {
        vec![0.5]
    }
}

#[test]
fn every_case_with_inline_sidecarsets_matches_the_native_policy() {
    let guest = Guest::new(SIDECARSET.wasm);
    let mut checked = 0;
    for (name, case) in cases() {
        if case["revisions"].is_array() {
            continue; // revisions come only from a cluster
        }
        let settings = inline_settings(&case);
        let natives: Vec<Value> = draws(&case)
            .into_iter()
            .map(|d| native(&case, &settings, &NoCluster, d))
            .collect();
        assert_same(&name, "inline", &wasm(&guest, &case, &settings), &natives);
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} cases");
}

#[test]
fn every_case_read_from_a_cluster_matches_the_native_policy() {
    let mut checked = 0;
    for (name, case) in cases() {
        // A cluster always knows its namespaces' labels; cases about
        // unknown labels only make sense inline.
        let selects_namespaces = case["sidecarSets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| !s["spec"]["namespaceSelector"].is_null());
        if selects_namespaces && case["namespaceLabels"].is_null() {
            continue;
        }
        let cluster = CaseCluster { case: case.clone() };
        let host = cluster.clone();
        let guest = Guest::with_host_calls(SIDECARSET.wasm, move |b, n, o, p| {
            host.host_call(b, n, o, p)
        });
        let natives: Vec<Value> = draws(&case)
            .into_iter()
            .map(|d| native(&case, &json!({}), &cluster, d))
            .collect();
        assert_same(&name, "cluster", &wasm(&guest, &case, &json!({})), &natives);
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} cases");
}

#[test]
fn the_native_policy_gives_the_golden_pods() {
    // Ties the comparison above to the golden files themselves.
    for (name, case) in cases() {
        if case["revisions"].is_array() || !case["randomDraw"].is_null() {
            continue;
        }
        let response = native(&case, &inline_settings(&case), &NoCluster, 0.5);
        if let Some(error) = case["expectedError"].as_str() {
            assert_eq!(response["accepted"], false, "{name}");
            assert!(
                response["message"].as_str().unwrap().contains(error),
                "{name}: {}",
                response["message"]
            );
        } else if case["expected"] == case["pod"] {
            assert_eq!(
                response["mutated_object"],
                Value::Null,
                "{name}: expected no change"
            );
        } else {
            let mut expected = json!({"mutated_object": case["expected"]});
            normalise(&mut expected);
            assert_eq!(
                response["mutated_object"], expected["mutated_object"],
                "{name}"
            );
        }
    }
}

#[test]
fn the_module_declares_what_it_reads_from_the_cluster() {
    let sections = custom_sections(SIDECARSET.wasm, "io.kubewarden.metadata");
    assert_eq!(sections.len(), 1);
    let metadata: Value = serde_json::from_slice(sections[0]).unwrap();
    assert_eq!(metadata["protocolVersion"], "v1");
    assert_eq!(metadata["mutating"], true);
    assert_eq!(
        metadata["contextAwareResources"],
        json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet"},
               {"apiVersion": "v1", "kind": "Namespace"},
               {"apiVersion": "apps/v1", "kind": "ControllerRevision"}])
    );
    let guest = Guest::new(SIDECARSET.wasm);
    assert_eq!(guest.call("protocol_version", b"").unwrap(), b"\"v1\"");
}

#[test]
fn bad_settings_and_input_are_rejected_never_trapped() {
    let guest = Guest::new(SIDECARSET.wasm);
    let verdict = guest.call_json("validate_settings", &json!({"sidecarSets": [{"kind": "SidecarSet", "metadata": {"name": "x"}, "spec": {"containers": "no"}}]}));
    assert_eq!(verdict["valid"], false);
    assert!(
        verdict["message"]
            .as_str()
            .unwrap()
            .starts_with("sidecarSets[0] (x): spec.containers"),
        "{verdict}"
    );

    let garbage: Value =
        serde_json::from_slice(&guest.call("validate", b"\xff\xfe").unwrap()).unwrap();
    assert_eq!(garbage["accepted"], false);

    let not_a_pod = guest.call_json(
        "validate",
        &validation_request(
            &guest::pod_create(&json!({"apiVersion": "v1", "kind": "ConfigMap"})),
            &json!({"sidecarSets": []}),
        ),
    );
    assert_eq!(not_a_pod["accepted"], false);
    assert_eq!(not_a_pod["code"], 400);

    let no_containers = guest.validate_pod_create(
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "nginx"}}, "spec": {"containers": []}}),
        &json!({"sidecarSets": [{"kind": "SidecarSet", "metadata": {"name": "s"}, "spec": {"selector": {"matchLabels": {"app": "nginx"}}, "containers": [{"name": "c", "image": "busybox"}]}}]}),
    );
    assert_eq!(no_containers["accepted"], false);
    assert!(
        no_containers["message"]
            .as_str()
            .unwrap()
            .contains("has no containers")
    );
    assert_eq!(guest.call("protocol_version", b"").unwrap(), b"\"v1\"");
}
