//! SidecarSet pod-create injection (spec 01): which SidecarSets apply to a
//! new pod, and the pod they turn it into.
//!
//! Everything here is a pure function of its inputs. The cluster state the
//! webhook would read (the SidecarSets, the namespace's labels, historical
//! ControllerRevisions) and the current time come in through an
//! [`InjectionContext`].
//!
//! Deliberate differences from OpenKruise:
//! * SidecarSets are processed sorted by name, so the result does not
//!   depend on listing order.
//! * Two SidecarSets emitting a container of the same name is an
//!   [`InjectionError::ContainerConflict`] naming both, instead of a pod the
//!   API server later rejects for duplicate container names.
//! * A sidecar that already defines `IS_INJECTED` does not get a second one.
//! * The `Partial` revision policy draws its coin from
//!   [`InjectionContext::random_draw`] (the core has no randomness).
//! * Hot-upgrade twins always get our `SIDECARSET_VERSION(_ALT)` env, even
//!   if the sidecar defined one.
//! * A malformed number in a `resourcesPolicy` expression (`2x`) is an
//!   error; OpenKruise's calculator reads it as 0.

mod annotations;
mod containers;
mod hash;
mod matching;
pub mod patch_whitelist;
mod pod_merge;
mod resource_expr;
mod resources;
mod revision;
pub mod update;
pub mod validation;

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::SidecarSet;

use crate::selector::SelectorError;

pub use annotations::{
    HASH_ANNOTATION, HASH_WITHOUT_IMAGE_ANNOTATION, INJECTED_ENV, INJECTED_LIST_ANNOTATION,
    WORKING_HOT_UPGRADE_ANNOTATION,
};
pub use hash::{prepare_stored, sidecarset_hashes, stamp_hashes};

/// What injection needs to know besides the pod.
#[derive(Clone, Copy, Debug, Default)]
pub struct InjectionContext<'a> {
    /// Every SidecarSet in the cluster; matching is done here.
    pub sidecar_sets: &'a [SidecarSet],
    /// Labels of the pod's Namespace object. `None` means unknown: a
    /// SidecarSet with a `namespaceSelector` then does not match. The
    /// `kubernetes.io/metadata.name` label is implied, as the API server
    /// sets it on every namespace.
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
    /// The admission request's namespace, used when the pod has none.
    pub request_namespace: Option<&'a str>,
    /// The current time (RFC 3339), written verbatim as `updateTimestamp`
    /// in the pod's hash records.
    pub now: &'a str,
    /// ControllerRevisions from Kruise's namespace, for SidecarSets whose
    /// `injectionStrategy.revision` asks for a historical revision.
    pub revisions: &'a [ControllerRevision],
    /// A uniform draw from `[0, 1)`, used only by the `Partial` revision
    /// policy with a percentage partition: the historical revision is
    /// injected when `draw < percentage`.
    pub random_draw: Option<f64>,
}

/// The injected pod and the SidecarSets applied to it.
#[derive(Clone, Debug, PartialEq)]
pub struct Injection {
    pub pod: Pod,
    /// Names of the SidecarSets that matched and were applied (after a
    /// canary displaced its base), sorted. Empty means `pod` is the input
    /// unchanged; non-empty usually means a change, but re-injecting an
    /// already injected pod matches and changes nothing.
    pub sidecar_sets: Vec<String>,
}

