//! No lost work: the controller is killed mid-rollout and a new one takes
//! over, while another writer keeps changing the pods (so the in-place
//! patches, which carry the resourceVersion they were planned on, hit
//! conflicts). The rollout must converge with its budget held at every
//! watched change and without updating any pod twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

// Each test file uses a part of the shared helpers.
#[allow(dead_code)]
mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kruise_api::CloneSet;
use kruise_controller_runtime::shared::SharedWatches;
use kruise_devcluster::crds::install_converted_by;
use kruise_devcluster::simnode::{READY_AFTER_SECONDS, SimNodes};
use kruise_devcluster::{DevCluster, Options};
use kruise_wasm_host::server::start_conversion_only;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::{pods_by_name, record, set_image, wait_for_columns};

fn cloneset() -> CloneSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "steady", "namespace": "default"},
        "spec": {
            "replicas": 5,
            "selector": {"matchLabels": {"app": "steady"}},
            "template": {
                "metadata": {
                    "labels": {"app": "steady"},
                    // Slow enough that the rollout spans the restart.
                    "annotations": {READY_AFTER_SECONDS: "2"},
                },
                "spec": {"containers": [{"name": "main", "image": "nginx:1.7.9"}]},
            },
            "updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": 1, "maxSurge": 0},
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn a_restart_and_conflicting_writers_lose_nothing() {
    // RUST_LOG=kruise_cloneset_controller=debug shows the conflicts.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let cluster = DevCluster::start(Options::default()).await.unwrap();
    let client = cluster.client();
    // Our CRDs store v1beta1: the API server converts through a host.
    let _converter = install_converted_by(&cluster, start_conversion_only)
        .await
        .unwrap();
    let _nodes = SimNodes::start(client.clone(), 3).await.unwrap();
    let first = tokio::spawn(kruise_cloneset_controller::run(
        client.clone(),
        SharedWatches::new(client.clone()),
    ));
    let api: Api<CloneSet> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cloneset())
        .await
        .unwrap();
    wait_for_columns(&api, "steady", [5, 5, 5, 5, 5]).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let selector = ListParams::default().labels("app=steady");
    let before = pods_by_name(&client, "steady").await;

    // Another writer touching every pod all the time.
    let chaos = {
        let pods = pods.clone();
        tokio::spawn(async move {
            for round in 0u64.. {
                for name in pods
                    .list(&ListParams::default().labels("app=steady"))
                    .await
                    .unwrap()
                    .items
                {
                    let patch = json!({"metadata": {"annotations": {"chaos": round.to_string()}}});
                    let _ = pods
                        .patch(
                            &name.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(patch),
                        )
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    let recorder = record(&client, "app=steady");
    tokio::time::sleep(Duration::from_millis(300)).await;
    set_image(&api, "steady", "nginx:1.9.1").await;
    // Kill the controller once the rollout is under way.
    loop {
        let status = api.get("steady").await.unwrap().status.unwrap_or_default();
        if status.updated_replicas >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.abort();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = tokio::spawn(kruise_cloneset_controller::run(
        client.clone(),
        SharedWatches::new(client.clone()),
    ));

    wait_for_columns(&api, "steady", [5, 5, 5, 5, 5]).await;
    chaos.abort();
    second.abort();

    let seen = recorder.take();
    assert!(
        seen.iter().all(|(total, _)| *total <= 5),
        "maxSurge 0: {seen:?}"
    );
    assert!(
        seen.iter().all(|(_, ready)| *ready >= 4),
        "maxUnavailable 1: {seen:?}"
    );
    let after = pods.list(&selector).await.unwrap().items;
    assert_eq!(after.len(), 5);
    for pod in &after {
        let old = before
            .get(&pod.name_any())
            .expect("in place: the same pods");
        assert_eq!(pod.uid(), old.uid());
        let main = pod.status.clone().unwrap().container_statuses.unwrap()[0].clone();
        assert_eq!(main.image, "nginx:1.9.1");
        assert_eq!(
            main.restart_count,
            1,
            "{} was updated more than once",
            pod.name_any()
        );
    }
}
