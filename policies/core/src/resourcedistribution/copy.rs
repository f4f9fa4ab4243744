//! The copy written in each target namespace, and when an existing copy
//! must be rewritten (spec 07 §1.3, §3 step 3).

use kruise_api::ResourceDistribution;
use serde_json::{Map, Value};

use super::base64;
use super::embedded::identify;
use super::hash::resource_hash;
use super::ownership::{controller_reference, owner_references, refers_to};
use super::plan::PlanError;
use super::{RESOURCE_FROM_ANNOTATION, RESOURCE_HASH_ANNOTATION};

/// Fields the API server sets; a copy to create carries none of them.
const SERVER_FIELDS: [&str; 8] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
];

/// The copy to create in `namespace`: `spec.resource` with that namespace,
/// the `from` and `hashcode` annotations, and the distribution as
/// controller owner.
pub fn desired_copy(
    distribution: &ResourceDistribution,
    namespace: &str,
) -> Result<Value, PlanError> {
    let resource = &distribution.spec.resource;
    identify(resource).map_err(|v| PlanError::InvalidResource(v.to_string()))?;
    build_copy(distribution, namespace, &resource_hash(resource))
}

pub(super) fn build_copy(
    distribution: &ResourceDistribution,
    namespace: &str,
    hash: &str,
) -> Result<Value, PlanError> {
    let owner = controller_reference(distribution)?;
    let distribution_name = distribution.metadata.name.clone().unwrap_or_default();
    let mut copy = distribution.spec.resource.clone();
    let Some(fields) = copy.as_object_mut() else {
        return Err(PlanError::InvalidResource(
            "spec.resource: must be an object".to_owned(),
        ));
    };
    fields.remove("status");
    let metadata = object_field(fields, "metadata");
    for field in SERVER_FIELDS {
        metadata.remove(field);
    }
    metadata.insert("namespace".to_owned(), namespace.into());
    let annotations = object_field(metadata, "annotations");
    annotations.insert(
        RESOURCE_FROM_ANNOTATION.to_owned(),
        distribution_name.into(),
    );
    annotations.insert(RESOURCE_HASH_ANNOTATION.to_owned(), hash.into());
    let owners = metadata
        .entry("ownerReferences")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !owners.is_array() {
        *owners = Value::Array(Vec::new());
    }
    if let Value::Array(owners) = owners {
        owners.retain(|reference| !refers_to(reference, distribution));
        owners.push(owner);
    }
    Ok(copy)
}

/// The object to write over an existing copy this distribution controls:
/// `desired` with the existing labels and annotations it does not set kept,
/// finalizers unioned, owner references other than the distribution's
/// kept, and the existing `resourceVersion` (so a concurrent change makes
/// the update fail rather than be lost).
pub fn updated_copy(
    desired: &Value,
    existing: &Value,
    distribution: &ResourceDistribution,
) -> Value {
    let mut updated = desired.clone();
    let Some(fields) = updated.as_object_mut() else {
        return updated;
    };
    let old = existing.get("metadata").cloned().unwrap_or_default();
    let metadata = object_field(fields, "metadata");
    for key in ["labels", "annotations"] {
        if let Some(Value::Object(old_map)) = old.get(key) {
            let map = object_field(metadata, key);
            for (k, v) in old_map {
                map.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
    if let Some(Value::Array(old_finalizers)) = old.get("finalizers") {
        let mut finalizers = old_finalizers.clone();
        if let Some(Value::Array(new_finalizers)) = metadata.get("finalizers") {
            for finalizer in new_finalizers {
                if !finalizers.contains(finalizer) {
                    finalizers.push(finalizer.clone());
                }
            }
        }
        metadata.insert("finalizers".to_owned(), Value::Array(finalizers));
    }
    let mut owners: Vec<Value> = owner_references(existing)
        .filter(|reference| !refers_to(reference, distribution))
        .cloned()
        .collect();
    if let Some(Value::Array(desired_owners)) = metadata.get("ownerReferences") {
        for reference in desired_owners {
            if !owners.contains(reference) {
                owners.push(reference.clone());
            }
        }
    }
    metadata.insert("ownerReferences".to_owned(), Value::Array(owners));
    if let Some(version) = old.get("resourceVersion").filter(|v| v.is_string()) {
        metadata.insert("resourceVersion".to_owned(), version.clone());
    }
    updated
}

/// Whether an existing copy already holds what `desired` distributes:
/// equal once `metadata`, `status`, `apiVersion` and `kind` are dropped and
/// both are put in the form the API server stores (a Secret's `stringData`
/// folded into `data`, its `type` defaulted to `Opaque`, empty maps
/// dropped). Labels and annotations therefore never cause an update.
pub fn is_up_to_date(existing: &Value, desired: &Value) -> bool {
    stored_content(existing) == stored_content(desired)
}

fn stored_content(object: &Value) -> Value {
    let mut content = object.as_object().cloned().unwrap_or_default();
    for key in ["metadata", "status", "apiVersion", "kind"] {
        content.remove(key);
    }
    let is_secret = object.get("kind").and_then(Value::as_str) == Some("Secret");
    if is_secret {
        if let Some(Value::Object(string_data)) = content.remove("stringData") {
            let data = object_field(&mut content, "data");
            for (key, value) in string_data {
                let text = value.as_str().unwrap_or_default();
                data.insert(key, base64::encode(text.as_bytes()).into());
            }
        }
        if content.get("type").is_none_or(Value::is_null) {
            content.insert("type".to_owned(), "Opaque".into());
        }
    }
    content.retain(|_, value| match value {
        Value::Null => false,
        Value::Object(map) => !map.is_empty(),
        _ => true,
    });
    Value::Object(content)
}

/// `fields[key]` as an object, replacing anything else found there.
fn object_field<'a>(fields: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = fields
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(map) => map,
        _ => unreachable!("replaced by an object above"),
    }
}
