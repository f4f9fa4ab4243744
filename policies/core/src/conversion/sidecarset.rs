//! SidecarSet: v1alpha1's `namespace` becomes a v1beta1 `namespaceSelector`
//! on `kubernetes.io/metadata.name` (and wins over a selector set beside
//! it); the custom-version label becomes `spec.customVersion`.

use serde_json::{Value, json};

use super::{
    ConversionError, Object, drop_empty_metadata_map, metadata_map, object_entry, string_at,
};
use crate::sidecarset::update::CUSTOM_VERSION_LABEL;

/// The label Kubernetes puts on every namespace, holding its name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

pub(super) fn to_v1beta1(object: &mut Object) -> Result<(), ConversionError> {
    let custom_version = take_custom_version_label(object)?;
    let spec = object_entry(object, "spec", "spec")?;
    let namespace = string_at(spec, "namespace", "spec.namespace")?.map(str::to_owned);
    spec.remove("namespace");
    if let Some(namespace) = namespace.filter(|n| !n.is_empty()) {
        spec.insert(
            "namespaceSelector".to_owned(),
            json!({ "matchLabels": { NAMESPACE_NAME_LABEL: namespace } }),
        );
    }
    if let Some(version) = custom_version.filter(|v| !v.is_empty()) {
        spec.insert("customVersion".to_owned(), Value::from(version));
    }
    Ok(())
}

pub(super) fn to_v1alpha1(object: &mut Object) -> Result<(), ConversionError> {
    let spec = object_entry(object, "spec", "spec")?;
    let version = string_at(spec, "customVersion", "spec.customVersion")?.map(str::to_owned);
    spec.remove("customVersion");
    if let Some(version) = version.filter(|v| !v.is_empty()) {
        metadata_map(object, "labels")?
            .insert(CUSTOM_VERSION_LABEL.to_owned(), Value::from(version));
    }
    Ok(())
}

fn take_custom_version_label(object: &mut Object) -> Result<Option<String>, ConversionError> {
    let labels = metadata_map(object, "labels")?;
    let version = match labels.remove(CUSTOM_VERSION_LABEL) {
        None => None,
        Some(Value::String(version)) => Some(version),
        Some(_) => {
            return Err(ConversionError::new(
                &format!("metadata.labels.{CUSTOM_VERSION_LABEL}"),
                "expected a string",
            ));
        }
    };
    drop_empty_metadata_map(object, "labels");
    Ok(version)
}
