//! Kubewarden policy: OpenKruise's ResourceDistribution validating webhook.
//! CREATE and UPDATE of an `apps.kruise.io/v1alpha1` ResourceDistribution
//! are checked by `kruise_core::resourcedistribution`; a distribution with
//! violations is rejected (422) with all of them, everything else is
//! accepted. Takes no settings.

use kruise_api::{ResourceDistribution, Strictness, object_from_value};
use kruise_core::resourcedistribution::{validate_create, validate_update};
/// The policy takes no settings; any given are refused.
pub use kruise_policy_support::{
    NoSettings as Settings, UNPROCESSABLE, validate_no_settings as validate_settings,
};
use kruise_policy_support::{Outcome, invalid, object_name};
use kubewarden_policy_sdk::request::KubernetesAdmissionRequest;

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
        Ok(violations) => invalid("ResourceDistribution", &object_name(request), &violations),
        Err(message) => Outcome::bad_request(message),
    }
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
    kruise_policy_support::answer_without_settings(payload, evaluate)
}

kruise_policy_support::export_policy!(validate: validate, validate_settings: validate_settings);
