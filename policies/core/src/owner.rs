//! Controller owner references, the link the garbage collector follows.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::{Metadata, Resource};
use serde_json::{Value, json};

/// A controller reference to `owner` (with `blockOwnerDeletion`), or
/// `None` if it has no name or uid yet.
pub fn controller_reference<K>(owner: &K) -> Option<OwnerReference>
where
    K: Resource + Metadata<Ty = ObjectMeta>,
{
    let metadata = owner.metadata();
    Some(OwnerReference {
        api_version: K::API_VERSION.to_owned(),
        kind: K::KIND.to_owned(),
        name: metadata.name.clone()?,
        uid: metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// Whether `object` is controlled by the owner with this uid.
pub fn is_controlled_by(object: &ObjectMeta, owner_uid: &str) -> bool {
    object
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == owner_uid)
}

/// Whether `object` has no controller (an orphan: its owner was deleted
/// with `--cascade=orphan`, or it never had one).
pub fn is_orphan(object: &ObjectMeta) -> bool {
    !object
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true))
}

/// The merge patch that releases `object` from the owner with this uid:
/// its owner references without that one, on the version read (a write in
/// between, such as another owner's adoption, makes it a conflict).
pub fn release_patch(object: &ObjectMeta, owner_uid: &str) -> Value {
    let kept: Vec<&OwnerReference> = object
        .owner_references
        .iter()
        .flatten()
        .filter(|r| r.uid != owner_uid)
        .collect();
    json!({
        "metadata": {
            "resourceVersion": object.resource_version,
            "ownerReferences": kept,
        },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn owned_by(references: &[(&str, Option<bool>)]) -> ObjectMeta {
        ObjectMeta {
            owner_references: Some(
                references
                    .iter()
                    .map(|(uid, controller)| OwnerReference {
                        uid: (*uid).to_owned(),
                        controller: *controller,
                        ..OwnerReference::default()
                    })
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_a_controller_reference_makes_an_object_controlled() {
        let controlled = owned_by(&[("a", Some(false)), ("b", Some(true))]);
        assert!(is_controlled_by(&controlled, "b"));
        assert!(!is_controlled_by(&controlled, "a"));
        assert!(!is_orphan(&controlled));
        assert!(is_orphan(&owned_by(&[("a", Some(false)), ("c", None)])));
        assert!(is_orphan(&ObjectMeta::default()));
    }

    #[test]
    fn a_release_keeps_the_other_owners_on_the_version_read() {
        let mut object = owned_by(&[("a", Some(false)), ("b", Some(true))]);
        object.resource_version = Some("9".to_owned());
        let patch = release_patch(&object, "b");
        assert_eq!(patch["metadata"]["resourceVersion"], "9");
        let kept = patch["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0]["uid"], "a");
        let alone = owned_by(&[("b", Some(true))]);
        assert_eq!(
            release_patch(&alone, "b")["metadata"]["ownerReferences"],
            json!([])
        );
    }
}
