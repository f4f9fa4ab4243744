//! Kubewarden policy: OpenKruise's SidecarSet validating webhook. CREATE
//! and UPDATE of an `apps.kruise.io/v1alpha1` SidecarSet are checked by
//! `kruise_core::sidecarset::validation`, with the other SidecarSets, this
//! one's ControllerRevisions and OpenKruise's `kruise-configuration`
//! ConfigMap (the `patchPodMetadata` whitelist) read from the cluster; a SidecarSet that
//! does not parse, or has violations, is refused (422) naming the fields.
//! Takes no settings.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kruise_api::SidecarSet;
use kruise_core::sidecarset::validation::{ClusterView, validate};
use kruise_policy_support::cluster::{Cluster, KruiseConfiguration};
/// The policy takes no settings; any given are refused.
pub use kruise_policy_support::{
    NoSettings as Settings, validate_no_settings as validate_settings,
};
use kruise_policy_support::{Outcome, invalid, object_name, read_object};
use kubewarden_policy_sdk::request::KubernetesAdmissionRequest;

/// The decision for one admission request.
pub fn evaluate<C: Cluster + KruiseConfiguration>(
    request: &KubernetesAdmissionRequest,
    cluster: &C,
) -> Outcome {
    let is_sidecar_set = request.kind.group == "apps.kruise.io"
        && request.kind.kind == "SidecarSet"
        && request.sub_resource.is_empty();
    if !is_sidecar_set || !matches!(request.operation.as_str(), "CREATE" | "UPDATE") {
        return Outcome::Accept;
    }
    let name = object_name(request);
    let new = match read_object::<SidecarSet>(&request.object) {
        Ok(new) => new,
        Err(message) => return invalid("SidecarSet", &name, &[message]),
    };
    // The stored version may itself be unreadable (written before this
    // webhook existed): then only the checks of a create apply, so that
    // the object can be fixed.
    let old = (request.operation == "UPDATE")
        .then(|| read_object::<SidecarSet>(&request.old_object).ok())
        .flatten();
    let others = match cluster.sidecar_sets() {
        Ok(listed) => listed.readable,
        Err(message) => return cannot_read(&message),
    };
    let revisions = match revisions_needed(&new, cluster) {
        Ok(revisions) => revisions,
        Err(message) => return cannot_read(&message),
    };
    let configuration = match configuration_needed(&new, cluster) {
        Ok(configuration) => configuration,
        Err(message) => return cannot_read(&message),
    };
    let view = ClusterView {
        sidecar_sets: &others,
        revisions: &revisions,
        kruise_configuration: configuration.as_ref(),
    };
    let violations = validate(&new, old.as_ref(), view);
    if violations.is_empty() {
        Outcome::Accept
    } else {
        invalid("SidecarSet", &name, &violations)
    }
}

fn cannot_read(message: &str) -> Outcome {
    Outcome::Reject {
        message: format!("cannot check the SidecarSet against the cluster: {message}"),
        code: 500,
    }
}

/// This SidecarSet's revisions, read only when its injection strategy
/// names one.
fn revisions_needed<C: Cluster>(
    set: &SidecarSet,
    cluster: &C,
) -> Result<Vec<ControllerRevision>, String> {
    let names_revision = set
        .spec
        .injection_strategy
        .as_ref()
        .is_some_and(|s| s.revision.is_some());
    match (&set.metadata.name, names_revision) {
        (Some(name), true) => cluster.sidecar_set_revisions(name),
        _ => Ok(Vec::new()),
    }
}

/// OpenKruise's configuration, read only when the SidecarSet patches pod
/// metadata.
fn configuration_needed<C: KruiseConfiguration>(
    set: &SidecarSet,
    cluster: &C,
) -> Result<Option<BTreeMap<String, String>>, String> {
    if set.spec.patch_pod_metadata.is_empty() {
        return Ok(None);
    }
    cluster.kruise_configuration()
}

/// The `validate` waPC operation.
pub fn validate_payload<C: Cluster + KruiseConfiguration>(
    payload: &[u8],
    cluster: &C,
) -> Result<Vec<u8>, String> {
    kruise_policy_support::answer_without_settings(payload, |request| evaluate(request, cluster))
}

kruise_policy_support::export_policy!(
    validate_reading_cluster: validate_payload,
    validate_settings: validate_settings,
);
