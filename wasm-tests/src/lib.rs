//! kruise-core for JavaScript: SidecarSet injection, container launch
//! priority, JSON patches and the CloneSet rollout planner, exported with
//! wasm-bindgen.
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
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::CloneSetStatus;
use kruise_api::{CloneSet, ParseError, SidecarSet, Strictness, from_value, object_from_value};
use kruise_core::cloneset::{self, Diffs, FeatureGates, Plan, PlanError, PlanInput, Revisions};
use kruise_core::launch_priority;
use kruise_core::sidecarset::{InjectionContext, inject, prepare_stored};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wasm_bindgen::prelude::*;

/// talc instead of the dlmalloc of Rust's wasm targets: 2.3 KB less to
/// download, as fast on the golden cases (README.md, "Size").
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

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

/** What `planCloneSet` takes: one planning round's input. */
export interface PlanRequest {
  /** An apps.kruise.io/v1alpha1 CloneSet. */
  cloneset: KubeObject;
  /** The CloneSet's pods (inactive ones are ignored). */
  pods: KubeObject[];
  /** The revisions as plain data. */
  revisions: CloneSetRevisions;
  /** The current time (RFC 3339). */
  now: string;
  /** Feature gates that change planning; both default off. */
  gates?: { partitionRollback?: boolean; preparingUpdateAsUpdate?: boolean };
}

/** Revision names and the pod template (a ControllerRevision's spec.template) each holds. */
export interface CloneSetRevisions {
  current: string;
  update: string;
  templates: { [revision: string]: KubeObject };
}

/** What `cloneSetStatus` takes. */
export interface StatusRequest {
  cloneset: KubeObject;
  pods: KubeObject[];
  revisions: CloneSetRevisions;
  /** The status written last round (its conditions are carried on). */
  previous?: KubeObject;
  now: string;
}

/** The numbers Scale and Update act on. */
export interface CloneSetDiffs {
  scaleSurge: number; scaleOldSurge: number; updateSurge: number; updateOldSurge: number;
  useSurge: number; useSurgeOld: number; scaleUpNum: number; scaleUpNumOld: number;
  scaleUpLimit: number; scaleDownNum: number; scaleDownNumOld: number;
  deleteReadyLimit: number; updateNum: number; updateMaxUnavailable: number;
}

