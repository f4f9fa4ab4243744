//! The one way our controllers write a status: the whole status, replaced
//! through the status subresource on the resourceVersion it was computed
//! from. A merge patch of a type that leaves out empty fields could never
//! take a field or condition away; a status computed from a stale read
//! never lands (the API server answers 409 and the next round plans again).

use std::fmt::Debug;

use kube::api::PostParams;
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api_error::{is_conflict, is_not_found};

/// What came of a status write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusWrite {
    /// Written; the API server answered with this resourceVersion.
    Written(Option<String>),
    /// The object changed since it was read: plan again from the new one.
    Stale,
    /// The object is gone.
    Gone,
}

/// Replaces the status of `object` (as read, with the status to write set
/// in it), as `field_manager`.
pub async fn replace_status<K>(
    api: &Api<K>,
    object: &K,
    field_manager: &str,
) -> Result<StatusWrite, kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    let name = object.meta().name.as_deref().unwrap_or_default();
    let params = PostParams {
        dry_run: false,
        field_manager: Some(field_manager.to_owned()),
    };
    match api.replace_status(name, &params, object).await {
        Ok(written) => Ok(StatusWrite::Written(
            written.meta().resource_version.clone(),
        )),
        Err(error) if is_conflict(&error) => Ok(StatusWrite::Stale),
        Err(error) if is_not_found(&error) => Ok(StatusWrite::Gone),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http_body_util::BodyExt as _;
    use hyper::{Request, Response};
    use k8s_openapi::api::core::v1::Pod;
    use kube::client::Body;
    use serde_json::{Value, json};

    use super::*;

    /// The requests a mocked API server saw: method, URI and JSON body.
    type Seen = Arc<Mutex<Vec<(String, String, Value)>>>;

    /// A client whose API server answers every request with `code` and
    /// `answer`.
    fn mocked(code: u16, answer: Value) -> (kube::Client, Seen) {
        let seen = Seen::default();
        let log = seen.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let (log, answer) = (log.clone(), answer.clone());
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await.unwrap().to_bytes();
                let sent = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                log.lock()
                    .unwrap()
                    .push((parts.method.to_string(), parts.uri.to_string(), sent));
                let response = Response::builder()
                    .status(code)
                    .body(Body::from(answer.to_string().into_bytes()))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        (kube::Client::new(service, "default"), seen)
    }

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "resourceVersion": "7"},
            "status": {"phase": "Running"},
        }))
        .unwrap()
    }

    fn failure(code: u16, reason: &str) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": reason, "reason": reason, "code": code})
    }

    #[tokio::test]
    async fn the_whole_status_is_put_on_the_version_read() {
        let mut answer = serde_json::to_value(pod()).unwrap();
        answer["metadata"]["resourceVersion"] = json!("8");
        let (client, seen) = mocked(200, answer);
        let api: Api<Pod> = Api::namespaced(client, "default");
        let written = replace_status(&api, &pod(), "kruise-test").await.unwrap();
        assert_eq!(written, StatusWrite::Written(Some("8".to_owned())));
        let seen = seen.lock().unwrap();
        let (method, uri, body) = &seen[0];
        assert_eq!(method, "PUT");
        assert_eq!(
            uri,
            "/api/v1/namespaces/default/pods/p/status?&fieldManager=kruise-test"
        );
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        // Exactly the status: what is not in it (conditions here) is gone.
        assert_eq!(body["status"], json!({"phase": "Running"}));
    }

    #[tokio::test]
    async fn conflicts_and_missing_objects_are_not_failures() {
        for (code, reason, expected) in [
            (409, "Conflict", StatusWrite::Stale),
            (404, "NotFound", StatusWrite::Gone),
        ] {
            let (client, _) = mocked(code, failure(code, reason));
            let api: Api<Pod> = Api::namespaced(client, "default");
            assert_eq!(replace_status(&api, &pod(), "m").await.unwrap(), expected);
        }
        let (client, _) = mocked(500, failure(500, "InternalError"));
        let api: Api<Pod> = Api::namespaced(client, "default");
        assert!(replace_status(&api, &pod(), "m").await.is_err());
    }
}
