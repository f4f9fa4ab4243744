//! Image pre-download for an in-place rollout: which ImagePullJobs a
//! rolling CloneSet wants (after OpenKruise's
//! `cloneset_predownload.go`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kruise_api::CloneSet;
use kruise_core::cloneset::Revisions;
use kruise_core::cloneset::predownload::{
    CREATED_LABEL, IGNORED_LABEL, PARALLELISM_ANNOTATION, Predownload, plan,
};
use serde_json::json;

fn cloneset(annotations: &serde_json::Value, strategy: &str, replicas: i32) -> CloneSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": "default", "uid": "cs-uid", "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}},
            "updateStrategy": {"type": strategy},
        },
    }))
    .unwrap()
}

fn template(images: &[(&str, &str)]) -> PodTemplateSpec {
    let containers: Vec<_> = images
        .iter()
        .map(|(name, image)| json!({"name": name, "image": image}))
        .collect();
    serde_json::from_value(json!({"spec": {"containers": containers}})).unwrap()
}

fn rolling() -> Revisions {
    Revisions {
        current: "web-old".to_owned(),
        update: "web-new".to_owned(),
        templates: [
            (
                "web-old".to_owned(),
                template(&[("app", "nginx:1.24"), ("log", "fluentd:1")]),
            ),
            (
                "web-new".to_owned(),
                template(&[
                    ("app", "nginx:1.25"),
                    ("log", "fluentd:1"),
                    ("extra", "busybox:1"),
                ]),
            ),
        ]
        .into(),
    }
}

#[test]
fn one_job_per_changed_image_for_the_pods_not_yet_updated() {
    let cs = cloneset(
        &json!({PARALLELISM_ANNOTATION: "2"}),
        "InPlaceIfPossible",
        5,
    );
    let Predownload::Jobs(jobs) = plan(&cs, &rolling(), &[], 0) else {
        panic!("jobs expected");
    };
    let names: Vec<_> = jobs
        .iter()
        .map(|j| j.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["web-new-app", "web-new-extra"]);
    let app = &jobs[0];
    assert_eq!(app.spec.image, "nginx:1.25");
    assert_eq!(app.metadata.namespace.as_deref(), Some("default"));
    let owner = &app.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("CloneSet", "cs-uid", Some(true))
    );
    let selector = app.spec.pod_selector.as_ref().unwrap();
    assert_eq!(
        selector.match_labels,
        Some([("app".to_owned(), "web".to_owned())].into())
    );
    let not_updated = &selector.match_expressions.as_ref().unwrap()[0];
    assert_eq!(
        (
            not_updated.key.as_str(),
            not_updated.operator.as_str(),
            not_updated.values.clone()
        ),
        (
            "controller-revision-hash",
            "NotIn",
            Some(vec!["web-new".to_owned()])
        )
    );
    assert_eq!(
        app.spec.parallelism,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2))
    );
    let policy = app.spec.pull_policy.as_ref().unwrap();
    assert_eq!(
        (policy.timeout_seconds, policy.backoff_limit),
        (Some(300), Some(1))
    );
    assert_eq!(
        app.spec.completion_policy.ttl_seconds_after_finished,
        Some(600)
    );
    // The validation the webhook applies accepts it.
    assert_eq!(
        kruise_core::imagepull::validation::validate_job(app, None),
        []
    );
}

#[test]
fn a_timeout_annotation_is_used() {
    let cs = cloneset(
        &json!({PARALLELISM_ANNOTATION: "1", "apps.kruise.io/image-predownload-timeout-seconds": "60"}),
        "InPlaceOnly",
        4,
    );
    let Predownload::Jobs(jobs) = plan(&cs, &rolling(), &[], 0) else {
        panic!()
    };
    assert_eq!(
        jobs[0].spec.pull_policy.as_ref().unwrap().timeout_seconds,
        Some(60)
    );
}

#[test]
fn off_unless_asked_and_worth_it_done_when_converged() {
    let asked = json!({PARALLELISM_ANNOTATION: "2"});
    assert_eq!(
        plan(
            &cloneset(&json!({}), "InPlaceIfPossible", 5),
            &rolling(),
            &[],
            0
        ),
        Predownload::Off
    );
    assert_eq!(
        plan(
            &cloneset(
                &json!({PARALLELISM_ANNOTATION: "0"}),
                "InPlaceIfPossible",
                5
            ),
            &rolling(),
            &[],
            0
        ),
        Predownload::Off
    );
    assert_eq!(
        plan(
            &cloneset(
                &json!({PARALLELISM_ANNOTATION: "x"}),
                "InPlaceIfPossible",
                5
            ),
            &rolling(),
            &[],
            0
        ),
        Predownload::Off
    );
    assert_eq!(
        plan(&cloneset(&asked, "ReCreate", 5), &rolling(), &[], 0),
        Predownload::Off
    );
    assert_eq!(
        plan(
            &cloneset(&asked, "InPlaceIfPossible", 3),
            &rolling(),
            &[],
            0
        ),
        Predownload::Off
    );
    let waiting = cloneset(
        &json!({PARALLELISM_ANNOTATION: "2", "apps.kruise.io/image-predownload-min-updated-ready-pods": "2"}),
        "InPlaceIfPossible",
        5,
    );
    assert_eq!(plan(&waiting, &rolling(), &[], 1), Predownload::Off);
    assert!(matches!(
        plan(&waiting, &rolling(), &[], 2),
        Predownload::Jobs(_)
    ));
    let mut converged = rolling();
    converged.current = converged.update.clone();
    assert_eq!(
        plan(
            &cloneset(&asked, "InPlaceIfPossible", 5),
            &converged,
            &[],
            0
        ),
        Predownload::Off,
        "no revision made jobs"
    );
}

/// The revisions' labels say what was done: jobs made once (by us or
/// OpenKruise), none after OpenKruise skipped the update revision, and,
/// once no rollout is under way, the jobs of any revision marked deleted
/// (a rollout given up for a rollback included).
#[test]
fn the_revisions_labels_make_jobs_once_and_delete_them_once() {
    let cs = cloneset(
        &json!({PARALLELISM_ANNOTATION: "2"}),
        "InPlaceIfPossible",
        5,
    );
    let stored = |name: &str, label: &str| -> ControllerRevision {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {label: "true"}},
                                      "revision": 1}),
        )
        .unwrap()
    };
    let new = |label| [stored("web-new", label)];
    assert!(matches!(
        plan(&cs, &rolling(), &new("app"), 0),
        Predownload::Jobs(_)
    ));
    assert!(matches!(
        plan(&cs, &rolling(), &[stored("web-old", CREATED_LABEL)], 0),
        Predownload::Jobs(_)
    ));
    assert_eq!(
        plan(&cs, &rolling(), &new(CREATED_LABEL), 0),
        Predownload::Off
    );
    assert_eq!(
        plan(&cs, &rolling(), &new(IGNORED_LABEL), 0),
        Predownload::Off
    );
    let mut converged = rolling();
    converged.current = converged.update.clone();
    assert_eq!(
        plan(&cs, &converged, &new(CREATED_LABEL), 0),
        Predownload::Done
    );
    assert_eq!(
        plan(&cs, &converged, &new(IGNORED_LABEL), 0),
        Predownload::Off
    );
    let mut rolled_back = rolling();
    rolled_back.update = rolled_back.current.clone();
    assert_eq!(
        plan(
            &cs,
            &rolled_back,
            &[stored("web-old", "app"), stored("web-new", CREATED_LABEL)],
            0
        ),
        Predownload::Done,
        "the given-up rollout's jobs"
    );
}
