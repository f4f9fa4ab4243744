//! ControllerRevisions of a SidecarSet (spec 02 §6): which revision is the
//! latest, what to create, bump or label, and which old ones to delete.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kruise_api::SidecarSet;
use serde_json::{Value, json};

use super::pods::hash_records;
use crate::history::controller_revision_hash;
use crate::sidecarset::{HASH_ANNOTATION, sidecar_set_name};

/// On a revision: the SidecarSet it belongs to.
pub const REVISION_OWNER_LABEL: &str = "kruise.io/sidecarset-name";
/// On a SidecarSet (v1alpha1) and its revisions: the user's version name.
pub const CUSTOM_VERSION_LABEL: &str = "apps.kruise.io/sidecarset-custom-version";
/// Kubernetes' revision hash label.
const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// The write that makes the latest revision exist.
#[derive(Clone, Debug, PartialEq)]
pub enum RevisionWrite {
    /// The newest stored revision already holds this spec.
    None,
    /// An older revision holds it (a rollback): set its `.revision` to
    /// `revision` so it becomes the newest.
    Bump { name: String, revision: i64 },
    /// Create this revision. If the API server answers AlreadyExists, add
    /// the existing object to the listed revisions and plan again: it is
    /// either reused or skipped with a higher collision count.
    Create(Box<ControllerRevision>),
}

/// What [`plan_revisions`] decided.
#[derive(Clone, Debug, PartialEq)]
pub struct RevisionPlan {
    /// The latest revision as it is once `write` is done; its name goes into
    /// the status and the pods' hash records.
    pub latest: ControllerRevision,
    pub write: RevisionWrite,
    /// The collision count to store in the status.
    pub collision_count: i32,
    /// Set this `apps.kruise.io/sidecarset-custom-version` label on the
    /// latest revision.
    pub custom_version_label: Option<String>,
    /// Revisions to delete, oldest first.
    pub delete: Vec<String>,
    /// Set when the history stays over `revisionHistoryLimit` because pods
    /// still use the old revisions (log it; not a failure).
    pub truncate_error: Option<String>,
}

/// The revision payload: the spec fields a historical injection restores,
/// as a `$patch: replace` strategic merge patch (absent fields are `null`).
pub fn revision_data(sidecar_set: &SidecarSet) -> Value {
    let spec = serde_json::to_value(&sidecar_set.spec).unwrap_or(Value::Null);
    let field = |name: &str| spec.get(name).cloned().unwrap_or(Value::Null);
    json!({
        "spec": {
            "$patch": "replace",
            "volumes": field("volumes"),
            "containers": field("containers"),
            "initContainers": field("initContainers"),
            "imagePullSecrets": field("imagePullSecrets"),
            "patchPodMetadata": field("patchPodMetadata"),
        }
    })
}

fn data_of(revision: &ControllerRevision) -> &Value {
    &revision.data.0
}

fn number(revision: &ControllerRevision) -> i64 {
    revision.revision.unwrap_or(0)
}

fn label<'a>(revision: &'a ControllerRevision, key: &str) -> Option<&'a str> {
    revision
        .metadata
        .labels
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn custom_version(sidecar_set: &SidecarSet) -> Option<&str> {
    sidecar_set
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CUSTOM_VERSION_LABEL))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

fn new_revision(
    sidecar_set: &SidecarSet,
    namespace: &str,
    data: &Value,
    revision: i64,
    collision_count: i32,
) -> ControllerRevision {
    let name = sidecar_set_name(sidecar_set);
    let hash = controller_revision_hash(data, collision_count);
    let mut labels = sidecar_set.metadata.labels.clone().unwrap_or_default();
    labels.insert(REVISION_OWNER_LABEL.to_owned(), name.to_owned());
    labels.insert(HASH_LABEL.to_owned(), hash.clone());
    let prefix: String = name.chars().take(223).collect();
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{prefix}-{hash}")),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            annotations: sidecar_set.metadata.annotations.clone(),
            ..ObjectMeta::default()
        },
        data: RawExtension(data.clone()),
        revision: Some(revision),
    }
}

/// `replaceRevision`: drop `revisions[old]` and append `new`, keeping the
/// order of the others.
pub fn replace_revision(
    revisions: &mut Vec<ControllerRevision>,
    old: usize,
    new: ControllerRevision,
) {
    if old < revisions.len() {
        revisions.remove(old);
    }
    revisions.push(new);
}

