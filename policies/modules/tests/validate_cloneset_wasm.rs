//! The CloneSet validation module under wapc + wasmtime-provider: every
//! case of policies/fixtures/cloneset/validation.yaml refused naming its
//! field, with the same answers as the native policy; the pods an update
//! adds to `podsToDelete` read through Kubewarden's host calls.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guest;

use guest::{Guest, validation_request};
use k8s_openapi::api::core::v1::{Node, Pod};
use kruise_policy_modules::{VALIDATE_CLONESET, fixtures};
use kruise_policy_support::cluster::{PodsAndNodes, found};
use serde_json::{Value, json};

/// The pods of namespace `default` both sides read; any other get is
/// answered the way our host answers a missing object.
#[derive(Clone, Default)]
struct Pods(Vec<Value>);

impl Pods {
    fn get(&self, namespace: &str, name: &str) -> Result<Value, String> {
        self.0
            .iter()
            .find(|pod| pod["metadata"]["name"] == name && namespace == "default")
            .cloned()
            .ok_or_else(|| format!("pod {name:?} not found"))
    }

    fn guest(&self) -> Guest {
        let pods = self.clone();
        Guest::with_host_calls(VALIDATE_CLONESET.wasm, move |_, _, operation, payload| {
            let asked: Value = serde_json::from_slice(payload).unwrap();
            assert_eq!(
                (
                    operation,
                    asked["api_version"].as_str(),
                    asked["kind"].as_str()
                ),
                ("get_resource", Some("v1"), Some("Pod")),
                "{asked}"
            );
            let pod = pods.get(
                asked["namespace"].as_str().unwrap(),
                asked["name"].as_str().unwrap(),
            )?;
            Ok(serde_json::to_vec(&pod).unwrap())
        })
    }
}

impl PodsAndNodes for Pods {
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, String> {
        found(self.get(namespace, name), "pod")
    }
    fn node(&self, name: &str) -> Result<Option<Node>, String> {
        Err(format!("unexpected read of node {name}"))
    }
}

/// The module's answer, checked against the native policy's on the same
/// pods.
fn answer_with(pods: &Pods, request: &Value) -> Value {
    let response = pods
        .guest()
        .call_json("validate", &validation_request(request, &json!({})));
    let typed = serde_json::from_value(request.clone()).unwrap();
    let native = kruise_validate_cloneset::evaluate(&typed, pods).into_response();
    assert_eq!(response, serde_json::to_value(native).unwrap());
    response
}

/// The answer when the cluster has no pods.
fn answer(request: &Value) -> Value {
    answer_with(&Pods::default(), request)
}

fn create(object: &Value) -> Value {
    fixtures::kruise_request("CloneSet", "clonesets", "CREATE", object, None)
}

#[test]
fn every_shared_case_is_refused_naming_its_field() {
    let (base, cases) = fixtures::validation_cases("cloneset").unwrap();
    assert_eq!(answer(&create(&base))["accepted"], true);
    assert!(cases.len() >= 20);
    for case in cases {
        let response = answer(&create(&case.object));
        assert_eq!(response["code"], 422, "{}: {response}", case.name);
        let message = response["message"].as_str().unwrap();
        assert!(
            message.starts_with("CloneSet \"") && message.contains(&format!(": {}:", case.refused)),
            "{}: {message}",
            case.name
        );
    }
}

#[test]
fn updates_and_other_requests() {
    let (base, _) = fixtures::validation_cases("cloneset").unwrap();
    let mut reselected = base.clone();
    reselected["spec"]["selector"]["matchLabels"]["tier"] = json!("web");
    reselected["spec"]["template"]["metadata"]["labels"]["tier"] = json!("web");
    let update =
        fixtures::kruise_request("CloneSet", "clonesets", "UPDATE", &reselected, Some(&base));
    let message = answer(&update)["message"].clone();
    assert!(
        message.as_str().unwrap().contains("spec: Forbidden"),
        "{message}"
    );
    // A stored CloneSet that no longer parses can be fixed.
    let mut stored = base.clone();
    stored["spec"]["updateStrategy"]["type"] = json!("InPlaceIfPosible");
    let fix = fixtures::kruise_request("CloneSet", "clonesets", "UPDATE", &base, Some(&stored));
    assert_eq!(answer(&fix)["accepted"], true);
    let delete = fixtures::kruise_request("CloneSet", "clonesets", "DELETE", &base, None);
    assert_eq!(answer(&delete)["accepted"], true);
}

