//! An object as the API server stores it, read leniently: its metadata
//! always, its typed form only if it parses.
//!
//! The CRDs keep many fields free strings (as OpenKruise's do), so the API
//! server can hold an object our types refuse: one stored before a
//! validating webhook existed, or written by an older version. A watch or
//! list of the typed kind fails whole on such an object; a watch of
//! `Stored<K>` keeps every other object flowing and hands the bad one over
//! with the reason, for the controller to report and skip.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use crate::object::{KruiseObject, Strictness, from_value, object_from_value};

#[derive(Clone, Debug, PartialEq)]
pub struct Stored<K> {
    pub metadata: ObjectMeta,
    /// The object, or why it cannot be read (the field path and the
    /// problem, e.g. `spec.updateStrategy.type: unknown variant ...`).
    pub object: Result<K, String>,
}

impl<K: KruiseObject> Stored<K> {
    /// Reads a stored object; only unreadable metadata (which the API
    /// server validates, so never seen from it) is an error.
    pub fn from_value(value: serde_json::Value) -> Result<Self, String> {
        let metadata = match value.get("metadata") {
            Some(metadata) => from_value::<ObjectMeta>(metadata.clone(), Strictness::Lenient)
                .map_err(|e| format!("{} metadata: {e}", K::KIND))?,
            None => ObjectMeta::default(),
        };
        let object = object_from_value(value, Strictness::Lenient).map_err(|e| e.to_string());
        Ok(Self { metadata, object })
    }

    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}

impl<K: k8s_openapi::Resource> k8s_openapi::Resource for Stored<K> {
    const API_VERSION: &'static str = K::API_VERSION;
    const GROUP: &'static str = K::GROUP;
    const KIND: &'static str = K::KIND;
    const VERSION: &'static str = K::VERSION;
    const URL_PATH_SEGMENT: &'static str = K::URL_PATH_SEGMENT;
    type Scope = K::Scope;
}

impl<K: k8s_openapi::Resource> k8s_openapi::Metadata for Stored<K> {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de, K: KruiseObject> Deserialize<'de> for Stored<K> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Self::from_value(value).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::SidecarSet;

    #[test]
    fn a_readable_object_is_read_and_an_unreadable_one_keeps_its_name_and_reason() {
        let good = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": "good", "resourceVersion": "7"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        });
        let stored: Stored<SidecarSet> =
            serde_json::from_value(good).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stored.name(), "good");
        assert_eq!(stored.metadata.resource_version.as_deref(), Some("7"));
        assert!(stored.object.is_ok());

        let typo = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": "typo"},
            "spec": {"updateStrategy": {"type": "RollingUpdat"}},
        });
        let stored: Stored<SidecarSet> =
            serde_json::from_value(typo).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stored.name(), "typo");
        let reason = stored.object.err().unwrap_or_default();
        assert!(
            reason.starts_with("spec.updateStrategy.type: unknown variant `RollingUpdat`"),
            "{reason}"
        );
    }

    #[test]
    fn a_list_with_one_bad_item_still_reads_the_others() {
        let list = json!([
            {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "a"}, "spec": {"containers": 5}},
            {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "b"}, "spec": {}},
        ]);
        let items: Vec<Stored<SidecarSet>> =
            serde_json::from_value(list).unwrap_or_else(|e| panic!("{e}"));
        let readable: Vec<bool> = items.iter().map(|s| s.object.is_ok()).collect();
        assert_eq!(readable, [false, true]);
    }
}
