//! The SidecarSet validation module under wapc + wasmtime-provider, its
//! cluster reads answered through Kubewarden's host calls: the same answers
//! as the native policy, a typo refused naming the field, a conflict with
//! another SidecarSet of the cluster refused, and a stored SidecarSet that
//! no longer parses can still be fixed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guest;

use std::collections::BTreeMap;

use guest::{Guest, validation_request};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::ConfigMap;
use kruise_policy_modules::{VALIDATE_SIDECARSET, fixtures};
use kruise_policy_support::cluster::{Cluster, KruiseConfiguration, found};
use serde_json::{Value, json};

fn sidecar_set(name: &str, container: &str) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "nginx"}},
            "containers": [{"name": container, "image": "busybox"}],
        },
    })
}

fn admission(operation: &str, object: &Value, old: Option<&Value>) -> Value {
    fixtures::kruise_request("SidecarSet", "sidecarsets", operation, object, old)
}

/// The cluster both sides read: these SidecarSets and, maybe, OpenKruise's
/// `kruise-configuration` ConfigMap; no revisions.
#[derive(Clone)]
struct Stored(Vec<Value>);

impl Stored {
    fn of_kind(&self, kind: &str) -> Vec<Value> {
        self.0
            .iter()
            .filter(|o| o["kind"] == kind)
            .cloned()
            .collect()
    }

    fn list(&self) -> Value {
        json!({"apiVersion": "v1", "kind": "List", "items": self.of_kind("SidecarSet")})
    }

    /// The ConfigMap, or the error our host gives for a missing object.
    fn configuration(&self) -> Result<Value, String> {
        self.of_kind("ConfigMap")
            .into_iter()
            .next()
            .ok_or_else(|| "configmap \"kruise-configuration\" not found".to_owned())
    }

    fn guest(&self) -> Guest {
        let cluster = self.clone();
        Guest::with_host_calls(
            VALIDATE_SIDECARSET.wasm,
            move |binding, namespace, operation, payload| match (binding, namespace, operation) {
                ("kubewarden", "kubernetes", "list_resources_all") => {
                    Ok(serde_json::to_vec(&cluster.list()).unwrap())
                }
                // This SidecarSet's ControllerRevisions: none.
                ("kubewarden", "kubernetes", "list_resources_by_namespace") => {
                    Ok(br#"{"apiVersion": "v1", "kind": "List", "items": []}"#.to_vec())
                }
                ("kubewarden", "kubernetes", "get_resource") => {
                    let asked: Value = serde_json::from_slice(payload).unwrap();
                    assert_eq!(
                        (
                            asked["kind"].as_str(),
                            asked["namespace"].as_str(),
                            asked["name"].as_str()
                        ),
                        (
                            Some("ConfigMap"),
                            Some("kruise-system"),
                            Some("kruise-configuration")
                        ),
                    );
                    Ok(serde_json::to_vec(&cluster.configuration()?).unwrap())
                }
                other => Err(format!("unexpected host call {other:?}")),
            },
        )
    }
}

impl Cluster for Stored {
    fn sidecar_sets_answer(&self) -> Result<Vec<u8>, String> {
        serde_json::to_vec(&self.list()).map_err(|e| e.to_string())
    }
    fn namespace_labels(&self, namespace: &str) -> Result<BTreeMap<String, String>, String> {
        Err(format!("unexpected read of namespace {namespace}"))
    }
    fn sidecar_set_revisions(&self, _: &str) -> Result<Vec<ControllerRevision>, String> {
        Ok(Vec::new())
    }
}

impl KruiseConfiguration for Stored {
    fn kruise_configuration(&self) -> Result<Option<BTreeMap<String, String>>, String> {
        let map: Option<ConfigMap> = found(self.configuration(), "configmap")?;
        Ok(map.map(|m| m.data.unwrap_or_default()))
    }
}

/// Runs the request through the module and the native policy; they must
/// agree. Returns the module's answer.
fn answer(cluster: &Stored, request: &Value) -> Value {
    let response = cluster
        .guest()
        .call_json("validate", &validation_request(request, &json!({})));
    let typed = serde_json::from_value(request.clone()).unwrap();
    let native = kruise_validate_sidecarset::evaluate(&typed, cluster).into_response();
    assert_eq!(response, serde_json::to_value(native).unwrap());
    response
}

#[test]
fn valid_and_invalid_sidecarsets() {
    let cluster = Stored(vec![sidecar_set("other", "other-sidecar")]);
    let accepted = answer(
        &cluster,
        &admission("CREATE", &sidecar_set("demo", "sidecar1"), None),
    );
    assert_eq!(accepted["accepted"], true, "{accepted}");

    let mut typo = sidecar_set("typo", "typo-sidecar");
    typo["spec"]["updateStrategy"] = json!({"type": "RollingUpdat"});
    let refused = answer(&cluster, &admission("CREATE", &typo, None));
    assert_eq!(refused["accepted"], false);
    assert_eq!(refused["code"], 422);
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.starts_with("SidecarSet \"typo\" is invalid: spec.updateStrategy.type: unknown variant `RollingUpdat`"),
        "{message}"
    );

