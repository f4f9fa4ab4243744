//! OpenKruise v1.9.0's own pod webhook on 150 recorded cases
//! (policies/fixtures/openkruise-v1.9.0/webhook-cases): each pod through
//! our SidecarSet injection and launch priority, as the webhook chain runs
//! them, with the SidecarSets OpenKruise stored, gives OpenKruise's pod.
//!
//! Apart from what the recording's README says is not a difference, each
//! asserted narrowly:
//! * the hash records' `updateTimestamp` (the wall clock);
//! * the random suffix of a pod named from `generateName` (and the barrier
//!   ConfigMap named after it): both are the prefix and 5 letters of
//!   Kubernetes' alphabet;
//! * the relative order of containers, volumes and pull secrets from
//!   different SidecarSets: the same items, the pod's own at the same
//!   places, each SidecarSet's in its own order.
//!
//! And one deliberate difference: where two sidecars of the same name would
//! be injected (which OpenKruise's SidecarSet validation refuses, so such
//! SidecarSets cannot exist together), we refuse the pod naming both,
//! where OpenKruise lets the last one win; the test checks that our
//! validation refuses those SidecarSets too.

//! OpenKruise v1.9.0's own pod webhook on 150 recorded cases
//! (policies/fixtures/openkruise-v1.9.0/webhook-cases): each pod, with the
//! SidecarSets OpenKruise stored, through our SidecarSet injection and
//! launch priority gives OpenKruise's pod, twice over: through the pure
//! core, and through the sidecarset and launch-priority wasm modules in our
//! host's chain, as the dev cluster runs them (the SidecarSets and
//! namespaces served by the host's Kubernetes reads).
//!
//! Apart from what the recording's README says is not a difference, each
//! asserted narrowly:
//! * the hash records' `updateTimestamp` (the wall clock);
//! * the random suffix of a pod named from `generateName` (and the barrier
//!   ConfigMap named after it): both are the prefix and 5 letters of
//!   Kubernetes' alphabet;
//! * the relative order of containers, volumes and pull secrets from
//!   different SidecarSets: the same items, the pod's own at the same
//!   places, each SidecarSet's in its own order.
//!
//! And one deliberate difference: where two sidecars of the same name would
//! be injected (which OpenKruise's SidecarSet validation refuses, so such
//! SidecarSets cannot exist together), we refuse the pod naming both,
//! where OpenKruise lets the last one win; the test checks that our
//! validation refuses those SidecarSets too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use common::{module_file, runtime, scratch_dir};
use k8s_openapi::api::core::v1::Pod;
use kruise_api::{SidecarSet, Strictness, object_from_value};
use kruise_core::sidecarset::validation::{ClusterView, validate};
use kruise_core::sidecarset::{InjectionContext, inject};
use kruise_core::{launch_priority, pod_readiness};
use kruise_policy_modules::fixtures::{openkruise_webhook_cases, pod_create};
use kruise_policy_modules::{LAUNCH_PRIORITY, SIDECARSET, policies_yml_entry};
use kruise_wasm_host::admission::AdmissionRequest;
use kruise_wasm_host::chain::run_chain;
use kruise_wasm_host::cluster_fixtures::{ClusterFixtures, ClusterReads, GetRequest, ListRequest};
use kruise_wasm_host::policy::{Policy, load_policies_with_cluster};
use kruise_wasm_host::runtime::block_on;
use serde_json::{Value, json};

/// The namespace a case's pod is created in, and its labels.
fn namespace_of(input: &Value) -> (&str, Option<&Value>) {
    let namespace = input["namespace"].as_str().unwrap();
    let labels = input["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == namespace)
        .map(|n| &n["labels"]);
    (namespace, labels)
}

/// The pure core's answer: the pod, or the refusal's message.
fn native(input: &Value, stored: &[Value]) -> Result<Value, String> {
    let sidecar_sets: Vec<SidecarSet> = stored
        .iter()
        .map(|s| object_from_value(s.clone(), Strictness::Lenient).unwrap())
        .collect();
    let (namespace, labels) = namespace_of(input);
    let labels: Option<BTreeMap<String, String>> =
        labels.map(|l| serde_json::from_value(l.clone()).unwrap_or_default());
    let mut pod: Pod = serde_json::from_value(input["pod"].clone()).unwrap();
    let context = InjectionContext {
        sidecar_sets: &sidecar_sets,
        namespace_labels: labels.as_ref(),
        request_namespace: Some(namespace),
        now: "2026-01-01T00:00:00Z",
        revisions: &[],
        random_draw: None,
    };
    // OpenKruise's first step; none of the recorded pods is a workload's.
    pod_readiness::add_gate_for_workload(&mut pod);
    let injected = inject(&pod, &context).map_err(|e| e.to_string())?.pod;
    let launched = launch_priority::apply(&injected, "bcdfg")
        .map_err(|e| e.to_string())?
        .unwrap_or(injected);
    Ok(serde_json::to_value(launched).unwrap())
}

/// The cluster of the case being run, as the host's Kubernetes reads
/// answer it: its stored SidecarSets and its namespaces.
#[derive(Debug, Default)]
struct CaseCluster(Mutex<ClusterFixtures>);

impl CaseCluster {
    fn hold(&self, input: &Value, stored: &[Value]) {
        let mut objects = stored.to_vec();
        for namespace in input["namespaces"].as_array().unwrap() {
            objects.push(json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace["name"], "labels": namespace["labels"]},
            }));
        }
        let objects = Value::Array(objects).to_string();
        *self.0.lock().unwrap() = ClusterFixtures::from_yaml(&objects).unwrap();
    }
}

