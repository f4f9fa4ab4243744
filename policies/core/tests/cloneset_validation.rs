//! CloneSet validation after OpenKruise's `validation_test.go`
//! (TestValidate): the shared cases of
//! policies/fixtures/cloneset/validation.yaml, and the update rules.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod validation_common;

use kruise_api::{CloneSet, Strictness, object_from_value};
use kruise_core::cloneset::validation::{Violation, validate};
use serde_json::{Value, json};

const CASES: &str = include_str!("../../fixtures/cloneset/validation.yaml");

fn base() -> Value {
    validation_common::cases(CASES).0
}

fn parse(value: Value) -> CloneSet {
    object_from_value(value, Strictness::Lenient).unwrap()
}

fn fields(violations: &[Violation]) -> Vec<&str> {
    violations.iter().map(|v| v.field.as_str()).collect()
}

#[test]
fn the_base_and_the_users_example_are_valid() {
    assert_eq!(validate(&parse(base()), None), []);
    let example: Value = serde_yaml::from_str(include_str!(
        "../../fixtures/examples/cloneset-surge-partition.yaml"
    ))
    .unwrap();
    assert_eq!(validate(&parse(example), None), []);
}

/// A value our types refuse (an unknown enum value) is refused by the
/// parse, naming the field; everything else by [`validate`].
#[test]
fn validate_cloneset() {
    let (_, cases) = validation_common::cases(CASES);
    assert!(cases.len() >= 20);
    for case in cases {
        match object_from_value::<CloneSet>(case.object, Strictness::Lenient) {
            Err(error) => {
                let message = error.to_string();
                assert!(
                    message.starts_with(&format!("{}:", case.refused)),
                    "{}: {message}",
                    case.name
                );
            }
            Ok(parsed) => {
                let violations = validate(&parsed, None);
                assert_eq!(
                    fields(&violations),
                    [case.refused.as_str()],
                    "{}: {violations:?}",
                    case.name
                );
            }
        }
    }
}

#[test]
fn zero_replicas_need_no_budget_and_percentages_round_up() {
    let mut value = base();
    value["spec"]["replicas"] = json!(0);
    value["spec"]["updateStrategy"]["maxSurge"] = json!(0);
    assert_eq!(validate(&parse(value), None), []);
    // 1% of 5 rounds up to one pod: a budget.
    let mut value = base();
    value["spec"]["updateStrategy"]["maxSurge"] = json!(0);
    value["spec"]["updateStrategy"]["maxUnavailable"] = json!("1%");
    assert_eq!(validate(&parse(value), None), []);
}

#[test]
fn updates_change_only_the_mutable_fields() {
    let old = parse(base());
    let mut scaled = base();
    scaled["spec"]["replicas"] = json!(10);
    scaled["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.9.1");
    assert_eq!(validate(&parse(scaled), Some(&old)), []);

    let mut reselected = base();
    reselected["spec"]["selector"]["matchLabels"]["tier"] = json!("web");
    reselected["spec"]["template"]["metadata"]["labels"]["tier"] = json!("web");
    assert_eq!(fields(&validate(&parse(reselected), Some(&old))), ["spec"]);
}

#[test]
fn in_place_only_updates_change_only_images() {
    let mut in_place_only = base();
    in_place_only["spec"]["updateStrategy"] = json!({"type": "InPlaceOnly", "maxUnavailable": 1});
    let old = parse(in_place_only.clone());
    let mut image = in_place_only.clone();
    image["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.9.1");
    assert_eq!(validate(&parse(image), Some(&old)), []);
    let mut env = in_place_only;
    env["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
    assert_eq!(
        fields(&validate(&parse(env), Some(&old))),
        ["spec.template"]
    );
}
