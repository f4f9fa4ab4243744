//! SidecarSet `resourcesPolicy` (OpenKruise v1.9), through injection, case
//! by case after OpenKruise's `sidecarset_resources_test.go`
//! (TestApplyResourcesPolicy and TestGetTargetContainers, as the cases of
//! policies/fixtures/sidecarset/resources-policy.yaml;
//! TestEvaluateResourceExpression) and its validation after
//! `sidecarset_resources_policy_test.go` (TestValidateResourcesPolicy).

#![allow(clippy::unwrap_used, clippy::expect_used)]
// The case builders take `json!` values by value, as the cases read best.
#![allow(clippy::needless_pass_by_value)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use kruise_api::{KruiseObject, SidecarSet};
use kruise_core::sidecarset::validation::{ClusterView, validate};
use kruise_core::sidecarset::{InjectionContext, inject};
use serde_json::{Value, json};

fn sidecar_set(policy: Value, init: bool) -> SidecarSet {
    let mut sidecar =
        json!({"name": "sidecar1", "image": "sidecar:latest", "resourcesPolicy": policy});
    let (init_containers, containers) = if init {
        sidecar["restartPolicy"] = json!("Always");
        (json!([sidecar]), json!([]))
    } else {
        (json!([]), json!([sidecar]))
    };
    let mut set: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "sized", "annotations": {"kruise.io/sidecarset-hash": "h", "kruise.io/sidecarset-hash-without-image": "h"}},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "updateStrategy": {"type": "NotUpdate"},
            "initContainers": init_containers,
            "containers": containers,
        },
    }))
    .unwrap();
    set.set_defaults();
    set
}

fn app(name: &str, limits: Value, requests: Value) -> Value {
    json!({"name": name, "image": "app", "resources": {"limits": limits, "requests": requests}})
}

fn pod(init_containers: Value, containers: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"initContainers": init_containers, "containers": containers},
    }))
    .unwrap()
}

/// The injected sidecar1, or the injection error.
fn injected(pod: &Pod, set: &SidecarSet) -> Result<Container, String> {
    let sets = [set.clone()];
    let ctx = InjectionContext {
        sidecar_sets: &sets,
        namespace_labels: None,
        request_namespace: None,
        now: "2024-05-01T10:00:00Z",
        revisions: &[],
        random_draw: None,
    };
    let out = inject(pod, &ctx).map_err(|e| e.to_string())?;
    let spec = out.pod.spec.unwrap();
    let all = spec
        .init_containers
        .unwrap_or_default()
        .into_iter()
        .chain(spec.containers);
    Ok(all
        .into_iter()
        .find(|c| c.name == "sidecar1")
        .expect("sidecar1 injected"))
}

/// `resource=value` for each entry of the sidecar's limits and requests.
fn resources(container: &Container) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let resources = container.resources.clone().unwrap_or_default();
    let strings = |list: Option<
        BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        list.unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect()
    };
    (strings(resources.limits), strings(resources.requests))
}

fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn policy(mode: &str, regex: &str, limits: Value, requests: Value) -> Value {
    json!({
        "targetContainersMode": mode,
        "targetContainersNameRegex": regex,
        "resourcesExpr": {"limits": limits, "requests": requests},
    })
}

/// One case of policies/fixtures/sidecarset/resources-policy.yaml.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Case {
    name: String,
    policy: Value,
    #[serde(default)]
    native: bool,
    #[serde(default)]
    init_containers: Vec<Value>,
    containers: Vec<Value>,
    expected: Option<Value>,
    expected_error: Option<String>,
}

fn with_images(containers: Vec<Value>) -> Value {
    let with_image = |mut c: Value| {
        c["image"] = json!("app");
        c
    };
    Value::Array(containers.into_iter().map(with_image).collect())
}

#[test]
fn resources_policy_cases() {
    let cases: Vec<Case> = serde_yaml::from_str(include_str!(
        "../../fixtures/sidecarset/resources-policy.yaml"
    ))
    .unwrap();
    assert!(cases.len() >= 11);
    for case in cases {
        let set = sidecar_set(case.policy, case.native);
        let pod = pod(
            with_images(case.init_containers),
            with_images(case.containers),
        );
        match (injected(&pod, &set), case.expected, case.expected_error) {
            (Ok(sidecar), Some(expected), None) => {
                let resources = serde_json::to_value(sidecar.resources.unwrap()).unwrap();
                assert_eq!(resources, expected, "{}", case.name);
            }
            (Err(error), None, Some(expected)) => {
                assert!(error.contains(&expected), "{}: {error}", case.name);
            }
            (outcome, ..) => panic!("{}: {outcome:?}", case.name),
        }
    }
}