    let clash = answer(
        &cluster,
        &admission("CREATE", &sidecar_set("demo", "other-sidecar"), None),
    );
    let message = clash["message"].as_str().unwrap();
    assert!(
        message.contains("spec.containers: Invalid value: container other-sidecar already exists in SidecarSet other"),
        "{message}"
    );

    let mut empty = sidecar_set("empty", "c");
    empty["spec"]["selector"] = json!({});
    let message = answer(&cluster, &admission("CREATE", &empty, None))["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap()
            .contains("spec.selector: Invalid value: empty selector"),
        "{message}"
    );
}

#[test]
fn a_stored_sidecarset_that_no_longer_parses_can_be_fixed() {
    let mut stored = sidecar_set("typo", "typo-sidecar");
    stored["spec"]["updateStrategy"] = json!({"type": "RollingUpdat"});
    // The cluster holds the bad object; its fix is validated as a create.
    let cluster = Stored(vec![stored.clone()]);
    let fixed = sidecar_set("typo", "typo-sidecar");
    let response = answer(&cluster, &admission("UPDATE", &fixed, Some(&stored)));
    assert_eq!(response["accepted"], true, "{response}");
}

#[test]
fn other_kinds_and_operations_pass() {
    let cluster = Stored(Vec::new());
    let mut delete = admission("DELETE", &sidecar_set("demo", "c"), None);
    assert_eq!(answer(&cluster, &delete)["accepted"], true);
    delete["operation"] = json!("CREATE");
    delete["kind"]["kind"] = json!("CloneSet");
    assert_eq!(answer(&cluster, &delete)["accepted"], true);
}

/// Every case of policies/fixtures/sidecarset/validation.yaml, through the
/// module: refused with 422, the message naming the case's field.
#[test]
fn every_shared_case_is_refused_naming_its_field() {
    let (base, cases) = fixtures::validation_cases("sidecarset").unwrap();
    let cluster = Stored(Vec::new());
    let accepted = answer(&cluster, &admission("CREATE", &base, None));
    assert_eq!(accepted["accepted"], true, "the base: {accepted}");
    assert!(cases.len() >= 25);
    for case in cases {
        let response = answer(&cluster, &admission("CREATE", &case.object, None));
        assert_eq!(response["code"], 422, "{}: {response}", case.name);
        let message = response["message"].as_str().unwrap();
        assert!(
            message.contains(&format!(": {}:", case.refused)),
            "{}: {message}",
            case.name
        );
    }
}

/// The `patchPodMetadata` whitelist is read from OpenKruise's
/// `kruise-configuration` ConfigMap through the host: without it nothing
/// may be patched; with it, the keys its patterns match.
#[test]
fn patched_annotations_follow_the_clusters_whitelist() {
    let mut patching = sidecar_set("patching", "patching-sidecar");
    patching["spec"]["patchPodMetadata"] = json!([{"annotations": {"example.com/version": "v1"}}]);
    let create = admission("CREATE", &patching, None);
    let refused = answer(&Stored(Vec::new()), &create);
    assert_eq!(
        refused["message"],
        "SidecarSet \"patching\" is invalid: spec.patchPodMetadata: Required value: \
         SidecarSet patch metadata whitelist not found"
    );
    let whitelist = |pattern: &str| {
        Stored(vec![json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kruise-configuration", "namespace": "kruise-system"},
            "data": {"SidecarSet_PatchPodMetadata_WhiteList":
                json!({"rules": [{"allowedAnnotationKeyExprs": [pattern]}]}).to_string()},
        })])
    };
    assert_eq!(
        answer(&whitelist("^example\\.com/"), &create)["accepted"],
        true
    );
    let message = answer(&whitelist("^other/"), &create)["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap()
            .ends_with("annotation(example.com/version) is not allowed"),
        "{message}"
    );
}
