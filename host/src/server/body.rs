//! Reading a request body: an AdmissionReview in one pass when it is well
//! formed (the common case, no intermediate JSON tree), otherwise step by
//! step, so that the error names what is wrong (spec §3.3).

use serde::Deserialize;
use serde_json::Value;

use super::api::ApiError;
use crate::admission::AdmissionRequest;

/// The `request` of an AdmissionReview body.
pub fn admission_request(body: &[u8]) -> Result<AdmissionRequest, ApiError> {
    match one_pass(body) {
        Some(request) => Ok(request),
        None => step_by_step(body),
    }
}

/// The `request` of a `/validate_raw` body: any JSON but `null`.
pub fn raw_request(body: &[u8]) -> Result<Value, ApiError> {
    document_and_request(body).map(|(_, request)| request)
}

/// A body with a valid request and no other `kind` than AdmissionReview.
#[derive(Deserialize)]
struct Review {
    #[serde(default)]
    kind: Option<Value>,
    request: AdmissionRequest,
}

/// `Some` only for what [`step_by_step`] accepts too, with the same
/// request; everything else (errors, and oddities such as duplicate keys
/// or a `kind` that is not a string) is left to it.
fn one_pass(body: &[u8]) -> Option<AdmissionRequest> {
    // A derived struct also reads a JSON array (its fields in order).
    if body.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let review: Review = serde_json::from_slice(body).ok()?;
    match review.kind {
        None => Some(review.request),
        Some(Value::String(kind)) if kind == "AdmissionReview" => Some(review.request),
        Some(_) => None,
    }
}

fn step_by_step(body: &[u8]) -> Result<AdmissionRequest, ApiError> {
    let (document, request) = document_and_request(body)?;
    if let Some(kind) = document
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| *k != "AdmissionReview")
    {
        return Err(unprocessable(format!(
            "expected an AdmissionReview, got a {kind}"
        )));
    }
    serde_json::from_value(request)
        .map_err(|e| unprocessable(format!("invalid AdmissionRequest: {e}")))
}

/// The body as a JSON object, and its `request` taken out of it.
fn document_and_request(body: &[u8]) -> Result<(serde_json::Map<String, Value>, Value), ApiError> {
    let document: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            400,
            format!("Failed to parse the request body as JSON: {e}"),
        )
    })?;
    let Value::Object(mut document) = document else {
        return Err(unprocessable("the body must be a JSON object"));
    };
    let request = document
        .remove("request")
        .filter(|r| !r.is_null())
        .ok_or_else(|| unprocessable("the body has no `request`"))?;
    Ok((document, request))
}

fn unprocessable(message: impl Into<String>) -> ApiError {
    ApiError::new(422, message)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request() -> Value {
        json!({
            "uid": "u1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": {"kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}},
        })
    }

    fn review() -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request()})
    }

    fn bytes(value: &Value) -> Vec<u8> {
        serde_json::to_vec(value).unwrap()
    }

    fn message(body: &[u8]) -> (u16, String) {
        let error = admission_request(body).unwrap_err();
        (error.status, error.message)
    }

    /// Bodies the one-pass read takes and bodies it leaves to the
    /// step-by-step one; whatever it takes, it reads the same way.
    #[test]
    fn one_pass_agrees_with_step_by_step() {
        let mut no_kind = review();
        no_kind.as_object_mut().unwrap().remove("kind");
        let mut numeric_kind = review();
        numeric_kind["kind"] = json!(5);
        let mut null_kind = review();
        null_kind["kind"] = Value::Null;
        let duplicate_request = format!(
            r#"{{"request": {{"uid": "first"}}, "request": {}}}"#,
            request()
        );
        let cases: [(Vec<u8>, bool); 6] = [
            (bytes(&review()), true),
            (bytes(&no_kind), true),
            (bytes(&null_kind), true),
            (format!("  \n{}", review()).into_bytes(), true),
            (bytes(&numeric_kind), false),
            (duplicate_request.into_bytes(), false),
        ];
        let expected: AdmissionRequest = serde_json::from_value(request()).unwrap();
        for (body, in_one_pass) in cases {
            let text = String::from_utf8_lossy(&body).into_owned();
            assert_eq!(one_pass(&body).is_some(), in_one_pass, "{text}");
            assert_eq!(step_by_step(&body).unwrap(), expected, "{text}");
            assert_eq!(admission_request(&body).unwrap(), expected, "{text}");
        }
    }

    #[test]
    fn what_is_wrong_is_named() {
        let mut other_kind = review();
        other_kind["kind"] = json!("ConfigMap");
        let mut bad_request = review();
        bad_request["request"]
            .as_object_mut()
            .unwrap()
            .remove("uid");
        let null_request = json!({"kind": "AdmissionReview", "request": null});
        // Read as a struct's fields in order, this would be a review.
        let array = json!([null, request()]);
        assert_eq!(message(b"{\"request\":").0, 400);
        assert!(
            message(b"{\"request\":")
                .1
                .starts_with("Failed to parse the request body as JSON: ")
        );
        assert_eq!(
            message(&bytes(&array)),
            (422, "the body must be a JSON object".to_owned())
        );
        assert_eq!(
            message(&bytes(&null_request)),
            (422, "the body has no `request`".to_owned())
        );
        assert_eq!(
            message(&bytes(&other_kind)),
            (
                422,
                "expected an AdmissionReview, got a ConfigMap".to_owned()
            )
        );
        let (status, text) = message(&bytes(&bad_request));
        assert_eq!(status, 422);
        assert!(
            text.starts_with("invalid AdmissionRequest: missing field `uid`"),
            "{text}"
        );
    }

    #[test]
    fn raw_requests_are_any_json_but_null() {
        assert_eq!(
            raw_request(br#"{"request": [1, 2]}"#).unwrap(),
            json!([1, 2])
        );
        assert_eq!(
            raw_request(br#"{"request": null}"#).unwrap_err().status,
            422
        );
        assert_eq!(raw_request(b"[]").unwrap_err().status, 422);
    }
}
