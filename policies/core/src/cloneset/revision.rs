//! CloneSet revisions (spec 03 §4): the ControllerRevision payload and
//! name, which revision is the update and the current one, whether to
//! create, bump or reuse, and which old revisions to delete.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kruise_api::{CloneSet, Strictness};
use serde_json::{Value, json};

use super::Revisions;
use super::pod_state::{revision_label, short_hash};
use crate::go_json::{self, types::POD_TEMPLATE_SPEC};
use crate::owner::controller_reference;

/// Label Kubernetes puts on revisions: the hash part of the name.
pub const LABEL_REVISION_HASH: &str = "controller.kubernetes.io/hash";

/// What to write for the update revision this round.
#[derive(Clone, Debug, PartialEq)]
pub enum RevisionWrite {
    /// The newest revision already holds the template.
    None,
    /// A new ControllerRevision.
    Create(Box<ControllerRevision>),
    /// An older revision holds the template (a rollback): raise its
    /// `.revision` to make it the newest.
    Bump { name: String, revision: i64 },
}

#[derive(Clone, Debug, PartialEq)]
pub struct RevisionPlan {
    pub revisions: Revisions,
    pub write: RevisionWrite,
    /// The collision count to record in status (raised on a name clash).
    pub collision_count: i32,
    /// Old revisions beyond `revisionHistoryLimit`, oldest first.
    pub delete: Vec<String>,
}

/// The payload Kubernetes' history keeps for a CloneSet: its template
/// only, as OpenKruise writes it (Go's JSON of the template, so with its
/// zero values: `"creationTimestamp":null`, `"resources":{}`), so the
/// revision of a template has OpenKruise's name.
pub fn revision_data(template: &PodTemplateSpec) -> Value {
    let value = serde_json::to_value(template).unwrap_or(Value::Null);
    // A template Go could not decode (a quantity that does not parse) is
    // kept as it is: OpenKruise would have no revision to compare with.
    let mut template = go_json::as_go_value(&value, &POD_TEMPLATE_SPEC).unwrap_or(value);
    if let Some(map) = template.as_object_mut() {
        map.insert("$patch".to_owned(), json!("replace"));
    }
    json!({ "spec": { "template": template } })
}

/// The template a revision holds, in the one spelling every template is
/// compared in ([`as_stored`]), whoever wrote the revision.
pub fn template_of(revision: &ControllerRevision) -> Option<PodTemplateSpec> {
    template_in(&revision.data.0).map(|template| as_stored(&template))
}

fn template_in(data: &Value) -> Option<PodTemplateSpec> {
    let mut template = data.get("spec")?.get("template")?.clone();
    if let Some(map) = template.as_object_mut() {
        map.remove("$patch");
    }
    kruise_api::from_value(template, Strictness::Lenient).ok()
}

/// `template` as a revision holds it, read back: Go's zero values filled
/// in (`resources: {}`), so that templates from revisions and from the
/// CloneSet differ only where they really differ.
fn as_stored(template: &PodTemplateSpec) -> PodTemplateSpec {
    template_in(&revision_data(template)).unwrap_or_else(|| template.clone())
}

/// The revision hash of a payload (Kubernetes' `HashControllerRevision`).
pub use crate::history::controller_revision_hash as revision_hash;

pub fn revision_name(cloneset: &str, hash: &str) -> String {
    format!("{cloneset}-{hash}")
}

