//! Spec 03 §10 replayed step by step on the in-memory simulator, from the
//! shared fixtures in `policies/fixtures/cloneset/` (the seed scenario and
//! the in-place + surge example).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cloneset_common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use cloneset_common::{Columns, Sim, ready_pod};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kruise_api::CloneSet;
use kruise_core::cloneset::{Diffs, Revisions, compute_status};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Scenario {
    name: String,
    cloneset: CloneSet,
    revisions: RevisionsData,
    initial_pods: InitialPods,
    steps: Vec<RolloutStep>,
}

#[derive(Deserialize)]
struct RevisionsData {
    current: String,
    update: String,
    templates: BTreeMap<String, PodTemplateSpec>,
}

#[derive(Deserialize)]
struct InitialPods {
    count: usize,
    revision: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RolloutStep {
    step: String,
    #[serde(rename = "do")]
    action: Action,
    expect: Columns,
    #[serde(default)]
    steady: bool,
    #[serde(default)]
    current_revision: Option<String>,
    #[serde(default)]
    in_place: Option<usize>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Action {
    Named(String),
    Partition { partition: serde_json::Value },
}

fn fixture(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/cloneset")
        .join(name);
    serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Runs a scenario; returns the simulator and the names of pods that were
/// updated in place (for identity checks).
fn replay(scenario: &Scenario) -> (Sim, Vec<String>) {
    let revisions = Revisions {
        current: scenario.revisions.current.clone(),
        update: scenario.revisions.update.clone(),
        templates: scenario.revisions.templates.clone(),
    };
    let pods = (0..scenario.initial_pods.count)
        .map(|i| ready_pod(&format!("demo-old{i}"), &scenario.initial_pods.revision))
        .collect();
    let mut sim = Sim::new(scenario.cloneset.clone(), pods, revisions);
    let mut in_place = Vec::new();
    for (index, step) in scenario.steps.iter().enumerate() {
        let label = format!("{} step #{index} {}", scenario.name, step.step);
        match &step.action {
            Action::Named(name) if name == "observe" => {}
            Action::Named(name) if name == "ready" => sim.make_ready(None),
            Action::Named(name) if name == "reconcile" => {
                let plan = sim.reconcile();
                if step.steady {
                    // "All diffs zero": nothing to write and nothing wanted.
                    assert!(!plan.modifies(), "{label}: {plan:#?}");
                    assert_eq!(plan.scale_diffs, Diffs::default(), "{label}");
                    assert!(
                        plan.update_diffs.is_none_or(|d| d.update_num == 0),
                        "{label}"
                    );
                }
                if let Some(count) = step.in_place {
                    assert_eq!(plan.in_place_update.len(), count, "{label}");
                    in_place.extend(plan.in_place_update.iter().map(|u| u.pod.clone()));
                }
            }
            Action::Partition { partition } => {
                let text = match partition {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                sim.set_partition(&text);
            }
            Action::Named(other) => panic!("{label}: unknown step kind {other}"),
        }
        assert_eq!(sim.columns(), step.expect, "{label}");
        if let Some(current) = &step.current_revision {
            let status = compute_status(&sim.cloneset, &sim.pods, &sim.revisions, None, sim.now);
            assert_eq!(status.current_revision.as_ref(), Some(current), "{label}");
        }
    }
    (sim, in_place)
}

#[test]
fn seed_scenario_recreate_partition_3_then_0() {
    let (sim, _) = replay(&fixture("seed-rollout.yaml"));
    // Every surviving pod is a replacement created on revision B.
    assert!(
        sim.pods
            .iter()
            .all(|p| p.metadata.name.as_deref().unwrap().starts_with("demo-new"))
    );
}

#[test]
fn in_place_with_surge_keeps_pod_identity() {
    let scenario = fixture("in-place-surge.yaml");
    let (sim, in_place) = replay(&scenario);
    assert_eq!(in_place.len(), 1);
    // The in-place updated pod is the same object (name, node) on revision B.
    let pod = sim
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(in_place[0].as_str()))
        .unwrap();
    assert!(in_place[0].starts_with("demo-old"));
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-1")
    );
    assert_eq!(
        pod.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some("nginx:1.1")
    );
    assert!(kruise_core::cloneset::is_at_revision(pod, "demo-bbbbb"));
}
