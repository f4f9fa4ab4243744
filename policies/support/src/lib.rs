//! What every kruise-wasm policy does around its decision: read the waPC
//! payload within a size limit, pick out the requests it acts on, and
//! answer in Kubewarden's response shapes.

pub mod clock;
pub mod cluster;
pub mod random;

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Pod;
use kubewarden_policy_sdk::request::{
    GroupVersionKind, KubernetesAdmissionRequest, ValidationRequest,
};
use kubewarden_policy_sdk::response::ValidationResponse;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The SDK, for [`export_policy!`] expanded in the policy crates.
pub use kubewarden_policy_sdk;

/// Exports the guest entry point every policy has: a `wapc_init` that
/// registers the policy's `validate` and `validate_settings` operations
/// (each `fn(&[u8]) -> Result<Vec<u8>, String>`) and the SDK's
/// `protocol_version`. Expands to nothing outside wasm.
///
/// A policy that reads the cluster names its
/// `fn(&[u8], &impl ...) -> Result<Vec<u8>, String>` as
/// `validate_reading_cluster`: it is called with the host's cluster
/// ([`cluster::HOST_CLUSTER`]). One may also register [`READ_CLUSTER`]
/// (`read_cluster: path` after `validate_settings`).
#[macro_export]
macro_rules! export_policy {
    (validate_reading_cluster: $validate:path, validate_settings: $validate_settings:path $(,)?) => {
        #[cfg(target_arch = "wasm32")]
        fn validate_reading_host_cluster(payload: &[u8]) -> Result<Vec<u8>, String> {
            $validate(payload, &$crate::cluster::HOST_CLUSTER)
        }
        $crate::export_policy!(
            validate: validate_reading_host_cluster,
            validate_settings: $validate_settings,
        );
    };
    (
        validate: $validate:path,
        validate_settings: $validate_settings:path
        $(, read_cluster: $read_cluster:path)? $(,)?
    ) => {
        /// The host calls this export to let the guest register its operations.
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)] // exporting an unmangled symbol is what waPC asks for
        #[unsafe(no_mangle)]
        pub extern "C" fn wapc_init() {
            use $crate::kubewarden_policy_sdk::wapc_guest::register_function;
            register_function("validate", |payload| Ok($validate(payload)?));
            register_function("validate_settings", |payload| {
                Ok($validate_settings(payload)?)
            });
            register_function(
                "protocol_version",
                $crate::kubewarden_policy_sdk::protocol_version_guest,
            );
            $(register_function($crate::READ_CLUSTER, |payload| Ok($read_cluster(payload)?));)?
        }
    };
}

/// The waPC operation our host snapshots a cluster-reading module after
/// (`io.kruise-wasm/snapshot-after-read-cluster`; policy-server never calls
/// it): `validate_settings` with the settings as payload, then the cluster
/// reads every evaluation starts with, kept by the instance.
pub const READ_CLUSTER: &str = "read_cluster";

/// The largest request a policy reads. etcd keeps objects under 1.5 MiB; a
/// request carries at most the object and its old version, plus settings.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// How much of a bad payload an error message quotes.
const QUOTE_BYTES: usize = 200;

/// HTTP status a rejection carries for input the policy cannot use.
pub const BAD_REQUEST: u16 = 400;

/// HTTP status of a rejection for field violations (Kubernetes' `Invalid`).
pub const UNPROCESSABLE: u16 = 422;

/// The `validate` payload of a pod mutation: the request as
/// [`PodAdmission`] reads it, and the settings as `S`.
///
/// With `S = &RawValue` the settings stay JSON text, for a policy that keeps
/// what it read from its settings: both hosts send the same settings as the
/// same text with every request, so comparing texts spares parsing them
/// again.
#[derive(Debug, Deserialize)]
pub struct PodRequest<'a, S> {
    #[serde(borrow)]
    pub request: PodAdmission<'a>,
    pub settings: S,
}

