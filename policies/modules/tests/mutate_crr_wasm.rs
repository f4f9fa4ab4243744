//! The ContainerRecreateRequest module under wapc + wasmtime-provider, its
//! pod and node read through Kubewarden's `get_resource` host call: every
//! case of policies/fixtures/crr/admission.yaml, the same answers as the
//! native policy, and a cluster that cannot be read refused as an internal
//! error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guest;

use guest::{Guest, validation_request};
use k8s_openapi::api::core::v1::{Node, Pod};
use kruise_policy_modules::{MUTATE_CRR, fixtures};
use kruise_policy_support::cluster::{PodsAndNodes, found};
use serde_json::{Value, json};

/// The pod and node both sides read (null: not there). A get of anything
/// else, or of another name, is answered the way our host answers a
/// missing object.
#[derive(Clone)]
struct Stored {
    pod: Value,
    node: Value,
}

impl Stored {
    fn get(&self, kind: &str, namespace: Option<&str>, name: &str) -> Result<Value, String> {
        let object = match kind {
            "Pod" => &self.pod,
            "Node" => &self.node,
            other => return Err(format!("unexpected get of a {other}")),
        };
        let metadata = &object["metadata"];
        if metadata["name"] == name && metadata["namespace"].as_str() == namespace {
            Ok(object.clone())
        } else {
            Err(format!("{} {name:?} not found", kind.to_lowercase()))
        }
    }

    fn guest(&self) -> Guest {
        let cluster = self.clone();
        Guest::with_host_calls(
            MUTATE_CRR.wasm,
            move |binding, namespace, operation, payload| {
                if (binding, namespace, operation) != ("kubewarden", "kubernetes", "get_resource") {
                    return Err(format!("unexpected host call {namespace}/{operation}"));
                }
                let asked: Value = serde_json::from_slice(payload).unwrap();
                assert_eq!(asked["api_version"], "v1", "{asked}");
                let object = cluster.get(
                    asked["kind"].as_str().unwrap(),
                    asked["namespace"].as_str(),
                    asked["name"].as_str().unwrap(),
                )?;
                Ok(serde_json::to_vec(&object).unwrap())
            },
        )
    }
}

impl PodsAndNodes for Stored {
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, String> {
        found(self.get("Pod", Some(namespace), name), "pod")
    }
    fn node(&self, name: &str) -> Result<Option<Node>, String> {
        found(self.get("Node", None, name), "node")
    }
}

fn admission(operation: &str, object: &Value, old: Option<&Value>) -> Value {
    fixtures::kruise_request(
        "ContainerRecreateRequest",
        "containerrecreaterequests",
        operation,
        object,
        old,
    )
}

/// Runs the request through the module and the native policy; they must
/// agree. Returns the module's answer.
fn answer(cluster: &Stored, guest: &Guest, request: &Value) -> Value {
    let response = guest.call_json("validate", &validation_request(request, &json!({})));
    let typed = serde_json::from_value(request.clone()).unwrap();
    let native = kruise_mutate_crr::evaluate(&typed, cluster).into_response();
    assert_eq!(response, serde_json::to_value(native).unwrap());
    response
}

