//! One SidecarSet injection: the native core, the native policy (payload
//! in, response out), and the same policy as a guest call in the sidecarset
//! module on a warm instance and on a fresh instance per call (what
//! policy-server pays per request). Inputs: the seed pod (test-pod with
//! scs-demo) and a 20-container pod with volume sharing and env transfer.
//! Then cluster mode: the seed pod with scs-demo read through the
//! `list_resources_all` host call, answered with the SidecarSet as the
//! API server stores it (defaults and hash annotations stamped).
//!
//! `cargo bench -p kruise-policy-modules --bench injection`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kruise_api::SidecarSet;
use kruise_core::sidecarset::{InjectionContext, inject};
use kruise_policy_modules::SIDECARSET;
use kruise_policy_sidecarset::{Environment, Instance, NoCluster, prepare};
use kruise_policy_support::cluster::HostCalls;
use serde_json::{Value, json};

const NOW: &str = "2026-11-29T10:00:00Z";

fn example(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/examples")
        .join(name);
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// 20 app containers, each with env and two mounts; the SidecarSet shares
/// volumes and transfers env, so the work grows with the pod.
fn twenty_containers() -> (Value, Value) {
    let containers: Vec<Value> = (0..20)
        .map(|i| {
            json!({"name": format!("app-{i}"), "image": format!("app:{i}"),
                   "env": [{"name": "TZ", "value": "UTC"}, {"name": format!("ENV_{i}"), "value": "x"}],
                   "volumeMounts": [{"name": "data", "mountPath": format!("/data/{i}")},
                                    {"name": "logs", "mountPath": format!("/logs/{i}")}]})
        })
        .collect();
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "big", "namespace": "default", "labels": {"app": "big"}},
        "spec": {"containers": containers,
                 "volumes": [{"name": "data", "emptyDir": {}}, {"name": "logs", "emptyDir": {}}]}});
    let sidecarset = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "mesh"},
        "spec": {"selector": {"matchLabels": {"app": "big"}},
                 "containers": [{"name": "proxy", "image": "envoy:1.0",
                                 "shareVolumePolicy": {"type": "enabled"},
                                 "transferEnv": [{"sourceContainerName": "app-0", "envName": "TZ"}]},
                                {"name": "log-agent", "image": "agent:1.0", "podInjectPolicy": "AfterAppContainer"}]}});
    (pod, sidecarset)
}

fn payload(pod: &Value, sidecarset: Option<&Value>) -> Vec<u8> {
    let settings = match sidecarset {
        Some(sidecarset) => json!({"sidecarSets": [sidecarset]}),
        None => json!({}),
    };
    serde_json::to_vec(&json!({
        "settings": settings,
        "request": {"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "namespace": "default", "operation": "CREATE", "object": pod}
    }))
    .unwrap()
}

fn new_host(engine: &wasmtime::Engine, module: &wasmtime::Module) -> wapc::WapcHost {
    new_host_answering(engine, module, None)
}

fn new_host_answering(
    engine: &wasmtime::Engine,
    module: &wasmtime::Module,
    host_calls: Option<Box<wapc::HostCallback>>,
) -> wapc::WapcHost {
    let provider = wasmtime_provider::WasmtimeEngineProviderBuilder::new()
        .engine(engine.clone())
        .module(module.clone())
        .build()
        .unwrap();
    wapc::WapcHost::new(Box::new(provider), host_calls).unwrap()
}

/// scs-demo as a `list_resources_all` answer: stored by the API server
/// after the SidecarSet webhook defaulted it and stamped its hashes.
fn stored_list(sidecarset: &Value) -> Vec<u8> {
    let stored = prepare(serde_json::from_value(sidecarset.clone()).unwrap());
    serde_json::to_vec(
        &json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSetList",
        "metadata": {"resourceVersion": "1"}, "items": [stored]}),
    )
    .unwrap()
}

