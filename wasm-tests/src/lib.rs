//! kruise-core for JavaScript: SidecarSet injection, container launch
//! priority and JSON patches, exported with wasm-bindgen.
//!
//! Objects cross the boundary as plain JS objects. Inside they travel as
//! JSON text (`JSON.stringify` in, `JSON.parse` out): serde_json is linked
//! anyway, so this costs less code than a second serde data format. Every
//! error is thrown as a JS `Error` whose message is the Rust error's
//! `Display` text, prefixed with the input it is about when it is a parse
//! error (`pod: …`, `sidecarSets[1] (name): …`).
//!
//! The functions on `serde_json::Value` below the bindings do the work; they
//! are plain Rust so native tests cover them too.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::{ParseError, SidecarSet, Strictness, from_value, object_from_value};
use kruise_core::launch_priority;
use kruise_core::sidecarset::{InjectionContext, inject, prepare_stored};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &str = r#"
/** A Kubernetes object as plain JSON (a Pod, a SidecarSet, …). */
export type KubeObject = { [key: string]: any };

/** What `injectSidecars` takes. */
export interface InjectRequest {
  /** The pod being created. */
  pod: KubeObject;
  /** SidecarSets as written or as stored; each goes through `prepareSidecarSet`. */
  sidecarSets: KubeObject[];
  /** The admission request's namespace, used when the pod has none. */
  namespace?: string;
  /** Labels of the pod's Namespace; absent means unknown, so a SidecarSet with a namespaceSelector does not match. */
  namespaceLabels?: { [key: string]: string };
  /** The current time (RFC 3339), recorded as updateTimestamp. */
  now: string;
  /** apps/v1 ControllerRevisions, for injectionStrategy.revision. */
  revisions?: KubeObject[];
  /** A draw from [0, 1) for the Partial revision policy. */
  randomDraw?: number;
}

/** What `injectSidecars` returns. */
export interface Injection {
  /** The pod to admit (the input, normalized, when nothing applied). */
  pod: KubeObject;
  /** Names of the SidecarSets applied, sorted. */
  sidecarSets: string[];
}

/** One RFC 6902 operation. */
export interface JsonPatchOperation {
  op: "add" | "remove" | "replace" | "move" | "copy" | "test";
  path: string;
  from?: string;
  value?: any;
}
"#;

/// Inject every matching SidecarSet into a pod being created.
#[wasm_bindgen(js_name = injectSidecars, unchecked_return_type = "Injection")]
pub fn inject_sidecars_js(
    #[wasm_bindgen(unchecked_param_type = "InjectRequest")] request: &JsValue,
) -> Result<JsValue, JsError> {
    to_js(&inject_sidecars(from_js(request, "the request")?)?)
}

/// A SidecarSet as OpenKruise's webhook stores it: defaulted, and with its
/// hash annotations stamped unless it already has `kruise.io/sidecarset-hash`.
#[wasm_bindgen(js_name = prepareSidecarSet, unchecked_return_type = "KubeObject")]
pub fn prepare_sidecar_set_js(
    #[wasm_bindgen(js_name = sidecarSet, unchecked_param_type = "KubeObject")]
    sidecar_set: &JsValue,
) -> Result<JsValue, JsError> {
    let sidecar_set = from_js(sidecar_set, "the SidecarSet")?;
    to_js(&prepare_sidecar_set(sidecar_set)?)
}

/// The launch-priority mutation: the pod gated on its barrier ConfigMap, or
/// `null` when it needs no change. `nameSuffix` (5 characters of
/// `nameSuffixAlphabet()`) names a pod that only has `generateName`.
#[wasm_bindgen(js_name = applyLaunchPriority, unchecked_return_type = "KubeObject | null")]
pub fn apply_launch_priority_js(
    #[wasm_bindgen(unchecked_param_type = "KubeObject")] pod: &JsValue,
    #[wasm_bindgen(js_name = nameSuffix)] name_suffix: &str,
) -> Result<JsValue, JsError> {
    match apply_launch_priority(from_js(pod, "the pod")?, name_suffix)? {
        Some(pod) => to_js(&pod),
        None => Ok(JsValue::NULL),
    }
}

/// The RFC 6902 patch that turns `before` into `after`, as a Kubewarden
/// policy server computes it for a mutation.
#[wasm_bindgen(js_name = jsonPatch, unchecked_return_type = "JsonPatchOperation[]")]
pub fn json_patch_js(
    #[wasm_bindgen(unchecked_param_type = "any")] before: &JsValue,
    #[wasm_bindgen(unchecked_param_type = "any")] after: &JsValue,
) -> Result<JsValue, JsError> {
    to_js(&json_patch(
        &from_js(before, "before")?,
        &from_js(after, "after")?,
    )?)
}