/// TestEvaluateResourceExpression, through a single target container
/// whose limit (or request) is the aggregated value.
#[test]
fn expressions_evaluate_as_openkruise_does() {
    let cases = [
        ("cpu*50%", "cpu", "200m", "100m"),
        ("memory*30%", "memory", "600Mi", "180Mi"),
        ("max(cpu*50%, 100m)", "cpu", "150m", "100m"),
        ("max(cpu*50%, 100m)", "cpu", "400m", "200m"),
        ("cpu + 50m", "cpu", "100m", "150m"),
        ("max(memory*20% + 100Mi, 200Mi)", "memory", "800Mi", "260Mi"),
        ("500m", "cpu", "100m", "500m"),
        ("1Gi", "memory", "500Mi", "1Gi"),
        ("1", "cpu", "2", "1"),
        // A plain number is cores unless the expression says "memory".
        ("1", "memory", "2Mi", "1"),
        ("memory/2 + 1", "memory", "2Mi", "1048577"),
        ("min(cpu, 2)", "cpu", "2500m", "2"),
        ("-(-cpu)", "cpu", "1", "1"),
        ("(cpu - 100m) * 2", "cpu", "300m", "400m"),
        ("cpu/3", "cpu", "1", "333m"),
        ("memory*50%", "memory", "1Gi", "512Mi"),
        ("memory*50%", "memory", "1G", "500M"),
        ("memory*33%", "memory", "1Gi", "354334801920m"),
    ];
    for (expression, resource, total, expected) in cases {
        let set = sidecar_set(
            policy("sum", ".*", json!({ resource: expression }), json!(null)),
            false,
        );
        let pod = pod(
            json!([]),
            json!([app("app1", json!({ resource: total }), json!({}))]),
        );
        let sidecar = injected(&pod, &set).unwrap();
        assert_eq!(
            resources(&sidecar).0,
            map(&[(resource, expected)]),
            "{expression} with {resource} {total}"
        );
    }
}

#[test]
fn expressions_that_fail_refuse_the_pod() {
    for (expression, message) in [
        ("cpu * invalid", "undefined variable: invalid"),
        ("cpu - 1", "calculation result is negative"),
        ("cpu * 2m", "multiplication of two quantities"),
        ("cpu / 0", "division by zero"),
        ("2 / cpu", "division by quantity"),
        (
            "max(cpu)",
            "max function requires exactly 2 arguments, got 1",
        ),
        ("avg(cpu, 1)", "unknown function: avg"),
        ("cpu *", "unexpected end of expression"),
        ("(cpu", "expected ')'"),
        ("2x * cpu", "\"2x\" is neither a number nor a quantity"),
        ("cpu $ 2", "unexpected '$'"),
    ] {
        let set = sidecar_set(
            policy("sum", ".*", json!({"cpu": expression}), json!(null)),
            false,
        );
        let pod = pod(
            json!([]),
            json!([app("app1", json!({"cpu": "200m"}), json!({}))]),
        );
        let error = injected(&pod, &set).unwrap_err();
        assert!(error.contains(message), "{expression}: {error}");
    }
}

/// TestValidateResourcesPolicy: each case names the one field refused.
#[test]
fn validation_refuses_what_openkruise_refuses() {
    let good = || {
        policy(
            "sum",
            ".*",
            json!({"cpu": "max(cpu*50%, 50m)"}),
            json!({"memory": "memory*20%"}),
        )
    };
    let field = "spec.containers[0].resourcesPolicy";
    let init_field = "spec.initContainers[0].resourcesPolicy";
    let with_resources = {
        let mut set = sidecar_set(good(), false);
        set.spec.containers[0].container.resources =
            serde_json::from_value(json!({"limits": {"cpu": "1"}})).unwrap();
        set
    };
    let plain_init = {
        let mut set = sidecar_set(good(), true);
        set.spec.init_containers[0].container.restart_policy = None;
        set
    };
    let cases = [
        ("valid", sidecar_set(good(), false), vec![]),
        ("valid native sidecar", sidecar_set(good(), true), vec![]),
        ("with resources", with_resources, vec![field.to_owned()]),
        (
            "plain init container",
            plain_init,
            vec![init_field.to_owned()],
        ),
        (
            "empty regex",
            sidecar_set(policy("sum", "", json!({"cpu": "cpu"}), json!(null)), false),
            vec![format!("{field}.targetContainersNameRegex")],
        ),
        (
            "invalid regex",
            sidecar_set(
                policy("sum", "[", json!({"cpu": "cpu"}), json!(null)),
                false,
            ),
            vec![format!("{field}.targetContainersNameRegex")],
        ),
        (
            "neither limits nor requests",
            sidecar_set(
                json!({"targetContainersMode": "max", "resourcesExpr": {}}),
                false,
            ),
            vec![format!("{field}.resourcesExpr")],
        ),
        (
            "bad cpu limit",
            sidecar_set(
                policy("sum", ".*", json!({"cpu": "cpu +"}), json!(null)),
                false,
            ),
            vec![format!("{field}.resourcesExpr.limits.cpu")],
        ),
        (
            "memory variable in a cpu expression",
            sidecar_set(
                policy("sum", ".*", json!(null), json!({"cpu": "memory*50%"})),
                false,
            ),
            vec![format!("{field}.resourcesExpr.requests.cpu")],
        ),
        (
            "negative memory request",
            sidecar_set(
                policy("sum", ".*", json!(null), json!({"memory": "memory - 2"})),
                false,
            ),
            vec![format!("{field}.resourcesExpr.requests.memory")],
        ),
    ];
    for (name, set, expected) in cases {
        let refused: Vec<String> = validate(&set, None, ClusterView::default())
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert_eq!(refused, expected, "{name}");
    }
}
