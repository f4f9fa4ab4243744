//! The resource inside `spec.resource`: which kind and name it is.

use serde_json::Value;

use super::validation::Violation;

/// The two kinds a distribution may carry (core group, `v1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceKind {
    Secret,
    ConfigMap,
}

impl ResourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Secret => "Secret",
            Self::ConfigMap => "ConfigMap",
        }
    }

    /// The API resource name, e.g. for a dynamic client.
    pub fn plural(self) -> &'static str {
        match self {
            Self::Secret => "secrets",
            Self::ConfigMap => "configmaps",
        }
    }
}

/// What a distributed resource is: the copies are this kind and name in
/// every target namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceIdentity {
    /// Always `v1`.
    pub api_version: String,
    pub kind: ResourceKind,
    pub name: String,
}

/// The kind and name of `spec.resource`, or why it cannot be distributed.
pub fn read_resource(resource: &Value) -> Result<ResourceIdentity, String> {
    identify(resource).map_err(|violation| violation.to_string())
}

pub(super) fn identify(resource: &Value) -> Result<ResourceIdentity, Violation> {
    let path = "spec.resource";
    let Some(fields) = resource.as_object().filter(|f| !f.is_empty()) else {
        return Err(if resource.is_null() || resource.as_object().is_some() {
            Violation::new(path, "empty resource is not allowed")
        } else {
            Violation::new(path, "must be an object (a Secret or ConfigMap manifest)")
        });
    };
    let text = |key: &str| fields.get(key).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    if api_version.is_empty() {
        return Err(Violation::new(format!("{path}.apiVersion"), "is required"));
    }
    if kind.is_empty() {
        return Err(Violation::new(format!("{path}.kind"), "is required"));
    }
    let kind = match (api_version, kind) {
        ("v1", "Secret") => ResourceKind::Secret,
        ("v1", "ConfigMap") => ResourceKind::ConfigMap,
        _ => {
            return Err(Violation::new(
                path,
                format!(
                    "unsupported resource {api_version} {kind}: only v1 Secret and v1 ConfigMap can be distributed"
                ),
            ));
        }
    };
    let name = fields
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name.is_empty() {
        return Err(Violation::new(
            format!("{path}.metadata.name"),
            "is required",
        ));
    }
    Ok(ResourceIdentity {
        api_version: api_version.to_owned(),
        kind,
        name: name.to_owned(),
    })
}
