//! The launch-priority module: the same answers as the native core on every
//! golden case, Kubewarden's metadata, and clear rejections of bad input.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guest;

use guest::{Guest, custom_sections, pod_create, validation_request};
use kruise_policy_modules::LAUNCH_PRIORITY;
use kruise_policy_support::Outcome;
use serde_json::{Value, json};

fn golden_cases() -> Vec<(String, Value)> {
    guest::golden_cases("launch-priority")
}

/// The native policy's answer, as the guest would serialise it.
fn native_response(pod: &Value, name_suffix: &str) -> Value {
    let text = pod_create(pod).to_string();
    let request = serde_json::from_str(&text).unwrap();
    let outcome: Outcome = kruise_policy_launch_priority::evaluate(&request, name_suffix);
    serde_json::to_value(outcome.into_response()).unwrap()
}

#[test]
fn every_golden_case_answers_as_the_native_core() {
    let guest = Guest::new(LAUNCH_PRIORITY.wasm);
    let cases = golden_cases();
    assert!(cases.len() >= 10);
    for (name, case) in &cases {
        let pod = &case["pod"];
        let response = guest.validate_pod_create(pod, &json!({}));
        // The module draws its own name suffix; use the one it drew.
        let suffix = response["mutated_object"]["metadata"]["name"]
            .as_str()
            .zip(pod["metadata"]["generateName"].as_str())
            .map_or("bcdfg".to_owned(), |(name, prefix)| {
                name[prefix.len()..].to_owned()
            });
        assert_eq!(response, native_response(pod, &suffix), "{name}");
        if let Some(expected) = case.get("expected").filter(|e| !e.is_null())
            && pod["metadata"]["generateName"].is_null()
        {
            assert_eq!(&response["mutated_object"], expected, "{name}");
        }
        if case["unchanged"] == true {
            assert_eq!(response["accepted"], true, "{name}");
            assert_eq!(response["mutated_object"], Value::Null, "{name}");
        }
        if let Some(error) = case["expectedError"].as_str() {
            assert_eq!(response["accepted"], false, "{name}");
            assert!(
                response["message"].as_str().unwrap().contains(error),
                "{name}"
            );
        }
    }
}

#[test]
fn generated_names_use_kubernetes_alphabet() {
    let guest = Guest::new(LAUNCH_PRIORITY.wasm);
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-", "annotations": {"apps.kruise.io/container-launch-priority": "Ordered"}},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
    let response = guest.validate_pod_create(&pod, &json!({}));
    let name = response["mutated_object"]["metadata"]["name"]
        .as_str()
        .unwrap();
    let suffix = name.strip_prefix("web-").unwrap();
    assert_eq!(suffix.len(), 5);
    assert!(
        suffix
            .chars()
            .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
        "{name}"
    );
}

#[test]
fn the_module_carries_kubewardens_metadata() {
    let sections = custom_sections(LAUNCH_PRIORITY.wasm, "io.kubewarden.metadata");
    assert_eq!(sections.len(), 1, "exactly one metadata section");
    let metadata: Value = serde_json::from_slice(sections[0]).unwrap();
    assert_eq!(metadata["protocolVersion"], "v1");
    assert_eq!(metadata["mutating"], true);
    assert_eq!(metadata["executionMode"], "kubewarden-wapc");
    assert_eq!(
        metadata["rules"],
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}])
    );
    // What the metadata claims is what the guest answers.
    let guest = Guest::new(LAUNCH_PRIORITY.wasm);
    assert_eq!(guest.call("protocol_version", b"").unwrap(), b"\"v1\"");
}

#[test]
fn settings_are_validated() {
    let guest = Guest::new(LAUNCH_PRIORITY.wasm);
    assert_eq!(
        guest.call_json("validate_settings", &json!({})),
        json!({"valid": true, "message": null})
    );
    let invalid = guest.call_json("validate_settings", &json!({"priority": 1}));
    assert_eq!(invalid["valid"], false);
    assert!(
        invalid["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `priority`")
    );
}

#[test]
fn other_requests_are_accepted_unchanged() {
    let guest = Guest::new(LAUNCH_PRIORITY.wasm);
    let mut request = pod_create(&json!({"apiVersion": "v1", "kind": "Pod"}));
    request["operation"] = json!("UPDATE");
    let response = guest.call_json("validate", &validation_request(&request, &json!({})));
    assert_eq!(response["accepted"], true);
    assert_eq!(response["mutated_object"], Value::Null);
}

#[test]
fn bad_input_is_rejected_never_trapped() {
    let guest = Guest::new(LAUNCH_PRIORITY.wasm);
    let reject = |payload: &[u8]| -> Value {
        serde_json::from_slice(&guest.call("validate", payload).unwrap()).unwrap()
    };
    let garbage = reject(b"{not json");
    assert_eq!(garbage["accepted"], false);
    assert!(
        garbage["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot read the validation request")
    );

    let mut oversized = b"{\"settings\":{},\"request\":{\"uid\":\"".to_vec();
    oversized.resize(5 * 1024 * 1024, b'x');
    oversized.extend_from_slice(b"\"}}");
    let oversized = reject(&oversized);
    assert_eq!(oversized["accepted"], false);
    assert!(
        oversized["message"]
            .as_str()
            .unwrap()
            .contains("more than the")
    );

    let not_a_pod = guest.validate_pod_create(
        &json!({"apiVersion": "apps/v1", "kind": "Deployment"}),
        &json!({}),
    );
    assert_eq!(not_a_pod["accepted"], false);
    assert_eq!(not_a_pod["code"], 400);

    // The instance survives all of that.
    assert_eq!(guest.call("protocol_version", b"").unwrap(), b"\"v1\"");
}