impl ClusterReads for CaseCluster {
    fn list(&self, request: &ListRequest) -> Result<Vec<u8>, String> {
        self.0.lock().unwrap().list(request)
    }
    fn get(&self, request: &GetRequest) -> Result<Vec<u8>, String> {
        self.0.lock().unwrap().get(request)
    }
}

/// The pod webhook as the dev cluster's host runs it: the two modules, in
/// a chain, reading `cluster`.
struct WasmChain {
    policies: std::collections::BTreeMap<String, Policy>,
    cluster: Arc<CaseCluster>,
}

impl WasmChain {
    fn load() -> Self {
        let dir = scratch_dir("openkruise-pod-webhook");
        let mut policies = serde_json::Map::new();
        for module in [&SIDECARSET, &LAUNCH_PRIORITY] {
            let entry = policies_yml_entry(module, &module_file(module)).unwrap();
            policies.insert(module.name.to_owned(), entry);
        }
        let path = dir.join("policies.yml");
        std::fs::write(&path, serde_yaml::to_string(&policies).unwrap()).unwrap();
        let cluster = Arc::new(CaseCluster::default());
        let reads: Arc<dyn ClusterReads> = cluster.clone();
        let policies = load_policies_with_cluster(runtime(), &path, None, Some(&reads)).unwrap();
        Self { policies, cluster }
    }

    /// The chain's answer: the pod, or the refusal's message.
    fn answer(&self, input: &Value, stored: &[Value]) -> Result<Value, String> {
        self.cluster.hold(input, stored);
        let mut request = pod_create(&input["pod"]);
        request["namespace"] = input["namespace"].clone();
        let request: AdmissionRequest = serde_json::from_value(request).unwrap();
        let chain = [
            &self.policies[SIDECARSET.name],
            &self.policies[LAUNCH_PRIORITY.name],
        ];
        let outcome = block_on(run_chain(&chain, &request));
        if outcome.response.allowed {
            Ok(outcome.object.unwrap())
        } else {
            let status = outcome.response.status.unwrap();
            Err(status.message.unwrap_or_default())
        }
    }
}

const NAME_ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";

/// The hash records without their wall-clock `updateTimestamp`.
fn without_timestamps(pod: &mut Value) {
    for key in [
        "kruise.io/sidecarset-hash",
        "kruise.io/sidecarset-hash-without-image",
    ] {
        let Some(text) = pod["metadata"]["annotations"]
            .get(key)
            .and_then(Value::as_str)
        else {
            continue;
        };
        let mut records: Value = serde_json::from_str(text).unwrap();
        for record in records.as_object_mut().unwrap().values_mut() {
            assert!(record["updateTimestamp"].is_string(), "{record}");
            record.as_object_mut().unwrap().remove("updateTimestamp");
        }
        pod["metadata"]["annotations"][key] = records;
    }
}

/// A pod named from `generateName`: both names are the prefix and five
/// letters of the alphabet; theirs is then written as ours, in the name
/// and in the barrier ConfigMap references.
fn same_generated_name(input: &Value, ours: &Value, theirs: &mut Value) {
    let Some(prefix) = input["metadata"]["generateName"].as_str() else {
        return;
    };
    if input["metadata"]["name"].is_string() {
        return;
    }
    let (Some(our_name), Some(their_name)) = (
        ours["metadata"]["name"].as_str(),
        theirs["metadata"]["name"].as_str().map(str::to_owned),
    ) else {
        assert_eq!(ours["metadata"]["name"], theirs["metadata"]["name"]);
        return;
    };
    for name in [our_name, their_name.as_str()] {
        let suffix = name.strip_prefix(prefix).unwrap_or_default();
        assert!(
            suffix.len() == 5 && suffix.chars().all(|c| NAME_ALPHABET.contains(c)),
            "{name} from {prefix}"
        );
    }
    theirs["metadata"]["name"] = Value::from(our_name);
    let (their_barrier, our_barrier) = (
        format!("{their_name}-barrier"),
        format!("{our_name}-barrier"),
    );
    for container in theirs["spec"]["containers"].as_array_mut().unwrap() {
        for env in container["env"].as_array_mut().into_iter().flatten() {
            let reference = env.pointer_mut("/valueFrom/configMapKeyRef/name");
            if let Some(reference) = reference.filter(|r| r.as_str() == Some(&their_barrier)) {
                *reference = Value::from(our_barrier.as_str());
            }
        }
    }
}

