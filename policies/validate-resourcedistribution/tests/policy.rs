//! The policy, natively, on the shared validation cases
//! (`policies/fixtures/resourcedistribution/validation.yaml`) and on what
//! it must leave alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kruise_policy_support::Outcome;
use kruise_validate_resourcedistribution::{UNPROCESSABLE, evaluate, validate, validate_settings};
use kubewarden_policy_sdk::request::KubernetesAdmissionRequest;
use serde_json::{Value, json};

const CASES: &str = include_str!("../../fixtures/resourcedistribution/validation.yaml");

fn cases() -> Vec<Value> {
    let file: Value = serde_yaml::from_str(CASES).unwrap();
    file["cases"].as_array().unwrap().clone()
}

/// An AdmissionRequest for a ResourceDistribution, shaped as policy-server
/// sends it.
fn admission(operation: &str, object: &Value, old: Option<&Value>) -> Value {
    let mut request = json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "apps.kruise.io", "version": "v1alpha1", "kind": "ResourceDistribution"},
        "resource": {"group": "apps.kruise.io", "version": "v1alpha1", "resource": "resourcedistributions"},
        "operation": operation,
        "userInfo": {"username": "admin", "groups": ["system:masters"]},
        "object": object,
        "dryRun": false,
    });
    if let Some(name) = object["metadata"]["name"].as_str() {
        request["name"] = json!(name);
    }
    if let Some(old) = old {
        request["oldObject"] = old.clone();
    }
    request
}

fn typed(request: &Value) -> KubernetesAdmissionRequest {
    serde_json::from_value(request.clone()).unwrap()
}

fn case_request(case: &Value) -> Value {
    let old = case.get("oldObject");
    admission(case["operation"].as_str().unwrap(), &case["object"], old)
}

#[test]
fn every_shared_case_is_accepted_or_rejected_with_its_violations() {
    let cases = cases();
    assert!(cases.len() >= 25);
    let mut rejected = 0;
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let outcome = evaluate(&typed(&case_request(case)));
        let errors = case["errors"].as_array().unwrap();
        if errors.is_empty() {
            assert_eq!(outcome, Outcome::Accept, "{name}");
            continue;
        }
        rejected += 1;
        let Outcome::Reject { message, code } = outcome else {
            panic!("{name}: accepted")
        };
        assert_eq!(code, UNPROCESSABLE, "{name}");
        let rd_name = case["object"]["metadata"]["name"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("ResourceDistribution {rd_name:?} is invalid: ")),
            "{name}: {message}"
        );
        assert_eq!(
            message.matches("; ").count() + 1,
            errors.len(),
            "{name}: {message}"
        );
        for error in errors {
            let error = error.as_str().unwrap();
            assert!(
                message.contains(error),
                "{name}: {message:?} lacks {error:?}"
            );
        }
    }
    assert!(rejected >= 20, "only {rejected} rejections");
}

#[test]
fn other_kinds_operations_and_subresources_are_accepted() {
    let invalid = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
        "metadata": {"name": "rd"}, "spec": {"resource": {}, "targets": {}}});
    let mut delete = admission("DELETE", &invalid, Some(&invalid));
    delete["object"] = Value::Null;
    assert_eq!(evaluate(&typed(&delete)), Outcome::Accept);
    let mut status = admission("UPDATE", &invalid, Some(&invalid));
    status["subResource"] = json!("status");
    assert_eq!(evaluate(&typed(&status)), Outcome::Accept);
    let mut config_map = admission(
        "CREATE",
        &json!({"apiVersion": "v1", "kind": "ConfigMap"}),
        None,
    );
    config_map["kind"] = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
    assert_eq!(evaluate(&typed(&config_map)), Outcome::Accept);
    // The same invalid object is refused on CREATE.
    assert!(matches!(
        evaluate(&typed(&admission("CREATE", &invalid, None))),
        Outcome::Reject { code: 422, .. }
    ));
}

#[test]
fn unreadable_objects_are_bad_requests() {
    let wrong_version = json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "ResourceDistribution",
        "metadata": {"name": "rd"}, "spec": {"resource": {}, "targets": {}}});
    let Outcome::Reject { message, code } =
        evaluate(&typed(&admission("CREATE", &wrong_version, None)))
    else {
        panic!("accepted")
    };
    assert_eq!(code, 400);
    assert!(
        message.contains("object is not a valid ResourceDistribution"),
        "{message}"
    );
    assert!(message.contains("apps.kruise.io/v1beta1"), "{message}");

    let bad_targets = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
        "metadata": {"name": "rd"}, "spec": {"resource": {}, "targets": {"allNamespaces": "yes"}}});
    let Outcome::Reject { message, code } =
        evaluate(&typed(&admission("CREATE", &bad_targets, None)))
    else {
        panic!("accepted")
    };
    assert_eq!(code, 400);
    assert!(message.contains("spec.targets.allNamespaces"), "{message}");

    let valid = cases()[0]["object"].clone();
    let update_without_old = admission("UPDATE", &valid, None);
    assert_eq!(
        evaluate(&typed(&update_without_old)),
        Outcome::bad_request("the request has no oldObject")
    );
}

#[test]
fn the_wapc_operations_answer_kubewardens_shapes() {
    let cases = cases();
    let case = cases.iter().find(|c| c["errors"] != json!([])).unwrap();
    let payload =
        serde_json::to_vec(&json!({"request": case_request(case), "settings": {}})).unwrap();
    let response: Value = serde_json::from_slice(&validate(&payload).unwrap()).unwrap();
    assert_eq!(response["accepted"], false);
    assert_eq!(response["code"], 422);
    assert_eq!(response["mutated_object"], Value::Null);
    let garbage: Value = serde_json::from_slice(&validate(b"{nope").unwrap()).unwrap();
    assert_eq!(garbage["code"], 400);

    let ok: Value = serde_json::from_slice(&validate_settings(b"{}").unwrap()).unwrap();
    assert_eq!(ok, json!({"valid": true, "message": null}));
    let refused: Value =
        serde_json::from_slice(&validate_settings(b"{\"gate\": true}").unwrap()).unwrap();
    assert_eq!(refused["valid"], false);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `gate`")
    );
}
