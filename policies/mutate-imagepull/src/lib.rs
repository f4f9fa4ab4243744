//! Kubewarden policy: OpenKruise's ImagePullJob and NodeImage webhooks.
//! CREATE and UPDATE of either kind are defaulted (the objects' own
//! `set_defaults`; a NodeImage's tags also get `createdAt`, from the
//! guest's clock) and checked by `kruise_core::imagepull::validation`. An
//! object that does not parse, or has violations, is refused (422) naming
//! the fields; a defaulted one is returned mutated. Takes no settings.
//!
//! OpenKruise refuses every ImagePullJob while its `ImagePullJobGate` is
//! off (the default there); here the job controller always runs, so the
//! jobs are admitted.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kruise_api::{ImagePullJob, KruiseObject, NodeImage};
use kruise_core::imagepull::validation::{validate_job, validate_node_image};
/// The policy takes no settings; any given are refused.
pub use kruise_policy_support::{
    NoSettings as Settings, validate_no_settings as validate_settings,
};
use kruise_policy_support::{Outcome, invalid, object_name, read_object};
use kubewarden_policy_sdk::request::KubernetesAdmissionRequest;

/// The decision for one admission request at time `now`.
pub fn evaluate(request: &KubernetesAdmissionRequest, now: &Time) -> Outcome {
    let ours = request.kind.group == "apps.kruise.io" && request.sub_resource.is_empty();
    if !ours || !matches!(request.operation.as_str(), "CREATE" | "UPDATE") {
        return Outcome::Accept;
    }
    match request.kind.kind.as_str() {
        "ImagePullJob" => job(request),
        "NodeImage" => node_image(request, now),
        _ => Outcome::Accept,
    }
}

fn job(request: &KubernetesAdmissionRequest) -> Outcome {
    let name = object_name(request);
    let mut job = match read_object::<ImagePullJob>(&request.object) {
        Ok(job) => job,
        Err(message) => return invalid("ImagePullJob", &name, &[message]),
    };
    let finalizers = job.metadata.finalizers.clone();
    job.set_defaults();
    if request.operation == "UPDATE" {
        // The deletion-protection finalizer is a create default: the
        // controller removes it to let a deleted job go.
        job.metadata.finalizers = finalizers;
    }
    // A stored job that no longer parses can be fixed: then only the
    // checks of a create apply.
    let old = (request.operation == "UPDATE")
        .then(|| read_object::<ImagePullJob>(&request.old_object).ok())
        .flatten();
    let violations = validate_job(&job, old.as_ref());
    if !violations.is_empty() {
        return invalid("ImagePullJob", &name, &violations);
    }
    Outcome::defaulted(request, &job)
}

fn node_image(request: &KubernetesAdmissionRequest, now: &Time) -> Outcome {
    let name = object_name(request);
    let mut image = match read_object::<NodeImage>(&request.object) {
        Ok(image) => image,
        Err(message) => return invalid("NodeImage", &name, &[message]),
    };
    image.set_defaults();
    image.set_created_at(now);
    let violations = validate_node_image(&image);
    if !violations.is_empty() {
        return invalid("NodeImage", &name, &violations);
    }
    Outcome::defaulted(request, &image)
}

/// The `validate` waPC operation at time `now`.
pub fn validate_payload(payload: &[u8], now: &Time) -> Result<Vec<u8>, String> {
    kruise_policy_support::answer_without_settings(payload, |request| evaluate(request, now))
}

#[cfg(target_arch = "wasm32")]
fn validate_now(payload: &[u8]) -> Result<Vec<u8>, String> {
    validate_payload(payload, &kruise_policy_support::clock::now())
}

kruise_policy_support::export_policy!(validate: validate_now, validate_settings: validate_settings);
