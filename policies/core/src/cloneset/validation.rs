//! What OpenKruise's CloneSet validating webhook refuses, every violation
//! at once, each naming its field (OpenKruise's
//! `pkg/webhook/cloneset/validating`). It has a validator per version, and
//! judges a request with the one of the version it was made in
//! ([`Validator`]).
//!
//! [`validate`] needs only the objects of the request. The names an update
//! adds to `podsToDelete` must also be live pods of this CloneSet: the
//! policy reads them ([`added_pods_to_delete`]) and judges each with
//! [`check_pod_to_delete`].
//!
//! Of Kubernetes' own pod-template validation, the checks here are the
//! containers' names and images, restart rules, volume mounts naming a
//! volume (or a volume claim template), and each container's ports, probes
//! and resources (`container_validation`).

use std::collections::BTreeSet;
use std::num::IntErrorKind;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::CloneSet;
use kruise_api::cloneset::{CloneSetUpdateStrategy, CloneSetUpdateStrategyType};
use serde_json::Value;

use super::intorstr::{scaled_value_from_int_or_percent, value_from_int_or_percent};
use super::predownload::{
    MIN_UPDATED_READY_ANNOTATION, PARALLELISM_ANNOTATION, TIMEOUT_ANNOTATION,
};
use crate::container_validation::check_container;
use crate::names::{dns_label_error, dns_subdomain_error};
use crate::owner::is_controlled_by;
use crate::selector;
pub use crate::validation::Violation;
use crate::validation::{check_priority, check_scatter, check_selector};

/// The spec fields an update may change; any other (the selector) is fixed.
const MUTABLE_SPEC_FIELDS: [&str; 9] = [
    "replicas",
    "template",
    "scaleStrategy",
    "updateStrategy",
    "minReadySeconds",
    "lifecycle",
    "revisionHistoryLimit",
    "volumeClaimTemplates",
    "progressDeadlineSeconds",
];

/// Which of OpenKruise's two CloneSet validators judges a request: the one
/// of the version the request was made in. The API server hands the policy
/// the object converted to v1alpha1, and names the request's own version
/// in `requestKind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validator {
    V1alpha1,
    /// More lenient: it does not look up `podsToDelete`, check
    /// `progressDeadlineSeconds` or an `InPlaceOnly` update's template, and
    /// takes `OnDelete`; its rolling fields are under `rollingUpdate`, with
    /// the image pre-download ones, which it checks.
    V1beta1,
}

impl Validator {
    /// The validator of requests made in `version` (v1alpha1's for any but
    /// v1beta1).
    pub fn for_version(version: &str) -> Self {
        if version == "v1beta1" {
            Self::V1beta1
        } else {
            Self::V1alpha1
        }
    }

    /// Where the rolling update's fields are.
    fn rolling_fields(self) -> &'static str {
        match self {
            Self::V1alpha1 => "spec.updateStrategy",
            Self::V1beta1 => "spec.updateStrategy.rollingUpdate",
        }
    }
}

/// The violations of `new`, created (`old` is `None`) or updated from
/// `old`, as `validator` judges them; empty when valid.
pub fn validate(new: &CloneSet, old: Option<&CloneSet>, validator: Validator) -> Vec<Violation> {
    let mut out = Vec::new();
    let name = new.metadata.name.as_deref().unwrap_or_default();
    if let Some(message) = dns_subdomain_error(name) {
        out.push(Violation::new("metadata.name", message));
    }
    let spec = &new.spec;
    let replicas = spec.replicas.unwrap_or(1);
    if replicas < 0 {
        out.push(Violation::new(
            "spec.replicas",
            format!("Invalid value: {replicas}: must be greater than or equal to 0"),
        ));
    }
    check_selector(&spec.selector, "spec.selector", "cloneset", &mut out);
    check_template(new, &mut out);
    check_pods_to_delete(new, &mut out);
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    check_update_strategy(&strategy, replicas, validator, &mut out);
    match validator {
        Validator::V1alpha1 => check_progress_deadline(new, &mut out),
        // Under `rollingUpdate`, which OnDelete has none of.
        Validator::V1beta1 if strategy_type(new) != Some(CloneSetUpdateStrategyType::OnDelete) => {
            check_predownload(new, &mut out);
        }
        Validator::V1beta1 => {}
    }
    if let Some(old) = old {
        check_update(new, old, &strategy, validator, &mut out);
    }
    out
}