/// Decides the revisions of this round from the CloneSet, its existing
/// ControllerRevisions and its pods (for history truncation).
pub fn plan_revisions(
    cloneset: &CloneSet,
    existing: &[ControllerRevision],
    pods: &[Pod],
) -> RevisionPlan {
    let name = cloneset.metadata.name.clone().unwrap_or_default();
    let data = revision_data(&cloneset.spec.template);
    let mut collision_count = cloneset
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let by_name: BTreeMap<&str, &ControllerRevision> = existing
        .iter()
        .filter_map(|r| Some((r.metadata.name.as_deref()?, r)))
        .collect();
    let number = |r: &ControllerRevision| r.revision.unwrap_or(0);
    let newest = existing.iter().map(number).max().unwrap_or(0);
    // The same template however its revision spells it (written by
    // OpenKruise, or by an older version of ours without Go's zero values).
    let holds_template = |r: &ControllerRevision| {
        r.data.0 == data || template_in(&r.data.0).is_some_and(|t| revision_data(&t) == data)
    };
    let equal = existing
        .iter()
        .filter(|r| holds_template(r))
        .max_by_key(|r| number(r));

    let (update, write) = if let Some(found) = equal {
        let found_name = found.metadata.name.clone().unwrap_or_default();
        if number(found) == newest {
            (found_name, RevisionWrite::None)
        } else {
            let bump = RevisionWrite::Bump {
                name: found_name.clone(),
                revision: newest + 1,
            };
            (found_name, bump)
        }
    } else {
        // A taken name with other data is a hash collision: probe on.
        let mut hash = revision_hash(&data, collision_count);
        while by_name.contains_key(revision_name(&name, &hash).as_str()) {
            collision_count += 1;
            hash = revision_hash(&data, collision_count);
        }
        let revision = new_revision(cloneset, &data, &hash, newest + 1);
        (
            revision_name(&name, &hash),
            RevisionWrite::Create(Box::new(revision)),
        )
    };

    let previous_current = cloneset
        .status
        .as_ref()
        .and_then(|s| s.current_revision.clone())
        .filter(|current| by_name.contains_key(current.as_str()));
    let current = previous_current.unwrap_or_else(|| update.clone());
    let mut templates: BTreeMap<String, PodTemplateSpec> = existing
        .iter()
        .filter_map(|r| Some((r.metadata.name.clone()?, template_of(r)?)))
        .collect();
    templates.insert(update.clone(), as_stored(&cloneset.spec.template));
    let limit = cloneset.spec.revision_history_limit.unwrap_or(10);
    let delete = history_to_delete(existing, pods, [&current, &update], limit);
    RevisionPlan {
        revisions: Revisions {
            current,
            update,
            templates,
        },
        write,
        collision_count,
        delete,
    }
}

fn new_revision(cloneset: &CloneSet, data: &Value, hash: &str, number: i64) -> ControllerRevision {
    let name = cloneset.metadata.name.clone().unwrap_or_default();
    let mut labels = cloneset
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(LABEL_REVISION_HASH.to_owned(), hash.to_owned());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(&name, hash)),
            namespace: cloneset.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: cloneset.metadata.annotations.clone(),
            owner_references: controller_reference(cloneset).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        data: RawExtension(data.clone()),
        revision: Some(number),
    }
}

/// Revisions neither current, update nor used by a pod, beyond the limit,
/// oldest first.
fn history_to_delete(
    existing: &[ControllerRevision],
    pods: &[Pod],
    keep: [&String; 2],
    limit: i32,
) -> Vec<String> {
    let live: BTreeSet<&str> = pods
        .iter()
        .filter_map(revision_label)
        .map(short_hash)
        .collect();
    let mut history: Vec<&ControllerRevision> = existing
        .iter()
        .filter(|r| {
            let name = r.metadata.name.as_deref().unwrap_or_default();
            !keep.iter().any(|k| k.as_str() == name) && !live.contains(short_hash(name))
        })
        .collect();
    crate::ordered::sort_by_key(&mut history, |r| r.revision.unwrap_or(0));
    let surplus = history
        .len()
        .saturating_sub(usize::try_from(limit).unwrap_or(0));
    history
        .into_iter()
        .take(surplus)
        .filter_map(|r| r.metadata.name.clone())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn safe_encoding_uses_the_kubernetes_alphabet() {
        // '0' is byte 48: 48 % 27 = 21 -> '4'.
        assert_eq!(crate::history::safe_encode("0"), "4");
        assert!(
            revision_hash(&json!({}), 0)
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
        );
    }

    #[test]
    fn the_collision_count_changes_the_hash() {
        let data = json!({"spec": {"template": {}}});
        assert_ne!(revision_hash(&data, 0), revision_hash(&data, 1));
        assert_eq!(revision_hash(&data, 0), revision_hash(&data, 0));
    }
}
