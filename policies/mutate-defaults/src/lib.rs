//! Kubewarden policy: OpenKruise's SidecarSet and CloneSet defaulting
//! webhooks, so what the cluster stores is what OpenKruise would store.
//!
//! * SidecarSet, CREATE and UPDATE: its defaults (`set_defaults`), then both
//!   hash annotations stamped from the defaulted spec, as OpenKruise's
//!   SidecarSet webhook does on every write.
//! * CloneSet, CREATE and UPDATE: its defaults, and the pod defaults of its
//!   template on create or when the template changed (OpenKruise's
//!   `TemplateNoDefaults` gate off, its default).
//!
//! An object that does not parse is refused (422) with the reason; the
//! validating modules judge the rest. Takes no settings.

use kruise_api::{CloneSet, KruiseObject, SidecarSet};
use kruise_core::sidecarset::stamp_hashes;
/// The policy takes no settings; any given are refused.
pub use kruise_policy_support::{
    NoSettings as Settings, validate_no_settings as validate_settings,
};
use kruise_policy_support::{Outcome, invalid, object_name, read_object};
use kubewarden_policy_sdk::request::KubernetesAdmissionRequest;

/// The decision for one admission request.
pub fn evaluate(request: &KubernetesAdmissionRequest) -> Outcome {
    let ours = request.kind.group == "apps.kruise.io" && request.sub_resource.is_empty();
    if !ours || !matches!(request.operation.as_str(), "CREATE" | "UPDATE") {
        return Outcome::Accept;
    }
    match request.kind.kind.as_str() {
        "SidecarSet" => sidecar_set(request),
        "CloneSet" => clone_set(request),
        _ => Outcome::Accept,
    }
}

fn sidecar_set(request: &KubernetesAdmissionRequest) -> Outcome {
    let mut sidecar_set = match read_object::<SidecarSet>(&request.object) {
        Ok(sidecar_set) => sidecar_set,
        Err(message) => return invalid("SidecarSet", &object_name(request), &[message]),
    };
    sidecar_set.set_defaults();
    stamp_hashes(&mut sidecar_set);
    Outcome::defaulted(request, &sidecar_set)
}

fn clone_set(request: &KubernetesAdmissionRequest) -> Outcome {
    let mut clone_set = match read_object::<CloneSet>(&request.object) {
        Ok(clone_set) => clone_set,
        Err(message) => return invalid("CloneSet", &object_name(request), &[message]),
    };
    // An old object that no longer parses counts as a changed template.
    let template_changed = request.operation == "CREATE"
        || read_object::<CloneSet>(&request.old_object)
            .map_or(true, |old| old.spec.template != clone_set.spec.template);
    clone_set.set_defaults();
    if template_changed {
        clone_set.set_template_defaults();
    }
    Outcome::defaulted(request, &clone_set)
}

/// The `validate` waPC operation.
pub fn validate_payload(payload: &[u8]) -> Result<Vec<u8>, String> {
    kruise_policy_support::answer_without_settings(payload, evaluate)
}

kruise_policy_support::export_policy!(validate: validate_payload, validate_settings: validate_settings);
