//! Kubewarden policy: OpenKruise's CloneSet validating webhook. CREATE and
//! UPDATE of an `apps.kruise.io` CloneSet (handed over as v1alpha1) are
//! checked by `kruise_core::cloneset::validation`, with the validator of
//! the version the request was made in; for v1alpha1's, the pods an update
//! adds to `podsToDelete` are read from the cluster. A CloneSet that does
//! not parse, or has violations, is refused (422) naming the fields. Takes
//! no settings.

use kruise_api::CloneSet;
use kruise_core::cloneset::validation::{
    Validator, Violation, added_pods_to_delete, check_pod_to_delete, validate,
};
use kruise_policy_support::cluster::PodsAndNodes;
/// The policy takes no settings; any given are refused.
pub use kruise_policy_support::{
    NoSettings as Settings, validate_no_settings as validate_settings,
};
use kruise_policy_support::{Outcome, invalid, read_object};
use kubewarden_policy_sdk::request::KubernetesAdmissionRequest;

/// The decision for one admission request.
pub fn evaluate<C: PodsAndNodes>(request: &KubernetesAdmissionRequest, cluster: &C) -> Outcome {
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
    let validator = Validator::for_version(request_version(request));
    let mut violations = validate(&new, old.as_ref(), validator);
    if validator == Validator::V1beta1 {
        // v1beta1's validator does not look the pods up.
        return invalid_unless_empty(&name, &violations);
    }
    match pods_to_delete_violations(request, &new, old.as_ref(), cluster) {
        Ok(more) => violations.extend(more),
        Err(message) => {
            return Outcome::Reject {
                message: format!("cannot check the CloneSet against the cluster: {message}"),
                code: 500,
            };
        }
    }
    invalid_unless_empty(&name, &violations)
}

/// The version the request was made in: `requestKind`'s, when the API
/// server converted the object for the policy; else the object's own.
fn request_version(request: &KubernetesAdmissionRequest) -> &str {
    if request.request_kind.version.is_empty() {
        &request.kind.version
    } else {
        &request.request_kind.version
    }
}

fn invalid_unless_empty(name: &str, violations: &[Violation]) -> Outcome {
    if violations.is_empty() {
        Outcome::Accept
    } else {
        invalid("CloneSet", name, violations)
    }
}

/// The names newly added to `podsToDelete` that are not live pods of this
/// CloneSet, each looked up in the CloneSet's namespace.
fn pods_to_delete_violations<C: PodsAndNodes>(
    request: &KubernetesAdmissionRequest,
    new: &CloneSet,
    old: Option<&CloneSet>,
    cluster: &C,
) -> Result<Vec<Violation>, String> {
    let namespace = new
        .metadata
        .namespace
        .as_deref()
        .unwrap_or(&request.namespace);
    let mut out = Vec::new();
    for name in added_pods_to_delete(new, old) {
        let pod = cluster.pod(namespace, &name)?;
        out.extend(check_pod_to_delete(new, &name, pod.as_ref()));
    }
    Ok(out)
}

/// The `validate` waPC operation.
pub fn validate_payload<C: PodsAndNodes>(payload: &[u8], cluster: &C) -> Result<Vec<u8>, String> {
    kruise_policy_support::answer_without_settings(payload, |request| evaluate(request, cluster))
}

kruise_policy_support::export_policy!(
    validate_reading_cluster: validate_payload,
    validate_settings: validate_settings,
);
