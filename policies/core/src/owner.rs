//! Controller owner references, the link the garbage collector follows.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::{Metadata, Resource};

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
