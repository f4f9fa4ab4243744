//! The ResourceDistribution validation module under wapc +
//! wasmtime-provider: the native policy's answers on every shared case
//! (policies/fixtures/resourcedistribution), Kubewarden's metadata, its
//! ClusterAdmissionPolicy, and clear rejections of bad input.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guest;

use guest::{Guest, custom_sections, validation_request};
use kruise_policy_modules::{VALIDATE_RESOURCEDISTRIBUTION, cluster_admission_policy, fixtures};
use serde_json::{Value, json};

fn cases() -> Vec<Value> {
    let files = guest::golden_cases("resourcedistribution");
    let (_, file) = files
        .iter()
        .find(|(name, _)| name == "validation.yaml")
        .expect("validation.yaml");
    file["cases"].as_array().unwrap().clone()
}

fn admission(operation: &str, object: &Value, old: Option<&Value>) -> Value {
    fixtures::kruise_request(
        "ResourceDistribution",
        "resourcedistributions",
        operation,
        object,
        old,
    )
}

fn case_request(case: &Value) -> Value {
    admission(
        case["operation"].as_str().unwrap(),
        &case["object"],
        case.get("oldObject"),
    )
}

/// The native policy's answer, as the guest would serialise it.
fn native_response(request: &Value) -> Value {
    let request = serde_json::from_value(request.clone()).unwrap();
    let outcome = kruise_validate_resourcedistribution::evaluate(&request);
    serde_json::to_value(outcome.into_response()).unwrap()
}

#[test]
fn every_shared_case_answers_as_the_native_policy() {
    let guest = Guest::new(VALIDATE_RESOURCEDISTRIBUTION.wasm);
    let cases = cases();
    assert!(cases.len() >= 25);
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let request = case_request(case);
        let response = guest.call_json("validate", &validation_request(&request, &json!({})));
        assert_eq!(response, native_response(&request), "{name}");
        let errors = case["errors"].as_array().unwrap();
        assert_eq!(response["accepted"], errors.is_empty(), "{name}");
        assert_eq!(response["mutated_object"], Value::Null, "{name}");
        if !errors.is_empty() {
            assert_eq!(response["code"], 422, "{name}");
            let message = response["message"].as_str().unwrap();
            for error in errors {
                let error = error.as_str().unwrap();
                assert!(
                    message.contains(error),
                    "{name}: {message:?} lacks {error:?}"
                );
            }
        }
    }
}

#[test]
fn the_module_carries_kubewardens_metadata() {
    let sections = custom_sections(VALIDATE_RESOURCEDISTRIBUTION.wasm, "io.kubewarden.metadata");
    assert_eq!(sections.len(), 1, "exactly one metadata section");
    let metadata: Value = serde_json::from_slice(sections[0]).unwrap();
    assert_eq!(metadata["protocolVersion"], "v1");
    assert_eq!(metadata["mutating"], false);
    assert_eq!(metadata["executionMode"], "kubewarden-wapc");
    assert_eq!(
        metadata["rules"],
        json!([{"apiGroups": ["apps.kruise.io"], "apiVersions": ["v1alpha1"],
                "resources": ["resourcedistributions"], "operations": ["CREATE", "UPDATE"]}])
    );
    let guest = Guest::new(VALIDATE_RESOURCEDISTRIBUTION.wasm);
    assert_eq!(guest.call("protocol_version", b"").unwrap(), b"\"v1\"");
}

#[test]
fn its_cluster_admission_policy_validates_resourcedistributions() {
    let policy = cluster_admission_policy(&VALIDATE_RESOURCEDISTRIBUTION).unwrap();
    assert_eq!(policy["kind"], "ClusterAdmissionPolicy");
    assert_eq!(
        policy["metadata"]["name"],
        "kruise-validate-resourcedistribution"
    );
    let spec = &policy["spec"];
    assert_eq!(spec["mutating"], false);
    assert_eq!(
        spec["rules"][0]["resources"],
        json!(["resourcedistributions"])
    );
    assert_eq!(spec["rules"][0]["operations"], json!(["CREATE", "UPDATE"]));
    assert!(spec.get("contextAwareResources").is_none());
    assert_eq!(
        spec["module"],
        "registry://ghcr.io/kruise-wasm/policies/validate-resourcedistribution:v0.1.0"
    );
}

#[test]
fn settings_are_validated() {
    let guest = Guest::new(VALIDATE_RESOURCEDISTRIBUTION.wasm);
    assert_eq!(
        guest.call_json("validate_settings", &json!({})),
        json!({"valid": true, "message": null})
    );
    let invalid = guest.call_json("validate_settings", &json!({"strict": true}));
    assert_eq!(invalid["valid"], false);
    assert!(
        invalid["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `strict`")
    );
}

#[test]
fn other_requests_are_accepted_and_bad_input_is_rejected_never_trapped() {
    let guest = Guest::new(VALIDATE_RESOURCEDISTRIBUTION.wasm);
    let pod = guest.validate_pod_create(
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}),
        &json!({}),
    );
    assert_eq!(pod["accepted"], true);

    let reject = |payload: &[u8]| -> Value {
        serde_json::from_slice(&guest.call("validate", payload).unwrap()).unwrap()
    };
    let garbage = reject(b"{not json");
    assert_eq!(garbage["accepted"], false);
    assert_eq!(garbage["code"], 400);

    let mut oversized = b"{\"settings\":{},\"request\":{\"uid\":\"".to_vec();
    oversized.resize(5 * 1024 * 1024, b'x');
    oversized.extend_from_slice(b"\"}}");
    let oversized = reject(&oversized);
    assert!(
        oversized["message"]
            .as_str()
            .unwrap()
            .contains("more than the")
    );

    let not_an_rd = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
        "metadata": {"name": "rd"}, "spec": {"resource": {}, "targets": {"excludedNamespaces": "all"}}});
    let response = guest.call_json(
        "validate",
        &validation_request(&admission("CREATE", &not_an_rd, None), &json!({})),
    );
    assert_eq!(response["accepted"], false);
    assert_eq!(response["code"], 400);
    assert!(
        response["message"]
            .as_str()
            .unwrap()
            .contains("spec.targets.excludedNamespaces")
    );

    // The instance survives all of that.
    assert_eq!(guest.call("protocol_version", b"").unwrap(), b"\"v1\"");
}
