//! `kruise-wasm inject`: what OpenKruise's pod webhook would do to a pod,
//! shown before it is applied (like `istioctl kube-inject`). SidecarSet
//! injection then launch priority, with the embedded modules, on a Pod or
//! on a workload's pod template.

use serde_json::{Map, Value, json};

use crate::admission::{AdmissionRequest, Enforcement, Settings};
use crate::capabilities::{Grants, PolicyHost};
use crate::chain::{ChainOutcome, run_chain};
use crate::policy::Policy;
use crate::runtime::{LoadError, Runtime, block_on};

/// Where the pod is inside the object given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodLocation {
    /// The object is a Pod.
    Pod,
    /// A pod template at this JSON pointer (`/spec/template` of a
    /// Deployment, CloneSet, …; `/spec/jobTemplate/spec/template` of a
    /// CronJob).
    Template(&'static str),
}

const TEMPLATE_POINTERS: [&str; 2] = ["/spec/template", "/spec/jobTemplate/spec/template"];

/// The pod to run the policies on, and where it came from.
pub fn pod_of(object: &Value) -> Result<(Value, PodLocation), String> {
    if object.get("kind").and_then(Value::as_str) == Some("Pod") {
        return Ok((object.clone(), PodLocation::Pod));
    }
    for pointer in TEMPLATE_POINTERS {
        if let Some(template) = object.pointer(pointer).filter(|t| t.is_object()) {
            let pod = json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": template.get("metadata").cloned().unwrap_or_else(|| json!({})),
                "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
            });
            return Ok((pod, PodLocation::Template(pointer)));
        }
    }
    let what = match object.get("kind").and_then(Value::as_str) {
        Some(kind) => format!("kind {kind}"),
        None => "an object without kind".to_owned(),
    };
    Err(format!(
        "{what} is neither a Pod nor a workload with a pod template"
    ))
}

/// Puts the mutated pod back where it came from.
pub fn put_back(object: &mut Value, location: PodLocation, pod: Value) {
    match location {
        PodLocation::Pod => *object = pod,
        PodLocation::Template(pointer) => {
            if let Some(Value::Object(template)) = object.pointer_mut(pointer) {
                for key in ["metadata", "spec"] {
                    if let Some(value) = pod.get(key) {
                        template.insert(key.to_owned(), value.clone());
                    }
                }
            }
        }
    }
}

/// The namespace the pod would be created in.
pub fn namespace_of(object: &Value, default: &str) -> String {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or(default)
        .to_owned()
}

/// A pod CREATE as the API server sends it to the webhook.
pub fn pod_create_request(pod: &Value, namespace: &str) -> Result<AdmissionRequest, String> {
    let mut request = json!({
        "uid": "kruise-wasm-inject",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace,
        "operation": "CREATE",
        "userInfo": {"username": "kruise-wasm"},
        "object": pod,
        "dryRun": false,
    });
    if let Some(name) = pod.pointer("/metadata/name") {
        request["name"] = name.clone();
    }
    AdmissionRequest::from_document(request).map_err(|e| e.to_string())
}

/// Reads a multi-document YAML of SidecarSets (empty documents skipped).
pub fn sidecar_sets_from_yaml(text: &str) -> Result<Vec<Value>, String> {
    let mut sidecar_sets = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = <Value as serde::Deserialize>::deserialize(document)
            .map_err(|e| format!("document {}: {e}", index + 1))?;
        match value.get("kind").and_then(Value::as_str) {
            _ if value.is_null() => {}
            Some("SidecarSet") => sidecar_sets.push(value),
            other => {
                return Err(format!(
                    "document {} is {}, not a SidecarSet",
                    index + 1,
                    other.map_or_else(|| "without kind".to_owned(), |kind| format!("a {kind}"))
                ));
            }
        }
    }
    Ok(sidecar_sets)
}

/// `key=value,key=value` as a label map.
pub fn labels_from_text(text: &str) -> Result<Map<String, Value>, String> {
    text.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("`{pair}` is not key=value"))?;
            Ok((
                key.trim().to_owned(),
                Value::String(value.trim().to_owned()),
            ))
        })
        .collect()
}

/// The sidecarset module's settings: the SidecarSets inline, and the
/// namespace's labels when known.
pub fn sidecarset_settings(
    sidecar_sets: Vec<Value>,
    namespace: &str,
    namespace_labels: Option<Map<String, Value>>,
) -> Settings {
    let mut settings = Settings::new();
    settings.insert("sidecarSets".to_owned(), Value::Array(sidecar_sets));
    if let Some(labels) = namespace_labels {
        settings.insert("namespaceLabels".to_owned(), json!({ namespace: labels }));
    }
    settings
}

/// The two embedded policies, in the pod webhook's order.
#[derive(Debug)]
pub struct Injector {
    sidecarset: Policy,
    launch_priority: Policy,
}

impl Injector {
    pub fn new(runtime: &Runtime, sidecarset_settings: Settings) -> Result<Self, LoadError> {
        let policy =
            |module: &kruise_policy_modules::PolicyModule, settings| -> Result<Policy, LoadError> {
                let host = PolicyHost {
                    policy_id: module.name.to_owned(),
                    grants: Grants::kwctl_run(),
                    cluster: None,
                };
                Ok(Policy::new(
                    module.name,
                    runtime.load(module.wasm)?,
                    &settings,
                    Enforcement::kwctl_run(module.name),
                    runtime.limits(Some(crate::runtime::DEFAULT_TIMEOUT)),
                    std::sync::Arc::new(host),
                ))
            };
        Ok(Self {
            sidecarset: policy(&kruise_policy_modules::SIDECARSET, sidecarset_settings)?,
            launch_priority: policy(&kruise_policy_modules::LAUNCH_PRIORITY, Settings::new())?,
        })
    }

