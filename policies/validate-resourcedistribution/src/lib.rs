//! Kubewarden policy: OpenKruise's ResourceDistribution validating webhook.
//! CREATE and UPDATE of an `apps.kruise.io/v1alpha1` ResourceDistribution
//! are checked by `kruise_core::resourcedistribution`; a distribution with
//! violations is rejected (422) with all of them, everything else is
//! accepted. Takes no settings.

use kruise_api::{ResourceDistribution, Strictness, object_from_value};
use kruise_core::resourcedistribution::{Violation, validate_create, validate_update};
use kruise_policy_support::{Outcome, read_request, read_settings};
use kubewarden_policy_sdk::request::KubernetesAdmissionRequest;
use serde::{Deserialize, Serialize};

/// HTTP status of a rejection for field violations (Kubernetes' `Invalid`).
pub const UNPROCESSABLE: u16 = 422;

/// The policy takes no settings; any given are refused.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {}

/// The decision for one admission request.
pub fn evaluate(request: &KubernetesAdmissionRequest) -> Outcome {
    let is_distribution = request.kind.group == "apps.kruise.io"
        && request.kind.kind == "ResourceDistribution"
        && request.sub_resource.is_empty();
    let violations = match (is_distribution, request.operation.as_str()) {
        (true, "CREATE") => read(&request.object, "object").map(|new| validate_create(&new)),
        (true, "UPDATE") => read(&request.object, "object").and_then(|new| {
            read(&request.old_object, "oldObject").map(|old| validate_update(&new, &old))
        }),
        _ => return Outcome::Accept,
    };
    match violations {
        Ok(violations) if violations.is_empty() => Outcome::Accept,
        Ok(violations) => Outcome::Reject {
            message: rejection_message(request, &violations),
            code: UNPROCESSABLE,
        },
        Err(message) => Outcome::bad_request(message),
    }
}

/// `ResourceDistribution <name> is invalid: <violation>; <violation>`.
pub fn rejection_message(request: &KubernetesAdmissionRequest, violations: &[Violation]) -> String {
    let name = request
        .object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or(&request.name);
    let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
    format!(
        "ResourceDistribution {name:?} is invalid: {}",
        listed.join("; ")
    )
}

fn read(object: &serde_json::Value, key: &str) -> Result<ResourceDistribution, String> {
    if object.is_null() {
        return Err(format!("the request has no {key}"));
    }
    // Lenient like the API server's pruning: only the fields we know matter.
    object_from_value(object.clone(), Strictness::Lenient)
        .map_err(|e| format!("{key} is not a valid ResourceDistribution: {e}"))
}

/// The `validate` waPC operation.
pub fn validate(payload: &[u8]) -> Result<Vec<u8>, String> {
    let outcome = match read_request::<Settings>(payload) {
        Ok(request) => evaluate(&request.request),
        Err(message) => Outcome::bad_request(message),
    };
    outcome.into_payload().map_err(|e| e.to_string())
}

/// The `validate_settings` waPC operation.
pub fn validate_settings(payload: &[u8]) -> Result<Vec<u8>, String> {
    let response = match read_settings::<Settings>(payload) {
        Ok(Settings {}) => serde_json::json!({ "valid": true, "message": null }),
        Err(message) => serde_json::json!({ "valid": false, "message": message }),
    };
    serde_json::to_vec(&response).map_err(|e| e.to_string())
}

kruise_policy_support::export_policy!(validate: validate, validate_settings: validate_settings);
