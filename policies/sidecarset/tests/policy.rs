//! The sidecarset policy natively: inline and cluster SidecarSets, settings
//! validation, and what it leaves alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kruise_policy_sidecarset::cluster::requests;
use kruise_policy_sidecarset::{Cluster, Environment, Instance, NoCluster, Settings, evaluate};
use kruise_policy_support::{Outcome, PodAdmission};
use serde_json::{Value, json};

fn example(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/examples")
        .join(name);
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A Pod CREATE request for `object`, as the JSON text a host sends.
fn pod_create(object: &Value) -> String {
    pod_create_json(object).to_string()
}

fn read(request: &str) -> PodAdmission<'_> {
    serde_json::from_str(request).unwrap()
}

fn pod_create_json(object: &Value) -> Value {
    json!({
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": "default", "operation": "CREATE", "object": object
    })
}

const NOW: &str = "2026-11-29T10:00:00Z";

fn run<C: Cluster>(settings: &Settings, pod: &Value, cluster: &C) -> Outcome {
    let environment = Environment {
        now: NOW,
        random_draw: Some(0.5),
        cluster,
    };
    evaluate(&read(&pod_create(pod)), settings, &environment).outcome
}

fn inline(sidecar_sets: Vec<Value>) -> Settings {
    Settings {
        sidecar_sets: Some(sidecar_sets),
        namespace_labels: None,
    }
}