    pub fn validate_settings(&self) -> Result<(), String> {
        block_on(self.sidecarset.validate_settings())
    }

    /// Injects `object`. Launch priority names its barrier after the pod,
    /// which a template does not have yet: there it is left to the webhook
    /// at pod creation, and a note says so.
    pub fn inject(&self, object: &Value, namespace: &str) -> Result<Injected, String> {
        let (pod, location) = pod_of(object)?;
        let request = pod_create_request(&pod, namespace)?;
        let mut notes = Vec::new();
        let mut outcome = block_on(run_chain(
            &[&self.sidecarset, &self.launch_priority],
            &request,
        ));
        if location != PodLocation::Pod && needs_pod_name(&outcome, &self.launch_priority.id) {
            notes.push(
                "launch priority not applied: its barrier ConfigMap is named after each pod, so the webhook adds it when a pod is created"
                    .to_owned(),
            );
            outcome = block_on(run_chain(&[&self.sidecarset], &request));
        }
        if let Some(policy) = &outcome.rejected_by {
            let message = outcome
                .response
                .status
                .as_ref()
                .and_then(|s| s.message.clone())
                .unwrap_or_default();
            return Err(format!("{policy}: {message}"));
        }
        let mut injected = object.clone();
        if let Some(pod) = outcome.object {
            put_back(&mut injected, location, pod);
        }
        notes.extend(outcome.response.warnings.into_iter().flatten());
        let patch = json_patch::diff(object, &injected);
        Ok(Injected {
            object: injected,
            patch: serde_json::to_value(patch).unwrap_or_default(),
            notes,
        })
    }
}

fn needs_pod_name(outcome: &ChainOutcome, launch_priority: &str) -> bool {
    outcome.rejected_by.as_deref() == Some(launch_priority)
        && outcome
            .response
            .status
            .as_ref()
            .and_then(|s| s.message.as_deref())
            .is_some_and(|m| m.contains("neither metadata.name nor metadata.generateName"))
}

/// The injected object, its JSON Patch from the original, and what the
/// user should know.
#[derive(Debug, Clone, PartialEq)]
pub struct Injected {
    pub object: Value,
    pub patch: Value,
    pub notes: Vec<String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn pods_and_templates_are_found_and_put_back() {
        let deployment = json!({"kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
            "spec": {"template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": []}}}});
        let (pod, location) = pod_of(&deployment).unwrap();
        assert_eq!(location, PodLocation::Template("/spec/template"));
        assert_eq!(pod["metadata"]["labels"]["app"], "a");
        assert_eq!(pod["kind"], "Pod");
        let mut back = deployment.clone();
        put_back(
            &mut back,
            location,
            json!({"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [1]}}),
        );
        assert_eq!(back["spec"]["template"]["metadata"]["labels"]["app"], "b");
        assert_eq!(back["spec"]["template"]["spec"]["containers"][0], 1);
        assert_eq!(
            back["metadata"], deployment["metadata"],
            "the workload's own metadata stays"
        );

        let cron = json!({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}});
        assert_eq!(
            pod_of(&cron).unwrap().1,
            PodLocation::Template("/spec/jobTemplate/spec/template")
        );
        assert_eq!(pod_of(&json!({"kind": "Pod"})).unwrap().1, PodLocation::Pod);
        assert!(
            pod_of(&json!({"kind": "ConfigMap"}))
                .unwrap_err()
                .contains("ConfigMap")
        );
    }

    #[test]
    fn the_namespace_comes_from_the_object_or_the_default() {
        assert_eq!(
            namespace_of(&json!({"metadata": {"namespace": "x"}}), "default"),
            "x"
        );
        assert_eq!(namespace_of(&json!({"metadata": {}}), "default"), "default");
    }

    #[test]
    fn sidecar_sets_are_read_from_every_document() {
        let yaml = "kind: SidecarSet\nmetadata: {name: a}\n---\n---\nkind: SidecarSet\nmetadata: {name: b}\n";
        let sets = sidecar_sets_from_yaml(yaml).unwrap();
        assert_eq!(sets.len(), 2);
        assert_eq!(sets[1]["metadata"]["name"], "b");
        let error = sidecar_sets_from_yaml("kind: SidecarSet\n---\nkind: Pod\n").unwrap_err();
        assert_eq!(error, "document 2 is a Pod, not a SidecarSet");
    }

    #[test]
    fn labels_are_key_value_pairs() {
        let labels = labels_from_text("env=prod, team = a").unwrap();
        assert_eq!(Value::Object(labels), json!({"env": "prod", "team": "a"}));
        assert!(
            labels_from_text("env")
                .unwrap_err()
                .contains("not key=value")
        );
        assert!(labels_from_text("").unwrap().is_empty());
    }

    #[test]
    fn settings_carry_the_namespace_labels() {
        let settings = sidecarset_settings(
            vec![json!({"kind": "SidecarSet"})],
            "ns",
            Some(labels_from_text("a=b").unwrap()),
        );
        assert_eq!(
            Value::Object(settings),
            json!({"sidecarSets": [{"kind": "SidecarSet"}], "namespaceLabels": {"ns": {"a": "b"}}})
        );
    }

    #[test]
    fn the_request_is_a_pod_create() {
        let request =
            pod_create_request(&json!({"kind": "Pod", "metadata": {"name": "p"}}), "ns").unwrap();
        assert_eq!(request.operation, "CREATE");
        assert_eq!(request.name.as_deref(), Some("p"));
        assert_eq!(request.namespace.as_deref(), Some("ns"));
        assert_eq!(request.resource.resource, "pods");
    }
}
