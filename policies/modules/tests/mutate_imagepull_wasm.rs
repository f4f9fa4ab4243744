//! The ImagePullJob and NodeImage module under wapc + wasmtime-provider:
//! every case of policies/fixtures/{imagepulljob,nodeimage}/validation.yaml
//! refused naming its field, with the native policy's answers; defaults
//! written back as a mutation.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guest;

use guest::{Guest, validation_request};
use kruise_policy_modules::{MUTATE_IMAGEPULL, fixtures};
use serde_json::{Value, json};

fn answer(guest: &Guest, request: &Value) -> Value {
    let response = guest.call_json("validate", &validation_request(request, &json!({})));
    let typed = serde_json::from_value(request.clone()).unwrap();
    let now = kruise_policy_support::clock::now();
    let native = kruise_mutate_imagepull::evaluate(&typed, &now).into_response();
    if response["accepted"] == false {
        // Refusals carry no time: the same answer exactly.
        assert_eq!(response, serde_json::to_value(native).unwrap());
    }
    response
}

fn replay(kind: &str, resource: &str, folder: &str) -> Value {
    let guest = Guest::new(MUTATE_IMAGEPULL.wasm);
    let (base, cases) = fixtures::validation_cases(folder).unwrap();
    assert!(cases.len() >= 6);
    for case in cases {
        let request = fixtures::kruise_request(kind, resource, "CREATE", &case.object, None);
        let response = answer(&guest, &request);
        assert_eq!(response["code"], 422, "{}: {response}", case.name);
        let message = response["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{kind} \""))
                && message.contains(&format!("{}:", case.refused)),
            "{}: {message}",
            case.name
        );
    }
    let request = fixtures::kruise_request(kind, resource, "CREATE", &base, None);
    let response = answer(&guest, &request);
    assert_eq!(response["accepted"], true, "{response}");
    response["mutated_object"].clone()
}

#[test]
fn job_cases_are_refused_and_the_defaults_written() {
    let defaulted = replay("ImagePullJob", "imagepulljobs", "imagepulljob");
    assert_eq!(defaulted["spec"]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(
        defaulted["metadata"]["finalizers"],
        json!(["apps.kruise.io/deletion-protection"])
    );
}

#[test]
fn node_image_cases_are_refused_and_tags_stamped() {
    let defaulted = replay("NodeImage", "nodeimages", "nodeimage");
    let tag = &defaulted["spec"]["images"]["ubuntu"]["tags"][0];
    let stamped = tag["createdAt"].as_str().unwrap();
    assert!(
        stamped.ends_with('Z') && stamped.starts_with("20"),
        "{stamped}"
    );
}

#[test]
fn pull_secrets_cannot_change_and_other_requests_pass() {
    let guest = Guest::new(MUTATE_IMAGEPULL.wasm);
    let (base, _) = fixtures::validation_cases("imagepulljob").unwrap();
    let mut edited = base.clone();
    edited["spec"]["pullSecrets"] = json!(["other"]);
    let update = fixtures::kruise_request(
        "ImagePullJob",
        "imagepulljobs",
        "UPDATE",
        &edited,
        Some(&base),
    );
    let message = answer(&guest, &update)["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap()
            .contains("spec.pullSecrets: Forbidden"),
        "{message}"
    );
    // An update that drops the finalizer (the controller letting a
    // deleted job go) keeps it dropped.
    let mut released = base.clone();
    released["metadata"]["finalizers"] = json!([]);
    let update = fixtures::kruise_request(
        "ImagePullJob",
        "imagepulljobs",
        "UPDATE",
        &released,
        Some(&base),
    );
    let response = answer(&guest, &update);
    assert_eq!(response["accepted"], true, "{response}");
    assert_eq!(
        response["mutated_object"]["metadata"]["finalizers"],
        json!([]),
        "{response}"
    );
    let delete = fixtures::kruise_request("ImagePullJob", "imagepulljobs", "DELETE", &base, None);
    assert_eq!(answer(&guest, &delete)["accepted"], true);
    let garbage = fixtures::kruise_request(
        "ImagePullJob",
        "imagepulljobs",
        "CREATE",
        &json!({"metadata": {"name": "x"}, "spec": {"image": 7}}),
        None,
    );
    let refused = answer(&guest, &garbage);
    assert_eq!(refused["code"], 422, "{refused}");
}
