//! What every apps.kruise.io object shares: its type identity, parsing with
//! errors that name the offending field, and OpenKruise's defaulting.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub const GROUP: &str = "apps.kruise.io";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "apps.kruise.io/v1alpha1";

/// An apps.kruise.io/v1alpha1 kind.
///
/// Implementing k8s-openapi's `Resource` and `Metadata` is all kube-rs needs:
/// its blanket impl makes every kind usable with `kube::Api` without pulling
/// kube into the wasm builds.
pub trait KruiseObject:
    k8s_openapi::Resource
    + k8s_openapi::Metadata<Ty = ObjectMeta>
    + Serialize
    + DeserializeOwned
    + Clone
    + PartialEq
    + std::fmt::Debug
{
    /// Fill in what OpenKruise's mutating webhook defaults on create.
    fn set_defaults(&mut self);
}

/// Why an object could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("invalid {format}: {message}")]
    Syntax {
        format: &'static str,
        message: String,
    },
    #[error("{path}: {message}")]
    Field { path: String, message: String },
    #[error("unknown field{} {}", if .0.len() > 1 { "s" } else { "" }, .0.join(", "))]
    UnknownFields(Vec<String>),
    #[error("expected {expected}, found {found}")]
    WrongType { expected: String, found: String },
}

/// How unknown fields are treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strictness {
    /// Ignore them, as the API server's pruning would (objects read from a cluster).
    Lenient,
    /// Reject them, like `kubectl apply --validate=strict` (files a person wrote).
    Strict,
}

/// Parse a YAML (or JSON, which YAML includes) document into any type.
pub fn from_yaml<T: DeserializeOwned>(text: &str, strictness: Strictness) -> Result<T, ParseError> {
    from_value(yaml_document(text)?, strictness)
}

/// Parse a YAML or JSON document into a kruise kind, checking first that the
/// document claims to be that kind.
pub fn parse_object<T: KruiseObject>(text: &str, strictness: Strictness) -> Result<T, ParseError> {
    object_from_value(yaml_document(text)?, strictness)
}

/// Read an already parsed document as a kruise kind, checking first that
/// the document claims to be that kind.
pub fn object_from_value<T: KruiseObject>(
    document: serde_json::Value,
    strictness: Strictness,
) -> Result<T, ParseError> {
    let claimed = |key: &str| document.get(key).and_then(serde_json::Value::as_str);
    check_type_meta(claimed("apiVersion"), claimed("kind"), T::KIND).map_err(|found| {
        ParseError::WrongType {
            expected: format!("{API_VERSION} {}", T::KIND),
            found,
        }
    })?;
    from_value(document, strictness)
}

fn yaml_document(text: &str) -> Result<serde_json::Value, ParseError> {
    serde_yaml::from_str(text).map_err(|e| ParseError::Syntax {
        format: "YAML",
        message: e.to_string(),
    })
}

/// Read one object of a kruise kind as a cluster stored it (JSON text),
/// leniently. The API server has already checked it against the CRD schema,
/// so it is read straight from the text ([`crate::outlined`]), without the
/// parsed document in between that [`object_from_value`] walks; only an
/// object that fails is read again that way, for the same message with the
/// field's path.
pub fn stored_object_from_json<T: KruiseObject>(text: &str) -> Result<T, ParseError> {
    crate::outlined::from_str(text).or_else(|_| {
        let document = serde_json::from_str(text).map_err(|e| ParseError::Syntax {
            format: "JSON",
            message: e.to_string(),
        })?;
        object_from_value(document, Strictness::Lenient)
    })
}

/// Deserialize a parsed document, naming the path of the first bad field and,
/// when strict, every unknown one.
pub fn from_value<T: DeserializeOwned>(
    document: serde_json::Value,
    strictness: Strictness,
) -> Result<T, ParseError> {
    let read = crate::tracked::read::<T>(document).map_err(|failure| ParseError::Field {
        path: failure.path,
        message: failure.error.to_string(),
    })?;
    if strictness == Strictness::Strict && !read.unknown_fields.is_empty() {
        return Err(ParseError::UnknownFields(read.unknown_fields));
    }
    Ok(read.value)
}