/// Spec 02 §6 in one go: register the SidecarSet's current spec as the
/// latest revision among `existing` (the revisions labelled with its name,
/// in Kruise's `namespace`), then pick the old revisions to delete.
/// `matched` are the SidecarSet's matched pods (their hash records name the
/// revisions still in use).
pub fn plan_revisions(
    sidecar_set: &SidecarSet,
    existing: &[ControllerRevision],
    matched: &[&Pod],
    namespace: &str,
) -> RevisionPlan {
    let mut revisions = existing.to_vec();
    crate::ordered::sort_by_key(&mut revisions, number);
    let data = revision_data(sidecar_set);
    let next = revisions.last().map_or(1, |r| number(r) + 1);
    let mut collision_count = sidecar_set
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);

    let equal = revisions.iter().rposition(|r| data_of(r) == &data);
    let (latest, write) = match equal {
        Some(index) if index + 1 == revisions.len() => {
            (revisions[index].clone(), RevisionWrite::None)
        }
        Some(index) => {
            let mut bumped = revisions[index].clone();
            bumped.revision = Some(next);
            let name = bumped.metadata.name.clone().unwrap_or_default();
            replace_revision(&mut revisions, index, bumped.clone());
            (
                bumped,
                RevisionWrite::Bump {
                    name,
                    revision: next,
                },
            )
        }
        None => loop {
            let candidate = new_revision(sidecar_set, namespace, &data, next, collision_count);
            match revisions
                .iter()
                .find(|r| r.metadata.name == candidate.metadata.name)
            {
                Some(clash) if data_of(clash) == &data => {
                    break (clash.clone(), RevisionWrite::None);
                }
                Some(_) => collision_count = collision_count.saturating_add(1),
                None => {
                    revisions.push(candidate.clone());
                    break (
                        candidate.clone(),
                        RevisionWrite::Create(Box::new(candidate)),
                    );
                }
            }
        },
    };

    let custom_version_label = custom_version(sidecar_set)
        .filter(|v| label(&latest, CUSTOM_VERSION_LABEL) != Some(*v))
        .map(str::to_owned);
    let (delete, truncate_error) = truncate(sidecar_set, &revisions, matched);
    RevisionPlan {
        latest,
        write,
        collision_count,
        custom_version_label,
        delete,
        truncate_error,
    }
}

/// Revisions in use: named by a matched pod's hash record, by
/// `injectionStrategy.revision.revisionName`, or the newest carrying
/// `injectionStrategy.revision.customVersion`.
pub fn active_revisions(
    sidecar_set: &SidecarSet,
    revisions: &[ControllerRevision],
    matched: &[&Pod],
) -> BTreeSet<String> {
    let name = sidecar_set_name(sidecar_set);
    let mut active: BTreeSet<String> = matched
        .iter()
        .filter_map(|pod| hash_records(pod, HASH_ANNOTATION).remove(name))
        .map(|record| record.controller_revision)
        .filter(|r| !r.is_empty())
        .collect();
    let pinned = sidecar_set
        .spec
        .injection_strategy
        .as_ref()
        .and_then(|s| s.revision.as_ref());
    if let Some(pinned) = pinned {
        if let Some(revision_name) = &pinned.revision_name {
            active.insert(revision_name.clone());
        }
        if let Some(version) = &pinned.custom_version {
            let newest = revisions
                .iter()
                .filter(|r| label(r, CUSTOM_VERSION_LABEL) == Some(version.as_str()))
                .max_by_key(|r| number(r));
            active.extend(newest.and_then(|r| r.metadata.name.clone()));
        }
    }
    active
}

/// `truncateHistory`: keep `max(1, revisionHistoryLimit)` (default 10)
/// revisions, deleting the oldest inactive ones and never the newest.
fn truncate(
    sidecar_set: &SidecarSet,
    revisions: &[ControllerRevision],
    matched: &[&Pod],
) -> (Vec<String>, Option<String>) {
    let limit =
        usize::try_from(sidecar_set.spec.revision_history_limit.unwrap_or(10).max(1)).unwrap_or(1);
    if revisions.len() <= limit {
        return (Vec::new(), None);
    }
    let mut excess = revisions.len() - limit;
    let active = active_revisions(sidecar_set, revisions, matched);
    let mut delete = Vec::new();
    for revision in &revisions[..revisions.len() - 1] {
        if excess == 0 {
            break;
        }
        let name = revision.metadata.name.clone().unwrap_or_default();
        if !active.contains(&name) {
            delete.push(name);
            excess -= 1;
        }
    }
    let error = (excess > 0).then(|| {
        format!(
            "failed to limit the number of stored revisions, limited: {limit}, actual: {}, name: {}",
            limit + excess,
            sidecar_set_name(sidecar_set)
        )
    });
    (delete, error)
}