/// Why a pod cannot be admitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InjectionError {
    #[error("pod {pod} has no containers (spec.containers is empty)")]
    NoContainers { pod: String },
    #[error("SidecarSet {sidecar_set}: invalid spec.selector: {source}")]
    InvalidSelector {
        sidecar_set: String,
        source: SelectorError,
    },
    #[error("SidecarSet {sidecar_set}: invalid spec.updateStrategy.selector: {source}")]
    InvalidUpdateSelector {
        sidecar_set: String,
        source: SelectorError,
    },
    #[error(
        "pod annotation {key} is neither a map of hash records nor a map of names to hashes: {message}"
    )]
    InvalidHashAnnotation { key: &'static str, message: String },
    #[error("SidecarSet {sidecar_set}: patchPodMetadata cannot merge annotation {key}: {message}")]
    PatchPodMetadata {
        sidecar_set: String,
        key: String,
        message: String,
    },
    #[error(
        "container {container:?} would be injected by both SidecarSet {first} and SidecarSet {second}; container names must be unique"
    )]
    ContainerConflict {
        container: String,
        first: String,
        second: String,
    },
    #[error(
        "SidecarSet {sidecar_set}: injectionStrategy.revision asks for {wanted}, which is not among the known ControllerRevisions"
    )]
    RevisionNotFound { sidecar_set: String, wanted: String },
    #[error(
        "SidecarSet {sidecar_set}: ControllerRevision {revision} has no usable data: {message}"
    )]
    InvalidRevision {
        sidecar_set: String,
        revision: String,
        message: String,
    },
    #[error(
        "SidecarSet {sidecar_set}: spec.updateStrategy.partition {partition:?} is not a percentage like \"20%\""
    )]
    InvalidPartition {
        sidecar_set: String,
        partition: String,
    },
    #[error("SidecarSet {sidecar_set}: container {container:?}: resourcesPolicy: {message}")]
    ResourcesPolicy {
        sidecar_set: String,
        container: String,
        message: String,
    },
    #[error(
        "SidecarSet {sidecar_set}: the Partial revision policy with a percentage partition needs a random draw (InjectionContext::random_draw)"
    )]
    RandomDrawRequired { sidecar_set: String },
}

/// Inject every matching SidecarSet into a pod being created.
///
/// Inactive pods (phase `Succeeded`/`Failed`, or being deleted) and pods no
/// SidecarSet selects come back unchanged. Injecting into the result again
/// with the same context changes nothing: existing sidecars are replaced in
/// place and already-injected containers are not a source of shared volumes.
pub fn inject(pod: &Pod, ctx: &InjectionContext<'_>) -> Result<Injection, InjectionError> {
    let unchanged = || Injection {
        pod: pod.clone(),
        sidecar_sets: Vec::new(),
    };
    if !is_active(pod) {
        return Ok(unchanged());
    }
    if pod
        .spec
        .as_ref()
        .is_none_or(|spec| spec.containers.is_empty())
    {
        return Err(InjectionError::NoContainers {
            pod: display_name(pod),
        });
    }
    let namespace = pod_namespace(pod, ctx.request_namespace);
    let selected = matching::select(pod, namespace, ctx)?;
    if selected.is_empty() {
        return Ok(unchanged());
    }

    let mut pod_annotations = pod.metadata.annotations.clone().unwrap_or_default();
    for sidecar_set in &selected {
        annotations::patch_pod_metadata(&mut pod_annotations, sidecar_set)?;
    }
    // Sources (shared volumes, transferred env) are read from the pod as it
    // came in, not from the partly built result.
    let built = containers::build(pod, &selected)?;
    pod_merge::check_conflicts(&built)?;
    let mut out = pod.clone();
    if built.emitted_anything() {
        let injected = annotations::injected(&pod_annotations, &selected, &built, ctx.now)?;
        pod_annotations.extend(injected);
        pod_merge::apply(&mut out, built);
    }
    if !pod_annotations.is_empty() {
        out.metadata.annotations = Some(pod_annotations);
    }
    Ok(Injection {
        pod: out,
        sidecar_sets: names(&selected),
    })
}

/// Kubernetes' `IsPodActive`: not finished and not being deleted.
fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

/// The pod's namespace, else the request's, else `default`.
fn pod_namespace<'a>(pod: &'a Pod, request_namespace: Option<&'a str>) -> &'a str {
    [pod.metadata.namespace.as_deref(), request_namespace]
        .into_iter()
        .flatten()
        .find(|ns| !ns.is_empty())
        .unwrap_or("default")
}

/// A name for messages; pods created from `generateName` have none yet.
fn display_name(pod: &Pod) -> String {
    let meta = &pod.metadata;
    match (meta.name.as_deref(), meta.generate_name.as_deref()) {
        (Some(name), _) if !name.is_empty() => name.to_owned(),
        (_, Some(prefix)) if !prefix.is_empty() => format!("{prefix}<generated>"),
        _ => "<unnamed>".to_owned(),
    }
}

fn names(sidecar_sets: &[Cow<'_, SidecarSet>]) -> Vec<String> {
    sidecar_sets
        .iter()
        .map(|s| sidecar_set_name(s).to_owned())
        .collect()
}

fn sidecar_set_name(sidecar_set: &SidecarSet) -> &str {
    sidecar_set.metadata.name.as_deref().unwrap_or_default()
}