/// What a pod mutation reads of an admission request, the object left as
/// its JSON text. The pod is read straight from that text into its type:
/// through a parsed document (the SDK's `KubernetesAdmissionRequest`) the
/// read cost as much again, and every Kubernetes type's reading was
/// compiled once more, for that deserializer. Every field may be absent,
/// as in the SDK's request; the others are skipped.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodAdmission<'a> {
    pub kind: GroupVersionKind,
    pub operation: String,
    #[serde(alias = "subResource")]
    pub sub_resource: String,
    pub namespace: String,
    #[serde(borrow)]
    pub object: Option<&'a RawValue>,
}

/// [`PodRequest`] from a `validate` payload.
pub fn read_pod_request<'a, S: Deserialize<'a>>(
    payload: &'a [u8],
) -> Result<PodRequest<'a, S>, String> {
    read_validation_payload(payload)
}

/// The `validate` payload read as `T`, refused with one message whatever
/// shape the caller reads it into.
fn read_validation_payload<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<T, String> {
    check_size(payload)?;
    serde_json::from_slice(payload).map_err(|e| {
        format!(
            "cannot read the validation request: {e} (starts with {})",
            quote(payload)
        )
    })
}

/// Parse the `validate_settings` payload; the error is a message for the user.
pub fn read_settings<S: DeserializeOwned>(payload: &[u8]) -> Result<S, String> {
    check_size(payload)?;
    serde_json::from_slice(payload).map_err(|e| format!("invalid settings: {e}"))
}

fn check_size(payload: &[u8]) -> Result<(), String> {
    if payload.len() > MAX_REQUEST_BYTES {
        return Err(format!(
            "the request is {} bytes, more than the {MAX_REQUEST_BYTES} this policy reads",
            payload.len()
        ));
    }
    Ok(())
}

fn quote(payload: &[u8]) -> String {
    let shown = &payload[..payload.len().min(QUOTE_BYTES)];
    format!("{:?}", String::from_utf8_lossy(shown))
}

/// The pod of a Pod CREATE request, `None` for any other request (which a
/// pod mutation accepts unchanged), or an error when the request claims to
/// create a pod but its object is not one. An object without `kind` is
/// read as the Pod the request says it is.
pub fn pod_to_create(request: &PodAdmission<'_>) -> Result<Option<Pod>, String> {
    let creates_pod = request.kind.kind == "Pod"
        && request.kind.group.is_empty()
        && request.operation == "CREATE"
        && request.sub_resource.is_empty();
    if !creates_pod {
        return Ok(None);
    }
    let not_a_pod = || "the request creates a Pod but its object is not a v1 Pod".to_owned();
    let object = request.object.ok_or_else(not_a_pod)?;
    kruise_api::outlined::from_str(object.get())
        .map(Some)
        .map_err(|e| {
            if claims_another_kind(object) {
                not_a_pod()
            } else {
                format!("the object is not a valid Pod: {e}")
            }
        })
}

/// Whether an object that failed to read as a Pod says it is something
/// else (or is not an object at all): read again for that, only then.
fn claims_another_kind(object: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct TypeMeta<'a> {
        #[serde(borrow, default, rename = "apiVersion")]
        api_version: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        kind: Option<Cow<'a, str>>,
    }
    match serde_json::from_str::<TypeMeta<'_>>(object.get()) {
        Ok(claimed) => {
            claimed.kind.as_deref().is_some_and(|kind| kind != "Pod")
                || claimed.api_version.as_deref().is_some_and(|v| v != "v1")
        }
        Err(_) => true,
    }
}

/// The name of the request's object, else the request's own name.
pub fn object_name(request: &KubernetesAdmissionRequest) -> String {
    request.object["metadata"]["name"]
        .as_str()
        .unwrap_or(&request.name)
        .to_owned()
}

/// One of our kinds from a request, read leniently like the API server's
/// pruning; a field of the wrong type or an unknown enum value is an error
/// that names the field.
pub fn read_object<K: kruise_api::KruiseObject>(object: &serde_json::Value) -> Result<K, String> {
    kruise_api::object_from_value(object.clone(), kruise_api::Strictness::Lenient)
        .map_err(|e| e.to_string())
}