fn check_template(set: &CloneSet, out: &mut Vec<Violation>) {
    let template = &set.spec.template;
    let labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    if selector::validate(&set.spec.selector).is_ok()
        && !selector::matches(&set.spec.selector, &labels).unwrap_or(false)
    {
        out.push(Violation::new(
            "spec.template.metadata.labels",
            "Invalid value: `selector` does not match template `labels`",
        ));
    }
    let Some(pod) = &template.spec else {
        out.push(Violation::new("spec.template.spec", "Required value"));
        return;
    };
    if pod
        .restart_policy
        .as_deref()
        .is_some_and(|p| !p.is_empty() && p != "Always")
    {
        out.push(Violation::new(
            "spec.template.spec.restartPolicy",
            "Unsupported value: only \"Always\" is supported",
        ));
    }
    if pod.active_deadline_seconds.is_some() {
        out.push(Violation::new(
            "spec.template.spec.activeDeadlineSeconds",
            "Forbidden: activeDeadlineSeconds in CloneSet is not supported",
        ));
    }
    if pod.containers.is_empty() {
        out.push(Violation::new(
            "spec.template.spec.containers",
            "Required value",
        ));
    }
    // A volume claim template is mounted like a volume of the template.
    let volumes: BTreeSet<&str> = pod
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .chain(
            set.spec
                .volume_claim_templates
                .iter()
                .filter_map(|c| c.metadata.name.as_deref()),
        )
        .collect();
    let mut names = BTreeSet::new();
    let all = [
        (
            "initContainers",
            pod.init_containers.as_deref().unwrap_or_default(),
        ),
        ("containers", pod.containers.as_slice()),
    ];
    for (list, containers) in all {
        for (index, container) in containers.iter().enumerate() {
            let field = format!("spec.template.spec.{list}[{index}]");
            match dns_label_error(&container.name) {
                Some(message) => out.push(Violation::new(format!("{field}.name"), message)),
                None if !names.insert(container.name.as_str()) => out.push(Violation::new(
                    format!("{field}.name"),
                    format!("Duplicate value: {:?}", container.name),
                )),
                None => {}
            }
            if container.image.as_deref().is_none_or(str::is_empty) {
                out.push(Violation::new(format!("{field}.image"), "Required value"));
            }
            for (index, mount) in container.volume_mounts.iter().flatten().enumerate() {
                if !volumes.contains(mount.name.as_str()) {
                    out.push(Violation::new(
                        format!("{field}.volumeMounts[{index}].name"),
                        format!("Not found: {:?}", mount.name),
                    ));
                }
            }
            check_container(container, &field, out);
        }
    }
}

fn check_pods_to_delete(set: &CloneSet, out: &mut Vec<Violation>) {
    let Some(scale) = &set.spec.scale_strategy else {
        return;
    };
    let mut seen = BTreeSet::new();
    for name in &scale.pods_to_delete {
        if !seen.insert(name.as_str()) {
            out.push(Violation::new(
                "spec.scaleStrategy.podsToDelete",
                format!("Invalid value: {name:?}: duplicated"),
            ));
        }
    }
}

/// The names `new` adds to `scaleStrategy.podsToDelete` (those not already
/// in `old`'s), sorted. None when the list repeats a name: that is refused
/// already, and OpenKruise looks no further.
pub fn added_pods_to_delete(new: &CloneSet, old: Option<&CloneSet>) -> Vec<String> {
    let listed = |set: &CloneSet| {
        set.spec
            .scale_strategy
            .as_ref()
            .map(|s| s.pods_to_delete.clone())
            .unwrap_or_default()
    };
    let names = listed(new);
    let unique: BTreeSet<String> = names.iter().cloned().collect();
    if unique.len() < names.len() {
        return Vec::new();
    }
    let before: BTreeSet<String> = old.map(listed).unwrap_or_default().into_iter().collect();
    unique.difference(&before).cloned().collect()
}