/// Where each named item of `list` comes from: the pod itself, or the one
/// SidecarSet that has an item of that name (several: shared).
fn origin(name: &str, list: &str, input: &Value, stored: &[Value]) -> String {
    let has = |items: &Value| {
        items
            .as_array()
            .is_some_and(|items| items.iter().any(|i| i["name"] == name))
    };
    if has(&input["spec"][list]) {
        return "pod".to_owned();
    }
    let owners: Vec<&str> = stored
        .iter()
        .filter(|s| has(&s["spec"][list]))
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    match owners.as_slice() {
        [one] => (*one).to_owned(),
        _ => "shared".to_owned(),
    }
}

/// The same items in each list, the pod's own at the same places, and each
/// SidecarSet's in the same order; theirs is then written in our order.
fn same_items_in_allowed_order(input: &Value, stored: &[Value], ours: &Value, theirs: &mut Value) {
    ordered_barriers_by_place(theirs, true);
    for (list, source) in [
        ("containers", "containers"),
        ("initContainers", "initContainers"),
        ("volumes", "volumes"),
        ("imagePullSecrets", "imagePullSecrets"),
    ] {
        let (Some(our_items), Some(their_items)) = (
            ours["spec"][list].as_array(),
            theirs["spec"][list].as_array(),
        ) else {
            continue;
        };
        let name_of = |item: &Value| item["name"].as_str().unwrap_or_default().to_owned();
        let by_name: BTreeMap<String, Value> = their_items
            .iter()
            .map(|i| (name_of(i), i.clone()))
            .collect();
        let our_names: Vec<String> = our_items.iter().map(name_of).collect();
        let their_names: Vec<String> = their_items.iter().map(name_of).collect();
        assert_eq!(
            our_names.iter().collect::<BTreeSet<_>>(),
            their_names.iter().collect::<BTreeSet<_>>(),
            "{list}"
        );
        let origins = |names: &[String]| -> Vec<String> {
            let source_list = if source == "imagePullSecrets" {
                "imagePullSecrets"
            } else {
                list
            };
            names
                .iter()
                .map(|n| origin(n, source_list, &input["pod"], stored))
                .collect()
        };
        let (our_origins, their_origins) = (origins(&our_names), origins(&their_names));
        // The pod's own items at the same places.
        let pod_places =
            |origins: &[String]| -> Vec<bool> { origins.iter().map(|o| o == "pod").collect() };
        assert_eq!(
            pod_places(&our_origins),
            pod_places(&their_origins),
            "{list}: the pod's own items"
        );
        // Each SidecarSet's items in the same order.
        for owner in our_origins.iter().collect::<BTreeSet<_>>() {
            let of = |names: &[String], origins: &[String]| -> Vec<String> {
                names
                    .iter()
                    .zip(origins)
                    .filter(|(_, o)| *o == owner)
                    .map(|(n, _)| n.clone())
                    .collect()
            };
            assert_eq!(
                of(&our_names, &our_origins),
                of(&their_names, &their_origins),
                "{list}: the order of {owner}'s items"
            );
        }
        theirs["spec"][list] = our_names.iter().map(|n| by_name[n].clone()).collect();
    }
    ordered_barriers_by_place(theirs, false);
}

const ORDERED: &str = "apps.kruise.io/container-launch-priority";

/// Under `container-launch-priority: Ordered` each container waits for the
/// key of its place (`p_0`, `p_-1`, ...); `check` asserts the keys are so,
/// otherwise they are written so (after theirs is put in our order).
fn ordered_barriers_by_place(pod: &mut Value, check: bool) {
    if pod["metadata"]["annotations"][ORDERED] != "Ordered" {
        return;
    }
    let containers = pod["spec"]["containers"].as_array_mut().unwrap();
    for (index, container) in containers.iter_mut().enumerate() {
        let place = if index == 0 {
            "p_0".to_owned()
        } else {
            format!("p_-{index}")
        };
        for env in container["env"].as_array_mut().into_iter().flatten() {
            if env["name"] == launch_priority::BARRIER_ENV {
                let key = env.pointer_mut("/valueFrom/configMapKeyRef/key").unwrap();
                if check {
                    assert_eq!(key.as_str(), Some(place.as_str()));
                } else {
                    *key = Value::from(place.as_str());
                }
            }
        }
    }
}