/// Check the `apiVersion` and `kind` a document claims against the type it is
/// read into; absent ones are taken to mean the expected type. The error is
/// what was found instead.
pub(crate) fn check_type_meta(
    api_version: Option<&str>,
    kind: Option<&str>,
    expected_kind: &str,
) -> Result<(), String> {
    let api_version = api_version.unwrap_or(API_VERSION);
    let kind = kind.unwrap_or(expected_kind);
    if api_version == API_VERSION && kind == expected_kind {
        Ok(())
    } else {
        Err(format!("{api_version} {kind}"))
    }
}

/// Declares a kind: the object struct around its spec and status, its serde
/// that writes and checks `apiVersion`/`kind`, and the k8s-openapi traits.
macro_rules! kruise_kind {
    (
        $(#[$doc:meta])*
        $kind:ident {
            spec: $spec:ty,
            status: $status:ty,
            plural: $plural:literal,
            scope: $scope:ty $(,)?
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct $kind {
            pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            pub spec: $spec,
            pub status: Option<$status>,
        }

        impl $kind {
            /// A named object with the given spec and no status.
            pub fn new(name: &str, spec: $spec) -> Self {
                Self {
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some(name.to_owned()),
                        ..Default::default()
                    },
                    spec,
                    status: None,
                }
            }
        }

        impl $crate::crd::Schemas for $kind {
            fn spec_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                generator.subschema_for::<$spec>()
            }
            fn status_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                generator.subschema_for::<$status>()
            }
        }

        impl k8s_openapi::Resource for $kind {
            const API_VERSION: &'static str = $crate::object::API_VERSION;
            const GROUP: &'static str = $crate::object::GROUP;
            const KIND: &'static str = stringify!($kind);
            const VERSION: &'static str = $crate::object::VERSION;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $scope;
        }

        impl k8s_openapi::Metadata for $kind {
            type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }

        impl serde::Serialize for $kind {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                let fields = if self.status.is_some() { 5 } else { 4 };
                let mut object = serializer.serialize_struct(stringify!($kind), fields)?;
                object.serialize_field("apiVersion", $crate::object::API_VERSION)?;
                object.serialize_field("kind", stringify!($kind))?;
                object.serialize_field("metadata", &self.metadata)?;
                object.serialize_field("spec", &self.spec)?;
                if let Some(status) = &self.status {
                    object.serialize_field("status", status)?;
                }
                object.end()
            }
        }

        impl<'de> serde::Deserialize<'de> for $kind {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                #[derive(serde::Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct Wire {
                    api_version: Option<String>,
                    kind: Option<String>,
                    #[serde(default)]
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                    // OpenKruise's CRDs do not require a spec either.
                    #[serde(default)]
                    spec: $spec,
                    status: Option<$status>,
                }
                let wire = Wire::deserialize(deserializer)?;
                $crate::object::check_type_meta(
                    wire.api_version.as_deref(),
                    wire.kind.as_deref(),
                    stringify!($kind),
                )
                .map_err(|found| {
                    serde::de::Error::custom(format!(
                        "expected {} {}, found {found}",
                        $crate::object::API_VERSION,
                        stringify!($kind)
                    ))
                })?;
                Ok(Self { metadata: wire.metadata, spec: wire.spec, status: wire.status })
            }
        }
    };
}
pub(crate) use kruise_kind;

/// Helpers the kinds' unit tests share.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{KruiseObject, ParseError, Strictness, parse_object};

    pub fn parse<T: KruiseObject>(text: &str) -> Result<T, ParseError> {
        parse_object::<T>(text, Strictness::Strict)
    }

    /// The path a field error names; panics on any other outcome.
    pub fn field_error_path<T: KruiseObject>(text: &str) -> String {
        match parse::<T>(text) {
            Err(ParseError::Field { path, .. }) => path,
            other => panic!("expected a field error, got {other:?}"),
        }
    }
}