/// What a policy decided.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Accept,
    /// Accept with this object in place of the request's.
    Mutate(serde_json::Value),
    /// Accept with this pod in place of the request's, written into the
    /// answer from its fields, with no JSON tree built in between (the
    /// same text: k8s-openapi writes fields in sorted order).
    MutatePod(Box<Pod>),
    Reject {
        message: String,
        code: u16,
    },
}

impl Outcome {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Outcome::Reject {
            message: message.into(),
            code: BAD_REQUEST,
        }
    }

    /// The request's object, defaulted: a mutation only when the defaults
    /// changed something.
    pub fn defaulted<K: Serialize>(request: &KubernetesAdmissionRequest, object: &K) -> Self {
        match serde_json::to_value(object) {
            Ok(value) if value == request.object => Outcome::Accept,
            Ok(value) => Outcome::Mutate(value),
            Err(error) => {
                Outcome::bad_request(format!("cannot write the defaulted object: {error}"))
            }
        }
    }

    /// The response the guest hands to the host (Kubewarden's snake_case
    /// `ValidationResponse`).
    pub fn into_response(self) -> ValidationResponse {
        let (accepted, message, code, mutated_object) = match self {
            Outcome::Accept => (true, None, None, None),
            Outcome::Mutate(object) => (true, None, None, Some(object)),
            Outcome::MutatePod(pod) => match serde_json::to_value(pod) {
                Ok(object) => (true, None, None, Some(object)),
                Err(e) => (false, Some(unwritable_pod(&e)), Some(BAD_REQUEST), None),
            },
            Outcome::Reject { message, code } => (false, Some(message), Some(code), None),
        };
        ValidationResponse {
            accepted,
            message,
            code,
            mutated_object,
            audit_annotations: None,
            warnings: None,
        }
    }

    pub fn into_payload(self) -> Result<Vec<u8>, serde_json::Error> {
        Answer::from(self).into_payload()
    }

    /// The object a mutation puts in place of the request's, as JSON.
    pub fn mutated_object(&self) -> Option<serde_json::Value> {
        match self {
            Outcome::Mutate(object) => Some(object.clone()),
            Outcome::MutatePod(pod) => serde_json::to_value(pod).ok(),
            Outcome::Accept | Outcome::Reject { .. } => None,
        }
    }
}

/// Why a mutated pod is refused rather than answered: both ways of writing
/// the answer say it alike.
fn unwritable_pod(error: &serde_json::Error) -> String {
    format!("cannot write the pod: {error}")
}

/// Kubewarden's `ValidationResponse` as the guest writes it: the same keys
/// in the same order, `null`s included, but the mutated object written
/// from whatever holds it.
#[derive(Serialize)]
struct Payload<'a, M> {
    accepted: bool,
    message: Option<&'a str>,
    code: Option<u16>,
    mutated_object: Option<&'a M>,
    audit_annotations: Option<()>,
    warnings: Option<&'a [String]>,
}

impl<M> Payload<'_, M> {
    const ACCEPT: Self = Self {
        accepted: true,
        message: None,
        code: None,
        mutated_object: None,
        audit_annotations: None,
        warnings: None,
    };
}

/// A decision and the warnings the user is shown with it (kubectl prints
/// an admission response's warnings, whether it accepts or refuses).
#[derive(Debug, PartialEq)]
pub struct Answer {
    pub outcome: Outcome,
    pub warnings: Vec<String>,
}

impl From<Outcome> for Answer {
    fn from(outcome: Outcome) -> Self {
        Self {
            outcome,
            warnings: Vec::new(),
        }
    }
}

impl Answer {
    pub fn into_response(self) -> ValidationResponse {
        let mut response = self.outcome.into_response();
        if !self.warnings.is_empty() {
            response.warnings = Some(self.warnings);
        }
        response
    }

