//! The single-round planner cases in `policies/fixtures/cloneset/planner-cases.yaml`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::jiff::Timestamp;
use kruise_api::CloneSet;
use kruise_core::cloneset::{FeatureGates, Plan, PlanInput, Revisions, plan};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct File {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    now: Timestamp,
    cloneset: CloneSet,
    revisions: RevisionsData,
    pods: Vec<Pod>,
    expect: Expect,
}

#[derive(Deserialize)]
struct RevisionsData {
    current: String,
    update: String,
    templates: BTreeMap<String, PodTemplateSpec>,
}

#[derive(Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Expect {
    stage: String,
    #[serde(default)]
    create: Vec<Creation>,
    #[serde(default)]
    delete: Vec<String>,
    #[serde(default)]
    mark_specified_delete: Vec<String>,
    #[serde(default)]
    lifecycle: Vec<Lifecycle>,
    #[serde(default)]
    in_place_update: Vec<InPlace>,
    #[serde(default)]
    requeue_after_seconds: Option<i64>,
}

#[derive(Debug, PartialEq, Eq, Deserialize, Serialize)]
struct Creation {
    revision: String,
    count: i32,
}

#[derive(Debug, PartialEq, Eq, Deserialize, Serialize)]
struct Lifecycle {
    pod: String,
    to: String,
}

#[derive(Debug, PartialEq, Eq, Deserialize, Serialize)]
struct InPlace {
    pod: String,
    revision: String,
    images: BTreeMap<String, String>,
}

fn summarize(plan: &Plan) -> Expect {
    Expect {
        stage: format!("{:?}", plan.stage),
        create: plan
            .create
            .iter()
            .map(|c| Creation {
                revision: c.revision.clone(),
                count: c.count,
            })
            .collect(),
        delete: plan.delete.clone(),
        mark_specified_delete: plan.mark_specified_delete.clone(),
        lifecycle: plan
            .lifecycle
            .iter()
            .map(|c| Lifecycle {
                pod: c.pod.clone(),
                to: c.to.as_str().to_owned(),
            })
            .collect(),
        in_place_update: plan
            .in_place_update
            .iter()
            .map(|u| InPlace {
                pod: u.pod.clone(),
                revision: u.spec.revision.clone(),
                images: u.spec.container_images.clone(),
            })
            .collect(),
        requeue_after_seconds: plan.requeue_after_seconds,
    }
}

#[test]
fn planner_fixture_cases() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/cloneset/planner-cases.yaml");
    let file: File = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(file.cases.len() >= 5);
    for case in file.cases {
        let revisions = Revisions {
            current: case.revisions.current,
            update: case.revisions.update,
            templates: case.revisions.templates,
        };
        let plan = plan(&PlanInput {
            cloneset: &case.cloneset,
            pods: &case.pods,
            revisions: &revisions,
            now: case.now,
            gates: FeatureGates::default(),
        });
        assert_eq!(summarize(&plan), case.expect, "{}", case.name);
    }
}