/// A pod read strictly (an unknown field is an error) and written back, in
/// the form every pod this package returns has: for comparing pods and for
/// checking one a person wrote.
#[wasm_bindgen(js_name = normalizePod, unchecked_return_type = "KubeObject")]
pub fn normalize_pod_js(
    #[wasm_bindgen(unchecked_param_type = "KubeObject")] pod: &JsValue,
) -> Result<JsValue, JsError> {
    to_js(&normalize_pod(from_js(pod, "the pod")?)?)
}

/// The characters generated pod name suffixes are drawn from.
#[wasm_bindgen(js_name = nameSuffixAlphabet)]
pub fn name_suffix_alphabet() -> String {
    launch_priority::NAME_SUFFIX_ALPHABET.to_owned()
}

fn from_js(value: &JsValue, what: &str) -> Result<Value, JsError> {
    let text = js_sys::JSON::stringify(value)
        .ok()
        .and_then(|text| JsValue::from(text).as_string())
        .ok_or_else(|| JsError::new(&format!("{what} is not a JSON value")))?;
    serde_json::from_str(&text).map_err(|e| JsError::new(&format!("{what}: {e}")))
}

fn to_js(value: &Value) -> Result<JsValue, JsError> {
    let text = serde_json::to_string(value).map_err(|e| JsError::new(&e.to_string()))?;
    js_sys::JSON::parse(&text).map_err(|_| JsError::new("JSON.parse rejected our output"))
}

/// The fields of [`InjectRequest`] in the TypeScript declarations.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InjectRequest {
    pod: Value,
    sidecar_sets: Vec<Value>,
    namespace: Option<String>,
    namespace_labels: Option<BTreeMap<String, String>>,
    now: String,
    #[serde(default)]
    revisions: Vec<Value>,
    random_draw: Option<f64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct InjectResponse {
    pod: Pod,
    sidecar_sets: Vec<String>,
}

