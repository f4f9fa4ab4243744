//! The CloneSet validation module under wapc + wasmtime-provider: every
//! case of policies/fixtures/cloneset/validation.yaml refused naming its
//! field, with the same answers as the native policy.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guest;

use guest::{Guest, validation_request};
use kruise_policy_modules::{VALIDATE_CLONESET, fixtures};
use serde_json::{Value, json};

fn answer(guest: &Guest, request: &Value) -> Value {
    let response = guest.call_json("validate", &validation_request(request, &json!({})));
    let typed = serde_json::from_value(request.clone()).unwrap();
    let native = kruise_validate_cloneset::evaluate(&typed).into_response();
    assert_eq!(response, serde_json::to_value(native).unwrap());
    response
}

fn create(object: &Value) -> Value {
    fixtures::kruise_request("CloneSet", "clonesets", "CREATE", object, None)
}

#[test]
fn every_shared_case_is_refused_naming_its_field() {
    let guest = Guest::new(VALIDATE_CLONESET.wasm);
    let (base, cases) = fixtures::validation_cases("cloneset").unwrap();
    assert_eq!(answer(&guest, &create(&base))["accepted"], true);
    assert!(cases.len() >= 20);
    for case in cases {
        let response = answer(&guest, &create(&case.object));
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
    let guest = Guest::new(VALIDATE_CLONESET.wasm);
    let (base, _) = fixtures::validation_cases("cloneset").unwrap();
    let mut reselected = base.clone();
    reselected["spec"]["selector"]["matchLabels"]["tier"] = json!("web");
    reselected["spec"]["template"]["metadata"]["labels"]["tier"] = json!("web");
    let update =
        fixtures::kruise_request("CloneSet", "clonesets", "UPDATE", &reselected, Some(&base));
    let message = answer(&guest, &update)["message"].clone();
    assert!(
        message.as_str().unwrap().contains("spec: Forbidden"),
        "{message}"
    );
    // A stored CloneSet that no longer parses can be fixed.
    let mut stored = base.clone();
    stored["spec"]["updateStrategy"]["type"] = json!("InPlaceIfPosible");
    let fix = fixtures::kruise_request("CloneSet", "clonesets", "UPDATE", &base, Some(&stored));
    assert_eq!(answer(&guest, &fix)["accepted"], true);
    let delete = fixtures::kruise_request("CloneSet", "clonesets", "DELETE", &base, None);
    assert_eq!(answer(&guest, &delete)["accepted"], true);
}
