//! ImagePullJob and NodeImage admission: the shared cases of
//! policies/fixtures/{imagepulljob,nodeimage}/validation.yaml, checked after
//! the defaulting the webhook applies first, and the update rule.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod validation_common;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kruise_api::{ImagePullJob, KruiseObject, NodeImage, Strictness, object_from_value};
use kruise_core::imagepull::validation::{validate_job, validate_node_image};
use kruise_core::validation::Violation;
use serde_json::Value;

const JOB_CASES: &str = include_str!("../../fixtures/imagepulljob/validation.yaml");
const NODE_IMAGE_CASES: &str = include_str!("../../fixtures/nodeimage/validation.yaml");

fn fields(violations: &[Violation]) -> Vec<&str> {
    violations.iter().map(|v| v.field.as_str()).collect()
}

fn job(value: Value) -> Result<ImagePullJob, String> {
    let mut job: ImagePullJob =
        object_from_value(value, Strictness::Lenient).map_err(|e| e.to_string())?;
    job.set_defaults();
    Ok(job)
}

fn node_image(value: Value) -> Result<NodeImage, String> {
    let mut image: NodeImage =
        object_from_value(value, Strictness::Lenient).map_err(|e| e.to_string())?;
    image.set_defaults();
    image.set_created_at(&Time("2026-01-01T00:00:00Z".parse().unwrap()));
    Ok(image)
}

/// Each case is refused at its field: by the parse (an unknown enum
/// value) or by the validation, alone.
fn check_cases(yaml: &str, validate: impl Fn(Value) -> Result<Vec<Violation>, String>) -> usize {
    let (base, cases) = validation_common::cases(yaml);
    assert_eq!(validate(base).unwrap(), []);
    let count = cases.len();
    for case in cases {
        match validate(case.object) {
            Err(message) => assert!(
                message.starts_with(&format!("{}:", case.refused)),
                "{}: {message}",
                case.name
            ),
            Ok(violations) => assert_eq!(
                fields(&violations),
                [case.refused.as_str()],
                "{}: {violations:?}",
                case.name
            ),
        }
    }
    count
}

#[test]
fn every_job_case_is_refused_at_its_field() {
    let count = check_cases(JOB_CASES, |value| {
        job(value).map(|j| validate_job(&j, None))
    });
    assert!(count >= 15);
}

#[test]
fn every_node_image_case_is_refused_at_its_field() {
    let count = check_cases(NODE_IMAGE_CASES, |value| {
        node_image(value).map(|n| validate_node_image(&n))
    });
    assert!(count >= 6);
}

#[test]
fn pull_secrets_are_immutable() {
    let (base, _) = validation_common::cases(JOB_CASES);
    let old = job(base.clone()).unwrap();
    let mut edited = old.clone();
    edited.spec.pull_secrets.push("another".to_owned());
    let violations = validate_job(&edited, Some(&old));
    assert_eq!(fields(&violations), ["spec.pullSecrets"]);
    assert!(violations[0].message.contains("immutable"));
    // Other edits are fine (they take effect).
    let mut parallel = old.clone();
    parallel.spec.parallelism =
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1));
    parallel.spec.image = "nginx:1.25".to_owned();
    assert_eq!(validate_job(&parallel, Some(&old)), []);
}

#[test]
fn the_users_examples_are_valid_and_a_node_image_needs_its_defaults() {
    let example: Value =
        serde_yaml::from_str(include_str!("../../fixtures/examples/imagepulljob.yaml")).unwrap();
    assert_eq!(validate_job(&job(example).unwrap(), None), []);
    let example: Value =
        serde_yaml::from_str(include_str!("../../fixtures/examples/nodeimage-node1.yaml")).unwrap();
    assert_eq!(
        validate_node_image(&node_image(example.clone()).unwrap()),
        []
    );
    // Without the webhook's createdAt the tag is refused.
    let bare: NodeImage = object_from_value(example, Strictness::Lenient).unwrap();
    assert_eq!(
        fields(&validate_node_image(&bare)),
        ["spec.images[ubuntu].tags[0].createdAt"]
    );
}

#[test]
fn at_most_256_images() {
    let mut image = NodeImage::default();
    for i in 0..257 {
        image.spec.images.insert(
            format!("img{i}"),
            kruise_api::nodeimage::ImageSpec::default(),
        );
    }
    assert_eq!(fields(&validate_node_image(&image)), ["spec.images"]);
}
