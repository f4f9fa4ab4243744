//! The SidecarSet injection golden cases in policies/fixtures/injection
//! (format: that folder's README.md). Every case is also injected a second
//! time: injecting the expected pod again must give the expected pod.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::{KruiseObject, SidecarSet, Strictness, from_value};
use kruise_core::sidecarset::{HASH_ANNOTATION, InjectionContext, inject, stamp_hashes};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Case {
    #[allow(dead_code)] // documents the case for a reader
    description: String,
    now: String,
    namespace: Option<String>,
    namespace_labels: Option<BTreeMap<String, String>>,
    sidecar_sets: Vec<Value>,
    #[serde(default)]
    revisions: Vec<Value>,
    random_draw: Option<f64>,
    pod: Value,
    expected: Option<Value>,
    expected_error: Option<String>,
}

/// As the cluster stores it: defaulted, hashes stamped unless given.
fn stored_sidecar_set(value: Value) -> Result<SidecarSet, String> {
    let mut sidecar_set: SidecarSet =
        from_value(value, Strictness::Strict).map_err(|e| e.to_string())?;
    sidecar_set.set_defaults();
    let has_hash = sidecar_set
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(HASH_ANNOTATION));
    if !has_hash {
        stamp_hashes(&mut sidecar_set);
    }
    Ok(sidecar_set)
}

fn check(case: Case) -> Result<(), String> {
    let sidecar_sets = case
        .sidecar_sets
        .into_iter()
        .map(stored_sidecar_set)
        .collect::<Result<Vec<_>, _>>()?;
    let revisions = case
        .revisions
        .into_iter()
        .map(|v| from_value::<ControllerRevision>(v, Strictness::Strict).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let pod: Pod = from_value(case.pod, Strictness::Strict).map_err(|e| format!("pod: {e}"))?;
    let ctx = InjectionContext {
        sidecar_sets: &sidecar_sets,
        namespace_labels: case.namespace_labels.as_ref(),
        request_namespace: case.namespace.as_deref(),
        now: &case.now,
        revisions: &revisions,
        random_draw: case.random_draw,
    };
    match (case.expected, case.expected_error) {
        (Some(expected), None) => {
            let expected: Pod =
                from_value(expected, Strictness::Strict).map_err(|e| format!("expected: {e}"))?;
            let injected = inject(&pod, &ctx).map_err(|e| format!("injection failed: {e}"))?;
            if injected.pod != expected {
                return Err(format!(
                    "unexpected pod:\n{}",
                    diff(&expected, &injected.pod)
                ));
            }
            let again =
                inject(&expected, &ctx).map_err(|e| format!("second injection failed: {e}"))?;
            if again.pod != expected {
                return Err(format!(
                    "a second injection changed the pod:\n{}",
                    diff(&expected, &again.pod)
                ));
            }
            Ok(())
        }
        (None, Some(wanted)) => match inject(&pod, &ctx) {
            Ok(_) => Err(format!(
                "expected an error containing {wanted:?}, got a pod"
            )),
            Err(e) if e.to_string().contains(&wanted) => Ok(()),
            Err(e) => Err(format!("expected an error containing {wanted:?}, got: {e}")),
        },
        _ => Err("give exactly one of expected and expectedError".to_owned()),
    }
}

#[test]
fn golden_cases() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/injection");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    kruise_core::ordered::sort(&mut paths);
    let mut failures = Vec::new();
    for path in &paths {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        let outcome = serde_yaml::from_str::<Case>(&text)
            .map_err(|e| format!("unreadable case: {e}"))
            .and_then(check);
        if let Err(message) = outcome {
            eprintln!("FAILED {name}: {message}\n");
            failures.push(name);
        }
    }
    assert!(
        paths.len() >= 30,
        "only {} cases in {}",
        paths.len(),
        dir.display()
    );
    assert!(failures.is_empty(), "failing cases: {failures:?}");
}

/// A line diff of the two pods as YAML (`-` expected, `+` actual).
fn diff(expected: &Pod, actual: &Pod) -> String {
    let expected = serde_yaml::to_string(expected).unwrap();
    let actual = serde_yaml::to_string(actual).unwrap();
    let (a, b): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    // Longest common subsequence table, then walk it.
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            writeln!(out, "  {}", a[i]).unwrap();
            (i, j) = (i + 1, j + 1);
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            writeln!(out, "+ {}", b[j]).unwrap();
            j += 1;
        } else {
            writeln!(out, "- {}", a[i]).unwrap();
            i += 1;
        }
    }
    out
}
