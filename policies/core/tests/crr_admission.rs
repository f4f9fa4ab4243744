//! ContainerRecreateRequest admission, case by case from
//! policies/fixtures/crr/admission.yaml (after OpenKruise's
//! crr_mutating_handler_test.go), plus the promise that no input panics.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::{Node, Pod};
use kruise_api::{ContainerRecreateRequest, Strictness, object_from_value};
use kruise_core::crr::admission::{
    Refusal, admit_create, admit_update, check_request, node_to_read,
};
use serde_json::{Value, json};

const FIXTURES: &str = include_str!("../../fixtures/crr/admission.yaml");

struct Case {
    name: String,
    upstream: Option<String>,
    update: bool,
    /// `{request, pod, node}` or `{old, new}` with the case's changes.
    document: Value,
    expected: Value,
}

fn file() -> Value {
    serde_yaml::from_str(FIXTURES).unwrap()
}

fn cases() -> Vec<Case> {
    let file = file();
    let create = json!({"request": file["request"], "pod": file["pod"], "node": file["node"]});
    let update = json!({"old": file["stored"], "new": file["stored"]});
    file["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| {
            let is_update = case["operation"] == "UPDATE";
            let mut document = if is_update { &update } else { &create }.clone();
            for (pointer, value) in case["set"].as_object().into_iter().flatten() {
                set(&mut document, pointer, value);
            }
            let expected = if case["refused"].is_null() {
                case["admitted"].clone()
            } else {
                json!({"refused": case["refused"]})
            };
            Case {
                name: case["name"].as_str().unwrap().to_owned(),
                upstream: case["upstream"].as_str().map(str::to_owned),
                update: is_update,
                document,
                expected,
            }
        })
        .collect()
}