fn container_names(object: &Value) -> Vec<&str> {
    object["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

#[test]
fn inline_sidecarsets_inject_the_users_example() {
    let settings = inline(vec![example("sidecarset-scs-demo.yaml")]);
    let Some(pod) = run(&settings, &example("pod-test-pod.yaml"), &NoCluster).mutated_object()
    else {
        panic!("expected the pod to be mutated");
    };
    assert_eq!(container_names(&pod), ["sidecar1", "app"]);
    let sidecar = &pod["spec"]["containers"][0];
    assert_eq!(
        sidecar["env"][0],
        json!({"name": "IS_INJECTED", "value": "true"})
    );
    assert_eq!(
        pod["metadata"]["annotations"]["kruise.io/sidecarset-injected-list"],
        "scs-demo"
    );
    let hashes: Value = serde_json::from_str(
        pod["metadata"]["annotations"]["kruise.io/sidecarset-hash"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(hashes["scs-demo"]["updateTimestamp"], NOW);
    assert_eq!(hashes["scs-demo"]["hash"].as_str().unwrap().len(), 64);
}

/// One instance serves many requests: what it keeps from the last
/// settings must follow every change of their text.
#[test]
fn an_instance_follows_each_change_of_the_inline_sidecarsets() {
    let environment = Environment {
        now: NOW,
        random_draw: Some(0.5),
        cluster: &NoCluster,
    };
    let request = pod_create_json(&example("pod-test-pod.yaml"));
    let demo = example("sidecarset-scs-demo.yaml");
    let mut renamed = demo.clone();
    renamed["spec"]["containers"][0]["name"] = json!("sidecar2");
    let mut typo = demo.clone();
    typo["spec"]["containerz"] = json!([]);
    let mut instance = Instance::default();
    let mut first_container = |sidecar_set: &Value| {
        let payload = json!({"request": request, "settings": {"sidecarSets": [sidecar_set]}});
        let answer = instance
            .respond(&serde_json::to_vec(&payload).unwrap(), &environment)
            .unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        match answer["mutated_object"]["spec"]["containers"][0]["name"].as_str() {
            Some(name) => Ok(name.to_owned()),
            None => Err(answer["message"].to_string()),
        }
    };
    assert_eq!(first_container(&demo).unwrap(), "sidecar1");
    assert_eq!(first_container(&renamed).unwrap(), "sidecar2");
    let refused = first_container(&typo).unwrap_err();
    assert!(refused.contains("containerz"), "{refused}");
    let refused_again = first_container(&typo).unwrap_err();
    assert_eq!(refused_again, refused);
    assert_eq!(first_container(&demo).unwrap(), "sidecar1");
}

#[test]
fn a_pod_no_sidecarset_selects_is_accepted_unchanged() {
    let settings = inline(vec![example("sidecarset-scs-demo.yaml")]);
    let mut pod = example("pod-test-pod.yaml");
    pod["metadata"]["labels"] = json!({"app": "other"});
    assert_eq!(run(&settings, &pod, &NoCluster), Outcome::Accept);
}

#[test]
fn requests_other_than_pod_create_are_accepted() {
    let settings = inline(vec![example("sidecarset-scs-demo.yaml")]);
    let text = pod_create(&example("pod-test-pod.yaml"));
    let mut request = read(&text);
    request.operation = "UPDATE".to_owned();
    let environment = Environment {
        now: NOW,
        random_draw: Some(0.5),
        cluster: &NoCluster,
    };
    assert_eq!(
        evaluate(&request, &settings, &environment),
        Outcome::Accept.into()
    );
}

#[test]
fn a_pod_without_containers_is_rejected_with_the_reason() {
    let settings = inline(vec![example("sidecarset-scs-demo.yaml")]);
    let mut pod = example("pod-test-pod.yaml");
    pod["spec"]["containers"] = json!([]);
    let Outcome::Reject { message, code } = run(&settings, &pod, &NoCluster) else {
        panic!("expected a rejection");
    };
    assert_eq!(code, 400);
    assert!(message.contains("has no containers"), "{message}");
}

/// A cluster served from memory, recording what was asked.
struct FixtureCluster {
    sidecar_sets: Vec<Value>,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    asked: std::cell::RefCell<Vec<String>>,
}

impl Cluster for FixtureCluster {
    fn sidecar_sets_answer(&self) -> Result<Vec<u8>, String> {
        self.asked.borrow_mut().push("sidecarsets".into());
        let list = json!({"apiVersion": "v1", "kind": "List", "items": self.sidecar_sets});
        serde_json::to_vec(&list).map_err(|e| e.to_string())
    }
    fn namespace_labels(&self, namespace: &str) -> Result<BTreeMap<String, String>, String> {
        self.asked
            .borrow_mut()
            .push(format!("namespace {namespace}"));
        self.namespaces
            .get(namespace)
            .cloned()
            .ok_or_else(|| format!("namespace {namespace} not found"))
    }
    fn sidecar_set_revisions(&self, sidecar_set: &str) -> Result<Vec<ControllerRevision>, String> {
        self.asked
            .borrow_mut()
            .push(format!("revisions {sidecar_set}"));
        Ok(Vec::new())
    }
}

#[test]
fn without_inline_sidecarsets_the_cluster_is_read() {
    let mut scoped = example("sidecarset-scs-demo.yaml");
    scoped["spec"]["namespaceSelector"] = json!({"matchLabels": {"team": "a"}});
    let cluster = FixtureCluster {
        sidecar_sets: vec![scoped],
        namespaces: BTreeMap::from([(
            "default".into(),
            BTreeMap::from([("team".into(), "a".into())]),
        )]),
        asked: std::cell::RefCell::default(),
    };
    let outcome = run(
        &Settings::default(),
        &example("pod-test-pod.yaml"),
        &cluster,
    );
    assert!(matches!(outcome, Outcome::MutatePod(_)), "{outcome:?}");
    assert_eq!(
        *cluster.asked.borrow(),
        ["sidecarsets", "namespace default"]
    );
}

/// The outage of issue #19: one SidecarSet with a typo stored in the
/// cluster used to deny every pod. It is left out, with a warning that
/// names it and the field; the good SidecarSets are still injected.
#[test]
fn an_unreadable_sidecarset_is_left_out_with_a_warning() {
    let mut typo = example("sidecarset-scs-demo.yaml");
    typo["metadata"]["name"] = json!("typo");
    typo["spec"]["updateStrategy"]["type"] = json!("RollingUpdat");
    typo["spec"]["containers"][0]["name"] = json!("typo-sidecar");
    let cluster = FixtureCluster {
        sidecar_sets: vec![typo, example("sidecarset-scs-demo.yaml")],
        namespaces: BTreeMap::new(),
        asked: std::cell::RefCell::default(),
    };
    let environment = Environment {
        now: NOW,
        random_draw: Some(0.5),
        cluster: &cluster,
    };
    let request = pod_create(&example("pod-test-pod.yaml"));
    let answer = evaluate(&read(&request), &Settings::default(), &environment);
    let Some(pod) = answer.outcome.mutated_object() else {
        panic!("expected the good SidecarSet injected: {answer:?}");
    };
    assert_eq!(container_names(&pod), ["sidecar1", "app"]);
    assert_eq!(answer.warnings.len(), 1, "{:?}", answer.warnings);
    let warning = answer.warnings[0].clone();
    assert!(
        warning.starts_with(
            "SidecarSet typo: spec.updateStrategy.type: unknown variant `RollingUpdat`"
        ),
        "{warning}"
    );
    assert!(
        warning.ends_with("not injected until it is fixed"),
        "{warning}"
    );
    // The response carries the warning to kubectl.
    let response = serde_json::to_value(answer.into_response()).unwrap();
    assert_eq!(response["warnings"], json!([warning]));
}

#[test]
fn a_cluster_that_cannot_answer_fails_the_request_with_500() {
    let outcome = run(
        &Settings::default(),
        &example("pod-test-pod.yaml"),
        &NoCluster,
    );
    let Outcome::Reject { message, code } = outcome else {
        panic!("expected a rejection")
    };
    assert_eq!(code, 500);
    assert!(
        message.contains("no sidecarSets in the settings"),
        "{message}"
    );
}

#[test]
fn host_requests_use_kubewardens_wire_shapes() {
    assert_eq!(requests::list_sidecar_sets()["kind"], "SidecarSet");
    assert_eq!(
        requests::list_sidecar_sets()["api_version"],
        "apps.kruise.io/v1alpha1"
    );
    assert_eq!(requests::get_namespace("ns")["name"], "ns");
    assert_eq!(
        requests::list_revisions("scs")["label_selector"],
        "kruise.io/sidecarset-name=scs"
    );
}

fn settings_verdict(settings: &Value) -> Value {
    let payload = serde_json::to_vec(settings).unwrap();
    serde_json::from_slice(&Instance::default().validate_settings(&payload).unwrap()).unwrap()
}

#[test]
fn settings_errors_name_the_sidecarset_and_the_field() {
    let mut bad = example("sidecarset-scs-demo.yaml");
    bad["spec"]["updateStrategy"] = json!({"type": "Sometimes"});
    let verdict = settings_verdict(&json!({"sidecarSets": [bad]}));
    assert_eq!(verdict["valid"], false);
    let message = verdict["message"].as_str().unwrap();
    assert!(
        message.starts_with("sidecarSets[0] (scs-demo): spec.updateStrategy.type"),
        "{message}"
    );

    let mut typo = example("sidecarset-scs-demo.yaml");
    typo["spec"]["selectr"] = json!({});
    let message = settings_verdict(&json!({"sidecarSets": [typo]}))["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap()
            .contains("unknown field spec.selectr"),
        "{message}"
    );

    let twice = settings_verdict(
        &json!({"sidecarSets": [example("sidecarset-scs-demo.yaml"), example("sidecarset-scs-demo.yaml")]}),
    );
    assert_eq!(twice["message"], "sidecarSets names scs-demo twice");

    let stray = settings_verdict(&json!({"namespaceLabels": {"default": {}}}));
    assert_eq!(stray["valid"], false);

    let unknown = settings_verdict(&json!({"sidecarSet": []}));
    assert!(
        unknown["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `sidecarSet`")
    );

    assert_eq!(settings_verdict(&json!({}))["valid"], true);
    assert_eq!(
        settings_verdict(&json!({"sidecarSets": [example("sidecarset-hotupgrade.yaml")]}))["valid"],
        true
    );
}
