//! Whose copy is it: the controller owner reference (spec 07 §1.3, §3).

use kruise_api::ResourceDistribution;
use serde_json::{Value, json};

use super::plan::PlanError;

const KIND: &str = "ResourceDistribution";

/// The controller owner reference every copy carries: Kubernetes' garbage
/// collector deletes the copies with the distribution.
pub fn controller_reference(distribution: &ResourceDistribution) -> Result<Value, PlanError> {
    let name = non_empty(distribution.metadata.name.as_deref()).ok_or(PlanError::Unnamed)?;
    let uid = non_empty(distribution.metadata.uid.as_deref()).ok_or(PlanError::NoUid)?;
    Ok(json!({
        "apiVersion": kruise_api::object::API_VERSION,
        "kind": KIND,
        "name": name,
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    }))
}

/// Whether `object`'s controller owner reference is this distribution: the
/// UIDs are compared, or kind and name when either UID is empty (so a
/// reference written by any API version of the distribution counts).
pub fn is_controlled_by(object: &Value, distribution: &ResourceDistribution) -> bool {
    owner_references(object)
        .find(|reference| reference.get("controller").and_then(Value::as_bool) == Some(true))
        .is_some_and(|reference| refers_to(reference, distribution))
}

/// Whether one owner reference points at this distribution.
pub(super) fn refers_to(reference: &Value, distribution: &ResourceDistribution) -> bool {
    let text = |key: &str| {
        reference
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let uid = distribution.metadata.uid.as_deref().unwrap_or_default();
    if !uid.is_empty() && !text("uid").is_empty() {
        return text("uid") == uid;
    }
    text("kind") == KIND
        && text("name") == distribution.metadata.name.as_deref().unwrap_or_default()
}

pub(super) fn owner_references(object: &Value) -> impl Iterator<Item = &Value> {
    object
        .get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn non_empty(text: Option<&str>) -> Option<&str> {
    text.filter(|t| !t.is_empty())
}
