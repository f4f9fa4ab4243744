//! Bad input is rejected with an error that names what is wrong and where.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kruise_api::{CloneSet, ParseError, SidecarSet, Strictness, parse_object};

const CLONESET: &str = "apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata: {name: demo}
spec:
  selector: {matchLabels: {app: demo}}
  template: {metadata: {labels: {app: demo}}, spec: {containers: [{name: main, image: nginx}]}}
";

fn field_error<T: std::fmt::Debug>(result: Result<T, ParseError>) -> (String, String) {
    match result {
        Err(ParseError::Field { path, message }) => (path, message),
        other => panic!("expected a field error, got {other:?}"),
    }
}

#[test]
fn a_wrong_enum_value_names_the_field_and_the_choices() {
    let text = format!("{CLONESET}  updateStrategy: {{type: Rolling}}\n");
    let (path, message) = field_error(parse_object::<CloneSet>(&text, Strictness::Lenient));
    assert_eq!(path, "spec.updateStrategy.type");
    assert!(
        message.contains("Rolling") && message.contains("InPlaceIfPossible"),
        "{message}"
    );
}

#[test]
fn a_string_where_an_int_belongs_names_the_field() {
    let text = format!("{CLONESET}  replicas: five\n");
    let (path, message) = field_error(parse_object::<CloneSet>(&text, Strictness::Lenient));
    assert_eq!(path, "spec.replicas");
    assert!(message.contains("five"), "{message}");
}

#[test]
fn a_missing_required_field_is_named() {
    let text =
        "kind: CloneSet\nmetadata: {name: demo}\nspec:\n  selector: {matchLabels: {app: demo}}\n";
    let (path, message) = field_error(parse_object::<CloneSet>(text, Strictness::Lenient));
    assert_eq!(path, "spec");
    assert!(message.contains("template"), "{message}");
}

#[test]
fn another_kind_is_refused_before_its_fields_are_read() {
    let text = CLONESET.replace("kind: CloneSet", "kind: SidecarSet");
    match parse_object::<CloneSet>(&text, Strictness::Lenient) {
        Err(ParseError::WrongType { expected, found }) => {
            assert_eq!(expected, "apps.kruise.io/v1alpha1 CloneSet");
            assert_eq!(found, "apps.kruise.io/v1alpha1 SidecarSet");
        }
        other => panic!("expected a wrong-type error, got {other:?}"),
    }
}

#[test]
fn another_api_version_is_refused() {
    let text = CLONESET.replace("apps.kruise.io/v1alpha1", "apps.kruise.io/v1beta1");
    let error = parse_object::<CloneSet>(&text, Strictness::Lenient).unwrap_err();
    assert!(error.to_string().contains("v1beta1"), "{error}");
}

#[test]
fn serde_json_reading_also_checks_the_kind() {
    let json =
        r#"{"apiVersion":"apps.kruise.io/v1alpha1","kind":"CloneSet","spec":{"selector":{}}}"#;
    let error = serde_json::from_str::<SidecarSet>(json).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("expected apps.kruise.io/v1alpha1 SidecarSet"),
        "{error}"
    );
}

#[test]
fn unknown_fields_are_listed_when_strict_and_ignored_when_lenient() {
    let text = format!("{CLONESET}  replica: 3\n  updateStrategy: {{maxSurg: 1}}\n");
    match parse_object::<CloneSet>(&text, Strictness::Strict) {
        Err(ParseError::UnknownFields(paths)) => {
            assert_eq!(paths, vec!["spec.replica", "spec.updateStrategy.maxSurg"]);
        }
        other => panic!("expected unknown fields, got {other:?}"),
    }
    assert!(parse_object::<CloneSet>(&text, Strictness::Lenient).is_ok());
}

#[test]
fn malformed_yaml_is_a_syntax_error() {
    let error = parse_object::<CloneSet>("kind: CloneSet\nspec: [unclosed", Strictness::Lenient)
        .unwrap_err();
    assert!(
        matches!(error, ParseError::Syntax { format: "YAML", .. }),
        "{error:?}"
    );
}

#[test]
fn a_missing_spec_is_an_empty_one_as_in_openkruises_crds() {
    let node_image: kruise_api::NodeImage = parse_object(
        "kind: NodeImage\nmetadata: {name: node-1}\n",
        Strictness::Strict,
    )
    .unwrap();
    assert_eq!(
        node_image.spec,
        kruise_api::nodeimage::NodeImageSpec::default()
    );
}