/// Why `name`, newly added to `podsToDelete`, cannot be deleted by `set`:
/// no such pod (`pod` is `None`), already terminating, or controlled by
/// something else. `None` when it is a live pod of this CloneSet.
pub fn check_pod_to_delete(set: &CloneSet, name: &str, pod: Option<&Pod>) -> Option<Violation> {
    let reason = match pod {
        None => format!("find pod {name} failed: pods {name:?} not found"),
        Some(pod) if pod.metadata.deletion_timestamp.is_some() => {
            format!("find pod {name} already terminating")
        }
        Some(pod) => {
            let uid = set.metadata.uid.as_deref().unwrap_or_default();
            if !uid.is_empty() && is_controlled_by(&pod.metadata, uid) {
                return None;
            }
            format!("find pod {name} owner is not this CloneSet")
        }
    };
    Some(Violation::new(
        "spec.scaleStrategy.podsToDelete",
        format!("Invalid value: {name:?}: {reason}"),
    ))
}

fn check_update_strategy(
    strategy: &CloneSetUpdateStrategy,
    replicas: i32,
    validator: Validator,
    out: &mut Vec<Violation>,
) {
    if validator == Validator::V1alpha1
        && strategy.type_ == Some(CloneSetUpdateStrategyType::OnDelete)
    {
        out.push(Violation::new(
            "spec.updateStrategy.type",
            "Invalid value: \"OnDelete\": must be 'ReCreate', InPlaceIfPossible or 'InPlaceOnly'",
        ));
    }
    let field = validator.rolling_fields();
    let total = replicas.max(0);
    if let Some(partition) = &strategy.partition {
        match scaled_value_from_int_or_percent(partition, total, true) {
            Err(error) => out.push(Violation::new(
                format!("{field}.partition"),
                format!("Invalid value: {error}"),
            )),
            Ok(value) if value < 0 => out.push(Violation::new(
                format!("{field}.partition"),
                format!("Invalid value: {value}: must be greater than or equal to 0"),
            )),
            Ok(_) => {}
        }
    }
    check_priority(strategy.priority_strategy.as_ref(), field, "cloneset", out);
    check_scatter(&strategy.scatter_strategy, field, out);
    let scaled = |value: Option<&IntOrString>,
                  default: IntOrString,
                  name: &str,
                  out: &mut Vec<Violation>| {
        let value = value.cloned().unwrap_or(default);
        match value_from_int_or_percent(&value, total, true) {
            Ok(scaled) if scaled < 0 => {
                out.push(Violation::new(
                    format!("{field}.{name}"),
                    format!("Invalid value: {scaled}: must be greater than or equal to 0"),
                ));
                None
            }
            Ok(scaled) => Some(scaled),
            Err(error) => {
                out.push(Violation::new(
                    format!("{field}.{name}"),
                    format!("Invalid value: {error}"),
                ));
                None
            }
        }
    };
    let unavailable = scaled(
        strategy.max_unavailable.as_ref(),
        IntOrString::String("20%".to_owned()),
        "maxUnavailable",
        out,
    );
    let surge = scaled(
        strategy.max_surge.as_ref(),
        IntOrString::Int(0),
        "maxSurge",
        out,
    );
    if strategy.type_ == Some(CloneSetUpdateStrategyType::InPlaceOnly)
        && surge.is_some_and(|s| s > 0)
    {
        let message = match validator {
            Validator::V1alpha1 => "can not use maxSurge with strategy type InPlaceOnly",
            Validator::V1beta1 => "can not use maxSurge with podUpdatePolicy InPlaceOnly",
        };
        out.push(Violation::new(
            format!("{field}.maxSurge"),
            format!("Invalid value: {message}"),
        ));
    }
    if let (true, Some(unavailable), Some(surge)) = (total > 0, unavailable, surge)
        && unavailable < 1
        && surge < 1
    {
        out.push(Violation::new(
            format!("{field}.maxUnavailable"),
            "Invalid value: maxUnavailable and maxSurge should not both be less than 1",
        ));
    }
}

fn strategy_type(set: &CloneSet) -> Option<CloneSetUpdateStrategyType> {
    set.spec.update_strategy.as_ref()?.type_
}

