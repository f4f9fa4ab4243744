//! Every policy module of the repo, on every golden case, under our runtime
//! and under the reference host (`wapc` + `wasmtime-provider`, what
//! policy-server runs): the raw answers must be the same bytes. Only what
//! the guest draws from the clock or from randomness is normalised.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{
    FnHost, HostFn, denying_host, golden_cases, our_call, pod_create, reference_call, runtime,
    validation_request,
};
use kruise_policy_modules::fixtures::blank_drawn_values;
use kruise_policy_modules::{ALL, BENCH_ADD_LABEL, PolicyModule, SIDECARSET};
use kruise_wasm_host::runtime::{DEFAULT_TIMEOUT, block_on};
use serde_json::{Value, json};

/// A case run: the request, its settings, and the cluster its host calls see.
struct Run {
    label: String,
    payload: Vec<u8>,
    host: HostFn,
    /// The pod's generateName, whose random suffix the guest draws.
    generate_name: Option<String>,
}

fn runs() -> Vec<Run> {
    let mut runs = Vec::new();
    for (name, case) in golden_cases("injection") {
        let mut request = pod_create(&case["pod"]);
        if let Some(namespace) = case["namespace"].as_str() {
            request["namespace"] = json!(namespace);
        }
        let generate_name = case["pod"]["metadata"]["generateName"]
            .as_str()
            .map(str::to_owned);
        if !case["revisions"].is_array() {
            runs.push(Run {
                label: format!("injection/{name} (inline)"),
                payload: validation_request(&request, &inline_settings(&case)),
                host: denying_host(),
                generate_name: generate_name.clone(),
            });
        }
        if !draws_a_coin(&case) {
            runs.push(Run {
                label: format!("injection/{name} (cluster)"),
                payload: validation_request(&request, &json!({})),
                host: case_cluster(case.clone()),
                generate_name,
            });
        }
    }
    for (name, case) in golden_cases("launch-priority") {
        runs.push(Run {
            label: format!("launch-priority/{name}"),
            payload: validation_request(&pod_create(&case["pod"]), &json!({})),
            host: denying_host(),
            generate_name: case["pod"]["metadata"]["generateName"]
                .as_str()
                .map(str::to_owned),
        });
    }
    runs
}

fn inline_settings(case: &Value) -> Value {
    let mut settings = json!({"sidecarSets": case["sidecarSets"]});
    if !case["namespaceLabels"].is_null() {
        let namespace = case["pod"]["metadata"]["namespace"]
            .as_str()
            .or(case["namespace"].as_str())
            .unwrap_or("default");
        settings["namespaceLabels"] = json!({ namespace: case["namespaceLabels"] });
    }
    settings
}

/// With revisions in the cluster, the `Partial` policy flips the guest's own
/// coin (WASI `random_get`): two hosts cannot be expected to agree.
fn draws_a_coin(case: &Value) -> bool {
    case["revisions"].is_array()
        && case["sidecarSets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["spec"]["injectionStrategy"]["revision"]["policy"] == "Partial")
}

/// The cluster a case describes, as Kubewarden's host capabilities answer.
fn case_cluster(case: Value) -> HostFn {
    Arc::new(move |binding, namespace, operation, payload| {
        if (binding, namespace) != ("kubewarden", "kubernetes") {
            return Err(format!("unknown binding: {binding}"));
        }
        let asked: Value = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
        let answer = match (operation, asked["kind"].as_str().unwrap_or_default()) {
            ("list_resources_all", "SidecarSet") => {
                json!({"apiVersion": "v1", "kind": "List", "items": case["sidecarSets"]})
            }
            ("get_resource", "Namespace") => json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": asked["name"], "labels": case["namespaceLabels"]}}),
            ("list_resources_by_namespace", "ControllerRevision") => {
                json!({"apiVersion": "v1", "kind": "List", "items": case["revisions"].as_array().cloned().unwrap_or_default()})
            }
            (operation, kind) => return Err(format!("no {kind} for {operation}")),
        };
        Ok(serde_json::to_vec(&answer).unwrap())
    })
}

fn normalised(answer: Result<Vec<u8>, String>, run: &Run) -> Result<String, String> {
    answer.map(|bytes| {
        let text = String::from_utf8(bytes).expect("the guest answers UTF-8");
        blank_drawn_values(&text, run.generate_name.as_deref())
    })
}

fn assert_same_answer(module: &PolicyModule, operation: &str, run: &Run) -> Result<String, String> {
    let ours = normalised(
        our_call(module.wasm, operation, &run.payload, run.host.clone()),
        run,
    );
    let reference = normalised(
        reference_call(module.wasm, operation, &run.payload, run.host.clone()),
        run,
    );
    assert_eq!(
        ours, reference,
        "{} on {}: {operation}",
        module.name, run.label
    );
    ours
}

/// Every module in the repo: the product's and the benchmark's.
fn every_module() -> impl Iterator<Item = &'static PolicyModule> {
    ALL.iter().chain([&BENCH_ADD_LABEL])
}

