//! The webhook's validation on the shared cases in
//! `policies/fixtures/resourcedistribution/validation.yaml`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kruise_api::{ResourceDistribution, Strictness, object_from_value};
use kruise_core::resourcedistribution::{Violation, validate_create, validate_update};
use serde_json::{Value, json};

const CASES: &str = include_str!("../../fixtures/resourcedistribution/validation.yaml");

fn cases() -> Vec<Value> {
    let file: Value = serde_yaml::from_str(CASES).unwrap();
    file["cases"].as_array().unwrap().clone()
}

fn distribution(value: &Value) -> ResourceDistribution {
    object_from_value(value.clone(), Strictness::Strict).unwrap()
}

fn violations(case: &Value) -> Vec<Violation> {
    let object = distribution(&case["object"]);
    match case["operation"].as_str().unwrap() {
        "CREATE" => validate_create(&object),
        "UPDATE" => validate_update(&object, &distribution(&case["oldObject"])),
        other => panic!("unknown operation {other}"),
    }
}

#[test]
fn every_shared_case_reports_exactly_its_violations() {
    let cases = cases();
    assert!(cases.len() >= 25, "only {} cases", cases.len());
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let found: Vec<String> = violations(case).iter().map(ToString::to_string).collect();
        let expected: Vec<&str> = case["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        assert_eq!(found.len(), expected.len(), "{name}: {found:#?}");
        for (found, expected) in found.iter().zip(&expected) {
            assert!(
                found.contains(expected),
                "{name}: {found:?} lacks {expected:?}"
            );
        }
    }
}

fn base() -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
        "metadata": {"name": "rd"},
        "spec": {
            "resource": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="}},
            "targets": {"allNamespaces": true}
        }
    })
}

fn check(mutate: impl FnOnce(&mut Value)) -> Vec<String> {
    let mut value = base();
    mutate(&mut value);
    validate_create(&distribution(&value))
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn violations_name_their_field() {
    let violation = &validate_create(&distribution(&json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
        "metadata": {"name": "rd"},
        "spec": {"resource": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}},
                 "targets": {"includedNamespaces": {"list": [{"name": ""}]}}}
    })))[0];
    assert_eq!(
        violation.field,
        "spec.targets.includedNamespaces.list[0].name"
    );
    assert!(violation.message.contains("not a valid namespace name"));
}

#[test]
fn the_base_is_valid() {
    assert_eq!(check(|_| {}), Vec::<String>::new());
}

#[test]
fn a_resource_that_is_not_an_object_is_refused() {
    let found = check(|v| v["spec"]["resource"] = json!("a string"));
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("spec.resource: must be an object"),
        "{found:?}"
    );
    let found = check(|v| v["spec"]["resource"] = Value::Null);
    assert_eq!(found, ["spec.resource: empty resource is not allowed"]);
}

#[test]
fn secret_types_need_their_keys() {
    let typed = |secret_type: &str, data: Value| {
        check(|v| {
            v["spec"]["resource"]["type"] = json!(secret_type);
            v["spec"]["resource"]["data"] = data;
        })
    };
    assert_eq!(typed("Opaque", json!({})), Vec::<String>::new());
    assert_eq!(typed("example.com/custom", json!({})), Vec::<String>::new());
    assert_eq!(
        typed("kubernetes.io/ssh-auth", json!({})),
        [
            "spec.resource.data[ssh-privatekey]: is required for a Secret of type kubernetes.io/ssh-auth"
        ]
    );
    assert_eq!(
        typed("kubernetes.io/basic-auth", json!({"username": "dQ=="})),
        Vec::<String>::new()
    );
    assert_eq!(typed("kubernetes.io/basic-auth", json!({})).len(), 1);
    assert_eq!(
        typed("kubernetes.io/dockercfg", json!({".dockercfg": "e30="})),
        Vec::<String>::new(),
        "{{}} is JSON"
    );
    assert_eq!(typed("kubernetes.io/tls", json!({})).len(), 2);
    let token = typed("kubernetes.io/service-account-token", json!({}));
    assert_eq!(token.len(), 1);
    assert!(
        token[0].contains("kubernetes.io/service-account.name"),
        "{token:?}"
    );
}

#[test]
fn payload_and_annotation_sizes_are_limited() {
    let big = "a".repeat(1024 * 1024 + 1);
    let found = check(|v| {
        v["spec"]["resource"] = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"big": big}});
    });
    assert_eq!(found.len(), 1);
    assert!(
        found[0].contains("more than the 1048576 allowed"),
        "{found:?}"
    );
    let long = "a".repeat(256 * 1024);
    let found = check(|v| v["spec"]["resource"]["metadata"]["annotations"] = json!({"note": long}));
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("spec.resource.metadata.annotations: may not be more"),
        "{found:?}"
    );
    let found =
        check(|v| v["spec"]["resource"]["metadata"]["annotations"] = json!({"bad key": "x"}));
    assert_eq!(found.len(), 1);
    assert!(found[0].contains("not a valid annotation key"), "{found:?}");
}

#[test]
fn wrong_types_inside_the_resource_are_refused() {
    let found = check(|v| v["spec"]["resource"]["data"] = json!(["k"]));
    assert_eq!(found, ["spec.resource.data: must be a map of strings"]);
    let found = check(|v| v["spec"]["resource"]["data"] = json!({"k": 1}));
    assert_eq!(found, ["spec.resource.data[k]: must be a string"]);
    let found = check(|v| v["spec"]["resource"]["type"] = json!(3));
    assert_eq!(found, ["spec.resource.type: must be a string"]);
    let found = check(|v| v["spec"]["resource"]["immutable"] = json!("yes"));
    assert_eq!(found, ["spec.resource.immutable: must be a boolean"]);
    let found = check(|v| v["spec"]["resource"]["metadata"]["labels"] = json!("x"));
    assert_eq!(
        found,
        ["spec.resource.metadata.labels: must be a map of strings"]
    );
}

#[test]
fn a_namespaced_distribution_or_a_missing_name_is_refused() {
    let found = check(|v| v["metadata"]["namespace"] = json!("default"));
    assert_eq!(
        found,
        ["metadata.namespace: not allowed: ResourceDistribution is cluster-scoped"]
    );
    let found = check(|v| v["metadata"] = json!({}));
    assert_eq!(found, ["metadata.name: name or generateName is required"]);
    assert_eq!(
        check(|v| v["metadata"] = json!({"generateName": "rd-"})),
        Vec::<String>::new()
    );
}

#[test]
fn an_empty_selector_and_duplicate_exclusions_are_fine() {
    let found = check(|v| {
        v["spec"]["targets"] = json!({
            "namespaceLabelSelector": {},
            "excludedNamespaces": {"list": [{"name": "a"}, {"name": "a"}]}
        });
    });
    assert_eq!(found, Vec::<String>::new());
    let found = check(|v| {
        v["spec"]["targets"] = json!({
            "includedNamespaces": {"list": [{"name": "a"}]},
            "excludedNamespaces": {"list": [{"name": "a"}, {"name": "a"}]}
        });
    });
    assert_eq!(
        found.len(),
        1,
        "one report per ambiguous namespace: {found:?}"
    );
}

#[test]
fn the_update_checks_compare_old_and_new() {
    let old = distribution(&base());
    assert_eq!(validate_update(&old, &old), []);
    let mut renamed = base();
    renamed["spec"]["resource"]["metadata"] = json!({});
    let found: Vec<String> = validate_update(&distribution(&renamed), &old)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        found,
        [
            "spec.resource.metadata.name: is required",
            "spec.resource.metadata.name: field is immutable: was \"s\", now unset"
        ]
    );
}