/// Sets (null: removes) the value at `pointer`; the parent must exist. An
/// array index one past the end appends.
fn set(document: &mut Value, pointer: &str, value: &Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let key = key.replace("~1", "/").replace("~0", "~");
    match document
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("no {parent}"))
    {
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

fn read_crr(value: &Value) -> Result<ContainerRecreateRequest, String> {
    object_from_value(value.clone(), Strictness::Lenient).map_err(|e| e.to_string())
}

fn read<T: serde::de::DeserializeOwned>(value: &Value) -> Option<T> {
    (!value.is_null()).then(|| serde_json::from_value(value.clone()).unwrap())
}

/// The decision for a case: the admitted object (or `unchanged`), or the
/// refusal as the fixtures write it.
fn decide(case: &Case) -> Value {
    let refused = |r: Refusal| json!({"refused": {"code": r.code, "message": r.message}});
    let unparsed = |e: String| json!({"refused": {"code": 422, "error": e}});
    let document = &case.document;
    if case.update {
        let (new, old) = match (read_crr(&document["new"]), read_crr(&document["old"])) {
            (Ok(new), Ok(old)) => (new, old),
            (Err(e), _) | (_, Err(e)) => return unparsed(e),
        };
        return admit_update(&new, &old).map_or_else(refused, |()| json!("unchanged"));
    }
    let request = match read_crr(&document["request"]) {
        Ok(request) => request,
        Err(e) => return unparsed(e),
    };
    let pod: Option<Pod> = read(&document["pod"]);
    let node: Option<Node> = read(&document["node"]);
    match admit_create(&request, pod.as_ref(), node.as_ref()) {
        Ok(admitted) => serde_json::to_value(admitted).unwrap(),
        Err(refusal) => refused(refusal),
    }
}

fn check(case: &Case, decided: &Value, stored: &Value) {
    let name = &case.name;
    match &case.expected {
        Value::String(s) if s == "stored" => assert_eq!(decided, stored, "{name}"),
        Value::String(s) if s == "unchanged" => assert_eq!(decided, "unchanged", "{name}"),
        Value::Object(o) if o.contains_key("refused") => {
            let want = &o["refused"];
            let got = &decided["refused"];
            assert_eq!(got["code"], want["code"], "{name}: {decided}");
            if let Some(field) = want["field"].as_str() {
                let error = got["error"].as_str().unwrap_or_default();
                assert!(error.starts_with(&format!("{field}: ")), "{name}: {error}");
            } else {
                assert_eq!(got["message"], want["message"], "{name}");
            }
        }
        Value::Object(fields) => {
            for (pointer, want) in fields {
                let pointer = pointer.as_str();
                assert_eq!(
                    decided.pointer(pointer),
                    Some(want),
                    "{name}: {pointer} in {decided}"
                );
            }
        }
        other => panic!("{name}: cannot read the expectation {other}"),
    }
}

#[test]
fn every_fixture_case() {
    let stored = file()["stored"].clone();
    let cases = cases();
    assert!(cases.len() >= 45, "{} cases", cases.len());
    for case in &cases {
        check(case, &decide(case), &stored);
    }
}

/// Each of OpenKruise's webhook tests (but the feature gate's: our node
/// agent always runs) has a case.
#[test]
fn the_upstream_tests_have_cases() {
    let named: Vec<String> = cases().into_iter().filter_map(|c| c.upstream).collect();
    for test in [
        "TestCRRHandler_V1alpha1_Create_Valid",
        "TestCRRHandler_V1alpha1_Create_EmptyPodName",
        "TestCRRHandler_V1alpha1_Create_EmptyContainers",
        "TestCRRHandler_V1beta1_Create_DeadlineTooShort",
        "TestCRRHandler_V1alpha1_Update_SpecImmutable",
        "TestCRRHandler_V1alpha1_Update_ImmutableLabel",
        "TestCRRHandler_V1beta1_Create_PodNotFound",
        "TestInjectPodIntoContainerRecreateRequestV1alpha1_VirtualKubeletLabel",
    ] {
        assert!(named.iter().any(|n| n == test), "no case for {test}");
    }
}

/// Every create is refused with 400 and every update with 403, as
/// OpenKruise's webhook answers.
#[test]
fn refusal_codes() {
    for case in cases() {
        if let Some(code) = decide(&case)["refused"]["code"].as_u64() {
            let want = match (case.update, code) {
                (_, 422) => 422,
                (true, _) => 403,
                (false, _) => 400,
            };
            assert_eq!(code, want, "{}", case.name);
        }
    }
}

/// The steps a caller may run before reading the cluster agree with
/// [`admit_create`].
#[test]
fn the_early_steps_agree_with_admit_create() {
    for case in cases().iter().filter(|c| !c.update) {
        let Ok(request) = read_crr(&case.document["request"]) else {
            continue;
        };
        let pod: Option<Pod> = read(&case.document["pod"]);
        let node: Option<Node> = read(&case.document["node"]);
        let full = admit_create(&request, pod.as_ref(), node.as_ref());
        let early = check_request(&request).and_then(|()| match &pod {
            Some(pod) => node_to_read(&request, pod).map(|_| ()),
            None => Ok(()),
        });
        if let Err(refusal) = early {
            assert_eq!(full.unwrap_err(), refusal, "{}", case.name);
        }
    }
}

/// The node to read is the pod's.
#[test]
fn the_node_to_read_is_the_pods() {
    let file = file();
    let request = read_crr(&file["request"]).unwrap();
    let pod: Pod = read(&file["pod"]).unwrap();
    assert_eq!(node_to_read(&request, &pod), Ok("node-1"));
}

/// What admission adds is all it changes: the admitted object minus the
/// labels and the filled-in fields is the request.
#[test]
fn nothing_else_changes() {
    let file = file();
    let request = read_crr(&file["request"]).unwrap();
    let pod: Pod = read(&file["pod"]).unwrap();
    let node: Node = read(&file["node"]).unwrap();
    let mut admitted = admit_create(&request, Some(&pod), Some(&node)).unwrap();
    admitted.metadata.labels = None;
    for container in &mut admitted.spec.containers {
        container.pre_stop = None;
        container.ports.clear();
        container.status_context = None;
    }
    let strategy = admitted.spec.strategy.as_mut().unwrap();
    strategy.failure_policy = None;
    strategy.termination_grace_period_seconds = None;
    assert_eq!(admitted, request);
}

/// Removing any one value of any case's request, pod or node, or setting
/// it to an odd value, never panics: it is admitted, refused, or does not
/// parse.
#[test]
fn no_input_panics() {
    let mut runs = 0;
    for case in cases().iter().filter(|c| !c.update) {
        for pointer in pointers(&case.document, "") {
            for odd in [Value::Null, json!(""), json!(-1), json!([]), json!({})] {
                let mut document = case.document.clone();
                set(&mut document, &pointer, &odd);
                let (Ok(pod), Ok(node)) = (
                    serde_json::from_value::<Option<Pod>>(document["pod"].clone()),
                    serde_json::from_value::<Option<Node>>(document["node"].clone()),
                ) else {
                    continue;
                };
                if let Ok(request) = read_crr(&document["request"]) {
                    let _ = admit_create(&request, pod.as_ref(), node.as_ref());
                    let _ = admit_update(&request, &request);
                    runs += 1;
                }
            }
        }
    }
    assert!(runs > 1000, "only {runs} runs");
}

/// The pointer of every value below the top level.
fn pointers(value: &Value, at: &str) -> Vec<String> {
    let children: Vec<(String, &Value)> = match value {
        Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| {
                (
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    v,
                )
            })
            .collect(),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("{at}/{i}"), v))
            .collect(),
        _ => Vec::new(),
    };
    let mut all = Vec::new();
    for (pointer, child) in children {
        all.extend(pointers(child, &pointer));
        if !at.is_empty() {
            all.push(pointer);
        }
    }
    all
}