fn pod(name: &str, owner_uid: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "ownerReferences": [{
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "sample",
            "uid": owner_uid, "controller": true,
        }]},
        "spec": {"containers": [{"name": "main", "image": "nginx"}]},
    })
}

/// OpenKruise's rule: each name an update adds to `podsToDelete` is a live
/// pod this CloneSet controls; names already listed are not read again.
#[test]
fn pods_to_delete_are_read_from_the_cluster() {
    let (mut base, _) = fixtures::validation_cases("cloneset").unwrap();
    base["metadata"]["uid"] = json!("cs-uid");
    base["metadata"]["namespace"] = json!("default");
    let pods = Pods(vec![
        pod("sample-ours", "cs-uid"),
        pod("sample-other", "other"),
    ]);
    let listing = |names: &[&str]| {
        let mut object = base.clone();
        object["spec"]["scaleStrategy"] = json!({ "podsToDelete": names });
        object
    };
    let update = |new: &[&str], old: &[&str]| {
        fixtures::kruise_request(
            "CloneSet",
            "clonesets",
            "UPDATE",
            &listing(new),
            Some(&listing(old)),
        )
    };
    assert_eq!(
        answer_with(&pods, &update(&["sample-ours"], &[]))["accepted"],
        true
    );
    // A name listed before is not read again, even if that pod is gone.
    let kept = update(&["sample-gone", "sample-ours"], &["sample-gone"]);
    assert_eq!(answer_with(&pods, &kept)["accepted"], true);
    let refused = answer_with(&pods, &update(&["sample-gone", "sample-other"], &[]));
    assert_eq!(refused["code"], 422, "{refused}");
    assert_eq!(
        refused["message"],
        "CloneSet \"test-cloneset\" is invalid: \
         spec.scaleStrategy.podsToDelete: Invalid value: \"sample-gone\": \
         find pod sample-gone failed: pods \"sample-gone\" not found; \
         spec.scaleStrategy.podsToDelete: Invalid value: \"sample-other\": \
         find pod sample-other owner is not this CloneSet"
    );
}

/// A request the user made in v1beta1 reaches the policy converted to
/// v1alpha1, with `requestKind` naming v1beta1: it is judged by OpenKruise's
/// v1beta1 validator, which takes OnDelete and looks no pod up.
#[test]
fn a_v1beta1_request_is_judged_as_openkruise_judges_v1beta1() {
    let (base, _) = fixtures::validation_cases("cloneset").unwrap();
    let made_in = |mut request: Value, version: &str| {
        request["requestKind"] =
            json!({"group": "apps.kruise.io", "version": version, "kind": "CloneSet"});
        request
    };
    let mut on_delete = base.clone();
    on_delete["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    let refused = answer(&made_in(create(&on_delete), "v1alpha1"));
    assert_eq!(refused["code"], 422, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("spec.updateStrategy.type: Invalid value: \"OnDelete\""),
        "{refused}"
    );
    assert_eq!(
        answer(&made_in(create(&on_delete), "v1beta1"))["accepted"],
        true
    );

    let mut listing = base.clone();
    listing["spec"]["scaleStrategy"] = json!({"podsToDelete": ["sample-gone"]});
    let update = fixtures::kruise_request("CloneSet", "clonesets", "UPDATE", &listing, Some(&base));
    assert_eq!(answer(&made_in(update.clone(), "v1alpha1"))["code"], 422);
    assert_eq!(answer(&made_in(update, "v1beta1"))["accepted"], true);
}

/// A host error other than "not found" is not the pod's absence: an
/// internal error, not a verdict on the CloneSet.
#[test]
fn pods_that_cannot_be_read_are_an_internal_error() {
    let (base, _) = fixtures::validation_cases("cloneset").unwrap();
    let mut listing = base.clone();
    listing["spec"]["scaleStrategy"] = json!({"podsToDelete": ["sample-0"]});
    let request =
        fixtures::kruise_request("CloneSet", "clonesets", "UPDATE", &listing, Some(&base));
    let response = Guest::new(VALIDATE_CLONESET.wasm)
        .call_json("validate", &validation_request(&request, &json!({})));
    assert_eq!(response["code"], 500, "{response}");
    let message = response["message"].as_str().unwrap();
    assert!(
        message.starts_with("cannot check the CloneSet against the cluster: "),
        "{message}"
    );
}