fn fixture() -> Value {
    let path = fixtures::dir().join("crr/admission.yaml");
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Sets (null: removes) the value at `pointer`, as the fixture describes;
/// an array index one past the end appends.
fn set(document: &mut Value, pointer: &str, value: &Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let key = key.replace("~1", "/").replace("~0", "~");
    match document.pointer_mut(parent).unwrap() {
        Value::Array(items) => {
            let index: usize = key.parse().unwrap();
            if index == items.len() {
                items.push(value.clone());
            } else if value.is_null() {
                items.remove(index);
            } else {
                items[index] = value.clone();
            }
        }
        Value::Object(fields) if value.is_null() => {
            fields.remove(&key);
        }
        Value::Object(fields) => {
            fields.insert(key, value.clone());
        }
        other => panic!("{parent} is {other}"),
    }
}

/// The module's answer to one case: the request, and the cluster it reads.
fn run_case(file: &Value, case: &Value) -> Value {
    let update = case["operation"] == "UPDATE";
    let mut document = if update {
        json!({"old": file["stored"], "new": file["stored"]})
    } else {
        json!({"request": file["request"], "pod": file["pod"], "node": file["node"]})
    };
    for (pointer, value) in case["set"].as_object().into_iter().flatten() {
        set(&mut document, pointer, value);
    }
    let request = if update {
        admission("UPDATE", &document["new"], Some(&document["old"]))
    } else {
        admission("CREATE", &document["request"], None)
    };
    // An update reads nothing: its cluster has no pod and no node.
    let cluster = Stored {
        pod: document["pod"].clone(),
        node: document["node"].clone(),
    };
    answer(&cluster, &cluster.guest(), &request)
}

fn check(case: &Value, response: &Value, stored: &Value) {
    let name = case["name"].as_str().unwrap();
    let mutated = &response["mutated_object"];
    let refused = &case["refused"];
    if !refused.is_null() {
        assert_eq!(response["accepted"], false, "{name}: {response}");
        assert_eq!(response["code"], refused["code"], "{name}: {response}");
        let message = response["message"].as_str().unwrap();
        match refused["field"].as_str() {
            Some(field) => assert!(
                message.contains(&format!(" is invalid: {field}: ")),
                "{name}: {message}"
            ),
            None => assert_eq!(message, refused["message"], "{name}"),
        }
        return;
    }
    assert_eq!(response["accepted"], true, "{name}: {response}");
    match &case["admitted"] {
        Value::String(s) if s == "stored" => assert_eq!(mutated, stored, "{name}"),
        Value::String(s) if s == "unchanged" => assert!(mutated.is_null(), "{name}: {response}"),
        Value::Object(fields) => {
            for (pointer, want) in fields {
                let pointer = pointer.as_str();
                assert_eq!(mutated.pointer(pointer), Some(want), "{name}: {pointer}");
            }
        }
        other => panic!("{name}: cannot read the expectation {other}"),
    }
}

#[test]
fn every_shared_case() {
    let file = fixture();
    let cases = file["cases"].as_array().unwrap();
    assert!(cases.len() >= 45, "{} cases", cases.len());
    for case in cases {
        check(case, &run_case(&file, case), &file["stored"]);
    }
}

/// A host error other than "not found" is not the pod's absence: the
/// request is refused as an internal error, naming what failed.
#[test]
fn a_cluster_that_cannot_be_read_is_an_internal_error() {
    let file = fixture();
    let request = admission("CREATE", &file["request"], None);
    let response = Guest::new(MUTATE_CRR.wasm)
        .call_json("validate", &validation_request(&request, &json!({})));
    assert_eq!(response["accepted"], false);
    assert_eq!(response["code"], 500);
    let message = response["message"].as_str().unwrap();
    assert!(
        message.starts_with("failed to find Pod web-0: ")
            && message.contains("no cluster in this test"),
        "{message}"
    );
}

/// The pod is read in the request's namespace.
#[test]
fn the_pod_is_read_in_the_requests_namespace() {
    let file = fixture();
    let mut elsewhere = file["request"].clone();
    elsewhere["metadata"]["namespace"] = json!("other");
    let cluster = Stored {
        pod: file["pod"].clone(),
        node: file["node"].clone(),
    };
    let response = answer(
        &cluster,
        &cluster.guest(),
        &admission("CREATE", &elsewhere, None),
    );
    assert_eq!(response["code"], 400);
    assert_eq!(
        response["message"],
        r#"spec.podName: no found Pod named "web-0" in namespace "other""#
    );
}

#[test]
fn other_kinds_and_operations_pass() {
    let file = fixture();
    let cluster = Stored {
        pod: Value::Null,
        node: Value::Null,
    };
    let guest = cluster.guest();
    let mut delete = admission("DELETE", &file["stored"], None);
    let response = answer(&cluster, &guest, &delete);
    assert_eq!(
        (&response["accepted"], &response["mutated_object"]),
        (&json!(true), &Value::Null)
    );
    delete["operation"] = json!("CREATE");
    delete["kind"]["kind"] = json!("CloneSet");
    assert_eq!(answer(&cluster, &guest, &delete)["accepted"], true);
}