#[test]
fn validate_answers_the_same_bytes_on_every_golden_case() {
    let runs = runs();
    assert!(runs.len() > 120, "only {} runs", runs.len());
    let mut mutated = 0;
    let mut host_calls_answered = 0;
    for module in every_module() {
        for run in &runs {
            let answer = assert_same_answer(module, "validate", run).expect("validate answers");
            let response: Value = serde_json::from_str(&answer).unwrap();
            assert!(response["accepted"].is_boolean(), "{}: {answer}", run.label);
            if !response["mutated_object"].is_null() {
                mutated += 1;
            }
            if module.name == SIDECARSET.name
                && run.label.ends_with("(cluster)")
                && response["accepted"] == true
            {
                host_calls_answered += 1;
            }
        }
    }
    // The comparison is about real answers, not two identical errors.
    assert!(mutated > 60, "only {mutated} mutations");
    assert!(
        host_calls_answered > 30,
        "only {host_calls_answered} cluster reads"
    );
}

/// Our host evaluates the sidecarset module from a snapshot taken after
/// `validate_settings` with one case's inline SidecarSets. Every inline
/// case, with those settings (prepared in the snapshot) or with others (the
/// guest prepares them again), must answer what the reference host answers
/// from the module's own initial state.
#[test]
fn a_snapshot_after_validate_settings_answers_as_the_module_itself() {
    let runs: Vec<Run> = runs()
        .into_iter()
        .filter(|run| run.label.ends_with("(inline)"))
        .collect();
    assert!(runs.len() > 50, "only {} inline runs", runs.len());
    let settings_of = |run: &Run| {
        let payload: Value = serde_json::from_slice(&run.payload).unwrap();
        serde_json::to_vec(&payload["settings"]).unwrap()
    };
    let snapshot_settings = settings_of(&runs[0]);
    let limits = runtime().limits(Some(DEFAULT_TIMEOUT));
    let module = runtime()
        .load_snapshot(
            SIDECARSET.wasm,
            "validate_settings",
            &snapshot_settings,
            limits,
        )
        .unwrap();
    let mut with_snapshot_settings = 0;
    for run in &runs {
        let host = Arc::new(FnHost(run.host.clone()));
        let ours = block_on(module.call("validate", &run.payload, limits, host));
        let ours = normalised(ours.map_err(|e| e.to_string()), run);
        let reference = normalised(
            reference_call(SIDECARSET.wasm, "validate", &run.payload, run.host.clone()),
            run,
        );
        assert_eq!(ours, reference, "{}", run.label);
        if settings_of(run) == snapshot_settings {
            with_snapshot_settings += 1;
        }
    }
    assert!(with_snapshot_settings >= 1);
    assert!(with_snapshot_settings < runs.len());
}

#[test]
fn the_bench_module_labels_every_golden_pod_alike() {
    let settings = json!({"key": "bench.kruise.io/seen", "value": "yes"});
    let mut labelled = 0;
    for run in runs() {
        let mut payload: Value = serde_json::from_slice(&run.payload).unwrap();
        payload["settings"] = settings.clone();
        let run = Run {
            payload: serde_json::to_vec(&payload).unwrap(),
            ..run
        };
        let answer = assert_same_answer(&BENCH_ADD_LABEL, "validate", &run).unwrap();
        let response: Value = serde_json::from_str(&answer).unwrap();
        let labels = &response["mutated_object"]["metadata"]["labels"];
        assert_eq!(
            labels["bench.kruise.io/seen"], "yes",
            "{}: {answer}",
            run.label
        );
        labelled += 1;
    }
    assert!(labelled > 120, "only {labelled} pods");
}

#[test]
fn validate_settings_and_protocol_version_answer_the_same() {
    let host = denying_host();
    let injection = golden_cases("injection");
    let mut settings: Vec<Value> = vec![
        json!({}),
        json!({"priority": 1}),
        json!({"sidecarSets": "not a list"}),
        json!({"sidecarSets": [{"kind": "SidecarSet", "metadata": {"name": "x"}, "spec": {"containers": "no"}}]}),
    ];
    settings.extend(injection.iter().map(|(_, case)| inline_settings(case)));
    for module in every_module() {
        for settings in &settings {
            let run = Run {
                label: settings.to_string(),
                payload: serde_json::to_vec(settings).unwrap(),
                host: host.clone(),
                generate_name: None,
            };
            let answer = assert_same_answer(module, "validate_settings", &run);
            let verdict: Value = serde_json::from_str(&answer.unwrap()).unwrap();
            assert!(verdict["valid"].is_boolean());
        }
        let empty = Run {
            label: "empty".to_owned(),
            payload: Vec::new(),
            host: host.clone(),
            generate_name: None,
        };
        assert_eq!(
            assert_same_answer(module, "protocol_version", &empty),
            Ok("\"v1\"".to_owned())
        );
    }
}

#[test]
fn guest_errors_read_the_same() {
    let host = denying_host();
    for module in every_module() {
        let unknown = Run {
            label: "unknown op".to_owned(),
            payload: b"{}".to_vec(),
            host: host.clone(),
            generate_name: None,
        };
        let error = assert_same_answer(module, "no_such_operation", &unknown).unwrap_err();
        assert_eq!(
            error,
            "Guest call failure: No handler registered for function no_such_operation"
        );
    }
}
