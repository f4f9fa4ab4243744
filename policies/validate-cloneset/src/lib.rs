//! Kubewarden policy: OpenKruise's CloneSet validating webhook. CREATE and
//! UPDATE of an `apps.kruise.io/v1alpha1` CloneSet are checked by
//! `kruise_core::cloneset::validation`; a CloneSet that does not parse, or
//! has violations, is refused (422) naming the fields. Takes no settings.

use kruise_api::CloneSet;
use kruise_core::cloneset::validation::validate;
/// The policy takes no settings; any given are refused.
pub use kruise_policy_support::{
    NoSettings as Settings, validate_no_settings as validate_settings,
};
use kruise_policy_support::{Outcome, invalid, read_object};
use kubewarden_policy_sdk::request::KubernetesAdmissionRequest;

/// The decision for one admission request.
pub fn evaluate(request: &KubernetesAdmissionRequest) -> Outcome {
    let is_cloneset = request.kind.group == "apps.kruise.io"
        && request.kind.kind == "CloneSet"
        && request.sub_resource.is_empty();
    if !is_cloneset || !matches!(request.operation.as_str(), "CREATE" | "UPDATE") {
        return Outcome::Accept;
    }
    let name = request.object["metadata"]["name"]
        .as_str()
        .unwrap_or(&request.name)
        .to_owned();
    let new = match read_object::<CloneSet>(&request.object) {
        Ok(new) => new,
        Err(message) => return invalid("CloneSet", &name, &[message]),
    };
    // A stored CloneSet that no longer parses can be fixed: then only the
    // checks of a create apply.
    let old = (request.operation == "UPDATE")
        .then(|| read_object::<CloneSet>(&request.old_object).ok())
        .flatten();
    let violations = validate(&new, old.as_ref());
    if violations.is_empty() {
        Outcome::Accept
    } else {
        invalid("CloneSet", &name, &violations)
    }
}

/// The `validate` waPC operation.
pub fn validate_payload(payload: &[u8]) -> Result<Vec<u8>, String> {
    kruise_policy_support::answer_without_settings(payload, evaluate)
}

kruise_policy_support::export_policy!(validate: validate_payload, validate_settings: validate_settings);
