//! From a guest's answer to an `admission.k8s.io/v1` AdmissionResponse, as
//! policy-server builds it (spec §1.4).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::diff::diff_text;
use crate::runtime::CallError;

/// What a Kubewarden policy answers to `validate` (snake_case keys), its
/// mutated object read as `M`: a tree ([`ValidationResponse`]), or text
/// borrowed from the answer, diffed as it is read ([`diff_text`]).
#[derive(Debug, Deserialize)]
pub struct GuestAnswer<M> {
    pub accepted: bool,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub code: Option<u16>,
    #[serde(default = "none")]
    pub mutated_object: Option<M>,
    #[serde(default)]
    pub audit_annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub warnings: Option<Vec<String>>,
}

/// The answer as policy-server reads it.
pub type ValidationResponse = GuestAnswer<Value>;

// `#[serde(default)]` would ask for `M: Default`.
fn none<M>() -> Option<M> {
    None
}

/// The answer the API server gets. Field order and the `null`s of
/// `auditAnnotations`/`warnings` are policy-server's.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<PatchType>,
    /// The base64 of a JSON Patch array.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    pub audit_annotations: Option<BTreeMap<String, String>>,
    pub warnings: Option<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PatchType {
    #[serde(rename = "JSONPatch")]
    JsonPatch,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Status {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct StatusDetails {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
}

/// policy-server writes all three keys, `null` included.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct StatusCause {
    pub reason: Option<String>,
    pub message: Option<String>,
    pub field: Option<String>,
}

/// policy-server's text for a guest stopped at its deadline.
pub const TIMEOUT_MESSAGE: &str =
    "Policy execution interrupted because it exceeded the allowed execution time";

/// policy-server's text for a mutation of a request without an object.
pub const MUTATION_WITHOUT_OBJECT: &str = "Incoming object is null, which happens only with DELETE operations, but the policy is attempting a mutation. This is not allowed";

impl AdmissionResponse {
    pub fn reject(uid: &str, message: String, code: Option<u16>) -> Self {
        Self {
            uid: uid.to_owned(),
            allowed: false,
            status: Some(Status {
                message: Some(message),
                code,
                ..Status::default()
            }),
            ..Self::default()
        }
    }

    /// A failure of the policy rather than a verdict: still an admission
    /// denial inside an HTTP 200, never an HTTP error.
    pub fn internal_server_error(uid: &str, detail: &str) -> Self {
        Self::reject(uid, format!("internal server error: {detail}"), Some(500))
    }

    /// The response for what the guest's `validate` gave back. `object` is
    /// what a mutation is diffed against: `request.object`, or the whole
    /// request for raw policies.
    pub fn from_guest(
        uid: &str,
        object: Option<&Value>,
        answer: Result<Vec<u8>, CallError>,
    ) -> Self {
        match answer {
            Err(CallError::DeadlineExceeded) => {
                Self::reject(uid, TIMEOUT_MESSAGE.to_owned(), Some(500))
            }
            Err(error) => Self::internal_server_error(uid, &error.to_string()),
            Ok(bytes) => Self::from_answer(uid, object, &bytes),
        }
    }

    /// The mutated object's text walked against `object` when it can be
    /// (most answers); otherwise, and for every unreadable answer, the
    /// answer read as policy-server reads it, with its errors.
    fn from_answer(uid: &str, object: Option<&Value>, bytes: &[u8]) -> Self {
        if let Ok(answer) = serde_json::from_slice::<GuestAnswer<&RawValue>>(bytes) {
            match (answer.mutated_object, object) {
                (None, _) => return Self::from_parts(uid, answer, None),
                (Some(mutated), Some(object)) => {
                    if let Some(patch) = diff_text(object, mutated.get()) {
                        return Self::from_parts(uid, answer, encoded(&patch));
                    }
                }
                (Some(_), None) => {}
            }
        }
        match serde_json::from_slice::<ValidationResponse>(bytes) {
            Ok(answer) => Self::from_validation(uid, object, answer),
            Err(error) => Self::internal_server_error(
                uid,
                &format!("Cannot deserialize policy validation response: {error}"),
            ),
        }
    }

    fn from_validation(uid: &str, object: Option<&Value>, response: ValidationResponse) -> Self {
        let patch = match (&response.mutated_object, object) {
            (None, _) => None,
            (Some(_), None) => return Self::reject(uid, MUTATION_WITHOUT_OBJECT.to_owned(), None),
            (Some(mutated), Some(object)) => json_patch_base64(object, mutated),
        };
        Self::from_parts(uid, response, patch)
    }

    /// The response for an answer whose patch (base64) is made.
    fn from_parts<M>(uid: &str, response: GuestAnswer<M>, patch: Option<String>) -> Self {
        let status = (response.message.is_some() || response.code.is_some()).then(|| Status {
            message: response.message,
            code: response.code,
            ..Status::default()
        });
        Self {
            uid: uid.to_owned(),
            allowed: response.accepted,
            patch_type: patch.as_ref().map(|_| PatchType::JsonPatch),
            patch,
            status,
            audit_annotations: response.audit_annotations,
            warnings: response.warnings,
        }
    }

    /// One line of JSON, as `kwctl run` prints it.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The RFC 6902 patch from `object` to `mutated`, serialised and base64
/// encoded (standard alphabet, padded); `None` when nothing changed.
pub fn json_patch_base64(object: &Value, mutated: &Value) -> Option<String> {
    encoded(&json_patch::diff(object, mutated))
}

fn encoded(patch: &json_patch::Patch) -> Option<String> {
    if patch.0.is_empty() {
        return None;
    }
    serde_json::to_vec(patch)
        .ok()
        .map(|json| STANDARD.encode(json))
}

/// `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":…}`
pub fn admission_review(response: &AdmissionResponse) -> Value {
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[allow(clippy::unnecessary_wraps)] // shaped as the runtime answers
    fn guest(answer: &Value) -> Result<Vec<u8>, CallError> {
        Ok(serde_json::to_vec(answer).unwrap())
    }

    fn decoded_patch(response: &AdmissionResponse) -> Value {
        serde_json::from_slice(&STANDARD.decode(response.patch.as_ref().unwrap()).unwrap()).unwrap()
    }

    #[test]
    fn an_acceptance_keeps_the_null_keys() {
        let answer = json!({"accepted": true, "message": null, "code": null, "mutated_object": null,
                            "audit_annotations": null, "warnings": null});
        let response = AdmissionResponse::from_guest("u", Some(&json!({})), guest(&answer));
        assert_eq!(
            response.to_json(),
            r#"{"uid":"u","allowed":true,"auditAnnotations":null,"warnings":null}"#
        );
    }

    #[test]
    fn a_mutation_becomes_a_base64_json_patch() {
        let object = json!({"metadata": {"name": "p"}});
        let mutated = json!({"metadata": {"name": "p", "labels": {"a": "b"}}});
        let response = AdmissionResponse::from_guest(
            "u",
            Some(&object),
            guest(&json!({"accepted": true, "mutated_object": mutated})),
        );
        assert_eq!(response.patch_type, Some(PatchType::JsonPatch));
        assert_eq!(
            decoded_patch(&response),
            json!([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}])
        );
        let text = response.to_json();
        assert!(
            text.starts_with(r#"{"uid":"u","allowed":true,"patchType":"JSONPatch","patch":""#),
            "{text}"
        );
        // Standard alphabet with padding.
        assert!(response.patch.unwrap().ends_with('='));
    }

    #[test]
    fn an_unchanged_object_gives_no_patch_fields() {
        let object = json!({"a": 1});
        let response = AdmissionResponse::from_guest(
            "u",
            Some(&object),
            guest(&json!({"accepted": true, "mutated_object": {"a": 1}})),
        );
        assert_eq!(response.patch, None);
        assert!(!response.to_json().contains("patch"));
    }

    #[test]
    fn a_rejection_carries_message_and_code_and_passes_annotations_and_warnings() {
        let answer = json!({"accepted": false, "message": "no", "code": 403,
                            "audit_annotations": {"k": "v"}, "warnings": ["w"]});
        let response = AdmissionResponse::from_guest("u", Some(&json!({})), guest(&answer));
        assert_eq!(
            response.to_json(),
            r#"{"uid":"u","allowed":false,"status":{"message":"no","code":403},"auditAnnotations":{"k":"v"},"warnings":["w"]}"#
        );
        let only_code = AdmissionResponse::from_guest(
            "u",
            None,
            guest(&json!({"accepted": false, "code": 400})),
        );
        assert_eq!(
            only_code.status,
            Some(Status {
                code: Some(400),
                ..Status::default()
            })
        );
    }

    #[test]
    fn a_mutation_without_object_is_refused() {
        let response = AdmissionResponse::from_guest(
            "u",
            None,
            guest(&json!({"accepted": true, "mutated_object": {}})),
        );
        assert!(!response.allowed);
        assert_eq!(
            response.status.unwrap().message.unwrap(),
            MUTATION_WITHOUT_OBJECT
        );
    }

    #[test]
    fn guest_failures_are_denials_with_code_500() {
        let garbage = AdmissionResponse::from_guest("u", None, Ok(b"not json".to_vec()));
        let status = garbage.status.unwrap();
        assert_eq!(status.code, Some(500));
        assert!(status.message.unwrap().starts_with(
            "internal server error: Cannot deserialize policy validation response: expected"
        ),);

        let error =
            AdmissionResponse::from_guest("u", None, Err(CallError::Guest("boom".to_owned())));
        assert_eq!(
            error.to_json(),
            r#"{"uid":"u","allowed":false,"status":{"message":"internal server error: Guest call failure: boom","code":500},"auditAnnotations":null,"warnings":null}"#
        );

        let timeout = AdmissionResponse::from_guest("u", None, Err(CallError::DeadlineExceeded));
        assert_eq!(timeout.status.unwrap().message.unwrap(), TIMEOUT_MESSAGE);
        assert!(!timeout.allowed);
    }

    /// However the mutated object is read, what policy-server's reading
    /// refuses is refused with its message, and what it takes is taken:
    /// nesting up to serde_json's limit within the answer, and a key given
    /// twice (the last value kept).
    #[test]
    fn a_mutated_object_is_refused_and_taken_as_policy_server_reads_it() {
        let nested = |depth: usize| {
            let array = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            format!(r#"{{"accepted": true, "mutated_object": {{"a": {array}}}}}"#)
        };
        for depth in [125, 126, 200] {
            let answer = nested(depth);
            let response = AdmissionResponse::from_guest(
                "u",
                Some(&json!({"a": []})),
                Ok(answer.clone().into_bytes()),
            );
            match serde_json::from_slice::<ValidationResponse>(answer.as_bytes()) {
                Ok(_) => assert!(response.allowed && response.patch.is_some(), "{depth}"),
                Err(error) => {
                    assert!(error.to_string().starts_with("recursion limit exceeded"));
                    assert_eq!(
                        response.status.unwrap().message.unwrap(),
                        format!(
                            "internal server error: Cannot deserialize policy validation response: {error}"
                        )
                    );
                }
            }
        }
        assert!(serde_json::from_slice::<ValidationResponse>(nested(125).as_bytes()).is_ok());
        assert!(serde_json::from_slice::<ValidationResponse>(nested(126).as_bytes()).is_err());

        let twice = br#"{"accepted": true, "mutated_object": {"a": 2, "a": 1}}"#;
        let response =
            AdmissionResponse::from_guest("u", Some(&json!({"a": 1})), Ok(twice.to_vec()));
        assert!(response.allowed);
        assert_eq!(response.patch, None);
    }

    #[test]
    fn the_review_wraps_the_response() {
        let review = admission_review(&AdmissionResponse {
            uid: "u".to_owned(),
            allowed: true,
            ..AdmissionResponse::default()
        });
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(review["kind"], "AdmissionReview");
        assert_eq!(review["response"]["uid"], "u");
    }
}
