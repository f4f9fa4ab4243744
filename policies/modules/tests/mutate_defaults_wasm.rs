//! The SidecarSet and CloneSet defaulting module under wapc +
//! wasmtime-provider, each answer also compared with the native policy's:
//! the user's examples come back with OpenKruise's stored defaults (and a
//! SidecarSet with its hashes), a stored object comes back unchanged, and
//! template defaults follow OpenKruise's create-or-changed rule.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guest;

use guest::{Guest, validation_request};
use kruise_api::{KruiseObject, SidecarSet};
use kruise_core::sidecarset::sidecarset_hashes;
use kruise_policy_modules::{MUTATE_DEFAULTS, fixtures};
use serde_json::{Value, json};

fn example(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/examples")
        .join(name);
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The module's answer, which must be the native policy's.
fn answer(guest: &Guest, request: &Value) -> Value {
    let response = guest.call_json("validate", &validation_request(request, &json!({})));
    let typed = serde_json::from_value(request.clone()).unwrap();
    let native = kruise_mutate_defaults::evaluate(&typed).into_response();
    assert_eq!(response, serde_json::to_value(native).unwrap());
    response
}

/// Accepted as it came.
fn unchanged(response: &Value) -> bool {
    response["accepted"] == true && response["mutated_object"].is_null()
}

fn create(guest: &Guest, kind: &str, resource: &str, object: &Value) -> Value {
    answer(
        guest,
        &fixtures::kruise_request(kind, resource, "CREATE", object, None),
    )
}

#[test]
fn a_sidecar_set_is_stored_defaulted_and_hashed() {
    let guest = Guest::new(MUTATE_DEFAULTS.wasm);
    let response = create(
        &guest,
        "SidecarSet",
        "sidecarsets",
        &example("sidecarset-scs-demo.yaml"),
    );
    assert_eq!(response["accepted"], true, "{response}");
    let stored = response["mutated_object"].clone();
    assert_eq!(stored["spec"]["updateStrategy"]["type"], "RollingUpdate");
    let sidecar = &stored["spec"]["containers"][0];
    assert_eq!(sidecar["podInjectPolicy"], "BeforeAppContainer");
    assert_eq!(sidecar["terminationMessagePath"], "/dev/termination-log");

    let parsed: SidecarSet = serde_json::from_value(stored.clone()).unwrap();
    let (hash, without_image) = sidecarset_hashes(&parsed.spec);
    let annotations = &stored["metadata"]["annotations"];
    assert_eq!(annotations["kruise.io/sidecarset-hash"], hash.as_str());
    assert_eq!(
        annotations["kruise.io/sidecarset-hash-without-image"],
        without_image.as_str()
    );

    // What is stored passes again unchanged.
    let again = create(&guest, "SidecarSet", "sidecarsets", &stored);
    assert!(unchanged(&again), "{again}");
}

#[test]
fn an_image_update_restamps_only_the_image_hash() {
    let guest = Guest::new(MUTATE_DEFAULTS.wasm);
    let created = create(
        &guest,
        "SidecarSet",
        "sidecarsets",
        &example("sidecarset-scs-demo.yaml"),
    );
    let stored = created["mutated_object"].clone();
    let mut edited = stored.clone();
    edited["spec"]["containers"][0]["image"] = json!("busybox:1.36");
    let request = fixtures::kruise_request(
        "SidecarSet",
        "sidecarsets",
        "UPDATE",
        &edited,
        Some(&stored),
    );
    let updated = answer(&guest, &request)["mutated_object"].clone();
    let hash = |object: &Value, key: &str| object["metadata"]["annotations"][key].clone();
    assert_ne!(
        hash(&updated, "kruise.io/sidecarset-hash"),
        hash(&stored, "kruise.io/sidecarset-hash")
    );
    assert_eq!(
        hash(&updated, "kruise.io/sidecarset-hash-without-image"),
        hash(&stored, "kruise.io/sidecarset-hash-without-image")
    );
    // The stored defaults stay: the pull policy defaulted from the old
    // untagged image is kept.
    assert_eq!(
        updated["spec"]["containers"][0]["imagePullPolicy"],
        "Always"
    );
}

#[test]
fn a_clone_set_gets_strategy_and_template_defaults() {
    let guest = Guest::new(MUTATE_DEFAULTS.wasm);
    let response = create(
        &guest,
        "CloneSet",
        "clonesets",
        &example("cloneset-surge-partition.yaml"),
    );
    let stored = response["mutated_object"].clone();
    let strategy = &stored["spec"]["updateStrategy"];
    assert_eq!(strategy["type"], "ReCreate");
    assert_eq!(stored["spec"]["revisionHistoryLimit"], 10);
    let pod = &stored["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Always");
    assert_eq!(pod["dnsPolicy"], "ClusterFirst");
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    assert_eq!(pod["containers"][0]["terminationMessagePolicy"], "File");

    let mut typed: kruise_api::CloneSet =
        serde_json::from_value(example("cloneset-surge-partition.yaml")).unwrap();
    typed.set_defaults();
    typed.set_template_defaults();
    assert_eq!(stored, serde_json::to_value(&typed).unwrap());
}

#[test]
fn template_defaults_wait_for_a_template_change_on_update() {
    let guest = Guest::new(MUTATE_DEFAULTS.wasm);
    let old = example("cloneset-surge-partition.yaml");
    let mut scaled = old.clone();
    scaled["spec"]["replicas"] = json!(7);
    let request = fixtures::kruise_request("CloneSet", "clonesets", "UPDATE", &scaled, Some(&old));
    let stored = answer(&guest, &request)["mutated_object"].clone();
    assert_eq!(stored["spec"]["replicas"], 7);
    assert_eq!(
        stored["spec"]["template"], old["spec"]["template"],
        "template untouched"
    );

    let mut new_image = old.clone();
    new_image["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
    let request =
        fixtures::kruise_request("CloneSet", "clonesets", "UPDATE", &new_image, Some(&old));
    let stored = answer(&guest, &request)["mutated_object"].clone();
    assert_eq!(
        stored["spec"]["template"]["spec"]["dnsPolicy"],
        "ClusterFirst"
    );
}

#[test]
fn unreadable_objects_are_refused_and_others_pass() {
    let guest = Guest::new(MUTATE_DEFAULTS.wasm);
    let mut typo = example("sidecarset-scs-demo.yaml");
    typo["spec"]["updateStrategy"] = json!({"type": "RollingUpdat"});
    let refused = create(&guest, "SidecarSet", "sidecarsets", &typo);
    assert_eq!(refused["code"], 422, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("spec.updateStrategy.type"),
        "{refused}"
    );

    let mut status = fixtures::kruise_request(
        "CloneSet",
        "clonesets",
        "UPDATE",
        &example("cloneset-surge-partition.yaml"),
        None,
    );
    status["subResource"] = json!("status");
    assert!(unchanged(&answer(&guest, &status)));
    let delete = fixtures::kruise_request("SidecarSet", "sidecarsets", "DELETE", &typo, None);
    assert!(unchanged(&answer(&guest, &delete)));
}