/// `injectSidecars` on JSON values.
pub fn inject_sidecars(request: Value) -> Result<Value, Error> {
    let request: InjectRequest = from_value(request, Strictness::Strict).map_err(|e| match e {
        // serde_path_to_error names the top level ".".
        ParseError::Field { path, message } if path == "." => format!("request: {message}"),
        e => format!("request: {e}"),
    })?;
    let pod: Pod = from_value(request.pod, Strictness::Strict).map_err(|e| format!("pod: {e}"))?;
    let sidecar_sets = request
        .sidecar_sets
        .into_iter()
        .enumerate()
        .map(|(index, document)| {
            let name = document["metadata"]["name"]
                .as_str()
                .unwrap_or("unnamed")
                .to_owned();
            read_sidecar_set(document).map_err(|e| format!("sidecarSets[{index}] ({name}): {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let revisions = request
        .revisions
        .into_iter()
        .enumerate()
        .map(|(index, document)| {
            from_value::<ControllerRevision>(document, Strictness::Strict)
                .map_err(|e| format!("revisions[{index}]: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let context = InjectionContext {
        sidecar_sets: &sidecar_sets,
        namespace_labels: request.namespace_labels.as_ref(),
        request_namespace: request.namespace.as_deref(),
        now: &request.now,
        revisions: &revisions,
        random_draw: request.random_draw,
    };
    let injection = inject(&pod, &context).map_err(|e| e.to_string())?;
    to_value(&InjectResponse {
        pod: injection.pod,
        sidecar_sets: injection.sidecar_sets,
    })
}

/// `prepareSidecarSet` on JSON values.
pub fn prepare_sidecar_set(sidecar_set: Value) -> Result<Value, Error> {
    to_value(&read_sidecar_set(sidecar_set)?)
}

/// Read strictly, then prepare as stored (defaults, and hashes unless
/// already stamped), as the sidecarset policy does.
fn read_sidecar_set(document: Value) -> Result<SidecarSet, Error> {
    let sidecar_set: SidecarSet =
        object_from_value(document, Strictness::Strict).map_err(|e| e.to_string())?;
    Ok(prepare_stored(sidecar_set))
}

/// `applyLaunchPriority` on JSON values.
pub fn apply_launch_priority(pod: Value, name_suffix: &str) -> Result<Option<Value>, Error> {
    let pod: Pod = from_value(pod, Strictness::Strict).map_err(|e| format!("pod: {e}"))?;
    launch_priority::apply(&pod, name_suffix)
        .map_err(|e| e.to_string())?
        .map(|pod| to_value(&pod))
        .transpose()
}

/// `jsonPatch` on JSON values.
pub fn json_patch(before: &Value, after: &Value) -> Result<Value, Error> {
    to_value(&json_patch::diff(before, after))
}

/// `normalizePod` on JSON values.
pub fn normalize_pod(pod: Value) -> Result<Value, Error> {
    let pod: Pod = from_value(pod, Strictness::Strict).map_err(|e| format!("pod: {e}"))?;
    to_value(&pod)
}

fn to_value(value: &impl Serialize) -> Result<Value, Error> {
    serde_json::to_value(value).map_err(|e| Error(e.to_string()))
}

/// A message for JS: `?` turns it into a thrown `Error` with this text.
#[derive(Debug, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(message: String) -> Self {
        Self(message)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use kruise_core::sidecarset::HASH_ANNOTATION;
    use serde_json::json;

    use super::*;

    fn sidecar_set() -> Value {
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "SidecarSet",
            "metadata": {"name": "logs"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "containers": [{"name": "log", "image": "busybox"}],
            },
        })
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-1", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "nginx"}]},
        })
    }

    #[test]
    fn injects_and_names_the_sidecar_sets() {
        let out = inject_sidecars(json!({
            "pod": pod(),
            "sidecarSets": [sidecar_set()],
            "now": "2024-05-01T10:00:00Z",
        }))
        .unwrap();
        assert_eq!(out["sidecarSets"], json!(["logs"]));
        let names: Vec<_> = out["pod"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].clone())
            .collect();
        assert_eq!(names, [json!("log"), json!("app")]);
    }

    #[test]
    fn errors_are_the_rust_messages_with_where_they_happened() {
        let mut empty = pod();
        empty["spec"]["containers"] = json!([]);
        let request = |pod: Value, sidecar_set: Value| json!({"pod": pod, "sidecarSets": [sidecar_set], "now": "t"});
        assert_eq!(
            inject_sidecars(request(empty, sidecar_set()))
                .unwrap_err()
                .to_string(),
            "pod web-1 has no containers (spec.containers is empty)"
        );
        let mut typo = sidecar_set();
        typo["spec"]["selectr"] = json!({});
        assert_eq!(
            inject_sidecars(request(pod(), typo))
                .unwrap_err()
                .to_string(),
            "sidecarSets[0] (logs): unknown field spec.selectr"
        );
        assert_eq!(
            inject_sidecars(json!({"pod": pod(), "sidecarSet": [], "now": "t"}))
                .unwrap_err()
                .to_string(),
            "request: missing field `sidecarSets`"
        );
        let mut typo = pod();
        typo["spec"]["containers"][0]["imag"] = json!("nginx");
        assert_eq!(
            apply_launch_priority(typo, "x").unwrap_err().to_string(),
            "pod: unknown field spec.containers.0.imag"
        );
        let mut unnamed = pod();
        unnamed["metadata"] = json!({"generateName": "web-"});
        unnamed["spec"]["containers"] = json!([
            {"name": "a", "image": "x"},
            {"name": "b", "image": "x", "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "1"}]},
        ]);
        assert_eq!(
            apply_launch_priority(unnamed, "aaaaa")
                .unwrap_err()
                .to_string(),
            "name suffix \"aaaaa\" must be 5 characters of bcdfghjklmnpqrstvwxz2456789"
        );
    }

    #[test]
    fn prepare_stamps_hashes_once() {
        let prepared = prepare_sidecar_set(sidecar_set()).unwrap();
        let hash = &prepared["metadata"]["annotations"][HASH_ANNOTATION];
        assert!(hash.is_string());
        assert_eq!(prepare_sidecar_set(prepared.clone()).unwrap(), prepared);
        let mut pinned = sidecar_set();
        pinned["metadata"]["annotations"] = json!({HASH_ANNOTATION: "mine"});
        let kept = prepare_sidecar_set(pinned).unwrap();
        assert_eq!(kept["metadata"]["annotations"][HASH_ANNOTATION], "mine");
    }

    #[test]
    fn json_patch_lists_the_changes() {
        let patch = json_patch(&json!({"a": 1, "b": [1]}), &json!({"a": 2, "b": [1, 2]})).unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "replace", "path": "/a", "value": 2},
                {"op": "add", "path": "/b/1", "value": 2},
            ])
        );
    }
}
