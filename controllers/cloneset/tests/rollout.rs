//! End to end on the dev cluster (real API server, simulated nodes): the
//! seed rollout of spec 03 §10 with maxSurge 20%, maxUnavailable 0 and a
//! partition, then the in-place + surge example, checked through the API,
//! a watch that sees every pod change, and kubectl.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kruise_api::CloneSet;
use kruise_controller_runtime::shared::SharedWatches;
use kruise_devcluster::crds::install_converted_by;
use kruise_devcluster::simnode::SimNodes;
use kruise_devcluster::wait::wait_for;
use kruise_devcluster::{DevCluster, Options};
use kruise_wasm_host::server::start_conversion_only;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::{example, kubectl, pods_by_name, record, set_image, wait_for_columns};

#[tokio::test]
async fn clonesets_roll_out_on_the_dev_cluster() {
    let cluster = DevCluster::start(Options::default()).await.unwrap();
    let client = cluster.client();
    // Our CRDs store v1beta1: the API server converts through a host.
    let _converter = install_converted_by(&cluster, start_conversion_only)
        .await
        .unwrap();
    let _nodes = SimNodes::start(client.clone(), 3).await.unwrap();
    tokio::spawn(kruise_cloneset_controller::run(
        client.clone(),
        SharedWatches::new(client.clone()),
    ));
    let api: Api<CloneSet> = Api::namespaced(client.clone(), "default");

    surge_and_partition(&client, &api, &cluster.kubeconfig).await;
    in_place_with_surge(&client, &api).await;
    a_condition_that_no_longer_applies_disappears(&api).await;
}

/// The status is written whole: with `progressDeadlineSeconds` removed,
/// the Progressing condition goes away (a merge patch of a status whose
/// empty condition list is left out would have kept it for ever).
async fn a_condition_that_no_longer_applies_disappears(api: &Api<CloneSet>) {
    let deadline = json!({"spec": {"progressDeadlineSeconds": 600}});
    api.patch(
        "demo-inplace",
        &PatchParams::default(),
        &Patch::Merge(&deadline),
    )
    .await
    .unwrap();
    let conditions = |c: &CloneSet| -> Vec<String> {
        c.status
            .iter()
            .flat_map(|s| &s.conditions)
            .map(|c| c.type_.clone())
            .collect()
    };
    wait_for(api, "demo-inplace", "a Progressing condition", |c| {
        (conditions(c) == ["Progressing"]).then_some(())
    })
    .await;
    let no_deadline = json!({"spec": {"progressDeadlineSeconds": null}});
    api.patch(
        "demo-inplace",
        &PatchParams::default(),
        &Patch::Merge(&no_deadline),
    )
    .await
    .unwrap();
    wait_for(api, "demo-inplace", "no condition", |c| {
        conditions(c).is_empty().then_some(())
    })
    .await;
}

/// Every pod the CloneSet created is Ready through its open
/// `InPlaceUpdateReady` gate and `Normal`: the two came in one
/// `pods/status` write, which the API server takes label changes through.
async fn opened_and_normal(client: &Client, selector: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let listed = pods
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items;
    assert!(!listed.is_empty());
    for pod in listed {
        let gate_open = pod
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .any(|c| c.type_ == "InPlaceUpdateReady" && c.status == "True");
        let state = pod.labels().get("lifecycle.apps.kruise.io/state");
        assert!(
            gate_open && state.map(String::as_str) == Some("Normal"),
            "{}: gate open {gate_open}, lifecycle {state:?}",
            pod.name_any()
        );
    }
}

