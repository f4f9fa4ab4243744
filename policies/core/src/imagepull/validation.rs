//! Admission of ImagePullJobs and NodeImages, after OpenKruise's
//! `pkg/webhook/{imagepulljob,nodeimage}` validating handlers: each problem
//! is one [`Violation`] naming its field. Defaulting is the objects' own
//! `set_defaults` (and [`NodeImage::set_created_at`], which needs the time).
//!
//! [`NodeImage::set_created_at`]: kruise_api::NodeImage::set_created_at

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::imagepulljob::{CompletionPolicyType, ImagePullJob};
use kruise_api::nodeimage::{DEFAULT_PULL_TIMEOUT_SECONDS, NodeImage};

use super::reference;
use crate::selector;
use crate::validation::Violation;

/// A NodeImage lists at most this many images.
pub const MAX_IMAGES_PER_NODE: usize = 256;

/// The violations of a job; `old` is the stored job on an update.
pub fn validate_job(job: &ImagePullJob, old: Option<&ImagePullJob>) -> Vec<Violation> {
    let mut out = Vec::new();
    let spec = &job.spec;
    if let Some(old) = old
        && old.spec.pull_secrets != spec.pull_secrets
    {
        out.push(Violation::new(
            "spec.pullSecrets",
            "Forbidden: spec.pullSecrets is immutable",
        ));
    }
    if let Some(selector) = &spec.selector {
        let has_labels =
            !selector.match_labels.is_empty() || !selector.match_expressions.is_empty();
        if selector.names.is_some() && has_labels {
            out.push(Violation::new(
                "spec.selector",
                "Invalid value: names and labelSelector can not be set together",
            ));
        }
        if let Err(error) = selector::validate(&selector.label_selector()) {
            out.push(Violation::new(
                "spec.selector",
                format!("Invalid value: {error}"),
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, name) in selector.names.iter().flatten().enumerate() {
            if !seen.insert(name) {
                out.push(Violation::new(
                    format!("spec.selector.names[{i}]"),
                    format!("Duplicate value: {name:?}"),
                ));
            }
        }
    }
    if let Some(pod_selector) = &spec.pod_selector {
        if spec.selector.is_some() {
            out.push(Violation::new(
                "spec.podSelector",
                "Invalid value: selector and podSelector can not be set together",
            ));
        }
        if let Err(error) = selector::validate(pod_selector) {
            out.push(Violation::new(
                "spec.podSelector",
                format!("Invalid value: {error}"),
            ));
        }
    }
    if spec.image.is_empty() {
        out.push(Violation::new(
            "spec.image",
            "Required value: image can not be empty",
        ));
    } else if let Err(error) = reference::parse(&spec.image) {
        out.push(Violation::new(
            "spec.image",
            format!("Invalid value: {}", error.reason),
        ));
    }
    if let Some(message) = spec.parallelism.as_ref().and_then(parallelism_error) {
        out.push(Violation::new("spec.parallelism", message));
    }
    let completion = &spec.completion_policy;
    match completion.type_.unwrap_or_default() {
        CompletionPolicyType::Always => {
            let timeout = spec
                .pull_policy
                .as_ref()
                .and_then(|p| p.timeout_seconds)
                .unwrap_or(DEFAULT_PULL_TIMEOUT_SECONDS);
            if let Some(deadline) = completion.active_deadline_seconds
                && deadline < i64::from(timeout)
            {
                out.push(Violation::new(
                    "spec.completionPolicy.activeDeadlineSeconds",
                    format!(
                        "Invalid value: {deadline}: must not be less than pullPolicy.timeoutSeconds ({timeout})"
                    ),
                ));
            }
        }
        CompletionPolicyType::Never => {
            if completion.active_deadline_seconds.is_some() {
                out.push(Violation::new(
                    "spec.completionPolicy.activeDeadlineSeconds",
                    "Forbidden: activeDeadlineSeconds is only valid for the Always completion policy",
                ));
            }
            if completion.ttl_seconds_after_finished.is_some() {
                out.push(Violation::new(
                    "spec.completionPolicy.ttlSecondsAfterFinished",
                    "Forbidden: ttlSecondsAfterFinished is only valid for the Always completion policy",
                ));
            }
        }
    }
    out
}

/// A whole number of nodes, 0 or more; no percentages.
fn parallelism_error(value: &IntOrString) -> Option<String> {
    match value {
        IntOrString::Int(n) if *n < 0 => Some(format!("Invalid value: {n}: must not be negative")),
        IntOrString::Int(_) => None,
        IntOrString::String(text) if text.ends_with('%') => Some(format!(
            "Invalid value: {text:?}: percentages are not supported"
        )),
        IntOrString::String(text) => match text.parse::<i64>() {
            Ok(n) if n < 0 => Some(format!("Invalid value: {text:?}: must not be negative")),
            Ok(n) if i32::try_from(n).is_err() => {
                Some(format!("Invalid value: {text:?}: too large"))
            }
            Ok(_) => None,
            Err(_) => Some(format!("Invalid value: {text:?}: must be an integer")),
        },
    }
}

/// The violations of a NodeImage, after its defaults were applied.
pub fn validate_node_image(node_image: &NodeImage) -> Vec<Violation> {
    let mut out = Vec::new();
    let images = &node_image.spec.images;
    if images.len() > MAX_IMAGES_PER_NODE {
        out.push(Violation::new(
            "spec.images",
            format!(
                "Too many: {}: must have at most {MAX_IMAGES_PER_NODE} images",
                images.len()
            ),
        ));
    }
    for (name, image) in images {
        let field = format!("spec.images[{name}]");
        if name.is_empty() {
            out.push(Violation::new(
                "spec.images",
                "Invalid value: empty image name",
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, tag) in image.tags.iter().enumerate() {
            let field = format!("{field}.tags[{i}]");
            if tag.tag.is_empty() {
                out.push(Violation::new(
                    format!("{field}.tag"),
                    "Required value: empty tag",
                ));
            } else if !seen.insert(tag.tag.as_str()) {
                out.push(Violation::new(
                    format!("{field}.tag"),
                    format!("Duplicate value: {:?}", tag.tag),
                ));
            }
            if tag.created_at.is_none() {
                out.push(Violation::new(
                    format!("{field}.createdAt"),
                    "Required value",
                ));
            }
            if tag.version < 0 {
                out.push(Violation::new(
                    format!("{field}.version"),
                    format!("Invalid value: {}: must not be negative", tag.version),
                ));
            }
            match &tag.pull_policy {
                None => out.push(Violation::new(
                    format!("{field}.pullPolicy"),
                    "Required value",
                )),
                Some(policy) if policy.ttl_seconds_after_finished.is_none() => {
                    out.push(Violation::new(
                        format!("{field}.pullPolicy.ttlSecondsAfterFinished"),
                        "Required value",
                    ));
                }
                Some(_) => {}
            }
        }
    }
    out
}
