//! Conversion between `apps.kruise.io/v1alpha1` (the version our code
//! reads) and `v1beta1` (the version OpenKruise v1.9 stores) for the six
//! kinds, as OpenKruise's `apis/apps/v1alpha1/*_conversion.go` defines it.
//!
//! The conversion works on the JSON object: it moves and renames the
//! fields the two versions spell differently and passes every other field
//! through untouched, so a field it does not know about (a newer
//! OpenKruise's) survives the trip. The API server prunes whatever the
//! target version's schema does not have.

mod cloneset;
mod crr;
mod resourcedistribution;
mod sidecarset;

use serde_json::{Map, Value};

/// The two served versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1alpha1,
    V1beta1,
}

impl Version {
    pub fn parse(api_version: &str) -> Option<Self> {
        match api_version {
            "apps.kruise.io/v1alpha1" => Some(Self::V1alpha1),
            "apps.kruise.io/v1beta1" => Some(Self::V1beta1),
            _ => None,
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            Self::V1alpha1 => "apps.kruise.io/v1alpha1",
            Self::V1beta1 => "apps.kruise.io/v1beta1",
        }
    }
}

/// Why an object cannot be converted: where, and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConversionError {
    pub path: String,
    pub message: String,
}

impl ConversionError {
    fn new(path: &str, message: impl Into<String>) -> Self {
        Self {
            path: path.to_owned(),
            message: message.into(),
        }
    }
}

/// `object` in the version `desired_api_version` names.
pub fn convert(object: &Value, desired_api_version: &str) -> Result<Value, ConversionError> {
    let desired = Version::parse(desired_api_version).ok_or_else(|| {
        ConversionError::new(
            "desiredAPIVersion",
            format!("`{desired_api_version}` is not a version we serve"),
        )
    })?;
    let Value::Object(map) = object else {
        return Err(ConversionError::new("object", "not a JSON object"));
    };
    let mut map = map.clone();
    let api_version = string_at(&map, "apiVersion", "apiVersion")?.unwrap_or_default();
    let from = Version::parse(api_version).ok_or_else(|| {
        ConversionError::new(
            "apiVersion",
            format!("`{api_version}` is not a version we serve"),
        )
    })?;
    let kind = string_at(&map, "kind", "kind")?
        .unwrap_or_default()
        .to_owned();
    if from != desired {
        convert_kind(&kind, &mut map, desired)?;
    }
    map.insert("apiVersion".to_owned(), Value::from(desired.api_version()));
    Ok(Value::Object(map))
}

fn convert_kind(
    kind: &str,
    object: &mut Map<String, Value>,
    to: Version,
) -> Result<(), ConversionError> {
    match (kind, to) {
        ("CloneSet", Version::V1beta1) => cloneset::to_v1beta1(object),
        ("CloneSet", Version::V1alpha1) => cloneset::to_v1alpha1(object),
        ("SidecarSet", Version::V1beta1) => sidecarset::to_v1beta1(object),
        ("SidecarSet", Version::V1alpha1) => sidecarset::to_v1alpha1(object),
        ("ResourceDistribution", _) => resourcedistribution::convert(object, to),
        ("ContainerRecreateRequest", Version::V1beta1) => crr::to_v1beta1(object),
        ("ContainerRecreateRequest", Version::V1alpha1) => crr::to_v1alpha1(object),
        // Both versions spell these the same; v1beta1's additions (a pull
        // secret's `mode`) are pruned from the v1alpha1 view.
        ("NodeImage" | "ImagePullJob", _) => Ok(()),
        _ => Err(ConversionError::new(
            "kind",
            format!("`{kind}` is not a kind we convert"),
        )),
    }
}

// ---- JSON helpers shared by the kinds ----

type Object = Map<String, Value>;

/// The object under `key`, created empty when absent.
fn object_entry<'a>(
    map: &'a mut Object,
    key: &str,
    path: &str,
) -> Result<&'a mut Object, ConversionError> {
    let entry = map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if entry.is_null() {
        *entry = Value::Object(Map::new());
    }
    entry
        .as_object_mut()
        .ok_or_else(|| ConversionError::new(path, "expected an object"))
}

/// Removes and returns the object under `key` (absent or null: `None`).
fn take_object(map: &mut Object, key: &str, path: &str) -> Result<Option<Object>, ConversionError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(inner)) => Ok(Some(inner)),
        Some(_) => Err(ConversionError::new(path, "expected an object")),
    }
}

/// Removes and returns the boolean under `key` (absent or null: `None`).
fn take_bool(map: &mut Object, key: &str, path: &str) -> Result<Option<bool>, ConversionError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(flag)) => Ok(Some(flag)),
        Some(_) => Err(ConversionError::new(path, "expected a boolean")),
    }
}

fn string_at<'a>(
    map: &'a Object,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, ConversionError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(ConversionError::new(path, "expected a string")),
    }
}

/// Sets a boolean the way Go's `omitempty` writes it: `false` is left out.
fn set_flag(map: &mut Object, key: &str, flag: bool) {
    if flag {
        map.insert(key.to_owned(), Value::Bool(true));
    } else {
        map.remove(key);
    }
}

/// Moves `key` from one object to another, if present.
fn move_field(from: &mut Object, to: &mut Object, key: &str) {
    if let Some(value) = from.remove(key) {
        to.insert(key.to_owned(), value);
    }
}

/// Renames `from` to `to` within one object, if present.
fn rename_field(map: &mut Object, from: &str, to: &str) {
    if let Some(value) = map.remove(from) {
        map.insert(to.to_owned(), value);
    }
}

/// `metadata.labels` or `metadata.annotations`, created when absent.
fn metadata_map<'a>(
    object: &'a mut Object,
    which: &str,
) -> Result<&'a mut Object, ConversionError> {
    let metadata = object_entry(object, "metadata", "metadata")?;
    object_entry(metadata, which, &format!("metadata.{which}"))
}

/// A string value of `metadata.labels` or `metadata.annotations`.
fn metadata_value<'a>(object: &'a Object, which: &str, key: &str) -> Option<&'a str> {
    object.get("metadata")?.get(which)?.get(key)?.as_str()
}

/// Drops `metadata.<which>` again when a conversion left it empty.
fn drop_empty_metadata_map(object: &mut Object, which: &str) {
    if let Some(Value::Object(metadata)) = object.get_mut("metadata")
        && metadata
            .get(which)
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        metadata.remove(which);
    }
}
