//! The Kubernetes host capabilities served from watch caches of a real API
//! server (the dev cluster): the caches fill even when the conversion
//! webhook they need comes up after them, lists and gets follow the
//! cluster within moments, unwatched kinds are refused, can_i asks the API
//! server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use kruise_api::SidecarSet;
use kruise_devcluster::crds::{install, install_converted_by};
use kruise_devcluster::{DevCluster, Options};
use kruise_wasm_host::capabilities::ContextAwareResource;
use kruise_wasm_host::cluster_fixtures::{ClusterReads, GetRequest, ListRequest};
use kruise_wasm_host::live_cluster::{Credentials, LiveCluster};
use kruise_wasm_host::server::start_conversion_only;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

fn sidecar_set(name: &str) -> SidecarSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "SidecarSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "nginx"}},
            "containers": [{"name": "sidecar1", "image": "busybox"}],
        },
    }))
    .unwrap()
}

fn kind(api_version: &str, kind: &str) -> ContextAwareResource {
    serde_json::from_value(json!({"apiVersion": api_version, "kind": kind})).unwrap()
}

fn sidecar_sets() -> ListRequest {
    ListRequest {
        api_version: "apps.kruise.io/v1alpha1".to_owned(),
        kind: "SidecarSet".to_owned(),
        namespace: None,
        label_selector: None,
        field_selector: None,
    }
}

fn list_sidecar_sets(live: &LiveCluster) -> Vec<String> {
    let list: Value = serde_json::from_slice(&live.list(&sidecar_sets()).unwrap()).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            assert_eq!(item["kind"], "SidecarSet", "items carry their kind");
            // Stripped, as policy-server's caches strip them (the API
            // server records them on every write).
            assert_eq!(item["metadata"]["managedFields"], json!([]), "{item}");
            item["metadata"]["name"].as_str().unwrap().to_owned()
        })
        .collect()
}

fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The caches follow creations and deletions; a cluster-scoped kind is not
/// listed by namespace, even with no object of it left to show its scope.
fn served_as_the_cluster_changes(
    runtime: &tokio::runtime::Runtime,
    sets: &Api<SidecarSet>,
    live: &LiveCluster,
) {
    runtime
        .block_on(sets.create(&PostParams::default(), &sidecar_set("second")))
        .unwrap();
    eventually("the new SidecarSet is served", || {
        list_sidecar_sets(live) == ["first", "second"]
    });
    runtime
        .block_on(sets.delete("first", &DeleteParams::default()))
        .unwrap();
    eventually("the deleted SidecarSet is gone", || {
        list_sidecar_sets(live) == ["second"]
    });
    runtime
        .block_on(sets.delete("second", &DeleteParams::default()))
        .unwrap();
    eventually("no SidecarSet is left", || {
        list_sidecar_sets(live).is_empty()
    });
    let in_namespace = live
        .list(&ListRequest {
            namespace: Some("default".to_owned()),
            ..sidecar_sets()
        })
        .unwrap_err();
    assert_eq!(
        in_namespace,
        "apps.kruise.io/v1alpha1/SidecarSet is cluster-scoped: it cannot be listed in namespace default"
    );
}

#[test]
fn kubernetes_reads_come_from_watch_caches_of_the_cluster() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let cluster = runtime
        .block_on(DevCluster::start(Options::default()))
        .unwrap();
    let client = cluster.client();
    // Our CRDs store v1beta1: the API server converts through a host.
    let converter = runtime
        .block_on(install_converted_by(&cluster, start_conversion_only))
        .unwrap();
    let sets: Api<SidecarSet> = Api::all(client.clone());
    runtime
        .block_on(sets.create(&PostParams::default(), &sidecar_set("first")))
        .unwrap();

    // The converter stops, as when every host replica restarts at once,
    // and the CRDs change to name an address nothing serves yet (as when
    // ours replace OpenKruise's): the API server drops the v1alpha1 objects
    // it had converted, and the stored SidecarSet cannot be listed as
    // v1alpha1 until a host converts again. So the caches cannot fill
    // before the host serves; connecting does not wait for them.
    converter.shutdown();
    let nobody = kruise_devcluster::ports::free_ports(1).unwrap()[0];
    let nobody = cluster.conversion_webhook(([127, 0, 0, 1], nobody).into());
    runtime.block_on(install(&client, &nobody)).unwrap();
    let live = LiveCluster::connect(
        Credentials::Kubeconfig(&cluster.kubeconfig),
        &[
            kind("apps.kruise.io/v1alpha1", "SidecarSet"),
            kind("v1", "Namespace"),
        ],
    )
    .unwrap();
    let unfilled = live.list(&sidecar_sets()).unwrap_err();
    assert!(
        unfilled.starts_with(
            "the host's watch cache of apps.kruise.io/v1alpha1 SidecarSet has not filled yet"
        ),
        "{unfilled}"
    );
    // By then the watch has tried and failed, and the refusal says why;
    // the other kind's cache has filled.
    let waited = live.wait_filled(Duration::from_secs(1)).unwrap_err();
    assert!(
        waited.contains("(last watch error: ") && waited.contains("conversion webhook"),
        "{waited}"
    );
    live.cache_filled("v1", "Namespace").unwrap();

    // Once a host converts again, the caches fill within seconds: until its
    // first list is in, a watch retries within 2 s of a failure (kube's own
    // backoff grows to 30 s).
    let _converter = runtime
        .block_on(install_converted_by(&cluster, start_conversion_only))
        .unwrap();
    live.wait_filled(Duration::from_secs(10)).unwrap();
    live.cache_filled("apps.kruise.io/v1alpha1", "SidecarSet")
        .unwrap();
    assert_eq!(list_sidecar_sets(&live), ["first"]);

    let namespace = live
        .get(&GetRequest {
            api_version: "v1".to_owned(),
            kind: "Namespace".to_owned(),
            name: "default".to_owned(),
            namespace: None,
        })
        .unwrap();
    let namespace: Value = serde_json::from_slice(&namespace).unwrap();
    assert_eq!(namespace["metadata"]["name"], "default");

    served_as_the_cluster_changes(&runtime, &sets, &live);

    let unwatched = live.get(&GetRequest {
        api_version: "v1".to_owned(),
        kind: "Secret".to_owned(),
        name: "x".to_owned(),
        namespace: Some("default".to_owned()),
    });
    assert!(unwatched.unwrap_err().contains("not watched"));

    let can_i = |user: &str, groups: Value| {
        live.can_i(&json!({
            "subject_access_review": {
                "user": user,
                "groups": groups,
                "resource_attributes": {"verb": "list", "resource": "pods", "namespace": "default"},
            },
            "disable_cache": true,
        }))
        .unwrap()
    };
    assert_eq!(can_i("admin", json!(["system:masters"]))["allowed"], true);
    assert_eq!(can_i("nobody", Value::Null)["allowed"], false);
    assert!(
        live.can_i(&json!({}))
            .unwrap_err()
            .contains("subject_access_review")
    );
}
