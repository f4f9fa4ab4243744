//! Which namespaces a distribution targets (spec 07 §1.1).

use std::collections::{BTreeMap, BTreeSet};

use kruise_api::resourcedistribution::{
    ResourceDistributionTargetNamespaces, ResourceDistributionTargets,
};

use crate::selector::{self, SelectorError};

/// Never targets, even when listed (OpenKruise v1.9+).
pub const SYSTEM_NAMESPACES: [&str; 2] = ["kube-system", "kube-public"];

/// A namespace of the cluster as the distribution sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// `metadata.deletionTimestamp` is set (or `status.phase` is
    /// `Terminating`): it still counts as a target but gets no copy.
    pub terminating: bool,
}

impl NamespaceInfo {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    #[must_use]
    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    #[must_use]
    pub fn terminating(mut self) -> Self {
        self.terminating = true;
        self
    }
}

/// The namespaces of one distribution, split.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetSet {
    /// The effective targets, sorted: `status.desired` counts them. Listed
    /// namespaces that do not exist are included.
    pub matched: BTreeSet<String>,
    /// Existing namespaces that are not targets: copies this distribution
    /// owns there are deleted.
    pub unmatched: BTreeSet<String>,
}

/// The effective target set: all namespaces if `allNamespaces`, else the
/// listed ones plus those a non-empty `namespaceLabelSelector` matches;
/// minus the excluded ones and the [`SYSTEM_NAMESPACES`].
///
/// An empty selector selects nothing. An invalid selector is an error
/// (the webhook refuses such distributions).
pub fn target_namespaces(
    targets: &ResourceDistributionTargets,
    namespaces: &[NamespaceInfo],
) -> Result<TargetSet, SelectorError> {
    let mut matched = BTreeSet::new();
    if targets.all_namespaces {
        matched.extend(namespaces.iter().map(|ns| ns.name.clone()));
    } else {
        matched.extend(listed(targets.included_namespaces.as_ref()).map(str::to_owned));
    }
    if let Some(selector) = effective_selector(targets) {
        for namespace in namespaces {
            if selector::matches(selector, &namespace.labels)? {
                matched.insert(namespace.name.clone());
            }
        }
    }
    for excluded in listed(targets.excluded_namespaces.as_ref()) {
        matched.remove(excluded);
    }
    for system in SYSTEM_NAMESPACES {
        matched.remove(system);
    }
    let unmatched = namespaces
        .iter()
        .map(|ns| ns.name.clone())
        .filter(|name| !matched.contains(name))
        .collect();
    Ok(TargetSet { matched, unmatched })
}

/// Whether one namespace, with these labels, is a target. This is what the
/// controller asks when a namespace is created or relabelled to find the
/// distributions to reconcile.
pub fn selects_namespace(
    targets: &ResourceDistributionTargets,
    namespace: &NamespaceInfo,
) -> Result<bool, SelectorError> {
    let set = target_namespaces(targets, std::slice::from_ref(namespace))?;
    Ok(set.matched.contains(&namespace.name))
}

fn effective_selector(
    targets: &ResourceDistributionTargets,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector> {
    targets
        .namespace_label_selector
        .as_ref()
        .filter(|selector| !selector::is_empty(selector))
}

pub(super) fn listed(
    list: Option<&ResourceDistributionTargetNamespaces>,
) -> impl Iterator<Item = &str> {
    list.into_iter()
        .flat_map(|l| l.list.iter())
        .map(|ns| ns.name.as_str())
}
