//! The launch-priority golden cases in policies/fixtures/launch-priority.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use kruise_core::launch_priority;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Case {
    #[allow(dead_code)] // documents the case for a reader
    description: String,
    pod: Pod,
    name_suffix: String,
    expected: Option<Pod>,
    #[serde(default)]
    unchanged: bool,
    expected_error: Option<String>,
}

#[test]
fn golden_cases() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/launch-priority");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let case: Case = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let result = launch_priority::apply(&case.pod, &case.name_suffix);
        match (&case.expected, case.unchanged, &case.expected_error) {
            (Some(expected), false, None) => {
                let mutated = result
                    .unwrap_or_else(|e| panic!("{name}: {e}"))
                    .unwrap_or_else(|| panic!("{name}: expected a mutation"));
                assert_eq!(&mutated, expected, "{name}");
                let again = launch_priority::apply(&mutated, &case.name_suffix).unwrap();
                assert_eq!(again, None, "{name}: a second pass changed the pod");
            }
            (None, true, None) => assert_eq!(result, Ok(None), "{name}"),
            (None, false, Some(error)) => {
                let message = result.expect_err(&name).to_string();
                assert!(message.contains(error.as_str()), "{name}: {message}");
            }
            _ => panic!("{name}: give exactly one of expected, unchanged, expectedError"),
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} cases in {}", dir.display());
}