/// Our SidecarSet validation refuses one of `stored`, judged against the
/// others (so they could not all be in our cluster).
fn our_validation_refuses_one_of(stored: &[Value]) -> bool {
    let sets: Vec<SidecarSet> = stored
        .iter()
        .map(|s| object_from_value(s.clone(), Strictness::Lenient).unwrap())
        .collect();
    sets.iter().enumerate().any(|(index, set)| {
        let others: Vec<SidecarSet> = sets[..index].to_vec();
        let view = ClusterView {
            sidecar_sets: &others,
            ..ClusterView::default()
        };
        !validate(set, None, view).is_empty()
    })
}

#[test]
fn openkruise_v1_9_pod_webhook_cases() {
    let cases = openkruise_webhook_cases().unwrap();
    assert_eq!(cases.len(), 150);
    let wasm = WasmChain::load();
    for (how, answer) in [
        (
            "the core",
            &native as &dyn Fn(&Value, &[Value]) -> Result<Value, String>,
        ),
        ("the wasm chain", &|input: &Value, stored: &[Value]| {
            wasm.answer(input, stored)
        }),
    ] {
        let mut tally = (0, 0, 0);
        for (name, case) in &cases {
            let label = format!("{how}: {name}");
            let expected = &case["openkruise"];
            let stored = expected["storedSidecarSets"].as_array().unwrap();
            let outcome = answer(&case["input"], stored);
            compare(
                &label,
                &case["input"],
                expected,
                stored,
                outcome,
                &mut tally,
            );
        }
        assert_eq!(tally, (147, 2, 1), "{how}: same, conflicts, refused");
    }
}

/// Our answer against OpenKruise's, counted in `tally`: (the same pod,
/// a same-name conflict we refuse, refused by both).
fn compare(
    label: &str,
    input: &Value,
    expected: &Value,
    stored: &[Value],
    ours: Result<Value, String>,
    tally: &mut (usize, usize, usize),
) {
    match (expected["allowed"].as_bool().unwrap(), ours) {
        (true, Ok(mut pod)) => {
            let mut theirs = expected["pod"].clone();
            without_timestamps(&mut pod);
            without_timestamps(&mut theirs);
            same_generated_name(&input["pod"], &pod, &mut theirs);
            same_items_in_allowed_order(input, stored, &pod, &mut theirs);
            let differences = differences(&pod, &theirs);
            assert!(
                differences.is_empty(),
                "{label}:\n  {}",
                differences.join("\n  ")
            );
            tally.0 += 1;
        }
        (true, Err(message)) => {
            assert!(
                message.contains("container names must be unique"),
                "{label}: {message}"
            );
            assert!(our_validation_refuses_one_of(stored), "{label}: {message}");
            tally.1 += 1;
        }
        (false, Err(message)) => {
            // A merge patch on an annotation that is not JSON.
            let theirs = expected["message"].as_str().unwrap();
            assert!(
                theirs.contains("JSON") && message.contains("JSON"),
                "{label}: {message} / {theirs}"
            );
            tally.2 += 1;
        }
        (false, Ok(_)) => panic!(
            "{label}: accepted; OpenKruise refused: {}",
            expected["message"]
        ),
    }
}

/// Where two JSON values differ, one line per path.
fn differences(ours: &Value, theirs: &Value) -> Vec<String> {
    fn walk(ours: &Value, theirs: &Value, at: &str, out: &mut Vec<String>) {
        match (ours, theirs) {
            (Value::Object(a), Value::Object(b)) => {
                for key in a.keys().chain(b.keys()).collect::<BTreeSet<_>>() {
                    let (x, y) = (a.get(key), b.get(key));
                    walk(
                        x.unwrap_or(&Value::Null),
                        y.unwrap_or(&Value::Null),
                        &format!("{at}.{key}"),
                        out,
                    );
                }
            }
            (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
                for (index, (x, y)) in a.iter().zip(b).enumerate() {
                    walk(x, y, &format!("{at}[{index}]"), out);
                }
            }
            _ if ours == theirs => {}
            _ => out.push(format!("{at}: ours {ours}, OpenKruise's {theirs}")),
        }
    }
    let mut out = Vec::new();
    walk(ours, theirs, "", &mut out);
    out
}
