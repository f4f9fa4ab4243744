//! ResourceDistribution: v1beta1 renames `targets.namespaceLabelSelector`
//! to `namespaceSelector` and a condition's `failedNamespace` to
//! `failedNamespaces`.

use serde_json::Value;

use super::{ConversionError, Object, Version, object_entry, rename_field};

pub(super) fn convert(object: &mut Object, to: Version) -> Result<(), ConversionError> {
    let (selector, failed) = match to {
        Version::V1beta1 => (
            ("namespaceLabelSelector", "namespaceSelector"),
            ("failedNamespace", "failedNamespaces"),
        ),
        Version::V1alpha1 => (
            ("namespaceSelector", "namespaceLabelSelector"),
            ("failedNamespaces", "failedNamespace"),
        ),
    };
    if let Some(Value::Object(spec)) = object.get_mut("spec") {
        let targets = object_entry(spec, "targets", "spec.targets")?;
        rename_field(targets, selector.0, selector.1);
    }
    let conditions = object
        .get_mut("status")
        .and_then(|status| status.get_mut("conditions"))
        .and_then(Value::as_array_mut);
    for condition in conditions.into_iter().flatten() {
        if let Value::Object(condition) = condition {
            rename_field(condition, failed.0, failed.1);
        }
    }
    Ok(())
}