/** One round's writes, as `planCloneSet` returns them. Every key is always present. */
export interface CloneSetPlan {
  stage: "Idle" | "Scale" | "Refresh" | "Update";
  create: { revision: string; count: number }[];
  delete: string[];
  markSpecifiedDelete: string[];
  lifecycle: { pod: string; to: string; markNotReady: boolean; restoreHook: boolean }[];
  /** The pod's `KruisePodReady` condition to write for its lifecycle state. */
  readiness: { pod: string; condition: { type: string; status: string; message?: string; lastTransitionTime?: string } }[];
  inPlaceUpdate: {
    pod: string;
    revision: string;
    images: { [container: string]: string };
    /** null: remove the label/annotation. */
    labels: { [key: string]: string | null };
    annotations: { [key: string]: string | null };
    envFromMetadataContainers: string[];
    graceSeconds: number;
  }[];
  inPlaceComplete: { pod: string; to: string | null }[];
  applyGraced: string[];
  templateHashFix: { pod: string; value: string }[];
  scaleUpLimited: boolean;
  errors: { kind: "NotInPlaceUpdatable" | "UnknownRevision"; pod: string; revision?: string }[];
  scaleDiffs: CloneSetDiffs;
  updateDiffs: CloneSetDiffs | null;
  requeueAfterSeconds: number | null;
  /** The plan asks for at least one write. */
  modifies: boolean;
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

/// One CloneSet reconcile round: Scale, and Update if Scale wrote nothing.
#[wasm_bindgen(js_name = planCloneSet, unchecked_return_type = "CloneSetPlan")]
pub fn plan_clone_set_js(
    #[wasm_bindgen(unchecked_param_type = "PlanRequest")] request: &JsValue,
) -> Result<JsValue, JsError> {
    to_js(&plan_clone_set(from_js(request, "the request")?)?)
}

/// The CloneSet status to write after a round, from the pods.
#[wasm_bindgen(js_name = cloneSetStatus, unchecked_return_type = "KubeObject")]
pub fn clone_set_status_js(
    #[wasm_bindgen(unchecked_param_type = "StatusRequest")] request: &JsValue,
) -> Result<JsValue, JsError> {
    to_js(&clone_set_status(from_js(request, "the request")?)?)
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
        // The top level is named ".".
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

/// The fields of [`PlanRequest`] and [`StatusRequest`] in the TypeScript
/// declarations (`previous` only for the status, `gates` only for the plan).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CloneSetRequest {
    cloneset: Value,
    pods: Vec<Value>,
    revisions: RevisionsData,
    now: String,
    gates: Option<Gates>,
    previous: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct RevisionsData {
    current: String,
    update: String,
    templates: BTreeMap<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Gates {
    #[serde(default)]
    partition_rollback: bool,
    #[serde(default)]
    preparing_update_as_update: bool,
}

struct CloneSetInput {
    cloneset: CloneSet,
    pods: Vec<Pod>,
    revisions: Revisions,
    now: Timestamp,
    gates: FeatureGates,
    previous: Option<CloneSetStatus>,
}

/// Reads a [`CloneSetRequest`]; `for_status` says which of `gates` (plan)
/// and `previous` (status) is allowed.
fn read_clone_set_request(request: Value, for_status: bool) -> Result<CloneSetInput, Error> {
    let request: CloneSetRequest =
        from_value(request, Strictness::Strict).map_err(|e| match e {
            ParseError::Field { path, message } if path == "." => format!("request: {message}"),
            e => format!("request: {e}"),
        })?;
    if !for_status && request.previous.is_some() {
        return Err(Error("request: unknown field previous".to_owned()));
    }
    if for_status && request.gates.is_some() {
        return Err(Error("request: unknown field gates".to_owned()));
    }
    let cloneset: CloneSet = object_from_value(request.cloneset, Strictness::Strict)
        .map_err(|e| format!("cloneset: {e}"))?;
    let pods = request
        .pods
        .into_iter()
        .enumerate()
        .map(|(index, document)| {
            let name = document["metadata"]["name"]
                .as_str()
                .unwrap_or("unnamed")
                .to_owned();
            from_value::<Pod>(document, Strictness::Strict)
                .map_err(|e| format!("pods[{index}] ({name}): {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let templates = kruise_core::ordered::map(
        request
            .revisions
            .templates
            .into_iter()
            .map(|(name, document)| {
                from_value::<PodTemplateSpec>(document, Strictness::Strict)
                    .map(|template| (name.clone(), template))
                    .map_err(|e| format!("revisions.templates.{name}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?,
    );
    let now: Timestamp = request.now.parse().map_err(|e| format!("now: {e}"))?;
    let gates = request.gates.unwrap_or_default();
    let previous = request
        .previous
        .map(|document| {
            from_value::<CloneSetStatus>(document, Strictness::Strict)
                .map_err(|e| format!("previous: {e}"))
        })
        .transpose()?;
    Ok(CloneSetInput {
        cloneset,
        pods,
        revisions: Revisions {
            current: request.revisions.current,
            update: request.revisions.update,
            templates,
        },
        now,
        gates: FeatureGates {
            partition_rollback: gates.partition_rollback,
            preparing_update_as_update: gates.preparing_update_as_update,
        },
        previous,
    })
}

/// `planCloneSet` on JSON values.
pub fn plan_clone_set(request: Value) -> Result<Value, Error> {
    let input = read_clone_set_request(request, false)?;
    let plan = cloneset::plan(&PlanInput {
        cloneset: &input.cloneset,
        pods: &input.pods,
        revisions: &input.revisions,
        now: input.now,
        gates: input.gates,
    });
    Ok(plan_to_json(&plan))
}

/// `cloneSetStatus` on JSON values.
pub fn clone_set_status(request: Value) -> Result<Value, Error> {
    let input = read_clone_set_request(request, true)?;
    to_value(&cloneset::compute_status(
        &input.cloneset,
        &input.pods,
        &input.revisions,
        input.previous.as_ref(),
        input.now,
    ))
}

/// The plan in the JSON shape of `CloneSetPlan` (the core's types have no
/// serde; this is the one place that shape is written).
fn plan_to_json(plan: &Plan) -> Value {
    json!({
        "stage": format!("{:?}", plan.stage),
        "create": plan.create.iter().map(|c| json!({"revision": c.revision, "count": c.count})).collect::<Vec<_>>(),
        "delete": plan.delete,
        "markSpecifiedDelete": plan.mark_specified_delete,
        "lifecycle": plan.lifecycle.iter().map(|c| json!({
            "pod": c.pod,
            "to": c.to.as_str(),
            "markNotReady": c.mark_not_ready,
            "restoreHook": c.restore_hook,
        })).collect::<Vec<_>>(),
        "readiness": plan.readiness.iter().map(|c| json!({"pod": c.pod, "condition": c.condition})).collect::<Vec<_>>(),
        "inPlaceUpdate": plan.in_place_update.iter().map(|u| json!({
            "pod": u.pod,
            "revision": u.spec.revision,
            "images": u.spec.container_images,
            "labels": u.spec.labels,
            "annotations": u.spec.annotations,
            "envFromMetadataContainers": u.spec.env_from_metadata_containers,
            "graceSeconds": u.spec.grace_seconds,
        })).collect::<Vec<_>>(),
        "inPlaceComplete": plan.in_place_complete.iter().map(|c| json!({
            "pod": c.pod,
            "to": c.to.map(cloneset::LifecycleState::as_str),
        })).collect::<Vec<_>>(),
        "applyGraced": plan.apply_graced,
        "templateHashFix": plan.template_hash_fix.iter().map(|(pod, value)| json!({"pod": pod, "value": value})).collect::<Vec<_>>(),
        "scaleUpLimited": plan.scale_up_limited,
        "errors": plan.errors.iter().map(|e| match e {
            PlanError::NotInPlaceUpdatable { pod } => json!({"kind": "NotInPlaceUpdatable", "pod": pod}),
            PlanError::UnknownRevision { pod, revision } => json!({"kind": "UnknownRevision", "pod": pod, "revision": revision}),
        }).collect::<Vec<_>>(),
        "scaleDiffs": diffs_to_json(&plan.scale_diffs),
        "updateDiffs": plan.update_diffs.as_ref().map(diffs_to_json),
        "requeueAfterSeconds": plan.requeue_after_seconds,
        "modifies": plan.modifies(),
    })
}

fn diffs_to_json(d: &Diffs) -> Value {
    json!({
        "scaleSurge": d.scale_surge,
        "scaleOldSurge": d.scale_old_surge,
        "updateSurge": d.update_surge,
        "updateOldSurge": d.update_old_surge,
        "useSurge": d.use_surge,
        "useSurgeOld": d.use_surge_old,
        "scaleUpNum": d.scale_up_num,
        "scaleUpNumOld": d.scale_up_num_old,
        "scaleUpLimit": d.scale_up_limit,
        "scaleDownNum": d.scale_down_num,
        "scaleDownNumOld": d.scale_down_num_old,
        "deleteReadyLimit": d.delete_ready_limit,
        "updateNum": d.update_num,
        "updateMaxUnavailable": d.update_max_unavailable,
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
    fn plans_a_clone_set_round_and_its_status() {
        let template = |image: &str| json!({"metadata": {"labels": {"app": "demo"}}, "spec": {"containers": [{"name": "app", "image": image}]}});
        let request = json!({
            "cloneset": {
                "apiVersion": "apps.kruise.io/v1alpha1",
                "kind": "CloneSet",
                "metadata": {"name": "demo", "namespace": "default"},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "demo"}},
                    "template": template("nginx:1.1"),
                },
            },
            "pods": [],
            "revisions": {"current": "demo-a", "update": "demo-b", "templates": {"demo-a": template("nginx:1.0"), "demo-b": template("nginx:1.1")}},
            "now": "2024-05-01T10:00:00Z",
        });
        let plan = plan_clone_set(request.clone()).unwrap();
        assert_eq!(plan["stage"], "Scale");
        assert_eq!(plan["create"], json!([{"revision": "demo-b", "count": 2}]));
        assert_eq!(plan["modifies"], true);
        assert_eq!(plan["updateDiffs"], Value::Null);
        let status = clone_set_status(request.clone()).unwrap();
        assert_eq!(status["replicas"], 0);
        assert_eq!(status["updateRevision"], "demo-b");
        let mut late = request;
        late["now"] = json!("soon");
        assert!(
            plan_clone_set(late)
                .unwrap_err()
                .to_string()
                .starts_with("now: ")
        );
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