/// v1beta1's image pre-download fields (`rollingUpdate.inPlaceUpdateStrategy`),
/// which reach the policy as v1alpha1's annotations: a whole number of
/// pods at once, not a percentage, and no negative numbers.
fn check_predownload(set: &CloneSet, out: &mut Vec<Violation>) {
    let field = "spec.updateStrategy.rollingUpdate.inPlaceUpdateStrategy";
    let annotations = set.metadata.annotations.as_ref();
    let read = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    if let Some(text) = read(PARALLELISM_ANNOTATION) {
        let problem = if text.ends_with('%') {
            Some("does not support percentage value".to_owned())
        } else {
            match text.parse::<i32>() {
                Err(error) => Some(format!(
                    "must be a valid integer: {}",
                    go_parse_int_error(text, &error)
                )),
                Ok(value) if value < 0 => Some("must be non-negative".to_owned()),
                Ok(_) => None,
            }
        };
        if let Some(problem) = problem {
            out.push(Violation::new(
                format!("{field}.imagePreDownloadParallelism"),
                format!("Invalid value: {text:?}: imagePreDownloadParallelism {problem}"),
            ));
        }
    }
    let counts = [
        (TIMEOUT_ANNOTATION, "imagePreDownloadTimeoutSeconds"),
        (
            MIN_UPDATED_READY_ANNOTATION,
            "imagePreDownloadMinUpdatedReadyPods",
        ),
    ];
    for (annotation, name) in counts {
        let Some(value) = read(annotation).and_then(|t| t.parse::<i64>().ok()) else {
            continue;
        };
        if value < 0 {
            out.push(Violation::new(
                format!("{field}.{name}"),
                format!("Invalid value: {value}: must be greater than or equal to 0"),
            ));
        }
    }
}

/// Go's `strconv.ParseInt` error for `text`, as OpenKruise's message quotes it.
fn go_parse_int_error(text: &str, error: &std::num::ParseIntError) -> String {
    let reason = match error.kind() {
        IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => "value out of range",
        _ => "invalid syntax",
    };
    format!("strconv.ParseInt: parsing {text:?}: {reason}")
}

fn check_progress_deadline(set: &CloneSet, out: &mut Vec<Violation>) {
    let Some(deadline) = set.spec.progress_deadline_seconds else {
        return;
    };
    let field = "spec.progressDeadlineSeconds";
    if deadline < 0 {
        out.push(Violation::new(
            field,
            format!("Invalid value: {deadline}: must be greater than or equal to 0"),
        ));
    } else if deadline != i32::MAX && deadline <= set.spec.min_ready_seconds.unwrap_or(0) {
        out.push(Violation::new(
            field,
            "Invalid value: must be greater than minReadySeconds",
        ));
    }
}

/// Only the mutable fields change; with `InPlaceOnly` (v1alpha1's
/// validator only), the template's spec may change only in its containers'
/// images.
fn check_update(
    new: &CloneSet,
    old: &CloneSet,
    strategy: &CloneSetUpdateStrategy,
    validator: Validator,
    out: &mut Vec<Violation>,
) {
    let fixed = |set: &CloneSet| -> Value {
        let mut spec = serde_json::to_value(&set.spec).unwrap_or(Value::Null);
        if let Some(object) = spec.as_object_mut() {
            for field in MUTABLE_SPEC_FIELDS {
                object.remove(field);
            }
        }
        spec
    };
    if fixed(new) != fixed(old) {
        out.push(Violation::new(
            "spec",
            format!(
                "Forbidden: updates to cloneset spec for fields other than {} are forbidden",
                MUTABLE_SPEC_FIELDS.map(|f| format!("'{f}'")).join(", ")
            ),
        ));
    }
    if validator == Validator::V1alpha1
        && strategy.type_ == Some(CloneSetUpdateStrategyType::InPlaceOnly)
        && !only_images_changed(old, new)
    {
        out.push(Violation::new(
            "spec.template",
            "Forbidden: only the containers' images may change with strategy type InPlaceOnly",
        ));
    }
}

/// The template's spec differs at most in `containers[*].image`.
fn only_images_changed(old: &CloneSet, new: &CloneSet) -> bool {
    let without_images = |set: &CloneSet| -> Value {
        let mut spec = serde_json::to_value(&set.spec.template.spec).unwrap_or(Value::Null);
        for container in spec["containers"].as_array_mut().into_iter().flatten() {
            if let Some(container) = container.as_object_mut() {
                container.remove("image");
            }
        }
        spec
    };
    without_images(old) == without_images(new)
}