fn cluster_mode(c: &mut Criterion, engine: &wasmtime::Engine, module: &wasmtime::Module) {
    let mut group = c.benchmark_group("seed pod, cluster mode");
    let pod = example("pod-test-pod.yaml");
    let list = stored_list(&example("sidecarset-scs-demo.yaml"));
    let payload = payload(&pod, None);

    let answer_list = |operation: &str, _request: &[u8]| match operation {
        "list_resources_all" => Ok(list.clone()),
        other => Err(format!("{other} is not answered in this benchmark")),
    };
    let cluster = HostCalls(answer_list);
    let environment = Environment {
        now: NOW,
        random_draw: Some(0.5),
        cluster: &cluster,
    };
    let answer: Value =
        serde_json::from_slice(&Instance::default().respond(&payload, &environment).unwrap())
            .unwrap();
    assert!(answer["mutated_object"].is_object(), "native: no mutation");
    group.bench_function("native policy (payload to response)", |b| {
        b.iter(|| {
            Instance::default()
                .respond(black_box(&payload), &environment)
                .unwrap()
        });
    });

    let guest_list = list.clone();
    let callback: Box<wapc::HostCallback> =
        Box::new(move |_, _, _, operation, _| match operation {
            "list_resources_all" => Ok(guest_list.clone()),
            other => Err(format!("{other} is not answered in this benchmark").into()),
        });
    let guest = new_host_answering(engine, module, Some(callback));
    let answer: Value = serde_json::from_slice(&guest.call("validate", &payload).unwrap()).unwrap();
    assert!(answer["mutated_object"].is_object(), "guest: no mutation");
    // Nothing is kept between calls in cluster mode: each reads the list.
    group.bench_function("wasm guest call, warm instance", |b| {
        b.iter(|| guest.call("validate", black_box(&payload)).unwrap());
    });
    group.finish();
}

fn injection(c: &mut Criterion) {
    let engine = wasmtime::Engine::default();
    let module = wasmtime::Module::new(&engine, SIDECARSET.wasm).unwrap();
    let inputs = [
        (
            "seed pod",
            example("pod-test-pod.yaml"),
            example("sidecarset-scs-demo.yaml"),
        ),
        (
            "20-container pod",
            twenty_containers().0,
            twenty_containers().1,
        ),
    ];
    for (label, pod_json, sidecarset_json) in inputs {
        let mut group = c.benchmark_group(label);
        let pod: Pod = serde_json::from_value(pod_json.clone()).unwrap();
        let sidecar_sets: Vec<SidecarSet> = vec![prepare(
            serde_json::from_value(sidecarset_json.clone()).unwrap(),
        )];
        let context = InjectionContext {
            sidecar_sets: &sidecar_sets,
            now: NOW,
            ..Default::default()
        };
        assert!(
            !inject(&pod, &context).unwrap().sidecar_sets.is_empty(),
            "{label}: nothing injected"
        );
        group.bench_function("native core inject", |b| {
            b.iter(|| inject(black_box(&pod), &context).unwrap());
        });

        let payload = payload(&pod_json, Some(&sidecarset_json));
        let environment = Environment {
            now: NOW,
            random_draw: Some(0.5),
            cluster: &NoCluster,
        };
        group.bench_function("native policy (payload to response)", |b| {
            b.iter(|| {
                Instance::default()
                    .respond(black_box(&payload), &environment)
                    .unwrap()
            });
        });
        // What our host's snapshot after validate_settings gives each
        // evaluation: the inline SidecarSets already prepared.
        group.bench_function("native policy, SidecarSets prepared", |b| {
            let mut instance = Instance::default();
            b.iter(|| instance.respond(black_box(&payload), &environment).unwrap());
        });

        let host = new_host(&engine, &module);
        let answer: Value =
            serde_json::from_slice(&host.call("validate", &payload).unwrap()).unwrap();
        assert!(
            answer["mutated_object"].is_object(),
            "{label}: the module did not mutate"
        );
        group.bench_function("wasm guest call, warm instance", |b| {
            b.iter(|| host.call("validate", black_box(&payload)).unwrap());
        });
        group.bench_function("wasm guest call, fresh instance", |b| {
            b.iter(|| {
                new_host(&engine, &module)
                    .call("validate", black_box(&payload))
                    .unwrap()
            });
        });
        group.finish();
    }
    cluster_mode(c, &engine, &module);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = injection
}
criterion_main!(benches);