    pub fn into_payload(self) -> Result<Vec<u8>, serde_json::Error> {
        let warnings = (!self.warnings.is_empty()).then_some(self.warnings.as_slice());
        match &self.outcome {
            Outcome::Accept => serde_json::to_vec(&Payload::<()> {
                warnings,
                ..Payload::ACCEPT
            }),
            Outcome::Mutate(object) => serde_json::to_vec(&Payload {
                mutated_object: Some(object),
                warnings,
                ..Payload::ACCEPT
            }),
            Outcome::MutatePod(pod) => {
                let written = serde_json::to_vec(&Payload {
                    mutated_object: Some(pod.as_ref()),
                    warnings,
                    ..Payload::ACCEPT
                });
                // As `into_response` answers it: a refusal, not a failure.
                written.or_else(|e| {
                    Answer {
                        outcome: Outcome::bad_request(unwritable_pod(&e)),
                        warnings: self.warnings.clone(),
                    }
                    .into_payload()
                })
            }
            Outcome::Reject { message, code } => serde_json::to_vec(&Payload::<()> {
                accepted: false,
                message: Some(message),
                code: Some(*code),
                warnings,
                ..Payload::ACCEPT
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request<'a>(kind: &str, operation: &str, object: &'a RawValue) -> PodAdmission<'a> {
        PodAdmission {
            kind: GroupVersionKind {
                group: String::new(),
                version: "v1".to_owned(),
                kind: kind.to_owned(),
            },
            operation: operation.to_owned(),
            object: Some(object),
            ..PodAdmission::default()
        }
    }

    fn raw(object: &serde_json::Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(object).unwrap()
    }

    #[test]
    fn only_pod_creates_are_picked_out() {
        let pod = raw(
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}),
        );
        let read = pod_to_create(&request("Pod", "CREATE", &pod)).unwrap();
        assert_eq!(read.unwrap().metadata.name.as_deref(), Some("p"));
        assert_eq!(pod_to_create(&request("Pod", "UPDATE", &pod)), Ok(None));
        assert_eq!(
            pod_to_create(&request("ConfigMap", "CREATE", &raw(&json!({})))),
            Ok(None)
        );
        let mut subresource = request("Pod", "CREATE", &pod);
        subresource.sub_resource = "ephemeralcontainers".to_owned();
        assert_eq!(pod_to_create(&subresource), Ok(None));
    }