/// Spec 03 §10: TOTAL never above 6, READY never below 5, 3 pods kept on
/// the old revision, then all 5 updated once the partition is 0.
async fn surge_and_partition(client: &Client, api: &Api<CloneSet>, kubeconfig: &Path) {
    api.create(
        &PostParams::default(),
        &example("cloneset-surge-partition.yaml"),
    )
    .await
    .unwrap();
    let first = wait_for_columns(api, "demo", [5, 5, 5, 5, 5]).await;
    let revision_a = first.status.unwrap().update_revision.unwrap();
    opened_and_normal(client, "app=demo").await;

    let recorder = record(client, "app=demo");
    tokio::time::sleep(Duration::from_millis(500)).await;
    set_image(api, "demo", "nginx:1.9.1").await;
    let phase_one = wait_for_columns(api, "demo", [5, 2, 2, 5, 5]).await;
    let status = phase_one.status.unwrap();
    assert_eq!(
        status.current_revision.as_deref(),
        Some(revision_a.as_str())
    );
    assert_eq!(status.expected_updated_replicas, Some(2));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let on_a = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| {
            p.labels().get("app").map(String::as_str) == Some("demo")
                && p.labels().get("controller-revision-hash") == Some(&revision_a)
        })
        .count();
    assert_eq!(on_a, 3, "the partition keeps 3 pods on the old revision");

    let partition = json!({"spec": {"updateStrategy": {"partition": 0}}});
    api.patch("demo", &PatchParams::default(), &Patch::Merge(partition))
        .await
        .unwrap();
    let done = wait_for_columns(api, "demo", [5, 5, 5, 5, 5]).await;
    let status = done.status.unwrap();
    assert_eq!(status.current_revision, status.update_revision);

    let seen = recorder.take();
    assert!(seen.len() > 10, "the watch saw the rollout: {seen:?}");
    let most = seen.iter().map(|(total, _)| *total).max().unwrap();
    let fewest_ready = seen.iter().map(|(_, ready)| *ready).min().unwrap();
    assert_eq!(
        most, 6,
        "maxSurge 20% of 5 allows exactly one extra pod: {seen:?}"
    );
    assert!(fewest_ready >= 5, "maxUnavailable 0: {seen:?}");

    let table = kubectl(kubeconfig, &["get", "clone", "demo"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    // OpenKruise's printer columns (UPDATED_AVAILABLE since v1.7).
    assert_eq!(
        header,
        [
            "NAME",
            "DESIRED",
            "UPDATED",
            "UPDATED_READY",
            "UPDATED_AVAILABLE",
            "READY",
            "TOTAL",
            "AGE"
        ]
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..7], ["demo", "5", "5", "5", "5", "5", "5"]);

    // The scale subresource: `kubectl scale clone`.
    kubectl(kubeconfig, &["scale", "clone", "demo", "--replicas=3"]);
    wait_for_columns(api, "demo", [3, 3, 3, 3, 3]).await;
}

/// In-place update with surge: the old pods keep their UID and IP, only
/// the container restarts with the new image, the surge pod goes away.
async fn in_place_with_surge(client: &Client, api: &Api<CloneSet>) {
    api.create(
        &PostParams::default(),
        &example("cloneset-inplace-surge.yaml"),
    )
    .await
    .unwrap();
    wait_for_columns(api, "demo-inplace", [5, 5, 5, 5, 5]).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let selector = ListParams::default().labels("app=demo-inplace");
    let before = pods_by_name(client, "demo-inplace").await;

    set_image(api, "demo-inplace", "nginx:1.9.1").await;
    wait_for_columns(api, "demo-inplace", [5, 5, 5, 5, 5]).await;
    let after = pods.list(&selector).await.unwrap().items;
    let kept: Vec<&Pod> = after
        .iter()
        .filter(|p| before.contains_key(&p.name_any()))
        .collect();
    assert!(
        kept.len() >= 4,
        "in place: at most the surge share is recreated: {}",
        kept.len()
    );
    for pod in kept {
        let old = &before[&pod.name_any()];
        assert_eq!(pod.uid(), old.uid());
        let ip = |p: &Pod| p.status.as_ref().and_then(|s| s.pod_ip.clone());
        assert_eq!(ip(pod), ip(old));
        let main = |p: &Pod| p.status.clone().unwrap().container_statuses.unwrap()[0].clone();
        assert_eq!(main(pod).image, "nginx:1.9.1");
        assert_eq!(main(pod).restart_count, main(old).restart_count + 1);
        assert_ne!(main(pod).image_id, main(old).image_id);
    }
}
