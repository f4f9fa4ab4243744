//! The `validate` payload (spec §1.3): `AdmissionReview.request` read into
//! the fields policy-server keeps and written back camelCase, absent
//! optionals omitted, next to the policy's settings.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A policy's settings: always a JSON object (`null` reads as `{}`).
pub type Settings = Map<String, Value>;

/// `admission.k8s.io/v1` AdmissionRequest, as policy-server re-serialises
/// it: unknown fields are dropped.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    pub uid: String,
    pub kind: GroupVersionKind,
    pub resource: GroupVersionResource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_kind: Option<GroupVersionKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_resource: Option<GroupVersionResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_sub_resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub operation: String,
    pub user_info: UserInfo,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct GroupVersionKind {
    /// The core group is `""`; tolerated when left out.
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct GroupVersionResource {
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub resource: String,
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
pub struct UserInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<std::collections::BTreeMap<String, Vec<String>>>,
}

/// Why a document is not an admission request we can evaluate.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("the AdmissionReview has no request")]
    NoRequest,
    #[error("invalid AdmissionRequest: {0}")]
    Invalid(#[from] serde_json::Error),
}

impl AdmissionRequest {
    /// Reads either a whole AdmissionReview (recognised by its `kind`, as
    /// `kwctl run` does) or a bare AdmissionRequest.
    pub fn from_document(document: Value) -> Result<Self, RequestError> {
        let request = if document.get("kind").and_then(Value::as_str) == Some("AdmissionReview") {
            match document {
                Value::Object(mut review) => review
                    .remove("request")
                    .filter(|r| !r.is_null())
                    .ok_or(RequestError::NoRequest)?,
                _ => return Err(RequestError::NoRequest),
            }
        } else {
            document
        };
        Ok(serde_json::from_value(request)?)
    }
}

/// A policy's settings as the JSON text every payload to its guest
/// carries: written once when the policy is loaded, not on every request.
#[derive(Debug, Clone)]
pub struct SettingsText(Box<RawValue>);

impl SettingsText {
    pub fn new(settings: &Settings) -> Self {
        // A map of JSON values always serialises.
        Self(serde_json::value::to_raw_value(settings).unwrap_or_default())
    }

    /// The `validate_settings` payload: the settings alone.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.get().as_bytes()
    }
}

#[derive(Serialize)]
struct ValidationRequest<'a, R: Serialize> {
    request: &'a R,
    settings: &'a RawValue,
}

/// The bytes of `{"request": …, "settings": …}` for `validate`.
pub fn validation_payload(request: &AdmissionRequest, settings: &SettingsText) -> Vec<u8> {
    to_json(&ValidationRequest {
        request,
        settings: &settings.0,
    })
}

/// The same for a raw policy: `request` is whatever the caller sent.
pub fn raw_validation_payload(request: &Value, settings: &SettingsText) -> Vec<u8> {
    to_json(&ValidationRequest {
        request,
        settings: &settings.0,
    })
}

fn to_json(value: &impl Serialize) -> Vec<u8> {
    // Serialising plain JSON values and strings cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

/// Settings from a policies.yml/CLI value: an object, `null` as `{}`.
pub fn settings_from_value(value: Value) -> Result<Settings, String> {
    match value {
        Value::Null => Ok(Settings::new()),
        Value::Object(map) => Ok(map),
        other => Err(format!(
            "settings must be an object, not {}",
            json_type(&other)
        )),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn full_request() -> Value {
        json!({
            "uid": "u1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "status",
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "requestSubResource": "status",
            "name": "p",
            "namespace": "ns",
            "operation": "UPDATE",
            "userInfo": {"username": "u", "uid": "42", "groups": ["g"], "extra": {"k": ["v"]}},
            "object": {"kind": "Pod"},
            "oldObject": {"kind": "Pod", "old": true},
            "dryRun": true,
            "options": {"kind": "UpdateOptions"},
        })
    }

    #[test]
    fn every_kept_field_round_trips_camel_case() {
        let request = AdmissionRequest::from_document(full_request()).unwrap();
        let payload: Value = serde_json::from_slice(&validation_payload(
            &request,
            &SettingsText::new(&Settings::new()),
        ))
        .unwrap();
        assert_eq!(payload, json!({"request": full_request(), "settings": {}}));
    }

    #[test]
    fn absent_optionals_are_omitted_and_unknown_fields_dropped() {
        let delete = json!({
            "uid": "u2",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "operation": "DELETE",
            "userInfo": {"username": "u"},
            "object": null,
            "oldObject": {"kind": "Deployment"},
            "somethingNew": 1,
        });
        let request = AdmissionRequest::from_document(delete).unwrap();
        let payload = String::from_utf8(validation_payload(
            &request,
            &SettingsText::new(&Settings::new()),
        ))
        .unwrap();
        assert_eq!(
            payload,
            r#"{"request":{"uid":"u2","kind":{"group":"apps","version":"v1","kind":"Deployment"},"resource":{"group":"apps","version":"v1","resource":"deployments"},"operation":"DELETE","userInfo":{"username":"u"},"oldObject":{"kind":"Deployment"}},"settings":{}}"#
        );
    }

    #[test]
    fn a_review_is_unwrapped_and_a_bare_request_taken_as_is() {
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": full_request()});
        assert_eq!(
            AdmissionRequest::from_document(review).unwrap(),
            AdmissionRequest::from_document(full_request()).unwrap()
        );
        let empty = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
        assert!(matches!(
            AdmissionRequest::from_document(empty),
            Err(RequestError::NoRequest)
        ));
    }

    #[test]
    fn required_fields_are_required() {
        let mut request = full_request();
        request.as_object_mut().unwrap().remove("uid");
        let error = AdmissionRequest::from_document(request).unwrap_err();
        assert!(error.to_string().contains("missing field `uid`"), "{error}");
        assert!(AdmissionRequest::from_document(json!([1])).is_err());
    }

    #[test]
    fn settings_must_be_an_object() {
        assert_eq!(settings_from_value(Value::Null).unwrap(), Settings::new());
        assert_eq!(settings_from_value(json!({"a": 1})).unwrap()["a"], 1);
        assert_eq!(
            settings_from_value(json!([1])).unwrap_err(),
            "settings must be an object, not a list"
        );
    }

    #[test]
    fn raw_requests_go_as_they_are() {
        let settings = settings_from_value(json!({"s": 1})).unwrap();
        let payload = raw_validation_payload(&json!({"user": "x"}), &SettingsText::new(&settings));
        assert_eq!(payload, br#"{"request":{"user":"x"},"settings":{"s":1}}"#);
    }
}
