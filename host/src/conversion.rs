//! The CRD conversion webhook (`/convert`): a ConversionReview in, the same
//! objects in the desired version out, converted by kruise-core. An object
//! that cannot be converted fails the whole review with its message, which
//! the API server passes on to the client; the other objects are not
//! touched.

use kruise_core::conversion::convert;
use serde_json::{Value, json};

use crate::server::api::ApiError;

const REVIEW_API_VERSION: &str = "apiextensions.k8s.io/v1";

/// The answer to a ConversionReview body; an unreadable body is a 400.
pub fn review(body: &[u8]) -> Result<Value, ApiError> {
    let document: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::new(400, format!("the body is not JSON: {e}")))?;
    if document.get("kind").and_then(Value::as_str) != Some("ConversionReview") {
        return Err(ApiError::new(400, "expected a ConversionReview"));
    }
    let request = document
        .get("request")
        .filter(|r| r.is_object())
        .ok_or_else(|| ApiError::new(400, "the ConversionReview has no request"))?;
    let uid = request.get("uid").cloned().unwrap_or(Value::Null);
    let desired = request
        .get("desiredAPIVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::new(400, "the request has no desiredAPIVersion"))?;
    let objects = request
        .get("objects")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let response = match convert_all(objects, desired) {
        Ok(converted) => json!({
            "uid": uid,
            "convertedObjects": converted,
            "result": {"status": "Success"},
        }),
        Err(message) => json!({
            "uid": uid,
            "result": {"status": "Failure", "message": message},
        }),
    };
    Ok(json!({
        "apiVersion": REVIEW_API_VERSION,
        "kind": "ConversionReview",
        "response": response,
    }))
}

fn convert_all(objects: &[Value], desired: &str) -> Result<Vec<Value>, String> {
    objects
        .iter()
        .map(|object| {
            convert(object, desired).map_err(|error| {
                let name = object["metadata"]["name"].as_str().unwrap_or("?");
                let kind = object["kind"].as_str().unwrap_or("object");
                format!("cannot convert {kind} {name} to {desired}: {error}")
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn body(request: &Value) -> Vec<u8> {
        json!({"apiVersion": REVIEW_API_VERSION, "kind": "ConversionReview", "request": request})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn converts_every_object_and_keeps_the_uid() {
        let objects = json!([
            {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
             "metadata": {"name": "a"}, "spec": {"namespace": "ns"}},
            {"apiVersion": "apps.kruise.io/v1beta1", "kind": "ImagePullJob",
             "metadata": {"name": "b"}, "spec": {"image": "nginx"}},
        ]);
        let request = json!({"uid": "u-1", "desiredAPIVersion": "apps.kruise.io/v1beta1", "objects": objects});
        let answer = review(&body(&request)).unwrap();
        let response = &answer["response"];
        assert_eq!(response["uid"], "u-1");
        assert_eq!(response["result"], json!({"status": "Success"}));
        let converted = response["convertedObjects"].as_array().unwrap();
        assert_eq!(converted.len(), 2);
        assert_eq!(
            converted[0]["spec"]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "ns"
        );
        assert_eq!(converted[1]["apiVersion"], "apps.kruise.io/v1beta1");
    }

    #[test]
    fn one_bad_object_fails_the_review_with_its_name() {
        let objects = json!([
            {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "ok"}},
            {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "bad"},
             "spec": {"scaleStrategy": {"disablePVCReuse": 1}}},
        ]);
        let request = json!({"uid": "u-2", "desiredAPIVersion": "apps.kruise.io/v1beta1", "objects": objects});
        let response = review(&body(&request)).unwrap()["response"].clone();
        assert_eq!(response["result"]["status"], "Failure");
        assert_eq!(
            response["result"]["message"],
            "cannot convert CloneSet bad to apps.kruise.io/v1beta1: spec.scaleStrategy.disablePVCReuse: expected a boolean"
        );
        assert!(response.get("convertedObjects").is_none());
    }

    #[test]
    fn unreadable_bodies_are_400s() {
        let cases: [(&[u8], &str); 4] = [
            (b"{", "the body is not JSON"),
            (
                br#"{"kind": "AdmissionReview"}"#,
                "expected a ConversionReview",
            ),
            (
                br#"{"kind": "ConversionReview"}"#,
                "the ConversionReview has no request",
            ),
            (
                br#"{"kind": "ConversionReview", "request": {"uid": "x"}}"#,
                "the request has no desiredAPIVersion",
            ),
        ];
        for (body, message) in cases {
            let error = review(body).unwrap_err();
            assert_eq!(error.status, 400);
            assert!(error.message.starts_with(message), "{}", error.message);
        }
    }
}
