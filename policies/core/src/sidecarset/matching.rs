//! Which SidecarSets apply to a pod (spec 01 §3.1, §3.2 and §5).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kruise_api::SidecarSet;

use super::{InjectionContext, InjectionError, revision, sidecar_set_name};
use crate::selector::{self, SelectorError};

/// Set by the API server on every Namespace to the namespace's name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
pub(super) const CANARY_ANNOTATION: &str = "apps.kruise.io/sidecarset-canary";
pub(super) const BASE_ANNOTATION: &str = "apps.kruise.io/sidecarset-base";

/// The SidecarSets to inject, sorted by name, each already resolved to the
/// revision this pod gets (borrowed unless it is a historical one). A
/// canary replaces its base.
pub(super) fn select<'a>(
    pod: &Pod,
    namespace: &str,
    ctx: &InjectionContext<'a>,
) -> Result<Vec<Cow<'a, SidecarSet>>, InjectionError> {
    let mut candidates: Vec<&SidecarSet> = ctx.sidecar_sets.iter().collect();
    crate::ordered::sort_by(&mut candidates, |a, b| {
        sidecar_set_name(a).cmp(sidecar_set_name(b))
    });

    let mut kept = Vec::new();
    let mut replaced_bases = BTreeSet::new();
    for candidate in candidates {
        if !matches_pod(candidate, pod, namespace, ctx.namespace_labels)? {
            continue;
        }
        kept.push(revision::suitable(candidate, pod, ctx)?);
        if let Some(base) = canary_base(candidate) {
            replaced_bases.insert(base.to_owned());
        }
    }
    kept.retain(|s| !replaced_bases.contains(sidecar_set_name(s)));
    Ok(kept)
}

/// Not paused, then [`selects`].
fn matches_pod(
    sidecar_set: &SidecarSet,
    pod: &Pod,
    namespace: &str,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> Result<bool, InjectionError> {
    if sidecar_set
        .spec
        .injection_strategy
        .as_ref()
        .is_some_and(|s| s.paused)
    {
        return Ok(false);
    }
    selects(sidecar_set, pod, namespace, namespace_labels).map_err(|source| {
        InjectionError::InvalidSelector {
            sidecar_set: sidecar_set_name(sidecar_set).to_owned(),
            source,
        }
    })
}

/// Namespace, namespaceSelector (unknown `namespace_labels` do not match),
/// then the (non-empty) pod selector. Only an invalid pod selector is an
/// error; an invalid namespaceSelector just does not match, as in OpenKruise.
pub(crate) fn selects(
    sidecar_set: &SidecarSet,
    pod: &Pod,
    namespace: &str,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> Result<bool, SelectorError> {
    let spec = &sidecar_set.spec;
    if spec
        .namespace
        .as_deref()
        .is_some_and(|ns| !ns.is_empty() && ns != namespace)
    {
        return Ok(false);
    }
    if let Some(namespace_selector) = &spec.namespace_selector {
        let Some(known) = namespace_labels else {
            return Ok(false);
        };
        let mut labels = known.clone();
        labels.insert(NAMESPACE_NAME_LABEL.to_owned(), namespace.to_owned());
        if !selector::matches(namespace_selector, &labels).unwrap_or(false) {
            return Ok(false);
        }
    }
    let Some(pod_selector) = spec.selector.as_ref().filter(|s| !selector::is_empty(s)) else {
        return Ok(false);
    };
    let empty_labels = BTreeMap::new();
    let pod_labels = pod.metadata.labels.as_ref().unwrap_or(&empty_labels);
    selector::matches(pod_selector, pod_labels)
}

/// The base a canary SidecarSet stands in for (§5).
pub(super) fn canary_base(sidecar_set: &SidecarSet) -> Option<&str> {
    let annotations = sidecar_set.metadata.annotations.as_ref()?;
    let is_canary = annotations
        .get(CANARY_ANNOTATION)
        .is_some_and(|v| v == "true");
    let base = annotations.get(BASE_ANNOTATION).filter(|b| !b.is_empty())?;
    is_canary.then_some(base.as_str())
}
