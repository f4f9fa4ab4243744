//! What OpenKruise's ResourceDistribution webhook refuses (spec 07 §2),
//! every violation at once, each naming its field.
//!
//! The webhook's dry-run create of the resource is replaced by the checks
//! the API server would make on a Secret or ConfigMap (names, keys, base64,
//! sizes, per-type required keys); a policy cannot call the API server.

use std::collections::BTreeSet;

use kruise_api::ResourceDistribution;
use kruise_api::resourcedistribution::ResourceDistributionTargets;

use super::creatable::check_creatable;
use super::embedded::identify;
use super::targets::listed;
use crate::names::{dns_label_error, dns_subdomain_error};
use crate::selector;
pub use crate::validation::Violation;

/// The violations of a distribution being created; empty when valid.
pub fn validate_create(distribution: &ResourceDistribution) -> Vec<Violation> {
    let mut violations = Vec::new();
    check_object_meta(distribution, &mut violations);
    match identify(&distribution.spec.resource) {
        Ok(identity) => violations.extend(check_creatable(&distribution.spec.resource, &identity)),
        Err(violation) => violations.push(violation),
    }
    check_targets(&distribution.spec.targets, &mut violations);
    violations
}

/// The violations of an update from `old` to `new`: everything
/// [`validate_create`] checks on `new`, and the resource's `apiVersion`,
/// `kind` and `metadata.name` must not change.
pub fn validate_update(new: &ResourceDistribution, old: &ResourceDistribution) -> Vec<Violation> {
    let mut violations = validate_create(new);
    let field = |value: &serde_json::Value, path: &[&str]| -> Option<String> {
        path.iter()
            .try_fold(value, |v, key| v.get(key))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    for (path, name) in [
        (&["apiVersion"][..], "spec.resource.apiVersion"),
        (&["kind"][..], "spec.resource.kind"),
        (&["metadata", "name"][..], "spec.resource.metadata.name"),
    ] {
        let (before, after) = (
            field(&old.spec.resource, path),
            field(&new.spec.resource, path),
        );
        if before != after {
            violations.push(Violation::new(
                name,
                format!(
                    "field is immutable: was {}, now {}",
                    shown(before.as_deref()),
                    shown(after.as_deref())
                ),
            ));
        }
    }
    violations
}

fn shown(value: Option<&str>) -> String {
    value.map_or_else(|| "unset".to_owned(), |v| format!("{v:?}"))
}

fn check_object_meta(distribution: &ResourceDistribution, out: &mut Vec<Violation>) {
    let metadata = &distribution.metadata;
    match metadata.name.as_deref() {
        None | Some("") => {
            if metadata.generate_name.as_deref().is_none_or(str::is_empty) {
                out.push(Violation::new(
                    "metadata.name",
                    "name or generateName is required",
                ));
            }
        }
        Some(name) => {
            if let Some(message) = dns_subdomain_error(name) {
                out.push(Violation::new("metadata.name", message));
            }
        }
    }
    if metadata
        .namespace
        .as_deref()
        .is_some_and(|ns| !ns.is_empty())
    {
        out.push(Violation::new(
            "metadata.namespace",
            "not allowed: ResourceDistribution is cluster-scoped",
        ));
    }
}

fn check_targets(targets: &ResourceDistributionTargets, out: &mut Vec<Violation>) {
    let lists = [
        ("includedNamespaces", targets.included_namespaces.as_ref()),
        ("excludedNamespaces", targets.excluded_namespaces.as_ref()),
    ];
    for (list_name, list) in lists {
        for (index, name) in listed(list).enumerate() {
            if let Some(message) = dns_label_error(name) {
                out.push(Violation::new(
                    format!("spec.targets.{list_name}.list[{index}].name"),
                    format!("{name:?} is not a valid namespace name: {message}"),
                ));
            }
        }
    }
    let included: BTreeSet<&str> = listed(targets.included_namespaces.as_ref()).collect();
    let ambiguous: BTreeSet<&str> = listed(targets.excluded_namespaces.as_ref())
        .filter(|name| included.contains(name))
        .collect();
    for name in ambiguous {
        out.push(Violation::new(
            "spec.targets",
            format!(
                "ambiguous targets: namespace {name:?} is in both includedNamespaces and excludedNamespaces"
            ),
        ));
    }
    if let Some(namespace_selector) = &targets.namespace_label_selector
        && let Err(e) = selector::matches(namespace_selector, &std::collections::BTreeMap::new())
    {
        out.push(Violation::new(
            "spec.targets.namespaceLabelSelector",
            format!("invalid selector: {e}"),
        ));
    }
}