    #[test]
    fn a_pod_create_without_a_pod_is_an_error() {
        for not_a_pod in [
            json!({"apiVersion": "apps/v1", "kind": "Deployment"}),
            json!({"apiVersion": "apps/v1", "kind": "Pod"}),
            json!(3),
            json!(null),
        ] {
            let error = pod_to_create(&request("Pod", "CREATE", &raw(&not_a_pod))).unwrap_err();
            assert!(error.contains("not a v1 Pod"), "{not_a_pod}: {error}");
        }
        let no_object = PodAdmission {
            object: None,
            ..request("Pod", "CREATE", &raw(&json!({})))
        };
        assert!(
            pod_to_create(&no_object)
                .unwrap_err()
                .contains("not a v1 Pod")
        );
        let broken =
            raw(&json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": "none"}}));
        let error = pod_to_create(&request("Pod", "CREATE", &broken)).unwrap_err();
        assert!(
            error.starts_with("the object is not a valid Pod: invalid type: string \"none\""),
            "{error}"
        );
    }

    #[test]
    fn a_pod_without_kind_is_read_as_the_request_says() {
        let pod = raw(&json!({"metadata": {"name": "p"}, "spec": {"containers": []}}));
        assert!(
            pod_to_create(&request("Pod", "CREATE", &pod))
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_pod_request_is_read_from_the_payload_as_the_hosts_send_it() {
        let payload = json!({
            "settings": {"a": 1},
            "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "subResource": "", "namespace": "ns", "operation": "CREATE",
                "userInfo": {"username": "u", "groups": ["g"]},
                "object": {"kind": "Pod", "spec": {"containers": []}},
                "oldObject": null, "dryRun": false, "options": {"kind": "CreateOptions"}
            }
        })
        .to_string();
        let read = read_pod_request::<&RawValue>(payload.as_bytes()).unwrap();
        assert_eq!(read.settings.get(), r#"{"a":1}"#);
        assert_eq!(read.request.namespace, "ns");
        assert_eq!(
            read.request.object.map(RawValue::get),
            Some(r#"{"kind":"Pod","spec":{"containers":[]}}"#)
        );
        assert!(pod_to_create(&read.request).unwrap().is_some());
    }

    #[test]
    fn oversized_and_malformed_payloads_are_refused_with_a_reason() {
        let big = vec![b' '; MAX_REQUEST_BYTES + 1];
        let error = read_pod_request::<serde_json::Value>(&big).unwrap_err();
        assert!(error.contains("more than the"), "{error}");
        let error = read_pod_request::<serde_json::Value>(b"{\"request\": [").unwrap_err();
        assert!(
            error.starts_with("cannot read the validation request"),
            "{error}"
        );
    }

    #[test]
    fn responses_have_kubewardens_shape() {
        let payload = Outcome::bad_request("no").into_payload().unwrap();
        let value: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!(
            value,
            json!({"accepted": false, "message": "no", "code": 400, "mutated_object": null,
                   "audit_annotations": null, "warnings": null})
        );
    }

    /// Each outcome's payload is the SDK's response written out, to the
    /// byte: k8s-openapi writes a pod's fields in the sorted order a JSON
    /// tree would (times, quantities and int-or-strings alike).
    #[test]
    fn a_payload_is_the_sdks_response_written_out() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-12-07T15:00:00Z",
                "labels": {"z": "1", "a": "2"}},
            "spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "500m"}},
                "readinessProbe": {"httpGet": {"port": "http"}}, "imagePullPolicy": "Always"}],
                "hostIPC": true, "hostname": "h"},
        }))
        .unwrap();
        let outcomes = || {
            [
                Outcome::Accept,
                Outcome::Mutate(json!({"b": 1, "a": [2]})),
                Outcome::bad_request("no"),
                Outcome::MutatePod(Box::new(pod.clone())),
            ]
        };
        for index in 0..outcomes().len() {
            for warnings in [Vec::new(), vec!["w".to_owned()]] {
                let answer = || Answer {
                    outcome: outcomes().into_iter().nth(index).unwrap(),
                    warnings: warnings.clone(),
                };
                let payload = answer().into_payload().unwrap();
                let sdk = serde_json::to_vec(&answer().into_response()).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&payload),
                    String::from_utf8_lossy(&sdk)
                );
            }
        }
    }
}

/// `<Kind> "<name>" is invalid: <violation>; <violation>`, as a 422 refusal
/// (the shape of the API server's own validation errors).
pub fn invalid(kind: &str, name: &str, violations: &[impl std::fmt::Display]) -> Outcome {
    let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
    Outcome::Reject {
        message: format!("{kind} {name:?} is invalid: {}", listed.join("; ")),
        code: UNPROCESSABLE,
    }
}

/// The settings of a policy that takes none: `{}`, anything else refused.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoSettings {}

/// The `validate` waPC operation of a policy without settings: read the
/// request, decide with `evaluate`, answer. A payload that cannot be read
/// is refused as a bad request.
pub fn answer_without_settings(
    payload: &[u8],
    evaluate: impl FnOnce(&KubernetesAdmissionRequest) -> Outcome,
) -> Result<Vec<u8>, String> {
    let outcome = match read_validation_payload::<ValidationRequest<NoSettings>>(payload) {
        Ok(request) => evaluate(&request.request),
        Err(message) => Outcome::bad_request(message),
    };
    outcome.into_payload().map_err(|e| e.to_string())
}

/// The `validate_settings` waPC operation of a policy without settings.
pub fn validate_no_settings(payload: &[u8]) -> Result<Vec<u8>, String> {
    let response = match read_settings::<NoSettings>(payload) {
        Ok(NoSettings {}) => serde_json::json!({ "valid": true, "message": null }),
        Err(message) => serde_json::json!({ "valid": false, "message": message }),
    };
    serde_json::to_vec(&response).map_err(|e| e.to_string())
}
